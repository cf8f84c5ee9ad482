/* ops_simd.h: AVX-512 / AVX2 (ops_simd.c) and NEON (ops_simd_neon.c) versions of the
 * element-wise and row operations of ops.h, picked at run time by ops.c (internal). Each
 * returns false when the CPU's dispatch level has no kernel, and the caller runs the scalar code.
 *
 * exp is a vector polynomial (Cody-Waite range reduction, degree-7 Taylor on |r| <= ln2/2,
 * about 1 ulp) instead of libm's expf, as ggml's own SIMD silu does. Every element goes through
 * the same vector code (short tails are padded through a buffer), so an element's result never
 * depends on the length of the array or its position in it: one row or eight, the bits agree. */
#ifndef BS_OPS_SIMD_H
#define BS_OPS_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* dst[i] = silu(x[i]) * y[i] (y NULL: silu(x[i])); dst may alias x or y. */
bool bs_simd_silu_mul(float *dst, const float *x, const float *y, size_t n);
/* dst[i] = dst[i] * sigmoid(g[i]). */
bool bs_simd_sigmoid_mul(float *dst, const float *g, size_t n);
/* sum of (float)(x[i]*x[i]) accumulated in double. */
bool bs_simd_sumsq(const float *x, int n, double *sum);
/* x = softmax(x) (the max subtracted; exp summed in double; all -inf gives zeros). */
bool bs_simd_softmax(float *x, int n);
/* y[i] = (x[i] * scale) * w[i] (w may be NULL: x[i] * scale). */
bool bs_simd_scale(float *y, const float *x, const float *w, float scale, int n);

/* IEEE half <-> float for a row with F16C (round to nearest even, the bits of util.c's scalar
 * bs_f32_to_f16 / bs_f16_to_f32 for every non-NaN value; NaN stays NaN). */
bool bs_simd_f32_to_f16(uint16_t *dst, const float *src, size_t n);
bool bs_simd_f16_to_f32(float *dst, const uint16_t *src, size_t n);

#endif
