/* attn_simd.h: AVX-512 / AVX2 / NEON kernels for the two products of attention over the KV cache of
 * one KV head shared by a group of query heads, and bs_attn_queries, which runs them (or the
 * scalar code) for the target's and the drafter's attention. Each kernel returns false when no kernel applies (scalar dispatch level, head_dim not a
 * multiple of the vector width, group > BS_ATTN_MAX_GROUP); the caller then runs the scalar
 * code. Cache rows are f16 (kv_f16) or f32; f16 is widened exactly with F16C. A score depends
 * only on its query and key row (not on n_kv, group or the other rows of a batch); an output
 * on its weights and value rows, summed in position order. */
#ifndef BS_ATTN_SIMD_H
#define BS_ATTN_SIMD_H

#include <stdbool.h>
#include <stddef.h>

#define BS_ATTN_MAX_GROUP 8
#define BS_ATTN_MAX_D 512   /* longer heads take the scalar path */

/* scores[g * ss + p] = dot(q + g * q_stride, K_p) * scale, p < n_kv; K_p at kc + p * kv_row bytes. */
bool bs_attn_qk(const float *q, size_t q_stride, int group, const void *kc, size_t kv_row, bool kv_f16,
                int n_kv, int D, float scale, float *scores, size_t ss);
/* out[g * D + i] = sum over p < n_kv of w[g * ss + p] * V_p[i] (p in order). */
bool bs_attn_av(const float *w, size_t ss, int group, const void *vc, size_t kv_row, bool kv_f16, int n_kv,
                int D, float *out);

/* Attention of gn <= BS_ATTN_MAX_GROUP queries on one KV head: query i (q + i * D) sees rows
 * [0, nkv[i]) of kc / vc; out + i * D = softmax(q.K / sqrt(D)) V. The kernels above when they
 * apply (all queries over the longest range, the weights of rows a query does not see set to 0
 * after its softmax: fma(0, v, acc) == acc, so each output is its own range's sum), else the
 * scalar code. scores: gn rows of ss >= max(nkv) floats; tmp: D floats (f16 rows only). */
void bs_attn_queries(const float *q, int gn, const int *nkv, const void *kc, const void *vc, size_t kv_row,
                     bool kv_f16, int D, float *out, float *scores, size_t ss, float *tmp);

#endif
