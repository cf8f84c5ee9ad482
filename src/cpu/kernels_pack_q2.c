/* kernels_pack_q2.c: the row-interleaved BS_PACK_Q2_X16 layout of Q2_0 / PQ2_0 (128-groups)
 * and Q2_0_G64 (64-groups), its packer, and its kernels (AVX-512 VNNI, AVX2, plus a portable
 * scalar one that does the same float operations).
 *
 * Layout (kernels.h): per group of 16 weight rows and per block of QK columns (QK = 128 or 64),
 * 32 bytes of the 16 rows' fp16 scales, then QK/16 chunks of 64 bytes. Chunk c covers columns
 * 16c..16c+15; its byte 4i + j (row i, j < 4) holds in bits 2p..2p+1 the code of row i, column
 * 16c + 4p + j. So (chunk >> 2p) & 3 is one vector whose 32-bit lane i holds row i's codes of
 * columns 16c+4p..+3: one vpdpbusd with those 4 activation bytes broadcast handles 64 weights
 * of 16 rows, and the result lanes are the 16 outputs (no horizontal sums). A block is
 * 16 * (2 + QK/4) bytes, exactly the 16 rows' source blocks, so packing can be done in place.
 * Going from a source 32-bit word (4 bytes x 4 codes) to a packed one is a transpose of a 4x4
 * matrix of 2-bit fields, which is its own inverse.
 *
 * Float order: per block, t = sum over 32-groups k of d_a[k] * sumi_k (first a multiply, then
 * fused adds), then acc = fma(t, d_w, acc): the scalar oracle's (bs_q2_0_dot) operations one for
 * one, because d_a * sumi is exact (an 11-bit fp16 significand times |sumi| <= 32*128*2 = 2^13).
 * So the packed kernels are bit-identical to the oracle, for any number of activation rows and
 * threads; the integer sums are exact and may be split across accumulators freely. */
#include "cpu/kernels.h"

#include "cpu/cpu_features.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int q2_qk(int type) {
    return type == BS_Q2_0_G64 ? 64 : (type == BS_Q2_0 || type == BS_PQ2_0) ? 128 : 0;
}

/* Transpose of the 4x4 matrix of 2-bit fields of each 32-bit half (field (p, j) at bit
 * 8p + 2j moves to 8j + 2p): swap the off-diagonal 2x2 blocks, then the off-diagonal fields
 * inside each block. */
static uint64_t transpose_2bit(uint64_t x) {
    uint64_t t = ((x >> 12) ^ x) & 0x0000F0F00000F0F0ull;
    x ^= t ^ (t << 12);
    t = ((x >> 6) ^ x) & 0x00CC00CC00CC00CCull;
    return x ^ t ^ (t << 6);
}

/* One 16-row block: src = the 16 rows' blocks (row i at src + i * rstride) -> one packed block,
 * two 32-bit words of a row at a time. */
static void pack_block(const uint8_t *src, size_t rstride, uint8_t *dst, int qk) {
    for (int i = 0; i < 16; i++) {
        const uint8_t *row = src + (size_t)i * rstride;
        memcpy(dst + 2 * i, row, 2);
        for (int c = 0; c < qk / 16; c += 2) {
            uint64_t v;
            memcpy(&v, row + 2 + 4 * c, 8);
            v = transpose_2bit(v);
            uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
            memcpy(dst + 32 + 64 * c + 4 * i, &lo, 4);
            memcpy(dst + 32 + 64 * (c + 1) + 4 * i, &hi, 4);
        }
    }
}

/* Rows i0..i1-1 of one packed block back to their natural blocks (the inverse of pack_block). */
static void unpack_block(const uint8_t *src, uint8_t *dst, size_t rstride, int qk, int i0, int i1) {
    for (int i = i0; i < i1; i++) {
        uint8_t *row = dst + (size_t)(i - i0) * rstride;
        memcpy(row, src + 2 * i, 2);
        for (int c = 0; c < qk / 16; c += 2) {
            uint32_t lo, hi;
            memcpy(&lo, src + 32 + 64 * c + 4 * i, 4);
            memcpy(&hi, src + 32 + 64 * (c + 1) + 4 * i, 4);
            uint64_t v = transpose_2bit((uint64_t)lo | (uint64_t)hi << 32);
            memcpy(row + 2 + 4 * c, &v, 8);
        }
    }
}

