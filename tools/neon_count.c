/* neon_count.c: one product W x (nr activation rows) through bs_matmul on one thread, for
 * tools/neon_count.sh, which counts the instructions qemu-aarch64 executes for it.
 * Usage: neon_count TYPE NE0 NE1 NE1_RUN NR LEVEL TBL(0|1) */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: neon_count TYPE NE0 NE1 NE1_RUN NR LEVEL TBL\n");
        return 2;
    }
    const int type = bs_type_from_name(argv[1]);
    const int64_t ne0 = atoll(argv[2]), ne1 = atoll(argv[3]), run = atoll(argv[4]);
    const int nr = atoi(argv[5]), level = atoi(argv[6]);
    if (type == BS_TYPE_INVALID || ne0 <= 0 || run <= 0 || run > ne1 || nr <= 0 || level > bs_cpu_top_level()) {
        fprintf(stderr, "neon_count: bad arguments\n");
        return 2;
    }
    bs_neon_tbl_mode = atoi(argv[7]) ? BS_TBL_ON : BS_TBL_OFF;
    const size_t rb = bs_row_size(type, ne0), bsz = bs_type_get(type)->type_size;
    uint8_t *w = bs_xmalloc(rb * (size_t)ne1);
    bs_rng rng;
    bs_rng_seed(&rng, 1);
    for (size_t i = 0; i < rb * (size_t)ne1; i++) w[i] = (uint8_t)bs_rng_next(&rng);
    for (size_t b = 0; b < rb * (size_t)ne1 / bsz; b++) w[b * bsz] = 0x1f, w[b * bsz + 1] = 0x21;
    float *x = bs_xmalloc((size_t)(ne0 * nr) * sizeof(float)), *y = bs_xmalloc((size_t)(ne1 * nr) * sizeof(float));
    for (int64_t i = 0; i < ne0 * nr; i++) x[i] = bs_rng_normal(&rng);
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = run, .data = w, .row_bytes = rb, .name = "w"};
    bs_cpu_set_level(level);
    bs_matmul(&W, x, nr, y, NULL);
    printf("%s %s\n", bs_kernel_describe(&W, nr, level), bs_cpu_level_name(level));
    free(w), free(x), free(y);
    return 0;
}
