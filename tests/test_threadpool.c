/* test_threadpool.c: the persistent pool runs every job on every thread exactly once, in both
 * the spinning and the sleeping handshake, and bs_pool_split covers [0, n) exactly. */
#include "test.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct {
    atomic_int runs[8];
    atomic_int total;
    int nth_seen;
} counts;

static void job(void *ctx, int ith, int nth) {
    counts *c = ctx;
    atomic_fetch_add(&c->runs[ith], 1);
    atomic_fetch_add(&c->total, ith + 1);
    if (ith == 0) c->nth_seen = nth;
}

static void check_pool(int n, int spin_us, int jobs) {
    bs_pool *p = bs_pool_new(n);
    CHECK(p != NULL);
    if (!p) return;
    bs_pool_set_spin_us(p, spin_us);
    CHECK_EQ_INT(bs_pool_size(p), n);
    counts c = {0};
    for (int j = 0; j < jobs; j++) bs_pool_run(p, job, &c);
    for (int i = 0; i < n; i++) CHECK_EQ_INT(atomic_load(&c.runs[i]), jobs);
    CHECK_EQ_INT(atomic_load(&c.total), (long long)jobs * n * (n + 1) / 2);
    CHECK_EQ_INT(c.nth_seen, n);
    bs_pool_free(p);
}

static void check_split(int64_t n, int64_t align, int nth) {
    int64_t prev = 0;
    for (int i = 0; i < nth; i++) {
        int64_t lo, hi;
        bs_pool_split(n, align, i, nth, &lo, &hi);
        CHECK_EQ_INT(lo, prev);
        CHECK(hi >= lo);
        CHECK(hi == n || hi % align == 0);
        prev = hi;
    }
    CHECK_EQ_INT(prev, n);
}

int main(void) {
    for (int n = 1; n <= 4; n++) {
        check_pool(n, 2000, 1000);   /* spinning handshake */
        check_pool(n, 0, 200);       /* always sleeping */
    }
    counts c = {0};
    bs_pool_run(NULL, job, &c);      /* NULL pool: inline, one thread */
    CHECK_EQ_INT(atomic_load(&c.runs[0]), 1);
    CHECK_EQ_INT(c.nth_seen, 1);
    CHECK(bs_pool_size(NULL) == 1);
    CHECK(bs_cpu_count() >= 1);
    int64_t ns[] = {0, 1, 15, 16, 17, 1000, 5120, 248320};
    for (size_t i = 0; i < BS_ARRAY_LEN(ns); i++)
        for (int nth = 1; nth <= 5; nth++) {
            check_split(ns[i], 1, nth);
            check_split(ns[i], 16, nth);
        }
    return test_summary("test_threadpool");
}
