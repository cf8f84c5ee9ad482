/* threadpool.c: persistent workers with a spin-then-sleep handshake (see threadpool.h).
 *
 * Handshake: the caller publishes (fn, ctx), sets `pending` and bumps the generation counter;
 * workers wait for the generation to change, run their share and decrement `pending`; the last
 * one wakes the caller if it went to sleep. Sleeping uses the Dekker pattern with seq_cst
 * atomics: a sleeper registers itself (n_sleep) before re-checking the condition, and a waker
 * checks n_sleep after changing it, so a wakeup cannot be lost. */
#include "io/threadpool.h"
#include "io/util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

struct bs_pool {
    int n;                      /* threads including the caller */
    pthread_t *threads;
    int spin_us;
    bs_pool_fn fn;
    void *ctx;
    atomic_uint gen;            /* job generation */
    atomic_int pending;         /* workers still running the current job */
    atomic_int stop;
    atomic_int n_sleep;         /* workers sleeping on `wake` */
    atomic_int main_sleep;      /* caller sleeping on `done` */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
};

typedef struct { bs_pool *p; int ith; } worker_arg;

/* Condition wait with a 20 ms cap: the callers re-check their predicate in a loop, and the cap
 * bounds the damage of a lost wakeup (glibc < 2.38 has one in pthread_cond_signal, bug 25847;
 * signalling is done with broadcast for the same reason). */
static void cond_wait_capped(pthread_cond_t *c, pthread_mutex_t *mu) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(c, mu, &ts);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Spin until pred(p, arg) holds or spin_us passes; true if it holds. */
static int spin_until(bs_pool *p, int (*pred)(bs_pool *, unsigned), unsigned arg) {
    double t0 = -1;
    for (unsigned i = 0;; i++) {
        if (pred(p, arg)) return 1;
        cpu_relax();
        if ((i & 255) == 255) {
            sched_yield();   /* lets a descheduled peer run when threads outnumber cores */
            double t = now_us();
            if (t0 < 0) t0 = t;
            else if (t - t0 > p->spin_us) return 0;
        }
    }
}

static int gen_changed(bs_pool *p, unsigned seen) {
    return atomic_load(&p->gen) != seen || atomic_load(&p->stop);
}

static int all_done(bs_pool *p, unsigned unused) {
    (void)unused;
    return atomic_load(&p->pending) == 0;
}

static void *worker_main(void *argp) {
    worker_arg a = *(worker_arg *)argp;
    free(argp);
    bs_pool *p = a.p;
    /* Generation 0: the pool's first job may be published before this thread gets here. */
    unsigned seen = 0;
    for (;;) {
        if (!spin_until(p, gen_changed, seen)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleep, 1);
            while (!gen_changed(p, seen)) cond_wait_capped(&p->wake, &p->mu);
            atomic_fetch_sub(&p->n_sleep, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        p->fn(p->ctx, a.ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->main_sleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int bs_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

bs_pool *bs_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = bs_cpu_count();
    if (n_threads > 1024) {
        bs_error("thread count %d is too large", n_threads);
        return NULL;
    }
    bs_pool *p = bs_xcalloc(1, sizeof *p);
    p->n = n_threads;
    p->spin_us = 2000;
    const char *env = getenv("BITSPARK_SPIN_US");
    if (env && *env) p->spin_us = atoi(env);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->n_sleep, 0);
    atomic_init(&p->main_sleep, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->wake, &ca);
    pthread_cond_init(&p->done, &ca);
    pthread_condattr_destroy(&ca);
    p->threads = bs_xcalloc((size_t)n_threads, sizeof *p->threads);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = bs_xmalloc(sizeof *a);
        a->p = p;
        a->ith = i;
        int rc = pthread_create(&p->threads[i], NULL, worker_main, a);
        if (rc != 0) {
            free(a);
            p->n = i;   /* bs_pool_free joins only the threads that exist */
            bs_pool_free(p);
            bs_error("cannot create worker thread: %s", strerror(rc));
            return NULL;
        }
    }
    return p;
}

void bs_pool_free(bs_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int bs_pool_size(const bs_pool *p) { return p ? p->n : 1; }

void bs_pool_set_spin_us(bs_pool *p, int us) {
    if (p) p->spin_us = us < 0 ? 0 : us;
}

void bs_pool_run(bs_pool *p, bs_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->n_sleep)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    if (!spin_until(p, all_done, 0)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->main_sleep, 1);
        while (!all_done(p, 0)) cond_wait_capped(&p->done, &p->mu);
        atomic_store(&p->main_sleep, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void bs_pool_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    if (nth < 1) nth = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * ith / nth, b = units * (ith + 1) / nth;
    *lo = BS_MIN(a * align, n);
    *hi = BS_MIN(b * align, n);
}
