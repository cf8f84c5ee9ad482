/* speculative.h: DSpark speculative decoding on a qwen35 session (dspark.md §5-6).
 *
 * A round starts from the anchor: the last token produced, already in the sampler's history but
 * not yet evaluated, at position s = n_past. The drafter (whose context holds the target's taps
 * of every position < s) proposes k tokens; one target eval over [anchor, d1..dk] verifies
 * them; the target is rolled back to the accepted prefix (exact: bs_session_rollback) and the
 * drafter context gets the taps of the kept positions only.
 *
 * Greedy targets (temp <= 0) accept the longest prefix that matches the target's own choice at
 * each row, then add that choice: the output is exactly plain greedy decoding's. Sampling
 * targets use speculative sampling (accept d with prob min(1, p(d)/q(d)), else draw from
 * max(0, p - q)), with q the drafter's Markov-corrected distribution the drafts were drawn from
 * and p the sampler chain's final distribution at that row (history including the accepted
 * drafts): the output is an exact sample of the target's distribution. */
#ifndef BS_SPECULATIVE_H
#define BS_SPECULATIVE_H

#include "bitspark.h"
#include "dspark/dspark.h"
#include "sample/sampler.h"
#include "dspark/spec_depth.h"
#include "model/batch_eval.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct bs_spec_params {
    int draft_max;             /* 0..block_size; BS_DRAFT_AUTO picks per round (spec_depth.h) */
    double conf_cut;           /* auto only: 1 = use the confidence head to trim drafts, 0 = not */
    int draft_window;          /* > 0: the drafter attends to its last draft_window context rows */
} bs_spec_params;

typedef struct bs_spec_stats {
    long n_rounds;             /* verify evals (including 0-draft steps) */
    long n_draft_rounds;       /* rounds that drafted */
    long n_drafted, n_accepted;/* draft tokens verified / accepted */
    long n_tokens;             /* tokens produced by rounds */
    long n_chained;            /* sampled drafts drawn from lists of the device's chain */
    long n_chain_miss;         /* ... where its predicted draft was not the one drawn */
    double t_draft, t_verify, t_rollback, t_append;   /* seconds */
} bs_spec_stats;

typedef struct bs_spec bs_spec;

/* The session must be new or reset (positions without taps cannot feed the drafter); its taps are
 * set to the drafter's. NULL + bs_error if the pair does not fit. */
bs_spec *bs_spec_new(bs_session *s, const bs_dspark *d, const bs_spec_params *p);
void bs_spec_free(bs_spec *sp);

/* Evaluate n prompt tokens (logits of the last one into logits[n_vocab]; logits may be NULL) with taps, feeding the
 * drafter's context (bs_spec_sync first). 0 or -1 + bs_error. */
int bs_spec_prompt(bs_spec *sp, const int32_t *tokens, int n, float *logits);

/* An image in the prompt (bs_eval_image's rows), its taps fed to the drafter like a prompt's;
 * logits (may be NULL): of its last row. */
int bs_spec_prompt_image(bs_spec *sp, const float *embd, int nx, int ny, float *logits);

/* bs_spec_prompt a chunk at a time in a pass shared with other sequences: plan describes the
 * evaluation of the first rows of tokens[0..n) (all of them, or as many as the drafter's tap
 * buffer holds) in *q and returns how many; after the caller evaluated it, commit feeds their
 * taps to the drafter. Logits (if wanted) come only with the chunk that ends at n. */
int bs_spec_prompt_plan(bs_spec *sp, const int32_t *tokens, int n, float *logits, bs_batch_seq *q);
int bs_spec_prompt_commit(bs_spec *sp, int n);

/* After the session was rolled back, its state loaded, or positions evaluated without the
 * drafter: drop drafter context rows at positions >= n_past (they must describe the same tokens
 * as the session's, e.g. a state saved earlier in this sequence); positions it lacks become a gap
 * in its context (drafts near it may be worse; the output is the same). Returns how many
 * positions became that gap (kept-back rows before it included): 0 when the drafter was in step
 * with the session. */
