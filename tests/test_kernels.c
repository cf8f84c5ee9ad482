/* test_kernels.c: every SIMD matmul path against the scalar oracle (BITSPARK_CPU=scalar path of
 * bs_matmul), at every dispatch level this CPU has.
 *
 * 1. Integer exactness: weights with scale 1 (or 0.5) and integer activations with amax 127
 *    make every float operation exact, so any wrong integer sum shows as a mismatch:
 *    results must be bit-identical to the oracle.
 * 2. Random data (random quant bytes incl. Q2_0 code 3 and Q8_0 -128, random normal scales and
 *    activations): |fast - oracle| <= 2e-5 * sum|w_i x_i| + 1e-30 (float accumulation order
 *    differs; the integer parts are exact); bit-identical where the kernel does the oracle's
 *    float operations (see bitexact()).
 * 3. Row-count / thread invariance: a row's result with 1..9, 17 or 20 activation rows and 1..3
 *    threads is bit-identical to computing it alone.
 * 4. The SIMD Q8_0 activation quantizers produce exactly the scalar quantizer's bytes, in the
 *    natural and the P128 (kernels.h) layouts.
 * With BITALG the AVX-512 Q2_0 kernels (and Q1_0 with BITSPARK_FAST_Q1=1) use P128;
 * BITSPARK_NO_P128=1 tests the others.
 * Q1_0 is also checked repacked on AVX-512 (16-row interleave, the models' default there): as a
 * copy (bs_weight_pack, 3 row groups) and in place (bs_weight_pack_in_place, 7 groups, every row
 * unpacked by bs_weight_row back to its original bytes; the oracle reads it that way), and in
 * the 128-row layout on AVX-512 and on AVX2 (against each other, bit for bit; AVX2's
 * shared-index kernel for several rows against its one-row kernel, bit for bit). */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "test.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static bs_rng rng;

static const int types[] = {BS_Q1_0, BS_Q2_0, BS_PQ2_0, BS_Q2_0_G64, BS_Q8_0, BS_Q4_1, BS_Q4_0,
                            BS_Q6_K, BS_TQ1_0, BS_TQ2_0, BS_F32, BS_F16, BS_BF16};

/* Byte offset and length of the scale field(s) inside a block, for "exact" mode; and whether
 * the remaining bytes may be randomized freely. */
static int scale_bytes(int type) {
    switch (type) {
    case BS_Q1_0: case BS_Q2_0: case BS_PQ2_0: case BS_Q2_0_G64: case BS_Q8_0: case BS_Q4_0: return 2;
    case BS_Q4_1: return 4;
    default: return 0;
    }
}

/* A random weight ne1 x ne0 of `type`. exact: scales 1.0 (Q4_1: d 1, m 0.5), small integer
 * float weights. Returns a malloc'd buffer. */
static uint8_t *make_weight(int type, int64_t ne0, int64_t ne1, int exact) {
    const bs_type_traits *t = bs_type_get(type);
    size_t rb = bs_row_size(type, ne0);
    uint8_t *w = bs_xmalloc(rb * (size_t)ne1);
    float *f = bs_xmalloc((size_t)ne0 * sizeof(float));
    for (int64_t o = 0; o < ne1; o++) {
        for (int64_t i = 0; i < ne0; i++)
            f[i] = exact ? (float)((int)(bs_rng_next(&rng) % 15) - 7) : bs_rng_normal(&rng);
        CHECK(bs_quantize(type, f, w + (size_t)o * rb, ne0) == 0);
    }
    int sb = scale_bytes(type);
    if (sb) {
        for (size_t blk = 0; blk < rb * (size_t)ne1 / t->type_size; blk++) {
            uint8_t *b = w + blk * t->type_size;
            for (size_t j = (size_t)sb; j < t->type_size; j++) b[j] = (uint8_t)bs_rng_next(&rng);
            if (exact) {
                b[0] = 0x00, b[1] = 0x3C;                       /* d = 1.0 */
                if (sb == 4) b[2] = 0x00, b[3] = 0x38;          /* m = 0.5 */
            }
        }
    }
    free(f);
    return w;
}

static float *make_acts(int64_t n, int64_t rows, int exact) {
    float *x = bs_xmalloc((size_t)(n * rows) * sizeof(float));
    for (int64_t i = 0; i < n * rows; i++) {
        if (!exact) x[i] = bs_rng_normal(&rng) * (float)(1 + (i % 7));
        else x[i] = (i % 32 == 5) ? 127.0f : (float)((int)(bs_rng_next(&rng) % 255) - 127);
    }
    return x;
}

