/* rotation.c: the activation side of PrismML's Hadamard fold (matmul.h: bs_rotation).
 *
 * Forward, for a product with a folded weight: P (V heads tiled -> grouped), then the signs,
 * then the fast Walsh-Hadamard transform of each block, scaled by 1/sqrt(block). Inverse, for
 * rows of a folded embedding table: the transform first, the signs second (the fold's own
 * inverse, since H is symmetric and orthogonal). Each row is transformed on its own, in the
 * same order whatever the row count, so a row's products still never depend on its batch. */
#include "cpu/matmul.h"

#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The in-place butterfly: H[r][c] = (-1)^popcount(r & c), unnormalized. */
static void fwht(float *x, int n) {
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
}

static void blocks(const bs_rotation *r, float *y) {
    const float scale = (float)(1.0 / sqrt((double)r->block));   /* 2^-5 for 1024: exact */
    for (int64_t b = 0; b < r->width; b += r->block) fwht(y + b, r->block);
    for (int64_t i = 0; i < r->width; i++) y[i] *= scale;
}

static void signs(const bs_rotation *r, float *y) {
    if (r->signs)
        for (int64_t i = 0; i < r->width; i++) y[i] *= r->signs[i];
}

/* Feature (rep i, group k, d) of the tiled order goes to (group k, rep i, d). */
static void permute(const bs_rotation *r, const float *x, float *y) {
    const int hd = r->perm_hd, nk = r->perm_nk, rep = r->perm_rep;
    for (int i = 0; i < rep; i++)
        for (int k = 0; k < nk; k++)
            memcpy(y + ((size_t)k * rep + i) * hd, x + ((size_t)i * nk + k) * hd, (size_t)hd * sizeof *y);
}

static void rotate_row(const bs_rotation *r, const float *x, float *y, float *tmp) {
    if (r->inverse) {
        if (y != x) memcpy(y, x, (size_t)r->width * sizeof *y);
        blocks(r, y);
        signs(r, y);
        return;
    }
    if (r->perm_hd) {
        permute(r, x, tmp);
        memcpy(y, tmp, (size_t)r->width * sizeof *y);
    } else if (y != x) {
        memcpy(y, x, (size_t)r->width * sizeof *y);
    }
    signs(r, y);
    blocks(r, y);
}

typedef struct job {
    const bs_rotation *r;
    const float *x;
    float *y;
    int64_t n_rows;
} job;

static void run_rows(void *ctx, int ith, int nth) {
    const job *j = ctx;
    int64_t lo, hi;
    bs_pool_split(j->n_rows, 1, ith, nth, &lo, &hi);
    float *tmp = j->r->perm_hd ? bs_xmalloc((size_t)j->r->width * sizeof *tmp) : NULL;
    for (int64_t t = lo; t < hi; t++)
        rotate_row(j->r, j->x + t * j->r->width, j->y + t * j->r->width, tmp);
    free(tmp);
}

void bs_rotate_rows(const bs_rotation *r, const float *x, float *y, int64_t n_rows, bs_pool *pool) {
    job j = {r, x, y, n_rows};
    /* a row is ~10 passes over width floats: threads pay only for prompt-sized batches */
    if (pool && n_rows >= 4 && bs_pool_size(pool) > 1) bs_pool_run(pool, run_rows, &j);
    else run_rows(&j, 0, 1);
}
