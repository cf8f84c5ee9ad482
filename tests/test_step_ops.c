/* test_step_ops.c: the SIMD kernels of the non-matmul part of a step (ops_simd.c, gdn_simd.c)
 * at every dispatch level this CPU has: accuracy against double-precision references, special
 * values, and the invariance speculative verification relies on (an element's or a token's
 * result never depends on how many share the call). */
/* GCC 12's aarch64 vectorizer crashes (internal compiler error in vect_transform_reduction) on
 * this file's double-precision reference reductions, which need not be vectorized. */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif
#include "cpu/attn_simd.h"
#include "cpu/cpu_features.h"
#include "cpu/gdn_simd.h"
#include "cpu/compute.h"
#include "test.h"
#include "io/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float frand(float lo, float hi) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* relative error allowed for the vector exp path: a few ulp of float */
#define ELEM_TOL 4e-7

static void check_elementwise(void) {
    enum { N = 1000 };
    static float x[N], y[N], d[N];
    for (int i = 0; i < N; i++) { x[i] = frand(-30, 30); y[i] = frand(-2, 2); }
    bs_silu_mul(d, x, y, N);
    bs_sigmoid_mul(y, x, 0);   /* n = 0 is a no-op */
    double worst = 0;
    for (int i = 0; i < N; i++) {
        const double ref = (double)x[i] / (1.0 + exp(-(double)x[i])) * (double)y[i];
        const double err = fabs(d[i] - ref) / fmax(fabs(ref), 1e-30);
        if (err > worst) worst = err;
    }
    CHECKF(worst < ELEM_TOL, "silu_mul worst relative error %g", worst);

    /* every prefix length gives the same bits per element as the long call */
    for (int n = 1; n <= 40; n++) {
        float part[40];
        bs_silu_mul(part, x, y, (size_t)n);
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= same_bits(part[i], d[i]);
        CHECKF(ok, "silu_mul of length %d differs from the long call", n);
        float g[40];
        memcpy(g, y, sizeof g);
        bs_sigmoid_mul(g, x + 100, (size_t)n);
        float gl[40];
        memcpy(gl, y, sizeof gl);
        bs_sigmoid_mul(gl, x + 100, 40);
        ok = 1;
        for (int i = 0; i < n; i++) ok &= same_bits(g[i], gl[i]);
        CHECKF(ok, "sigmoid_mul of length %d differs", n);
    }
    worst = 0;
    float g[N];
    memcpy(g, y, sizeof g);
    bs_sigmoid_mul(g, x, N);
    for (int i = 0; i < N; i++) {
        const double ref = (double)y[i] / (1.0 + exp(-(double)x[i]));
        const double err = fabs(g[i] - ref) / fmax(fabs(ref), 1e-30);
        if (err > worst) worst = err;
    }
    CHECKF(worst < ELEM_TOL, "sigmoid_mul worst relative error %g", worst);

    /* special values: silu(0) = 0, large |x|, infinities, NaN propagate as the scalar code does */
    const float sx[] = {0.0f, -0.0f, 100.0f, -100.0f, 1e30f, -1e30f, INFINITY, NAN, 88.0f, -88.0f};
    float so[10], one[10];
    for (int i = 0; i < 10; i++) one[i] = 1.0f;
    bs_silu_mul(so, sx, one, 10);
    CHECK(so[0] == 0.0f && so[1] == 0.0f);
    CHECK(fabsf(so[2] - 100.0f) < 1e-4f && fabsf(so[3]) < 1e-30f);
    CHECK(so[4] == 1e30f && so[5] == 0.0f && so[6] == INFINITY && isnan(so[7]));
    CHECK(fabsf(so[8] - 88.0f) < 1e-4f && fabsf(so[9]) < 1e-30f);
    float sg[10];
    for (int i = 0; i < 10; i++) sg[i] = 2.0f;
    bs_sigmoid_mul(sg, sx, 10);
    CHECK(sg[0] == 1.0f && sg[4] == 2.0f && sg[5] == 0.0f && sg[6] == 2.0f && isnan(sg[7]));
}

