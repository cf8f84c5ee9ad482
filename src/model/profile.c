/* profile.c: see profile.h. */
#include "model/profile.h"
#include "io/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Atomic int bs_prof_state = -1;

enum { CLASS_1, CLASS_VERIFY, CLASS_BATCH, N_CLASS };

static const char *const phase_name[BS_PROF_N] = {
    "embed", "mm gdn in (qkv,z,b,a)", "mm gdn out", "mm attn in (q,k,v)", "mm attn out",
    "mm ffn gate+up", "mm ffn down", "mm lm head", "gdn gates", "gdn conv+silu+l2",
    "gdn recurrence", "gdn gated norm", "attn q/k norm+rope+kv", "attn softmax(QK)V",
    "attn out gate", "rmsnorm + residual", "swiglu", "rope tables", "pool wait (non-mm)",
    "sampling (per call)",
};
static const char *const class_name[N_CLASS] = {"1 row", "2-8 rows", ">8 rows"};

static struct {
    uint64_t ns[N_CLASS][BS_PROF_N];
    uint64_t steps[N_CLASS], rows[N_CLASS], samples, sample_ns;
    int cls;
} prof;

static clockid_t prof_clock = CLOCK_MONOTONIC;

uint64_t bs_prof_ns(void) {
    struct timespec ts;
    clock_gettime(prof_clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void report_at_exit(void) { bs_prof_report(); }

/* Once, whichever thread asks first: the clock and the exit report are set before the state
 * is published, so another thread never sees "on" with the wrong clock or a second report. */
static void prof_read_env(void) {
    const char *e = getenv("BITSPARK_PROFILE");
    const int on = bs_env_flag("BITSPARK_PROFILE");
    if (on && strcmp(e, "cpu") == 0) prof_clock = CLOCK_THREAD_CPUTIME_ID;
    if (on) atexit(report_at_exit);
    atomic_store_explicit(&bs_prof_state, on, memory_order_release);
}

int bs_prof_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, prof_read_env);
    return atomic_load_explicit(&bs_prof_state, memory_order_acquire);
}

void bs_prof_add(int phase, uint64_t ns) {
    if (phase == BS_PROF_SAMPLE) {
        prof.samples++;
        prof.sample_ns += ns;
    } else {
        prof.ns[prof.cls][phase] += ns;
    }
}

void bs_prof_step(int n_rows) {
    if (!bs_prof_on()) return;
    prof.cls = n_rows <= 1 ? CLASS_1 : n_rows <= 8 ? CLASS_VERIFY : CLASS_BATCH;
    prof.steps[prof.cls]++;
    prof.rows[prof.cls] += (uint64_t)n_rows;
}

typedef struct timed_job {
    bs_pool_fn fn;
    void *ctx;
    uint64_t own_ns;
} timed_job;

static void timed_fn(void *ctx, int ith, int nth) {
    timed_job *j = ctx;
    const uint64_t t0 = ith == 0 ? bs_prof_ns() : 0;
    j->fn(j->ctx, ith, nth);
    if (ith == 0) j->own_ns = bs_prof_ns() - t0;
}

void bs_prof_pool_run(int phase, bs_pool *pool, bs_pool_fn fn, void *ctx) {
    if (!bs_prof_on()) {
        bs_pool_run(pool, fn, ctx);
        return;
    }
    timed_job j = {fn, ctx, 0};
    const uint64_t t0 = bs_prof_ns();
    bs_pool_run(pool, timed_fn, &j);
    const uint64_t wall = bs_prof_ns() - t0;
    bs_prof_add(phase, j.own_ns);
    bs_prof_add(BS_PROF_POOL_WAIT, wall > j.own_ns ? wall - j.own_ns : 0);
}

void bs_prof_report(void) {
    if (bs_prof_state != 1) return;
    fprintf(stderr, "\nbitspark profile: %s ms per forward step\n%-24s",
            prof_clock == CLOCK_MONOTONIC ? "wall" : "caller CPU", "phase");
    for (int c = 0; c < N_CLASS; c++)
        if (prof.steps[c]) fprintf(stderr, " %12s", class_name[c]);
    fputc('\n', stderr);
    double total[N_CLASS] = {0}, mm[N_CLASS] = {0};
    for (int p = 0; p < BS_PROF_SAMPLE; p++) {
        uint64_t any = 0;
        for (int c = 0; c < N_CLASS; c++) any |= prof.ns[c][p];
        if (!any) continue;
        fprintf(stderr, "%-24s", phase_name[p]);
        for (int c = 0; c < N_CLASS; c++) {
            if (!prof.steps[c]) continue;
            const double ms = (double)prof.ns[c][p] / 1e6 / (double)prof.steps[c];
            fprintf(stderr, " %12.3f", ms);
            total[c] += ms;
            if (p >= BS_PROF_MM_GDN_IN && p <= BS_PROF_MM_HEAD) mm[c] += ms;
        }
        fputc('\n', stderr);
    }
    const char *lines[3] = {"total (no sampling)", "  matmuls", "  other"};
    for (int l = 0; l < 3; l++) {
        fprintf(stderr, "%-24s", lines[l]);
        for (int c = 0; c < N_CLASS; c++)
            if (prof.steps[c]) fprintf(stderr, " %12.3f", l == 0 ? total[c] : l == 1 ? mm[c] : total[c] - mm[c]);
        fputc('\n', stderr);
    }
    fprintf(stderr, "%-24s", "steps (rows)");
    for (int c = 0; c < N_CLASS; c++)
        if (prof.steps[c]) fprintf(stderr, " %5llu (%4llu)", (unsigned long long)prof.steps[c],
                                   (unsigned long long)prof.rows[c]);
    fputc('\n', stderr);
    if (prof.samples)
        fprintf(stderr, "%-24s %12.3f ms per call, %llu calls\n", phase_name[BS_PROF_SAMPLE],
                (double)prof.sample_ns / 1e6 / (double)prof.samples, (unsigned long long)prof.samples);
}

void bs_prof_reset(void) { memset(&prof, 0, sizeof prof); }
