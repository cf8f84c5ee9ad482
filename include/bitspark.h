/* bitspark.h: the public API of libbitspark.
 *
 * What the command line does, for embedders: load a model (and a DSpark drafter), tokenize and
 * render chats, and generate with the same engine as `bitspark run` and the server (sampling,
 * stop strings, the doom-loop guard, lossless speculative decoding, streaming, stats); or drive a
 * session directly (evaluate tokens, read logits, roll back, save state), several sequences in
 * one pass, with the sampler chain on the caller's own logits. The examples, each built against
 * the installed library by the tests: examples/simple.c (greedy generation), spec.c (with a
 * drafter), image.c (a question about an image), multi.c (several sequences in one pass, one
 * rolled back) and sampler.c (a hand-written loop: logits, sampler chain with a JSON schema,
 * streaming detokenizer). Only the functions marked BS_API are exported by the shared library;
 * the types are plain structs or opaque handles with stable names.
 *
 * Parameters: every params struct has a *_default_params() (or bs_gen_request_init) giving what
 * the command line uses. Start from it: a zero-initialised struct is NOT the defaults (a zeroed
 * bs_gen_params has draft_max 0, no drafting; a zeroed bs_sampler_params is greedy at seed 0).
 *
 * Threads: a bs_model, bs_tokenizer, bs_drafter and bs_vision are read-only once loaded and may
 * be shared by any number of threads (except bs_lora_attach / bs_lora_detach, which change the
 * model's weights: call them while nothing evaluates). A bs_session, bs_gen, bs_multi,
 * bs_sampler_chain and bs_detok are used by one thread at a time (different handles on the same
 * model may run at once on the CPU; on a Vulkan device, whose queue is not locked, evaluate one
 * model's sessions from one thread at a time). The log callback and level are process-wide.
 *
 * Errors: functions return NULL or -1 and set a one-line message for the calling thread
 * (bitspark_last_error). Strings and arrays returned through pointer arguments are malloc'd:
 * release them with free().
 *
 * Handles: a handle argument must be one the library returned and has not freed; a NULL handle
 * is a bug in the caller and is not checked (as with a NULL FILE * in stdio), except where a
 * function says so and in the *_free functions, which take NULL and do nothing. */
#ifndef BITSPARK_H
#define BITSPARK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BS_API __attribute__((visibility("default")))
#else
#define BS_API
#endif

#define BITSPARK_VERSION "0.1.0"

BS_API const char *bitspark_version(void);
/* The last error of the calling thread, one line, never NULL. */
BS_API const char *bitspark_last_error(void);

/* --- logging ----------------------------------------------------------------------------------
 * What the library reports while it works ("device: CPU (avx2)" when a model loads, warnings,
 * debug detail) goes to stderr unless a callback takes it. Levels: messages at or below the set
 * level are emitted (default BS_LOG_INFO; BS_LOG_QUIET: none). Process-wide: set it before
 * loading, not while other threads run. */
enum { BS_LOG_QUIET = 0, BS_LOG_INFO = 1, BS_LOG_DEBUG = 2 };
/* text: one message, usually a whole line ending in '\n'. */
typedef void (*bs_log_callback)(int level, const char *text, void *ud);
BS_API void bs_log_set(bs_log_callback cb, void *ud);   /* cb NULL: stderr again */
BS_API void bs_log_set_level(int level);

/* --- models and sessions (qwen35: Bonsai-27B and other Qwen3.5/3.6 dense GGUFs) ----------------
 * A bs_model is the read-only weights (mmap'd by default); any number of bs_sessions evaluate
 * sequences on it, each with its own recurrent state and KV cache sized at creation. */
typedef struct bs_model bs_model;
typedef struct bs_session bs_session;

typedef struct bs_model_params {
    bool no_mmap;          /* read the whole file into memory instead of mapping it */
    const char *device;    /* NULL or "auto": the best device; "cpu", "vulkan" or "vulkan:N" */
    bool vocab_only;       /* metadata and vocabulary only (tokenizer, chat template, metadata):
                              no weights are read; sessions, drafters, LoRA refuse such a model */
    /* Called with the share of the load done (0..1, ending with 1; on the CPU once per weight
     * repacked); returning false cancels the load (NULL + error). NULL: none. */
    bool (*progress)(float done, void *ud);
    void *progress_ud;
} bs_model_params;

/* No mmap off, device auto, weights loaded, no progress callback. */
BS_API bs_model_params bs_model_default_params(void);
/* params may be NULL (defaults). NULL + bitspark_last_error() on failure. */
BS_API bs_model *bs_model_load(const char *path, const bs_model_params *params);
BS_API void bs_model_free(bs_model *m);
BS_API int bs_model_n_vocab(const bs_model *m);
BS_API int bs_model_n_embd(const bs_model *m);
BS_API int bs_model_n_layer(const bs_model *m);
BS_API int bs_model_n_ctx_train(const bs_model *m);
/* Metadata: general.name ("" if none); the file's bytes; the weights' parameter count (every
 * tensor's elements); the chat template text (tokenizer.chat_template, NULL if none); the device
 * in use (as the `device:` line prints it; "" when vocab_only); whether it was loaded
 * vocab_only. Strings live as long as the model. */
