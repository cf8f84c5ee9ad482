/* kernels_neon.c: the NEON kernels for every ARMv8-A CPU (kernels_neon_impl.h, DOT4 without
 * sdot), level BS_CPU_NEON. Empty stubs on other architectures. */
#include "cpu/kernels.h"

#if defined(__aarch64__)
#define NEON_FN(name) name##_neon
#include "cpu/kernels_neon_impl.h"
#else
bs_kernel_fn bs_kernel_neon(int type) { (void)type; return NULL; }
int bs_acts_q8_0_neon(bs_acts *A, int64_t r, const float *x) { (void)A, (void)r, (void)x; return -1; }
#endif