static double bound(const bs_weight *W, const float *x, int64_t r, int64_t o) {
    float *wf = bs_xmalloc((size_t)W->ne0 * sizeof(float));
    uint8_t *row = bs_xmalloc(W->row_bytes);
    CHECK(bs_dequantize(W->type, bs_weight_row(W, o, row), wf, W->ne0) == 0);
    free(row);
    double s = 0;
    for (int64_t i = 0; i < W->ne0; i++) s += fabs((double)wf[i] * x[r * W->ne0 + i]);
    free(wf);
    return s;
}

/* Paths whose float operations are the oracle's (llama.cpp's x86 AVX2 order) one for one, so
 * they must match it bit for bit on any data: the AVX2 Q1_0 and Q8_0 kernels, the AVX-512 Q1_0
 * kernel (unless BITSPARK_FAST_Q1 selects the P128 one) and every type without a SIMD kernel
 * (threaded scalar dot); on aarch64 every quantized type's NEON kernel at every level (sdot and
 * smmla give the oracle's integer lanes, kernels_neon_impl.h). The repacked x16 layout is not
 * (tolerance only). */
static int bitexact(int type, int level, int packed) {
    int perm;
    if (packed) return 0;
    if (!bs_kernel_get(type, level, 1024, &perm)) return bs_type_get(type)->is_quantized;
#ifdef BS_CPU_ARM
    return bs_type_get(type)->is_quantized;
#endif
    if (type == BS_Q1_0 && level == BS_CPU_AVX512) return !getenv("BITSPARK_FAST_Q1");
    return level == BS_CPU_AVX2 && (type == BS_Q1_0 || type == BS_Q8_0);
}

static void mm(const bs_weight *W, const float *x, int64_t nr, float *y, bs_pool *p, int level) {
    bs_cpu_set_level(level);
    if (y) bs_matmul(W, x, nr, y, p);
}

enum { PACK_NONE, PACK_COPY, PACK_IN_PLACE };

/* One (type, shape) case at one level; pack: the weight repacked (a copy, or in place, when
 * the oracle reads the rows back through bs_weight_row's unpacking). */
static void check_case(int type, int64_t ne0, int64_t ne1, int level, bs_pool **pools, int pack) {
    static const int64_t nrows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 20};
    const int64_t maxr = 20;
    for (int exact = 1; exact >= 0; exact--) {
        uint8_t *wd = make_weight(type, ne0, ne1, exact);
        bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = wd,
                       .row_bytes = bs_row_size(type, ne0), .name = "w"};
        float *x = make_acts(ne0, maxr, exact);
        mm(&W, x, 1, NULL, NULL, level);   /* sets the level for bs_weight_pack */
        if (pack) {
            size_t bytes = W.row_bytes * (size_t)ne1;
            uint8_t *orig = bs_xmalloc(bytes);
            memcpy(orig, wd, bytes);
            CHECK((pack == PACK_COPY ? bs_weight_pack(&W, pools[1]) : bs_weight_pack_in_place(&W, pools[2])) == 0);
            CHECKF(W.packed != NULL, "%s: bs_weight_pack made no packed copy", bs_type_name(type));
            CHECK(pack == PACK_COPY ? W.packed != W.data : W.packed == W.data);
            uint8_t *row = bs_xmalloc(W.row_bytes);
            for (int64_t o = 0; o < ne1; o++)
                CHECKF(memcmp(bs_weight_row(&W, o, row), orig + (size_t)o * W.row_bytes, W.row_bytes) == 0,
                       "packed %d: row %lld does not unpack to its source bytes", pack, (long long)o);
            free(row), free(orig);
        }
        float *yref = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
        float *yone = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
        float *y = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
        mm(&W, x, maxr, yref, NULL, BS_CPU_SCALAR);
        for (int64_t r = 0; r < maxr; r++) mm(&W, x + r * ne0, 1, yone + r * ne1, NULL, level);
        int bad = 0;
        for (int64_t r = 0; r < maxr && bad < 3; r++)
            for (int64_t o = 0; o < ne1 && bad < 3; o++) {
                float a = yone[r * ne1 + o], b = yref[r * ne1 + o];
                int ok;
                if (exact || bitexact(type, level, pack)) ok = memcmp(&a, &b, sizeof a) == 0;
                else ok = fabs((double)a - b) <= 2e-5 * bound(&W, x, r, o) + 1e-30;
                if (!ok) bad++;
                CHECKF(ok, "%s %s ne0=%lld ne1=%lld exact=%d row %lld out %lld: %.9g vs oracle %.9g",
                       bs_type_name(type), bs_cpu_level_name(level), (long long)ne0, (long long)ne1,
                       exact, (long long)r, (long long)o, a, b);
            }
        for (size_t k = 0; k < BS_ARRAY_LEN(nrows); k++)
            for (int p = 0; p < 3; p++) {
                int64_t nr = nrows[k];
                memset(y, 0xff, (size_t)(nr * ne1) * sizeof(float));
                mm(&W, x, nr, y, pools[p], level);
                CHECKF(memcmp(y, yone, (size_t)(nr * ne1) * sizeof(float)) == 0,
                       "%s %s ne0=%lld ne1=%lld: %lld rows with %d threads differ from one row at a time",
                       bs_type_name(type), bs_cpu_level_name(level), (long long)ne0, (long long)ne1,
                       (long long)nr, bs_pool_size(pools[p]));
            }
        bs_weight_release(&W);
        free(wd), free(x), free(yref), free(yone), free(y);
    }
}

