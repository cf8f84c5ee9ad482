/* kernels_q2_x16.h: the float step of the AVX2 kernels on the X16 ternary layout
 * (kernels_pack_q2.c's, and kernels_q2_shared_avx2.c's, which must give its bits).
 * Included by x86 code only, after <immintrin.h>. */
#ifndef BS_CPU_KERNELS_Q2_X16_H
#define BS_CPU_KERNELS_Q2_X16_H

/* One 32-column group of one activation row for 8 weight rows: the int16 pair sums s widened to
 * int32 onto the group's seed (its exact offset correction), then t = f * dx for the block's
 * first group, else fma(f, dx, t): the order every X16 kernel keeps. */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256 bs_q2x16_step(__m256i seed, __m256i s,
                                                                                          __m256 dx, __m256 t, int first) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(seed, _mm256_madd_epi16(s, _mm256_set1_epi16(1))));
    return first ? _mm256_mul_ps(f, dx) : _mm256_fmadd_ps(f, dx, t);
}

#endif
