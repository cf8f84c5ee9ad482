/* ops_simd_neon.c: the operations of ops_simd.h with aarch64 Advanced SIMD (every level above
 * scalar), the AVX2 code of ops_simd.c with 4-float vectors: the same exp polynomial and range
 * reduction (round-to-nearest-even n, Cody-Waite ln2 split, degree 7, 2^n in two factors), the
 * same padded tails, double sums in the same pairing. Empty on other architectures. */
#include "cpu/ops_simd.h"

#include "cpu/cpu_features.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.42860682030941723212e-6f
#define X_MIN -104.0f
#define X_MAX 89.0f

static inline float32x4_t exp4(float32x4_t x) {
    x = vmaxq_f32(vdupq_n_f32(X_MIN), vminq_f32(vdupq_n_f32(X_MAX), x));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, LOG2E));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    static const float c[7] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 1.0f / 2, 1.0f, 1.0f};
    float32x4_t p = vfmaq_f32(vdupq_n_f32(c[0]), vdupq_n_f32(1.0f / 5040), r);
    for (int k = 1; k < 7; k++) p = vfmaq_f32(vdupq_n_f32(c[k]), p, r);
    const int32x4_t ni = vcvtnq_s32_f32(n), n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

static inline float32x4_t silu_mul4(float32x4_t x, float32x4_t y) {
    const float32x4_t e = exp4(vnegq_f32(x));
    return vmulq_f32(vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e)), y);
}

static inline float32x4_t sigmoid_mul4(float32x4_t d, float32x4_t g) {
    const float32x4_t e = exp4(vnegq_f32(g));
    return vmulq_f32(d, vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(vdupq_n_f32(1.0f), e)));
}

static bool on(void) { return bs_cpu_level() >= BS_CPU_NEON; }

bool bs_simd_silu_mul(float *dst, const float *x, const float *y, size_t n) {
    if (!on()) return false;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, silu_mul4(vld1q_f32(x + i), y ? vld1q_f32(y + i) : vdupq_n_f32(1.0f)));
    if (i < n) {   /* the tail through padded buffers: the same code as every other element */
        float bx[4] = {0}, by[4] = {1, 1, 1, 1}, bd[4];
        memcpy(bx, x + i, (n - i) * sizeof(float));
        if (y) memcpy(by, y + i, (n - i) * sizeof(float));
        vst1q_f32(bd, silu_mul4(vld1q_f32(bx), vld1q_f32(by)));
        memcpy(dst + i, bd, (n - i) * sizeof(float));
    }
    return true;
}

bool bs_simd_sigmoid_mul(float *dst, const float *g, size_t n) {
    if (!on()) return false;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, sigmoid_mul4(vld1q_f32(dst + i), vld1q_f32(g + i)));
    if (i < n) {
        float bd[4] = {0}, bg[4] = {0};
        memcpy(bd, dst + i, (n - i) * sizeof(float));
        memcpy(bg, g + i, (n - i) * sizeof(float));
        vst1q_f32(bd, sigmoid_mul4(vld1q_f32(bd), vld1q_f32(bg)));
        memcpy(dst + i, bd, (n - i) * sizeof(float));
    }
    return true;
}

/* Eight floats a step into four double pairs: lanes 0..3 and 4..7 as the AVX2 code's two
 * 4-double accumulators, reduced (t0 + t1) + (t2 + t3). */
static double sum8_f64(const float *x, int n8, int square) {
    float64x2_t a0l = vdupq_n_f64(0), a0h = a0l, a1l = a0l, a1h = a0l;
    for (int i = 0; i < n8; i += 8) {
        float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
        if (square) v0 = vmulq_f32(v0, v0), v1 = vmulq_f32(v1, v1);
        a0l = vaddq_f64(a0l, vcvt_f64_f32(vget_low_f32(v0)));
        a0h = vaddq_f64(a0h, vcvt_high_f64_f32(v0));
        a1l = vaddq_f64(a1l, vcvt_f64_f32(vget_low_f32(v1)));
        a1h = vaddq_f64(a1h, vcvt_high_f64_f32(v1));
    }
    const float64x2_t tl = vaddq_f64(a0l, a1l), th = vaddq_f64(a0h, a1h);
    return (vgetq_lane_f64(tl, 0) + vgetq_lane_f64(tl, 1)) + (vgetq_lane_f64(th, 0) + vgetq_lane_f64(th, 1));
}

bool bs_simd_sumsq(const float *x, int n, double *sum) {
    if (!on()) return false;
    const int n8 = n / 8 * 8;
    double s = sum8_f64(x, n8, 1);
    for (int i = n8; i < n; i++) s += (double)(x[i] * x[i]);
    *sum = s;
    return true;
}

bool bs_simd_scale(float *y, const float *x, const float *w, float scale, int n) {
    if (!on()) return false;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vmulq_n_f32(vld1q_f32(x + i), scale);
        vst1q_f32(y + i, w ? vmulq_f32(v, vld1q_f32(w + i)) : v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
    return true;
}

bool bs_simd_softmax(float *x, int n) {
    if (!on()) return false;
    if (n <= 0) return true;
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float pad[8];
    const int nt = n % 8, nf = n - nt;
    for (int l = 0; l < 8; l++) pad[l] = l < nt ? x[nf + l] : -INFINITY;
    float32x4_t mx = vmaxq_f32(vld1q_f32(pad), vld1q_f32(pad + 4));
    for (int i = 0; i < nf; i += 4) mx = vmaxq_f32(mx, vld1q_f32(x + i));
    const float max = vmaxvq_f32(mx);
    if (max == -INFINITY) {
        memset(x, 0, (size_t)n * sizeof(float));
        return true;
    }
    const float32x4_t vm = vdupq_n_f32(max);
    for (int i = 0; i < nf + (nt ? 8 : 0); i += 4) {   /* the tail through pad */
        float *p = i < nf ? x + i : pad + (i - nf);
        const float32x4_t v = vld1q_f32(p);
        const uint32x4_t live = vcgtq_f32(v, ninf);   /* -inf (masked) and NaN give 0 */
        vst1q_f32(p, vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(exp4(vsubq_f32(v, vm))), live)));
    }
    double sum = sum8_f64(x, nf, 0);
    if (nt) {
        sum += sum8_f64(pad, 8, 0);   /* the padded lanes are 0 */
        memcpy(x + nf, pad, (size_t)nt * sizeof(float));
    }
    bs_simd_scale(x, x, NULL, sum > 0.0 ? (float)(1.0 / sum) : 0.0f, n);
    return true;
}

/* IEEE half <-> float: fcvtn / fcvtl round to nearest even (the default FPCR mode) like F16C. */
bool bs_simd_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    if (!on()) return false;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    if (i < n) {
        float pad[4] = {0};
        uint16_t out[4];
        memcpy(pad, src + i, (n - i) * sizeof(float));
        vst1_u16(out, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(pad))));
        memcpy(dst + i, out, (n - i) * sizeof(uint16_t));
    }
    return true;
}

bool bs_simd_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
    if (!on()) return false;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    if (i < n) {
        uint16_t pad[4] = {0};
        float out[4];
        memcpy(pad, src + i, (n - i) * sizeof(uint16_t));
        vst1q_f32(out, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(pad))));
        memcpy(dst + i, out, (n - i) * sizeof(float));
    }
    return true;
}
#endif
