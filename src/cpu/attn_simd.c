/* attn_simd.c: see attn_simd.h. Per-function target attributes; nothing here runs unless
 * bs_cpu_level() allows (aarch64: NEON, at every level above scalar). Each cache row is loaded
 * (and widened) once and used by every query head of the group. */
#include "cpu/attn_simd.h"

#include "cpu/cpu_features.h"
#include "cpu/ops.h"
#include "cpu/ops_simd.h"
#include "io/util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512dq,avx512vl,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))

/* ---- AVX-512 -------------------------------------------------------------------------------- */

static T512 INL __m512 load16(const uint8_t *row, int i, bool f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + (size_t)i * 2)));
    return _mm512_loadu_ps((const float *)(row + (size_t)i * 4));
}

/* The 16 horizontal sums of a[0..15], lane p = sum of a[p]'s lanes: pairs interleaved within
 * 128-bit lanes, then the 128-bit lanes folded (no permute left: lane p ends up at p). */
static T512 INL __m512 sum16(const __m512 a[16]) {
    __m512 b[8], c[4];
    for (int k = 0; k < 8; k++)
        b[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        const __m512d x = _mm512_castps_pd(b[2 * k]), y = _mm512_castps_pd(b[2 * k + 1]);
        c[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    const __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
    const __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xDD));
}

/* 16 positions at a time, the last run masked: every score is one dot product summed by sum16's
 * tree for its lane, so it depends only on q and its key row, never on n_kv or on the other
 * queries (a row verified in a batch sees the exact bits of a one-row step). Per run the query
 * loop is outside; the run's rows come from L1 for every query of the group. */
static const float zero_row[BS_ATTN_MAX_D];   /* the last run's missing rows */

static T512 void qk512(const float *q, size_t qs, int group, const uint8_t *kc, size_t kv_row, bool f16,
                       int n_kv, int D, float scale, float *scores, size_t ss) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int p = 0; p < n_kv; p += 16) {
        const int m = n_kv - p < 16 ? n_kv - p : 16;
        const uint8_t *rows[16];
        for (int j = 0; j < 16; j++) rows[j] = j < m ? kc + (size_t)(p + j) * kv_row : (const uint8_t *)zero_row;
        for (int g = 0; g < group; g++) {
            __m512 acc[16];
            for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
            for (int i = 0; i < D; i += 16) {
                const __m512 qv = _mm512_loadu_ps(q + g * qs + i);
                for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(qv, load16(rows[j], i, f16), acc[j]);
            }
            _mm512_mask_storeu_ps(scores + g * ss + p, (__mmask16)((1u << m) - 1), _mm512_mul_ps(sum16(acc), vs));
        }
    }
}

/* Per pass over the positions, NC vectors of the output row for every query of the group; more
 * vectors per pass for small groups keep more FMA chains in flight. Each output element is the
 * same ordered sum whatever NC is. */
static T512 INL void av512_nc(const float *w, size_t ss, int group, const uint8_t *vc, size_t kv_row, bool f16,
                              int n_kv, int D, float *out, const int NC) {
    for (int i = 0; i < D; i += 16 * NC) {
        const int nc = (D - i) / 16 < NC ? (D - i) / 16 : NC;
        __m512 acc[BS_ATTN_MAX_GROUP][4];
        for (int g = 0; g < group; g++)
            for (int c = 0; c < NC; c++) acc[g][c] = _mm512_setzero_ps();
        for (int p = 0; p < n_kv; p++) {
            const uint8_t *v = vc + (size_t)p * kv_row;
            __m512 vv[4];
            for (int c = 0; c < nc; c++) vv[c] = load16(v, i + 16 * c, f16);
            for (int g = 0; g < group; g++) {
                const __m512 wg = _mm512_set1_ps(w[g * ss + p]);
                for (int c = 0; c < nc; c++) acc[g][c] = _mm512_fmadd_ps(wg, vv[c], acc[g][c]);
            }
        }
        for (int g = 0; g < group; g++)
            for (int c = 0; c < nc; c++) _mm512_storeu_ps(out + (size_t)g * D + i + 16 * c, acc[g][c]);
    }
}

static T512 void av512(const float *w, size_t ss, int group, const uint8_t *vc, size_t kv_row, bool f16,
                       int n_kv, int D, float *out) {
    if (group <= 3) av512_nc(w, ss, group, vc, kv_row, f16, n_kv, D, out, 4);
    else av512_nc(w, ss, group, vc, kv_row, f16, n_kv, D, out, 2);
}

/* ---- AVX2 ----------------------------------------------------------------------------------- */

static T2 INL __m256 load8(const uint8_t *row, int i, bool f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + (size_t)i * 2)));
    return _mm256_loadu_ps((const float *)(row + (size_t)i * 4));
}

static T2 float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

