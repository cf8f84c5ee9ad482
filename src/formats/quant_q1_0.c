/* quant_q1_0.c: Q1_0 (ggml id 41), the 1-bit format of Bonsai-27B.
 *
 * Block of 128 weights, 18 bytes: fp16 d, then 16 bytes of sign bits, weight j in bit j%8 of
 * byte j/8 (LSB first). Bit set = +d, clear = -d; there is no zero.
 * Quantizer (quantize_row_q1_0_ref): d = sum|w| / 128 summed in f32 in element order, bit =
 * (w >= 0), so 0.0 becomes +d. For weights that already are ±s per block (QAT) this is
 * lossless: the sum of 128 fp16 magnitudes is exact in f32.
 * Dot product with Q8_0 activations: one Q1_0 block spans four Q8_0 blocks,
 * sum_b d_w * (sum_{k<4} d_a[k] * sum_j ±q), in the float order of the x86 AVX2 kernel. */
#include "formats/quant_impl.h"

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

/* ggml_vec_dot_q1_0_q8_0, x86 AVX2 branch: per 128-block, block lanes = d_a[0] * lanes(0), then
 * fma(d_a[k], lanes(k), block lanes) for k = 1..3; then lanes = fma(d_w, block lanes, lanes);
 * reduced by bs_hsum8 (quant_impl.h). */
void bs_q1_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / QK1; i++, x += Q1_SIZE) {
        float blk[8];
        for (int k = 0; k < 4; k++, y += Q8_0_SIZE) {
            float dy = bs_ld_f16(y);
            for (int l = 0; l < 8; l++) {
                int sum = 0;
                for (int j = 4 * l; j < 4 * l + 4; j++) {
                    int q = (int8_t)y[2 + j], e = 32 * k + j;
                    sum += (x[2 + e / 8] >> (e % 8)) & 1 ? q : -q;
                }
                blk[l] = k == 0 ? dy * (float)sum : fmaf(dy, (float)sum, blk[l]);
            }
        }
        float dx = bs_ld_f16(x);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(dx, blk[l], acc[l]);
    }
    *s = bs_hsum8(acc);
}
