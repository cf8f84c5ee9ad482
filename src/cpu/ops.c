/* ops.c: see ops.h. */
#include "cpu/ops.h"
#include "cpu/compute.h"

#include <stdbool.h>

#define DOT_LANES 8

float bs_dot(const float *a, const float *b, int n) {
    float acc[DOT_LANES] = {0};
    int i = 0;
    for (; i + DOT_LANES <= n; i += DOT_LANES)
        for (int l = 0; l < DOT_LANES; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void bs_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double sum = 0.0;
    if (!bs_simd_sumsq(x, n, &sum))
        for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (bs_simd_scale(y, x, w, scale, n)) return;
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void bs_l2norm(float *x, int n, float eps) {
    double sum = 0.0;
    if (!bs_simd_sumsq(x, n, &sum))
        for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    if (bs_simd_scale(x, x, NULL, scale, n)) return;
    for (int i = 0; i < n; i++) x[i] *= scale;
}

void bs_softmax(float *x, int n) {
    if (bs_simd_softmax(x, n)) return;
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const float e = x[i] == -INFINITY ? 0.0f : expf(x[i] - max);
        x[i] = e;
        sum += (double)e;
    }
    const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* Which position stream IMROPE gives to rotation pair `pair` (ggml_mrope_cache_init): 0..2 are
 * t/h/w (all = pos for text), 3 is the extra stream (0 for text). */
static int imrope_stream(int pair, const int s[4]) {
    const int sect_dims = s[0] + s[1] + s[2] + s[3];
    const int sector = pair % sect_dims;
    if (sector % 3 == 1 && sector < 3 * s[1]) return 1;
    if (sector % 3 == 2 && sector < 3 * s[2]) return 2;
    if (sector % 3 == 0 && sector < 3 * s[0]) return 0;
    return 3;
}

void bs_rope_cache(float *cs, int pos, int n_rot, float base, const int sections[4]) {
    const int pos4[4] = {pos, pos, pos, 0};
    bs_rope_cache4(cs, pos4, n_rot, base, sections);
}

/* Every stream's angle advances by the same factor per pair, as ggml_mrope_cache_init does, so
 * text positions (p, p, p, 0) give bs_rope_cache's old single-stream bits. */
void bs_rope_cache4(float *cs, const int pos[4], int n_rot, float base, const int sections[4]) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const bool mrope = sections && sections[0] + sections[1] + sections[2] + sections[3] > 0;
    float theta[4] = {(float)pos[0], (float)pos[1], (float)pos[2], (float)pos[3]};
    if (!mrope) theta[1] = theta[2] = theta[3] = theta[0];
    for (int i = 0; i < n_rot / 2; i++) {
        const float th = theta[mrope ? imrope_stream(i, sections) : 0];
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        for (int k = 0; k < 4; k++) theta[k] *= theta_scale;
    }
}

void bs_rope_neox(float *x, const float *cs, int n_rot) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
    }
}

void bs_silu_mul(float *dst, const float *x, const float *y, size_t n) {
    if (bs_simd_silu_mul(dst, x, y, n)) return;
    for (size_t i = 0; i < n; i++) dst[i] = y ? bs_silu(x[i]) * y[i] : bs_silu(x[i]);
}

void bs_sigmoid_mul(float *dst, const float *g, size_t n) {
    if (bs_simd_sigmoid_mul(dst, g, n)) return;
    for (size_t i = 0; i < n; i++) dst[i] *= bs_sigmoid(g[i]);
}