void bs_pack_q2_x16_group(const uint8_t *src, size_t row_bytes, int64_t ne0, int qk, uint8_t *dst) {
    const size_t bsz = 2 + (size_t)qk / 4;
    for (int64_t b = 0; b < ne0 / qk; b++)
        pack_block(src + (size_t)b * bsz, row_bytes, dst + (size_t)b * 16 * bsz, qk);
}

void bs_unpack_q2_x16_group(const uint8_t *src, size_t row_bytes, int64_t ne0, int qk, uint8_t *dst) {
    const size_t bsz = 2 + (size_t)qk / 4;
    for (int64_t b = 0; b < ne0 / qk; b++)
        unpack_block(src + (size_t)b * 16 * bsz, dst + (size_t)b * bsz, row_bytes, qk, 0, 16);
}

void bs_unpack_q2_x16_row(const bs_weight *W, int64_t r, uint8_t *row) {
    const int qk = q2_qk(W->type);
    const size_t bsz = 2 + (size_t)qk / 4;
    const uint8_t *grp = (const uint8_t *)W->packed + (size_t)(r / 16) * 16 * W->row_bytes;
    for (int64_t b = 0; b < W->ne0 / qk; b++)
        unpack_block(grp + (size_t)b * 16 * bsz, row + (size_t)b * bsz, 0, qk, (int)(r % 16), (int)(r % 16) + 1);
}

int bs_q2_x16_fits(const bs_weight *W) {
    const int qk = q2_qk(W->type);
    return qk && W->ne1 % 16 == 0 && W->ne0 % qk == 0 && W->row_bytes == (size_t)(W->ne0 / qk) * (2 + qk / 4);
}

/* --- scalar kernel (the same float operations as the oracle and the AVX-512 kernel) ---------- */

static float f16_at(const uint8_t *p) { return bs_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* 16 outputs of activation row `row` from one packed 16-row group. */
static void group_scalar(const uint8_t *pk, int qk, const bs_acts *A, int64_t row, float *y) {
    const int64_t n = A->n, nb = n / qk;
    const size_t bsz = 16 * (2 + (size_t)qk / 4);
    const int8_t *q = A->qs + row * n;
    float acc[16] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = pk + (size_t)b * bsz;
        float t[16];
        for (int g = 0; g < qk / 32; g++) {
            int32_t s[16];
            for (int i = 0; i < 16; i++) s[i] = A->gsum[row * (n / 32) + b * (qk / 32) + g];
            for (int h = 0; h < 2; h++) {
                const int c = 2 * g + h;
                const uint8_t *ch = blk + 32 + 64 * c;
                const int8_t *x = q + b * qk + 16 * c;
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 4; j++)
                        for (int p = 0; p < 4; p++) s[i] += ((ch[4 * i + j] >> (2 * p)) & 3) * x[4 * p + j];
            }
            const float dx = A->dl[row * (n / 4) + 8 * (b * (qk / 32) + g)];
            for (int i = 0; i < 16; i++) t[i] = g == 0 ? (float)s[i] * dx : fmaf((float)s[i], dx, t[i]);
        }
        for (int i = 0; i < 16; i++) acc[i] = fmaf(t[i], f16_at(blk + 2 * i), acc[i]);
    }
    memcpy(y, acc, sizeof acc);
}

static void k_x16_scalar(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0,
                         int na, float *y, int64_t ldy) {
    const int qk = q2_qk(W->type);
    const size_t gbytes = 16 * W->row_bytes;
    for (int64_t o = o0; o < o1; o += 16)
        for (int r = 0; r < na; r++)
            group_scalar((const uint8_t *)W->packed + (size_t)(o / 16) * gbytes, qk, A, a0 + r,
                         y + (a0 + r) * ldy + o);
}

