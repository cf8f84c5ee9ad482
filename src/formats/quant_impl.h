/* quant_impl.h: codec functions of the quant_<family>.c files, referenced by the table in
 * quant.c. Not for use outside the format code: go through bs_type_get().
 *
 * Naming: bs_<type>_to_float (dequantize), bs_<type>_from_float (llama-quantize's reference
 * quantizer, quantize_row_*_ref), bs_<type>_act (the activation quantizer of llama.cpp's x86
 * CPU backend, where it differs from the reference one), bs_<type>_dot (scalar dot product
 * against the type's vec_dot_type, in the float order of the x86 kernel llama.cpp ran for the
 * fixtures where that is known: Q1_0, Q2_0, Q4_0, Q4_1, Q8_0, Q6_K; see bs_hsum8 below). */
#ifndef BS_QUANT_IMPL_H
#define BS_QUANT_IMPL_H
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "io/util.h"

/* The reference quantizers must round exactly like ggml's, which is compiled without fused
 * multiply-add contraction; GCC in ISO C mode never contracts, clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Block sizes shared by the codecs. */
#define BS_QK8 32     /* Q4_0, Q4_1, Q8_0, Q8_1 */
#define BS_QK_K 256   /* K-quants and TQ */

/* Little-endian fp16 field access inside a byte block (blocks are not aligned). */
static inline float bs_ld_f16(const uint8_t *p) { return bs_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static inline void bs_st_f16(uint8_t *p, float v) {
    uint16_t h = bs_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}
static inline float bs_ld_f32(const uint8_t *p) { float f; memcpy(&f, p, 4); return f; }
static inline void bs_st_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }

/* ggml's nearest_int: round half to even through the 1.5*2^23 trick (|v| < 2^22). */
static inline int bs_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* llama.cpp's x86 AVX2 dot kernels (the ones that produced the fixtures' logits) keep 8 float
 * lanes per output: lane l takes the integer dot product of elements 4l..4l+3 of each 32-element
 * group (maddubs + madd, or dpbusd), converted to float and accumulated with a fused
 * multiply-add; the lanes are then reduced as ggml's hsum_float_8 does. The scalar reference
 * dots follow the same order (fmaf where the kernel fuses) so that they give llama.cpp's bits. */
static inline void bs_lanes_i8(const int8_t *w, const int8_t *a, int32_t lane[8]) {
    for (int l = 0; l < 8; l++)
        lane[l] = w[4 * l] * a[4 * l] + w[4 * l + 1] * a[4 * l + 1] + w[4 * l + 2] * a[4 * l + 2] +
                  w[4 * l + 3] * a[4 * l + 3];
}
static inline float bs_hsum8(const float v[8]) {
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/* quant_float.c */
void bs_f32_to_float(const void *src, float *dst, int64_t n);
void bs_f32_from_float(const float *src, void *dst, int64_t n);
void bs_f32_dot(int64_t n, float *s, const void *w, const void *a);
void bs_f16_to_float(const void *src, float *dst, int64_t n);
void bs_f16_from_float(const float *src, void *dst, int64_t n);
void bs_f16_dot(int64_t n, float *s, const void *w, const void *a);
void bs_bf16_to_float(const void *src, float *dst, int64_t n);
void bs_bf16_from_float(const float *src, void *dst, int64_t n);
void bs_bf16_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_q8.c */
void bs_q8_0_to_float(const void *src, float *dst, int64_t n);
void bs_q8_0_from_float(const float *src, void *dst, int64_t n);
void bs_q8_0_act(const float *src, void *dst, int64_t n);
void bs_q8_0_dot(int64_t n, float *s, const void *w, const void *a);
void bs_q8_1_to_float(const void *src, float *dst, int64_t n);
void bs_q8_1_from_float(const float *src, void *dst, int64_t n);
void bs_q8_1_act(const float *src, void *dst, int64_t n);
void bs_q8_1_dot(int64_t n, float *s, const void *w, const void *a);
void bs_q8_k_to_float(const void *src, float *dst, int64_t n);
void bs_q8_k_from_float(const float *src, void *dst, int64_t n);
void bs_q8_k_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_q1_0.c */
void bs_q1_0_to_float(const void *src, float *dst, int64_t n);
void bs_q1_0_from_float(const float *src, void *dst, int64_t n);
void bs_q1_0_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_q2_0.c: legacy / PQ2_0 128-group and mainline 64-group */
void bs_q2_0_to_float(const void *src, float *dst, int64_t n);
void bs_q2_0_from_float(const float *src, void *dst, int64_t n);
void bs_q2_0_dot(int64_t n, float *s, const void *w, const void *a);
void bs_q2_0_g64_to_float(const void *src, float *dst, int64_t n);
void bs_q2_0_g64_from_float(const float *src, void *dst, int64_t n);
void bs_q2_0_g64_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_q4.c */
void bs_q4_0_to_float(const void *src, float *dst, int64_t n);
void bs_q4_0_from_float(const float *src, void *dst, int64_t n);
void bs_q4_0_dot(int64_t n, float *s, const void *w, const void *a);
void bs_q4_1_to_float(const void *src, float *dst, int64_t n);
void bs_q4_1_from_float(const float *src, void *dst, int64_t n);
void bs_q4_1_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_q6_k.c */
void bs_q6_k_to_float(const void *src, float *dst, int64_t n);
void bs_q6_k_from_float(const float *src, void *dst, int64_t n);
void bs_q6_k_dot(int64_t n, float *s, const void *w, const void *a);

/* quant_tq.c */
void bs_tq1_0_to_float(const void *src, float *dst, int64_t n);
void bs_tq1_0_from_float(const float *src, void *dst, int64_t n);
void bs_tq1_0_dot(int64_t n, float *s, const void *w, const void *a);
void bs_tq2_0_to_float(const void *src, float *dst, int64_t n);
void bs_tq2_0_from_float(const float *src, void *dst, int64_t n);
void bs_tq2_0_dot(int64_t n, float *s, const void *w, const void *a);

/* The base-3 packing TQ1_0 and PTQ1_0 share (quant_tq.c): trit n of byte q, and a block's trits
 * in element order from its stages: trit n of byte m of a stage of w bytes is element
 * 5 * (the stages before) + w * n + m; qs holds two stages of 5 trits a byte (w1, w2 bytes),
 * qh (wh bytes, after them) one of 4. */
int bs_trit(uint8_t q, int n);
void bs_trits_staged(const uint8_t *b, int w1, int w2, int wh, uint8_t *t);
/* The inverse: the trits t (0..2, element order) packed into the stages' bytes b. */
void bs_trits_pack_staged(const int *t, int w1, int w2, int wh, uint8_t *b);
/* quant_ptq1_0.c (bs_ptq1_0_to_pq2_0 is in quant.h) */
void bs_ptq1_0_to_float(const void *src, float *dst, int64_t n);
void bs_ptq1_0_from_float(const float *src, void *dst, int64_t n);
void bs_ptq1_0_dot(int64_t n, float *s, const void *w, const void *a);

#endif
