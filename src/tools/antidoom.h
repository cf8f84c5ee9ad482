/* antidoom.h: what the `bitspark antidoom` subcommands share (internal): prompt files, the
 * chosen-token selection of antidoom's pair miner, and a model opened for per-prompt runs.
 *
 * Pair format (one JSON object per line, antidoom / thoxa-antidoom's iter_0_ftpo_pairs.jsonl):
 *   context_before        prompt + decoded generated text up to (not including) the rejected token
 *   rejected_token        raw vocabulary string (byte-level BPE text, e.g. "Ġthe")
 *   rejected_decoded      its decoded text
 *   multi_chosen_tokens   raw vocabulary strings of the chosen alternatives
 *   multi_chosen_decoded  their decoded texts
 *   source, source_prompt
 *   repetition            {start_char, repeat_start_char, rejected_token_index, period, repeats,
 *                          snippet, prefix_chars}: character offsets into the generated text
 *                          (negative when the loop began inside a primed prompt)
 * bitspark adds the ids it used (context_ids, rejected_id, chosen_ids) so evaluation can use
 * exactly the tokens the model saw instead of re-tokenizing context_before. */
#ifndef BS_ANTIDOOM_H
#define BS_ANTIDOOM_H

#include "generate/engine.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char **text;
    int n;
} ad_prompts;

/* One prompt per line: a JSON string, a JSON object with "prompt", "text" or "context" (a
 * "conversations" list uses its first human/user turn), or else the raw line. Empty lines are
 * skipped. -1 + bs_error. */
int ad_prompts_read(const char *path, ad_prompts *p);
void ad_prompts_free(ad_prompts *p);

typedef struct {
    int top_k;                /* candidates taken from the top of the distribution (20) */
    float min_p;              /* floor relative to the best remaining candidate (0.01; 0 off) */
    int max_n;                /* chosen tokens kept (20) */
    int min_chars;            /* stripped decoded text at least this long (1) */
    bool require_alnum;       /* decoded text must hold a letter or digit (off) */
    float temp;               /* renormalisation temperature (1) */
} ad_chosen_params;

ad_chosen_params ad_chosen_defaults(void);
/* antidoom's chosen tokens at a position: the top_k most likely, without the rejected token (by
 * id or by case-insensitive stripped text), above the min-p floor, then in *ascending*
 * probability (spread over unlikely escapes), filtered by text, at most max_n. Control and other
 * non-text tokens never qualify. Returns the count written to out[max_n]. */
int ad_select_chosen(const bs_tokenizer *t, const float *logits, int n_vocab, int32_t rejected,
                     const ad_chosen_params *p, int32_t *out);

/* Decoded text of a token (malloc'd, NUL-terminated). */
char *ad_token_decoded(const bs_tokenizer *t, int32_t id);

/* antidoom mine: one pair per prompt whose completion falls into a loop. */
typedef struct ad_mine_opts {
    bs_engine_opts g;
    const char *prompts, *out, *primes_out;
    int n_predict, prime_tokens, prime_copies;
    bool generate_primes;
    ad_chosen_params ch;
} ad_mine_opts;

int ad_mine(const ad_mine_opts *o);

#define AD_MAX_TEMPS 32

/* antidoom eval: chosen-win over a pairs file, or the loop rate over a temperature sweep. */
typedef struct ad_eval_opts {
    bs_engine_opts g;
    const char *pairs, *prompts;
    bool json, loop_rate;
    float temps[AD_MAX_TEMPS];
    int n_temps, n_predict;
} ad_eval_opts;

int ad_eval(const ad_eval_opts *o);

#endif
