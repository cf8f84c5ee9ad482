/* sampler.h: the one sampler chain of bitspark, shared by `run`, `chat`, `serve` and
 * speculative sampling.
 *
 * The chain follows llama.cpp's default order and semantics, so flags mean what users expect
 * (bs_sampler_params.order gives another order, as llama.cpp's --samplers does):
 *
 *   logit bias -> repetition/presence/frequency penalties -> DRY -> top-k -> top-p -> min-p
 *   -> temperature -> softmax -> draw
 *
 * (or, with Mirostat on, llama.cpp's logit bias -> temperature -> Mirostat -> draw; Mirostat's
 * bound mu moves with each token accepted right after an apply, by that token's surprise in the
 * applied distribution, and truncating the history restores it)
 *
 * top-p and min-p therefore see the untempered distribution, as in llama.cpp. Temperature <= 0
 * is greedy: the argmax of the biased and penalised logits, ties to the lowest id.
 *
 * Nothing sorts the whole vocabulary: top-k keeps a heap of k, top-p without top-k runs a
 * mass-weighted quickselect and sorts only the kept head, min-p is a linear filter.
 *
 * The sampler keeps the token history that penalties and DRY look at. Sampling does not add to
 * it: the caller calls bs_sampler_accept() for every token that becomes part of the sequence
 * (prompt tokens too, if they should count, as llama.cpp does), and bs_sampler_truncate() when
 * the sequence is rolled back.
 *
 * After each bs_sampler_apply()/bs_sampler_sample() the final distribution over the surviving
 * candidates is available (bs_sampler_candidates): the exact p(x) that speculative sampling's
 * accept/reject test needs, and the server's post-sampling probabilities. */
#ifndef BS_SAMPLER_H
#define BS_SAMPLER_H

#include "bitspark.h"

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>


/* The stages' letters (bs_sampler_params.order), llama.cpp's, in its default order. */
#define BS_SAMPLER_STAGES "edskypmxt"

/* llama.cpp's names of the stages (sampler_order.c): a name's letter (0: unknown; its other
 * spellings too), a letter's name (NULL: none); a letter onto an order (16 bytes; unknown and
 * repeated letters skipped); names or letters as an order; the stages of order (letters) as p's: those left out off (no
 * `t`: temperature 1, no dynamic range), order stored. */
char bs_sampler_stage_letter(const char *name);
const char *bs_sampler_stage_name(char letter);
void bs_sampler_add_stage(char letter, char order[16]);
/* names separated by ';' (llama.cpp's --samplers) or letters (--sampling-seq) -> an order */
void bs_sampler_parse_order(const char *spec, bool letters, char order[16]);
void bs_sampler_use_stages(bs_sampler_params *p, const char *order);

/* (bs_sampler_params: bitspark.h.) llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat window 64 with every
 * penalty off, DRY off (base 1.75, allowed length 2, whole history), seed 0. */
bs_sampler_params bs_sampler_default_params(void);

/* One surviving candidate of the last apply: its id, its logit after every transformation
 * (temperature included; under Mirostat, or where an order puts the temperature before other
 * stages, less the best's) and its probability in the final distribution. */
typedef struct {
    int32_t id;
    float logit;
    float p;
} bs_token_prob;

typedef struct bs_sampler bs_sampler;

/* NULL + bs_error on invalid parameters (NaN, repeat_penalty <= 0, n_vocab < 1, ...). */
bs_sampler *bs_sampler_new(const bs_sampler_params *params, int32_t n_vocab);
void bs_sampler_free(bs_sampler *s);
const bs_sampler_params *bs_sampler_get_params(const bs_sampler *s);
int32_t bs_sampler_n_vocab(const bs_sampler *s);

/* Restart the random stream (reproducibility: same seed, same history, same logits -> same
 * tokens). */
void bs_sampler_set_seed(bs_sampler *s, uint64_t seed);

/* Logit bias: added to the token's logit before everything else; -INFINITY bans the token.
 * Setting a token again replaces its bias. -1 on an out-of-range id or a NaN/+inf bias. */
int bs_sampler_set_logit_bias(bs_sampler *s, int32_t id, float bias);
void bs_sampler_clear_logit_bias(bs_sampler *s);
/* Ban a token for the next apply/sample only (the loop guard's "resample without it"). */
int bs_sampler_ban_once(bs_sampler *s, int32_t id);

/* --- history (what penalties and DRY see) --- */
void bs_sampler_accept(bs_sampler *s, int32_t id);
void bs_sampler_accept_many(bs_sampler *s, const int32_t *ids, size_t n);
/* Keep only the first n accepted tokens (no-op when n >= the history length). */
void bs_sampler_truncate(bs_sampler *s, size_t n);
/* Constrain what is sampled with a grammar state (grammar.h; NULL: none; the caller's): each
 * apply masks the tokens it does not allow (before penalties and truncation), each accepted
 * token advances it, and truncating the history replays it. Set it after the prompt is in. */
struct bs_grammar_state;
void bs_sampler_set_grammar(bs_sampler *s, struct bs_grammar_state *g);
/* How many of ids[0..n) in a row the grammar allows from here (n without a grammar). */
int bs_sampler_grammar_prefix(bs_sampler *s, const int32_t *ids, int n);
size_t bs_sampler_history_len(const bs_sampler *s);
/* Mirostat's surprise bound now (2 tau until a token is accepted after an apply). */
float bs_sampler_mirostat_mu(const bs_sampler *s);
const int32_t *bs_sampler_history(const bs_sampler *s);

