/* profile.h: an opt-in per-phase profile of the forward pass and the sampler.
 *
 * BITSPARK_PROFILE=1 in the environment turns it on; at exit the process prints to stderr, per
 * step size (1 row = decode, 2-8 rows = verify, more = prompt batches), the milliseconds per
 * step spent in each phase: matmuls by tensor kind, the DeltaNet conv / recurrence / gated norm,
 * attention, norms, RoPE, SwiGLU, the LM head, sampling, and the time the caller waited for the
 * pool's other threads in the non-matmul jobs. When off, each probe costs one load and branch.
 * BITSPARK_PROFILE=cpu measures the calling thread's CPU time instead of wall time: with -t 1
 * that is the cost of each phase even on a loaded machine (other threads' work is not seen).
 *
 * Probes are meant for the thread that drives the forward pass (the pool's workers are timed
 * by the caller around bs_pool_run); concurrent sessions in several threads would mix their
 * figures, which is acceptable for a diagnostic. */
#ifndef BS_PROFILE_H
#define BS_PROFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu/compute.h"
#include "io/threadpool.h"

enum bs_prof_phase {
    BS_PROF_EMBED,        /* token embedding lookup */
    BS_PROF_MM_GDN_IN,    /* GDN qkv, gate (z), beta, alpha projections */
    BS_PROF_MM_GDN_OUT,   /* GDN ssm_out */
    BS_PROF_MM_ATT_IN,    /* attention q(+gate), k, v projections */
    BS_PROF_MM_ATT_OUT,   /* attention output */
    BS_PROF_MM_FFN_UP,    /* FFN gate + up */
    BS_PROF_MM_FFN_DOWN,  /* FFN down */
    BS_PROF_MM_HEAD,      /* LM head */
    BS_PROF_GDN_GATES,    /* softplus/sigmoid gates, rollback record */
    BS_PROF_GDN_CONV,     /* causal conv + SiLU + L2 norms */
    BS_PROF_GDN_REC,      /* gated delta rule recurrence (pool job) */
    BS_PROF_GDN_NORM,     /* per-head gated RMSNorm */
    BS_PROF_ATT_PREP,     /* q/k norms, RoPE, KV store */
    BS_PROF_ATT_CORE,     /* softmax attention over the cache (pool job) */
    BS_PROF_ATT_GATE,     /* sigmoid output gate */
    BS_PROF_NORM,         /* block RMSNorms, residual adds, final norm */
    BS_PROF_SWIGLU,       /* silu(gate) * up */
    BS_PROF_ROPE_CACHE,   /* cos/sin tables */
    BS_PROF_POOL_WAIT,    /* caller idle in the GDN / attention pool jobs */
    BS_PROF_SAMPLE,       /* bs_sampler_apply (per call, not per step) */
    BS_PROF_N
};

extern _Atomic int bs_prof_state;   /* -1: not read yet, 0: off, 1: on */
int bs_prof_init(void);             /* reads BITSPARK_PROFILE once (any thread); returns the state */

static inline bool bs_prof_on(void) {
    const int st = atomic_load_explicit(&bs_prof_state, memory_order_acquire);
    return st < 0 ? bs_prof_init() != 0 : st != 0;
}

/* Monotonic nanoseconds. */
uint64_t bs_prof_ns(void);
/* 0 when profiling is off, else the current time: pass it to bs_prof_end. */
static inline uint64_t bs_prof_begin(void) { return bs_prof_on() ? bs_prof_ns() : 0; }
void bs_prof_add(int phase, uint64_t ns);
static inline void bs_prof_end(int phase, uint64_t t0) {
    if (t0) bs_prof_add(phase, bs_prof_ns() - t0);
}

/* A forward step of n rows starts: later phases are charged to its size class. */
void bs_prof_step(int n_rows);

/* bs_matmul timed as `phase`. */
static inline void bs_prof_matmul(int phase, const bs_weight *W, const float *x, int64_t n, float *y,
                                  bs_pool *pool) {
    const uint64_t t0 = bs_prof_begin();
    bs_matmul(W, x, n, y, pool);
    bs_prof_end(phase, t0);
}

/* bs_pool_run(pool, fn, ctx) with the caller's own share charged to `phase` and the rest of the
 * wall time (waiting for the other threads) to BS_PROF_POOL_WAIT. */
void bs_prof_pool_run(int phase, bs_pool *pool, bs_pool_fn fn, void *ctx);

/* Print the table gathered so far to stderr (also done at exit when on); reset clears it. */
void bs_prof_report(void);
void bs_prof_reset(void);

#endif
