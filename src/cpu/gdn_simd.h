/* gdn_simd.h: SIMD kernels for the gated delta rule recurrence of one V head over a batch of
 * tokens (deltanet.c holds the scalar reference and the data layout; qwen35-arch.md §2.5). */
#ifndef BS_GDN_SIMD_H
#define BS_GDN_SIMD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bs_gdn_head {
    const float *S_in;    /* state before the batch: dv rows of dk (key index fastest) */
    float *S_out;         /* state after it (may not alias S_in) */
    const float *q, *k, *v;   /* token t: q + t * qkv_stride (dk, dk, dv floats) */
    size_t qkv_stride;
    const float *g, *beta;    /* token t: log decay g[t * gs], beta[t * gs] */
    size_t gs;
    float *o;             /* token t: o + t * o_stride, dv floats */
    size_t o_stride;
    int n, dk, dv;        /* n >= 1 */
    float scale;
} bs_gdn_head;

/* Run the recurrence of one head with the best SIMD kernel of this CPU. Returns false (nothing
 * done) when no kernel applies (scalar dispatch level, dk not a multiple of the vector width);
 * the caller then runs the scalar code. Every token runs the same operations in the same order
 * whatever n is, so a token's output never depends on how many tokens share the batch. */
bool bs_gdn_head_simd(const bs_gdn_head *h);

#endif
