/* ops_simd.c: see ops_simd.h (x86-64; aarch64 has ops_simd_neon.c). Per-function target
 * attributes; nothing here runs unless bs_cpu_level() says the CPU has it. */
#include "cpu/ops_simd.h"

#include "cpu/cpu_features.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512dq,avx512vl,fma,avx2"))) BS_AVX512_NOSAN
#define T2 __attribute__((target("avx2,fma")))
#define INL inline __attribute__((always_inline))

/* Range reduction constants: ln2 split so that n * LN2_HI is exact for |n| < 2^9. */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723212e-6f
/* Inputs are clamped to [X_MIN, X_MAX]: exp is 0 (after underflow) or +inf beyond them. */
#define X_MIN -104.0f
#define X_MAX 89.0f
#define C2 (1.0f / 2)
#define C3 (1.0f / 6)
#define C4 (1.0f / 24)
#define C5 (1.0f / 120)
#define C6 (1.0f / 720)
#define C7 (1.0f / 5040)

/* ---- AVX-512 -------------------------------------------------------------------------------- */

static T512 INL __m512 poly512(__m512 r) {
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(C7), r, _mm512_set1_ps(C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
}

static T512 INL __m512 exp512(__m512 x) {
    /* min/max return their second operand when either is NaN: x second keeps NaN */
    x = _mm512_max_ps(_mm512_set1_ps(X_MIN), _mm512_min_ps(_mm512_set1_ps(X_MAX), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    return _mm512_scalef_ps(poly512(r), n);
}

static T512 INL __m512 silu_mul512(__m512 x, __m512 y) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), y);
}

static T512 INL __m512 sigmoid_mul512(__m512 d, __m512 g) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(d, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
}

static T512 void silu_mul_avx512(float *dst, const float *x, const float *y, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, silu_mul512(_mm512_loadu_ps(x + i), y ? _mm512_loadu_ps(y + i) : one));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 r = silu_mul512(_mm512_maskz_loadu_ps(m, x + i), y ? _mm512_maskz_loadu_ps(m, y + i) : one);
        _mm512_mask_storeu_ps(dst + i, m, r);
    }
}

static T512 void sigmoid_mul_avx512(float *dst, const float *g, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, sigmoid_mul512(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(g + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 r = sigmoid_mul512(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, g + i));
        _mm512_mask_storeu_ps(dst + i, m, r);
    }
}

static T512 double sumsq_avx512(const float *x, int n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i), sq = _mm512_mul_ps(v, v);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static T512 void scale_avx512(float *y, const float *x, const float *w, float scale, int n) {
    const __m512 s = _mm512_set1_ps(scale);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), s);
        _mm512_storeu_ps(y + i, w ? _mm512_mul_ps(v, _mm512_loadu_ps(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

/* softmax: max, then exp(x - max) summed in double, then scaled; padding lanes are -inf, whose
 * exp is 0, so a tail goes through the same code as the rest. */
static T512 void softmax_avx512(float *x, int n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    int i = 0;
    for (; i + 16 <= n; i += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
    const __mmask16 tm = (__mmask16)((1u << (n - i)) - 1);
    if (i < n) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, tm, x + i));
    const float max = _mm512_reduce_max_ps(mx);
    if (max == -INFINITY) { memset(x, 0, (size_t)n * sizeof(float)); return; }
    const __m512 vm = _mm512_set1_ps(max);
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    if (i < n) {
        const __m512 e = _mm512_maskz_mov_ps(tm, exp512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, tm, x + i), vm)));
        _mm512_mask_storeu_ps(x + i, tm, e);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    const double sum = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    scale_avx512(x, x, NULL, sum > 0.0 ? (float)(1.0 / sum) : 0.0f, n);
}

/* ---- AVX2 ----------------------------------------------------------------------------------- */

static T2 INL __m256 exp256(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(X_MIN), _mm256_min_ps(_mm256_set1_ps(X_MAX), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(C7), r, _mm256_set1_ps(C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n in two factors so that neither leaves the normal range for n in [-150, 129] */
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static T2 INL __m256 silu_mul256(__m256 x, __m256 y) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), y);
}

static T2 INL __m256 sigmoid_mul256(__m256 d, __m256 g) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(d, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}

static T2 void silu_mul_avx2(float *dst, const float *x, const float *y, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, silu_mul256(_mm256_loadu_ps(x + i), y ? _mm256_loadu_ps(y + i) : one));
    if (i < n) {   /* the tail through padded buffers: same code as every other element */
        float bx[8] = {0}, by[8] = {1, 1, 1, 1, 1, 1, 1, 1}, bd[8];
        memcpy(bx, x + i, (n - i) * sizeof(float));
        if (y) memcpy(by, y + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(bd, silu_mul256(_mm256_loadu_ps(bx), _mm256_loadu_ps(by)));
        memcpy(dst + i, bd, (n - i) * sizeof(float));
    }
}

static T2 void sigmoid_mul_avx2(float *dst, const float *g, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, sigmoid_mul256(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(g + i)));
    if (i < n) {
        float bd[8] = {0}, bg[8] = {0};
        memcpy(bd, dst + i, (n - i) * sizeof(float));
        memcpy(bg, g + i, (n - i) * sizeof(float));
        _mm256_storeu_ps(bd, sigmoid_mul256(_mm256_loadu_ps(bd), _mm256_loadu_ps(bg)));
        memcpy(dst + i, bd, (n - i) * sizeof(float));
    }
}

