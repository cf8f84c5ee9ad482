/* quant_q6_k.c: Q6_K, 6-bit super-blocks of 256 (llama.cpp's default type for output.weight).
 *
 * Block, 210 bytes: u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits), i8 scales[16] (one per
 * 16 elements), f16 d. Per 128-half h (ql += 64, qh += 32, scales += 8 after each), for l < 32
 * and is = l/16, the four elements l, l+32, l+64, l+96 are
 *   q = (nibble | 2 high bits << 4) - 32,  value = d * scales[is + 2k] * q   (k = 0..3)
 * with nibbles ql[l] lo, ql[l+32] lo, ql[l] hi, ql[l+32] hi and high bits qh[l] >> 0, 2, 4, 6.
 * Reference quantizer (quantize_row_q6_K_ref): per 16-group a weighted least-squares scale
 * search (ggml's make_qx_quants with nmax 32, weights x^2, 19 trial scales), the 16 scales
 * quantized to int8 against the one of largest magnitude (iscale = -128/max_scale), then every
 * element re-rounded against its final scale. The float operations follow ggml's order so the
 * bytes come out identical. */
#include "formats/quant_impl.h"

#include <math.h>

enum { Q6_SIZE = 210, Q8_K_SIZE = 292, OFF_QH = 128, OFF_SC = 192, OFF_D = 208 };
#define GROUP_MAX_EPS 1e-15f

void bs_q6_k_to_float(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += Q6_SIZE) {
        float d = bs_ld_f16(b + OFF_D);
        float *y = dst + i * BS_QK_K;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + 64 * h, *qh = b + OFF_QH + 32 * h;
            const int8_t *sc = (const int8_t *)(b + OFF_SC) + 8 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[128 * h + l] = d * (float)sc[is] * (float)q1;
                y[128 * h + l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[128 * h + l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[128 * h + l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* Sums of the weighted least-squares fit for one trial inverse scale: L gets the clamped codes
 * (offset by nmax when store is set). */
static void fit_sums(int n, int nmax, const float *x, float iscale, float *sumlx, float *suml2) {
    float slx = 0.0f, sl2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = BS_MAX(-nmax, BS_MIN(nmax - 1, bs_nearest_int(iscale * x[i])));
        float w = x[i] * x[i];
        slx += w * x[i] * (float)l;
        sl2 += w * (float)l * (float)l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

static void codes(int n, int nmax, const float *x, float iscale, int8_t *L) {
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(nmax + BS_MAX(-nmax, BS_MIN(nmax - 1, bs_nearest_int(iscale * x[i]))));
}

/* ggml's make_qx_quants with rmse_type 1 and no importance weights: returns the group scale,
 * L gets codes in [0, 2*nmax). */
static float group_scale(int n, int nmax, const float *x, int8_t *L) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max, sumlx, suml2;
    codes(n, nmax, x, iscale, L);
    fit_sums(n, nmax, x, iscale, &sumlx, &suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        fit_sums(n, nmax, x, iscale, &sumlx, &suml2);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            codes(n, nmax, x, iscale, L);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void pack(const int8_t *L, uint8_t *b) {
    for (int h = 0; h < 2; h++) {
        const int8_t *Lh = L + 128 * h;
        uint8_t *ql = b + 64 * h, *qh = b + OFF_QH + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
            ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
            qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                              (Lh[l + 96] >> 4) << 6);
        }
    }
}

void bs_q6_k_from_float(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    int8_t L[BS_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / BS_QK_K; i++, b += Q6_SIZE) {
        const float *x = src + i * BS_QK_K;
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int g = 0; g < 16; g++) {
            scales[g] = group_scale(16, 32, x + 16 * g, L + 16 * g);
            if (fabsf(scales[g]) > max_abs_scale) { max_abs_scale = fabsf(scales[g]); max_scale = scales[g]; }
        }
        memset(b, 0, Q6_SIZE);
        if (max_abs_scale < GROUP_MAX_EPS) continue;
        float iscale = -128.0f / max_scale;
        bs_st_f16(b + OFF_D, 1.0f / iscale);
        int8_t *sc = (int8_t *)(b + OFF_SC);
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)BS_MIN(127, bs_nearest_int(iscale * scales[g]));
        for (int g = 0; g < 16; g++) {
            float d = bs_ld_f16(b + OFF_D) * (float)sc[g];
            if (d == 0.0f) continue;
            for (int k = 0; k < 16; k++) {
                int l = BS_MAX(-32, BS_MIN(31, bs_nearest_int(x[16 * g + k] / d)));
                L[16 * g + k] = (int8_t)(l + 32);
            }
        }
        pack(L, b);
    }
}

/* ggml_vec_dot_q6_K_q8_K, x86 AVX2 branch: per super-block one int32 per lane, lane l summing
 * scale * (q - 32) * q8 over elements 4l..4l+3 of each of the eight 32-element groups; then
 * lanes = fma(d_a * d_w, lane, lanes), reduced by bs_hsum8. */
void bs_q6_k_dot(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / BS_QK_K; i++, x += Q6_SIZE, y += Q8_K_SIZE) {
        const int8_t *sc = (const int8_t *)(x + OFF_SC), *q8 = (const int8_t *)(y + 4);
        int32_t lane[8] = {0};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x + 64 * h, *qh = x + OFF_QH + 32 * h;
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15, hi = (qh[l] >> (2 * k)) & 3;
                    int e = 128 * h + 32 * k + l;
                    lane[l / 4] += sc[8 * h + 2 * k + l / 16] * (((lo | hi << 4) - 32) * q8[e]);
                }
        }
        float d = bs_ld_f32(y) * bs_ld_f16(x + OFF_D);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    *s = bs_hsum8(acc);
}
