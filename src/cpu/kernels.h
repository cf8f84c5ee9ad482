/* kernels.h: the SIMD matmul kernels behind bs_matmul (internal to matmul.c / kernels*.c).
 *
 * Activations are quantized exactly as the scalar path does (the table's act_from_float, i.e.
 * llama.cpp's x86 rounding) and then laid out for SIMD ("bs_acts"). For the 32-group Q8_0/Q8_1
 * activation formats the layout is split: int8 quants contiguous, and per 4 quants (one 32-bit
 * SIMD lane of a dot-product instruction) the negated lane sum and the group scale, so that
 * kernels neither shuffle nor correct per element:
 *   sum_j (c_j - 1) q_j = dpbusd(-sum q, c, q)          (Q2_0 codes c in 0..3)
 *   sum_j s_j q_j       = dpbusd(-sum q, 2*bit, q)      (Q1_0 signs s = 2*bit - 1)
 * Integer sums are exact, so every kernel gets the same integers as the scalar oracle; only
 * the float accumulation order differs (within a stated tolerance, see tests/test_kernels.c).
 *
 * Per format (activations as llama.cpp's x86 backend quantizes them; "exact" = the same float
 * operations as the scalar oracle, which follows llama.cpp's x86 AVX2 order, so bit-identical):
 *   Q1_0        AVX-512: 2 weight rows per vector in the AVX2 lane order, exact (default);
 *               P128 (BITSPARK_FAST_Q1=1) or repacked x16 (bs_weight_pack): faster, not exact.
 *               AVX2: exact; repacked L128 (bs_weight_pack, 1 M weights up): faster, not exact,
 *               the AVX-512 L128 kernel's bits.
 *   Q2_0/PQ2_0/Q2_0_G64  AVX-512: repacked x16 (kernels_pack_q2.c, the loader's default), exact;
 *               P128 (BITSPARK_EXACT=1, or natural without BITALG), AVX2 natural: tolerance.
 *   Q8_0        AVX2 exact; AVX-512 tolerance.
 *   Q4_0, Q4_1, Q6_K, TQ1_0, TQ2_0  kernels_q4.c / kernels_kquant.c: exact (kernels_quant.h).
 *               A drafter's Q4_1 matrices: repacked x16 (kernels_pack_q4.c), tolerance.
 *   F32/F16/BF16  f32 activations rounded to the weight type (exact products), FMA: tolerance.
 * Prompts: Q1_0 L128 with 48+ rows (kernels_l128_prompt.c) and, where the CPU has AMX-INT8,
 * Q1_0 L128 / Q2_0 X16 with 32+ rows (kernels_amx.c) give the same bits as the kernels above.
 *
 * Every kernel computes one output (weight row o, activation row r) with a fixed sequence of
 * operations on its own accumulators, whatever tile of rows it is computed in: the result for
 * row r is bit-identical for 1..8 activation rows and any thread count. */
#ifndef BS_KERNELS_H
#define BS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/matmul.h"

#define BS_KMAX_ROWS 8   /* activation rows one kernel call handles (register tiles) */

/* Runs STEP(ARG, NR) for the runtime activation-row count na (1..BS_KMAX_ROWS) with NR a
 * compile-time constant, so every register tile is specialised and fully unrolled. */
#define BS_FOR_NR(na, STEP, ARG)    \
    switch (na) {                   \
    case 1: STEP(ARG, 1); break;    \
    case 2: STEP(ARG, 2); break;    \
    case 3: STEP(ARG, 3); break;    \
    case 4: STEP(ARG, 4); break;    \
    case 5: STEP(ARG, 5); break;    \
    case 6: STEP(ARG, 6); break;    \
    case 7: STEP(ARG, 7); break;    \
    default: STEP(ARG, 8); break;   \
    }