static T2 void qk256(const float *q, size_t qs, int group, const uint8_t *kc, size_t kv_row, bool f16,
                     int n_kv, int D, float scale, float *scores, size_t ss) {
    for (int p = 0; p < n_kv; p++) {
        const uint8_t *k = kc + (size_t)p * kv_row;
        __m256 acc[BS_ATTN_MAX_GROUP];
        for (int g = 0; g < group; g++) acc[g] = _mm256_setzero_ps();
        for (int i = 0; i < D; i += 8) {
            const __m256 kv = load8(k, i, f16);
            for (int g = 0; g < group; g++) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * qs + i), kv, acc[g]);
        }
        for (int g = 0; g < group; g++) scores[g * ss + p] = hsum8(acc[g]) * scale;
    }
}

static T2 void av256(const float *w, size_t ss, int group, const uint8_t *vc, size_t kv_row, bool f16,
                     int n_kv, int D, float *out) {
    for (int i = 0; i < D; i += 8) {
        __m256 acc[BS_ATTN_MAX_GROUP];
        for (int g = 0; g < group; g++) acc[g] = _mm256_setzero_ps();
        for (int p = 0; p < n_kv; p++) {
            const __m256 vv = load8(vc + (size_t)p * kv_row, i, f16);
            for (int g = 0; g < group; g++) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(w[g * ss + p]), vv, acc[g]);
        }
        for (int g = 0; g < group; g++) _mm256_storeu_ps(out + (size_t)g * D + i, acc[g]);
    }
}

static int level_for(int D, int group) {
    if (group < 1 || group > BS_ATTN_MAX_GROUP || D > BS_ATTN_MAX_D) return BS_CPU_SCALAR;
    const int lv = bs_cpu_level();
    if (lv >= BS_CPU_AVX512 && D % 16 == 0) return BS_CPU_AVX512;
    if (lv >= BS_CPU_AVX2 && D % 8 == 0) return BS_CPU_AVX2;
    return BS_CPU_SCALAR;
}

bool bs_attn_qk(const float *q, size_t q_stride, int group, const void *kc, size_t kv_row, bool kv_f16,
                int n_kv, int D, float scale, float *scores, size_t ss) {
    const int lv = level_for(D, group);
    if (lv == BS_CPU_AVX512) qk512(q, q_stride, group, kc, kv_row, kv_f16, n_kv, D, scale, scores, ss);
    else if (lv == BS_CPU_AVX2) qk256(q, q_stride, group, kc, kv_row, kv_f16, n_kv, D, scale, scores, ss);
    return lv != BS_CPU_SCALAR;
}

bool bs_attn_av(const float *w, size_t ss, int group, const void *vc, size_t kv_row, bool kv_f16, int n_kv,
                int D, float *out) {
    const int lv = level_for(D, group);
    if (lv == BS_CPU_AVX512) av512(w, ss, group, vc, kv_row, kv_f16, n_kv, D, out);
    else if (lv == BS_CPU_AVX2) av256(w, ss, group, vc, kv_row, kv_f16, n_kv, D, out);
    return lv != BS_CPU_SCALAR;
}

#elif defined(__aarch64__)
#include <arm_neon.h>

/* The AVX2 kernels with two 4-float accumulators per 8 elements (D % 8 == 0); f16 rows widened
 * exactly with fcvtl. A score is one fixed-order dot of its query and key row; an output element
 * a position-ordered FMA chain, as on x86. */
static inline void load8_neon(const uint8_t *row, int i, bool f16, float32x4_t *a, float32x4_t *b) {
    if (f16) {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(row + (size_t)i * 2)));
        *a = vcvt_f32_f16(vget_low_f16(h));
        *b = vcvt_high_f32_f16(h);
        return;
    }
    *a = vld1q_f32((const float *)(row + (size_t)i * 4));
    *b = vld1q_f32((const float *)(row + (size_t)i * 4) + 4);
}

static void qk_neon(const float *q, size_t qs, int group, const uint8_t *kc, size_t kv_row, bool f16,
                    int n_kv, int D, float scale, float *scores, size_t ss) {
    for (int p = 0; p < n_kv; p++) {
        const uint8_t *k = kc + (size_t)p * kv_row;
        float32x4_t a0[BS_ATTN_MAX_GROUP], a1[BS_ATTN_MAX_GROUP];
        for (int g = 0; g < group; g++) a0[g] = a1[g] = vdupq_n_f32(0.0f);
        for (int i = 0; i < D; i += 8) {
            float32x4_t k0, k1;
            load8_neon(k, i, f16, &k0, &k1);
            for (int g = 0; g < group; g++) {
                a0[g] = vfmaq_f32(a0[g], vld1q_f32(q + g * qs + i), k0);
                a1[g] = vfmaq_f32(a1[g], vld1q_f32(q + g * qs + i + 4), k1);
            }
        }
        for (int g = 0; g < group; g++) scores[g * ss + p] = vaddvq_f32(vaddq_f32(a0[g], a1[g])) * scale;
    }
}

