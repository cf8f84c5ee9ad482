/* gen.h: the generation engine: one sequence's generation from prompt to finish, shared by
 * `run`, `chat`, the server's slots, antidoom and the library (bitspark.h's bs_gen_*).
 *
 * A bs_gen owns a session on a model (and, with a drafter, the speculative decoder on it), the
 * sampler chain, the incremental detokenizer, the doom-loop guard, stop strings and the tokens
 * and text generated so far. Each request starts with bs_gen_begin (prefix reuse from what the
 * session holds and from two saved states), then advances one step at a time:
 *
 *   alone:    bs_gen_step(g) evaluates what it needs itself (the prompt, one token, or a
 *             speculative round);
 *   batched:  bs_gen_plan(g, budget, &seq) describes the one-pass evaluation it needs (a prompt
 *             chunk or its pending token) so that a caller can run many generators' rows through
 *             the weights together (bs_eval_multi), then bs_gen_commit(g) continues from it.
 *             A generator that drafts plans its prompt chunks with the taps its drafter reads
 *             and its speculative rounds' verify rows the same way.
 *
 * Evaluation is batch-invariant, so a sequence's output does not depend on how it was stepped.
 *
 * The session contract (what `chat` and the prompt cache build on): when generation ends, the
 * session holds the prompt and every generated token but the last (the last one sampled is
 * never evaluated), or every generated token when an end-of-generation token ended it.
 *
 * Streaming: text[0..n_safe) may be shown; bytes past it may still be cut by a stop string that
 * is forming or taken back by a loop-guard rewind. n_safe never decreases, and at the end it is
 * the whole text. */
#ifndef BS_GEN_H
#define BS_GEN_H

#include "bitspark.h"
#include "dspark/dspark.h"
#include "dspark/speculative.h"
#include "model/batch_eval.h"
#include "sample/loop_guard.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The public part (bs_gen_new ... bs_gen_logits, the request, token, stats and output types)
 * is declared in bitspark.h; what follows is for the server and the engine's own files. */

/* bs_gen_new with a thread pool shared by several generators (the server's slots). */
bs_gen *bs_gen_new_pooled(bs_model *m, const bs_tokenizer *tok, const bs_gen_params *p, bs_pool *pool);

/* Batched stepping: 1 and *q filled when the next step is one evaluation of the session that
 * can be batched (at most budget prompt rows; a pending token or a speculative round's verify
 * rows always fit), 0 when not (done, or no budget for a prompt chunk). */
int bs_gen_plan(bs_gen *g, int budget, bs_batch_seq *q);
/* After the planned evaluation: ok = false when it failed (the request ends with an error). */
void bs_gen_commit(bs_gen *g, bool ok);
/* Before planning a step of several generators: the drafter blocks of those about to run a
 * speculative round run together, in one pass over the drafter's weights (bs_spec_blocks);
 * their bs_gen_plan then continues from there. Drafts are what each would make alone. Returns
 * how many blocks ran together (0 when fewer than two). */
int bs_gen_draft_together(bs_gen *const *gs, int n);
bool bs_gen_in_prompt(const bs_gen *g);   /* still evaluating the prompt */
/* The prompt goes on with an image: bs_gen_plan hands out nothing, bs_gen_step evaluates it. */
bool bs_gen_next_is_image(const bs_gen *g);
bool bs_gen_drafting(const bs_gen *g);    /* this request decodes with the drafter */
/* Rows other sequences put into the passes this generator's rounds share (0: alone): auto
 * depth prices a round by what its rows add to such a pass. */
void bs_gen_set_shared_rows(bs_gen *g, int rows);
/* A hook the grammar matcher polls inside a long mask (true: stop, the request fails); it stays
 * set for later requests. */
void bs_gen_set_cancel_hook(bs_gen *g, bool (*cancelled)(void *ud), void *ud);

bs_sampler *bs_gen_sampler(bs_gen *g);
bs_spec *bs_gen_spec(bs_gen *g);          /* NULL without a drafter */
/* The tokens the session holds (n of them): what the prompt cache compares with. */
const int32_t *bs_gen_cached(const bs_gen *g, int *n);
/* Take over src's saved end-of-prompt state (a generator of the same model and context): a
 * request on that prompt then starts generating at once (the server's "n" choices). */
void bs_gen_share_prompt(bs_gen *dst, const bs_gen *src);
/* How many prompt positions a request on prompt[0..n) with these images would reuse (to pick a
 * slot). */
int bs_gen_reusable(const bs_gen *g, const int32_t *prompt, int n, const bs_gen_image *images, int n_images,
                    bool no_cache);

/* gen_slot.c, between requests: drop every cached prefix (the live session and the saved
 * states), e.g. when the adapters the next request runs with differ; and take over a session
 * state loaded from elsewhere (bs_session_state_save bytes) with the n tokens it holds (-1 +
 * error, the slot then holds nothing). */
void bs_gen_forget(bs_gen *g);
int bs_gen_adopt(bs_gen *g, const void *state, size_t len, const int32_t *toks, int n);

#endif
