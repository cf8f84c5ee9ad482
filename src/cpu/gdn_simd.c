/* gdn_simd.c: AVX-512, AVX2 and NEON kernels for the gated delta rule (see gdn_simd.h). The x86
 * ones are compiled with per-function target attributes and only called when bs_cpu_level()
 * allows; the NEON one (aarch64, every level above scalar) is the AVX2 pass with 4-float vectors.
 *
 * Per value row j of the state (dk floats): r = S_j * decay, u = r.k, d = (v_j - u) * beta,
 * S_j = r + k * d, o_j = (S_j.q) * scale: the decay, the delta and the read-out in one pass over
 * the row while it sits in registers. Dots use two vector accumulators (even / odd chunks) and a
 * fixed reduction, FMA throughout.
 *
 * The state streams from memory (3 MB per layer for 27B, far beyond the caches between steps),
 * so the pass is bound by bandwidth: the first token reads S_in and writes S_out, later tokens
 * of the batch update S_out in place while the head's 64 KiB are still in L2. Streaming
 * (non-temporal) stores of S_out measured slower than plain stores on the development machine. */
#include "cpu/gdn_simd.h"

#include "cpu/cpu_features.h"

#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512dq,avx512vl,fma,avx2"))) BS_AVX512_NOSAN
#define T2 __attribute__((target("avx2,fma")))
#define INL inline __attribute__((always_inline))

/* ---- AVX-512 -------------------------------------------------------------------------------- */

static T512 float row_step512(float *row, const float *in, const float *k, const float *q, float decay,
                              float vj, float beta, int dk) {
    const __m512 dec = _mm512_set1_ps(decay);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int c = 0; c < dk; c += 32) {
        const __m512 r0 = _mm512_mul_ps(_mm512_loadu_ps(in + c), dec);
        _mm512_storeu_ps(row + c, r0);
        a0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(k + c), a0);
        if (c + 16 < dk) {
            const __m512 r1 = _mm512_mul_ps(_mm512_loadu_ps(in + c + 16), dec);
            _mm512_storeu_ps(row + c + 16, r1);
            a1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(k + c + 16), a1);
        }
    }
    const float u = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    const __m512 d = _mm512_set1_ps((vj - u) * beta);
    a0 = a1 = _mm512_setzero_ps();
    for (int c = 0; c < dk; c += 32) {
        const __m512 r0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + c), d, _mm512_loadu_ps(row + c));
        _mm512_storeu_ps(row + c, r0);
        a0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(q + c), a0);
        if (c + 16 < dk) {
            const __m512 r1 = _mm512_fmadd_ps(_mm512_loadu_ps(k + c + 16), d, _mm512_loadu_ps(row + c + 16));
            _mm512_storeu_ps(row + c + 16, r1);
            a1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(q + c + 16), a1);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* dk = 16 * NC with NC even (128 in every Qwen3.5 size, 64 in the tiny ones): k and q stay in
 * registers for the whole token, the row in NC more. The same operations in the same order as
 * row_step512. */
static T512 INL void token512_regs(float *S, const float *in, const float *k, const float *q, const float *v,
                                   float decay, float beta, float scale, float *o, int dv, const int NC) {
    __m512 kv[8], qv[8];
    for (int c = 0; c < NC; c++) {
        kv[c] = _mm512_loadu_ps(k + 16 * c);
        qv[c] = _mm512_loadu_ps(q + 16 * c);
    }
    const __m512 dec = _mm512_set1_ps(decay);
    for (int j = 0; j < dv; j++) {
        const float *src = in + (size_t)j * 16 * NC;
        float *row = S + (size_t)j * 16 * NC;
        __m512 r[8], a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int c = 0; c < NC; c += 2) {
            r[c] = _mm512_mul_ps(_mm512_loadu_ps(src + 16 * c), dec);
            a0 = _mm512_fmadd_ps(r[c], kv[c], a0);
            r[c + 1] = _mm512_mul_ps(_mm512_loadu_ps(src + 16 * c + 16), dec);
            a1 = _mm512_fmadd_ps(r[c + 1], kv[c + 1], a1);
        }
        const float u = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        const __m512 d = _mm512_set1_ps((v[j] - u) * beta);
        a0 = a1 = _mm512_setzero_ps();
        for (int c = 0; c < NC; c += 2) {
            r[c] = _mm512_fmadd_ps(kv[c], d, r[c]);
            _mm512_storeu_ps(row + 16 * c, r[c]);
            a0 = _mm512_fmadd_ps(r[c], qv[c], a0);
            r[c + 1] = _mm512_fmadd_ps(kv[c + 1], d, r[c + 1]);
            _mm512_storeu_ps(row + 16 * c + 16, r[c + 1]);
            a1 = _mm512_fmadd_ps(r[c + 1], qv[c + 1], a1);
        }
        o[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * scale;
    }
}

