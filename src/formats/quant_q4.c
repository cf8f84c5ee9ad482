/* quant_q4.c: Q4_0 and Q4_1, 4-bit 32-blocks (the DSpark drafter files are Q4_1).
 *
 * Q4_0 {f16 d; u8 qs[16]} 18 B: element j is the low nibble of qs[j], element j+16 the high
 * nibble; value (nibble - 8) * d. Reference quantizer: d = max / -8 where max is the signed
 * element of largest magnitude (the first one on ties), nibble = min(15, (int8)(x/d + 8.5)).
 * Q4_1 {f16 d; f16 m; u8 qs[16]} 20 B: value nibble * d + m. Reference quantizer:
 * d = (max - min) / 15, m = min, nibble = min(15, (int8)((x - min)/d + 0.5)).
 * In both, the division is a multiplication by id = 1/d computed from the f32 d (not the
 * stored fp16), and the (int8) cast truncates toward zero, as in ggml.
 * vec_dot_type: Q8_0 for Q4_0, Q8_1 for Q4_1 (whose s = d*sum(q) carries the m term). The dot
 * products follow llama.cpp's x86 AVX2 kernels (see bs_hsum8 in quant_impl.h). */
#include "formats/quant_impl.h"

#include <float.h>
#include <math.h>

enum { Q4_0_SIZE = 18, Q4_1_SIZE = 20, Q8_0_SIZE = 34, Q8_1_SIZE = 36 };

void bs_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q4_0_SIZE) {
        float d = bs_ld_f16(b);
        float *y = dst + i * BS_QK8;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[2 + j] & 15) - 8) * d;
            y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

void bs_q4_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q4_0_SIZE) {
        const float *x = src + i * BS_QK8;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < BS_QK8; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        bs_st_f16(b, d);
        for (int j = 0; j < 16; j++) {
            int lo = BS_MIN(15, (int8_t)(x[j] * id + 8.5f));
            int hi = BS_MIN(15, (int8_t)(x[j + 16] * id + 8.5f));
            b[2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Unpacked 4-bit values of a block in element order (low nibbles, then high), minus `off`. */
static void nibbles(const uint8_t *qs, int off, int8_t v[32]) {
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)((qs[j] & 15) - off);
        v[j + 16] = (int8_t)((qs[j] >> 4) - off);
    }
}

/* ggml_vec_dot_q4_0_q8_0, AVX2 branch: lanes += fma(d_w * d_a, lane dot). */
void bs_q4_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0};
    int8_t v[32];
    int32_t lane[8];
    for (int64_t i = 0; i < n / BS_QK8; i++, x += Q4_0_SIZE, y += Q8_0_SIZE) {
        float d = bs_ld_f16(x) * bs_ld_f16(y);
        nibbles(x + 2, 8, v);
        bs_lanes_i8(v, (const int8_t *)(y + 2), lane);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = bs_hsum8(acc);
}

void bs_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q4_1_SIZE) {
        float d = bs_ld_f16(b), m = bs_ld_f16(b + 2);
        float *y = dst + i * BS_QK8;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[4 + j] & 15) * d + m;
            y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
        }
    }
}

void bs_q4_1_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK8; i++, b += Q4_1_SIZE) {
        const float *x = src + i * BS_QK8;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < BS_QK8; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        float d = (max - min) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        bs_st_f16(b, d);
        bs_st_f16(b + 2, min);
        for (int j = 0; j < 16; j++) {
            int lo = BS_MIN(15, (int8_t)((x[j] - min) * id + 0.5f));
            int hi = BS_MIN(15, (int8_t)((x[j + 16] - min) * id + 0.5f));
            b[4 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* ggml_vec_dot_q4_1_q8_1, AVX2 branch: lanes += fma(d_w * d_a, lane dot); the m_w * s_a terms
 * go to a separate scalar sum (fused, as gcc -march=native compiles it), added at the end.
 * Verified bit-exact against the tiny-q4_1 fixture rows. */
void bs_q4_1_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0}, summs = 0.0f;
    int8_t v[32];
    int32_t lane[8];
    for (int64_t i = 0; i < n / BS_QK8; i++, x += Q4_1_SIZE, y += Q8_1_SIZE) {
        summs = fmaf(bs_ld_f16(x + 2), bs_ld_f16(y + 2), summs);
        float d = bs_ld_f16(x) * bs_ld_f16(y);
        nibbles(x + 4, 0, v);
        bs_lanes_i8(v, (const int8_t *)(y + 4), lane);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = bs_hsum8(acc) + summs;
}
