/* spec_bench.h: `bitspark bench --spec` (spec_bench.c): measured DSpark round costs,
 * tokens-per-second projections at assumed acceptance rates, and a measured greedy generation
 * with and without the drafter through the generation engine. */
#ifndef BS_SPEC_BENCH_H
#define BS_SPEC_BENCH_H

typedef struct bs_spec_bench_opts {
    const char *model, *drafter;
    int n_threads, n_prompt, reps;
    int n_gen;                 /* tokens of the measured generations (0: none) */
    const char *device;        /* the target's --device (NULL: auto); the drafter follows it */
} bs_spec_bench_opts;

/* Prints the report on stdout. 0, or -1 + bs_error. */
int bs_spec_bench(const bs_spec_bench_opts *o);

#endif
