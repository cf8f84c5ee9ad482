/* q2_cycles.c: cycles per 128 weight-row products per activation row of the AVX2 Q2 X16
 * kernels, on one packed weight held in L2 (default 5120 x 256 Q2_0, 348 KB), one thread,
 * process CPU time, the kernel called directly on prepared activations (no quantization in
 * the timed loop). The clock is estimated from a chain of dependent adds (one per cycle).
 * Build (after the library; the link flags are the executable's):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Isrc tools/q2_cycles.c -o build/q2_cycles build/libbitspark.a \
 *      $(sed 's/.*libbitspark.a//' build/CMakeFiles/bitspark.dir/link.txt)
 * Usage: q2_cycles [TYPE [NE0 [NE1 [ROWS...]]]]   (defaults q2_0 5120 256, rows 1 2 3 4 5 8) */
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Cycles per second from 2^28 dependent adds (x86: one per cycle). */
static double clock_hz(void) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t v = 0;
        const double t0 = cpu_s();
        for (uint64_t i = 0; i < (1u << 28); i++) __asm__ volatile("add $1, %0" : "+r"(v));
        const double hz = (double)(1u << 28) / (cpu_s() - t0);
        if (hz > best) best = hz;
    }
    return best;
}

/* CPU seconds of one call: the best of 20 calls. */
static double call_s(bs_kernel_fn k, const bs_weight *W, const bs_acts *A, int nr, float *y) {
    double best = 1e30;
    for (int i = 0; i < 20; i++) {
        const double t0 = cpu_s();
        k(W, 0, W->ne1, A, 0, nr, y, W->ne1);
        const double dt = cpu_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Medians of 7 alternating measurements of both kernels (the host is shared), in cycles per
 * 128 weight-row products per activation row. */
static void measure(bs_kernel_fn k[2], const bs_weight *W, const bs_acts *A, int nr, float *y, double hz,
                    double out[2]) {
    double t[2][7];
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 2; j++) t[j][i] = k[j] ? call_s(k[j], W, A, nr, y) : 0;
    for (int j = 0; j < 2; j++) {
        qsort(t[j], 7, sizeof(double), cmp_d);
        out[j] = t[j][3] * hz / ((double)W->ne0 * (double)W->ne1 * nr / 128);
    }
}

int main(int argc, char **argv) {
    const int type = bs_type_from_name(argc > 1 ? argv[1] : "q2_0");
    const int64_t ne0 = argc > 2 ? atoll(argv[2]) : 5120, ne1 = argc > 3 ? atoll(argv[3]) : 256;
    int rows[16] = {1, 2, 3, 4, 5, 8}, nrows = 6;
    if (argc > 4) {
        nrows = 0;
        for (int i = 4; i < argc && nrows < 16; i++) rows[nrows++] = atoi(argv[i]);
    }
    const bs_kernel_fn x16 = bs_kernel_q2_x16_avx2(), shared = bs_kernel_q2_shared_avx2();
    if (type == BS_TYPE_INVALID || !x16 || bs_cpu_top_level() < BS_CPU_AVX2) {
        fprintf(stderr, "q2_cycles: needs a Q2 type and an AVX2 CPU\n");
        return 77;
    }
    const size_t rb = bs_row_size(type, ne0), bsz = bs_type_get(type)->type_size;
    uint8_t *w = bs_xmalloc(rb * (size_t)ne1);
    bs_rng rng;
    bs_rng_seed(&rng, 1);
    for (size_t i = 0; i < rb * (size_t)ne1; i++) w[i] = (uint8_t)bs_rng_next(&rng);
    for (size_t b = 0; b < rb * (size_t)ne1 / bsz; b++) w[b * bsz] = 0x1f, w[b * bsz + 1] = 0x21;
    bs_weight W = {.type = type, .ne0 = ne0, .ne1 = ne1, .data = w, .row_bytes = rb, .name = "w"};
    if (!bs_q2_x16_fits(&W)) return fprintf(stderr, "q2_cycles: shape does not fit X16\n"), 2;
    uint8_t *pk = bs_xmalloc(rb * (size_t)ne1);
    bs_pack_q2_x16_weight(&W, pk, NULL);
    W.packed = pk, W.pack_kind = BS_PACK_Q2_X16;
    const int maxr = 16;
    float *x = bs_xmalloc((size_t)(ne0 * maxr) * sizeof(float)), *y = bs_xmalloc((size_t)(ne1 * maxr) * sizeof(float));
    for (int64_t i = 0; i < ne0 * maxr; i++) x[i] = bs_rng_normal(&rng);
    bs_acts A;
    if (bs_acts_prepare(&A, type, x, ne0, maxr, 0, BS_CPU_AVX2)) return fprintf(stderr, "q2_cycles: acts\n"), 1;
    for (int64_t r = 0; r < maxr; r++)   /* the X16 kernels' seeds, as bs_matmul fills them */
        for (int64_t g = 0; g < ne0 / 32; g++) {
            int32_t s = 0;
            for (int l = 0; l < 8; l++) s += A.nsum[r * (ne0 / 4) + 8 * g + l];
            A.gsum[r * (ne0 / 32) + g] = s;
        }
    const double hz = clock_hz();
    printf("%s %lld x %lld (%.0f KB), clock %.2f GHz; cycles per 128 weight-row products per row (medians of 7):\n",
           bs_type_name(type), (long long)ne0, (long long)ne1, (double)(rb * (size_t)ne1) / 1024, hz / 1e9);
    printf("rows   x16   shared\n");
    bs_kernel_fn k[2] = {x16, shared};
    for (int i = 0; i < nrows; i++) {
        const int nr = rows[i] < 1 ? 1 : rows[i] > BS_KMAX_ROWS ? BS_KMAX_ROWS : rows[i];
        double c[2];
        measure(k, &W, &A, nr, y, hz, c);
        printf("%4d  %5.2f  %5.2f\n", nr, c[0], c[1]);
    }
    bs_acts_free(&A);
    free(w), free(pk), free(x), free(y);
    return 0;
}
