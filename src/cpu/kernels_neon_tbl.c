/* kernels_neon_tbl.c: table-lookup kernels for Q1_0 and Q2_0 (PQ2_0, Q2_0_G64) on aarch64, any
 * ARMv8-A (tbl is baseline NEON), natural weight layout.
 *
 * Each activation row gets 16-entry tables of int16 sums (bs_acts.lut, built once per product
 * by bs_neon_tables): Q1_0 one per 4 columns, entry e = sum_i (bit i of e ? q_i : -q_i); Q2_0
 * one per 2 columns, entry e = (e % 4 - 1) q_0 + (e / 4 - 1) q_1. A table is stored planar (the
 * 16 low bytes, then the 16 high bytes), so one two-register tbl with the indices (n, n + 16)
 * per lane pair returns 8 int16 sums. The lanes are 8 weight rows: per 8 rows and block the
 * weight nibbles are transposed into index vectors once (make_idx) and used by every
 * activation row of the call.
 *
 * Exactness: a Q1_0 lookup is the oracle's 4-element lane sum, a Q2_0 group's 16 lookups added
 * in int16 (|sum| <= 32 * 2 * 127) its 32-element sum; the float steps after them are the
 * oracle's (bs_q1_0_dot: per lane blk = fma(dy, sum, blk), acc = fma(dx, blk, acc), the 8-lane
 * tree at the end; bs_q2_0_dot: sumb = sumb + dy * sum, sumf = fma(dx, sumb, sumf)), done for 8
 * weight rows per vector. So every result is bit-identical to BITSPARK_CPU=scalar and to the
 * sdot / smmla kernels, whatever kernel or tile computes it.
 *
 * The loops, per 8 weight rows (one output = one weight row x one activation row):
 *   shared, per block and 16 code bytes: make_idx, 8 loads, 24 zips (the 8 x 16 byte
 *     transpose), 8 and/ushr, 16 orr and 32 zips for the 32 index vectors; per block the 8
 *     scales (8 lane loads, 2 fcvtl).
 *   Q1_0, per activation row and 128 columns: 32 two-register loads of tables, 32 tbl, 64 sxtl,
 *     64 scvtf, 64 fmul/fmla by the group scale, 16 loads / fmla / stores of the accumulators.
 *   Q2_0, per activation row and 32 columns: 16 table loads, 16 tbl, 16 add, then 2 sxtl,
 *     2 scvtf, 2 fmul, 2 fadd and the block sums' 2 loads and 2 stores.
 * Executed instructions per output, against the sdot / smmla kernels, are counted by
 * tools/neon_count.sh; kernels.c's dispatch follows them. */
#include "cpu/kernels.h"

#if defined(__aarch64__)
#include "formats/quant.h"
#include "io/util.h"

#include <arm_neon.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   /* the oracle's unfused steps stay unfused */
#endif

#define INL inline __attribute__((always_inline))

enum { TILE = 64, NG = TILE / 8 };   /* weight rows per tile, 8-row groups per tile */
enum { TBL_BYTES = 32 };              /* one planar 16-entry int16 table */

/* --- tables ------------------------------------------------------------------------------------- */

size_t bs_neon_lut_stride(int kind, int64_t n) {
    return (size_t)(kind == BS_LUT_NEON_Q1 ? n / 4 : n / 2) * TBL_BYTES + 64;
}

static void put_table(const int16_t t[16], uint8_t *dst) {
    for (int e = 0; e < 16; e++) dst[e] = (uint8_t)(t[e] & 0xFF), dst[16 + e] = (uint8_t)((uint16_t)t[e] >> 8);
}

void bs_neon_tables(int kind, const int8_t *qs, int64_t n, uint8_t *lut) {
    int16_t t[16];
    if (kind == BS_LUT_NEON_Q1) {
        for (int64_t c = 0; c < n / 4; c++) {
            const int8_t *q = qs + 4 * c;
            t[0] = (int16_t)-(q[0] + q[1] + q[2] + q[3]);
            for (int e = 1; e < 16; e++) {   /* e = e' + lowest bit i: the sign of q_i flips */
                const int i = __builtin_ctz((unsigned)e);
                t[e] = (int16_t)(t[e & (e - 1)] + 2 * q[i]);
            }
            put_table(t, lut + (size_t)c * TBL_BYTES);
        }
        return;
    }
    for (int64_t p = 0; p < n / 2; p++) {
        const int8_t *q = qs + 2 * p;
        for (int e = 0; e < 16; e++) t[e] = (int16_t)((e % 4 - 1) * q[0] + (e / 4 - 1) * q[1]);
        put_table(t, lut + (size_t)p * TBL_BYTES);
    }
}

/* --- index vectors ------------------------------------------------------------------------------ */

