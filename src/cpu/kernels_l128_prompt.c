/* kernels_l128_prompt.c: the BS_PACK_Q1_L128 kernel for prompts (many activation rows).
 *
 * The one-row kernel (kernels_avx512.c) spends about half its vector slots on index work
 * (shifts), table broadcasts and int16 -> int32 widening, all of which compete with the vpermw
 * lookups for the same shuffle pipes, and every activation row repeats them. Here that work is
 * done once per weight tile, then shared by every row of the prompt:
 *
 *  - A tile (128-row groups x kc blocks) is expanded into index vectors. The vector for (block,
 *    pair p, row vector q) holds, for rows 16q..16q+15, one 32-bit lane per row: the low word is
 *    the row's nibble of 4-column group 2p, the high word its nibble of group 2p+1 with bit 4
 *    set. A row's tables for groups 2p and 2p+1 are adjacent in bs_acts.lut, so one plain
 *    64-byte load is a 32-entry table serving both words: one vpermw looks up 8 columns of 16
 *    rows, with no shift and no broadcast per activation row.
 *  - The int16 lookups add up over a 32-column group, and vpmaddwd with ones then sums each
 *    lane's two words into the row's int32 sum (no vpmovsxwd, which is a shuffle).
 *  - Register tile: 2 row vectors (32 weight rows) x 4 activation rows; each index load feeds
 *    4 lookups and each table load 2.
 * Measured here (Zen 5), the lookups issue at 2 per cycle beside their adds, and the whole mix
 * at ~3.3 vector operations per cycle: ~2.5 operations per 128 multiply-adds, against 1 per 64
 * for vpdpbusd, whose 2 pipes cap int8 products at 128 per cycle. In place the kernel reaches
 * ~110 per cycle on one core (the one-row kernel, ~90), limited by L1/L2 traffic.
 *
 * The int32 sums per 32 columns are the same integers the one-row kernel forms, and they go
 * through the same float steps in the same order (f * dx, then fma per 32 columns; fma with the
 * row scale per block into the sum so far), so every result is bit-identical to the one-row
 * kernel's, whatever the prompt length, tiling or thread count (tests/test_kernels.c). */
#include "cpu/kernels.h"
#include "cpu/cpu_features.h"

#include "io/util.h"

#include <string.h>

int bs_l128_prompt_groups = 0;   /* tests: 128-row groups per tile; 0 = as below */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define INL inline __attribute__((always_inline))

enum {
    BLOCK_VECS = 16 * 8,         /* index vectors per block: 16 pairs x 8 row vectors */
    /* 27B shapes, 512 rows, 2 threads: kc 2-4 with tiles of 8-32 groups within 3% of each
     * other; kc 1 13-35% slower (y traffic), kc 6-8 15-25% (the tables leave L1) */
    DEF_KC = 4,                  /* blocks per K chunk: 4 rows' 16 KB of tables, in L1 */
    DEF_GROUPS = 16,             /* 128-row groups per tile: 512 KB of index vectors, in L2 */
    WR = 2                       /* row vectors per register tile */
};

/* Offset, in a group's expanded tile, of the index vectors of row vectors q0, q0 + 1 (q0 even)
 * for block k of a chunk of nk blocks: a run of 32 vectors (pair p, row vector q0 + h at
 * 2p + h), the runs of one row-vector pair following each other block after block,
 * in the order the 4-row passes read them (stored block by block, a pass read four runs 8 KB
 * apart: 27B pp512 faster in 9 of 11 alternating pairs, median 1.07x). */
static INL int64_t erun(int q0, int64_t nk, int64_t k) { return ((q0 / 2) * nk + k) * 32; }

/* One group's blocks [b0, b1) at grp -> index vectors at E + erun(2i, b1 - b0, b - b0) and float
 * row scales ws[(b - b0) * 128 + row]. Row 16q + l sits in word 16h + l of nibble i = q / 2
 * (h = q % 2) of a group's 64-byte chunk (bs_l128_slot), so one two-source permute per vector
 * interleaves the two groups' rows. */
