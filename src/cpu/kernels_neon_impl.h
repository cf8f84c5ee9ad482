/* kernels_neon_impl.h: the aarch64 Advanced SIMD matmul kernels, written once and compiled twice:
 * kernels_neon.c (baseline ARMv8-A) and kernels_neon_dot.c (-march=armv8.2-a+dotprod, where
 * __ARM_FEATURE_DOTPROD makes DOT4 one sdot). NEON_FN(name) gives each build its own names.
 *
 * The scalar oracle (formats/quant_*.c) follows llama.cpp's x86 AVX2 order: per 32-element group
 * 8 lanes of 4-element integer sums, per-lane float updates, one fixed 8-lane reduction. A
 * 16-byte NEON vector of int8 gives 4 such lanes (sdot lane i = bytes 4i..4i+3), so two
 * float32x4 accumulators reproduce the oracle's float operations one for one: Q1_0, Q2_0 (128
 * and 64 groups), Q8_0, Q4_0 and Q4_1 are bit-identical to BITSPARK_CPU=scalar, whatever the
 * tile (hence every row's result is independent of the row count); so is Q6_K (Q8_K acts). Float weights (F32, F16,
 * BF16) accumulate 8 elements a step in FMA lanes: within the kernels' tolerance.
 *
 * Inner loops (per weight row, per activation row):
 *   Q1_0      128 weights = 18 bytes: 8 tbl + 8 cmeq/orr unpack to +-1 (per weight row, shared
 *             by the activation rows), 8 DOT4, 8 scvtf + 8 fmla.
 *   Q2_0      128 weights = 34 bytes (64: 18 bytes): tbl + ushl + and + sub per 16 codes -> -1..2,
 *             DOT4 per 16, addv per 32-group, the oracle's scalar float steps.
 *   Q8_0      32 weights = 34 bytes: 2 DOT4, 2 scvtf, 2 fmla.
 *   Q4_0/Q4_1 32 weights = 18 / 20 bytes: and + ushr nibbles, 2 DOT4, 2 fmla (+ one fma for m).
 *   Q6_K      256 weights = 210 bytes: 16 x (and/ushr + ushl + and + orr + sub) unpack, 16 DOT4 +
 *             16 mla by the sub-block scales, 2 scvtf + 2 fmla.
 *   F16/BF16  8 weights = 16 bytes: fcvtl (F16) or shll (BF16), 2 fmla.
 * DOT4 is sdot with FEAT_DotProd, else smull + smull2 + 2 saddlp + addp + add. */
#include "cpu/kernels.h"

#include "formats/quant.h"
#include "io/util.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   /* the oracle's unfused steps stay unfused (GCC's ISO mode never fuses) */
#endif

#define INL inline __attribute__((always_inline))

#ifdef __ARM_FEATURE_DOTPROD
static INL int32x4_t DOT4(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
#else
static INL int32x4_t DOT4(int32x4_t acc, int8x16_t a, int8x16_t b) {
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b)), hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
}
#endif

enum { FMT_Q1, FMT_Q2, FMT_Q2G64 };

static INL float f16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return bs_f16_to_f32(v);
}

/* the oracle's bs_hsum8 of lanes lo = v0..v3, hi = v4..v7: ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)) */
static INL float hsum8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t s = vaddq_f32(lo, hi), t = vaddq_f32(s, vextq_f32(s, s, 2));
    return vgetq_lane_f32(t, 0) + vgetq_lane_f32(t, 1);
}

/* Q1_0: the 16 bit bytes of a block -> 8 vectors of +-1 (vector v: elements 16v..16v+15). */
static INL void unpack_q1(const uint8_t *bits, int8x16_t s[8]) {
    static const uint8_t bitsel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vld1q_u8(bits), sel = vld1q_u8(bitsel), one = vdupq_n_u8(1);
    for (int v = 0; v < 8; v++) {
        const uint8_t idx[16] = {2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v, 2 * v,
                                 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1, 2 * v + 1};
        const uint8x16_t rep = vqtbl1q_u8(b, vld1q_u8(idx));
        /* clear bit -> 0xFF | 1 = -1, set bit -> 0 | 1 = +1 */
        s[v] = vreinterpretq_s8_u8(vorrq_u8(vceqq_u8(vandq_u8(rep, sel), vdupq_n_u8(0)), one));
    }
}