BS_API const char *bs_model_name(const bs_model *m);
BS_API uint64_t bs_model_size(const bs_model *m);
BS_API uint64_t bs_model_n_params(const bs_model *m);
BS_API const char *bs_model_chat_template(const bs_model *m);
BS_API const char *bs_model_device(const bs_model *m);
BS_API bool bs_model_is_vocab_only(const bs_model *m);
/* Any string metadata value by key (e.g. "general.architecture"), NULL if missing. */
BS_API const char *bs_model_meta_str(const bs_model *m, const char *key);

enum { BS_KV_F16 = 0, BS_KV_F32 = 1 };

typedef struct bs_session_params {
    int n_ctx;             /* positions the KV cache holds; 0: 4096 (capped by the model's) */
    int n_batch;           /* max tokens computed at once (longer evals are split); 0: 512 */
    int kv_type;           /* BS_KV_F16 (default, like llama.cpp) or BS_KV_F32 */
    int n_threads;         /* threads of the session's evals; 0 or 1: the calling thread only
                              (bs_session_default_params: every core, as the command line) */
    int n_rollback;        /* evals of up to this many tokens record what a cheap rollback
                              needs (longer ones roll back by recomputing); 0: 16 */
} bs_session_params;

/* The command line's: n_ctx 0 (4096, capped by the model's), n_batch 512, F16 KV cache, every
 * core (up to 64), n_rollback 16. */
BS_API bs_session_params bs_session_default_params(void);
BS_API bs_session *bs_session_new(bs_model *m, const bs_session_params *params);
BS_API void bs_session_free(bs_session *s);
BS_API int bs_session_n_ctx(const bs_session *s);
BS_API int bs_session_n_past(const bs_session *s);   /* positions evaluated so far */
BS_API void bs_session_reset(bs_session *s);          /* back to an empty sequence */

enum { BS_LOGITS_NONE = 0, BS_LOGITS_LAST = 1, BS_LOGITS_ALL = 2 };

/* Evaluate n_tokens new tokens at positions n_past.. (one batch: prefill, decode or a draft
 * block). logits: NULL for BS_LOGITS_NONE, n_vocab floats for LAST, n_tokens * n_vocab for ALL.
 * taps: NULL, or n_tokens rows of (number of tap layers * n_embd) floats receiving the residual
 * stream after each layer set by bs_session_set_taps, concatenated in list order.
 * Bad token ids or running past n_ctx fail before anything changes. Returns 0 or -1. */
BS_API int bs_eval(bs_session *s, const int32_t *tokens, int n_tokens, int logits_mode, float *logits,
            float *taps);

/* bs_eval with BS_LOGITS_LAST, giving the greedy token instead of the logits: *next gets the
 * lowest id of the largest logit (NaN never wins). On a GPU the argmax runs there and only the
 * id comes back (not the n_vocab floats of the row). Returns 0 or -1. */
BS_API int bs_eval_greedy(bs_session *s, const int32_t *tokens, int n_tokens, int32_t *next, float *taps);
/* bs_eval with BS_LOGITS_LAST, giving the k best (1 .. BS_TOP_MAX) of the row instead of the row:
 * ids[] and logits[], best first in the sampler's order (the higher logit, then the lower id;
 * NaN and -inf are never among them, +inf is). On a GPU they are found there and only they come
 * back. Returns how many (fewer than k only when fewer logits are candidates) or -1. */
#define BS_TOP_MAX 64
BS_API int bs_eval_top(bs_session *s, const int32_t *tokens, int n_tokens, int k, int32_t *ids, float *logits);
/* Whether the session evaluates on a GPU (where bs_eval_greedy saves the row's read-back). */
BS_API bool bs_session_on_device(const bs_session *s);

/* Evaluate an image: nx * ny rows of n_embd floats (image embeddings, row-major over the grid of
 * merged tokens) in place of token embeddings. Row i gets the M-RoPE position (p, p + i / nx,
 * p + i % nx, 0), p the current position, and the text after it continues at p + max(nx, ny)
 * (mtmd's layout for Qwen3-VL / Qwen3.5); it takes nx * ny context positions. Causal like text;
 * rollback, taps and state save / load work as with bs_eval. CPU only. Returns 0 or -1. */
BS_API int bs_eval_image(bs_session *s, const float *embd, int nx, int ny, int logits_mode, float *logits,
                         float *taps);

/* An abort callback for long evaluations: asked before each batch of n_batch tokens of bs_eval;
 * when it returns true the eval stops there with -1 ("evaluation aborted"), the batches already
 * evaluated kept (bs_session_n_past says how far it got); on a Vulkan device it is asked once,
 * before the eval. NULL: none. */
BS_API void bs_session_set_abort(bs_session *s, bool (*abort)(void *ud), void *ud);