static T512 void expand_tile(const uint8_t *grp, int64_t b0, int64_t b1, __m512i *E, float *ws) {
    __m512i idx[2];
    for (int h = 0; h < 2; h++) {
        int16_t w[32];
        for (int l = 0; l < 16; l++) {
            w[2 * l] = (int16_t)(16 * h + l);
            w[2 * l + 1] = (int16_t)(32 + 16 * h + l);
        }
        idx[h] = _mm512_loadu_si512(w);
    }
    const __m512i lo4 = _mm512_set1_epi16(0x000F), odd = _mm512_set1_epi16(0x0010);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *base = grp + (size_t)b * BS_L128_BLOCK;
        float *s = ws + (b - b0) * 128;
        for (int q = 0; q < 8; q++)
            _mm512_store_ps(s + 16 * q, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(base + 32 * q))));
        __m512i *e = E + erun(0, b1 - b0, b - b0);   /* nibble i's run: e + 32 i (b1 - b0) */
        for (int p = 0; p < 16; p++) {
            const __m512i vc = _mm512_loadu_si512(base + 256 + 128 * p);
            const __m512i vo = _mm512_loadu_si512(base + 256 + 128 * p + 64);
            for (int i = 0; i < 4; i++) {
                const __m512i xc = _mm512_and_si512(_mm512_srli_epi16(vc, (unsigned)(4 * i)), lo4);
                const __m512i xo = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(vo, (unsigned)(4 * i)), lo4), odd);
                for (int h = 0; h < 2; h++) _mm512_store_si512(e + 32 * i * (b1 - b0) + 2 * p + h, _mm512_permutex2var_epi16(xc, idx[h], xo));
            }
        }
    }
}

/* Block b of the tile for NR activation rows (the 1-3 left over; 4 take tile_chunk4) and row
 * vectors q0, q0 + 1. e is their run for block b (e + erun); lut / dl point at the rows' block b;
 * y at the rows' first output of the group; first: b is the row's first block. */
static T512 INL void tile_block(const __m512i *e, const uint8_t *const lut[4], const float *const dl[4],
                                const float *ws, int q0, float *const y[4], int first, const int NR) {
    const __m512i ones = _mm512_set1_epi16(1);
    __m512 t[WR][4];
    for (int g = 0; g < 4; g++) {
        __m512i s[WR][4];
        for (int pp = 0; pp < 4; pp++) {
            const int p = 4 * g + pp;
            __m512i ix[WR];
            for (int w = 0; w < WR; w++) ix[w] = _mm512_load_si512(e + 2 * p + w);
            for (int a = 0; a < NR; a++) {
                const __m512i tab = _mm512_loadu_si512(lut[a] + 64 * p);
                for (int w = 0; w < WR; w++) {
                    const __m512i v = _mm512_permutexvar_epi16(ix[w], tab);
                    s[w][a] = pp == 0 ? v : _mm512_add_epi16(s[w][a], v);
                }
            }
        }
        for (int a = 0; a < NR; a++) {
            const __m512 dx = _mm512_set1_ps(dl[a][8 * g]);
            for (int w = 0; w < WR; w++) {
                const __m512 f = _mm512_cvtepi32_ps(_mm512_madd_epi16(s[w][a], ones));
                t[w][a] = g == 0 ? _mm512_mul_ps(f, dx) : _mm512_fmadd_ps(f, dx, t[w][a]);
            }
        }
    }
    for (int a = 0; a < NR; a++)
        for (int w = 0; w < WR; w++) {
            float *yp = y[a] + 16 * (q0 + w);
            const __m512 prev = first ? _mm512_setzero_ps() : _mm512_loadu_ps(yp);
            _mm512_storeu_ps(yp, _mm512_fmadd_ps(t[w][a], _mm512_load_ps(ws + 16 * (q0 + w)), prev));
        }
}

/* 4 activation rows in assembly (tile_chunk4): per block one statement doing tile_block's
 * operations in the same order (so the same bits), with the register use fixed. From the
 * intrinsics, GCC keeps several pairs' index vectors live, spills float sums and broadcasts the
 * scales through a shuffle uop: in place ~90 multiply-adds per cycle against ~110 for this
 * (~3% more than with one statement per 32 columns; 0.75 cycles per lookup in a loop over
 * L1-resident data). Sums s(a, w) live in zmm18 + 2a + w, index vectors in zmm16/17, lookups
 * pass through zmm26..29, the scale in zmm30, ones in zmm31; t(a, w) is operand t(2a + w). */
#define L128_T0(o) o "(%[l0])"
#define L128_T1(o) o "(%[l0],%[ls])"
#define L128_T2(o) o "(%[l2])"
#define L128_T3(o) o "(%[l2],%[ls])"
#define L128_IDX(eo0, eo1) "vmovdqa64 " eo0 "(%[e]), %%zmm16\n\t" "vmovdqa64 " eo1 "(%[e]), %%zmm17\n\t"
#define L128_SET(tab, s0, s1) "vpermw " tab ", %%zmm16, %%zmm" s0 "\n\t" "vpermw " tab ", %%zmm17, %%zmm" s1 "\n\t"
#define L128_ADD(tab, s0, s1, x0, x1)                                                  \
    "vpermw " tab ", %%zmm16, %%zmm" x0 "\n\t" "vpaddw %%zmm" x0 ", %%zmm" s0 ", %%zmm" s0 "\n\t" \
    "vpermw " tab ", %%zmm17, %%zmm" x1 "\n\t" "vpaddw %%zmm" x1 ", %%zmm" s1 ", %%zmm" s1 "\n\t"