static INL uint16x8_t u16(uint8x16_t v) { return vreinterpretq_u16_u8(v); }
static INL uint32x4_t u32(uint16x8_t v) { return vreinterpretq_u32_u16(v); }

/* idx[q], q = 0..31: nibble q (byte q / 2, high if q odd) of the 16 bytes at r[i] + off, for
 * rows i = 0..7, as the tbl indices (n, n + 16) of lanes 2i, 2i + 1. The 8 x 16 bytes are
 * transposed by three rounds of zips; h[j] then holds byte 2j of the 8 rows, then byte 2j + 1. */
static INL void make_idx(const uint8_t *const r[8], size_t off, uint8x16_t idx[32]) {
    uint8x16_t R[8], a[8], h[8];
    uint16x8_t e[8];
    for (int i = 0; i < 8; i++) R[i] = vld1q_u8(r[i] + off);
    for (int i = 0; i < 4; i++) a[2 * i] = vzip1q_u8(R[2 * i], R[2 * i + 1]), a[2 * i + 1] = vzip2q_u8(R[2 * i], R[2 * i + 1]);
    for (int s = 0; s < 2; s++) {   /* e[4s + m]: bytes 4m..4m+3 of rows 4s..4s+3 */
        e[4 * s + 0] = vzip1q_u16(u16(a[4 * s]), u16(a[4 * s + 2]));
        e[4 * s + 1] = vzip2q_u16(u16(a[4 * s]), u16(a[4 * s + 2]));
        e[4 * s + 2] = vzip1q_u16(u16(a[4 * s + 1]), u16(a[4 * s + 3]));
        e[4 * s + 3] = vzip2q_u16(u16(a[4 * s + 1]), u16(a[4 * s + 3]));
    }
    for (int m = 0; m < 4; m++) {
        h[2 * m] = vreinterpretq_u8_u32(vzip1q_u32(u32(e[m]), u32(e[4 + m])));
        h[2 * m + 1] = vreinterpretq_u8_u32(vzip2q_u32(u32(e[m]), u32(e[4 + m])));
    }
    const uint8x16_t m4 = vdupq_n_u8(15), hi16 = vdupq_n_u8(16);
    for (int j = 0; j < 8; j++) {
        const uint8x16_t lo = vandq_u8(h[j], m4), hi = vshrq_n_u8(h[j], 4);
        const uint8x16_t lo2 = vorrq_u8(lo, hi16), hi2 = vorrq_u8(hi, hi16);
        idx[4 * j] = vzip1q_u8(lo, lo2), idx[4 * j + 2] = vzip2q_u8(lo, lo2);
        idx[4 * j + 1] = vzip1q_u8(hi, hi2), idx[4 * j + 3] = vzip2q_u8(hi, hi2);
    }
}

/* The 8 rows' block scales (fp16 at r[i] + off) as two vectors. fcvtl converts exactly, as the
 * oracle's bs_f16_to_f32 (a signalling NaN comes out quiet, as the oracle's first fma makes it). */
static INL void scales8(const uint8_t *const r[8], size_t off, float32x4_t d[2]) {
    uint16x8_t h = vdupq_n_u16(0);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[0] + off), h, 0);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[1] + off), h, 1);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[2] + off), h, 2);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[3] + off), h, 3);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[4] + off), h, 4);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[5] + off), h, 5);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[6] + off), h, 6);
    h = vld1q_lane_u16((const uint16_t *)(const void *)(r[7] + off), h, 7);
    const float16x8_t f = vreinterpretq_f16_u16(h);
    d[0] = vcvt_f32_f16(vget_low_f16(f)), d[1] = vcvt_high_f32_f16(f);
}

/* 8 int16 sums: the planar table t (two registers) at the indices idx */
static INL int16x8_t look(const uint8x16x2_t t, uint8x16_t idx) { return vreinterpretq_s16_u8(vqtbl2q_u8(t, idx)); }

static INL float32x4_t cvt_lo(int16x8_t v) { return vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))); }
static INL float32x4_t cvt_hi(int16x8_t v) { return vcvtq_f32_s32(vmovl_high_s16(v)); }

/* --- Q1_0 --------------------------------------------------------------------------------------- */

/* One 128-column block b of the 8 rows at r for activation rows a0..a0+na-1. acc: per row r,
 * lane l (4-column position in a 32-group) and weight row, the oracle's lane accumulators. */