/* Capture layers (0-based; duplicates allowed) for the taps of later evals; n = 0 clears. */
BS_API int bs_session_set_taps(bs_session *s, const int *layers, int n);
BS_API int bs_session_n_taps(const bs_session *s);

/* keep = 0: one-token evals update the recurrent state in place instead of into the other half
 * of its double buffer (a third less state traffic per decoded token: ~150 MB at 27B) and
 * leave nothing to roll back, so bs_session_rollback can no longer undo them. For plain
 * decoding that never rolls back. Default 1. */
BS_API void bs_session_set_undo(bs_session *s, int keep);

/* Keep only the first n_keep positions. Exact (bit-identical to never having evaluated the rest)
 * for any n_keep from the start of the last eval's last batch up to n_past; earlier points fail. */
BS_API int bs_session_rollback(bs_session *s, int n_keep);

/* --- several sequences in one pass --------------------------------------------------------------
 * Each sequence is a bs_session of the same model; bs_multi_eval evaluates a batch of tokens for
 * each in a single pass through the weights (what the server's slots do), with the same logits
 * as evaluating each alone. Afterwards each session is exactly as if bs_eval had run on it, so
 * bs_session_rollback works per sequence. */
typedef struct bs_multi bs_multi;
typedef struct bs_batch_seq {
    bs_session *s;             /* distinct sessions of the batch's model */
    const int32_t *tokens;     /* n tokens at positions n_past.. */
    int n;                     /* 1 .. the session's n_batch */
    int logits_mode;           /* BS_LOGITS_NONE / LAST / ALL, as bs_eval */
    float *logits;             /* n_vocab (LAST) or n * n_vocab (ALL) floats */
    float *taps;               /* NULL, or n rows of the session's taps (bs_session_set_taps) */
    int32_t *next;             /* NULL, or the greedy token of each logits row (as bs_eval_greedy;
                                  one for LAST, n for ALL); with it, on a GPU, the rows themselves
                                  may stay unwritten (speculative verification reads n ids) */
    int top_k;                 /* 0, or each logits row's top_k best into top_ids / top_logits
                                  (row r at r * top_k) and their count into n_top[r] (as
                                  bs_eval_top; the rows may then stay unwritten on a GPU) */
    int32_t *top_ids;
    float *top_logits;
    int *n_top;
} bs_batch_seq;
/* Room for max_rows tokens in all per call, of which max_logit_rows (>= 1) get logits; n_threads
 * (0: 1) run the weight products. NULL + error. */
BS_API bs_multi *bs_multi_new(const bs_model *m, int max_rows, int max_logit_rows, int n_threads);
BS_API void bs_multi_free(bs_multi *b);
/* Everything is checked first (ids, context room, row counts): on failure nothing changes. */
BS_API int bs_multi_eval(bs_multi *b, const bs_batch_seq *seqs, int n_seq);

/* --- embeddings --------------------------------------------------------------------------------
 * The last layer's hidden states after the final norm (what the LM head sees), as llama.cpp's
 * and the server's embeddings: BS_POOL_NONE writes n rows of n_embd (per token, as they are),
 * BS_POOL_MEAN / BS_POOL_LAST one L2-normalized row (the server's --pooling mean / last). The
 * session is reset first and left holding ids, with its taps cleared. 0 or -1 + error. */
enum { BS_POOL_NONE = 0, BS_POOL_MEAN = 1, BS_POOL_LAST = 2 };
BS_API int bs_embed(bs_session *s, const int32_t *ids, int n, int pooling, float *out);

/* Whole sequence state (positions, recurrent state, the used KV cache) as bytes, for prompt
 * caching. The size depends on n_past. Loading needs a session of the same model (the same
 * file's contents: another quantization or fine-tune of the same shapes is refused) with an
 * n_ctx >= the saved n_past and the same kv_type; a refused load leaves the session as it was. */
BS_API size_t bs_session_state_size(const bs_session *s);
BS_API int bs_session_state_save(const bs_session *s, void *buf, size_t cap);
BS_API int bs_session_state_load(bs_session *s, const void *buf, size_t len);
/* Whether bs_session_state_load would take these bytes (the same model, by a fingerprint of its
 * file, and KV type; the positions fit; the size matches), without touching s: the positions
 * they hold, or -1 + error. */
BS_API int bs_session_state_check(const bs_session *s, const void *buf, size_t len);

/* --- tokenizer ---------------------------------------------------------------------------------
 * The model's own vocabulary (byte-level BPE with its pre-tokenizer, from the GGUF). */
typedef struct bs_tokenizer bs_tokenizer;