#define L128_PAIR0(eo0, eo1, to) L128_IDX(eo0, eo1)                                  \
    L128_SET(L128_T0(to), "18", "19") L128_SET(L128_T1(to), "20", "21")               \
    L128_SET(L128_T2(to), "22", "23") L128_SET(L128_T3(to), "24", "25")
#define L128_PAIR(eo0, eo1, to) L128_IDX(eo0, eo1)                                   \
    L128_ADD(L128_T0(to), "18", "19", "26", "27") L128_ADD(L128_T1(to), "20", "21", "28", "29") \
    L128_ADD(L128_T2(to), "22", "23", "26", "27") L128_ADD(L128_T3(to), "24", "25", "28", "29")
/* 32 columns (column group G of the block: "0".."3", displacements as assembler expressions) */
#define L128_PAIRS(G)                                                                 \
    L128_PAIR0(G "*512+0", G "*512+64", G "*256+0") L128_PAIR(G "*512+128", G "*512+192", G "*256+64") \
    L128_PAIR(G "*512+256", G "*512+320", G "*256+128") L128_PAIR(G "*512+384", G "*512+448", G "*256+192")
#define L128_F(s) "vpmaddwd %%zmm31, %%zmm" s ", %%zmm" s "\n\t" "vcvtdq2ps %%zmm" s ", %%zmm" s "\n\t"
#define L128_MUL(s, t) L128_F(s) "vmulps %%zmm30, %%zmm" s ", %[" t "]\n\t"
#define L128_FMA(s, t) L128_F(s) "vfmadd231ps %%zmm30, %%zmm" s ", %[" t "]\n\t"
#define L128_DX(d) "vbroadcastss " d ", %%zmm30\n\t"
#define L128_WIDEN(OP, G)                                                              \
    L128_DX(G "*32(%[d0])") OP("18", "t0") OP("19", "t1") L128_DX(G "*32(%[d0],%[ds])") OP("20", "t2") OP("21", "t3") \
    L128_DX(G "*32(%[d2])") OP("22", "t4") OP("23", "t5") L128_DX(G "*32(%[d2],%[ds])") OP("24", "t6") OP("25", "t7")
#define L128_BLOCK                                                                    \
    "vpbroadcastd %[ones], %%zmm31\n\t"                                                \
    L128_PAIRS("0") L128_WIDEN(L128_MUL, "0") L128_PAIRS("1") L128_WIDEN(L128_FMA, "1")  \
    L128_PAIRS("2") L128_WIDEN(L128_FMA, "2") L128_PAIRS("3") L128_WIDEN(L128_FMA, "3")
#define L128_CLOBBERS "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", \
    "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "memory"

static const uint32_t l128_ones = 0x00010001u;   /* two int16 ones, broadcast */

/* Row vectors q0, q0 + 1 of one group for 4 activation rows over nk blocks from b0 (e, lut,
 * dl, ws at b0); the rows' sums stay in registers across the blocks and meet y once. */
static T512 INL void tile_chunk4(const __m512i *e, int q0, const uint8_t *const lut[4], const float *const dl[4],
                                 const float *ws, float *const y[4], int64_t b0, int64_t nk) {
    const int64_t ls = lut[1] - lut[0], ds = (const char *)dl[1] - (const char *)dl[0];
    __m512 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(y[i / 2] + 16 * (q0 + i % 2));
    for (int64_t k = 0; k < nk; k++) {
        __m512 t[8];
        const __m512i *eb = e + erun(q0, nk, k);
        const uint8_t *l0 = lut[0] + k * 1024, *l2 = lut[2] + k * 1024;
        const float *d0 = dl[0] + 32 * k, *d2 = dl[2] + 32 * k;
        __asm__(L128_BLOCK
                : [t0] "=&v"(t[0]), [t1] "=&v"(t[1]), [t2] "=&v"(t[2]), [t3] "=&v"(t[3]), [t4] "=&v"(t[4]),
                  [t5] "=&v"(t[5]), [t6] "=&v"(t[6]), [t7] "=&v"(t[7])
                : [e] "r"(eb), [l0] "r"(l0), [l2] "r"(l2), [ls] "r"(ls), [d0] "r"(d0), [d2] "r"(d2), [ds] "r"(ds),
                  [ones] "m"(l128_ones)
                : L128_CLOBBERS);
        for (int i = 0; i < 8; i++) acc[i] = _mm512_fmadd_ps(t[i], _mm512_load_ps(ws + k * 128 + 16 * (q0 + i % 2)), acc[i]);
    }
    for (int i = 0; i < 8; i++) _mm512_storeu_ps(y[i / 2] + 16 * (q0 + i % 2), acc[i]);
}