static INL void q1_block(const uint8_t *const r[8], int64_t b, const bs_acts *A, int64_t a0, int na,
                         float *acc /* [na][8 l][8 rows] */, size_t lut_stride) {
    uint8x16_t idx[32];
    float32x4_t dx[2];
    float dy[BS_KMAX_ROWS][4];
    const size_t off = (size_t)b * 18;
    make_idx(r, off + 2, idx);
    scales8(r, off, dx);
    for (int k = 0; k < na; k++)
        for (int g = 0; g < 4; g++) dy[k][g] = A->dl[(a0 + k) * (A->n / 4) + b * 32 + 8 * g];
    for (int lp = 0; lp < 4; lp++) {   /* lanes l = 2lp, 2lp + 1: tables c = 8g + l */
        uint8x16_t I[4][2];
        for (int g = 0; g < 4; g++) I[g][0] = idx[8 * g + 2 * lp], I[g][1] = idx[8 * g + 2 * lp + 1];
        for (int k = 0; k < na; k++) {
            const uint8_t *T = A->lut + (size_t)(a0 + k) * lut_stride + ((size_t)b * 32 + 2 * (size_t)lp) * TBL_BYTES;
            const float32x4_t d = vld1q_f32(dy[k]);
            float32x4_t blk[2][2];
            for (int g = 0; g < 4; g++) {
                const uint8_t *Tg = T + 8 * g * TBL_BYTES;   /* tables c, c + 1 */
                const int16x8_t v[2] = {look(vld1q_u8_x2(Tg), I[g][0]), look(vld1q_u8_x2(Tg + TBL_BYTES), I[g][1])};
                for (int h = 0; h < 2; h++) {
                    const float32x4_t f0 = cvt_lo(v[h]), f1 = cvt_hi(v[h]);
                    if (g == 0) blk[h][0] = vmulq_laneq_f32(f0, d, 0), blk[h][1] = vmulq_laneq_f32(f1, d, 0);
                    else if (g == 1) blk[h][0] = vfmaq_laneq_f32(blk[h][0], f0, d, 1), blk[h][1] = vfmaq_laneq_f32(blk[h][1], f1, d, 1);
                    else if (g == 2) blk[h][0] = vfmaq_laneq_f32(blk[h][0], f0, d, 2), blk[h][1] = vfmaq_laneq_f32(blk[h][1], f1, d, 2);
                    else blk[h][0] = vfmaq_laneq_f32(blk[h][0], f0, d, 3), blk[h][1] = vfmaq_laneq_f32(blk[h][1], f1, d, 3);
                }
            }
            for (int h = 0; h < 2; h++) {
                float *a = acc + ((size_t)k * 8 + 2 * (size_t)lp + (size_t)h) * 8;
                vst1q_f32(a, vfmaq_f32(vld1q_f32(a), dx[0], blk[h][0]));
                vst1q_f32(a + 4, vfmaq_f32(vld1q_f32(a + 4), dx[1], blk[h][1]));
            }
        }
    }
}

/* the oracle's 8-lane tree ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)), for 4 weight rows at once */
static INL float32x4_t tree8(const float *a /* [8 l][8 rows] */, int half) {
    float32x4_t v[8];
    for (int l = 0; l < 8; l++) v[l] = vld1q_f32(a + 8 * l + 4 * half);
    return vaddq_f32(vaddq_f32(vaddq_f32(v[0], v[4]), vaddq_f32(v[2], v[6])),
                     vaddq_f32(vaddq_f32(v[1], v[5]), vaddq_f32(v[3], v[7])));
}

/* --- Q2_0 (128- and 64-column blocks) ------------------------------------------------------------ */

/* One block b (G 32-groups) of the 8 rows at r. sumf: per activation row and weight row. */
static INL void q2_block(const uint8_t *const r[8], int64_t b, const bs_acts *A, int64_t a0, int na,
                         float *sumf /* [na][8] */, size_t lut_stride, const int G) {
    uint8x16_t idx[64];
    float32x4_t dw[2];
    float sumb[BS_KMAX_ROWS][8];
    const size_t off = (size_t)b * (G == 4 ? 34 : 18);
    for (int ch = 0; ch < G / 2; ch++) make_idx(r, off + 2 + 16 * (size_t)ch, idx + 32 * ch);
    scales8(r, off, dw);
    memset(sumb, 0, sizeof sumb);
    for (int g = 0; g < G; g++) {
        uint8x16_t I[16];
        for (int i = 0; i < 16; i++) I[i] = idx[16 * g + i];
        for (int k = 0; k < na; k++) {
            const int64_t row = a0 + k;
            const uint8_t *T = A->lut + (size_t)row * lut_stride + ((size_t)b * 16 * G + 16 * (size_t)g) * TBL_BYTES;
            int16x8_t s = vdupq_n_s16(0);
            for (int i = 0; i < 8; i++) {
                s = vaddq_s16(s, look(vld1q_u8_x2(T + 2 * i * TBL_BYTES), I[2 * i]));
                s = vaddq_s16(s, look(vld1q_u8_x2(T + (2 * i + 1) * TBL_BYTES), I[2 * i + 1]));
            }
            const float d = A->dl[row * (A->n / 4) + b * 8 * G + 8 * g];
            vst1q_f32(sumb[k], vaddq_f32(vld1q_f32(sumb[k]), vmulq_n_f32(cvt_lo(s), d)));
            vst1q_f32(sumb[k] + 4, vaddq_f32(vld1q_f32(sumb[k] + 4), vmulq_n_f32(cvt_hi(s), d)));
        }
    }
    for (int k = 0; k < na; k++) {
        float *f = sumf + 8 * k;
        vst1q_f32(f, vfmaq_f32(vld1q_f32(f), dw[0], vld1q_f32(sumb[k])));
        vst1q_f32(f + 4, vfmaq_f32(vld1q_f32(f + 4), dw[1], vld1q_f32(sumb[k] + 4)));
    }
}

