/* kernels_quant.h: SIMD kernels for the 4-bit (Q4_0, Q4_1) and K-quant / ternary (Q6_K, TQ1_0,
 * TQ2_0) weight types, registered by bs_kernel_avx2 / bs_kernel_avx512 (internal to kernels*.c).
 *
 * Unlike the Q1_0/Q2_0 kernels these reproduce the scalar oracle's float operations one for
 * one (bs_q4_0_dot, bs_q4_1_dot, bs_q6_k_dot, bs_tq1_0_dot, bs_tq2_0_dot, which follow
 * llama.cpp's x86 order): the integer part of each block is exact, and the per-block float
 * updates, their order and the final reduction are the oracle's, so results are bit-identical
 * to BITSPARK_CPU=scalar (tests/test_kernels_quant.c) and independent of the tile.
 * Activations: the split Q8_0 / Q8_1 layout of kernels.h for Q4_0 / Q4_1, raw Q8_K rows for
 * the 256-block types. */
#ifndef BS_KERNELS_QUANT_H
#define BS_KERNELS_QUANT_H

#include "cpu/kernels.h"

/* Kernel for BS_Q4_0 / BS_Q4_1 / BS_Q6_K / BS_TQ1_0 / BS_TQ2_0, or NULL for other types. */
bs_kernel_fn bs_kernel_q4_avx2(int type);
bs_kernel_fn bs_kernel_q4_avx512(int type);
bs_kernel_fn bs_kernel_kquant_avx2(int type);
bs_kernel_fn bs_kernel_kquant_avx512(int type);

#endif