/* The 128-row layout gives X16's bits exactly, for 1..9 rows (the verify kernel), 10..47 (the
 * range kernel, K in chunks of 1 or 2 blocks or whole) and 48 or more (the prompt kernel, with
 * 1..3 trailing rows, K chunks of 1, 2 or the default blocks and tiles of 1, 2 or the default
 * groups), on 1..3 threads. */
static void check_l128_vs_x16(int64_t ne0, int64_t ne1, bs_pool **pools) {
    uint8_t *wd = make_weight(BS_Q1_0, ne0, ne1, 0);
    const size_t rb = bs_row_size(BS_Q1_0, ne0);
    bs_weight A = {.type = BS_Q1_0, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = rb};
    bs_weight B = A;
    setenv("BITSPARK_Q1_X16", "1", 1);
    CHECK(bs_weight_pack(&A, pools[1]) == 0 && A.pack_kind == BS_PACK_Q1_X16);
    unsetenv("BITSPARK_Q1_X16");
    CHECK(bs_weight_pack(&B, pools[2]) == 0 && B.pack_kind == BS_PACK_Q1_L128);
    static const int64_t rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 20, BS_L128_PROMPT_ROWS - 1, BS_L128_PROMPT_ROWS,
                                   BS_L128_PROMPT_ROWS + 1, BS_L128_PROMPT_ROWS + 2, BS_L128_PROMPT_ROWS + 7};
    const int64_t maxr = BS_L128_PROMPT_ROWS + 7;
    float *x = make_acts(ne0, maxr, 0);
    float *ya = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float)), *yb = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
    for (size_t k = 0; k < BS_ARRAY_LEN(rows); k++) {
        const int64_t nr = rows[k];
        const int prompt = nr >= BS_L128_PROMPT_ROWS;
        for (int p = 0; p < 3; p++)
            for (int kc = 0; kc <= (nr > BS_KMAX_ROWS ? 2 : 0); kc++)
                for (int gt = 0; gt <= (prompt ? 2 : 0); gt++) {
                    bs_l128_chunk_blocks = kc;
                    bs_l128_prompt_groups = gt;
                    bs_matmul(&A, x, nr, ya, pools[p]);
                    memset(yb, 0xff, (size_t)(nr * ne1) * sizeof(float));   /* NaN: chunks must not read stale sums */
                    bs_matmul(&B, x, nr, yb, pools[p]);
                    CHECKF(!memcmp(ya, yb, (size_t)(nr * ne1) * sizeof(float)),
                           "L128 vs X16: ne0=%lld, %lld rows, pool %d, chunks of %d blocks, tiles of %d groups differ",
                           (long long)ne0, (long long)nr, p, kc, gt);
                }
    }
    bs_l128_chunk_blocks = 0;
    bs_l128_prompt_groups = 0;
    bs_weight_release(&A);
    bs_weight_release(&B);
    free(wd), free(x), free(ya), free(yb);
}

