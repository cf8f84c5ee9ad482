/* test_kernels_q2pack.c: the 16-row interleaved Q2 layout (BS_PACK_Q2_X16, kernels_pack_q2.c)
 * for Q2_0, PQ2_0 and Q2_0_G64.
 *
 * 1. Layout: every code of a packed group sits where kernels.h says (checked element by
 *    element against the natural rows), and unpacking gives back the original bytes.
 * 2. Kernels: the packed AVX-512 and AVX2 kernels (through bs_matmul) and the packed scalar kernel must
 *    equal the scalar oracle (bs_matmul at BS_CPU_SCALAR on the natural rows) bit for bit: they
 *    do the oracle's float operations (see kernels_pack_q2.c). Random quant bytes (code 3
 *    included), random scales and activations; rows a multiple of 16 with odd group counts,
 *    ne0 a multiple of 128 but not of 256 (and of 64 only, for G64).
 * 3. Invariance: 1..16 and 20 activation rows (verification widths, server passes, the >8-row
 *    tiled path) with 1, 2 and 3 threads give exactly the one-row results, on odd shapes and
 *    on the 27B's K (5120 and 17408 columns).
 * 4. At AVX2 both kernels, X16 and the shared-extraction one (kernels_q2_shared_avx2.c, forced
 *    with bs_q2_shared_mode; bench names it "q2 shared"), give the oracle's bits and each
 *    other's for every row count and thread count above. */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "test.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

static bs_rng rng;

static int qk_of(int type) { return type == BS_Q2_0_G64 ? 64 : 128; }

/* ne1 rows of random Q2 blocks: scales from quantizing normals, all code bytes random. */
static uint8_t *make_weight(int type, int64_t ne0, int64_t ne1) {
    const size_t rb = bs_row_size(type, ne0), bsz = 2 + (size_t)qk_of(type) / 4;
    uint8_t *w = bs_xmalloc(rb * (size_t)ne1);
    float *f = bs_xmalloc((size_t)ne0 * sizeof(float));
    for (int64_t o = 0; o < ne1; o++) {
        for (int64_t i = 0; i < ne0; i++) f[i] = bs_rng_normal(&rng);
        CHECK(bs_quantize(type, f, w + (size_t)o * rb, ne0) == 0);
    }
    for (size_t b = 0; b < rb * (size_t)ne1 / bsz; b++)
        for (size_t j = 2; j < bsz; j++) w[b * bsz + j] = (uint8_t)bs_rng_next(&rng);
    free(f);
    return w;
}

static int code_at(const uint8_t *row, int qk, int64_t col) {
    const uint8_t *blk = row + (size_t)(col / qk) * (2 + (size_t)qk / 4);
    int64_t j = col % qk;
    return (blk[2 + j / 4] >> (2 * (j % 4))) & 3;
}

static void check_layout(int type, int64_t ne0) {
    const int qk = qk_of(type);
    const size_t rb = bs_row_size(type, ne0), gbytes = 16 * rb, bsz = 16 * (2 + (size_t)qk / 4);
    uint8_t *w = make_weight(type, ne0, 16), *pk = bs_xmalloc(gbytes), *back = bs_xmalloc(gbytes);
    bs_pack_q2_x16_group(w, rb, ne0, qk, pk);
    int bad = 0;
    for (int64_t col = 0; col < ne0; col++)
        for (int i = 0; i < 16; i++) {
            const uint8_t *blk = pk + (size_t)(col / qk) * bsz;
            int64_t c = (col % qk) / 16, p = (col % 16) / 4, j = col % 4;
            int got = (blk[32 + 64 * c + 4 * i + j] >> (2 * p)) & 3;
            if (got != code_at(w + (size_t)i * rb, qk, col)) bad++;
        }
    for (int i = 0; i < 16; i++)
        for (int64_t b = 0; b < ne0 / qk; b++)
            if (memcmp(pk + (size_t)b * bsz + 2 * i, w + (size_t)i * rb + (size_t)b * (bsz / 16), 2)) bad++;
    CHECKF(bad == 0, "%s ne0=%lld: %d codes or scales misplaced in the packed group", bs_type_name(type),
           (long long)ne0, bad);
    bs_unpack_q2_x16_group(pk, rb, ne0, qk, back);
    CHECKF(memcmp(back, w, gbytes) == 0, "%s ne0=%lld: unpack(pack(w)) != w", bs_type_name(type), (long long)ne0);
    free(w), free(pk), free(back);
}

