/* kernels_avx2.c: AVX2 + FMA + F16C matmul kernels (Haswell / Zen 1 and later), compiled with
 * per-function target attributes like kernels_avx512.c and organised the same way (MR x NR
 * register tiles, one accumulator per output pair, same operations whatever the tile).
 *
 * A 256-bit vector holds one 32-element activation group, so the integer dot of a group is
 * maddubs (u8 x s8 -> pairs of i16) + madd (-> 8 lanes of i32), seeded with -sum(q) for the
 * Q1_0 / Q2_0 sign correction. Q1_0 bits and Q2_0 codes are expanded with a byte shuffle and
 * bit tests; Q8_0 uses |w| x sign(q, w) as llama.cpp does. */
#include "cpu/kernels.h"
#include "cpu/kernels_quant.h"

#include "formats/quant.h"
#include "io/util.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))
#define PF_DIST 1024

enum { FMT_Q1, FMT_Q2, FMT_Q2G64 };

static INL uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static T2 INL float f16(const uint8_t *p) { return _cvtsh_ss(ld16(p)); }

/* 4 bytes of sign bits -> 32 bytes {0, 2}. */
static T2 INL __m256i unpack1(const uint8_t *p) {
    int32_t b;
    memcpy(&b, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(b), shuf);
    __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(m, _mm256_set1_epi8(2));
}

/* 8 bytes of 2-bit codes -> 32 code bytes in element order. */
static T2 INL __m256i unpack2(const uint8_t *p) {
    long long b;
    memcpy(&b, p, 8);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                          4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    const __m256i m0 = _mm256_set1_epi32(0x40100401), m1 = _mm256_set1_epi32((int)0x80200802u);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x(b), shuf);
    __m256i s0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m0), m0), _mm256_set1_epi8(1));
    __m256i s1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m1), m1), _mm256_set1_epi8(2));
    return _mm256_or_si256(s0, s1);
}