/* A (run at AVX-512) and B (run at AVX2), the same matrix in the same layout, give the same bits
 * for every row count of rows[] and 1..3 threads; above BS_KMAX_ROWS rows also with K in chunks
 * of 1..max_kc blocks (L128). */
static void same_at_both_levels(const bs_weight *A, const bs_weight *B, const int64_t *rows, size_t n_rows_list,
                                int max_kc, bs_pool **pools, const char *what) {
    int64_t maxr = 1;
    for (size_t k = 0; k < n_rows_list; k++) maxr = BS_MAX(maxr, rows[k]);
    const int64_t ne0 = A->ne0, ne1 = A->ne1;
    float *x = make_acts(ne0, maxr, 0);
    float *ya = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float)), *yb = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
    for (size_t k = 0; k < n_rows_list; k++)
        for (int p = 0; p < 3; p++)
            for (int kc = 0; kc <= (rows[k] > BS_KMAX_ROWS ? max_kc : 0); kc++) {
                const int64_t nr = rows[k];
                bs_l128_chunk_blocks = kc;
                bs_cpu_set_level(BS_CPU_AVX512);
                bs_matmul(A, x, nr, ya, pools[p]);
                bs_cpu_set_level(BS_CPU_AVX2);
                memset(yb, 0xff, (size_t)(nr * ne1) * sizeof(float));
                bs_matmul(B, x, nr, yb, pools[p]);
                CHECKF(!memcmp(ya, yb, (size_t)(nr * ne1) * sizeof(float)),
                       "%s AVX2 vs AVX-512: ne0=%lld, %lld rows, pool %d, chunks of %d blocks differ", what,
                       (long long)ne0, (long long)nr, p, kc);
            }
    bs_l128_chunk_blocks = 0;
    free(x), free(ya), free(yb);
}

/* The AVX2 L128 kernel (CPUs without AVX-512) against the AVX-512 ones: its portable packer
 * writes the same bytes as the AVX-512 one, and its products are bit-identical for 1..9 rows
 * (one row kernel per row), 10+ (the range kernel, K whole or in chunks of 1 or 2 blocks) and
 * 48+ (the AVX-512 prompt kernel), on 1..3 threads. */
static void check_l128_avx2_vs_avx512(int64_t ne0, int64_t ne1, bs_pool **pools) {
    uint8_t *wd = make_weight(BS_Q1_0, ne0, ne1, 0);
    const size_t rb = bs_row_size(BS_Q1_0, ne0);
    bs_weight A = {.type = BS_Q1_0, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = rb};
    bs_weight B = A;
    bs_cpu_set_level(BS_CPU_AVX512);
    CHECK(bs_weight_pack(&A, pools[1]) == 0 && A.pack_kind == BS_PACK_Q1_L128);
    bs_cpu_set_level(BS_CPU_AVX2);
    CHECK(bs_weight_pack(&B, pools[2]) == 0 && B.pack_kind == BS_PACK_Q1_L128);
    CHECKF(!memcmp(A.packed, B.packed, rb * (size_t)ne1), "L128 packers differ: ne0=%lld ne1=%lld", (long long)ne0,
           (long long)ne1);
    static const int64_t rows[] = {1, 2, 3, 5, 8, 9, 20, BS_L128_PROMPT_ROWS, BS_L128_PROMPT_ROWS + 3};
    same_at_both_levels(&A, &B, rows, BS_ARRAY_LEN(rows), 2, pools, "L128");
    bs_weight_release(&A);
    bs_weight_release(&B);
    free(wd);
}

/* The AVX2 shared-index L128 kernel (kernels_tbl_avx2.c) called directly gives the one-row
 * kernel's bits for every row of 1..16-row passes, over the whole K and over K cut into chunks
 * of 1..3 blocks, on every group of the matrix and on a sub-range of groups. */