/* The packed scalar kernel, called directly on one prepared row at a time. */
static void scalar_packed(const bs_weight *W, const float *x, int64_t nr, float *y) {
    bs_acts A;
    CHECK(bs_acts_prepare(&A, W->type, x, W->ne0, nr, 0, BS_CPU_SCALAR) == 0);
    for (int64_t r = 0; r < nr; r++)   /* per-32-group sums, as bs_matmul_fast fills them */
        for (int64_t g = 0; g < W->ne0 / 32; g++) {
            int32_t s = 0;
            for (int l = 0; l < 8; l++) s += A.nsum[r * (W->ne0 / 4) + 8 * g + l];
            A.gsum[r * (W->ne0 / 32) + g] = s;
        }
    for (int64_t r = 0; r < nr; r++) bs_kernel_q2_x16_scalar()(W, 0, W->ne1, &A, r, 1, y, W->ne1);
    bs_acts_free(&A);
}

/* Whether this CPU and build have the packed kernel of a dispatch level. */
static int has_kernel(int level) {
    if (bs_cpu_top_level() < level) return 0;
    return level == BS_CPU_AVX512 ? bs_kernel_q2_x16_avx512() != NULL : bs_kernel_q2_x16_avx2() != NULL;
}

static void check_kernels(int type, int64_t ne0, int64_t ne1, bs_pool **pools) {
    static const int64_t nrows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20};
    const int64_t maxr = 20;
    const char *tn = bs_type_name(type);
    uint8_t *wd = make_weight(type, ne0, ne1);
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = bs_row_size(type, ne0),
                   .name = "w"};
    float *x = bs_xmalloc((size_t)(ne0 * maxr) * sizeof(float));
    for (int64_t i = 0; i < ne0 * maxr; i++) x[i] = bs_rng_normal(&rng) * (float)(1 + i % 7);
    const size_t ybytes = (size_t)(maxr * ne1) * sizeof(float);
    float *yref = bs_xmalloc(ybytes), *y = bs_xmalloc(ybytes);
    bs_cpu_set_level(BS_CPU_SCALAR);
    bs_matmul(&W, x, maxr, yref, NULL);   /* oracle: natural rows */

    CHECK(bs_q2_x16_fits(&W));
    uint8_t *pk = bs_xmalloc(W.row_bytes * (size_t)ne1);
    bs_pack_q2_x16_weight(&W, pk, pools[1]);
    W.packed = pk, W.pack_kind = BS_PACK_Q2_X16;
    for (int p = 1; p < 3; p++) {   /* in place (threads split the groups) gives the same bytes */
        uint8_t *ip = bs_xmalloc(W.row_bytes * (size_t)ne1);
        memcpy(ip, wd, W.row_bytes * (size_t)ne1);
        bs_weight Wi = W;
        Wi.data = ip;
        bs_pack_q2_x16_weight(&Wi, ip, pools[p]);
        CHECKF(memcmp(ip, pk, W.row_bytes * (size_t)ne1) == 0, "%s ne0=%lld ne1=%lld: packing in place differs",
               tn, (long long)ne0, (long long)ne1);
        free(ip);
    }
    uint8_t *row = bs_xmalloc(W.row_bytes);
    for (int64_t o = 0; o < ne1; o++) {
        bs_unpack_q2_x16_row(&W, o, row);
        CHECKF(memcmp(row, wd + (size_t)o * W.row_bytes, W.row_bytes) == 0, "%s ne0=%lld: row %lld unpacks wrong",
               tn, (long long)ne0, (long long)o);
    }
    free(row);
    scalar_packed(&W, x, maxr, y);
    CHECKF(memcmp(y, yref, ybytes) == 0, "%s ne0=%lld ne1=%lld: packed scalar kernel != oracle", tn,
           (long long)ne0, (long long)ne1);
    float *yx16 = bs_xmalloc(ybytes);
    for (int level = BS_CPU_AVX2; level <= BS_CPU_AVX512; level++) {
        if (!has_kernel(level)) continue;
        bs_cpu_set_level(level);
        /* AVX2: the X16 kernel, then the shared-extraction one, which must give its bits */
        const int modes = level == BS_CPU_AVX2 && bs_kernel_q2_shared_avx2() ? 2 : 1;
        for (size_t k = 0; k < BS_ARRAY_LEN(nrows); k++)
            for (int p = 0; p < 3; p++)
                for (int m = 0; m < modes; m++) {
                    const int64_t nr = nrows[k];
                    bs_q2_shared_mode = level != BS_CPU_AVX2 ? BS_TBL_AUTO : m ? BS_TBL_ON : BS_TBL_OFF;
                    const char *kn = bs_kernel_describe(&W, nr, level);
                    if (level == BS_CPU_AVX2)
                        CHECKF(strcmp(kn, m ? "q2 shared" : "q2 x16") == 0, "%s AVX2 %lld rows, mode %d: kernel %s",
                               tn, (long long)nr, m, kn);
                    memset(y, 0xff, ybytes);
                    bs_matmul(&W, x, nr, y, pools[p]);
                    int64_t bad = -1;
                    for (int64_t i = 0; i < nr * ne1 && bad < 0; i++)
                        if (memcmp(&y[i], &yref[i], sizeof(float))) bad = i;
                    CHECKF(bad < 0, "%s %s (%s) ne0=%lld ne1=%lld, %lld rows, %d threads: row %lld out %lld = %.9g, oracle %.9g",
                           tn, bs_cpu_level_name(level), kn, (long long)ne0, (long long)ne1, (long long)nr,
                           bs_pool_size(pools[p]), (long long)(bad / ne1), (long long)(bad % ne1), bad < 0 ? 0.0 : y[bad],
                           bad < 0 ? 0.0 : yref[bad]);
                    if (m == 0) memcpy(yx16, y, (size_t)(nr * ne1) * sizeof(float));
                    else
                        CHECKF(memcmp(y, yx16, (size_t)(nr * ne1) * sizeof(float)) == 0,
                               "%s ne0=%lld ne1=%lld, %lld rows, %d threads: shared kernel != X16 kernel", tn,
                               (long long)ne0, (long long)ne1, (long long)nr, bs_pool_size(pools[p]));
                }
        bs_q2_shared_mode = BS_TBL_AUTO;
    }
    free(yx16);
    for (int pack_level = BS_CPU_AVX2; pack_level <= BS_CPU_AVX512; pack_level++) {
        if (!has_kernel(pack_level)) continue;
        /* the model loader's path: bs_weight_pack_in_place picks this layout; the scalar level
         * reads its rows back through bs_weight_row */
        uint8_t *ip = bs_xmalloc(W.row_bytes * (size_t)ne1);
        memcpy(ip, wd, W.row_bytes * (size_t)ne1);
        bs_weight Wi = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = ip, .row_bytes = W.row_bytes, .name = "w"};
        bs_cpu_set_level(pack_level);
        CHECK(bs_weight_pack_in_place(&Wi, pools[2]) == 0);
        CHECKF(Wi.pack_kind == BS_PACK_Q2_X16 && Wi.packed == ip && memcmp(ip, pk, W.row_bytes * (size_t)ne1) == 0,
               "%s: bs_weight_pack_in_place did not make the x16 layout at %s", tn, bs_cpu_level_name(pack_level));
        const int levels[] = {BS_CPU_SCALAR, pack_level};
        for (size_t li = 0; li < BS_ARRAY_LEN(levels); li++) {
            const int level = levels[li];
            bs_cpu_set_level(level);
            memset(y, 0xff, ybytes);
            bs_matmul(&Wi, x, maxr, y, pools[1]);
            CHECKF(memcmp(y, yref, ybytes) == 0, "%s ne0=%lld ne1=%lld: packed in place, level %s != oracle", tn,
                   (long long)ne0, (long long)ne1, bs_cpu_level_name(level));
        }
        bs_weight_release(&Wi);
        free(ip);
    }
    bs_cpu_set_level(-1);
    free(pk), free(wd), free(x), free(yref), free(y);
}

