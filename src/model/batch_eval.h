/* batch_eval.h: evaluate several sessions of one model in a single pass through the weights
 * (continuous batching for the server's slots).
 *
 * Every weight multiply is one bs_matmul over the rows of all sequences together; only the
 * mixers' sequence-dependent cores (the DeltaNet recurrence, attention over each session's own
 * KV cache) run per session. A row's matmul result does not depend on the rows batched with it
 * (matmul.h), and the per-session parts run the same code as bs_eval, so a sequence gets the
 * same logits whether it is evaluated alone or batched. After the call each session is exactly
 * as if bs_eval had evaluated its tokens (including what bs_session_rollback needs). */
#ifndef BS_BATCH_EVAL_H
#define BS_BATCH_EVAL_H

#include "bitspark.h"
#include "io/threadpool.h"
#include "vulkan/backend.h"

typedef struct bs_batch bs_batch;

/* Scratch for up to max_rows rows in all, of which up to max_logit_rows get logits (each row of
 * logits is n_vocab floats: a prompt chunk needs many rows but only its last one's logits).
 * pool (may be NULL) runs the matmuls. */
bs_batch *bs_batch_new(const bs_model *m, int max_rows, int max_logit_rows, bs_pool *pool);
void bs_batch_free(bs_batch *b);
int bs_batch_max_rows(const bs_batch *b);

/* (bs_batch_seq, one sequence's tokens and outputs: bitspark.h, whose bs_multi_* wrap this.) */

/* Evaluate every sequence. Everything is validated first (ids, context room, row counts): on
 * failure nothing changes. 0 or -1 + bs_error. */
int bs_eval_multi(bs_batch *b, const bs_batch_seq *seqs, int n_seq);
/* One sequence alone, as bs_eval_multi would evaluate it (next and top_k included), without a
 * batch's scratch: bs_eval's path (eval.c). 0 or -1 + bs_error. */
int bs_eval_seq(const bs_batch_seq *q);
/* Whether q's top-k request is well formed: none, or 1..BS_TOP_MAX of its logits rows (not
 * with next), with places for them. */
bool bs_seq_top_ok(const bs_batch_seq *q);
/* q's greedy ids and k-best lists: all marked not taken (-1), then those still not taken (the
 * device takes them where it can) from its logits rows, as the device would. */
void bs_seq_unset(const bs_batch_seq *q);
/* bs_eval_top of one token with the sampler's steps d and the uniforms u[0..1] its next two
 * draws take (bs_sampler_lookahead): on a GPU, with undo off, the step after it runs meanwhile,
 * fed the draw predicted there (bs_vk_sess_sample_ahead; ahead_limit as greedy steps'). */
int bs_eval_top_drawn(bs_session *s, int32_t tok, const bs_draw *d, const double *u, int32_t *ids, float *logits);
void bs_seq_from_rows(const bs_batch_seq *q);

/* Make a session use a shared pool (the batch's) instead of its own, which is freed: the
 * session must have been created with at least as many threads as the pool has, since its
 * per-thread scratch is sized then. Call bs_session_unshare_pool before bs_session_free. */
int bs_session_share_pool(bs_session *s, bs_pool *pool);
void bs_session_unshare_pool(bs_session *s);

#endif