static void check_tbl_avx2(int64_t ne0, int64_t ne1, bs_pool **pools) {
    enum { MAXR = 16 };
    uint8_t *wd = make_weight(BS_Q1_0, ne0, ne1, 0);
    bs_weight W = {.type = BS_Q1_0, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(BS_Q1_0, ne0)};
    bs_cpu_set_level(BS_CPU_AVX2);
    CHECK(bs_weight_pack(&W, pools[1]) == 0 && W.pack_kind == BS_PACK_Q1_L128);
    float *x = make_acts(ne0, MAXR, 0);
    bs_acts A;
    CHECK(bs_acts_prepare(&A, BS_Q1_0, x, ne0, MAXR, 0, BS_CPU_AVX2) == 0);
    const size_t stride = bs_l128_lut_stride(ne0);
    uint8_t *lut = bs_xmalloc(stride * MAXR);
    for (int r = 0; r < MAXR; r++) bs_l128_tables_avx2(A.qs + r * ne0, ne0, lut + (size_t)r * stride);
    A.lut = lut;
    A.want_lut = BS_LUT_PLANAR;
    float *yr = bs_xmalloc((size_t)(MAXR * ne1) * sizeof(float)), *yt = bs_xmalloc((size_t)(MAXR * ne1) * sizeof(float));
    bs_kernel_l128_avx2()(&W, 0, ne1, &A, 0, 1, yr, ne1);
    for (int r = 1; r < MAXR; r++) bs_kernel_l128_avx2()(&W, 0, ne1, &A, r, 1, yr, ne1);
    const int64_t nb = ne0 / 128;
    for (int na = 1; na <= MAXR; na++)
        for (int kc = 0; kc <= 3; kc++)
            for (int sub = 0; sub < 2; sub++) {
                const int64_t o0 = sub && ne1 > 128 ? 128 : 0, o1 = sub && ne1 > 256 ? 256 : ne1;
                memset(yt, 0xff, (size_t)(MAXR * ne1) * sizeof(float));
                for (int64_t a = 0; a < MAXR; a += na)
                    for (int64_t b0 = 0; b0 < nb; b0 += kc ? kc : nb)
                        bs_kernel_tbl_l128_range_avx2()(&W, o0, o1, &A, a, (int)BS_MIN(na, MAXR - a), yt, ne1, b0,
                                                        BS_MIN(nb, b0 + (kc ? kc : nb)));
                int bad = 0;
                for (int64_t r = 0; r < MAXR; r++)
                    bad += memcmp(yt + r * ne1 + o0, yr + r * ne1 + o0, (size_t)(o1 - o0) * sizeof(float)) != 0;
                CHECKF(!bad, "tbl vs row kernel: ne0=%lld ne1=%lld, %d rows per pass, chunks of %d blocks, groups %lld..%lld: %d rows differ",
                       (long long)ne0, (long long)ne1, na, kc, (long long)o0, (long long)o1, bad);
            }
    A.lut = NULL;
    bs_acts_free(&A);
    bs_weight_release(&W);
    free(lut), free(wd), free(x), free(yr), free(yt);
}

/* The drafter pack's X16 Q4_1 kernel on AVX2 gives the AVX-512 one's bits (1..9 and 20 rows,
 * 1..3 threads). */
static void check_q4_avx2_vs_avx512(int64_t ne0, bs_pool **pools) {
    const int64_t ne1 = 80;
    uint8_t *wd = make_weight(BS_Q4_1, ne0, ne1, 0);
    bs_weight W = {.type = BS_Q4_1, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(BS_Q4_1, ne0)};
    bs_cpu_set_level(BS_CPU_AVX2);
    CHECK(bs_weight_pack(&W, pools[1]) == 0 && W.pack_kind == BS_PACK_Q4_X16);
    static const int64_t rows[] = {1, 2, 3, 4, 5, 8, 9, 20};
    same_at_both_levels(&W, &W, rows, BS_ARRAY_LEN(rows), 0, pools, "Q4_1 X16");
    bs_weight_release(&W);
    free(wd);
}

/* bs_matmul_group (products sharing an input, quantized once where their kernels want the same
 * activations) gives each product's bs_matmul bits: L128, X16, native and float weights in an
 * order that reuses, re-prepares and returns to a layout, and where a product wanting tables or
 * seeds follows one that did not, for 1..50 rows and 1..3 threads, at every level. */