BS_API bs_tokenizer *bs_tokenizer_load(const bs_model *m);
BS_API void bs_tokenizer_free(bs_tokenizer *t);
BS_API int32_t bs_tokenizer_n_vocab(const bs_tokenizer *t);
BS_API int32_t bs_token_bos(const bs_tokenizer *t);   /* -1 if none */
BS_API int32_t bs_token_eos(const bs_tokenizer *t);
BS_API bool bs_tokenizer_add_bos(const bs_tokenizer *t);
/* End of generation (eos, eot, <|im_end|>, ...). */
BS_API bool bs_token_is_eog(const bs_tokenizer *t, int32_t id);
/* Vocabulary text of a token (NUL-terminated), NULL if out of range; the id of a text, or -1. */
BS_API const char *bs_token_text(const bs_tokenizer *t, int32_t id);
BS_API int32_t bs_token_lookup(const bs_tokenizer *t, const char *text);
/* UTF-8 text -> ids (*ids malloc'd, *n of them). parse_special: text like <|im_start|> becomes
 * its special token (llama.cpp's -p behaviour). -1 on invalid UTF-8. */
BS_API int bs_tokenize(const bs_tokenizer *t, const char *text, size_t len, bool parse_special,
                       int32_t **ids, size_t *n);
/* A prompt as `bitspark run -p` tokenizes it: special tokens parsed, BOS added if the vocabulary
 * asks for one. */
BS_API int bs_tokenize_prompt(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids,
                              size_t *n);
/* Unicode normalization of the text between special tokens before tokenization: the model's
 * own (tokenizer.ggml.normalizer, else NFC for Qwen vocabularies, as their tokenizer.json says)
 * unless set; BS_NORM_NONE gives llama.cpp's token ids. */
typedef enum { BS_NORM_NONE, BS_NORM_NFC, BS_NORM_NFD, BS_NORM_NFKC, BS_NORM_NFKD } bs_norm_mode;
BS_API int bs_tokenizer_set_normalize(bs_tokenizer *t, bs_norm_mode mode);
BS_API bs_norm_mode bs_tokenizer_get_normalize(const bs_tokenizer *t);
/* ids -> UTF-8 text (*text malloc'd, NUL-terminated); special: render control tokens too. */
BS_API int bs_detokenize(const bs_tokenizer *t, const int32_t *ids, size_t n, bool special,
                         char **text, size_t *len);
/* The raw bytes of one token (*piece points into the tokenizer, *len bytes, not NUL-terminated):
 * control tokens only when special. A piece may be part of a UTF-8 sequence (byte tokens): to
 * print tokens as they come, use the streaming detokenizer below. -1 on a bad id. */
BS_API int bs_token_to_piece(const bs_tokenizer *t, int32_t id, bool special, const char **piece,
                             size_t *len);
/* Streaming detokenizer for hand-written loops: push ids one at a time; each push returns only
 * complete, valid UTF-8 (a code point split across tokens is held back until it is whole; bytes
 * that can never be valid come out as U+FFFD). The text stays valid until the next call. */
typedef struct bs_detok bs_detok;
BS_API bs_detok *bs_detok_new(const bs_tokenizer *t, bool special);
BS_API int bs_detok_push(bs_detok *d, int32_t id, const char **text, size_t *len);
/* Show this control token even when special is false (e.g. "<think>"); -1 if there is none, or
 * when 16 tokens are preserved already. */
BS_API int bs_detok_preserve(bs_detok *d, const char *text);
/* What is held back (an incomplete sequence becomes U+FFFD); the detokenizer starts afresh. */
BS_API void bs_detok_flush(bs_detok *d, const char **text, size_t *len);
BS_API void bs_detok_free(bs_detok *d);

/* --- images (a Qwen3.5 / Qwen3-VL vision projector, "mmproj" GGUF; CPU only) ---------------
 * A projector turns an image file's bytes (PNG, JPEG, binary PPM/PGM) into rows of the text
 * model's width that a generation request takes (bs_gen_image, BS_TOKEN_IMAGE below); the
 * preprocessing is llama.cpp mtmd's. */
typedef struct bs_mmproj bs_vision;   /* a loaded projector */
typedef struct bs_mmproj bs_mmproj;   /* its old name (deprecated) */
/* Load a projector for model m (its output width must be m's n_embd; m may be NULL: no check).
 * A model on a Vulkan device gets the encoder there too (BITSPARK_VISION_DEVICE=cpu: on the
 * CPU): then encode on the thread that evaluates, and free the projector before the model. */
BS_API bs_vision *bs_vision_load(const char *path, const bs_model *m);
BS_API void bs_vision_free(bs_vision *p);
/* Encode one image: out->embd (nx * ny rows, malloc'd: free((void *)out->embd)), the grid and
 * the bytes' hash. n_threads <= 0: every CPU. 0, or -1 + error. */
struct bs_gen_image;
BS_API int bs_vision_encode(const bs_vision *p, const void *data, size_t len, int n_threads,
                            struct bs_gen_image *out);

/* The FNV-1a 64-bit hash of bytes: bs_gen_image.hash of an image file. */
BS_API uint64_t bs_hash_bytes(const void *data, size_t len);
/* bs_tokenize_prompt where the text holds images: each BS_IMAGE_MARKER becomes BS_TOKEN_IMAGE
 * and the text between markers is tokenized piece by piece (mtmd's chunks, so a vocabulary
 * without the vision tokens gets mtmd's ids). *n_images: the markers found. */