typedef struct bs_acts {
    int type;            /* vec_dot_type of the weight */
    int64_t n;           /* elements per row */
    int64_t nrows;
    /* BS_Q8_0 / BS_Q8_1 (split layout), per row r: */
    int8_t *qs;          /* [nrows][n] quants */
    int32_t *nsum;       /* [nrows][n/4] -(q[4l] + .. + q[4l+3]) */
    float *dl;           /* [nrows][n/4] scale of the lane's group (fp16-rounded value) */
    float *gs;           /* [nrows][n/32] Q8_1 only: s = d*sum(q) as stored (fp16-rounded) */
    /* BS_Q8_K: rows of native 292-byte blocks; float types: f32 (values already rounded to
     * the vec_dot_type, e.g. bf16, so the products equal the scalar path's) */
    void *raw;
    size_t raw_row;      /* bytes per row in raw */
    int generic;         /* raw holds rows in the scalar vec_dot's format */
    int perm;            /* Q8_0 split layout permuted per 128 elements (BS_P128 below) */
    int32_t *gsum;       /* [nrows][n/32] -(sum of the group's quants); filled when want_gsum */
    int want_gsum;
    uint8_t *lut;        /* per row (stride bs_l128_lut_stride(n)) n/4 16-entry int16 BS_PACK_Q1_L128
                          * tables; filled when want_lut */
    int want_lut;        /* BS_LUT_INT16 (AVX-512 kernels), BS_LUT_PLANAR (AVX2), BS_LUT_NEON_Q1/Q2
                          * (aarch64 tables, bs_neon_tables, stride bs_neon_lut_stride) */
    void *mem;           /* one allocation behind all of the above */
} bs_acts;

/* Computes y[(a0 + j) * ldy + o] for o in [o0, o1) and j < na (1 <= na <= BS_KMAX_ROWS). */
typedef void (*bs_kernel_fn)(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,
                             int64_t a0, int na, float *y, int64_t ldy);

/* The "P128" activation layout of the AVX-512 Q1_0 / Q2_0 kernels. Within each 128 elements the
 * quants are reordered (bs_p128_perm[p] = source index of position p) so that a 64-bit mask
 * built with vpshufbitqmb from the Q1_0 bits (or vpermw-placed Q2_0 codes) lines up with them,
 * and such that SIMD lane l of both 64-byte halves belongs to the same 32-group
 * (bs_p128_group[l]): the two halves' dot products add up as integers and need one
 * int->float conversion and one FMA per 128 weights. nsum / dl then hold 16 lanes per 128
 * elements (lane l: minus the sum of its 8 quants, the scale of group bs_p128_group[l]). */
extern const uint8_t bs_p128_perm[128];
extern const uint8_t bs_p128_group[16];

/* Kernel for a weight type at a dispatch level and row length, or NULL (then the scalar path is
 * used); *perm tells whether it wants the P128 layout. */
bs_kernel_fn bs_kernel_avx512(int type, int64_t ne0, int *perm);
bs_kernel_fn bs_kernel_avx2(int type);
bs_kernel_fn bs_kernel_get(int type, int level, int64_t ne0, int *perm);
/* aarch64 (kernels_neon_impl.h): plain NEON, FEAT_DotProd and FEAT_I8MM builds of the natural-
 * layout kernels; NULL for types they lack and on other architectures. */
bs_kernel_fn bs_kernel_neon(int type);
bs_kernel_fn bs_kernel_neon_dot(int type);
bs_kernel_fn bs_kernel_neon_i8mm(int type);
/* aarch64 table lookups (kernels_neon_tbl.c) for Q1_0, Q2_0/PQ2_0 and Q2_0_G64, natural layout,
 * bit-identical to the kernels above; they read per activation row the tables bs_neon_tables
 * writes (bs_acts.lut, want_lut BS_LUT_NEON_Q1 or BS_LUT_NEON_Q2, bs_neon_lut_stride bytes per
 * row). Which products take them: neon_tbl_pick (kernels.c). NULL elsewhere. */
bs_kernel_fn bs_kernel_neon_tbl(int type);
size_t bs_neon_lut_stride(int lut_kind, int64_t n);
void bs_neon_tables(int lut_kind, const int8_t *qs, int64_t n, uint8_t *lut);
enum { BS_TBL_AUTO = 0, BS_TBL_OFF = 1, BS_TBL_ON = 2 };
extern int bs_neon_tbl_mode;   /* tests: BS_TBL_AUTO (BITSPARK_NEON_TBL, else the table), off, on */

/* Packed weight layouts (bs_weight.pack_kind, made by bs_weight_pack).
 * BS_PACK_Q1_X16: Q1_0 in groups of 16 rows; per group and 128-column block 288 bytes: the 16
 * rows' fp16 scales, then 32 64-bit words, word t holding columns 4t..4t+3 of all 16 rows
 * (bit 4*row + column%4), i.e. one AVX-512 mask per word whose bytes are the 16 rows' 32-bit
 * lanes. A kernel then computes 16 rows per vector with one vpdpbusd per 64 weights per
 * activation row, and applies scales per 32 columns for all 16 rows at once. */