static void check_group(bs_pool **pools) {
    const int64_t ne0 = 256, maxr = 50;
    static const struct { int type; int64_t ne1; } ws[] = {
        {BS_Q1_0, 128}, {BS_Q1_0, 256}, {BS_Q4_0, 40}, {BS_Q2_0, 48}, {BS_Q2_0, 32}, {BS_Q8_0, 40},
        {BS_Q4_0, 24}, {BS_Q2_0, 40}, {BS_Q1_0, 128}, {BS_F32, 24}, {BS_Q1_0, 48}, {BS_Q4_1, 32}};
    enum { NW = BS_ARRAY_LEN(ws) };
    bs_weight W[NW];
    const bs_weight *Wp[NW];
    float *yg[NW], *ys[NW];
    for (int i = 0; i < NW; i++) {
        W[i] = (bs_weight){.type = ws[i].type, .ne0 = ne0, .ne1 = ws[i].ne1, .data = make_weight(ws[i].type, ne0, ws[i].ne1, 0),
                           .row_bytes = bs_row_size(ws[i].type, ne0), .name = "g"};
        CHECK(bs_weight_pack(&W[i], pools[1]) == 0);
        Wp[i] = &W[i];
        yg[i] = bs_xmalloc((size_t)(maxr * ws[i].ne1) * sizeof(float));
        ys[i] = bs_xmalloc((size_t)(maxr * ws[i].ne1) * sizeof(float));
    }
    float *x = make_acts(ne0, maxr, 0);
    static const int64_t rows[] = {1, 3, 9, 50};
    for (size_t k = 0; k < BS_ARRAY_LEN(rows); k++)
        for (int p = 0; p < 3; p++) {
            for (int i = 0; i < NW; i++) bs_matmul(&W[i], x, rows[k], ys[i], pools[p]);
            bs_matmul_group(Wp, NW, x, rows[k], yg, pools[p]);
            for (int i = 0; i < NW; i++)
                CHECKF(!memcmp(yg[i], ys[i], (size_t)(rows[k] * ws[i].ne1) * sizeof(float)),
                       "%s: bs_matmul_group product %d (%s) differs from bs_matmul, %lld rows, pool %d",
                       bs_cpu_level_name(bs_cpu_level()), i, bs_type_name(ws[i].type), (long long)rows[k], p);
        }
    for (int i = 0; i < NW; i++) {
        bs_weight_release(&W[i]);
        free((void *)W[i].data), free(yg[i]), free(ys[i]);
    }
    free(x);
}

/* AMX tiles, emulated (this CPU may have none), through bs_matmul: the same bits as the AVX-512
 * kernels, for 32..71 rows (whole 32-row tiles and the rest), odd 16-row group counts (Q2_0)
 * and 1..3 threads. */
static void check_amx_case(int type, int64_t ne0, int64_t ne1, bs_pool **pools) {
    uint8_t *wd = make_weight(type, ne0, ne1, 0);
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(type, ne0)};
    CHECK(bs_weight_pack(&W, pools[1]) == 0 && bs_amx_fits(&W));
    static const int64_t rows[] = {31, 32, 33, 64, 71};
    float *x = make_acts(ne0, 71, 0);
    float *ya = bs_xmalloc((size_t)(71 * ne1) * sizeof(float)), *yb = bs_xmalloc((size_t)(71 * ne1) * sizeof(float));
    for (size_t k = 0; k < BS_ARRAY_LEN(rows); k++)
        for (int p = 0; p < 3; p++) {
            bs_amx_mode = BS_AMX_OFF;
            bs_matmul(&W, x, rows[k], ya, pools[p]);
            bs_amx_mode = BS_AMX_EMULATE;
            memset(yb, 0xff, (size_t)(rows[k] * ne1) * sizeof(float));
            bs_matmul(&W, x, rows[k], yb, pools[p]);
            CHECKF(!memcmp(ya, yb, (size_t)(rows[k] * ne1) * sizeof(float)), "AMX (emulated) vs AVX-512: %s %lldx%lld, %lld rows, pool %d",
                   bs_type_name(type), (long long)ne0, (long long)ne1, (long long)rows[k], p);
        }
    bs_amx_mode = BS_AMX_AUTO;
    bs_weight_release(&W);
    free(wd), free(x), free(ya), free(yb);
}

static void amx_zeros(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na, float *y, int64_t ldy) {
    (void)A;
    for (int64_t a = 0; a < na; a++) memset(y + a * ldy + o0, 0, (size_t)(o1 - o0) * sizeof(float));
    (void)W;
}

static void amx_crash(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na, float *y, int64_t ldy) {
    (void)W, (void)o0, (void)o1, (void)A, (void)na, (void)y, (void)ldy;
    abort();
}