bs_kernel_fn bs_kernel_q2_x16_scalar(void) { return k_x16_scalar; }

/* --- AVX-512 kernel --------------------------------------------------------------------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "cpu/kernels_q2_x16.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define INL inline __attribute__((always_inline))
#define PF_BYTES 8192   /* software prefetch distance along the packed stream */

static INL int32_t ld32(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* 16 weight rows (one packed group, nb blocks) x NR (1-4) activation rows from a0. */
static T512 INL void tile_q2x16(const uint8_t *pk, const int QK, const bs_acts *A, int64_t a0,
                               float *y, int64_t ldy, const int NR) {
    const int64_t n = A->n, nb = n / QK, ng = n / 32;
    const size_t bsz = 16 * (2 + (size_t)QK / 4);
    /* A chain per code position p (which also hides the vpdpbusd latency), so the codes stay in
     * place (c * 4^p) and each chain's sum is shifted back once per group: three shifts fewer per
     * chunk. More rows would not fit the registers (k_x16_avx512 splits them). */
    __m512 acc[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = pk + (size_t)b * bsz;
        for (size_t l = 0; l < bsz; l += 64) _mm_prefetch((const char *)blk + PF_BYTES + l, _MM_HINT_T0);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        __m512 t[BS_KMAX_ROWS];
        for (int r = 0; r < NR; r++) t[r] = _mm512_setzero_ps();   /* (overwritten at g = 0) */
        for (int g = 0; g < QK / 32; g++) {
            __m512i s[BS_KMAX_ROWS][4];
            for (int r = 0; r < NR; r++) {
                s[r][0] = _mm512_set1_epi32(A->gsum[(a0 + r) * ng + b * (QK / 32) + g]);
                for (int u = 1; u < 4; u++) s[r][u] = _mm512_setzero_si512();
            }
            for (int h = 0; h < 2; h++) {
                const int c = 2 * g + h;
                const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * c);
                for (int p = 0; p < 4; p++) {
                    const __m512i codes = _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << 2 * p)));
                    for (int r = 0; r < NR; r++) {
                        const __m512i x = _mm512_set1_epi32(ld32(A->qs + (a0 + r) * n + b * QK + 16 * c + 4 * p));
                        s[r][p] = _mm512_dpbusd_epi32(s[r][p], codes, x);
                    }
                }
            }
            for (int r = 0; r < NR; r++) {
                __m512i i = s[r][0];
                for (int u = 1; u < 4; u++) i = _mm512_add_epi32(i, _mm512_srai_epi32(s[r][u], 2 * u));
                const __m512 dx = _mm512_set1_ps(A->dl[(a0 + r) * (n / 4) + 8 * (b * (QK / 32) + g)]);
                t[r] = g == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(i), dx)
                              : _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), dx, t[r]);
            }
        }
        for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(t[r], dw, acc[r]);
    }
    for (int r = 0; r < NR; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}

/* One 16-row group for NR rows from a0 (a constant NR and block size). */
static T512 INL void group_q2x16(const uint8_t *pk, int qk, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                                 const int NR) {
    if (qk == 128) tile_q2x16(pk, 128, A, a0, y, ldy, NR);
    else tile_q2x16(pk, 64, A, a0, y, ldy, NR);
}

/* More than 4 rows go over each group as 4 + the rest, the second pass reading the group from
 * L1: one tile of up to 8 rows had registers for only one chain per row, and 5 to 8 chains do
 * not cover vpdpbusd's latency (ternary 27B verification, back to back: 8 rows 394 -> 361 ms,
 * 5 rows 250 -> 240 ms; 5 as 3 + 2 measured slower). */
