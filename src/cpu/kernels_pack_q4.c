/* kernels_pack_q4.c: the row-interleaved BS_PACK_Q4_X16 layout of Q4_1 (the DSpark drafter
 * pack), its packer, and its AVX-512 VNNI and AVX2 kernels (the same bits).
 *
 * Layout (kernels.h): per group of 16 weight rows and per 32-column block, 320 bytes: the 16
 * rows' fp16 scales d, their fp16 minimums m, then 4 chunks of 64 bytes. Byte 4i + j of chunk k
 * (row i, j < 4) holds the code of row i, column 8k + j in its low nibble and of column
 * 8k + 4 + j in its high one. So chunk & 15 and (chunk >> 4) & 15 are vectors whose 32-bit
 * lane i holds row i's codes of 4 columns: one vpdpbusd with those 4 activation bytes broadcast
 * handles 64 weights of 16 rows, and the lanes are the 16 outputs (no horizontal sums). A block
 * is 16 * 20 bytes, exactly the 16 rows' source blocks, so packing can be done in place.
 *
 * Float order: per block, acc = fma(float(sumi), d_w * d_a, acc), then acc = fma(m_w, s_a, acc)
 * (s_a = d_a * sum q as Q8_1 stores it). The native kernels (kernels_q4.c) follow llama.cpp's
 * 8-lane order instead and are bit-identical to the oracle; this one is within the tested
 * tolerance of it, and a row's result is the same for any number of activation rows and
 * threads. Per block and activation row it does 4 float operations (convert, scale, 2 fma)
 * for 16 outputs where the native one does 4 for 2. */
#include "cpu/kernels.h"
#include "cpu/cpu_features.h"

#include "formats/quant.h"
#include "io/util.h"

#include <string.h>

enum { Q4_1_BYTES = 20, Q4_X16_BLOCK = 320 };

static uint32_t ld_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* One 16-row group (row i at src + i * rb) -> packed at dst (nb blocks; no overlap). A native
 * block's byte c holds column c (low nibble) and c + 16 (high), so with A..D its 4-byte words:
 * chunk 0 = low(A) | low(B) << 4, chunk 1 = low(C) | low(D) << 4, chunk 2 = high(A) >> 4 |
 * high(B), chunk 3 = high(C) >> 4 | high(D). */
void bs_pack_q4_x16_group(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst) {
    const uint32_t lo = 0x0F0F0F0Fu, hi = 0xF0F0F0F0u;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * Q4_X16_BLOCK;
        for (int i = 0; i < 16; i++) {
            const uint8_t *blk = src + (size_t)i * rb + (size_t)b * Q4_1_BYTES;
            const uint32_t A = ld_u32(blk + 4), B = ld_u32(blk + 8), C = ld_u32(blk + 12), D = ld_u32(blk + 16);
            const uint32_t k[4] = {(A & lo) | (B & lo) << 4, (C & lo) | (D & lo) << 4, (A & hi) >> 4 | (B & hi),
                                   (C & hi) >> 4 | (D & hi)};
            memcpy(o + 2 * i, blk, 2);
            memcpy(o + 32 + 2 * i, blk + 2, 2);
            for (int c = 0; c < 4; c++) memcpy(o + 64 + 64 * c + 4 * i, &k[c], 4);
        }
    }
}

/* Row r of W->packed back to native Q4_1 blocks (bs_pack_q4_x16_group inverted). */
void bs_unpack_q4_x16_row(const bs_weight *W, int64_t r, uint8_t *row) {
    const uint32_t lo = 0x0F0F0F0Fu, hi = 0xF0F0F0F0u;
    const int64_t nb = W->ne0 / 32;
    const uint8_t *grp = (const uint8_t *)W->packed + (size_t)(r / 16) * (size_t)nb * Q4_X16_BLOCK;
    const int i = (int)(r % 16);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pk = grp + (size_t)b * Q4_X16_BLOCK;
        uint8_t *blk = row + (size_t)b * Q4_1_BYTES;
        const uint32_t k0 = ld_u32(pk + 64 + 4 * i), k1 = ld_u32(pk + 128 + 4 * i);
        const uint32_t k2 = ld_u32(pk + 192 + 4 * i), k3 = ld_u32(pk + 256 + 4 * i);
        const uint32_t w[4] = {(k0 & lo) | (k2 & lo) << 4, (k0 & hi) >> 4 | (k2 & hi), (k1 & lo) | (k3 & lo) << 4,
                               (k1 & hi) >> 4 | (k3 & hi)};
        memcpy(blk, pk + 2 * i, 2);
        memcpy(blk + 2, pk + 32 + 2 * i, 2);
        memcpy(blk + 4, w, 16);
    }
}