static T2 double sumsq_avx2(const float *x, int n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i), sq = _mm256_mul_ps(v, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(a0, a1));
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static T2 void scale_avx2(float *y, const float *x, const float *w, float scale, int n) {
    const __m256 s = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
        _mm256_storeu_ps(y + i, w ? _mm256_mul_ps(v, _mm256_loadu_ps(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

static T2 void softmax_avx2(float *x, int n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    float pad[8];
    const int nt = n % 8, nf = n - nt;
    for (int l = 0; l < 8; l++) pad[l] = l < nt ? x[nf + l] : -INFINITY;
    __m256 mx = _mm256_loadu_ps(pad);
    for (int i = 0; i < nf; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
    float m8[8];
    _mm256_storeu_ps(m8, mx);
    float max = m8[0];
    for (int l = 1; l < 8; l++) max = m8[l] > max ? m8[l] : max;
    if (max == -INFINITY) { memset(x, 0, (size_t)n * sizeof(float)); return; }
    const __m256 vm = _mm256_set1_ps(max);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (int i = 0; i < nf + (nt ? 8 : 0); i += 8) {   /* the tail through pad */
        float *p = i < nf ? x + i : pad;
        const __m256 v = _mm256_loadu_ps(p);
        const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(v, vm)), _mm256_cmp_ps(v, ninf, _CMP_NEQ_OQ));
        _mm256_storeu_ps(p, e);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    if (nt) memcpy(x + nf, pad, (size_t)nt * sizeof(float));
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(a0, a1));
    const double sum = (t[0] + t[1]) + (t[2] + t[3]);
    scale_avx2(x, x, NULL, sum > 0.0 ? (float)(1.0 / sum) : 0.0f, n);
}

/* ---- half precision (F16C, part of the AVX2 level) ------------------------------------------ */

#define TF16 __attribute__((target("avx2,f16c")))

static TF16 void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {   /* the tail through a padded buffer: the same instruction for every element */
        float pad[8] = {0};
        uint16_t out[8];
        memcpy(pad, src + i, (n - i) * sizeof(float));
        _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(pad), _MM_FROUND_TO_NEAREST_INT));
        memcpy(dst + i, out, (n - i) * sizeof(uint16_t));
    }
}

static TF16 void f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) {
        uint16_t pad[8] = {0};
        float out[8];
        memcpy(pad, src + i, (n - i) * sizeof(uint16_t));
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pad)));
        memcpy(dst + i, out, (n - i) * sizeof(float));
    }
}

/* ---- dispatch ------------------------------------------------------------------------------- */

bool bs_simd_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    if (bs_cpu_level() < BS_CPU_AVX2) return false;
    f32_to_f16_f16c(dst, src, n);
    return true;
}

bool bs_simd_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
    if (bs_cpu_level() < BS_CPU_AVX2) return false;
    f16_to_f32_f16c(dst, src, n);
    return true;
}

bool bs_simd_silu_mul(float *dst, const float *x, const float *y, size_t n) {
    const int lv = bs_cpu_level();
    if (lv >= BS_CPU_AVX512) silu_mul_avx512(dst, x, y, n);
    else if (lv >= BS_CPU_AVX2) silu_mul_avx2(dst, x, y, n);
    else return false;
    return true;
}

bool bs_simd_sigmoid_mul(float *dst, const float *g, size_t n) {
    const int lv = bs_cpu_level();
    if (lv >= BS_CPU_AVX512) sigmoid_mul_avx512(dst, g, n);
    else if (lv >= BS_CPU_AVX2) sigmoid_mul_avx2(dst, g, n);
    else return false;
    return true;
}

bool bs_simd_sumsq(const float *x, int n, double *sum) {
    const int lv = bs_cpu_level();
    if (lv >= BS_CPU_AVX512) *sum = sumsq_avx512(x, n);
    else if (lv >= BS_CPU_AVX2) *sum = sumsq_avx2(x, n);
    else return false;
    return true;
}

bool bs_simd_softmax(float *x, int n) {
    const int lv = bs_cpu_level();
    if (n <= 0) return true;
    if (lv >= BS_CPU_AVX512) softmax_avx512(x, n);
    else if (lv >= BS_CPU_AVX2) softmax_avx2(x, n);
    else return false;
    return true;
}

bool bs_simd_scale(float *y, const float *x, const float *w, float scale, int n) {
    const int lv = bs_cpu_level();
    if (lv >= BS_CPU_AVX512) scale_avx512(y, x, w, scale, n);
    else if (lv >= BS_CPU_AVX2) scale_avx2(y, x, w, scale, n);
    else return false;
    return true;
}

#elif !defined(__aarch64__)   /* aarch64: ops_simd_neon.c */

bool bs_simd_silu_mul(float *dst, const float *x, const float *y, size_t n) { (void)dst; (void)x; (void)y; (void)n; return false; }
bool bs_simd_f32_to_f16(uint16_t *dst, const float *src, size_t n) { (void)dst; (void)src; (void)n; return false; }
bool bs_simd_f16_to_f32(float *dst, const uint16_t *src, size_t n) { (void)dst; (void)src; (void)n; return false; }
bool bs_simd_sigmoid_mul(float *dst, const float *g, size_t n) { (void)dst; (void)g; (void)n; return false; }
bool bs_simd_sumsq(const float *x, int n, double *sum) { (void)x; (void)n; (void)sum; return false; }
bool bs_simd_softmax(float *x, int n) { (void)x; (void)n; return false; }
bool bs_simd_scale(float *y, const float *x, const float *w, float scale, int n) { (void)y; (void)x; (void)w; (void)scale; (void)n; return false; }

#endif