#define Q2X16_RANGE(NR)                                                                            \
    for (int64_t o = o0; o < o1; o += 16) {                                                        \
        const uint8_t *pk = (const uint8_t *)W->packed + (size_t)(o / 16) * gbytes;                \
        group_q2x16(pk, qk, A, a0, yy + o, ldy, (NR) < 4 ? (NR) : 4);                              \
        if ((NR) > 4)   /* (the row count stays a constant 1-4 where NR is not above 4) */         \
            group_q2x16(pk, qk, A, a0 + 4, yy + 4 * ldy + o, ldy, (NR) > 4 ? (NR) - 4 : 1);        \
    }

static T512 void k_x16_avx512(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,
                              int64_t a0, int na, float *y, int64_t ldy) {
    const int qk = q2_qk(W->type);
    const size_t gbytes = 16 * W->row_bytes;
    float *yy = y + a0 * ldy;
#define Q2X16_STEP(unused, NR) Q2X16_RANGE(NR)
    BS_FOR_NR(na, Q2X16_STEP, 0)
#undef Q2X16_STEP
}

bs_kernel_fn bs_kernel_q2_x16_avx512(void) { return k_x16_avx512; }

/* --- AVX2 kernel ------------------------------------------------------------------------------ */

#define T2 __attribute__((target("avx2,fma,f16c")))
/* Keeps v in a register as it is: without it gcc regroups a 32-column group's int16 sums into
 * a tree of all its vpmaddubsw products and spills most of them to the stack (281 stack
 * accesses in k_x16_avx2 against 157). Measured (bench --matmul, Q2_0, 2 threads, CPU time per
 * call, medians of 3 alternating runs, AMD EPYC AVX2, load 4-5): 2 / 4 / 8 / 16 rows 1.11 /
 * 1.09-1.19 / 1.17-1.21 / 1.15-1.24x less time, 1 row (memory-bound) the same. The integer
 * sums are exact in any order, so the bits do not change. */
#define PIN(v) __asm__("" : "+x"(v))

/* 16 weight rows (two vectors of 8) x NR (1-3) activation rows from a0, the AVX-512 kernel's
 * sums and float steps. vpmaddubsw takes the codes shifted down to 0..3 (its u8 x s8 pair sums,
 * at most 2 * 3 * 127, then add up in int16 over a 32-column group: 8 * 762), and vpmaddwd
 * with ones widens them to the lanes' int32 sums once per group. */
static T2 INL void tile_q2x16_avx2(const uint8_t *pk, const int QK, const bs_acts *A, int64_t a0,
                                   float *y, int64_t ldy, const int NR) {
    const int64_t n = A->n, nb = n / QK, ng = n / 32;
    const size_t bsz = 16 * (2 + (size_t)QK / 4);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[3][2], t[3][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = t[r][0] = t[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = pk + (size_t)b * bsz;
        for (size_t l = 0; l < bsz; l += 64) _mm_prefetch((const char *)blk + PF_BYTES + l, _MM_HINT_T0);
        for (int g = 0; g < QK / 32; g++) {
            __m256i s[3][2];
            for (int r = 0; r < NR; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const int c = 2 * g + h;
                for (int half = 0; half < 2; half++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * c + 32 * half));
                    for (int p = 0; p < 4; p++) {
                        const __m256i codes = _mm256_and_si256(p ? _mm256_srli_epi16(v, 2 * p) : v, m3);
                        for (int r = 0; r < NR; r++) {
                            const __m256i x = _mm256_set1_epi32(ld32(A->qs + (a0 + r) * n + b * QK + 16 * c + 4 * p));
                            s[r][half] = _mm256_add_epi16(s[r][half], _mm256_maddubs_epi16(codes, x));
                            PIN(s[r][half]);
                        }
                    }
                }
            }
            for (int r = 0; r < NR; r++) {
                const __m256i seed = _mm256_set1_epi32(A->gsum[(a0 + r) * ng + b * (QK / 32) + g]);
                const __m256 dx = _mm256_set1_ps(A->dl[(a0 + r) * (n / 4) + 8 * (b * (QK / 32) + g)]);
                for (int half = 0; half < 2; half++) t[r][half] = bs_q2x16_step(seed, s[r][half], dx, t[r][half], g == 0);
            }
        }
        for (int half = 0; half < 2; half++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * half)));
            for (int r = 0; r < NR; r++) acc[r][half] = _mm256_fmadd_ps(t[r][half], dw, acc[r][half]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int half = 0; half < 2; half++) _mm256_storeu_ps(y + r * ldy + 8 * half, acc[r][half]);
}