enum { BS_PACK_NONE = 0, BS_PACK_Q1_X16 = 1, BS_PACK_Q2_X16 = 2, BS_PACK_Q1_L128 = 3, BS_PACK_Q4_X16 = 4 };
/* BS_PACK_Q1_L128: Q1_0 in groups of 128 rows (when ne1 allows and the matrix has 1 M weights
 * or more; else X16); per group and 128-column block 2304 bytes: the 128 rows' fp16 scales in
 * row order, then per 4-column group c (32 of them) 64 bytes of 128 4-bit slots: 16 bytes per
 * block of 32 slots L, byte k = slot 32L+2k (low nibble) and slot 32L+2k+1 (high nibble); row
 * R's 4 bits sit in slot bs_l128_slot(R). The kernel looks each nibble up (vpermw) in a
 * 16-entry table of the 4 activations' signed sums (16 little-endian int16, bs_acts.lut), 4
 * blocks of 32 slots per vector: no horizontal sums, about half X16's instructions per weight
 * for one activation row. The slots are placed so that widening the lookups' int16 sums to
 * int32 gives 16 consecutive rows per vector, in the scales' order. The integer sums are exact
 * and the float steps X16's, so both layouts give the same bits. */
int bs_l128_slot(int R);
#define BS_L128_BLOCK 2304   /* bytes of one 128-row group per 128-column block: 256 + 32 * 64 */
/* Bytes between two rows' L128 tables: 8 per column and 3 cache lines more, so that rows whose
 * tables are read together do not share L1 sets when n / 4 * 32 is a multiple of 4 KB
 * (measured ~3% on 4-row prompt tiles). */
static inline size_t bs_l128_lut_stride(int64_t n) { return (size_t)(n / 4) * 32 + 192; }
extern int bs_l128_chunk_blocks;   /* tests: prompts in K chunks of this many blocks, 1-group tiles */
void bs_l128_tables(const int8_t *qs, int64_t n, uint8_t *lut);
void bs_l128_tables_avx512(const int8_t *qs, int64_t n, uint8_t *lut);   /* the same bytes */
bs_kernel_fn bs_kernel_packed_avx512(int kind);
/* Software prefetch of the L128 range kernels: pass r of na over blocks [b0, b1) (nblk of them)
 * of a 128-row group whose block b0 is at blk prefetches *lines lines per block from the address
 * returned on. One pass runs BS_L128_PF_BYTES ahead along the group's stream (27B tg64 back to
 * back at ~71 GB/s probed: 4 KB ahead 13.85 tok/s, 72% of the roofline, 16 KB 16.5, 84%; at
 * ~49 GB/s 8-16 KB are best, 87%, and 24-32 KB lose 3-5 points). Several passes, over a group
 * that stays in L2, each fetch their share of the next group (the last one refetches its own),
 * so memory streams during the arithmetic instead of before it (27B verification back to back:
 * 2 rows 111 -> 101 ms, 3 rows 144 -> 123, 5 rows 211 -> 192, 8 rows 315 -> 298). */
#define BS_L128_PF_BYTES 16384
static inline const uint8_t *bs_l128_prefetch_from(const uint8_t *blk, size_t gbytes, int last, int na, int r,
                                                   int64_t nblk, int *lines) {
    *lines = (BS_L128_BLOCK / 64 + na - 1) / na;
    if (na == 1) return blk + BS_L128_PF_BYTES;
    return (last ? blk : blk + gbytes) + (size_t)(r * *lines) * 64 * (size_t)nblk;
}
/* The L128 kernel over 128-column blocks [b0, b1) only. With b0 > 0 each row's accumulators
 * continue from what the earlier blocks left in y: stored floats reload exactly, so cutting K
 * into chunks (to keep several rows' tables in cache) never changes a result. */
typedef void (*bs_l128_range_fn)(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,
                                 int64_t a0, int na, float *y, int64_t ldy, int64_t b0, int64_t b1);
bs_l128_range_fn bs_kernel_l128_range_avx512(void);
/* The same layout on AVX2 (kernels_l128_avx2.c), bit-identical to the AVX-512 kernels. Its
 * tables are planar: per 4-column group the 16 entries' low bytes, then their high bytes
 * (bs_acts.want_lut == BS_LUT_PLANAR). NULL without compiler support. */
