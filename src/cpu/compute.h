/* compute.h: what the layers above reach of the CPU backend, and all they may include from it:
 * matrix products on weights in any format (matmul.h: bs_weight, bs_matmul, bs_matmul_group,
 * repacking at load), the vector kernels of a step (ops.h, ops_simd.h: norms, activations, rope;
 * attn_simd.h: attention rows, F16 KV rows; gdn_simd.h: the gated delta rule) and the machine's
 * identity (cpu_features.h: dispatch level, for cost caches and reports). The kernels behind
 * them (kernels*.c, their packed layouts and activation formats) stay inside src/cpu/. A second
 * backend (src/vulkan/) implements a whole evaluation step instead of these entry points. */
#ifndef BS_COMPUTE_H
#define BS_COMPUTE_H

#include "cpu/attn_simd.h"
#include "cpu/cpu_features.h"
#include "cpu/gdn_simd.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/ops_simd.h"

#endif