static void check_rmsnorm(void) {
    for (int n = 1; n <= 300; n += 37) {
        float x[300], w[300], y[300];
        for (int i = 0; i < n; i++) { x[i] = frand(-3, 3); w[i] = frand(0.5f, 1.5f); }
        bs_rmsnorm(y, x, w, n, 1e-6f);
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
        const double sc = 1.0 / sqrt(ss / n + 1e-6);
        double worst = 0;
        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(y[i] - x[i] * sc * w[i]) / fabs(x[i] * sc * w[i] + 1e-30));
        CHECKF(worst < 1e-6, "rmsnorm n=%d worst relative error %g", n, worst);
    }
}

/* softmax against double, with -inf entries (masked logits), one all--inf row, awkward lengths
 * (tails of every size), and a row copied into a longer one keeping its bits where it is. */
static void check_softmax(void) {
    for (int n = 1; n <= 70; n += (n < 20 ? 1 : 7)) {
        float x[80], y[80];
        for (int i = 0; i < n; i++) x[i] = i % 5 == 3 ? -INFINITY : frand(-40, 40);
        if (n % 5 == 4) x[0] = 3.0f;   /* at least one finite value */
        memcpy(y, x, sizeof x);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, x[i]);
        for (int i = 0; i < n; i++) sum += x[i] == -INFINITY ? 0.0 : exp((double)x[i] - mx);
        bs_softmax(y, n);
        double worst = 0, total = 0;
        for (int i = 0; i < n; i++) {
            const double ref = mx == -INFINITY || x[i] == -INFINITY ? 0.0 : exp((double)x[i] - mx) / sum;
            /* x - max is rounded in float: exp inherits |x - max| * 2^-24 of relative error */
            const double tol = 1e-6 + (mx - x[i]) * 6e-8;
            if (ref > 1e-30) worst = fmax(worst, fabs(y[i] - ref) / ref / tol);
            CHECKF(x[i] != -INFINITY || y[i] == 0.0f, "softmax n=%d: -inf gave %g", n, y[i]);
            total += y[i];
        }
        CHECKF(worst < 1.0, "softmax n=%d worst error %g of its bound", n, worst);
        CHECKF(mx == -INFINITY || fabs(total - 1.0) < 1e-5, "softmax n=%d sums to %.9f", n, total);
    }
    float z[13];
    for (int i = 0; i < 13; i++) z[i] = -INFINITY;
    bs_softmax(z, 13);
    int zeros = 0;
    for (int i = 0; i < 13; i++) zeros += z[i] == 0.0f;
    CHECK_EQ_INT(zeros, 13);
}

/* Double-precision gated delta rule for one head (qwen35-arch.md §2.5). */
static void gdn_ref(double *S, const float *q, const float *k, const float *v, float g, float beta,
                    float scale, double *o, int dk, int dv) {
    const double decay = exp((double)g);
    for (int j = 0; j < dv; j++) {
        double u = 0, r = 0;
        for (int i = 0; i < dk; i++) { S[j * dk + i] *= decay; u += S[j * dk + i] * k[i]; }
        const double d = (v[j] - u) * beta;
        for (int i = 0; i < dk; i++) { S[j * dk + i] += k[i] * d; r += S[j * dk + i] * q[i]; }
        o[j] = r * scale;
    }
}

