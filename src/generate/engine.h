/* engine.h: a model opened for generation as the commands use it: the target with its
 * tokenizer, LoRA adapters and chat template, the drafter if one is given, and one generator
 * (gen.h) on them. `run`, `chat`, antidoom and the tests open one from the same options; the
 * command line fills those options (cli/cli_gen.c). */
#ifndef BS_ENGINE_H
#define BS_ENGINE_H

#include "generate/gen.h"
#include "text/chat_template.h"

#define BS_ENGINE_MAX_BIAS 64
#define BS_ENGINE_MAX_LORA 8

typedef struct bs_engine_opts {
    const char *model;
    int n_threads;             /* 0: 1 */
    int n_ctx;                 /* 0: session default */
    bool no_mmap;
    bool undo;                 /* keep rollback records without a drafter (chat's prefix reuse) */
    bool normalize_set;        /* override the vocabulary's Unicode normalization with normalize */
    bs_norm_mode normalize;    /* (text/normalize.h; BS_NORM_NONE: llama.cpp's prompt ids) */
    /* sampling */
    bs_sampler_params sp;
    bool seed_set;             /* otherwise a time-based seed, logged */
    const char *breakers[BS_GEN_MAX_BREAKERS];
    int n_breakers;            /* -1: llama.cpp's defaults ("\n", ":", "\"", "*") */
    int32_t bias_id[BS_ENGINE_MAX_BIAS];
    float bias[BS_ENGINE_MAX_BIAS];
    int n_bias;
    bool ignore_eos;
    bool context_shift;        /* --context-shift: a full context drops older tokens (gen.h) */
    int n_keep;                /* --keep N: tokens at the start that a shift keeps */
    /* speculative decoding */
    const char *drafter;       /* NULL: none */
    int draft_max;             /* 0..block size, BS_DRAFT_AUTO */
    bool share_embeddings;     /* borrow the target's token_embd / output even if they differ */
    bool no_conf;
    int draft_window;
    /* the doom-loop guard */
    bs_loop_guard_params loop;
    /* LoRA adapters: FILE[:SCALE], or FILE with lora_scale when lora_has_scale */
    const char *lora[BS_ENGINE_MAX_LORA];
    float lora_scale[BS_ENGINE_MAX_LORA];
    bool lora_has_scale[BS_ENGINE_MAX_LORA];
    int n_lora;
} bs_engine_opts;

void bs_engine_opts_init(bs_engine_opts *o);

typedef struct bs_engine {
    bs_engine_opts o;
    bs_model *model;
    bs_tokenizer *tok;
    bs_dspark *drafter;
    bs_gen *gen;
    int n_vocab;
    double t_load, t_draft_load;   /* seconds */
    bs_chat_template tmpl;
    bool tmpl_ready;
    struct bs_lora *loras[BS_ENGINE_MAX_LORA];
    int n_loras;
} bs_engine;

/* Attach the LoRA adapters of o to m (*n of them loaded into loras[BS_ENGINE_MAX_LORA]); -1 +
 * bs_error, with what was loaded still in loras for bs_loras_detach. */
int bs_loras_attach(bs_model *m, const bs_engine_opts *o, struct bs_lora **loras, int *n);
void bs_loras_detach(bs_model *m, struct bs_lora **loras, int n);

/* Load everything. -1 + bs_error (e is then closed). */
int bs_engine_open(bs_engine *e, const bs_engine_opts *o);
void bs_engine_close(bs_engine *e);

/* A request with the options' sampling, biases, breakers, guard and ignore_eos (strings and
 * arrays point into e->o). keep_sampler is set: requests go on with one random stream. */
void bs_engine_request(const bs_engine *e, bs_gen_request *r);

/* Tokenize text with special tokens parsed (llama.cpp's -p behaviour), BOS added if the vocab
 * asks for it. *ids malloc'd. -1 + bs_error on bad UTF-8. */
int bs_engine_tokenize(const bs_engine *e, const char *text, size_t len, int32_t **ids, size_t *n);

/* Render a conversation with the model's chat template (detected from the GGUF on first use,
 * ChatML fallback). enable_thinking: -1 template default, 0 off, 1 on. malloc'd. */
char *bs_engine_render(bs_engine *e, const bs_chat_msg *msgs, int n, int enable_thinking,
                       bool add_generation_prompt, size_t *len);

/* Generate from prompt[0..n) to the end with request r, streaming text as it becomes safe to
 * emit(ud, text, len) (may be NULL). */
int bs_engine_generate(bs_engine *e, const bs_gen_request *r, const int32_t *prompt, int n,
                       void (*emit)(void *ud, const char *text, size_t len), void *ud);

/* llama.cpp-style timing lines (and the drafter's and guard's) on stderr. */
void bs_engine_print_stats(const bs_engine *e, const bs_gen_stats *st);

#endif
