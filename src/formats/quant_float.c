/* quant_float.c: F32, F16 and BF16 rows. The dot products mirror ggml's CPU vec_dot for these
 * types: the activation is first converted to the weight's own format (F16 / BF16, round to
 * nearest even), each product is formed in f32 (exact for f16*f16 and bf16*bf16) and summed in
 * double, as ggml's scalar ggml_vec_dot_f16 / _bf16 / _f32 do. */
#include "formats/quant_impl.h"

void bs_f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
void bs_f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void bs_f32_dot(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

/* Half-precision rows are read byte-wise: tensor data in a GGUF is only 32-byte aligned as a
 * whole, and rows of odd length would leave later rows misaligned for uint16_t access. */
static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void st16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }

void bs_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bs_f16_to_f32(ld16(p + 2 * i));
}
void bs_f16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) st16(p + 2 * i, bs_f32_to_f16(src[i]));
}
void bs_f16_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(bs_f16_to_f32(ld16(x + 2 * i)) * bs_f16_to_f32(ld16(y + 2 * i)));
    *s = (float)sum;
}

void bs_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bs_bf16_to_f32(ld16(p + 2 * i));
}
void bs_bf16_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) st16(p + 2 * i, bs_f32_to_bf16(src[i]));
}
void bs_bf16_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(bs_bf16_to_f32(ld16(x + 2 * i)) * bs_bf16_to_f32(ld16(y + 2 * i)));
    *s = (float)sum;
}
