/* kernels_kquant.c: SIMD kernels for the 256-block weight types Q6_K (some targets' output.weight),
 * TQ1_0 and TQ2_0, against raw Q8_K activation rows; bit-identical to the scalar oracle (see
 * kernels_quant.h).
 *
 * The oracle's float work is per 256-block, so the integer part dominates:
 *   Q6_K (bs_q6_k_dot, llama.cpp's AVX2 order): 8 int32 lanes per block, lane l summing
 *     scale * (q - 32) * q8 over elements 4l..4l+3 of each 32-group; then
 *     acc = fma(d_a * d_w, lanes, acc) in 8 float lanes, hsum8 at the end. Here (q - 32) * q8
 *     pairs come from maddubs(q, q8) - maddubs(32, q8) (i16, no saturation: |.| <= 2*63*127)
 *     and madd with the per-16 scales gives the lanes, exactly the oracle's integers.
 *   TQ1_0 / TQ2_0 (bs_tq*_dot): one integer per block, sum (t - 1) q8 = sum t q8 - sum q8
 *     (the latter from Q8_K's bsums), then sumf += (float)sum * (d_a * d_w).
 *   TQ1_0 trits: trit n of byte q is ((u8)(q * 3^n) * 3) >> 8, i.e. [x >= 86] + [x >= 171]
 *     for x = (u8)(q * 3^n), with the byte products made by wrapping additions.
 * Tiles: one weight row is decoded per block and applied to up to 8 activation rows.
 * The helpers are AVX2 code; the AVX-512 entry points compile the same code for the AVX-512
 * target (32 vector registers, no spills at 8 rows). */
#include "cpu/kernels_quant.h"
#include "cpu/cpu_features.h"

#include "formats/quant.h"
#include "io/util.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define INL inline __attribute__((always_inline))
#define PF_DIST 1024

enum { Q6_SIZE = 210, TQ1_SIZE = 54, TQ2_SIZE = 66, Q8_K_SIZE = 292, FMT_TQ1 = 1, FMT_TQ2 = 2 };

static INL uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static INL float ldf32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static T2 INL float f16(const uint8_t *p) { return _cvtsh_ss(ld16(p)); }
static T2 INL __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static T2 INL float hsum8(__m256 a) {   /* bs_hsum8's order */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static T2 INL int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* Activation row r's Q8_K block b. */
static INL const uint8_t *q8k(const bs_acts *A, int64_t r, int64_t b) {
    return (const uint8_t *)A->raw + (size_t)r * A->raw_row + (size_t)b * Q8_K_SIZE;
}

/* --- Q6_K ------------------------------------------------------------------------------------ */

/* The 32 6-bit codes (0..63) of group k (0..3) of half h, from its ql (64 B) and qh (32 B). */
static T2 INL __m256i q6_codes(__m256i ql0, __m256i ql1, __m256i qh, int k) {
    __m256i lo = (k & 1) ? ql1 : ql0;
    __m256i nib = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(lo, 4) : lo, _mm256_set1_epi8(15));
    __m256i hb = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4), _mm256_set1_epi8(0x30));
    return _mm256_or_si256(nib, hb);
}

/* i16 scales of group (h, k): elements 0..15 use scales[8h + 2k], 16..31 scales[8h + 2k + 1]. */
static T2 INL __m256i q6_scales(__m128i sc8, int j) {
    const __m128i ctrl = _mm_setr_epi8((char)j, (char)j, (char)j, (char)j, (char)j, (char)j, (char)j, (char)j,
                                       (char)(j + 1), (char)(j + 1), (char)(j + 1), (char)(j + 1),
                                       (char)(j + 1), (char)(j + 1), (char)(j + 1), (char)(j + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, ctrl));
}

static T2 INL void tile_q6k(const uint8_t *w, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                            const int NR) {
    const int64_t nb = A->n / 256;
    const __m256i c32 = _mm256_set1_epi8(32);
    __m256 acc[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *x = w + (size_t)b * Q6_SIZE;
        _mm_prefetch((const char *)x + PF_DIST, _MM_HINT_T0);
        _mm_prefetch((const char *)x + PF_DIST + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)x + PF_DIST + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)x + PF_DIST + 192, _MM_HINT_T0);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(x + 192));
        __m256i lane[BS_KMAX_ROWS];
        for (int r = 0; r < NR; r++) lane[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = ld256(x + 64 * h), ql1 = ld256(x + 64 * h + 32), qh = ld256(x + 128 + 32 * h);
            for (int k = 0; k < 4; k++) {
                const __m256i q = q6_codes(ql0, ql1, qh, k), s = q6_scales(sc8, 8 * h + 2 * k);
                for (int r = 0; r < NR; r++) {
                    const __m256i v = ld256(q8k(A, a0 + r, b) + 4 + 128 * h + 32 * k);
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, v), _mm256_maddubs_epi16(c32, v));
                    lane[r] = _mm256_add_epi32(lane[r], _mm256_madd_epi16(p, s));
                }
            }
        }
        const float dw = f16(x + 208);
        for (int r = 0; r < NR; r++) {
            const float d = ldf32(q8k(A, a0 + r, b)) * dw;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane[r]), acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) y[r * ldy] = hsum8(acc[r]);
}

/* --- TQ1_0 / TQ2_0 --------------------------------------------------------------------------- */

/* Unsigned x >= k per byte, as 0 / -1. */
static T2 INL __m256i ge_u8(__m256i x, int k) {
    return _mm256_cmpeq_epi8(_mm256_max_epu8(x, _mm256_set1_epi8((char)k)), x);
}

