/* quant_q8.c: Q8_0, Q8_1 (32-blocks, fp16 scale) and Q8_K (256-blocks, f32 scale).
 *
 * These are also the activation formats of the other weight types, and llama.cpp quantizes
 * activations differently from weights: llama-quantize (quantize_row_q8_0_ref) uses
 * id = 1/d and roundf (half away from zero), while the x86 CPU backend's quantize_row_q8_0
 * (AVX/AVX2) uses id = 127/amax and _mm256_round_ps (half to even). The two disagree on a few
 * elements per row, which is enough to move the logits, so both are kept: *_from_float is the
 * file format, *_act the activation path. Q8_K has no x86 variant: the backend calls the
 * reference quantizer (signed max, iscale = -127/max, nearest_int, bsums).
 *
 * Layouts: Q8_0 {f16 d; i8 q[32]} 34 B. Q8_1 {f16 d; f16 s = d*sum(q); i8 q[32]} 36 B.
 * Q8_K {f32 d; i8 q[256]; i16 bsums[16]} 292 B (bsums[j] = sum of q[16j..16j+15]). */
#include "formats/quant_impl.h"

#include <math.h>

enum { Q8_0_SIZE = 34, Q8_1_SIZE = 36, Q8_K_SIZE = 292 };

static float block_amax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = BS_MAX(amax, fabsf(x[j]));
    return amax;
}

/* --- Q8_0 ------------------------------------------------------------------------------------ */
void bs_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_0_SIZE) {
        float d = bs_ld_f16(b);
        for (int j = 0; j < BS_QK8; j++) dst[i * BS_QK8 + j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* llama-quantize: d = amax/127, q = roundf(x * (1/d)). */
void bs_q8_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_0_SIZE) {
        const float *x = src + i * BS_QK8;
        float d = block_amax(x, BS_QK8) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        bs_st_f16(b, d);
        for (int j = 0; j < BS_QK8; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* x86 backend: d = amax/127 stored as fp16, q = round_half_even(x * (127/amax)). rintf rounds
 * in the current mode, which is the default round-to-nearest-even (never changed here).
 * Returns sum(q); *d gets the f32 scale before its fp16 rounding. */
static int act_q8_block(const float *x, float *d, int8_t *q) {
    float amax = block_amax(x, BS_QK8);
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    *d = amax / 127.0f;
    for (int j = 0; j < BS_QK8; j++) {
        q[j] = (int8_t)rintf(x[j] * id);
        sum += q[j];
    }
    return sum;
}

void bs_q8_0_act(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_0_SIZE) {
        float d;
        act_q8_block(src + i * BS_QK8, &d, (int8_t *)(b + 2));
        bs_st_f16(b, d);
    }
}

/* ggml_vec_dot_q8_0_q8_0 AVX2 branch (and llamafile's tinyBLAS for Q8_0, same arithmetic):
 * lanes += fma(d_w * d_a, lane dot), reduced by bs_hsum8. */
void bs_q8_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / BS_QK8; i++, x += Q8_0_SIZE, y += Q8_0_SIZE) {
        bs_lanes_i8((const int8_t *)(x + 2), (const int8_t *)(y + 2), lane);
        float d = bs_ld_f16(x) * bs_ld_f16(y);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = bs_hsum8(acc);
}

/* --- Q8_1 ------------------------------------------------------------------------------------ */
void bs_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_1_SIZE) {
        float d = bs_ld_f16(b);
        for (int j = 0; j < BS_QK8; j++) dst[i * BS_QK8 + j] = (float)(int8_t)b[4 + j] * d;
    }
}

/* quantize_row_q8_1_ref: as Q8_0's reference, plus s = fp16(sum(q) * d). */
void bs_q8_1_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_1_SIZE) {
        const float *x = src + i * BS_QK8;
        float d = block_amax(x, BS_QK8) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        bs_st_f16(b, d);
        for (int j = 0; j < BS_QK8; j++) {
            int8_t q = (int8_t)roundf(x[j] * id);
            b[4 + j] = (uint8_t)q;
            sum += q;
        }
        bs_st_f16(b + 2, (float)sum * d);
    }
}

/* x86 quantize_row_q8_1: the Q8_0 activation rounding, plus s = fp16(d * sum(q)). */
void bs_q8_1_act(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q8_1_SIZE) {
        float d;
        int sum = act_q8_block(src + i * BS_QK8, &d, (int8_t *)(b + 4));
        bs_st_f16(b, d);
        bs_st_f16(b + 2, d * (float)sum);
    }
}

/* Q8_1 as a weight has no ggml kernel; same order as Q8_0. */
void bs_q8_1_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / BS_QK8; i++, x += Q8_1_SIZE, y += Q8_1_SIZE) {
        bs_lanes_i8((const int8_t *)(x + 4), (const int8_t *)(y + 4), lane);
        float d = bs_ld_f16(x) * bs_ld_f16(y);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = bs_hsum8(acc);
}

/* --- Q8_K ------------------------------------------------------------------------------------ */
void bs_q8_k_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += Q8_K_SIZE) {
        float d = bs_ld_f32(b);
        for (int j = 0; j < BS_QK_K; j++) dst[i * BS_QK_K + j] = d * (float)(int8_t)b[4 + j];
    }
}

/* quantize_row_q8_K_ref. The scale follows the element of largest magnitude with its sign
 * (iscale = -127/max), so that element maps to -127 and the other side can reach +127 at most
 * (clamped). An all-zero block stores d = 0 and zero quants; ggml leaves its bsums unwritten,
 * here they are zero. */
void bs_q8_k_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += Q8_K_SIZE) {
        const float *x = src + i * BS_QK_K;
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < BS_QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        memset(b, 0, Q8_K_SIZE);
        if (amax == 0.0f) continue;
        float iscale = -127.0f / max;
        for (int j = 0; j < BS_QK_K; j++) b[4 + j] = (uint8_t)(int8_t)BS_MIN(127, bs_nearest_int(iscale * x[j]));
        for (int g = 0; g < BS_QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += (int8_t)b[4 + 16 * g + j];
            int16_t s16 = (int16_t)sum;
            memcpy(b + 4 + BS_QK_K + 2 * g, &s16, 2);
        }
        bs_st_f32(b, 1.0f / iscale);
    }
}

void bs_q8_k_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / BS_QK_K; i++, x += Q8_K_SIZE, y += Q8_K_SIZE) {
        int sumi = 0;
        for (int j = 0; j < BS_QK_K; j++) sumi += (int8_t)x[4 + j] * (int8_t)y[4 + j];
        sumf += (float)sumi * (bs_ld_f32(x) * bs_ld_f32(y));
    }
    *s = sumf;
}
