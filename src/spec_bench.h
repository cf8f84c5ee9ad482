/* spec_bench.h: `bitspark bench --spec` (spec_bench.c): measured DSpark round costs and
 * tokens-per-second projections at assumed acceptance rates. */
#ifndef BS_SPEC_BENCH_H
#define BS_SPEC_BENCH_H

/* argv as given to `bench` (argv[0] = "bench"); returns the exit status. */
int cli_spec_bench(int argc, char **argv);

#endif
