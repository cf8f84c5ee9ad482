/* test_kernels_quant.c: the Q4_0 / Q4_1 / Q6_K / TQ1_0 / TQ2_0 SIMD kernels (kernels_q4.c,
 * kernels_kquant.c) against the scalar oracle (the BITSPARK_CPU=scalar path of bs_matmul), at
 * every dispatch level this CPU has.
 *
 * These kernels do the oracle's float operations one for one, so the tolerance is zero: every
 * output must be bit-identical to the oracle, for 1..9 and 20 activation rows (register tiles
 * of 1..8 rows plus remainders) and 1, 2 and 3 threads, which also makes each row's result
 * independent of the row and thread count.
 * Data: every quant byte random (Q4 nibbles 0..15, Q6_K high bits and int8 scales incl. -128,
 * TQ1_0 bytes outside the packer's range, TQ2_0 code 3), scales from random normals (Q4_1's m
 * of either sign), activations normal with per-element magnitudes spanning 1..7, one all-zero
 * activation block (scale 0) and one all-zero row. Sizes: one block, odd block counts
 * (ne0 = 96, 768, 1184, 1280) and output counts that are not multiples of any tile (1, 7, 37). */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "test.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bs_rng rng;

enum { MAXR = 20 };

/* Offsets of the fp16 scale fields in a block (others are randomized). */
static int scale_fields(int type, int off[2]) {
    switch (type) {
    case BS_Q4_0: off[0] = 0; return 1;
    case BS_Q4_1: off[0] = 0, off[1] = 2; return 2;
    case BS_Q6_K: off[0] = 208; return 1;
    case BS_TQ1_0: off[0] = 52; return 1;
    case BS_TQ2_0: off[0] = 64; return 1;
    default: return 0;
    }
}

static uint8_t *make_weight(int type, int64_t ne0, int64_t ne1) {
    const bs_type_traits *t = bs_type_get(type);
    const size_t rb = bs_row_size(type, ne0), nblk = rb * (size_t)ne1 / t->type_size;
    uint8_t *w = bs_xmalloc(rb * (size_t)ne1);
    int off[2], ns = scale_fields(type, off);
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *p = w + b * t->type_size;
        for (size_t j = 0; j < t->type_size; j++) p[j] = (uint8_t)bs_rng_next(&rng);
        for (int s = 0; s < ns; s++) {
            uint16_t h = bs_f32_to_f16(bs_rng_normal(&rng) * 0.05f);
            memcpy(p + off[s], &h, 2);
        }
    }
    return w;
}

static float *make_acts(int64_t n) {
    float *x = bs_xmalloc((size_t)(n * MAXR) * sizeof(float));
    for (int64_t i = 0; i < n * MAXR; i++) x[i] = bs_rng_normal(&rng) * (float)(1 + (i % 7));
    const int64_t blk = n >= 256 ? 256 : 32;
    for (int64_t i = 0; i < blk; i++) x[2 * n + i] = 0.0f;    /* row 2: an all-zero block */
    for (int64_t i = 0; i < n; i++) x[5 * n + i] = 0.0f;      /* row 5: all zero */
    return x;
}

static void check_case(int type, int64_t ne0, int64_t ne1, int level, bs_pool **pools) {
    static const int64_t nrows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 20};
    int perm;
#ifdef BS_CPU_ARM
    /* aarch64: TQ1_0 / TQ2_0 have no NEON kernel yet (the threaded scalar dot); the bit
     * comparison below still runs that path at this level */
    if (type == BS_Q4_0 || type == BS_Q4_1 || type == BS_Q6_K)
#endif
    CHECKF(bs_kernel_get(type, level, ne0, &perm) != NULL, "%s %s: no SIMD kernel registered",
           bs_type_name(type), bs_cpu_level_name(level));
    uint8_t *wd = make_weight(type, ne0, ne1);
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(type, ne0),
                   .name = "w"};
    float *x = make_acts(ne0);
    float *yref = bs_xmalloc((size_t)(MAXR * ne1) * sizeof(float));
    float *y = bs_xmalloc((size_t)(MAXR * ne1) * sizeof(float));
    bs_cpu_set_level(BS_CPU_SCALAR);
    bs_matmul(&W, x, MAXR, yref, NULL);
    bs_cpu_set_level(level);
    for (size_t k = 0; k < BS_ARRAY_LEN(nrows); k++)
        for (int p = 0; p < 3; p++) {
            const int64_t nr = nrows[k];
            memset(y, 0xff, (size_t)(nr * ne1) * sizeof(float));
            bs_matmul(&W, x, nr, y, pools[p]);
            int bad = 0;
            for (int64_t r = 0; r < nr && bad < 3; r++)
                for (int64_t o = 0; o < ne1 && bad < 3; o++) {
                    float a = y[r * ne1 + o], b = yref[r * ne1 + o];
                    int ok = memcmp(&a, &b, sizeof a) == 0;
                    bad += !ok;
                    CHECKF(ok, "%s %s ne0=%lld ne1=%lld, %lld rows, %d threads: row %lld out %lld: %.9g vs oracle %.9g",
                           bs_type_name(type), bs_cpu_level_name(level), (long long)ne0, (long long)ne1,
                           (long long)nr, bs_pool_size(pools[p]), (long long)r, (long long)o, a, b);
                }
        }
    free(wd), free(x), free(yref), free(y);
}

int main(void) {
    bs_rng_seed(&rng, 4321);
    bs_pool *pools[3] = {NULL, bs_pool_new(2), bs_pool_new(3)};
    CHECK(pools[1] && pools[2]);
    static const int types[] = {BS_Q4_0, BS_Q4_1, BS_Q6_K, BS_TQ1_0, BS_TQ2_0};
    static const int64_t ne0_q4[] = {32, 96, 256, 1184}, ne0_k[] = {256, 768, 1280};
    static const int64_t ne1s[] = {1, 7, 37};
    printf("cpu: %s, max level %s\n", bs_cpu_describe(), bs_cpu_level_name(bs_cpu_top_level()));
    for (int level = BS_CPU_SCALAR + 1; level <= bs_cpu_top_level(); level++)
        for (size_t ti = 0; ti < BS_ARRAY_LEN(types); ti++) {
            const int type = types[ti], k = bs_type_get(type)->blck == 256;
            const int64_t *ne0s = k ? ne0_k : ne0_q4;
            const size_t n0 = k ? BS_ARRAY_LEN(ne0_k) : BS_ARRAY_LEN(ne0_q4);
            for (size_t i = 0; i < n0; i++)
                for (size_t j = 0; j < BS_ARRAY_LEN(ne1s); j++) check_case(type, ne0s[i], ne1s[j], level, pools);
        }
    bs_cpu_set_level(-1);
    bs_pool_free(pools[1]);
    bs_pool_free(pools[2]);
    return test_summary("test_kernels_quant");
}