/* sum of u8 c x s8 x per 4-element lane, plus the seed. */
static T2 INL __m256i dot4(__m256i seed, __m256i c, __m256i x) {
    __m256i p = _mm256_maddubs_epi16(c, x);
    return _mm256_add_epi32(seed, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* Q1_0 / Q2_0 family: a step is one weight block (128 or 64 elements, 4 or 2 groups). */
static T2 INL void tile_q12(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                           int64_t ldy, const int fmt, const int MR, const int NR) {
    const int64_t n = A->n;
    const int G = fmt == FMT_Q2G64 ? 2 : 4;       /* groups per block */
    const size_t bsz = fmt == FMT_Q2 ? 34 : 18;
    const int64_t nsteps = n / (32 * G);
    __m256 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nsteps; b++) {
        __m256i c[4][4];
        __m256 dw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * bsz;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            dw[m] = _mm256_set1_ps(f16(p));
            for (int g = 0; g < G; g++) c[m][g] = fmt == FMT_Q1 ? unpack1(p + 2 + 4 * g) : unpack2(p + 2 + 8 * g);
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const int8_t *q = A->qs + row * n + b * 32 * G;
            const int32_t *ns = A->nsum + row * (n / 4) + b * 8 * G;
            const float *dl = A->dl + row * (n / 4) + b * 8 * G;
            for (int m = 0; m < MR; m++) {
                __m256 t = _mm256_setzero_ps();
                for (int g = 0; g < G; g++) {
                    __m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * g));
                    __m256i i = dot4(_mm256_loadu_si256((const __m256i *)(ns + 8 * g)), c[m][g], x);
                    __m256 f = _mm256_cvtepi32_ps(i), d = _mm256_loadu_ps(dl + 8 * g);
                    t = g == 0 ? _mm256_mul_ps(f, d) : _mm256_fmadd_ps(f, d, t);
                }
                acc[m][r] = _mm256_fmadd_ps(t, dw[m], acc[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) {
            __m256 a = acc[m][r];
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            y[r * ldy + m] = _mm_cvtss_f32(s);
        }
}

static T2 INL float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Q8_0 weights: a step is one 32-block. */
static T2 INL void tile_q8(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                          int64_t ldy, const int MR, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    __m256 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wv[4], aw[4];
        __m256 dw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * 34;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            wv[m] = _mm256_loadu_si256((const __m256i *)(p + 2));
            aw[m] = _mm256_abs_epi8(wv[m]);
            dw[m] = _mm256_set1_ps(f16(p));
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const __m256i x = _mm256_loadu_si256((const __m256i *)(A->qs + row * n + b * 32));
            const __m256 d = _mm256_loadu_ps(A->dl + row * (n / 4) + b * 8);
            for (int m = 0; m < MR; m++) {
                __m256i i = dot4(_mm256_setzero_si256(), aw[m], _mm256_sign_epi8(x, wv[m]));
                acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(d, dw[m]), acc[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = hsum(acc[m][r]);
}

/* Float weights, 8 elements a step; the tail goes through a zero-padded copy. */
static T2 INL __m256 load_w8(const uint8_t *p, int type) {
    if (type == BS_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == BS_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static T2 INL void tile_f(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                         int64_t ldy, const int type, const int MR, const int NR) {
    const int64_t n = A->n;
    const size_t es = type == BS_F32 ? 4 : 2;
    __m256 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t k = BS_MIN(8, n - i);
        __m256 wv[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)i * es;
            uint8_t tmp[32] = {0};
            if (k < 8) {
                memcpy(tmp, p, (size_t)k * es);
                p = tmp;
            }
            wv[m] = load_w8(p, type);
        }
        for (int r = 0; r < NR; r++) {
            const float *x = (const float *)((const uint8_t *)A->raw + (size_t)(a0 + r) * A->raw_row) + i;
            float tmp[8] = {0};
            if (k < 8) {
                memcpy(tmp, x, (size_t)k * 4);
                x = tmp;
            }
            const __m256 xv = _mm256_loadu_ps(x);
            for (int m = 0; m < MR; m++) acc[m][r] = _mm256_fmadd_ps(wv[m], xv, acc[m][r]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = hsum(acc[m][r]);
}

#define RANGE(CALL, NR)                                                                       \
    do {                                                                                      \
        const int MR_ = (NR) <= 2 ? 2 : 1;   /* 16 ymm registers */                                                    \
        int64_t o = o0;                                                                       \
        const uint8_t *w0 = (const uint8_t *)W->data;                                         \
        float *yy = y + a0 * ldy;                                                             \
        for (; o + MR_ <= o1; o += MR_) CALL(w0 + (size_t)o * W->row_bytes, yy + o, MR_, NR); \
        for (; o < o1; o++) CALL(w0 + (size_t)o * W->row_bytes, yy + o, 1, NR);              \
    } while (0)

#define SWITCH_NR(CALL) BS_FOR_NR(na, RANGE, CALL)

#define KERNEL(name, CALL)                                                                   \
    static T2 void name(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,        \
                        int64_t a0, int na, float *y, int64_t ldy) {                         \
        SWITCH_NR(CALL)                                                                      \
    }

#define C_Q1(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q1, mr, nr)
#define C_Q2(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2, mr, nr)
#define C_Q2G64(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2G64, mr, nr)
#define C_Q8(p, yo, mr, nr) tile_q8(p, W->row_bytes, A, a0, yo, ldy, mr, nr)
#define C_F32(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F32, mr, nr)
#define C_F16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F16, mr, nr)
#define C_BF16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_BF16, mr, nr)

KERNEL(k_q1_0, C_Q1)
KERNEL(k_q2_0, C_Q2)
KERNEL(k_q2_0_g64, C_Q2G64)
KERNEL(k_q8_0, C_Q8)
KERNEL(k_f32, C_F32)
KERNEL(k_f16, C_F16)
KERNEL(k_bf16, C_BF16)

bs_kernel_fn bs_kernel_avx2(int type) {
    switch (type) {
    case BS_Q1_0: return k_q1_0;
    case BS_Q2_0: case BS_PQ2_0: return k_q2_0;
    case BS_Q2_0_G64: return k_q2_0_g64;
    case BS_Q8_0: return k_q8_0;
    case BS_Q4_0: case BS_Q4_1: return bs_kernel_q4_avx2(type);   /* kernels_q4.c, exact */
    case BS_Q6_K: case BS_TQ1_0: case BS_TQ2_0: return bs_kernel_kquant_avx2(type);
    case BS_F32: return k_f32;
    case BS_F16: return k_f16;
    case BS_BF16: return k_bf16;
    default: return NULL;
    }
}

/* Q8_0 activation quantizer, identical to bs_q8_0_act, into the split layout. */
T2 int bs_acts_q8_0_avx2(bs_acts *A, int64_t r, const float *x) {
    if (A->type != BS_Q8_0) return -1;
    const int64_t n = A->n;
    int8_t *qs = A->qs + r * n;
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t g = 0; g < n / 32; g++) {
        __m256 v[4], mx;
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 32 * g + 8 * k);
        mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                           _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        float d = bs_f16_to_f32(bs_f32_to_f16(amax / 127.0f));
        __m256 iv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], iv));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, perm);
        _mm256_storeu_si256((__m256i *)(qs + 32 * g), p);
        __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), _mm256_set1_epi16(1));
        _mm256_storeu_si256((__m256i *)(ns + 8 * g), _mm256_sub_epi32(_mm256_setzero_si256(), s));
        _mm256_storeu_ps(dl + 8 * g, _mm256_set1_ps(d));
    }
    return 0;
}

#else
bs_kernel_fn bs_kernel_avx2(int type) { (void)type; return NULL; }
int bs_acts_q8_0_avx2(bs_acts *A, int64_t r, const float *x) { (void)A; (void)r; (void)x; return -1; }
#endif
