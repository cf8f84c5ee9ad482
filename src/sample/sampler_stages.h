/* sampler_stages.h: the sampler stages beyond llama.cpp's default chain (sampler.c runs them at
 * their places in llama.cpp's order: top-n-sigma before top-k, typical-p after it, XTC and the
 * dynamic temperature at the end), each with llama.cpp's semantics, on the working logits or the
 * candidate list. They apply to sampling only: temperature <= 0 stays the argmax.
 *
 * XTC ("exclude top choices") removes, with probability P, every token at least `threshold`
 * probable but the least probable of them. llama.cpp flips that coin first; here the chain's
 * distribution is the mixture (1 - P) * without + P * with, the same law for the drawn token,
 * but a distribution speculative sampling can verify drafts against exactly. */
#ifndef BS_SAMPLER_STAGES_H
#define BS_SAMPLER_STAGES_H

#include "sample/sampler.h"

/* Top-n-sigma: logits below max - n * (their standard deviation) become -INFINITY (over the
 * finite ones of w[0..n_vocab)). */
void bs_stage_top_n_sigma(float *w, int32_t n_vocab, float n_sigma);

/* Locally typical sampling over c[0..n) (logits untempered): the candidates whose surprise is
 * nearest the entropy, until their mass passes p (at least min_keep). They are moved to the front
 * in that order; returns how many. */
int bs_stage_typical(bs_token_prob *c, int n, float p, int min_keep);

/* The temperature of the dynamic-temperature stage for c[0..n): temp +- range by the normalised
 * entropy of their softmax, raised to exponent. */
float bs_stage_dynatemp(const bs_token_prob *c, int n, float temp, float range, float exponent);

/* XTC's cut of c[0..n), sorted best first: the index of the least probable token at least
 * threshold probable, the tokens before it being the ones XTC removes; 0 when it removes none
 * (fewer than two above, or fewer than min_keep would remain). */
int bs_stage_xtc_cut(const bs_token_prob *c, int n, float threshold, int min_keep);

/* Softmax of c[from..n) at temperature t into out[from..n) (t <= 0: the best of them gets 1). */
void bs_stage_softmax(const bs_token_prob *c, int from, int n, float t, float *out);

#endif