int main(void) {
    bs_rng_seed(&rng, 77);
    bs_pool *pools[3] = {NULL, bs_pool_new(2), bs_pool_new(3)};
    CHECK(pools[1] && pools[2]);
    printf("cpu: %s, max level %s, packed AVX-512 kernel %s, AVX2 kernel %s\n", bs_cpu_describe(),
           bs_cpu_level_name(bs_cpu_top_level()), has_kernel(BS_CPU_AVX512) ? "tested" : "not available",
           has_kernel(BS_CPU_AVX2) ? "tested" : "not available");
    const int types[] = {BS_Q2_0, BS_PQ2_0, BS_Q2_0_G64};
    for (size_t t = 0; t < BS_ARRAY_LEN(types); t++) {
        const int qk = qk_of(types[t]);
        const int64_t ne0s[] = {qk, 3 * qk, 5 * qk};
        for (size_t a = 0; a < BS_ARRAY_LEN(ne0s); a++) {
            check_layout(types[t], ne0s[a]);
            for (int64_t ne1 = 16; ne1 <= 80; ne1 += 32) check_kernels(types[t], ne0s[a], ne1, pools);
        }
        check_kernels(types[t], 5120, 48, pools);   /* the 27B's K, 3 groups of 16 rows */
        check_kernels(types[t], 17408, 32, pools);   /* the 27B's FFN-down K */
    }
    bs_pool_free(pools[1]);
    bs_pool_free(pools[2]);
    return test_summary("test_kernels_q2pack");
}
