/* threadpool.h: a persistent pool of worker threads for the kernels.
 *
 * bs_pool_run() wakes every worker, runs fn(ctx, ith, nth) on each thread (the caller is thread
 * 0) and returns when all are done. Workers spin for a short while after a job (the next matmul
 * usually follows within microseconds) and then sleep on a condition variable, so an idle pool
 * costs no CPU. Work is split statically (bs_pool_split) so thread i always streams the same
 * slice of a weight matrix: results never depend on timing. */
#ifndef BS_THREADPOOL_H
#define BS_THREADPOOL_H

#include <stdint.h>

typedef struct bs_pool bs_pool;
typedef void (*bs_pool_fn)(void *ctx, int ith, int nth);

/* n_threads in total including the caller (>= 1; 0 or less = number of online CPUs).
 * Returns NULL with bs_error if a thread cannot be created. */
bs_pool *bs_pool_new(int n_threads);
void bs_pool_free(bs_pool *p);
/* Threads in the pool (1 for NULL). */
int bs_pool_size(const bs_pool *p);
/* Run fn on every thread of the pool and wait. p == NULL runs fn(ctx, 0, 1) inline.
 * Not reentrant: one job at a time per pool (fn must not call bs_pool_run on the same pool). */
void bs_pool_run(bs_pool *p, bs_pool_fn fn, void *ctx);
/* Microseconds a worker spins before sleeping (default 2000; BITSPARK_SPIN_US overrides). */
void bs_pool_set_spin_us(bs_pool *p, int us);

/* Static split of [0, n) into nth nearly equal parts whose boundaries are multiples of align
 * (except the end): part ith is [*lo, *hi). */
void bs_pool_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

/* Number of online CPUs (>= 1). */
int bs_cpu_count(void);

#endif