enum { BS_LUT_NONE = 0, BS_LUT_INT16 = 1, BS_LUT_PLANAR = 2, BS_LUT_NEON_Q1 = 3, BS_LUT_NEON_Q2 = 4 };
void bs_l128_tables_avx2(const int8_t *qs, int64_t n, uint8_t *lut);
bs_kernel_fn bs_kernel_l128_avx2(void);
bs_l128_range_fn bs_kernel_l128_range_avx2(void);
/* The same products for several activation rows with each block's nibble indices extracted
 * once for all of them (kernels_tbl_avx2.c), the one-row kernel's bits for any row count; the
 * range kernel takes any na >= 1. NULL without compiler support. Which kernel a product takes
 * by row count: l128_avx2_pick and its measured table (kernels.c). */
bs_kernel_fn bs_kernel_tbl_l128_avx2(void);
bs_l128_range_fn bs_kernel_tbl_l128_range_avx2(void);
/* BS_PACK_Q1_L128 for a prompt of nr >= BS_L128_PROMPT_ROWS rows (kernels_l128_prompt.c): y
 * rows [o0, o1) (whole 128-row groups) for every activation row, bit-identical to the range
 * kernel; scratch: bs_l128_prompt_scratch(W) bytes, 64-aligned, the calling thread's own. */
#define BS_L128_PROMPT_ROWS 48
typedef void (*bs_l128_prompt_fn)(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t nr,
                                  float *y, int64_t ldy, void *scratch);
bs_l128_prompt_fn bs_kernel_l128_prompt_avx512(void);
size_t bs_l128_prompt_scratch(const bs_weight *W);
extern int bs_l128_prompt_groups;   /* tests: 128-row groups per tile (0 = the kernel's choice) */
/* AMX int8 tiles for prompts (kernels_amx.c) over BS_PACK_Q1_L128 and 128-column
 * BS_PACK_Q2_X16 weights (bs_amx_fits): y rows [o0, o1) (multiples of 32) for activation rows
 * [0, na) (a multiple of 32), bit-identical to the AVX-512 kernels. bs_kernel_amx: the hardware
 * path once its checks passed (AMX-INT8, the kernel's tile permission, and a forked
 * self-check against the emulator: bs_amx_selfcheck), else NULL; the emulated path when
 * bs_amx_mode is BS_AMX_EMULATE or BITSPARK_AMX=emulate (tests). BITSPARK_AMX=0 turns AMX off. bs_amx_compare (kernels.c):
 * 1 when two paths give the same bits on random L128 and Q2_0 products. */
enum { BS_AMX_AUTO = 0, BS_AMX_OFF = 1, BS_AMX_EMULATE = 2 };
#define BS_AMX_MIN_ROWS 32
extern int bs_amx_mode;
typedef void (*bs_amx_range_fn)(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na,
                                float *y, int64_t ldy);
bs_amx_range_fn bs_kernel_amx(void);
bs_amx_range_fn bs_kernel_amx_hw(void);       /* the hardware kernel (no readiness check), NULL if not built */
bs_amx_range_fn bs_kernel_amx_emulated(void);
const char *bs_amx_status(void);   /* one line for bench: used, absent, refused, failed */
int bs_amx_selfcheck(bs_amx_range_fn fn);
int bs_amx_compare(bs_amx_range_fn a, bs_amx_range_fn b);
int bs_amx_fits(const bs_weight *W);
/* BS_PACK_Q2_X16 (kernels_pack_q2.c): Q2_0 / PQ2_0 / Q2_0_G64 in groups of 16 rows, per block
 * the 16 fp16 scales then 64-byte chunks whose 32-bit lanes are the rows; the same size as the
 * source, and results bit-identical to the scalar oracle. bs_q2_x16_fits: W can take it.
 * bs_pack_q2_x16_weight: W->data -> dst on the pool (dst == W->data packs in place).
 * bs_unpack_q2_x16_row: row r of W->packed in natural blocks. The group functions pack / unpack
 * the 16 rows at src (row stride row_bytes) into / from 16 * row_bytes bytes at dst (qk = 128
 * or 64; no overlap). */