static T512 void token512_128(float *S, const float *in, const float *k, const float *q, const float *v,
                              float decay, float beta, float scale, float *o, int dv) {
    token512_regs(S, in, k, q, v, decay, beta, scale, o, dv, 8);
}

static T512 void token512_64(float *S, const float *in, const float *k, const float *q, const float *v,
                             float decay, float beta, float scale, float *o, int dv) {
    token512_regs(S, in, k, q, v, decay, beta, scale, o, dv, 4);
}

static T512 void head512(const bs_gdn_head *h) {
    const int dk = h->dk, dv = h->dv;
    if (dk == 128 || dk == 64) {
        for (int t = 0; t < h->n; t++) {
            const size_t off = (size_t)t * h->qkv_stride;
            (dk == 128 ? token512_128 : token512_64)(h->S_out, t == 0 ? h->S_in : h->S_out, h->k + off, h->q + off,
                                                     h->v + off, expf(h->g[(size_t)t * h->gs]),
                                                     h->beta[(size_t)t * h->gs], h->scale,
                                                     h->o + (size_t)t * h->o_stride, dv);
        }
        return;
    }
    for (int t = 0; t < h->n; t++) {
        const float *q = h->q + (size_t)t * h->qkv_stride, *k = h->k + (size_t)t * h->qkv_stride;
        const float *v = h->v + (size_t)t * h->qkv_stride, *in = t == 0 ? h->S_in : h->S_out;
        const float decay = expf(h->g[(size_t)t * h->gs]), beta = h->beta[(size_t)t * h->gs];
        float *o = h->o + (size_t)t * h->o_stride;
        for (int j = 0; j < dv; j++)
            o[j] = row_step512(h->S_out + (size_t)j * dk, in + (size_t)j * dk, k, q, decay, v[j], beta, dk) * h->scale;
    }
}

/* ---- AVX2 ----------------------------------------------------------------------------------- */

static T2 float hsum256(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

static T2 float row_step256(float *row, const float *in, const float *k, const float *q, float decay,
                            float vj, float beta, int dk) {
    const __m256 dec = _mm256_set1_ps(decay);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int c = 0; c < dk; c += 16) {
        const __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(in + c), dec);
        _mm256_storeu_ps(row + c, r0);
        a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(k + c), a0);
        if (c + 8 < dk) {
            const __m256 r1 = _mm256_mul_ps(_mm256_loadu_ps(in + c + 8), dec);
            _mm256_storeu_ps(row + c + 8, r1);
            a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(k + c + 8), a1);
        }
    }
    const float u = hsum256(_mm256_add_ps(a0, a1));
    const __m256 d = _mm256_set1_ps((vj - u) * beta);
    a0 = a1 = _mm256_setzero_ps();
    for (int c = 0; c < dk; c += 16) {
        const __m256 r0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + c), d, _mm256_loadu_ps(row + c));
        _mm256_storeu_ps(row + c, r0);
        a0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(q + c), a0);
        if (c + 8 < dk) {
            const __m256 r1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + c + 8), d, _mm256_loadu_ps(row + c + 8));
            _mm256_storeu_ps(row + c + 8, r1);
            a1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(q + c + 8), a1);
        }
    }
    return hsum256(_mm256_add_ps(a0, a1));
}

