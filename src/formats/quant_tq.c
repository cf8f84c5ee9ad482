/* quant_tq.c: upstream ternary formats TQ1_0 (id 34) and TQ2_0 (id 35), 256-blocks.
 *
 * TQ1_0, 54 bytes {u8 qs[48]; u8 qh[4]; f16 d}: base-3 packing, 5 trits per byte, stored as
 * ceil(v * 256 / 243) for v = t0*81 + t1*27 + t2*9 + t3*3 + t4 so that trit n can be read as
 * ((u8)(q * 3^n) * 3) >> 8. Element order: trit n of qs[m] (m < 32) is element 32n + m; trit n
 * of qs[32 + m] (m < 16) is 160 + 16n + m; trit n (n < 4) of qh[j] is 240 + 4n + j (qh holds 4
 * trits shifted up by one place). Value (t - 1) * d.
 * TQ2_0, 66 bytes {u8 qs[64]; f16 d}: 2-bit codes, element 128h + 32l + m in bits 2l of
 * qs[32h + m]; value (c - 1) * d.
 * Reference quantizers: d = max|x|, t = lroundf(x * (1/d)) + 1 (half away from zero).
 * Dot products with Q8_K: exact integer sum per block times (d_a * d_w). */
#include "formats/quant_impl.h"

#include <math.h>

enum { TQ1_SIZE = 54, TQ2_SIZE = 66, Q8_K_SIZE = 292 };
static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};

int bs_trit(uint8_t q, int n) { return ((uint8_t)(q * pow3[n]) * 3) >> 8; }

void bs_trits_staged(const uint8_t *b, int w1, int w2, int wh, uint8_t *t) {
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < w1; m++) t[w1 * n + m] = (uint8_t)bs_trit(b[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < w2; m++) t[5 * w1 + w2 * n + m] = (uint8_t)bs_trit(b[w1 + m], n);
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < wh; j++) t[5 * (w1 + w2) + wh * n + j] = (uint8_t)bs_trit(b[w1 + w2 + j], n);
}

/* Trit (0, 1, 2) of every element of a TQ1_0 block, in element order. */
static void tq1_trits(const uint8_t *b, uint8_t t[BS_QK_K]) { bs_trits_staged(b, 32, 16, 4, t); }

void bs_tq1_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    uint8_t t[BS_QK_K];
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += TQ1_SIZE) {
        float d = bs_ld_f16(b + 52);
        tq1_trits(b, t);
        for (int j = 0; j < BS_QK_K; j++) dst[i * BS_QK_K + j] = (float)((int)t[j] - 1) * d;
    }
}

static int tern(float x, float id) { return (int)lroundf(x * id) + 1; }

/* `count` trits of t at `stride`, the first most significant, padded to 5 places with zeros
 * (qh's 4 trits are thus multiplied by 3), scaled to a byte with ceiling division. */
static uint8_t pack5(const int *t, int stride, int count) {
    unsigned v = 0;
    for (int n = 0; n < count; n++) v = v * 3 + (unsigned)t[n * stride];
    for (int n = count; n < 5; n++) v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

void bs_trits_pack_staged(const int *t, int w1, int w2, int wh, uint8_t *b) {
    for (int m = 0; m < w1; m++) b[m] = pack5(t + m, w1, 5);
    for (int m = 0; m < w2; m++) b[w1 + m] = pack5(t + 5 * w1 + m, w2, 5);
    for (int j = 0; j < wh; j++) b[w1 + w2 + j] = pack5(t + 5 * (w1 + w2) + j, wh, 4);
}

void bs_tq1_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += TQ1_SIZE) {
        const float *x = src + i * BS_QK_K;
        float amax = 0.0f;
        for (int j = 0; j < BS_QK_K; j++) amax = BS_MAX(amax, fabsf(x[j]));
        float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        int t[BS_QK_K];
        for (int j = 0; j < BS_QK_K; j++) t[j] = tern(x[j], id);
        bs_trits_pack_staged(t, 32, 16, 4, b);
        bs_st_f16(b + 52, amax);
    }
}

void bs_tq1_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    uint8_t t[BS_QK_K];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / BS_QK_K; i++, x += TQ1_SIZE, y += Q8_K_SIZE) {
        tq1_trits(x, t);
        int sum = 0;
        for (int j = 0; j < BS_QK_K; j++) sum += ((int)t[j] - 1) * (int8_t)y[4 + j];
        sumf += (float)sum * (bs_ld_f32(y) * bs_ld_f16(x + 52));
    }
    *s = sumf;
}

static int tq2_code(const uint8_t *b, int e) { return (b[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

void bs_tq2_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += TQ2_SIZE) {
        float d = bs_ld_f16(b + 64);
        for (int e = 0; e < BS_QK_K; e++) dst[i * BS_QK_K + e] = (float)(tq2_code(b, e) - 1) * d;
    }
}

void bs_tq2_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += TQ2_SIZE) {
        const float *x = src + i * BS_QK_K;
        float amax = 0.0f;
        for (int j = 0; j < BS_QK_K; j++) amax = BS_MAX(amax, fabsf(x[j]));
        float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        memset(b, 0, 64);
        for (int e = 0; e < BS_QK_K; e++)
            b[32 * (e / 128) + e % 32] |= (uint8_t)((tern(x[e], id) & 3) << (2 * ((e % 128) / 32)));
        bs_st_f16(b + 64, amax);
    }
}

void bs_tq2_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / BS_QK_K; i++, x += TQ2_SIZE, y += Q8_K_SIZE) {
        int sum = 0;
        for (int e = 0; e < BS_QK_K; e++) sum += (tq2_code(x, e) - 1) * (int8_t)y[4 + e];
        sumf += (float)sum * (bs_ld_f32(y) * bs_ld_f16(x + 64));
    }
    *s = sumf;
}