/* --- DRY sequence breakers ---
 * llama.cpp describes breakers as strings and finds, over the whole vocabulary, every token that
 * contains the string (a single-token breaker) or ends with a proper prefix of it (a head token
 * whose tail is the tokenization of the rest, at most 20 tokens). Strings are capped at 40 bytes.
 * The sampler needs the vocabulary for that, through this callback interface. */
typedef struct {
    void *ud;
    /* Bytes of one token as the detokenizer emits them (special tokens as their text). */
    const char *(*token_text)(void *ud, int32_t id, size_t *len);
    /* Tokenize plain text (no special tokens): writes at most max ids, returns how many, -1 on
     * error. */
    int (*tokenize)(void *ud, const char *text, size_t len, int32_t *out, int max);
} bs_sampler_vocab;

/* Replace the breakers with those derived from `n` strings (llama.cpp's defaults are "\n", ":",
 * "\"", "*"). Empty strings are ignored. */
int bs_sampler_set_dry_breakers(bs_sampler *s, const char *const *strings, int n,
                                const bs_sampler_vocab *vocab);
/* Add one breaker given directly as tokens: `head` followed by `tail` (n_tail may be 0). */
int bs_sampler_add_dry_breaker(bs_sampler *s, int32_t head, const int32_t *tail, int n_tail);
void bs_sampler_clear_dry_breakers(bs_sampler *s);
int bs_sampler_n_dry_breakers(const bs_sampler *s);

/* --- sampling --- */
/* Run the chain over `logits` (n_vocab floats, not modified) and keep the final distribution.
 * Returns the number of candidates, -1 + bs_error when every token is banned. */
int bs_sampler_apply(bs_sampler *s, const float *logits);
/* Draw from the distribution of the last apply with the sampler's RNG. Greedy draws nothing. */
int32_t bs_sampler_pick(bs_sampler *s);
/* apply + pick; -1 + bs_error when every token is banned. Does not accept the token. */
int32_t bs_sampler_sample(bs_sampler *s, const float *logits);
/* Whether sampling is the plain argmax of the logits (lowest id of the largest, NaN never):
 * temperature <= 0 and nothing that changes the logits (grammar, bias, bans, penalties, DRY). */
bool bs_sampler_plain_greedy(const bs_sampler *s);
/* How many of the best logits the chain reads when that is all it reads (temperature > 0, a
 * top-k of at most max, and nothing that changes the logits): k, else 0. Then a device may find
 * those k (bs_eval_top) and bs_sampler_sample_top gives what bs_sampler_sample would. */
int bs_sampler_top_k_only(const bs_sampler *s, int max);
/* apply + pick from the k best logits (ids[n], logits[n], best first in the sampler's order, as
 * bs_eval_top gives them) when bs_sampler_top_k_only said k: the same token, the same draw. */
int32_t bs_sampler_sample_top(bs_sampler *s, const int32_t *ids, const float *logits, int n);
/* Its apply alone: the distribution bs_sampler_apply would keep, from those k. Returns the
 * number of candidates, -1 + bs_error when there are none. */
int bs_sampler_apply_top(bs_sampler *s, const int32_t *ids, const float *logits, int n);

/* The distribution of the last apply. Candidates are in descending probability (ties: lower id
 * first) when greedy, top-k or top-p ran; otherwise in id order. Probabilities sum to 1. */
const bs_token_prob *bs_sampler_candidates(const bs_sampler *s, int *n);
/* p(id) in that distribution, 0 for filtered tokens (linear in the candidate count). */
float bs_sampler_prob(const bs_sampler *s, int32_t id);
/* Write the distribution densely into out[n_vocab] (zeros for filtered tokens). */
void bs_sampler_probs_dense(const bs_sampler *s, float *out);

/* Helpers for speculative sampling, drawing from the sampler's own random stream so the whole
 * run stays reproducible from the seed. */
double bs_sampler_uniform(bs_sampler *s);   /* [0, 1) */
/* The next n uniforms of the stream into u (n <= BS_SAMPLER_AHEAD), drawn now and kept: the
 * sampler's own draws take them first, in order, so a device can predict a draw with the
 * uniform the host will use for it. Returns n. */
enum { BS_SAMPLER_AHEAD = 64 };
int bs_sampler_lookahead(bs_sampler *s, int n, double *u);
/* Its steps after the top-k, for a device that redoes them on lists of top_k (vulkan/backend.h's
 * bs_draw: sampled decoding ahead, the drafter's sampled chain). */
struct bs_draw bs_sampler_draw_steps(const bs_sampler *s, int top_k);
/* Draw an index i with probability w[i] / sum(w) (w >= 0); returns ids ? ids[i] : i, or -1 +
 * bs_error when the mass is zero. */
int32_t bs_sampler_draw(bs_sampler *s, const int32_t *ids, const float *w, int n);
/* The same draw with the uniform u in [0, 1) given (taken before from bs_sampler_uniform). */
int32_t bs_sampler_draw_u(const int32_t *ids, const float *w, int n, double u);

/* Raw log-probabilities (log-softmax of the unmodified logits): the n most likely tokens in
 * descending order (ties: lower id first) into ids/logprobs, and optionally the log-probability
 * of `id` (ignored when id < 0 or out_id_logprob is NULL). Returns how many were written. */
int bs_top_logprobs(const float *logits, int32_t n_vocab, int n, int32_t *ids, float *logprobs,
                    int32_t id, float *out_id_logprob);

#endif