#define BS_IMAGE_MARKER "<|image_pad|>"
#define BS_IMAGE_CHAT "<|vision_start|>" BS_IMAGE_MARKER "<|vision_end|>"   /* a chat's image part */
BS_API int bs_tokenize_prompt_images(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids,
                                     size_t *n, int *n_images);

/* --- chat templates -------------------------------------------------------------------------- */
typedef struct bs_chat_tool_call {
    const char *name;
    const char *arguments;   /* JSON object as text (OpenAI sends a string); NULL: none */
} bs_chat_tool_call;

typedef struct bs_chat_msg {
    const char *role;        /* system, user, assistant, tool */
    const char *content;     /* NULL renders as "" */
    const char *reasoning;   /* reasoning_content; NULL: take it from <think> in content */
    const bs_chat_tool_call *tool_calls;
    size_t n_tool_calls;
} bs_chat_msg;

/* The conversation rendered with the model's chat template (Qwen3.5/3.6 detected from the GGUF,
 * ChatML otherwise), NUL-terminated and malloc'd. enable_thinking: -1 the template's default,
 * 0 off, 1 on. NULL + error on a bad conversation. */
BS_API char *bs_chat_apply(const bs_model *m, const bs_chat_msg *msgs, size_t n, bool add_generation_prompt,
                           int enable_thinking);

/* --- sampling -------------------------------------------------------------------------------- */
/* The sampler chain of llama.cpp, in its order: logit bias -> repetition/presence/frequency
 * penalties -> DRY -> top-n-sigma -> top-k -> typical-p -> top-p -> min-p -> XTC -> temperature
 * (dynamic or not) -> draw. Top-n-sigma, typical-p, XTC and the dynamic temperature apply to
 * sampling only (temperature <= 0 is the argmax); XTC's coin is part of the distribution (the
 * mixture with and without it), so speculative sampling stays exact with it. Mirostat (on)
 * makes the chain logit bias -> temperature -> Mirostat -> draw, as llama.cpp does; its state
 * (mu) follows the tokens accepted after an apply and is rolled back with the history. */
typedef struct {
    float temp;                 /* <= 0: greedy */
    int32_t top_k;              /* <= 0: off */
    float top_p;                /* >= 1: off */
    float min_p;                /* <= 0: off */
    int32_t min_keep;           /* top-p/min-p keep at least this many (values < 1 mean 1; top-k not) */
    int32_t penalty_last_n;     /* window of repeat/presence/frequency: 0 off, -1 whole history */
    float repeat_penalty;       /* 1: off; logit > 0 divided by it, logit <= 0 multiplied */
    float presence_penalty;     /* subtracted once from every token seen in the window */
    float frequency_penalty;    /* subtracted per occurrence in the window */
    float dry_multiplier;       /* 0: DRY off */
    float dry_base;             /* < 1: DRY off */
    int32_t dry_allowed_length; /* repeats up to this long are free */
    int32_t dry_penalty_last_n; /* 0: DRY off, -1: whole history */
    uint64_t seed;
    float typical_p;            /* locally typical sampling: 0 or >= 1 off */
    float top_n_sigma;          /* keep logits within n standard deviations of the best: <= 0 off */
    float xtc_probability;      /* XTC: the chance the most probable tokens are excluded: 0 off */
    float xtc_threshold;        /* ... those at least this probable but the last (> 0.5: off) */
    float dynatemp_range;       /* dynamic temperature, temp +- range by the entropy: <= 0 off */
    float dynatemp_exponent;    /* ... the entropy's exponent (1 in the defaults) */
    int32_t mirostat;           /* 0 off; 1 or 2: Mirostat v1 / v2 replaces everything between the
                                 * logit bias and the draw but the temperature (llama.cpp's chain) */
    float mirostat_tau;         /* its target surprise, in bits (5) */
    float mirostat_eta;         /* its learning rate (0.1) */
    /* The stages' order in llama.cpp's letters (e penalties, d DRY, s top-n-sigma, k top-k,
     * y typical-p, p top-p, m min-p, x XTC, t temperature): "" the default "edskypmxt"; a stage
     * left out does not run (no t: temperature 1, never greedy); a letter given twice counts
     * once. Penalties and DRY run first wherever they stand; XTC's coin is kept as the mixture
     * of the candidates as they are and without its cut, each through the stages after it. */
    char order[16];
} bs_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off, DRY off,
 * top-n-sigma, typical-p, XTC (threshold 0.1), dynamic temperature (exponent 1) and Mirostat
 * (tau 5, eta 0.1) off, seed 0
 * (the command line draws one from the clock unless --seed is given). */
BS_API bs_sampler_params bs_sampler_default_params(void);

/* The chain on the caller's own logits (e.g. from bs_eval), as the engine runs it: apply, then
 * pick (or sample = both), then accept the token that joins the sequence. It keeps the history
 * the penalties and DRY see (accept prompt tokens too, to count them, as llama.cpp does) and an
 * optional grammar that masks what it does not allow. */