int bs_spec_sync(bs_spec *sp);
/* Before the session takes a state whose tokens agree with the ones the drafter saw only on the
 * first n: drop the drafter's rows from position n on (bs_spec_sync then makes the rest a gap),
 * so it never drafts from rows of other tokens. */
void bs_spec_crop(bs_spec *sp, int n);
/* The positions the drafter holds rows of (its context and the rows it keeps back; not a gap). */
int bs_spec_rows(const bs_spec *sp);

/* One round from `anchor`. Produces m >= 1 tokens into out (at most max_new, >= 1), each accepted
 * into smp's history; stops after a token for which is_stop(ud, id) is true. The session ends
 * holding everything up to the token before out[m-1], which becomes the next anchor.
 * Returns m, or -1 + bs_error. */
int bs_spec_round(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new,
                  bool (*is_stop)(void *ud, int32_t id), void *ud, int32_t *out);

/* The same round in two halves, so that its verify pass can share one pass through the weights
 * with other sequences (bs_eval_multi): begin drafts and describes the verify evaluation in *q;
 * the caller evaluates it (evaluated: whether that worked); end accepts, rolls back and feeds the
 * drafter, and returns m as bs_spec_round does. alone: the pass held only this round (its time
 * then tells the auto depth what this width costs). */
int bs_spec_round_begin(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new, bs_batch_seq *q);
/* Rounds of several sequences drafting together: bs_spec_round_prepare chooses each round's depth
 * (returns 1 if the drafter's block is to run, 0 if not, -1 + bs_error); bs_spec_blocks then runs
 * the blocks of every prepared round of one drafter in one pass over its weights
 * (bs_dspark_block_multi; returns how many ran together, -1 + bs_error), and bs_spec_round_begin
 * with the same anchor continues from there (it runs the block itself where none ran). */
int bs_spec_round_prepare(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new);
int bs_spec_blocks(bs_spec *const *sps, int n);
int bs_spec_round_end(bs_spec *sp, bs_sampler *smp, bool evaluated, bool alone,
                      bool (*is_stop)(void *ud, int32_t id), void *ud, int32_t *out);

/* Replace the drafter (tests: oracle or adversarial drafts, any target). Called with the anchor,
 * its position and the depth k; writes up to k drafts and, when q is non-NULL (sampling target),
 * the distributions (k rows of n_vocab) they were drawn from. Returns how many it wrote. With a
 * hook, d may be NULL in bs_spec_new. */
typedef int (*bs_spec_draft_fn)(void *ud, int32_t anchor, int pos, int k, bs_sampler *smp,
                                int32_t *drafts, float *q);
void bs_spec_set_draft_hook(bs_spec *sp, bs_spec_draft_fn fn, void *ud);

/* Target logits of verify row i of the last round (n_vocab floats; i < its m): row m-1 is what
 * the session's last position predicts, the logits of a straight run at that point. */
const float *bs_spec_logits(const bs_spec *sp, int i);
/* Whether the caller reads those rows (log-probabilities, the loop guard). Without, a round
 * verifies from each row's greedy token or k best where the sampler reads no more (on a GPU
 * only they come back, not the rows), and bs_spec_logits is not to be read. */
void bs_spec_want_rows(bs_spec *sp, bool on);

const bs_spec_stats *bs_spec_get_stats(const bs_spec *sp);
/* The depth controller (for --verbose reports). */
const bs_spec_depth *bs_spec_get_depth(const bs_spec *sp);

/* The depth controller, for loading cached cost measurements (bs_depth_calibrate). */
bs_spec_depth *bs_spec_depth_mut(bs_spec *sp);

/* Measure verify costs per width and the drafter's cost at the current position (rolled back
 * afterwards, so nothing changes) and seed the depth controller with them. */
int bs_spec_calibrate(bs_spec *sp, int32_t token);
/* The same for rounds of up to max_k drafts only (widths 1..max_k+1); deeper costs are
 * extrapolated until a round first wants more drafts, which measures the rest then. */
int bs_spec_calibrate_upto(bs_spec *sp, int32_t token, int max_k);

#endif