/* --- driver --------------------------------------------------------------------------------------- */

enum { FMT_Q1, FMT_Q2, FMT_Q2G64 };

/* Rows [o0, o1) in tiles of TILE rows; per tile K in chunks whose tables (all na rows) take
 * ~32 KB, so they stay in L1 while the tile's 8-row groups pass over them. A group past o1 reads
 * the last row again and drops those lanes. */
static void k_tbl(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                  int64_t ldy, const int fmt) {
    const int G = fmt == FMT_Q2G64 ? 2 : 4, qk = 32 * G;
    const int64_t nb = A->n / qk;
    const size_t stride = bs_neon_lut_stride(fmt == FMT_Q1 ? BS_LUT_NEON_Q1 : BS_LUT_NEON_Q2, A->n);
    const size_t tbytes = (size_t)(fmt == FMT_Q1 ? qk / 4 : qk / 2) * TBL_BYTES;   /* per row and block */
    const int64_t kc = BS_MAX(1, (int64_t)(32768 / ((size_t)na * tbytes)));
    float st[BS_KMAX_ROWS * NG * 64] __attribute__((aligned(16)));   /* Q1: [grp][k][l][8]; Q2: [grp][k][8] */
    for (int64_t t0 = o0; t0 < o1; t0 += TILE) {
        const int64_t t1 = BS_MIN(t0 + TILE, o1), ng = (t1 - t0 + 7) / 8;
        const size_t per = fmt == FMT_Q1 ? (size_t)na * 64 : (size_t)na * 8;   /* floats per group */
        memset(st, 0, (size_t)ng * per * sizeof(float));
        for (int64_t b0 = 0; b0 < nb; b0 += kc)
            for (int64_t grp = 0; grp < ng; grp++) {
                const uint8_t *r[8];
                for (int i = 0; i < 8; i++) {
                    const int64_t o = BS_MIN(t0 + 8 * grp + i, t1 - 1);
                    r[i] = (const uint8_t *)W->data + (size_t)o * W->row_bytes;
                }
                for (int64_t b = b0; b < BS_MIN(b0 + kc, nb); b++) {
                    if (fmt == FMT_Q1) q1_block(r, b, A, a0, na, st + grp * per, stride);
                    else q2_block(r, b, A, a0, na, st + grp * per, stride, G);
                }
            }
        for (int64_t grp = 0; grp < ng; grp++)
            for (int k = 0; k < na; k++) {
                float out[8];
                if (fmt == FMT_Q1) {
                    const float *a = st + grp * per + (size_t)k * 64;
                    vst1q_f32(out, tree8(a, 0)), vst1q_f32(out + 4, tree8(a, 1));
                } else memcpy(out, st + grp * per + (size_t)k * 8, sizeof out);
                float *yr = y + (a0 + k) * ldy + t0 + 8 * grp;
                for (int i = 0; i < 8 && t0 + 8 * grp + i < t1; i++) yr[i] = out[i];
            }
    }
}

static void k_tbl_q1(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                     int64_t ldy) {
    k_tbl(W, o0, o1, A, a0, na, y, ldy, FMT_Q1);
}
static void k_tbl_q2(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                     int64_t ldy) {
    k_tbl(W, o0, o1, A, a0, na, y, ldy, FMT_Q2);
}
static void k_tbl_q2g64(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                        int64_t ldy) {
    k_tbl(W, o0, o1, A, a0, na, y, ldy, FMT_Q2G64);
}

bs_kernel_fn bs_kernel_neon_tbl(int type) {
    switch (type) {
    case BS_Q1_0: return k_tbl_q1;
    case BS_Q2_0: case BS_PQ2_0: return k_tbl_q2;
    case BS_Q2_0_G64: return k_tbl_q2g64;
    default: return NULL;
    }
}

#else
bs_kernel_fn bs_kernel_neon_tbl(int type) { (void)type; return NULL; }
size_t bs_neon_lut_stride(int kind, int64_t n) { return (size_t)(kind == BS_LUT_NEON_Q1 ? n / 4 : n / 2) * 32 + 64; }
void bs_neon_tables(int kind, const int8_t *qs, int64_t n, uint8_t *lut) { (void)kind, (void)qs, (void)n, (void)lut; }
#endif