typedef struct bs_sampler_chain bs_sampler_chain;
/* params NULL: bs_sampler_default_params(). tok (may be NULL: no grammar, no DRY breakers)
 * gives the vocabulary; n_vocab: the logits' length (<= 0: the tokenizer's); ids past the
 * tokenizer's vocabulary are never sampled. DRY gets llama.cpp's breakers. NULL + error. */
BS_API bs_sampler_chain *bs_sampler_chain_new(const bs_sampler_params *params, const bs_tokenizer *tok,
                                              int32_t n_vocab);
BS_API void bs_sampler_chain_free(bs_sampler_chain *c);
/* Constrain what is sampled from the next token on with a GBNF grammar (llama.cpp's format) or a
 * JSON schema (compiled to one; NULL schema: any JSON object); gbnf NULL removes it. Needs a
 * tokenizer. -1 + error (the line of a syntax error), the previous constraint kept. */
BS_API int bs_sampler_chain_set_grammar(bs_sampler_chain *c, const char *gbnf);
BS_API int bs_sampler_chain_set_json_schema(bs_sampler_chain *c, const char *schema);
/* Whether the grammar could end here (true without one). */
BS_API bool bs_sampler_chain_grammar_complete(const bs_sampler_chain *c);
/* Added to a token's logit first; -INFINITY bans it. */
BS_API int bs_sampler_chain_set_logit_bias(bs_sampler_chain *c, int32_t id, float bias);
/* Run the chain over logits (n_vocab floats, unchanged): the number of candidates left, -1 when
 * nothing is allowed. */
BS_API int bs_sampler_chain_apply(bs_sampler_chain *c, const float *logits);
/* The distribution of the last apply: up to cap (id, p) pairs, most likely first when greedy,
 * top-k or top-p ran (else in id order); returns how many were written. */
BS_API int bs_sampler_chain_candidates(const bs_sampler_chain *c, int32_t *ids, float *p, int cap);
/* Draw from the last apply's distribution (greedy: its argmax); -1 if nothing was applied. */
BS_API int32_t bs_sampler_chain_pick(bs_sampler_chain *c);
/* apply + pick; -1 + error. Does not accept the token. */
BS_API int32_t bs_sampler_chain_sample(bs_sampler_chain *c, const float *logits);
/* A token joined the sequence: history and grammar advance. -1 when the grammar refuses it
 * (nothing changes) or the id is out of range. */
BS_API int bs_sampler_chain_accept(bs_sampler_chain *c, int32_t id);
/* Back to the start: no history, the grammar at its beginning, the random stream restarted
 * from the seed (same logits then give the same tokens again). */
BS_API void bs_sampler_chain_reset(bs_sampler_chain *c);
BS_API void bs_sampler_chain_set_seed(bs_sampler_chain *c, uint64_t seed);

/* --- the doom-loop guard --------------------------------------------------------------------- */
/* Detector: a span of period p characters repeating min_repeats times over min_chars. */
typedef struct {
    int min_repeats;          /* copies needed (4) */
    int min_chars;            /* characters the copies must cover (60) */
    int max_period;           /* longest period looked for, in characters (1024) */
} bs_loop_params;
BS_API bs_loop_params bs_loop_default_params(void);

/* One detected loop. Character offsets count code points of the scanned text (prefix
 * included); token indices count the tokens pushed (0 = first generated token). */
typedef struct {
    int64_t start_char;        /* first character of the first copy */
    int64_t repeat_start_char; /* first character of the second copy */
    int64_t end_char;          /* end of the periodic region when detected (exclusive) */
    int64_t prefix_chars;      /* characters of the prefix */
    int period;                /* characters */
    int repeats;               /* whole copies */
    int rejected_token;        /* index of the rejected token */
    int64_t rejected_char;     /* the character of the rejected token the choice was made at */
} bs_loop_info;

enum { BS_LOOP_GUARD_OFF = 0, BS_LOOP_GUARD_STOP, BS_LOOP_GUARD_REWIND };

typedef struct {
    int mode;                 /* BS_LOOP_GUARD_* */
    bs_loop_params det;
    int max_rewinds;          /* rewinds per generation before stopping (8) */
    int ckpt_every;           /* tokens between state checkpoints (64) */
    int ckpt_count;           /* checkpoints kept besides the one at the prompt's end (8), each
                                 the recurrent state + n_vocab logits (Bonsai-27B: ~158 MB),
                                 allocated as generation reaches them; a rewind further back
                                 than the oldest replays from the prompt's checkpoint */
} bs_loop_guard_params;
BS_API bs_loop_guard_params bs_loop_guard_default_params(void);

/* What the guard did in one generation: printed with the run's stats, and in the server's
 * response as "loop_guard": {"mode": "rewind", "loops_detected": 2, "rewinds": 2,
 * "discarded_tokens": 71, "stopped": false, "span": {"start", "repeat_start", "end", "period",
 * "repeats", "rejected_token", "rejected_id"} or null}, with finish_reason "loop" when
 * `stopped`. */