/* Q2_0: 4 code bytes (16 elements, element 4k+i in bits 2i of byte k) -> 16 values c - 1. */
static INL int8x16_t unpack_q2(uint8x16_t codes, int byte0) {
    static const int8_t shr[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
    uint8_t idx[16];
    for (int k = 0; k < 16; k++) idx[k] = (uint8_t)(byte0 + k / 4);
    const uint8x16_t rep = vqtbl1q_u8(codes, vld1q_u8(idx));
    const uint8x16_t c = vandq_u8(vshlq_u8(rep, vld1q_s8(shr)), vdupq_n_u8(3));
    return vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(1));
}

/* Q1_0 / Q2_0 family over MR weight rows x NR activation rows; a step is one weight block. */
static INL void tile_q12(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                         const int fmt, const int MR, const int NR) {
    const int64_t n = A->n;
    const int G = fmt == FMT_Q2G64 ? 2 : 4;   /* 32-groups per block */
    const size_t bsz = fmt == FMT_Q2 ? 34 : 18;
    const int64_t nsteps = n / (32 * G);
    float32x4_t acc0[2][BS_KMAX_ROWS], acc1[2][BS_KMAX_ROWS];
    float sumf[2][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc0[m][r] = acc1[m][r] = vdupq_n_f32(0.0f), sumf[m][r] = 0.0f;
    for (int64_t b = 0; b < nsteps; b++) {
        int8x16_t s[2][8];
        float dw[2];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * bsz;
            __builtin_prefetch(p + 1024);
            dw[m] = f16(p);
            if (fmt == FMT_Q1) unpack_q1(p + 2, s[m]);
            else
                for (int v = 0; v < 2 * G; v++) s[m][v] = unpack_q2(vld1q_u8(p + 2 + 16 * (v / 4)), 4 * (v % 4));
        }
        for (int r = 0; r < NR; r++) {
            const int8_t *q = A->qs + (a0 + r) * n + b * 32 * G;
            const float *dl = A->dl + (a0 + r) * (n / 4) + b * 8 * G;
            int8x16_t x[8];
            for (int v = 0; v < 2 * G; v++) x[v] = vld1q_s8(q + 16 * v);
            for (int m = 0; m < MR; m++) {
                if (fmt == FMT_Q1) {   /* bs_q1_0_dot: per lane blk = fma(dy, sum, blk), acc = fma(dx, blk, acc) */
                    float32x4_t b0 = vdupq_n_f32(0.0f), b1 = b0;
                    for (int g = 0; g < 4; g++) {
                        const float32x4_t dy = vdupq_n_f32(dl[8 * g]);
                        const float32x4_t f0 = vcvtq_f32_s32(DOT4(vdupq_n_s32(0), s[m][2 * g], x[2 * g]));
                        const float32x4_t f1 = vcvtq_f32_s32(DOT4(vdupq_n_s32(0), s[m][2 * g + 1], x[2 * g + 1]));
                        b0 = g == 0 ? vmulq_f32(dy, f0) : vfmaq_f32(b0, dy, f0);
                        b1 = g == 0 ? vmulq_f32(dy, f1) : vfmaq_f32(b1, dy, f1);
                    }
                    const float32x4_t dx = vdupq_n_f32(dw[m]);
                    acc0[m][r] = vfmaq_f32(acc0[m][r], dx, b0);
                    acc1[m][r] = vfmaq_f32(acc1[m][r], dx, b1);
                } else {   /* bs_q2_0_dot: sumb += dy * sumi per group, sumf = fma(dx, sumb, sumf) */
                    float sumb = 0.0f;
                    for (int g = 0; g < G; g++) {
                        const int32x4_t i = DOT4(DOT4(vdupq_n_s32(0), s[m][2 * g], x[2 * g]), s[m][2 * g + 1], x[2 * g + 1]);
                        const float t = dl[8 * g] * (float)vaddvq_s32(i);
                        sumb = sumb + t;
                    }
                    sumf[m][r] = fmaf(dw[m], sumb, sumf[m][r]);
                }
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = fmt == FMT_Q1 ? hsum8(acc0[m][r], acc1[m][r]) : sumf[m][r];
}

/* Q8_0 weights (bs_q8_0_dot): a step is one 32-block; lanes += fma(d_w * d_a, lane dot). */
static INL void tile_q8(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                        const int MR, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    float32x4_t acc0[2][BS_KMAX_ROWS], acc1[2][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc0[m][r] = acc1[m][r] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t w0[2], w1[2];
        float dw[2];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * 34;
            __builtin_prefetch(p + 1024);
            dw[m] = f16(p);
            w0[m] = vld1q_s8((const int8_t *)p + 2);
            w1[m] = vld1q_s8((const int8_t *)p + 18);
        }
        for (int r = 0; r < NR; r++) {
            const int8_t *q = A->qs + (a0 + r) * n + b * 32;
            const float da = A->dl[(a0 + r) * (n / 4) + b * 8];
            const int8x16_t x0 = vld1q_s8(q), x1 = vld1q_s8(q + 16);
            for (int m = 0; m < MR; m++) {
                const float32x4_t d = vdupq_n_f32(dw[m] * da);
                acc0[m][r] = vfmaq_f32(acc0[m][r], d, vcvtq_f32_s32(DOT4(vdupq_n_s32(0), w0[m], x0)));
                acc1[m][r] = vfmaq_f32(acc1[m][r], d, vcvtq_f32_s32(DOT4(vdupq_n_s32(0), w1[m], x1)));
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = hsum8(acc0[m][r], acc1[m][r]);
}

/* Q4_0 (Q8_0 activations) and Q4_1 (Q8_1): bs_q4_0_dot / bs_q4_1_dot, nibble j -> element j,
 * high nibble j -> element j + 16. */
static INL void tile_q4(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                        const int q41, const int MR, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    const size_t bsz = q41 ? 20 : 18, qoff = q41 ? 4 : 2;
    float32x4_t acc0[2][BS_KMAX_ROWS], acc1[2][BS_KMAX_ROWS];
    float summs[2][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc0[m][r] = acc1[m][r] = vdupq_n_f32(0.0f), summs[m][r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t lo[2], hi[2];
        float dw[2], mw[2];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * bsz;
            __builtin_prefetch(p + 1024);
            dw[m] = f16(p);
            mw[m] = q41 ? f16(p + 2) : 0.0f;
            const uint8x16_t v = vld1q_u8(p + qoff);
            const int8x16_t off = vdupq_n_s8(q41 ? 0 : 8);
            lo[m] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), off);
            hi[m] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), off);
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const int8_t *q = A->qs + row * n + b * 32;
            const float da = A->dl[row * (n / 4) + b * 8];
            const float sa = q41 ? A->gs[row * (n / 32) + b] : 0.0f;
            const int8x16_t x0 = vld1q_s8(q), x1 = vld1q_s8(q + 16);
            for (int m = 0; m < MR; m++) {
                if (q41) summs[m][r] = fmaf(mw[m], sa, summs[m][r]);
                const float32x4_t d = vdupq_n_f32(dw[m] * da);
                acc0[m][r] = vfmaq_f32(acc0[m][r], d, vcvtq_f32_s32(DOT4(vdupq_n_s32(0), lo[m], x0)));
                acc1[m][r] = vfmaq_f32(acc1[m][r], d, vcvtq_f32_s32(DOT4(vdupq_n_s32(0), hi[m], x1)));
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = hsum8(acc0[m][r], acc1[m][r]) + summs[m][r];
}

/* Q6_K weights x Q8_K activations (bs_q6_k_dot): per 256-block, lane l of 8 sums over its 8
 * sub-blocks scale * (4 elements' products); 16 elements share a scale, so one DOT4 of them
 * times the scale (mla) updates 4 lanes exactly. One weight row at a time (16 vectors). */
static INL void tile_q6k(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                         const int MR, const int NR) {
    (void)rb, (void)MR;
    const int64_t nb = A->n / 256;
    float32x4_t acc0[BS_KMAX_ROWS], acc1[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) acc0[r] = acc1[r] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *x = w + (size_t)b * 210;
        __builtin_prefetch(x + 1024);
        const int8_t *sc = (const int8_t *)(x + 192);
        const float dw = f16(x + 208);
        int8x16_t wv[16];   /* sub-block (h, k), half j: element 128h + 32k + 16j .. +15 */
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 2; j++) {
                    const uint8x16_t ql = vld1q_u8(x + 64 * h + 16 * j + 32 * (k & 1));
                    const uint8x16_t qh = vld1q_u8(x + 128 + 32 * h + 16 * j);
                    const uint8x16_t lo = (k >> 1) ? vshrq_n_u8(ql, 4) : vandq_u8(ql, vdupq_n_u8(15));
                    const uint8x16_t hi = vandq_u8(vshlq_u8(qh, vdupq_n_s8((int8_t)(-2 * k))), vdupq_n_u8(3));
                    wv[8 * h + 2 * k + j] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
                }
        for (int r = 0; r < NR; r++) {
            const uint8_t *ya = (const uint8_t *)A->raw + (size_t)(a0 + r) * A->raw_row + (size_t)b * 292;
            const int8_t *q8 = (const int8_t *)(ya + 4);
            int32x4_t l0 = vdupq_n_s32(0), l1 = l0;
            for (int s = 0; s < 8; s++) {
                l0 = vmlaq_n_s32(l0, DOT4(vdupq_n_s32(0), wv[2 * s], vld1q_s8(q8 + 32 * s)), sc[2 * s]);
                l1 = vmlaq_n_s32(l1, DOT4(vdupq_n_s32(0), wv[2 * s + 1], vld1q_s8(q8 + 32 * s + 16)), sc[2 * s + 1]);
            }
            float da;
            memcpy(&da, ya, 4);
            const float32x4_t d = vdupq_n_f32(da * dw);
            acc0[r] = vfmaq_f32(acc0[r], d, vcvtq_f32_s32(l0));
            acc1[r] = vfmaq_f32(acc1[r], d, vcvtq_f32_s32(l1));
        }
    }
    for (int r = 0; r < NR; r++) y[r * ldy] = hsum8(acc0[r], acc1[r]);
}

/* Float weights, 8 elements a step (two FMA lanes of 4); the tail through a zero-padded copy. */
static INL void load_w8(const uint8_t *p, int type, float32x4_t *a, float32x4_t *b) {
    if (type == BS_F32) {
        *a = vld1q_f32((const float *)p);
        *b = vld1q_f32((const float *)p + 4);
        return;
    }
    const uint16x8_t h = vld1q_u16((const uint16_t *)p);
    if (type == BS_F16) {
        const float16x8_t f = vreinterpretq_f16_u16(h);
        *a = vcvt_f32_f16(vget_low_f16(f));
        *b = vcvt_high_f32_f16(f);
        return;
    }
    *a = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    *b = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
}

static INL void tile_f(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                       const int type, const int MR, const int NR) {
    const int64_t n = A->n;
    const size_t es = type == BS_F32 ? 4 : 2;
    float32x4_t acc0[2][BS_KMAX_ROWS], acc1[2][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc0[m][r] = acc1[m][r] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t k = BS_MIN(8, n - i);
        float32x4_t wa[2], wb[2];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)i * es;
            uint8_t tmp[32] = {0};
            if (k < 8) {
                memcpy(tmp, p, (size_t)k * es);
                p = tmp;
            }
            load_w8(p, type, &wa[m], &wb[m]);
        }
        for (int r = 0; r < NR; r++) {
            const float *x = (const float *)((const uint8_t *)A->raw + (size_t)(a0 + r) * A->raw_row) + i;
            float tmp[8] = {0};
            if (k < 8) {
                memcpy(tmp, x, (size_t)k * 4);
                x = tmp;
            }
            const float32x4_t xa = vld1q_f32(x), xb = vld1q_f32(x + 4);
            for (int m = 0; m < MR; m++) {
                acc0[m][r] = vfmaq_f32(acc0[m][r], wa[m], xa);
                acc1[m][r] = vfmaq_f32(acc1[m][r], wb[m], xb);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = hsum8(acc0[m][r], acc1[m][r]);
}

/* Output rows in pairs while few activation rows leave registers for two weight rows. */
#define RANGE(CALL, NR)                                                                       \
    do {                                                                                      \
        const int MR_ = (NR) <= 4 ? 2 : 1;                                                    \
        int64_t o = o0;                                                                       \
        const uint8_t *w0 = (const uint8_t *)W->data;                                         \
        float *yy = y + a0 * ldy;                                                             \
        for (; o + MR_ <= o1; o += MR_) CALL(w0 + (size_t)o * W->row_bytes, yy + o, MR_, NR); \
        for (; o < o1; o++) CALL(w0 + (size_t)o * W->row_bytes, yy + o, 1, NR);              \
    } while (0)

#define KERNEL(name, CALL)                                                                   \
    static void name(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,           \
                     int64_t a0, int na, float *y, int64_t ldy) {                            \
        BS_FOR_NR(na, RANGE, CALL)                                                           \
    }

#define C_Q1(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q1, mr, nr)
#define C_Q2(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2, mr, nr)
#define C_Q2G64(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2G64, mr, nr)
#define C_Q8(p, yo, mr, nr) tile_q8(p, W->row_bytes, A, a0, yo, ldy, mr, nr)
#define C_Q40(p, yo, mr, nr) tile_q4(p, W->row_bytes, A, a0, yo, ldy, 0, mr, nr)
#define C_Q41(p, yo, mr, nr) tile_q4(p, W->row_bytes, A, a0, yo, ldy, 1, mr, nr)
#define C_Q6K(p, yo, mr, nr) tile_q6k(p, W->row_bytes, A, a0, yo, ldy, mr, nr)
#define C_F32(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F32, mr, nr)
#define C_F16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F16, mr, nr)
#define C_BF16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_BF16, mr, nr)

KERNEL(k_q1_0, C_Q1)
KERNEL(k_q2_0, C_Q2)
KERNEL(k_q2_0_g64, C_Q2G64)
KERNEL(k_q8_0, C_Q8)
KERNEL(k_q4_0, C_Q40)
KERNEL(k_q4_1, C_Q41)
KERNEL(k_f32, C_F32)

/* Q6_K: one weight row per call (its 16 unpacked vectors fill the registers). */
#define RANGE1(CALL, NR)                                                                      \
    do {                                                                                      \
        const uint8_t *w0 = (const uint8_t *)W->data;                                         \
        for (int64_t o = o0; o < o1; o++) CALL(w0 + (size_t)o * W->row_bytes, y + a0 * ldy + o, 1, NR); \
    } while (0)
static void k_q6_k(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                   int64_t ldy) {
    BS_FOR_NR(na, RANGE1, C_Q6K)
}
KERNEL(k_f16, C_F16)
KERNEL(k_bf16, C_BF16)

bs_kernel_fn NEON_FN(bs_kernel)(int type) {
    switch (type) {
    case BS_Q1_0: return k_q1_0;
    case BS_Q2_0: case BS_PQ2_0: return k_q2_0;
    case BS_Q2_0_G64: return k_q2_0_g64;
    case BS_Q8_0: return k_q8_0;
    case BS_Q4_0: return k_q4_0;
    case BS_Q4_1: return k_q4_1;
    case BS_Q6_K: return k_q6_k;
    case BS_F32: return k_f32;
    case BS_F16: return k_f16;
    case BS_BF16: return k_bf16;
    default: return NULL;   /* TQ1_0, TQ2_0: the scalar vec_dot, threaded (kernels.c) */
    }
}

/* Q8_0 activation quantizer into the split layout, identical to bs_q8_0_act: amax by maxnm (as
 * fmaxf), q = round-to-nearest-even(x * 127 / amax) (fcvtns, as rintf), scale rounded to fp16. */
int NEON_FN(bs_acts_q8_0)(bs_acts *A, int64_t r, const float *x) {
    if (A->type != BS_Q8_0 || A->perm) return -1;
    const int64_t n = A->n;
    int8_t *qs = A->qs + r * n;
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4);
    for (int64_t g = 0; g < n / 32; g++) {
        float32x4_t v[8], mx = vdupq_n_f32(0.0f);
        for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(x + 32 * g + 4 * k);
            mx = vmaxnmq_f32(mx, vabsq_f32(v[k]));
        }
        const float amax = vmaxnmvq_f32(mx);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float d = bs_f16_to_f32(bs_f32_to_f16(amax / 127.0f));
        int16x8_t h[4];
        for (int k = 0; k < 4; k++)
            h[k] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id))),
                                vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id))));
        const int8x16_t q0 = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
        const int8x16_t q1 = vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3]));
        vst1q_s8(qs + 32 * g, q0);
        vst1q_s8(qs + 32 * g + 16, q1);
        const int32x4_t one4 = vdupq_n_s32(0);
        const int32x4_t s0 = DOT4(one4, q0, vdupq_n_s8(1)), s1 = DOT4(one4, q1, vdupq_n_s8(1));
        vst1q_s32(ns + 8 * g, vnegq_s32(s0));
        vst1q_s32(ns + 8 * g + 4, vnegq_s32(s1));
        vst1q_f32(dl + 8 * g, vdupq_n_f32(d));
        vst1q_f32(dl + 8 * g + 4, vdupq_n_f32(d));
    }
    return 0;
}
