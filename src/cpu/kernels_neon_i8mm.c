/* kernels_neon_i8mm.c: level BS_CPU_I8MM, FEAT_I8MM's smmla (compiled alone with
 * -march=armv8.2-a+dotprod+i8mm on aarch64; called only when the CPU has it). Empty elsewhere.
 *
 * smmla multiplies a 2x8 int8 matrix by an 8x2 one into a 2x2 int32 tile: two weight rows by two
 * activation rows, 8 elements deep. Four of them cover a 32-element group and leave the exact
 * integer group sums of all four (weight row, activation row) pairs in one vector, which is
 * what the Q2_0 oracle (bs_q2_0_dot: sumb += dy * sumi per group, sumf = fma(dx, sumb, sumf))
 * needs; its float steps then run on the four pairs at once, lane for lane the oracle's, so
 * Q2_0 (128 and 64 groups) stays bit-identical to BITSPARK_CPU=scalar. An odd activation row
 * (or weight row) is paired with itself and the copy discarded: each result is computed the
 * same way whatever the tile. Inner loop per pair of weight rows x pair of activation rows,
 * per 32 weights (8 bytes of codes per row): 4 smmla, 4 zip of activations, 1 scvtf, 1 fmul,
 * 1 fadd; the weights' unpacking (tbl, ushl, and, sub, zip) is shared by all activation rows.
 * Q1_0, Q8_0, Q4_x need 4-element lanes (their oracles' order), which sdot gives: those types
 * take the FEAT_DotProd kernels, built here again under the _base names. */
#include "cpu/kernels.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_MATMUL_INT8) && defined(__ARM_FEATURE_DOTPROD)
#define NEON_FN(name) name##_neon_i8mm_base
#include "cpu/kernels_neon_impl.h"

static INL int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static INL int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* Weight rows w (m0) and w + dm (m1, dm = 0 for a single row) x activation rows a0..a0+NR-1. */
static INL void tile_q2_mm(const uint8_t *w, size_t dm, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                           const int fmt, const int two, const int NR) {
    const int64_t n = A->n;
    const int G = fmt == FMT_Q2G64 ? 2 : 4;
    const size_t bsz = fmt == FMT_Q2 ? 34 : 18;
    const int64_t nsteps = n / (32 * G);
    enum { NP = (BS_KMAX_ROWS + 1) / 2 };
    const int np = (NR + 1) / 2;
    float32x4_t sumf[NP];   /* lanes: (m0, ra), (m0, rb), (m1, ra), (m1, rb) */
    for (int p = 0; p < np; p++) sumf[p] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nsteps; b++) {
        const uint8_t *p0 = w + (size_t)b * bsz, *p1 = p0 + dm;
        __builtin_prefetch(p0 + 1024);
        __builtin_prefetch(p1 + 1024);
        const float32x4_t dx = vcombine_f32(vdup_n_f32(f16(p0)), vdup_n_f32(f16(p1)));
        int8x16_t wz[8][2];
        for (int v = 0; v < 2 * G; v++) {
            const int8x16_t s0 = unpack_q2(vld1q_u8(p0 + 2 + 16 * (v / 4)), 4 * (v % 4));
            const int8x16_t s1 = unpack_q2(vld1q_u8(p1 + 2 + 16 * (v / 4)), 4 * (v % 4));
            wz[v][0] = zip_lo(s0, s1);
            wz[v][1] = zip_hi(s0, s1);
        }
        for (int p = 0; p < np; p++) {
            const int64_t ra = a0 + 2 * p, rb = 2 * p + 1 < NR ? ra + 1 : ra;
            const int8_t *qa = A->qs + ra * n + b * 32 * G, *qb = A->qs + rb * n + b * 32 * G;
            const float *da = A->dl + ra * (n / 4) + b * 8 * G, *db = A->dl + rb * (n / 4) + b * 8 * G;
            float32x4_t sumb = vdupq_n_f32(0.0f);
            for (int g = 0; g < G; g++) {
                int32x4_t i = vdupq_n_s32(0);
                for (int h = 0; h < 2; h++) {
                    const int8x16_t xa = vld1q_s8(qa + 32 * g + 16 * h), xb = vld1q_s8(qb + 32 * g + 16 * h);
                    i = vmmlaq_s32(i, wz[2 * g + h][0], zip_lo(xa, xb));
                    i = vmmlaq_s32(i, wz[2 * g + h][1], zip_hi(xa, xb));
                }
                const float32x2_t dy2 = {da[8 * g], db[8 * g]};
                sumb = vaddq_f32(sumb, vmulq_f32(vcombine_f32(dy2, dy2), vcvtq_f32_s32(i)));
            }
            sumf[p] = vfmaq_f32(sumf[p], dx, sumb);
        }
    }
    for (int p = 0; p < np; p++) {
        y[(2 * p) * ldy] = vgetq_lane_f32(sumf[p], 0);
        if (two) y[(2 * p) * ldy + 1] = vgetq_lane_f32(sumf[p], 2);
        if (2 * p + 1 < NR) {
            y[(2 * p + 1) * ldy] = vgetq_lane_f32(sumf[p], 1);
            if (two) y[(2 * p + 1) * ldy + 1] = vgetq_lane_f32(sumf[p], 3);
        }
    }
}

#define RANGE_MM(FMT, NR)                                                                      \
    do {                                                                                       \
        const uint8_t *w0 = (const uint8_t *)W->data;                                          \
        float *yy = y + a0 * ldy;                                                              \
        int64_t o = o0;                                                                        \
        for (; o + 2 <= o1; o += 2)                                                            \
            tile_q2_mm(w0 + (size_t)o * W->row_bytes, W->row_bytes, A, a0, yy + o, ldy, FMT, 1, NR); \
        if (o < o1) tile_q2_mm(w0 + (size_t)o * W->row_bytes, 0, A, a0, yy + o, ldy, FMT, 0, NR);  \
    } while (0)

static void k_q2_0_mm(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                      float *y, int64_t ldy) {
    BS_FOR_NR(na, RANGE_MM, FMT_Q2)
}

static void k_q2_0_g64_mm(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                          float *y, int64_t ldy) {
    BS_FOR_NR(na, RANGE_MM, FMT_Q2G64)
}

bs_kernel_fn bs_kernel_neon_i8mm(int type) {
    switch (type) {
    case BS_Q2_0: case BS_PQ2_0: return k_q2_0_mm;
    case BS_Q2_0_G64: return k_q2_0_g64_mm;
    default: return bs_kernel_neon_i8mm_base(type);
    }
}
#else
bs_kernel_fn bs_kernel_neon_i8mm(int type) { (void)type; return NULL; }
#endif