int bs_q2_x16_fits(const bs_weight *W);
void bs_pack_q2_x16_weight(const bs_weight *W, uint8_t *dst, bs_pool *pool);
void bs_unpack_q2_x16_row(const bs_weight *W, int64_t r, uint8_t *row);
void bs_pack_q2_x16_group(const uint8_t *src, size_t row_bytes, int64_t ne0, int qk, uint8_t *dst);
void bs_unpack_q2_x16_group(const uint8_t *src, size_t row_bytes, int64_t ne0, int qk, uint8_t *dst);
bs_kernel_fn bs_kernel_q2_x16_avx512(void);   /* NULL without compiler support */
bs_kernel_fn bs_kernel_q2_x16_avx2(void);     /* the same bits with AVX2 (NULL likewise) */
/* The same products and bits on AVX2 with each block's codes extracted once into L1 for all
 * rows of a pass (kernels_q2_shared_avx2.c); NULL without compiler support. Which row counts
 * take it: q2_avx2_pick (kernels.c); bs_q2_shared_mode (tests): BS_TBL_AUTO (BITSPARK_Q2_SHARED
 * = 0 / 1, else the measured choice), BS_TBL_OFF (X16 always), BS_TBL_ON (this one always). */
bs_kernel_fn bs_kernel_q2_shared_avx2(void);
extern int bs_q2_shared_mode;
bs_kernel_fn bs_kernel_q2_x16_scalar(void);
/* BS_PACK_Q4_X16 (kernels_pack_q4.c): Q4_1 in groups of 16 rows, per 32-column block the 16
 * fp16 scales, the 16 fp16 minimums, then 4 chunks of 64 bytes whose 32-bit lanes are the rows
 * (two 4-column code groups per chunk, low and high nibbles); the same size as the source.
 * Within tolerance of the oracle (not bit-identical), row results independent of the tile. */
int bs_q4_x16_fits(const bs_weight *W);
void bs_pack_q4_x16_group(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst);
void bs_unpack_q4_x16_row(const bs_weight *W, int64_t r, uint8_t *row);   /* row r of W->packed */
bs_kernel_fn bs_kernel_q4_x16_avx512(void);   /* NULL without compiler support */
bs_kernel_fn bs_kernel_q4_x16_avx2(void);     /* the same bits with AVX2 (NULL without compiler support) */
/* One 288-byte BS_PACK_Q1_X16 block from the 16 rows' 18-byte Q1_0 blocks (AVX-512 VBMI). */
void bs_pack_q1_x16_avx512(const uint8_t *const src[16], uint8_t *dst);

/* Quantize n_rows rows of x for weight type `type` into A (allocates; free with bs_acts_free),
 * in the P128 layout if perm. level selects the SIMD quantizer (results identical to the
 * scalar one, which level BS_CPU_SCALAR uses). Returns -1 if the type has no SIMD layout. */
int bs_acts_prepare(bs_acts *A, int type, const float *x, int64_t n, int64_t n_rows, int perm,
                    int level);
void bs_acts_free(bs_acts *A);

/* SIMD Q8_0 activation quantizer straight into the split layout (row r of A); identical to
 * bs_q8_0_act followed by the layout conversion. Returns 0, or -1 if unavailable. */
int bs_acts_q8_0_avx512(bs_acts *A, int64_t r, const float *x);
int bs_acts_q8_0_avx2(bs_acts *A, int64_t r, const float *x);
int bs_acts_q8_0_neon(bs_acts *A, int64_t r, const float *x);       /* natural layout only */
int bs_acts_q8_0_neon_dot(bs_acts *A, int64_t r, const float *x);

/* Multiply-adds per second one thread gets from vpdpbusd (iters x 12 instructions); 0 without
 * AVX-512. */
double bs_int8_peak_avx512(long iters);

/* The fast bs_matmul: 0 when done, -1 when the type/level has no kernel (caller falls back to
 * the scalar reference). */
/* bs_matmul_group's fast path: computes the products it has kernels for (done[i] = true) and
 * leaves the others (LoRA, no kernel at this level) to the caller. */
void bs_matmul_group_fast(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                          bs_pool *pool, int level, bool *done);
int bs_matmul_fast(const bs_weight *W, const float *x, int64_t n_rows, float *y, bs_pool *pool,
                   int level);
/* The kernel bs_matmul_fast takes for W and n_rows at this level, in a few words (bench). */
const char *bs_kernel_describe(const bs_weight *W, int64_t n_rows, int level);

#endif