/* Trit of each byte x = (u8)(q * 3^n): [x >= 86] + [x >= 171]. */
static T2 INL __m256i trit(__m256i x) {
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge_u8(x, 86)), ge_u8(x, 171));
}

static T2 INL __m256i times3(__m256i x) { return _mm256_add_epi8(_mm256_add_epi8(x, x), x); }

/* The 256 codes (0..2, value code - 1) of a TQ1_0 block as 8 chunks of 32 elements. */
static T2 INL void tq1_codes(const uint8_t *x, __m256i c[8]) {
    __m256i v = ld256(x);                                   /* trit n -> elements 32n.. */
    for (int n = 0; n < 5; n++, v = times3(v)) c[n] = trit(v);
    const __m128i q16 = _mm_loadu_si128((const __m128i *)(x + 32));
    const __m128i q16x3 = _mm_add_epi8(_mm_add_epi8(q16, q16), q16);
    __m256i u = _mm256_set_m128i(q16x3, q16);               /* [trit n | trit n+1] -> 160+16n.. */
    c[5] = trit(u);
    u = times3(times3(u));
    c[6] = trit(u);
    u = times3(times3(u));
    int32_t qh;
    memcpy(&qh, x + 48, 4);
    __m128i h1 = _mm_set1_epi32(qh), h3 = _mm_add_epi8(_mm_add_epi8(h1, h1), h1);
    __m128i h9 = _mm_add_epi8(_mm_add_epi8(h3, h3), h3), h27 = _mm_add_epi8(_mm_add_epi8(h9, h9), h9);
    __m128i hq = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 2), _mm_blend_epi32(h9, h27, 8), 12);
    /* trit n of qh[j] -> element 240 + 4n + j */
    c[7] = trit(_mm256_inserti128_si256(u, hq, 1));
}

static T2 INL void tq2_codes(const uint8_t *x, __m256i c[8]) {
    for (int h = 0; h < 2; h++) {
        const __m256i v = ld256(x + 32 * h);
        for (int l = 0; l < 4; l++) c[4 * h + l] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * l), _mm256_set1_epi8(3));
    }
}

static T2 INL void tile_tq(const uint8_t *w, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                           const int fmt, const int NR) {
    const int64_t nb = A->n / 256;
    const size_t bsz = fmt == FMT_TQ1 ? TQ1_SIZE : TQ2_SIZE, doff = fmt == FMT_TQ1 ? 52 : 64;
    const __m256i one16 = _mm256_set1_epi16(1);
    float sumf[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) sumf[r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *x = w + (size_t)b * bsz;
        _mm_prefetch((const char *)x + PF_DIST, _MM_HINT_T0);
        __m256i c[8];
        if (fmt == FMT_TQ1) tq1_codes(x, c);
        else tq2_codes(x, c);
        const float dw = f16(x + doff);
        for (int r = 0; r < NR; r++) {
            const uint8_t *a = q8k(A, a0 + r, b);
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(c[0], ld256(a + 4)), one16);
            for (int k = 1; k < 8; k++)
                s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(c[k], ld256(a + 4 + 32 * k)), one16));
            const int sumq = hsum_i32(_mm256_madd_epi16(ld256(a + 4 + 256), one16));   /* bsums */
            const int sum = hsum_i32(s) - sumq;
            const float d = ldf32(a) * dw;
            sumf[r] += (float)sum * d;
        }
    }
    for (int r = 0; r < NR; r++) y[r * ldy] = sumf[r];
}

/* --- entry points ---------------------------------------------------------------------------- */

#define C_Q6K(p, yo, nr) tile_q6k(p, A, a0, yo, ldy, nr)
#define C_TQ1(p, yo, nr) tile_tq(p, A, a0, yo, ldy, FMT_TQ1, nr)
#define C_TQ2(p, yo, nr) tile_tq(p, A, a0, yo, ldy, FMT_TQ2, nr)

#define RANGE(CALL, NR) \
    for (int64_t o = o0; o < o1; o++) CALL(w0 + (size_t)o * W->row_bytes, yy + o, NR)

#define KERNEL(name, ATTR, CALL)                                                               \
    static ATTR void name(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,        \
                          int64_t a0, int na, float *y, int64_t ldy) {                         \
        const uint8_t *w0 = W->data;                                                           \
        float *yy = y + a0 * ldy;                                                              \
        BS_FOR_NR(na, RANGE, CALL)                                                             \
    }

KERNEL(k2_q6_k, T2, C_Q6K)
KERNEL(k2_tq1_0, T2, C_TQ1)
KERNEL(k2_tq2_0, T2, C_TQ2)
KERNEL(k512_q6_k, T512, C_Q6K)
KERNEL(k512_tq1_0, T512, C_TQ1)
KERNEL(k512_tq2_0, T512, C_TQ2)

bs_kernel_fn bs_kernel_kquant_avx2(int type) {
    switch (type) {
    case BS_Q6_K: return k2_q6_k;
    case BS_TQ1_0: return k2_tq1_0;
    case BS_TQ2_0: return k2_tq2_0;
    default: return NULL;
    }
}

bs_kernel_fn bs_kernel_kquant_avx512(int type) {
    switch (type) {
    case BS_Q6_K: return k512_q6_k;
    case BS_TQ1_0: return k512_tq1_0;
    case BS_TQ2_0: return k512_tq2_0;
    default: return NULL;
    }
}

#else
bs_kernel_fn bs_kernel_kquant_avx2(int type) { (void)type; return NULL; }
bs_kernel_fn bs_kernel_kquant_avx512(int type) { (void)type; return NULL; }
#endif