static void check_amx(bs_pool **pools) {
    const bs_cpu_features *f = bs_cpu_features_get();
    CHECK(!bs_kernel_amx() || (f->amx_int8 && f->amx_usable));   /* only where the CPU has it */
    check_amx_case(BS_Q1_0, 384, 256, pools);
    check_amx_case(BS_Q1_0, 128, 384, pools);
    check_amx_case(BS_Q2_0, 256, 48, pools);
    check_amx_case(BS_Q2_0, 384, 96, pools);
    /* the self-check runs a path in a child and compares it with the emulator: a path that gives
     * other bits or dies is refused, and the test process lives on */
    CHECK(bs_amx_selfcheck(bs_kernel_amx_emulated()) == 1);
    CHECK(bs_amx_selfcheck(amx_zeros) == 0);
    CHECK(bs_amx_selfcheck(amx_crash) == 0);
    signal(SIGCHLD, SIG_IGN);   /* children reaped by the kernel: the check must fail safe, not spin */
    CHECK(bs_amx_selfcheck(bs_kernel_amx_emulated()) == 0);
    signal(SIGCHLD, SIG_DFL);
}

/* The AVX-512 table builder gives the scalar one's bytes (extremes, odd group counts), the
 * AVX2 one the same entries planar. */
static void check_l128_tables(int level) {
    for (int64_t n = 4; n <= 4 * 41; n += 4 * 9) {
        int8_t *q = bs_xmalloc((size_t)n);
        for (int64_t i = 0; i < n; i++) q[i] = (int8_t)(i < 8 ? (i % 2 ? 127 : -128) : (int)(bs_rng_next(&rng) % 256) - 128);
        uint8_t *a = bs_xmalloc((size_t)n * 8), *b = bs_xmalloc((size_t)n * 8);
        bs_l128_tables(q, n, a);
        if (level >= BS_CPU_AVX512) {
            bs_l128_tables_avx512(q, n, b);
            CHECKF(!memcmp(a, b, (size_t)n * 8), "L128 tables differ for %lld columns", (long long)n);
        }
        bs_l128_tables_avx2(q, n, b);
        for (int64_t i = 0; i < n * 8; i++)   /* group c, entry e: bytes 2e, 2e + 1 -> e, 16 + e */
            CHECKF(b[i] == a[32 * (i / 32) + 2 * (i % 16) + (i % 32) / 16], "planar L128 tables differ for %lld columns at %lld",
                   (long long)n, (long long)i);
        free(q), free(a), free(b);
    }
}

static void check_quantizer(int level, int perm) {
    const int64_t n = perm ? 128 * 9 : 32 * 37;
    float *x = make_acts(n, 1, 0);
    for (int j = 0; j < 32; j++) x[j] = 0.0f;                             /* amax 0 */
    for (int j = 32; j < 64; j++) x[j] = (float)(j - 48) + 0.5f;          /* ties (id = 1) */
    x[32] = 127.0f;
    for (int j = 64; j < 96; j++) x[j] = j == 64 ? -1e-30f : 1e-31f;      /* tiny */
    bs_acts a, b;
    CHECK(bs_acts_prepare(&a, BS_Q1_0, x, n, 1, perm, BS_CPU_SCALAR) == 0);
    CHECK(bs_acts_prepare(&b, BS_Q1_0, x, n, 1, perm, level) == 0);
    CHECKF(memcmp(a.qs, b.qs, (size_t)n) == 0, "%s quantizer: quants differ", bs_cpu_level_name(level));
    size_t lanes = (size_t)(perm ? n / 8 : n / 4) * 4;   /* bytes of lane data in use */
    CHECKF(memcmp(a.nsum, b.nsum, lanes) == 0, "%s quantizer: sums differ", bs_cpu_level_name(level));
    CHECKF(memcmp(a.dl, b.dl, lanes) == 0, "%s quantizer: scales differ", bs_cpu_level_name(level));
    bs_acts_free(&a);
    bs_acts_free(&b);
    free(x);
}

/* The repacked layouts, AMX and the L128 tables are x86 paths (aarch64 levels share the numbers
 * of the x86 ones but read the natural layouts). */
#ifdef BS_CPU_ARM
#define X86 0
#else
#define X86 1
#endif

