/* quant_ptq1_0.c: PrismML's PTQ1_0 (GGUF id 143), the base-3 ternary format of the Bonsai 2
 * files: TQ1_0's trit packing with one fp16 scale per 128 weights.
 *
 * Block of 128 weights in 28 bytes {u8 qs[24]; u8 qh[2]; f16 d}, d last (byte 26). A byte holds
 * 5 trits t0..t4 (qh: 4) as ceil(v * 256 / 243), v = t0*81 + t1*27 + t2*9 + t3*3 + t4 (qh's v is
 * t0*27 + t1*9 + t2*3 + t3, times 3 once more); trit n of byte q is ((u8)(q * 3^n) * 3) >> 8,
 * in 0..2, value (t - 1) * d. Element order, in three stages:
 *   trit n (n < 5) of qs[m]      (m < 16): element      16n + m
 *   trit n (n < 5) of qs[16 + m] (m < 8):  element 80 +  8n + m
 *   trit n (n < 4) of qh[h]      (h < 2):  element 120 + 2n + h
 * Quantizer (as upstream TQ1_0's reference): d = max|x|, t = lroundf(x * (1/d)) + 1 (half away
 * from zero, clamped to 0..2). Lossless for {-s, 0, +s} blocks, so PQ2_0 -> PTQ1_0 keeps every
 * ternary block's codes and d.
 * Dot product with Q8_0 activations in bs_q2_0_dot's float order (an integer sum per 32-element
 * activation block, sumb += d_a * sumi, sumf = fma(d_w, sumb, sumf) per weight block): a PTQ1_0
 * row and the PQ2_0 row of the same codes and d give the same bits, which is what lets the model
 * loader run PTQ1_0 weights through the PQ2_0 kernels (bs_ptq1_0_to_pq2_0). */
#include "formats/quant.h"
#include "formats/quant_impl.h"

#include <math.h>
#include <pthread.h>

enum { QK = 128, PTQ1_SIZE = 28, PQ2_SIZE = 34, Q8_0_SIZE = 34, QS = 24, QH = 2, D_AT = 26 };
/* Trit (0, 1, 2) of every element of a block, in element order (stages of 16 and 8 bytes, qh 2). */
static void block_trits(const uint8_t *b, uint8_t t[QK]) { bs_trits_staged(b, 16, 8, QH, t); }

void bs_ptq1_0_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    uint8_t t[QK];
    for (int64_t i = 0; i < n / QK; i++, b += PTQ1_SIZE) {
        float d = bs_ld_f16(b + D_AT);
        block_trits(b, t);
        for (int j = 0; j < QK; j++) dst[i * QK + j] = (float)((int)t[j] - 1) * d;
    }
}

void bs_ptq1_0_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    int t[QK];
    for (int64_t i = 0; i < n / QK; i++, b += PTQ1_SIZE) {
        const float *x = src + i * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = BS_MAX(amax, fabsf(x[j]));
        float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        for (int j = 0; j < QK; j++) {
            long c = lroundf(x[j] * id) + 1;
            t[j] = (int)(c < 0 ? 0 : c > 2 ? 2 : c);
        }
        bs_trits_pack_staged(t, 16, 8, QH, b);
        bs_st_f16(b + D_AT, amax);
    }
}

void bs_ptq1_0_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    uint8_t t[QK];
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QK; i++, x += PTQ1_SIZE) {
        block_trits(x, t);
        float sumb = 0.0f;
        for (int k = 0; k < QK / 32; k++, y += Q8_0_SIZE) {
            int sumi = 0;
            for (int j = 0; j < 32; j++) sumi += ((int)t[32 * k + j] - 1) * (int8_t)y[2 + j];
            sumb += bs_ld_f16(y) * (float)sumi;
        }
        sumf = fmaf(bs_ld_f16(x + D_AT), sumb, sumf);   /* as bs_q2_0_dot */
    }
    *s = sumf;
}

/* Trit n of every byte value, for the transcoder (the loader runs it over every weight). */
static uint8_t trit_lut[256][5];
static pthread_once_t trit_once = PTHREAD_ONCE_INIT;
static void init_trit_lut(void) {
    for (int b = 0; b < 256; b++)
        for (int n = 0; n < 5; n++) trit_lut[b][n] = (uint8_t)bs_trit((uint8_t)b, n);
}

/* PQ2_0 byte k holds elements 4k..4k+3: in qs's stages (elements 16n + m, then 80 + 8n + m)
 * four consecutive elements are trit n of four consecutive bytes; in qh (120 + 2n + h) they are
 * trits n and n + 1 of its two bytes. */
static uint8_t four(const uint8_t *q, int n) {
    return (uint8_t)(trit_lut[q[0]][n] | trit_lut[q[1]][n] << 2 | trit_lut[q[2]][n] << 4 | trit_lut[q[3]][n] << 6);
}

void bs_ptq1_0_to_pq2_0(const void *src, void *dst, int64_t n) {
    pthread_once(&trit_once, init_trit_lut);
    const uint8_t *b = src;
    uint8_t *o = dst;
    for (int64_t i = 0; i < n / QK; i++, b += PTQ1_SIZE, o += PQ2_SIZE) {
        o[0] = b[D_AT];
        o[1] = b[D_AT + 1];
        uint8_t *c = o + 2;
        for (int k = 0; k < 20; k++) c[k] = four(b + 4 * (k % 4), k / 4);            /* elements 0..79 */
        for (int k = 20; k < 30; k++) c[k] = four(b + 16 + 4 * (k % 2), (k - 20) / 2); /* 80..119 */
        for (int k = 30; k < 32; k++) {                                                /* 120..127 */
            const int n0 = 2 * (k - 30);
            const uint8_t h0 = b[QS], h1 = b[QS + 1];
            c[k] = (uint8_t)(trit_lut[h0][n0] | trit_lut[h1][n0] << 2 | trit_lut[h0][n0 + 1] << 4 | trit_lut[h1][n0 + 1] << 6);
        }
    }
}