static void check_gdn(int dk, int dv, int n) {
    const size_t ss = (size_t)dk * dv, stride = (size_t)2 * dk + dv;
    float *S0 = malloc(ss * sizeof(float)), *S1 = malloc(ss * sizeof(float) + 64), *S2 = malloc(ss * sizeof(float));
    float *qkv = malloc((size_t)n * stride * sizeof(float)), *o = malloc((size_t)n * dv * sizeof(float));
    float *o1 = malloc((size_t)dv * sizeof(float)), g[8], beta[8];
    double *Sr = malloc(ss * sizeof(double)), *orf = malloc((size_t)dv * sizeof(double));
    for (size_t i = 0; i < ss; i++) Sr[i] = S0[i] = frand(-0.5f, 0.5f);
    for (int t = 0; t < n; t++) {
        float *row = qkv + (size_t)t * stride;
        for (int p = 0; p < 2; p++) {   /* q and k L2-normed as the model feeds them */
            double nn = 0;
            for (int i = 0; i < dk; i++) { row[p * dk + i] = frand(-1, 1); nn += row[p * dk + i] * row[p * dk + i]; }
            for (int i = 0; i < dk; i++) row[p * dk + i] /= (float)sqrt(nn);
        }
        for (int j = 0; j < dv; j++) row[2 * dk + j] = frand(-1, 1);
        g[t] = frand(-2, 0);
        beta[t] = frand(0, 1);
    }
    const float scale = 1.0f / sqrtf((float)dk);
    float *Sout = S1 + 3;   /* misaligned on purpose: the streaming copy must cope */
    bs_gdn_head h = {S0, Sout, qkv, qkv + dk, qkv + 2 * dk, stride, g, beta, 1, o, (size_t)dv, n, dk, dv, scale};
    if (!bs_gdn_head_simd(&h)) { CHECK(bs_cpu_level() == BS_CPU_SCALAR); goto out; }

    /* against float64, token by token */
    double worst = 0;
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (size_t)t * stride;
        gdn_ref(Sr, row, row + dk, row + 2 * dk, g[t], beta[t], scale, orf, dk, dv);
        for (int j = 0; j < dv; j++) worst = fmax(worst, fabs(o[(size_t)t * dv + j] - orf[j]));
    }
    for (size_t i = 0; i < ss; i++) worst = fmax(worst, fabs(Sout[i] - Sr[i]));
    CHECKF(worst < 1e-5, "gdn dk=%d dv=%d n=%d: worst abs error %g vs float64", dk, dv, n, worst);

    /* n tokens in one call == n one-token calls chained, bit for bit */
    memcpy(S2, S0, ss * sizeof(float));
    int same = 1;
    for (int t = 0; t < n; t++) {
        bs_gdn_head h1 = {S2, NULL, qkv + (size_t)t * stride, qkv + (size_t)t * stride + dk,
                          qkv + (size_t)t * stride + 2 * dk, stride, g + t, beta + t, 1, o1, (size_t)dv, 1, dk, dv, scale};
        float *next = malloc(ss * sizeof(float));
        h1.S_out = next;
        CHECK(bs_gdn_head_simd(&h1));
        for (int j = 0; j < dv; j++) same &= same_bits(o1[j], o[(size_t)t * dv + j]);
        memcpy(S2, next, ss * sizeof(float));
        free(next);
    }
    for (size_t i = 0; i < ss; i++) same &= same_bits(S2[i], Sout[i]);
    CHECKF(same, "gdn dk=%d dv=%d: %d tokens at once differ from one at a time", dk, dv, n);
out:
    free(S0); free(S1); free(S2); free(qkv); free(o); free(o1); free(Sr); free(orf);
}

/* QK scores and the weighted V sum of one KV head against float64, f16 and f32 caches, and a
 * query's results the same alone as in its group. */