/* NR activation rows from a over blocks [b0, b1) of one group's expanded tile (e, ws at b0). */
static T512 INL void rows_chunk(const __m512i *e, const float *ws, const bs_acts *A, int64_t a, int64_t o,
                                float *y, int64_t ldy, int64_t b0, int64_t b1, const int NR) {
    const int64_t ng = A->n / 4;
    const uint8_t *lut[4];
    const float *dl[4];
    float *yr[4];
    for (int r = 0; r < NR; r++) {
        lut[r] = A->lut + (size_t)(a + r) * bs_l128_lut_stride(A->n) + (size_t)b0 * 1024;
        dl[r] = A->dl + (a + r) * ng + 32 * b0;
        yr[r] = y + (a + r) * ldy + o;
    }
    if (NR == 4) {
        for (int q0 = 0; q0 < 8; q0 += WR) tile_chunk4(e, q0, lut, dl, ws, yr, b0, b1 - b0);
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        const int64_t k = b - b0;
        const uint8_t *lk[4];
        const float *dk[4];
        for (int r = 0; r < NR; r++) lk[r] = lut[r] + k * 1024, dk[r] = dl[r] + 32 * k;
        for (int q0 = 0; q0 < 8; q0 += WR) tile_block(e + erun(q0, b1 - b0, k), lk, dk, ws + k * 128, q0, yr, b == 0, NR);
    }
}

/* Output rows [o0, o1) (whole groups) for all nr activation rows. K is cut into chunks of kc
 * blocks and the rows into tiles of gt groups, whose index vectors (gt * kc * 8 KB) are
 * expanded once and stay in L2; then every 4 activation rows go over the whole tile with their
 * 4 * kc KB of tables in L1. */
static T512 void l128_prompt(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t nr, float *y,
                             int64_t ldy, void *scratch) {
    const int64_t nb = W->ne0 / 128;
    const int64_t kc = BS_MIN(bs_l128_chunk_blocks > 0 ? bs_l128_chunk_blocks : DEF_KC, nb);
    const int64_t gt = bs_l128_prompt_groups > 0 ? bs_l128_prompt_groups : DEF_GROUPS;
    const size_t gbytes = (size_t)nb * BS_L128_BLOCK;
    __m512i *E = scratch;
    float *ws = (float *)(E + gt * kc * BLOCK_VECS);
    for (int64_t b0 = 0; b0 < nb; b0 += kc) {
        const int64_t b1 = BS_MIN(b0 + kc, nb);
        for (int64_t ot = o0; ot < o1; ot += gt * 128) {
            const int64_t ng = BS_MIN(gt, (o1 - ot) / 128);
            for (int64_t g = 0; g < ng; g++)
                expand_tile((const uint8_t *)W->packed + (size_t)((ot + 128 * g) / 128) * gbytes, b0, b1,
                            E + g * kc * BLOCK_VECS, ws + g * kc * 128);
            int64_t a = 0;
            for (; a < nr; a += 4) {
                const int na = (int)BS_MIN(4, nr - a);
                for (int64_t g = 0; g < ng; g++) {
                    const __m512i *e = E + g * kc * BLOCK_VECS;
                    const float *wsg = ws + g * kc * 128;
                    const int64_t o = ot + 128 * g;
                    switch (na) {
                    case 1: rows_chunk(e, wsg, A, a, o, y, ldy, b0, b1, 1); break;
                    case 2: rows_chunk(e, wsg, A, a, o, y, ldy, b0, b1, 2); break;
                    case 3: rows_chunk(e, wsg, A, a, o, y, ldy, b0, b1, 3); break;
                    default: rows_chunk(e, wsg, A, a, o, y, ldy, b0, b1, 4); break;
                    }
                }
            }
        }
    }
}

size_t bs_l128_prompt_scratch(const bs_weight *W) {
    const int64_t kc = BS_MIN(bs_l128_chunk_blocks > 0 ? bs_l128_chunk_blocks : DEF_KC, W->ne0 / 128);
    const int64_t gt = bs_l128_prompt_groups > 0 ? bs_l128_prompt_groups : DEF_GROUPS;
    return (size_t)(gt * kc) * (BLOCK_VECS * 64 + 128 * sizeof(float));
}

bs_l128_prompt_fn bs_kernel_l128_prompt_avx512(void) { return l128_prompt; }

#else
size_t bs_l128_prompt_scratch(const bs_weight *W) { (void)W; return 0; }
bs_l128_prompt_fn bs_kernel_l128_prompt_avx512(void) { return NULL; }
#endif