static T2 void head256(const bs_gdn_head *h) {
    const int dk = h->dk, dv = h->dv;
    for (int t = 0; t < h->n; t++) {
        const float *q = h->q + (size_t)t * h->qkv_stride, *k = h->k + (size_t)t * h->qkv_stride;
        const float *v = h->v + (size_t)t * h->qkv_stride, *in = t == 0 ? h->S_in : h->S_out;
        const float decay = expf(h->g[(size_t)t * h->gs]), beta = h->beta[(size_t)t * h->gs];
        float *o = h->o + (size_t)t * h->o_stride;
        for (int j = 0; j < dv; j++)
            o[j] = row_step256(h->S_out + (size_t)j * dk, in + (size_t)j * dk, k, q, decay, v[j], beta, dk) * h->scale;
    }
}

bool bs_gdn_head_simd(const bs_gdn_head *h) {
    if (h->n < 1) return false;
    const int level = bs_cpu_level();
    if (level >= BS_CPU_AVX512 && h->dk % 16 == 0) {
        head512(h);
        return true;
    }
    if (level >= BS_CPU_AVX2 && h->dk % 8 == 0) {
        head256(h);
        return true;
    }
    return false;
}

#elif defined(__aarch64__)
#include <arm_neon.h>

/* row_step256 with two 4-float accumulators over 8-float chunks (dk % 8 == 0). */
static float row_step_neon(float *row, const float *in, const float *k, const float *q, float decay,
                           float vj, float beta, int dk) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    for (int c = 0; c < dk; c += 8) {
        const float32x4_t r0 = vmulq_n_f32(vld1q_f32(in + c), decay), r1 = vmulq_n_f32(vld1q_f32(in + c + 4), decay);
        vst1q_f32(row + c, r0);
        vst1q_f32(row + c + 4, r1);
        a0 = vfmaq_f32(a0, r0, vld1q_f32(k + c));
        a1 = vfmaq_f32(a1, r1, vld1q_f32(k + c + 4));
    }
    const float u = vaddvq_f32(vaddq_f32(a0, a1));
    const float32x4_t d = vdupq_n_f32((vj - u) * beta);
    a0 = a1 = vdupq_n_f32(0.0f);
    for (int c = 0; c < dk; c += 8) {
        const float32x4_t r0 = vfmaq_f32(vld1q_f32(row + c), vld1q_f32(k + c), d);
        const float32x4_t r1 = vfmaq_f32(vld1q_f32(row + c + 4), vld1q_f32(k + c + 4), d);
        vst1q_f32(row + c, r0);
        vst1q_f32(row + c + 4, r1);
        a0 = vfmaq_f32(a0, r0, vld1q_f32(q + c));
        a1 = vfmaq_f32(a1, r1, vld1q_f32(q + c + 4));
    }
    return vaddvq_f32(vaddq_f32(a0, a1));
}

bool bs_gdn_head_simd(const bs_gdn_head *h) {
    if (h->n < 1 || bs_cpu_level() < BS_CPU_NEON || h->dk % 8) return false;
    const int dk = h->dk, dv = h->dv;
    for (int t = 0; t < h->n; t++) {
        const float *q = h->q + (size_t)t * h->qkv_stride, *k = h->k + (size_t)t * h->qkv_stride;
        const float *v = h->v + (size_t)t * h->qkv_stride, *in = t == 0 ? h->S_in : h->S_out;
        const float decay = expf(h->g[(size_t)t * h->gs]), beta = h->beta[(size_t)t * h->gs];
        float *o = h->o + (size_t)t * h->o_stride;
        for (int j = 0; j < dv; j++)
            o[j] = row_step_neon(h->S_out + (size_t)j * dk, in + (size_t)j * dk, k, q, decay, v[j], beta, dk) * h->scale;
    }
    return true;
}

#else

bool bs_gdn_head_simd(const bs_gdn_head *h) {
    (void)h;
    return false;
}

#endif
