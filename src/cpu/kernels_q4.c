/* kernels_q4.c: AVX2 and AVX-512 kernels for Q4_0 and Q4_1 weights (the DSpark drafter pack is
 * Q4_1, its lm head included), bit-identical to the scalar oracle (see kernels_quant.h).
 *
 * The oracle (bs_q4_0_dot / bs_q4_1_dot, llama.cpp's AVX2 order) keeps 8 float lanes per
 * output, lane l of a 32-block being the integer dot of elements 4l..4l+3:
 *   acc[l] = fma(d_w * d_a, lane[l], acc[l])        per block
 *   summs  = fma(m_w, s_a, summs)                   per block, Q4_1 only (s_a = d_a * sum q)
 *   y = hsum8(acc) (+ summs)
 * AVX2: one 256-bit vector is one output's 8 lanes; maddubs (nibble u8 x q s8, no saturation:
 * 2 * 15 * 127 < 2^15) + madd gives the lanes, seeded with 8 * (-sum q) for Q4_0's -8 offset.
 * AVX-512: the two 256-bit halves carry two weight rows (as the exact Q1_0 kernel does), one
 * vpdpbusd per block gives both rows' lanes; Q4_1's summs runs in every lane of its half.
 * Activations are the split Q8_0 / Q8_1 layout (kernels.h): quants, -sum per 4, the block
 * scale d_a per lane, and (Q8_1) s_a per block.
 *
 * Tiles: MR weight rows (AVX2) or P row pairs (AVX-512) x NR activation rows share each decoded
 * block; each output has its own accumulators and the same operations whatever the tile. */
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
#define PF_DIST 1024   /* software prefetch distance along a weight row, bytes */

enum { Q4_0_SIZE = 18, Q4_1_SIZE = 20 };

static INL uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static INL int32_t ld32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static T2 INL float f16(const uint8_t *p) { return _cvtsh_ss(ld16(p)); }

/* bs_hsum8's order: ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)). */
static T2 INL float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* --- AVX2 ------------------------------------------------------------------------------------ */

/* The 32 nibbles of a block in element order: low nibbles (elements 0..15), then high. */
static T2 INL __m256i nib2(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* MR weight rows (w, w + rb, ..) x NR activation rows a0.. ; q41: Q4_1, else Q4_0. */
static T2 INL void tile2(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                         int64_t ldy, const int q41, const int MR, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    const size_t bsz = q41 ? Q4_1_SIZE : Q4_0_SIZE, off = q41 ? 4 : 2;
    __m256 acc[4][BS_KMAX_ROWS];
    float summs[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm256_setzero_ps(), summs[m][r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i c[4];
        __m256 dw[4];
        float mw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * bsz;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            c[m] = nib2(p + off);
            dw[m] = _mm256_set1_ps(f16(p));
            mw[m] = q41 ? f16(p + 2) : 0.0f;
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(A->qs + row * n + b * 32));
            const __m256 da = _mm256_set1_ps(A->dl[row * (n / 4) + b * 8]);
            __m256i seed = _mm256_setzero_si256();
            if (!q41) seed = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(A->nsum + row * (n / 4) + b * 8)), 3);
            const float sa = q41 ? A->gs[row * nb + b] : 0.0f;
            for (int m = 0; m < MR; m++) {
                __m256i i = _mm256_madd_epi16(_mm256_maddubs_epi16(c[m], x), _mm256_set1_epi16(1));
                if (!q41) i = _mm256_add_epi32(i, seed);
                acc[m][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[m], da), _mm256_cvtepi32_ps(i), acc[m][r]);
                if (q41)
                    summs[m][r] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(mw[m]), _mm_set_ss(sa), _mm_set_ss(summs[m][r])));
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) {
            float s = hsum8(acc[m][r]);
            y[r * ldy + m] = q41 ? s + summs[m][r] : s;
        }
}

#define RANGE2(Q41, NR)                                                                        \
    do {                                                                                       \
        const int MR_ = (NR) == 1 ? 4 : (NR) == 2 ? 2 : 1;                                     \
        int64_t o = o0;                                                                        \
        for (; o + MR_ <= o1; o += MR_) tile2(w0 + (size_t)o * rb, rb, A, a0, yy + o, ldy, Q41, MR_, NR); \
        for (; o < o1; o++) tile2(w0 + (size_t)o * rb, rb, A, a0, yy + o, ldy, Q41, 1, NR);   \
    } while (0)

#define SWITCH_NR(RANGE, Q41) BS_FOR_NR(na, RANGE, Q41)

#define KERNEL(name, ATTR, RANGE, Q41)                                                         \
    static ATTR void name(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,        \
                          int64_t a0, int na, float *y, int64_t ldy) {                         \
        const uint8_t *w0 = W->data;                                                           \
        const size_t rb = W->row_bytes;                                                        \
        float *yy = y + a0 * ldy;                                                              \
        SWITCH_NR(RANGE, Q41)                                                                  \
    }

KERNEL(k2_q4_0, T2, RANGE2, 0)
KERNEL(k2_q4_1, T2, RANGE2, 1)

bs_kernel_fn bs_kernel_q4_avx2(int type) {
    return type == BS_Q4_0 ? k2_q4_0 : type == BS_Q4_1 ? k2_q4_1 : NULL;
}

