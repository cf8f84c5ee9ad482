/* quant_q2_0.c: the 2-bit ternary format Q2_0 in both of its block sizes.
 *
 * Legacy Q2_0 (GGUF id 42 in PrismML's `prism` branch, = PQ2_0 id 142 byte for byte): 128
 * weights in 34 bytes, fp16 d then 32 bytes of 2-bit codes, weight j in bits 2*(j%4)..+1 of
 * byte j/4 (LSB first). Mainline Q2_0 (also id 42): the same codec with 64-weight, 18-byte
 * blocks. Code c decodes to (c-1)*d: {-d, 0, +d, +2d}; ternary weights never use code 3, but
 * it is decoded as +2d like ggml does.
 * Quantizer (quantize_row_q2_0_ref): d = max|w|, c = clamp(roundf(w * (1/d)) + 1, 0, 3)
 * (roundf: half away from zero). Lossless for {-s, 0, +s} blocks.
 * Dot product with Q8_0 activations (ggml_vec_dot_q2_0_q8_0_generic, which is what x86 runs
 * without AVX512-VNNI): one block spans qk/32 Q8_0 blocks; sum_b d_w * (sum_k d_a[k] *
 * sum_j (c-1)*q), the outer multiply-add fused as gcc -march=native compiles it (the inner
 * product d_a * int is exact). Bit-identical to the tiny-q2_0 / tiny-q2_0-g64 fixture rows until
 * the first activation rounding flips. */
#include "formats/quant_impl.h"

#include <math.h>

enum { Q8_0_SIZE = 34 };

static size_t block_size(int qk) { return 2 + (size_t)qk / 4; }

static void to_float(const void *src, float *dst, int64_t n, int qk) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / qk; i++, b += block_size(qk)) {
        float d = bs_ld_f16(b);
        for (int j = 0; j < qk; j++)
            dst[i * qk + j] = (float)((int)((b[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

static void from_float(const float *src, void *dst, int64_t n, int qk) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / qk; i++, b += block_size(qk)) {
        const float *x = src + i * qk;
        float amax = 0.0f;
        for (int j = 0; j < qk; j++) amax = BS_MAX(amax, fabsf(x[j]));
        float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        bs_st_f16(b, amax);
        memset(b + 2, 0, (size_t)qk / 4);
        for (int j = 0; j < qk; j++) {
            int c = (int)roundf(x[j] * id) + 1;
            c = BS_MAX(0, BS_MIN(3, c));
            b[2 + j / 4] |= (uint8_t)(c << (2 * (j % 4)));
        }
    }
}

static void dot(int64_t n, float *s, const void *w, const void *a, int qk) {
    const uint8_t *x = w, *y = a;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / qk; i++, x += block_size(qk)) {
        float sumb = 0.0f;
        for (int k = 0; k < qk / 32; k++, y += Q8_0_SIZE) {
            int sumi = 0;
            for (int j = 0; j < 32; j++) {
                int e = 32 * k + j, c = (x[2 + e / 4] >> (2 * (e % 4))) & 3;
                sumi += (c - 1) * (int8_t)y[2 + j];
            }
            sumb += bs_ld_f16(y) * (float)sumi;
        }
        sumf = fmaf(bs_ld_f16(x), sumb, sumf);   /* gcc -march=native fuses this one */
    }
    *s = sumf;
}

void bs_q2_0_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, 128); }
void bs_q2_0_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, 128); }
void bs_q2_0_dot(int64_t n, float *s, const void *w, const void *a) { dot(n, s, w, a, 128); }
void bs_q2_0_g64_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, 64); }
void bs_q2_0_g64_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, 64); }
void bs_q2_0_g64_dot(int64_t n, float *s, const void *w, const void *a) { dot(n, s, w, a, 64); }
