/* loop_guard.h: doom-loop detection on decoded text, and the guard that acts on it during
 * generation (antidoom.md §2.3, §4.5).
 *
 * Detector. antidoom's criterion: a span of period p (in characters = Unicode code points)
 * that repeats at least min_repeats times, the copies covering at least min_chars characters,
 * with 1 <= p <= max_period. It is checked incrementally at the tail: for every p the detector
 * keeps the length of the current run of characters equal to the character p earlier, so each
 * appended character costs O(max_period) and a loop is reported the moment its last copy
 * completes. The reported period is the smallest that qualifies, and `start` is the true onset
 * of the periodic region (no whole-period phase error as in antidoom's sampled scan).
 *
 * The rejected token (antidoom's "first token of the first repeat") is the token holding the
 * first character of the second copy. Text given as a prefix (a priming context, before any
 * generated token) belongs to no token: if the loop's second copy begins inside it, the
 * rejected token is the one holding the first copy boundary inside the generated text (the start
 * of copy k+1 after k primed copies), or the first generated token if no boundary is there yet.
 *
 * Guard. Drives a session + sampler during generation: `stop` ends generation when a loop is
 * detected; `rewind` restores the model to the rejected token's position (recurrent-state
 * checkpoints every ckpt_every tokens, then exact single-token replay: the state and logits are
 * bit-identical to a straight run over the kept tokens), bans the rejected token (and any
 * token rejected there before) for that one draw, and continues; after max_rewinds rewinds it
 * stops instead. */
#ifndef BS_LOOP_GUARD_H
#define BS_LOOP_GUARD_H

#include "bitspark.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


bs_loop_params bs_loop_default_params(void);


typedef struct bs_loop_detector bs_loop_detector;

/* NULL + bs_error on bad parameters (min_repeats < 2, min_chars < 1, max_period < 1). */
bs_loop_detector *bs_loop_detector_new(const bs_loop_params *p);
void bs_loop_detector_free(bs_loop_detector *d);
/* Scanned text before the first token (only while no token is pushed). Never reported alone. */
int bs_loop_detector_set_prefix(bs_loop_detector *d, const char *text, size_t len);
/* Append one token's bytes (UTF-8, may split a code point). Returns 1 and fills *info when a loop
 * completes within this token's characters, else 0. */
int bs_loop_detector_push(bs_loop_detector *d, const char *bytes, size_t len, bs_loop_info *info);
/* Back to empty (prefix included). */
void bs_loop_detector_reset(bs_loop_detector *d);
/* Keep the first n pushed tokens (the prefix stays). */
void bs_loop_detector_truncate(bs_loop_detector *d, int n_tokens);
int bs_loop_detector_n_tokens(const bs_loop_detector *d);
int64_t bs_loop_detector_n_chars(const bs_loop_detector *d);   /* prefix included */
/* Character offset where token i starts, i in [0, n_tokens] (n_tokens: the end). */
int64_t bs_loop_detector_token_char(const bs_loop_detector *d, int i);
/* Upper bound of (end_char - rejected_char) for a loop reported without a prefix: tokens that
 * start further back than this from the end can never be rewound (safe to stream out). */
int64_t bs_loop_detector_max_reach(const bs_loop_detector *d);
/* The code points scanned so far (prefix included), *n of them. */
const uint32_t *bs_loop_detector_text(const bs_loop_detector *d, int64_t *n);
/* Whole-text check for tests and tools: the first loop of text (no tokens: rejected_token is
 * -1). 1 found, 0 none, -1 bad parameters. */
int bs_loop_find(const char *text, size_t len, const bs_loop_params *p, bs_loop_info *info);

/* --- the guard ------------------------------------------------------------------------------ */


bs_loop_guard_params bs_loop_guard_default_params(void);
/* "off" / "stop" / "rewind" -> mode, -1 if unknown. */
int bs_loop_guard_mode_parse(const char *s);
const char *bs_loop_guard_mode_name(int mode);


typedef struct bs_loop_guard bs_loop_guard;

/* Usage in a generation loop (cli_gen_guard.c is the reference; a server slot does the same):
 *   g = bs_loop_guard_new(&params, sess, smp, tok);      once per session + sampler
 *   bs_loop_guard_begin(g, logits);                      after the prompt is evaluated
 *   loop: id = bs_sampler_sample(smp, logits); (EOG?) bs_sampler_accept(smp, id);
 *         switch (bs_loop_guard_push(g, id, logits, &n_keep)):
 *           STOP: finish_reason "loop"; REWOUND: drop generated tokens >= n_keep, sample again;
 *           CONTINUE: stream tokens < bs_loop_guard_n_safe(g), bs_eval(id) (one token, as
 *                     a straight run), bs_loop_guard_evaluated(g, logits)
 *   report *bs_loop_guard_result_get(g). */

/* Guard a generation on session s with sampler smp; tok renders tokens for the detector. */
bs_loop_guard *bs_loop_guard_new(const bs_loop_guard_params *p, bs_session *s, bs_sampler *smp,
                                  const bs_tokenizer *tok);
void bs_loop_guard_free(bs_loop_guard *g);
/* Start a generation: the session holds the context, `logits` are its last position's. */
void bs_loop_guard_begin(bs_loop_guard *g, const float *logits);
/* Right after begin: text the detector sees before the generated tokens (a priming context;
 * `run` and `chat` scan only what they generate). */
int bs_loop_guard_set_prefix(bs_loop_guard *g, const char *text, size_t len);

enum { BS_LOOP_CONTINUE = 0, BS_LOOP_STOP = 1, BS_LOOP_REWOUND = 2 };
/* Call after sampling (and bs_sampler_accept-ing) generated token `id`, before evaluating it.
 * CONTINUE: go on (evaluate it, then call bs_loop_guard_evaluated). STOP: a loop ends the
 * generation. REWOUND: the session, sampler history and detector now hold only the first
 * *n_keep generated tokens, `logits` (n_vocab) holds that position's logits and the rejected
 * token(s) are banned for the next draw: sample again. -1 + bs_error on failure. */
int bs_loop_guard_push(bs_loop_guard *g, int32_t id, float *logits, int *n_keep);
/* Call after evaluating the last pushed token (logits of the new position) - checkpoints. With
 * speculative decoding: after each round, when the session holds every pushed token but the
 * last, with the logits that predicted that last one (the verify row before it). */
void bs_loop_guard_evaluated(bs_loop_guard *g, const float *logits);
/* Whether it reads those logits at all (rewinding keeps them in its checkpoints; stopping does
 * not), so a speculative round must keep its rows. */
bool bs_loop_guard_reads_logits(const bs_loop_guard *g);
/* Generated tokens [0, n) can no longer be rewound (to stream them out). */
int bs_loop_guard_n_safe(const bs_loop_guard *g);
const bs_loop_guard_result *bs_loop_guard_result_get(const bs_loop_guard *g);
/* One line for stderr: "loop guard: rewind, 2 loops detected, 2 rewinds, 71 tokens discarded". */
void bs_loop_guard_result_format(const bs_loop_guard_result *r, char *buf, size_t cap);

#endif
