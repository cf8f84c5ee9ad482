/* kernels_neon_dot.c: the NEON kernels with FEAT_DotProd (kernels_neon_impl.h with DOT4 = sdot),
 * level BS_CPU_DOTPROD. CMake compiles this file alone with -march=armv8.2-a+dotprod on aarch64;
 * nothing here runs unless bs_cpu_level() allows it. Empty stubs elsewhere. */
#include "cpu/kernels.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define NEON_FN(name) name##_neon_dot
#include "cpu/kernels_neon_impl.h"
#else
bs_kernel_fn bs_kernel_neon_dot(int type) { (void)type; return NULL; }
int bs_acts_q8_0_neon_dot(bs_acts *A, int64_t r, const float *x) { (void)A, (void)r, (void)x; return -1; }
#endif