int bs_q4_x16_fits(const bs_weight *W) {
    return W->type == BS_Q4_1 && W->ne0 % 32 == 0 && W->ne1 % 16 == 0 && W->ne0 > 0 && W->ne1 > 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define INL inline __attribute__((always_inline))
#define PF_DIST 2048   /* software prefetch distance along a group, bytes */

static INL int32_t ld32(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* 16 weight rows x NR activation rows a0.. over all blocks. */
static T512 INL void tile_q4x16(const uint8_t *pk, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                               const int NR) {
    const int64_t n = A->n, nb = n / 32;
    const __m512i low = _mm512_set1_epi8(15);
    __m512 acc[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *base = pk + (size_t)b * Q4_X16_BLOCK;
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)base + PF_DIST + 64 * l, _MM_HINT_T0);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)base));
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(base + 32)));
        /* U independent integer chains per row hide the vpdpbusd latency when NR is small;
         * integer sums are exact, so the split never changes a result */
        const int U = NR <= 2 ? 4 : NR <= 4 ? 2 : 1;
        __m512i s[BS_KMAX_ROWS][4];
        for (int r = 0; r < NR; r++)
            for (int u = 0; u < U; u++) s[r][u] = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            const __m512i v = _mm512_loadu_si512(base + 64 + 64 * k);
            const __m512i c0 = _mm512_and_si512(v, low), c1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            for (int r = 0; r < NR; r++) {
                const int8_t *q = A->qs + (a0 + r) * n + 32 * b + 8 * k;
                s[r][(2 * k) % U] = _mm512_dpbusd_epi32(s[r][(2 * k) % U], c0, _mm512_set1_epi32(ld32(q)));
                s[r][(2 * k + 1) % U] = _mm512_dpbusd_epi32(s[r][(2 * k + 1) % U], c1, _mm512_set1_epi32(ld32(q + 4)));
            }
        }
        for (int r = 0; r < NR; r++) {
            __m512i t = s[r][0];
            for (int u = 1; u < U; u++) t = _mm512_add_epi32(t, s[r][u]);
            const __m512 da = _mm512_set1_ps(A->dl[(a0 + r) * (n / 4) + 8 * b]);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, da), acc[r]);
            acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(A->gs[(a0 + r) * (n / 32) + b]), acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}

#define Q4_CASE(NR) \
    case NR: for (int64_t o = o0; o < o1; o += 16) tile_q4x16(pk + (size_t)(o / 16) * gbytes, A, a0, yy + o, ldy, NR); break;

static T512 void k_q4x16(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                         float *y, int64_t ldy) {
    const uint8_t *pk = W->packed;
    const size_t gbytes = (size_t)(W->ne0 / 32) * Q4_X16_BLOCK;
    float *yy = y + a0 * ldy;
    switch (na) {
    Q4_CASE(1) Q4_CASE(2) Q4_CASE(3) Q4_CASE(4) Q4_CASE(5) Q4_CASE(6) Q4_CASE(7)
    default:   /* 8 rows as 4 + 4 tiles (register pressure); a row's operations are the same */
        for (int64_t o = o0; o < o1; o += 16) {
            const uint8_t *g = pk + (size_t)(o / 16) * gbytes;
            tile_q4x16(g, A, a0, yy + o, ldy, 4);
            tile_q4x16(g, A, a0 + 4, yy + 4 * ldy + o, ldy, 4);
        }
        break;
    }
}