typedef struct {
    int mode;
    int n_detected;            /* loops detected */
    int n_rewinds;             /* rewinds performed */
    int n_discarded;           /* generated tokens thrown away by rewinds */
    bool stopped;              /* generation ended on a loop (stop mode, or rewinds used up) */
    bs_loop_info last;         /* the last detected loop (valid when n_detected > 0) */
    int32_t last_rejected_id;  /* its rejected token id */
} bs_loop_guard_result;

/* --- the DSpark drafter ---------------------------------------------------------------------- */
#define BS_DRAFT_AUTO (-1)     /* draft_max: depth chosen per round from measured costs */
typedef struct bs_dspark bs_drafter;   /* a loaded drafter */
typedef struct bs_dspark bs_dspark;    /* its old name (deprecated) */

/* A drafter (GGUF, or a directory / .safetensors with config.json) for target m: loaded, checked
 * against it, and sharing its token_embd / output where they are the same. */
BS_API bs_drafter *bs_drafter_load(const char *path, const bs_model *target);
BS_API void bs_drafter_free(bs_drafter *d);
BS_API int bs_drafter_block_size(const bs_drafter *d);
/* Deprecated: the old name of bs_drafter_free, kept for one release. */
BS_API void bs_dspark_free(bs_dspark *d);

/* --- the generation engine ------------------------------------------------------------------- */
#define BS_GEN_MAX_STOP 64
#define BS_GEN_MAX_TOP 20
#define BS_GEN_MAX_BREAKERS 16

/* Why generation ended (BS_GEN_RUNNING while it has not). */
enum bs_gen_stop {
    BS_GEN_EOG, BS_GEN_LENGTH, BS_GEN_CTX, BS_GEN_INTERRUPT, BS_GEN_LOOP, BS_GEN_STOP_STRING,
    BS_GEN_ERROR, BS_GEN_RUNNING
};
BS_API const char *bs_gen_stop_name(int stop);   /* "end of generation", "length limit", ... */

/* How a generator is built (once per sequence slot). Start from bs_gen_default_params(). */
typedef struct bs_gen_params {
    int n_ctx;                 /* 0: the session default */
    int n_threads;             /* 0: 1 (the defaults: every core) */
    bool undo;                 /* keep what rollback needs after one-token evals (chat's prefix
                                  reuse); drafting always keeps it */
    /* the drafter (NULL: none) and its rounds */
    const bs_drafter *drafter;
    const char *drafter_path;  /* the cost cache's key */
    int draft_max;             /* 0..block size, BS_DRAFT_AUTO */
    bool no_conf;              /* auto depth without the confidence-head trim */
    int draft_window;          /* the drafter attends to its last N context rows (0: all) */
} bs_gen_params;
/* The command line's: session context, every core (up to 64), no undo, no drafter, draft_max
 * BS_DRAFT_AUTO (a zeroed struct's 0 would never draft), window 0. */
BS_API bs_gen_params bs_gen_default_params(void);

/* An image in a prompt: its rows (the vision encoder's output) and a content key. */
typedef struct bs_gen_image {
    const float *embd;         /* nx * ny rows of the model's n_embd floats; copied by bs_gen_begin */
    int nx, ny;                /* grid of merged tokens */
    uint64_t hash;             /* content key (e.g. FNV-1a of the image file's bytes): the prompt
                                  cache reuses an image only when hash and grid match */
} bs_gen_image;
/* In a prompt token array: the place of the next image of bs_gen_request.images. */
#define BS_TOKEN_IMAGE (-2)

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
    bool context_shift;        /* a full context drops the older half of what follows the first
                                  n_keep tokens and re-evaluates the rest (the recurrent state
                                  cannot drop positions), instead of ending with BS_GEN_CTX */
    int n_keep;                /* context shift: tokens kept at the start (a system prompt) */
    const char *grammar;       /* GBNF (llama.cpp's format): what is generated must match it;
                                  NULL: free text. Speculation stays exact under it: greedy
                                  drafts it does not allow are cut before verification, sampled
                                  ones are verified (and rejected: the grammar gives them p 0) */
    volatile sig_atomic_t *interrupt;   /* ends generation (BS_GEN_INTERRUPT) once nonzero */
    const bs_gen_image *images;   /* one per BS_TOKEN_IMAGE of the prompt, in order; each takes
                                     nx * ny positions (ckpt_at counts a marker as one) */
    int n_images;
    bool greedy_on_device;     /* plain greedy decoding (temperature <= 0 and no grammar, bias,
                                  penalties, DRY, guard, logprobs or drafter) on a device takes
                                  only each token's id from it (the argmax there: the same
                                  token), not the logits row; and sampling whose chain reads only
                                  the top_k best logits (top_k 1..BS_TOP_MAX, nothing else that
                                  changes them) only those k (bs_eval_top: the same draw);
                                  bs_gen_logits then keeps the prompt's last row */
    bool post_probs;           /* with n_probs: log-probabilities after the sampler chain (its
                                  truncated, tempered, renormalised distribution, the tokens it
                                  dropped left out) instead of the model's; decodes without the
                                  drafter (llama-server's post_sampling_probs) */
    int n_indent;              /* > 0: a generated line after the first newline indented (spaces,
                                  tabs) by fewer characters ends generation (BS_GEN_LENGTH), cut
                                  at its first other character, an empty line's newline included
                                  (code completion; llama-server's) */
    int t_max_predict_ms;      /* > 0: once this long has passed since the first token, the next
                                  token holding a newline ends generation (BS_GEN_LENGTH) */
} bs_gen_request;

