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
 *             Generators that draft return 0 from bs_gen_plan and are stepped alone.
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

#define BS_GEN_MAX_STOP 8
#define BS_GEN_MAX_TOP 20
#define BS_GEN_MAX_BREAKERS 16

/* Why generation ended (BS_GEN_RUNNING while it has not). */
enum bs_gen_stop {
    BS_GEN_EOG, BS_GEN_LENGTH, BS_GEN_CTX, BS_GEN_INTERRUPT, BS_GEN_LOOP, BS_GEN_STOP_STRING,
    BS_GEN_ERROR, BS_GEN_RUNNING
};
const char *bs_gen_stop_name(int stop);   /* "end of generation", "length limit", ... */

/* How a generator is built (once per sequence slot). */
typedef struct bs_gen_params {
    int n_ctx;                 /* 0: the session default */
    int n_threads;             /* ignored with pool */
    bs_pool *pool;             /* shared thread pool (the server's), or NULL: the session's own */
    bool undo;                 /* keep what rollback needs after one-token evals (chat's prefix
                                  reuse); drafting always keeps it */
    /* the drafter (NULL: none) and its rounds */
    const bs_dspark *drafter;
    const char *drafter_path;  /* the cost cache's key */
    int draft_max;             /* 0..block size, BS_DRAFT_AUTO */
    bool no_conf;              /* auto depth without the confidence-head trim */
    int draft_window;
} bs_gen_params;

/* One generation request. */
typedef struct bs_gen_request {
    bs_sampler_params sp;
    const int32_t *bias_id;    /* n_bias logit biases */
    const float *bias;
    int n_bias;
    const char *const *breakers;   /* DRY sequence breakers; n_breakers < 0: llama.cpp's */
    int n_breakers;
    int n_predict;             /* < 0: until EOG or the context is full */
    bool ignore_eos;
    const char *const *stop;   /* stop strings (cut from the text, end generation) */
    int n_stop;
    int n_probs;               /* top logprobs recorded per token; < 0: none */
    bs_loop_guard_params loop; /* mode BS_LOOP_GUARD_OFF: no guard */
    const char *loop_prefix;   /* text the guard's detector sees before the generated tokens */
    size_t loop_prefix_len;
    bool stop_at_rewind;       /* end (BS_GEN_LOOP) at the guard's first rewind, the session at
                                  the rewound position (antidoom mine) */
    bool no_draft;             /* decode without the drafter */
    bool no_cache;             /* evaluate the whole prompt (no prefix reuse) */
    int ckpt_at;               /* prompt position whose state is saved for the next request's
                                  reuse (the start of a chat's last message), 0: none */
    bool ckpt_end;             /* also save the state at the prompt's end */
    bool keep_sampler;         /* go on with the previous request's sampler (its random state
                                  and parameters); its history is cut back to the reused prefix */
    bool tool_tags;            /* stream <tool_call> / </tool_call> even where they are control */
    volatile sig_atomic_t *interrupt;   /* ends generation (BS_GEN_INTERRUPT) once nonzero */
} bs_gen_request;

void bs_gen_request_init(bs_gen_request *r);   /* defaults: greedy off (llama.cpp's sampler
                                                  defaults), no limits, no guard */

/* One generated token and what logprobs report about it (the raw model distribution). */
typedef struct bs_gen_token {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[BS_GEN_MAX_TOP];
    float top_lp[BS_GEN_MAX_TOP];
    size_t text_end;           /* bytes of text once this token was added */
} bs_gen_token;

typedef struct bs_gen_stats {
    int n_prompt, n_cached;    /* prompt tokens evaluated / reused from the cache */
    int n_gen;                 /* tokens generated (EOG excluded) */
    int n_decode;              /* decode steps: one-token evals or speculative rounds */
    double t_prompt, t_gen;    /* seconds */
    long n_drafted, n_accepted, n_draft_rounds;   /* this request's speculative rounds */
    bs_loop_guard_result loop; /* what the loop guard did (mode off: zeros) */
    int rewound_to;            /* stop_at_rewind: generated tokens the rewind kept (the output
                                  still holds them all, up to the one that completed the loop) */
    int stop;                  /* enum bs_gen_stop */
} bs_gen_stats;

typedef struct bs_gen bs_gen;

/* NULL + bs_error. The model and tokenizer (and drafter) must outlive the generator. */
bs_gen *bs_gen_new(bs_model *m, const bs_tokenizer *tok, const bs_gen_params *p);
void bs_gen_free(bs_gen *g);

/* Start a request on prompt[0..n) (copied). Reuses the longest prefix the session or a saved
 * state holds, sets up sampler, guard and stop strings. -1 + bs_error (nothing started). */
int bs_gen_begin(bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n);
/* One step alone: at most budget prompt rows (<= 0: the rest of the prompt, to the saved-state
 * position first), one token, or a speculative round. 0, or -1 + bs_error (generation then
 * ended with BS_GEN_ERROR). */
int bs_gen_step(bs_gen *g, int budget);
/* Run to the end (bs_gen_step until done); on_step, when set, is called after each step (to
 * stream what became safe). */
int bs_gen_run(bs_gen *g, void (*on_step)(void *ud, bs_gen *g), void *ud);
bool bs_gen_done(const bs_gen *g);
/* End the request now with the given reason (a client gone: BS_GEN_INTERRUPT). */
void bs_gen_cancel(bs_gen *g, int stop);

/* Batched stepping: 1 and *q filled when the next step is one evaluation of the session that
 * can be batched (at most budget prompt rows; a pending token always fits), 0 when not (done,
 * or a generator that drafts: use bs_gen_step). */
int bs_gen_plan(bs_gen *g, int budget, bs_batch_seq *q);
/* After the planned evaluation: ok = false when it failed (the request ends with an error). */
void bs_gen_commit(bs_gen *g, bool ok);
bool bs_gen_in_prompt(const bs_gen *g);   /* still evaluating the prompt */
bool bs_gen_drafting(const bs_gen *g);    /* this request decodes with the drafter */

/* What was generated: text (len bytes, NUL-terminated), n_safe, the tokens. */
typedef struct bs_gen_output {
    const char *text;
    size_t len, n_safe;
    const bs_gen_token *toks;
    int n_toks, n_toks_safe;   /* tokens whose logprobs may be streamed */
} bs_gen_output;
void bs_gen_output_get(const bs_gen *g, bs_gen_output *out);
/* Lowest text byte and token index changed (rewritten by a rewind, or new) since the last call,
 * which resets them: what a copy of the output must refresh. */
void bs_gen_output_changed(bs_gen *g, size_t *text_from, int *tok_from);

const bs_gen_stats *bs_gen_get_stats(const bs_gen *g);
bs_session *bs_gen_session(bs_gen *g);
bs_sampler *bs_gen_sampler(bs_gen *g);
bs_spec *bs_gen_spec(bs_gen *g);          /* NULL without a drafter */
const float *bs_gen_logits(const bs_gen *g);   /* the last evaluated position's logits */
/* The tokens the session holds (n of them): what the prompt cache compares with. */
const int32_t *bs_gen_cached(const bs_gen *g, int *n);
/* How many prompt tokens a request on prompt[0..n) would reuse (to pick a slot). */
int bs_gen_reusable(const bs_gen *g, const int32_t *prompt, int n, bool no_cache);

#endif