static void check_attention(int D, int group, int n_kv, bool f16) {
    const size_t esz = f16 ? 2 : 4, row = (size_t)D * esz + 8 * esz;   /* padded rows */
    uint8_t *kc = malloc((size_t)n_kv * row), *vc = malloc((size_t)n_kv * row);
    float *kf = malloc((size_t)n_kv * D * sizeof(float)), *vf = malloc((size_t)n_kv * D * sizeof(float));
    float *q = malloc((size_t)group * 2 * D * sizeof(float)), *sc = malloc((size_t)group * n_kv * sizeof(float));
    float *w = malloc((size_t)group * n_kv * sizeof(float)), *out = malloc((size_t)group * D * sizeof(float));
    float *one = malloc((size_t)D * sizeof(float)), *s1 = malloc((size_t)n_kv * sizeof(float));
    for (int p = 0; p < n_kv; p++)
        for (int i = 0; i < D; i++) {
            float k = frand(-1, 1), v = frand(-1, 1);
            if (f16) {
                const uint16_t hk = bs_f32_to_f16(k), hv = bs_f32_to_f16(v);
                memcpy(kc + p * row + i * 2, &hk, 2);
                memcpy(vc + p * row + i * 2, &hv, 2);
                k = bs_f16_to_f32(hk);
                v = bs_f16_to_f32(hv);
            } else {
                memcpy(kc + p * row + i * 4, &k, 4);
                memcpy(vc + p * row + i * 4, &v, 4);
            }
            kf[(size_t)p * D + i] = k;
            vf[(size_t)p * D + i] = v;
        }
    for (int i = 0; i < group * 2 * D; i++) q[i] = frand(-1, 1);
    for (int i = 0; i < group * n_kv; i++) w[i] = frand(0, 1);
    const float scale = 0.0625f;
    if (!bs_attn_qk(q, (size_t)2 * D, group, kc, row, f16, n_kv, D, scale, sc, (size_t)n_kv)) {
        CHECK(bs_cpu_level() == BS_CPU_SCALAR || D % 8 != 0);
        goto out;
    }
    CHECK(bs_attn_av(w, (size_t)n_kv, group, vc, row, f16, n_kv, D, out));
    double wq = 0, wv = 0;
    for (int g = 0; g < group; g++) {
        for (int p = 0; p < n_kv; p++) {
            double r = 0;
            for (int i = 0; i < D; i++) r += (double)q[g * 2 * D + i] * kf[(size_t)p * D + i];
            wq = fmax(wq, fabs(sc[g * n_kv + p] - r * scale));
        }
        for (int i = 0; i < D; i++) {
            double r = 0;
            for (int p = 0; p < n_kv; p++) r += (double)w[g * n_kv + p] * vf[(size_t)p * D + i];
            wv = fmax(wv, fabs(out[(size_t)g * D + i] - r));
        }
    }
    CHECKF(wq < 1e-5 && wv < 1e-5 * n_kv, "attention D=%d group=%d n_kv=%d f16=%d: errors %g %g", D, group,
           n_kv, f16, wq, wv);
    /* the last query of the group alone: the same bits */
    const int g = group - 1;
    CHECK(bs_attn_qk(q + (size_t)g * 2 * D, (size_t)2 * D, 1, kc, row, f16, n_kv, D, scale, s1, (size_t)n_kv));
    CHECK(bs_attn_av(w + (size_t)g * n_kv, (size_t)n_kv, 1, vc, row, f16, n_kv, D, one));
    int same = 1;
    for (int p = 0; p < n_kv; p++) same &= same_bits(s1[p], sc[g * n_kv + p]);
    for (int i = 0; i < D; i++) same &= same_bits(one[i], out[(size_t)g * D + i]);
    CHECKF(same, "attention D=%d group=%d: a query alone differs from the same query in its group", D, group);
out:
    free(kc); free(vc); free(kf); free(vf); free(q); free(sc); free(w); free(out); free(one); free(s1);
}

int main(void) {
    for (int lv = BS_CPU_SCALAR; lv <= bs_cpu_top_level(); lv++) {
        bs_cpu_set_level(lv);
        check_elementwise();
        check_rmsnorm();
        check_softmax();
        check_gdn(128, 128, 5);
        check_gdn(16, 24, 3);
        check_gdn(48, 8, 8);
        check_gdn(8, 8, 2);
        for (int f = 0; f < 2; f++) {
            check_attention(256, 6, 37, f);
            check_attention(16, 1, 1, f);
            check_attention(48, 8, 9, f);
            check_attention(24, 3, 5, f);
        }
    }
    bs_cpu_set_level(-1);
    return test_summary("test_step_ops");
}