static void av_neon(const float *w, size_t ss, int group, const uint8_t *vc, size_t kv_row, bool f16,
                    int n_kv, int D, float *out) {
    for (int i = 0; i < D; i += 8) {
        float32x4_t a0[BS_ATTN_MAX_GROUP], a1[BS_ATTN_MAX_GROUP];
        for (int g = 0; g < group; g++) a0[g] = a1[g] = vdupq_n_f32(0.0f);
        for (int p = 0; p < n_kv; p++) {
            float32x4_t v0, v1;
            load8_neon(vc + (size_t)p * kv_row, i, f16, &v0, &v1);
            for (int g = 0; g < group; g++) {
                a0[g] = vfmaq_n_f32(a0[g], v0, w[g * ss + p]);
                a1[g] = vfmaq_n_f32(a1[g], v1, w[g * ss + p]);
            }
        }
        for (int g = 0; g < group; g++) {
            vst1q_f32(out + (size_t)g * D + i, a0[g]);
            vst1q_f32(out + (size_t)g * D + i + 4, a1[g]);
        }
    }
}

static bool neon_fits(int D, int group) {
    return group >= 1 && group <= BS_ATTN_MAX_GROUP && D <= BS_ATTN_MAX_D && D % 8 == 0 && bs_cpu_level() >= BS_CPU_NEON;
}

bool bs_attn_qk(const float *q, size_t q_stride, int group, const void *kc, size_t kv_row, bool kv_f16,
                int n_kv, int D, float scale, float *scores, size_t ss) {
    if (!neon_fits(D, group)) return false;
    qk_neon(q, q_stride, group, kc, kv_row, kv_f16, n_kv, D, scale, scores, ss);
    return true;
}
bool bs_attn_av(const float *w, size_t ss, int group, const void *vc, size_t kv_row, bool kv_f16, int n_kv,
                int D, float *out) {
    if (!neon_fits(D, group)) return false;
    av_neon(w, ss, group, vc, kv_row, kv_f16, n_kv, D, out);
    return true;
}

#else

bool bs_attn_qk(const float *q, size_t q_stride, int group, const void *kc, size_t kv_row, bool kv_f16,
                int n_kv, int D, float scale, float *scores, size_t ss) {
    (void)q; (void)q_stride; (void)group; (void)kc; (void)kv_row; (void)kv_f16; (void)n_kv; (void)D;
    (void)scale; (void)scores; (void)ss;
    return false;
}
bool bs_attn_av(const float *w, size_t ss, int group, const void *vc, size_t kv_row, bool kv_f16, int n_kv,
                int D, float *out) {
    (void)w; (void)ss; (void)group; (void)vc; (void)kv_row; (void)kv_f16; (void)n_kv; (void)D; (void)out;
    return false;
}

#endif

/* A cache row as floats: the row itself (f32) or widened into tmp (f16). */
static const float *row_f32(const uint8_t *src, int n, bool f16, float *tmp) {
    if (!f16) return (const float *)src;
    const uint16_t *h = (const uint16_t *)src;
    if (!bs_simd_f16_to_f32(tmp, h, (size_t)n))
        for (int i = 0; i < n; i++) tmp[i] = bs_f16_to_f32(h[i]);
    return tmp;
}

void bs_attn_queries(const float *q, int gn, const int *nkv, const void *kc, const void *vc, size_t kv_row,
                     bool kv_f16, int D, float *out, float *scores, size_t ss, float *tmp) {
    const uint8_t *k8 = kc, *v8 = vc;
    const float scale = 1.0f / sqrtf((float)D);
    int nmax = 0;
    for (int i = 0; i < gn; i++) nmax = nkv[i] > nmax ? nkv[i] : nmax;
    if (bs_attn_qk(q, (size_t)D, gn, kc, kv_row, kv_f16, nmax, D, scale, scores, ss)) {
        for (int i = 0; i < gn; i++) {
            bs_softmax(scores + (size_t)i * ss, nkv[i]);
            memset(scores + (size_t)i * ss + nkv[i], 0, (size_t)(nmax - nkv[i]) * sizeof(float));
        }
        if (bs_attn_av(scores, ss, gn, vc, kv_row, kv_f16, nmax, D, out)) return;
    } else {
        for (int i = 0; i < gn; i++) {
            for (int p = 0; p < nkv[i]; p++)
                scores[(size_t)i * ss + p] = bs_dot(q + (size_t)i * D, row_f32(k8 + (size_t)p * kv_row, D, kv_f16, tmp), D) * scale;
            bs_softmax(scores + (size_t)i * ss, nkv[i]);
        }
    }
    for (int i = 0; i < gn; i++) {
        float *o = out + (size_t)i * D;
        memset(o, 0, (size_t)D * sizeof(float));
        for (int p = 0; p < nkv[i]; p++) {
            const float *v = row_f32(v8 + (size_t)p * kv_row, D, kv_f16, tmp);
            const float w = scores[(size_t)i * ss + p];
            for (int e = 0; e < D; e++) o[e] += w * v[e];
        }
    }
}