/* One 16-row group for NR rows from a0 (a constant NR and block size). */
static T2 INL void group_q2x16_avx2(const uint8_t *pk, int qk, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                                    const int NR) {
    if (qk == 128) tile_q2x16_avx2(pk, 128, A, a0, y, ldy, NR);
    else tile_q2x16_avx2(pk, 64, A, a0, y, ldy, NR);
}

/* Rows in threes over each group, then a pair or two (4 = 2 + 2, never a lone row after a
 * triple); later passes read the group (16 rows, 22 KB for 27B's 5120 columns, 74 KB for 17408)
 * from L1 / L2. A triple in place of a pair and a single: 3 / 5 / 7 rows 1.11-1.15 / 1.08-1.10
 * / 1.06-1.09x less CPU time; 3 + 3 in place of 2 + 2 + 2: 6 rows 1.05-1.06x, 8 rows 1.01-1.07x;
 * fours (t and acc then spill) 1.25x more (bench --matmul, Q2_0 27B shapes, medians of 3, AVX2
 * EPYC). */
static T2 void k_x16_avx2(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                          float *y, int64_t ldy) {
    const int qk = q2_qk(W->type);
    const size_t gbytes = 16 * W->row_bytes;
    for (int64_t o = o0; o < o1; o += 16) {
        const uint8_t *pk = (const uint8_t *)W->packed + (size_t)(o / 16) * gbytes;
        for (int r = 0; r < na;) {
            float *yr = y + (a0 + r) * ldy + o;
            if (na - r >= 3 && na - r != 4) group_q2x16_avx2(pk, qk, A, a0 + r, yr, ldy, 3), r += 3;
            else if (na - r >= 2) group_q2x16_avx2(pk, qk, A, a0 + r, yr, ldy, 2), r += 2;
            else group_q2x16_avx2(pk, qk, A, a0 + r, yr, ldy, 1), r += 1;
        }
    }
}

bs_kernel_fn bs_kernel_q2_x16_avx2(void) { return k_x16_avx2; }
#else
bs_kernel_fn bs_kernel_q2_x16_avx512(void) { return NULL; }
bs_kernel_fn bs_kernel_q2_x16_avx2(void) { return NULL; }
#endif

/* --- repacking a weight ----------------------------------------------------------------------- */

typedef struct { const bs_weight *W; uint8_t *dst; } pack_job;

/* One thread's share of the 16-row groups. In place (dst == W->data) each group is copied
 * aside first: its packed form has exactly its bytes. */
static void pack_rows(void *ctx, int ith, int nth) {
    pack_job *j = ctx;
    const bs_weight *W = j->W;
    const size_t gbytes = 16 * W->row_bytes;
    int64_t g0, g1;
    bs_pool_split(W->ne1 / 16, 1, ith, nth, &g0, &g1);
    const int in_place = j->dst == (const uint8_t *)W->data;
    uint8_t *tmp = in_place && g0 < g1 ? bs_xmalloc(gbytes) : NULL;
    for (int64_t G = g0; G < g1; G++) {
        const uint8_t *src = (const uint8_t *)W->data + (size_t)G * gbytes;
        if (tmp) src = memcpy(tmp, src, gbytes);
        bs_pack_q2_x16_group(src, W->row_bytes, W->ne0, q2_qk(W->type), j->dst + (size_t)G * gbytes);
    }
    free(tmp);
}

void bs_pack_q2_x16_weight(const bs_weight *W, uint8_t *dst, bs_pool *pool) {
    pack_job j = {W, dst};
    bs_pool_run(pool, pack_rows, &j);
}
