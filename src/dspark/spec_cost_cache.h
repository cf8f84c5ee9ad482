/* spec_cost_cache.h: cached cost measurements of the auto draft depth, per machine + model
 * pair (spec_cost_cache.c). */
#ifndef BS_SPEC_COST_CACHE_H
#define BS_SPEC_COST_CACHE_H

#include "dspark/spec_depth.h"

/* Calibrate d from the cache (and seed p, when a run of the pair left one); 1 if an entry for
 * this pair, thread count, CPU level and device exists. device: the target's (the model's
 * device name, e.g. "Vulkan <GPU>"; NULL or "" is the CPU). */
int bs_cost_cache_load(bs_spec_depth *d, const char *target, const char *drafter, int n_threads,
                       const char *device);
/* Save d's measurements (replacing the pair's entry), with its acceptance p once it has a few
 * observations (or was seeded). Failures are silent: it is only a cache. */
void bs_cost_cache_store(const bs_spec_depth *d, const char *target, const char *drafter, int n_threads,
                         const char *device);

#endif
