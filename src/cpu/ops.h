/* ops.h: the element-wise and row operations of the forward pass, written to follow ggml's CPU
 * arithmetic where that matters for matching llama.cpp (qwen35-arch.md §9): RMS/L2 norms sum
 * squares in double, softplus/sigmoid/silu use expf/logf as ggml's scalar code does, RoPE
 * accumulates theta by repeated float multiplication.
 *
 * With AVX2 / AVX-512 (ops_simd.h) the norms sum in a vector order and silu / sigmoid use a
 * vector exp (about 1 ulp): element results never depend on the array length, so a batch of rows
 * gives the bits of those rows one at a time.
 *
 * Reductions (bs_dot) use a fixed set of partial sums in a fixed order, so the result is the same
 * whatever the compiler vectorizes: a rollback that replays the recurrence gets identical bits. */
#ifndef BS_OPS_H
#define BS_OPS_H

#include <math.h>
#include <stddef.h>

static inline float bs_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float bs_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* ggml's op_softplus: identity above 20 to avoid overflow. */
static inline float bs_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* Sum of a[i]*b[i] with 8 partial sums (fixed order, vectorizable). */
float bs_dot(const float *a, const float *b, int n);

/* y = (x * 1/sqrtf(mean(x^2) + eps)) * w; w may be NULL (no weight). y may alias x. */
void bs_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* x /= max(||x||_2, eps) in place (ggml_l2_norm). */
void bs_l2norm(float *x, int n, float eps);
/* dst[i] = silu(x[i]) * y[i] (SwiGLU, the GDN output gate); y NULL: silu(x[i]). dst may alias
 * x or y. */
void bs_silu_mul(float *dst, const float *x, const float *y, size_t n);
/* dst[i] *= sigmoid(g[i]) (attention output gate). */
void bs_sigmoid_mul(float *dst, const float *g, size_t n);
/* Softmax in place over n values (-INFINITY entries get 0): exp in float, sum in double. */
void bs_softmax(float *x, int n);

/* RoPE tables for one position: cs[2*i] = cos(theta_i), cs[2*i+1] = sin(theta_i), i < n_rot/2.
 * sections: the qwen35 interleaved-mrope sections (GGUF rope.dimension_sections); text tokens
 * carry the position in the t/h/w streams and 0 in the fourth, so pairs that IMROPE maps to the
 * fourth stream get theta 0. NULL or all-zero sections: plain NeoX (every pair uses pos). */
void bs_rope_cache(float *cs, int pos, int n_rot, float base, const int sections[4]);
/* The same for 4-stream M-RoPE positions (t, h, w, e): image rows carry (p, p + y, p + x, 0).
 * Without sections every pair uses pos[0]. */
void bs_rope_cache4(float *cs, const int pos[4], int n_rot, float base, const int sections[4]);
/* NeoX rotation of the first n_rot dims of one head vector: pairs (i, i + n_rot/2). */
void bs_rope_neox(float *x, const float *cs, int n_rot);

#endif