int main(void) {
    bs_rng_seed(&rng, 1234);
    setenv("BITSPARK_Q1_L128", "1", 1);   /* the test matrices are far below L128's size threshold */
    bs_pool *pools[3] = {NULL, bs_pool_new(2), bs_pool_new(3)};
    CHECK(pools[1] && pools[2]);
    printf("cpu: %s, max level %s\n", bs_cpu_describe(), bs_cpu_level_name(bs_cpu_top_level()));
    if (bs_cpu_top_level() >= BS_CPU_AVX2 && bs_kernel_l128_avx2()) check_l128_tables(bs_cpu_top_level());
    if (X86 && bs_cpu_top_level() >= BS_CPU_AVX2 && bs_kernel_tbl_l128_avx2() && !bs_weight_exact())
        check_tbl_avx2(5120, 256, pools);   /* the 27B's K */
    if (X86 && bs_cpu_top_level() >= BS_CPU_AVX512 && !bs_weight_exact()) check_amx(pools);
    for (int level = BS_CPU_SCALAR + 1; level <= bs_cpu_top_level(); level++) {
        check_quantizer(level, 0);
        if (X86 && level >= BS_CPU_AVX512) check_quantizer(level, 1);
        for (size_t ti = 0; ti < BS_ARRAY_LEN(types); ti++) {
            int type = types[ti];
            int64_t blk = bs_type_get(type)->blck;
            int64_t mult[] = {1, 3, 5, 11};
            for (size_t mi = 0; mi < BS_ARRAY_LEN(mult); mi++) {
                int64_t ne0 = blk == 1 ? 16 * mult[mi] + (int64_t)mi * 3 - 2 : blk * mult[mi];
                if (ne0 < 1) ne0 = 1;
                if (blk == 256 && mi == 3) continue;   /* keep the slow K-quant oracle small */
                check_case(type, ne0, mi % 2 ? 37 : 18, level, pools, PACK_NONE);
                if (X86 && type == BS_Q4_1 && !bs_weight_exact() &&
                    (level >= BS_CPU_AVX512 ? bs_kernel_q4_x16_avx512() : bs_kernel_q4_x16_avx2())) {   /* the drafter pack's X16 */
                    check_case(type, ne0, 48, level, pools, PACK_COPY);
                    check_case(type, ne0, 112, level, pools, PACK_IN_PLACE);
                    if (level == BS_CPU_AVX2 && bs_cpu_top_level() >= BS_CPU_AVX512) check_q4_avx2_vs_avx512(ne0, pools);
                }
                if (X86 && type == BS_Q1_0 && level == BS_CPU_AVX2 && !bs_weight_exact() && bs_kernel_l128_avx2() && mi < 3) {
                    check_case(type, ne0, 128, level, pools, PACK_COPY);   /* L128, the only AVX2 layout */
                    check_case(type, ne0, 384, level, pools, PACK_IN_PLACE);
                    if (bs_kernel_tbl_l128_avx2()) check_tbl_avx2(ne0, mi ? 384 : 256, pools);
                    if (bs_cpu_top_level() >= BS_CPU_AVX512) check_l128_avx2_vs_avx512(ne0, mi ? 384 : 256, pools);
                }
                if (X86 && type == BS_Q1_0 && level >= BS_CPU_AVX512 && !bs_weight_exact()) {   /* 3 or 7 groups of 16 rows */
                    check_case(type, ne0, 48, level, pools, PACK_COPY);
                    check_case(type, ne0, 112, level, pools, PACK_IN_PLACE);
                    if (mi < 2) {   /* 1 or 3 groups of 128 rows (L128) */
                        check_case(type, ne0, 128, level, pools, PACK_COPY);
                        check_case(type, ne0, 384, level, pools, PACK_IN_PLACE);
                        check_l128_vs_x16(ne0, mi ? 384 : 256, pools);
                    }
                }
            }
        }
    }
    for (int level = BS_CPU_SCALAR; level <= bs_cpu_top_level(); level++) {
        bs_cpu_set_level(level);
        check_group(pools);
    }
    bs_cpu_set_level(-1);
    if (bs_weight_exact()) {   /* BITSPARK_EXACT=1: nothing is repacked */
        uint8_t *wd = make_weight(BS_Q1_0, 256, 32, 0);
        bs_weight W = {.type = BS_Q1_0, .ne0 = 256, .ne1 = 32, .data = wd, .row_bytes = bs_row_size(BS_Q1_0, 256)};
        CHECK(bs_weight_pack(&W, NULL) == 0 && bs_weight_pack_in_place(&W, NULL) == 0 && !W.packed);
        free(wd);
    }
    bs_cpu_set_level(-1);
    bs_pool_free(pools[1]);
    bs_pool_free(pools[2]);
    return test_summary("test_kernels");
}
