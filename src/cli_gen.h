/* cli_gen.h: what `run` and `chat` share: model and sampling options, opening the model with its
 * tokenizer, a session and a sampler, and the streaming generation loop with llama.cpp-style
 * timings. */
#ifndef BS_CLI_GEN_H
#define BS_CLI_GEN_H

#include "bitspark.h"
#include "sampler.h"
#include "chat_template.h"
#include "cli_spec.h"
#include "loop_guard.h"
#include "tokenizer.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#define CLI_GEN_MAX_BREAKERS 16
#define CLI_GEN_MAX_BIAS 64
#define CLI_GEN_MAX_LORA 8

typedef struct {
    const char *model;
    int n_threads;             /* 0: all cores the session allows */
    int n_ctx;                 /* 0: session default */
    bool no_mmap;
    bool seed_set;             /* --seed given; otherwise a time-based seed, logged */
    bs_sampler_params sp;
    const char *breakers[CLI_GEN_MAX_BREAKERS];
    int n_breakers;            /* -1: llama.cpp's defaults ("\n", ":", "\"", "*") */
    int32_t bias_id[CLI_GEN_MAX_BIAS];
    float bias[CLI_GEN_MAX_BIAS];
    int n_bias;
    bool ignore_eos;
    cli_spec_opts spec;        /* -md DRAFTER etc. (cli_spec.c) */
    bs_loop_guard_params loop; /* --loop-guard etc. (cli_gen_guard.c) */
    const char *lora[CLI_GEN_MAX_LORA];   /* --lora FILE[:SCALE] (cli_gen_lora.c) */
    float lora_scale[CLI_GEN_MAX_LORA];
    bool lora_has_scale[CLI_GEN_MAX_LORA];
    int n_lora;
} cli_gen_opts;

void cli_gen_defaults(cli_gen_opts *o);
/* Try argv[*i] as a model/session/sampling option: 1 if consumed (with its value; *i advanced),
 * 0 if not one of these, -1 + bs_error on a bad value. */
int cli_gen_parse(cli_gen_opts *o, int argc, char **argv, int *i);
/* Usage lines of those options. */
void cli_gen_help(void);

typedef struct {
    bs_model *model;
    bs_tokenizer *tok;
    bs_session *sess;
    bs_sampler *smp;
    float *logits;             /* [n_vocab] logits of the last evaluated position */
    int n_vocab;
    double t_load;             /* seconds */
    bs_chat_template tmpl;
    bool tmpl_ready;
    cli_spec *spec;            /* speculative decoding; NULL without a drafter */
    bs_loop_guard *guard;      /* doom-loop guard; NULL when off */
    struct bs_lora *loras[CLI_GEN_MAX_LORA];   /* attached to model's weights */
    int n_loras;
} cli_gen;

/* Load the model and build tokenizer, session and sampler. -1 + bs_error (g is then closed). */
int cli_gen_open(cli_gen *g, const cli_gen_opts *o);
void cli_gen_close(cli_gen *g);

/* Tokenize text with special tokens parsed (llama.cpp's -p behaviour), BOS added if the vocab
 * asks for it. *ids malloc'd. -1 + bs_error on bad UTF-8. */
int cli_gen_tokenize(cli_gen *g, const char *text, size_t len, int32_t **ids, size_t *n);

/* Render a conversation with the model's chat template (detected from the GGUF on first use,
 * ChatML fallback). enable_thinking: -1 template default, 0 off, 1 on. malloc'd. */
char *cli_gen_render(cli_gen *g, const bs_chat_msg *msgs, int n, int enable_thinking,
                     bool add_generation_prompt, size_t *len);

enum { GEN_STOP_EOG, GEN_STOP_LENGTH, GEN_STOP_CTX, GEN_STOP_INTERRUPT, GEN_STOP_LOOP };

typedef struct {
    int n_predict;                            /* < 0: until EOG or the context is full */
    bool ignore_eos;
    volatile sig_atomic_t *interrupt;         /* stop when it becomes nonzero (may be NULL) */
    /* Called for each generated token (EOG excluded) with its complete UTF-8 text (possibly
     * empty while a code point is pending; flushed text comes with id -1 at the end). */
    void (*emit)(void *ud, int32_t id, const char *text, size_t len);
    void *ud;
} cli_gen_run;

typedef struct {
    int n_prompt, n_gen;                      /* tokens evaluated as prompt / tokens generated */
    int n_decode;                             /* single-token evals */
    double t_prompt, t_gen;                   /* seconds: prompt eval; sampling + decoding */
    int stop;                                 /* GEN_STOP_* */
    int32_t *tokens;                          /* the generated ids (malloc'd, n_gen, EOG excluded) */
    bs_loop_guard_result loop;                /* what the loop guard did (mode off: zeros) */
} cli_gen_stats;

/* Evaluate prompt[0..n) on top of what the session holds (the sampler's history gets the same
 * tokens), then sample and stream until EOG, n_predict, a full context or an interrupt. The
 * last sampled token is not evaluated: the session ends holding the prompt and every generated
 * token but the last. -1 + bs_error on failure (prompt too long, eval error). */
int cli_gen_generate(cli_gen *g, const int32_t *prompt, int n, const cli_gen_run *r,
                     cli_gen_stats *stats);

/* Evaluate tokens without logits (history before a chat's generation prompt); the sampler's
 * history gets them too. */
int cli_gen_feed(cli_gen *g, const int32_t *tokens, int n);

/* The two halves of cli_gen_generate: evaluate the prompt (resets *stats), then the loop
 * (chat saves the session state between them). */
int cli_gen_prompt(cli_gen *g, const int32_t *prompt, int n, cli_gen_stats *stats);
int cli_gen_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *stats);
/* The detokenizer every generation loop streams through (<think> / </think> stay visible even
 * where the vocabulary marks them CONTROL), and its end: held-back bytes go to r->emit. */
bs_detok *cli_gen_detok_open(const cli_gen *g);
void cli_gen_detok_close(bs_detok *dt, const cli_gen_run *r);

/* cli_gen_guard.c: the loop guard's options, setup and guarded loop (used by the above). */
int cli_gen_guard_parse(cli_gen_opts *o, int argc, char **argv, int *i);
void cli_gen_guard_help(void);
int cli_gen_guard_open(cli_gen *g, const cli_gen_opts *o);
int cli_gen_guard_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *stats);
/* Stream stats->tokens[*n_emitted .. n) (tokens a rewind can no longer reach). */
int cli_gen_guard_emit(bs_detok *dt, const cli_gen_run *r, const cli_gen_stats *stats, int *n_emitted, int n);
/* End of a guarded loop: stream the tokens still held back (unless rc already failed), close dt
 * and copy the guard's result into stats. Returns rc, or -1 if that streaming failed. */
int cli_gen_guard_finish(cli_gen *g, bs_detok *dt, const cli_gen_run *r, cli_gen_stats *stats,
                         int *n_emitted, int rc);

/* cli_gen_lora.c: --lora options, loading + attaching at open, detaching at close. */
int cli_gen_lora_parse(cli_gen_opts *o, int argc, char **argv, int *i);
void cli_gen_lora_help(void);
int cli_gen_lora_open(cli_gen *g, const cli_gen_opts *o);
void cli_gen_lora_close(cli_gen *g);

/* llama.cpp-style timing lines on stderr. */
void cli_gen_print_stats(const cli_gen *g, const cli_gen_stats *st);

#endif
