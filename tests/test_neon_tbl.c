/* test_neon_tbl.c: the aarch64 table-lookup kernels (kernels_neon_tbl.c) against the scalar
 * oracle, bit for bit, at every NEON level this CPU has.
 *
 * Q1_0, Q2_0, PQ2_0 and Q2_0_G64 on odd shapes (row counts that are not a multiple of the
 * kernel's 8-row groups or 64-row tiles, a single block) and on the real width, 5120 columns
 * (few output rows: it runs under qemu), with 1..16 activation rows and 1..3 threads, random
 * data (random code bytes incl. Q2_0 code 3, random scales and activations). The tables are
 * forced on (bs_neon_tbl_mode); bench's kernel name proves they were taken, and forcing them
 * off (the sdot / smmla / plain kernels) must give the same bits too. Elsewhere: skipped. */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static bs_rng rng;

static uint8_t *make_weight(int type, int64_t ne0, int64_t ne1) {
    const bs_type_traits *t = bs_type_get(type);
    const size_t rb = bs_row_size(type, ne0), n = rb * (size_t)ne1;
    uint8_t *w = bs_xmalloc(n);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)bs_rng_next(&rng);
    for (size_t b = 0; b < n / t->type_size; b++) {   /* a random normal fp16 scale per block */
        const uint16_t h = bs_f32_to_f16(bs_rng_normal(&rng) * 0.05f);
        memcpy(w + b * t->type_size, &h, 2);
    }
    return w;
}

static void check_shape(int type, int64_t ne0, int64_t ne1, bs_pool **pools) {
    enum { MAXR = 16 };
    uint8_t *wd = make_weight(type, ne0, ne1);
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(type, ne0), .name = "w"};
    float *x = bs_xmalloc((size_t)(ne0 * MAXR) * sizeof(float));
    for (int64_t i = 0; i < ne0 * MAXR; i++) x[i] = bs_rng_normal(&rng) * (float)(1 + i % 5);
    float *yref = bs_xmalloc((size_t)(ne1 * MAXR) * sizeof(float)), *y = bs_xmalloc((size_t)(ne1 * MAXR) * sizeof(float));
    bs_cpu_set_level(BS_CPU_SCALAR);
    bs_matmul(&W, x, MAXR, yref, NULL);
    for (int level = BS_CPU_NEON; level <= bs_cpu_top_level(); level++)
        for (int mode = BS_TBL_ON; mode >= BS_TBL_OFF; mode--) {
            bs_neon_tbl_mode = mode;
            bs_cpu_set_level(level);
            for (int nr = 1; nr <= MAXR; nr++) {
                const char *k = bs_kernel_describe(&W, nr, level);
                CHECKF((mode == BS_TBL_ON) == !strcmp(k, "neon tbl"), "%s %s %d rows, tables %s: kernel %s",
                       bs_type_name(type), bs_cpu_level_name(level), nr, mode == BS_TBL_ON ? "on" : "off", k);
                for (int p = 0; p < 3; p++) {
                    memset(y, 0xff, (size_t)(ne1 * nr) * sizeof(float));
                    bs_matmul(&W, x, nr, y, pools[p]);
                    int64_t bad = -1;
                    for (int64_t i = 0; i < ne1 * nr && bad < 0; i++)
                        if (memcmp(&y[i], &yref[i], sizeof(float))) bad = i;
                    CHECKF(bad < 0, "%s %s ne0=%lld ne1=%lld %d rows %d threads tables %s: row %lld out %lld %.9g vs oracle %.9g",
                           bs_type_name(type), bs_cpu_level_name(level), (long long)ne0, (long long)ne1, nr,
                           bs_pool_size(pools[p]), mode == BS_TBL_ON ? "on" : "off", (long long)(bad / ne1),
                           (long long)(bad % ne1), bad < 0 ? 0.0 : y[bad], bad < 0 ? 0.0 : yref[bad]);
                }
            }
        }
    bs_neon_tbl_mode = BS_TBL_AUTO;
    free(wd), free(x), free(yref), free(y);
}

/* The tables themselves: every entry is the signed sum it stands for. */
static void check_tables(void) {
    enum { N = 256 };
    int8_t q[N];
    for (int i = 0; i < N; i++) q[i] = (int8_t)((int)(bs_rng_next(&rng) % 255) - 127);
    q[0] = q[1] = q[2] = q[3] = 127, q[4] = q[5] = -127;   /* the extremes */
    uint8_t *lut = bs_xmalloc(bs_neon_lut_stride(BS_LUT_NEON_Q2, N));
    bs_neon_tables(BS_LUT_NEON_Q1, q, N, lut);
    for (int c = 0; c < N / 4; c++)
        for (int e = 0; e < 16; e++) {
            int want = 0;
            for (int i = 0; i < 4; i++) want += (e >> i & 1 ? 1 : -1) * q[4 * c + i];
            const int16_t got = (int16_t)(lut[32 * c + e] | lut[32 * c + 16 + e] << 8);
            CHECKF(got == want, "Q1 table %d entry %d: %d, want %d", c, e, got, want);
        }
    bs_neon_tables(BS_LUT_NEON_Q2, q, N, lut);
    for (int p = 0; p < N / 2; p++)
        for (int e = 0; e < 16; e++) {
            const int want = (e % 4 - 1) * q[2 * p] + (e / 4 - 1) * q[2 * p + 1];
            const int16_t got = (int16_t)(lut[32 * p + e] | lut[32 * p + 16 + e] << 8);
            CHECKF(got == want, "Q2 table %d entry %d: %d, want %d", p, e, got, want);
        }
    free(lut);
}

int main(void) {
    if (!bs_kernel_neon_tbl(BS_Q1_0)) {
        printf("test_neon_tbl: skipped (no NEON table kernels on this architecture)\n");
        return 77;
    }
    bs_rng_seed(&rng, 39);
    bs_pool *pools[3] = {NULL, bs_pool_new(2), bs_pool_new(3)};
    check_tables();
    static const int types[] = {BS_Q1_0, BS_Q2_0, BS_PQ2_0, BS_Q2_0_G64};
    for (size_t t = 0; t < BS_ARRAY_LEN(types); t++) {
        const int qk = types[t] == BS_Q2_0_G64 ? 64 : 128;
        check_shape(types[t], qk, 5, pools);          /* one block, fewer rows than a group */
        check_shape(types[t], 3 * qk, 77, pools);     /* odd: 9 groups + 5 rows, 2 tiles */
        check_shape(types[t], 5120, 19, pools);       /* the model width */
    }
    bs_pool_free(pools[1]), bs_pool_free(pools[2]);
    return test_summary("test_neon_tbl");
}
