/* quant_q1_0.c: Q1_0 (ggml id 41), the 1-bit format of Bonsai-27B.
 *
 * Block of 128 weights, 18 bytes: fp16 d, then 16 bytes of sign bits, weight j in bit j%8 of
 * byte j/8 (LSB first). Bit set = +d, clear = -d; there is no zero.
 * Quantizer (quantize_row_q1_0_ref): d = sum|w| / 128 summed in f32 in element order, bit =
 * (w >= 0), so 0.0 becomes +d. For weights that already are ±s per block (QAT) this is
 * lossless: the sum of 128 fp16 magnitudes is exact in f32.
 * Dot product with Q8_0 activations (ggml_vec_dot_q1_0_q8_0_generic): one Q1_0 block spans four
 * Q8_0 blocks; sum_b d_w * (sum_{k<4} d_a[k] * sum_j ±q). */
#include "quant_impl.h"

#include <math.h>

enum { QK1 = 128, Q1_SIZE = 18, Q8_0_SIZE = 34 };

void bs_q1_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK1; i++, b += Q1_SIZE) {
        float d = bs_ld_f16(b);
        for (int j = 0; j < QK1; j++) dst[i * QK1 + j] = (b[2 + j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

void bs_q1_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK1; i++, b += Q1_SIZE) {
        const float *x = src + i * QK1;
        float sum = 0.0f;
        for (int j = 0; j < QK1; j++) sum += fabsf(x[j]);
        bs_st_f16(b, sum / QK1);
        memset(b + 2, 0, QK1 / 8);
        for (int j = 0; j < QK1; j++)
            if (x[j] >= 0.0f) b[2 + j / 8] |= (uint8_t)(1u << (j % 8));
    }
}

void bs_q1_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK1; i++, x += Q1_SIZE) {
        float sumb = 0.0f;
        for (int k = 0; k < 4; k++, y += Q8_0_SIZE) {
            int sumi = 0;
            for (int j = 0; j < 32; j++) {
                int q = (int8_t)y[2 + j], e = 32 * k + j;
                sumi += (x[2 + e / 8] >> (e % 8)) & 1 ? q : -q;
            }
            sumb += bs_ld_f16(y) * (float)sumi;
        }
        sumf += bs_ld_f16(x) * sumb;
    }
    *s = sumf;
}