/* --- AVX-512 --------------------------------------------------------------------------------- */

/* Blocks of two rows as [row 0 element order | row 1 element order] nibble bytes. */
static T512 INL __m512i nib_pair(const uint8_t *q0, const uint8_t *q1) {
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
                                        _mm_loadu_si128((const __m128i *)q1), 1);
    __m512i u = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(v));
    const __m512i m = _mm512_set1_epi8(15);
    return _mm512_mask_blend_epi64(0xCC, _mm512_and_si512(u, m), _mm512_and_si512(_mm512_srli_epi16(u, 4), m));
}

static T512 INL float half_hsum8(__m512 v, int half) {
    return hsum8(half ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
}

/* P pairs of weight rows (w + 2p rb, w + (2p+1) rb; with `single` the pair is one row twice and
 * only the first is written) x NR activation rows. */
static T512 INL void tile512(const uint8_t *w, size_t rb, int single, const bs_acts *A, int64_t a0,
                             float *y, int64_t ldy, const int q41, const int P, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    const size_t bsz = q41 ? Q4_1_SIZE : Q4_0_SIZE, off = q41 ? 4 : 2;
    const __m512i lo8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i hi8 = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    __m512 acc[2][BS_KMAX_ROWS], sm[2][BS_KMAX_ROWS];
    for (int p = 0; p < P; p++)
        for (int r = 0; r < NR; r++) acc[p][r] = _mm512_setzero_ps(), sm[p][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i c[2];
        __m512 dw[2], mw[2];
        for (int p = 0; p < P; p++) {
            const uint8_t *p0 = w + (size_t)(2 * p) * rb + (size_t)b * bsz;
            const uint8_t *p1 = single ? p0 : p0 + rb;
            _mm_prefetch((const char *)p0 + PF_DIST, _MM_HINT_T0);
            _mm_prefetch((const char *)p1 + PF_DIST, _MM_HINT_T0);
            c[p] = nib_pair(p0 + off, p1 + off);
            /* [d0, m0, d1, m1] (Q4_1) or [d0, ?, d1, ?] (Q4_0) */
            __m128i h = q41 ? _mm_setr_epi32(ld32(p0), ld32(p1), 0, 0)
                            : _mm_setr_epi32(ld16(p0), ld16(p1), 0, 0);
            __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(h));
            dw[p] = _mm512_permutexvar_ps(lo8, f);
            if (q41) mw[p] = _mm512_permutexvar_ps(hi8, f);
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(A->qs + row * n + b * 32)));
            const __m512 da = _mm512_set1_ps(A->dl[row * (n / 4) + b * 8]);
            __m512i seed = _mm512_setzero_si512();
            if (!q41)
                seed = _mm512_broadcast_i64x4(_mm256_slli_epi32(
                    _mm256_loadu_si256((const __m256i *)(A->nsum + row * (n / 4) + b * 8)), 3));
            const __m512 sa = q41 ? _mm512_set1_ps(A->gs[row * nb + b]) : _mm512_setzero_ps();
            for (int p = 0; p < P; p++) {
                __m512i i = _mm512_dpbusd_epi32(seed, c[p], x);
                acc[p][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], da), _mm512_cvtepi32_ps(i), acc[p][r]);
                if (q41) sm[p][r] = _mm512_fmadd_ps(mw[p], sa, sm[p][r]);
            }
        }
    }
    for (int p = 0; p < P; p++)
        for (int r = 0; r < NR; r++)
            for (int h = 0; h < 2 - single; h++) {
                float s = half_hsum8(acc[p][r], h);
                if (q41)   /* lane 0 of the row's half */
                    s += _mm_cvtss_f32(h ? _mm512_extractf32x4_ps(sm[p][r], 2) : _mm512_castps512_ps128(sm[p][r]));
                y[r * ldy + 2 * p + h] = s;
            }
}

#define RANGE512(Q41, NR)                                                                      \
    do {                                                                                       \
        const int P_ = (NR) <= 2 ? 2 : 1;                                                      \
        int64_t o = o0;                                                                        \
        for (; o + 2 * P_ <= o1; o += 2 * P_)                                                  \
            tile512(w0 + (size_t)o * rb, rb, 0, A, a0, yy + o, ldy, Q41, P_, NR);              \
        for (; o + 2 <= o1; o += 2) tile512(w0 + (size_t)o * rb, rb, 0, A, a0, yy + o, ldy, Q41, 1, NR); \
        if (o < o1) tile512(w0 + (size_t)o * rb, rb, 1, A, a0, yy + o, ldy, Q41, 1, NR);        \
    } while (0)

KERNEL(k512_q4_0, T512, RANGE512, 0)
KERNEL(k512_q4_1, T512, RANGE512, 1)

bs_kernel_fn bs_kernel_q4_avx512(int type) {
    return type == BS_Q4_0 ? k512_q4_0 : type == BS_Q4_1 ? k512_q4_1 : NULL;
}

#else
bs_kernel_fn bs_kernel_q4_avx2(int type) { (void)type; return NULL; }
bs_kernel_fn bs_kernel_q4_avx512(int type) { (void)type; return NULL; }
#endif