BS_API void bs_gen_request_init(bs_gen_request *r);   /* defaults: greedy off (llama.cpp's sampler
                                                  defaults), no limits, no guard, seed 0 */
/* bs_gen_request_init with a seed from the clock, as the command line without --seed. */
BS_API bs_gen_request bs_gen_request_default_params(void);

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
    double t_prompt, t_gen;    /* seconds (t_gen: so far, while generating) */
    long n_drafted, n_accepted, n_draft_rounds;   /* this request's speculative rounds */
    bs_loop_guard_result loop; /* what the loop guard did (mode off: zeros) */
    int n_shifts, n_shifted;   /* context shifts, and the positions they dropped */
    int rewound_to;            /* stop_at_rewind: generated tokens the rewind kept (the output
                                  still holds them all, up to the one that completed the loop) */
    int stop;                  /* enum bs_gen_stop */
} bs_gen_stats;

typedef struct bs_gen bs_gen;

/* What was generated: text (len bytes, NUL-terminated); text[0..n_safe) may be shown (no stop
 * string can still cut it, no loop-guard rewind can take it back); the tokens. Valid until the
 * next call on the generator. */
typedef struct bs_gen_output {
    const char *text;
    size_t len, n_safe;
    const bs_gen_token *toks;
    int n_toks, n_toks_safe;   /* tokens whose logprobs may be streamed */
} bs_gen_output;

/* A generator: one sequence's session on m (with the drafter of p, if any). The model, tokenizer
 * and drafter must outlive it. NULL + error. */
BS_API bs_gen *bs_gen_new(bs_model *m, const bs_tokenizer *tok, const bs_gen_params *p);
BS_API void bs_gen_free(bs_gen *g);
/* Start a request on prompt[0..n) (copied). Reuses the longest prefix the session or a saved
 * state holds. -1 + error (nothing started). */
BS_API int bs_gen_begin(bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n);
/* One step: at most budget prompt rows (<= 0: the rest of the prompt), one token, or one
 * speculative round. 0, or -1 + error (the request then ended with BS_GEN_ERROR). */
BS_API int bs_gen_step(bs_gen *g, int budget);
/* Step until done; on_step (may be NULL) is called after each step, e.g. to stream
 * bs_gen_output's newly safe text. */
BS_API int bs_gen_run(bs_gen *g, void (*on_step)(void *ud, bs_gen *g), void *ud);
BS_API bool bs_gen_done(const bs_gen *g);
/* End the request now, with this reason (e.g. BS_GEN_INTERRUPT: the user went away). */
BS_API void bs_gen_cancel(bs_gen *g, int stop);
BS_API void bs_gen_output_get(const bs_gen *g, bs_gen_output *out);
/* Lowest text byte and token index changed since the last call (a rewind rewrites text), which
 * resets them: what a copy of the output must refresh. */
BS_API void bs_gen_output_changed(bs_gen *g, size_t *text_from, int *tok_from);
BS_API const bs_gen_stats *bs_gen_get_stats(const bs_gen *g);
/* The generator's session (for logits, state save / load) and the last position's logits. */
BS_API bs_session *bs_gen_session(bs_gen *g);
BS_API const float *bs_gen_logits(const bs_gen *g);

/* --- LoRA adapters at run time ------------------------------------------------------------------
 * An adapter (llama.cpp GGUF LoRA, or PEFT: a directory with adapter_config.json +
 * adapter_model.safetensors, or the .safetensors) applied on top of the model's weights without
 * changing them: every matrix it names computes W x + scale * (alpha / r) * B (A x) (CPU and
 * Vulkan). */
typedef struct bs_lora bs_lora;
BS_API bs_lora *bs_lora_adapter_load(const bs_model *m, const char *path);
/* Free an adapter (detach it first). */
BS_API void bs_lora_free(bs_lora *l);
/* Apply l with scale to m's weights (several adapters add up); the adapter must outlive it.
 * Nothing changes on an error. Not while anything evaluates on m. */
BS_API int bs_lora_attach(bs_model *m, const bs_lora *l, float scale);
/* Remove every adapter: the model computes exactly as loaded again. */
BS_API void bs_lora_detach(bs_model *m);

#ifdef __cplusplus
}
#endif
#endif