bs_kernel_fn bs_kernel_q4_x16_avx512(void) { return k_q4x16; }

/* --- AVX2 ------------------------------------------------------------------------------------ */

#define T2 __attribute__((target("avx2,fma,f16c")))

/* 16 weight rows (two vectors of 8) x NR (1-2) activation rows a0.., the AVX-512 tile's sums
 * and float steps: vpmaddubsw pair sums (at most 2 * 15 * 127) add up in int16 over the
 * block's 8 products (30480 < 2^15) and vpmaddwd with ones widens them once per block. */
static T2 INL void tile_q4x16_avx2(const uint8_t *pk, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                                   const int NR) {
    const int64_t n = A->n, nb = n / 32;
    const __m256i low = _mm256_set1_epi8(15);
    __m256 acc[2][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *base = pk + (size_t)b * Q4_X16_BLOCK;
        for (int l = 0; l < 5; l++) _mm_prefetch((const char *)base + PF_DIST + 64 * l, _MM_HINT_T0);
        __m256i s[2][2];
        for (int r = 0; r < NR; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++)
            for (int h = 0; h < 2; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(base + 64 + 64 * k + 32 * h));
                const __m256i c0 = _mm256_and_si256(v, low), c1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                for (int r = 0; r < NR; r++) {
                    const int8_t *q = A->qs + (a0 + r) * n + 32 * b + 8 * k;
                    const __m256i p0 = _mm256_maddubs_epi16(c0, _mm256_set1_epi32(ld32(q)));
                    const __m256i p1 = _mm256_maddubs_epi16(c1, _mm256_set1_epi32(ld32(q + 4)));
                    s[r][h] = _mm256_add_epi16(s[r][h], _mm256_add_epi16(p0, p1));
                    /* two rows: keep each sum in its register (gcc otherwise regroups the
                     * products into trees it spills: 101 stack accesses against 28); 4 / 8
                     * rows 1.12-1.22 / 1.23-1.30x less CPU time (bench --matmul, Q4_1, medians
                     * of 3 and 5, AVX2 EPYC). One row keeps gcc's tree, whose chains are shorter. */
                    if (NR > 1) __asm__("" : "+x"(s[r][h]));
                }
            }
        for (int h = 0; h < 2; h++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 16 * h)));
            const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 32 + 16 * h)));
            for (int r = 0; r < NR; r++) {
                const __m256i t = _mm256_madd_epi16(s[r][h], _mm256_set1_epi16(1));
                const __m256 da = _mm256_set1_ps(A->dl[(a0 + r) * (n / 4) + 8 * b]);
                acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, da), acc[r][h]);
                acc[r][h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(A->gs[(a0 + r) * (n / 32) + b]), acc[r][h]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + r * ldy + 8 * h, acc[r][h]);
}

/* Rows in pairs over each group (16 registers); later pairs read it from L1. */
static T2 void k_q4x16_avx2(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                            float *y, int64_t ldy) {
    const uint8_t *pk = W->packed;
    const size_t gbytes = (size_t)(W->ne0 / 32) * Q4_X16_BLOCK;
    for (int64_t o = o0; o < o1; o += 16) {
        const uint8_t *g = pk + (size_t)(o / 16) * gbytes;
        for (int r = 0; r < na; r += 2) {
            if (na - r >= 2) tile_q4x16_avx2(g, A, a0 + r, y + (a0 + r) * ldy + o, ldy, 2);
            else tile_q4x16_avx2(g, A, a0 + r, y + (a0 + r) * ldy + o, ldy, 1);
        }
    }
}

bs_kernel_fn bs_kernel_q4_x16_avx2(void) { return k_q4x16_avx2; }
#else
bs_kernel_fn bs_kernel_q4_x16_avx512(void) { return NULL; }
bs_kernel_fn bs_kernel_q4_x16_avx2(void) { return NULL; }
#endif
