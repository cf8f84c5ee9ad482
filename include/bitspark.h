/* bitspark.h: the public API of libbitspark.
 *
 * Kept small on purpose: load a model, tokenize, evaluate tokens, read logits, roll back. The
 * internal headers in src/ hold the rest (GGUF, formats, kernels) for the tools built on it. */
#ifndef BITSPARK_H
#define BITSPARK_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BITSPARK_VERSION "0.1.0"

const char *bitspark_version(void);
/* The last error of the calling thread, one line, never NULL. */
const char *bitspark_last_error(void);

/* --- models and sessions (qwen35: Bonsai-27B and other Qwen3.5/3.6 dense GGUFs) ----------------
 * A bs_model is the read-only weights (mmap'd by default); any number of bs_sessions evaluate
 * sequences on it, each with its own recurrent state and KV cache sized at creation. */
typedef struct bs_model bs_model;
typedef struct bs_session bs_session;

typedef struct bs_model_params {
    bool no_mmap;          /* read the whole file into memory instead of mapping it */
    const char *device;    /* "auto" (NULL), "cpu", "vulkan" or "vulkan:N" */
} bs_model_params;

/* params may be NULL (defaults). NULL + bitspark_last_error() on failure. */
bs_model *bs_model_load(const char *path, const bs_model_params *params);
void bs_model_free(bs_model *m);
int bs_model_n_vocab(const bs_model *m);
int bs_model_n_embd(const bs_model *m);
int bs_model_n_layer(const bs_model *m);
int bs_model_n_ctx_train(const bs_model *m);

enum { BS_KV_F16 = 0, BS_KV_F32 = 1 };

typedef struct bs_session_params {
    int n_ctx;             /* positions the KV cache holds; 0: 4096 (capped by the model's) */
    int n_batch;           /* max tokens computed at once (longer evals are split); 0: 512 */
    int kv_type;           /* BS_KV_F16 (default, like llama.cpp) or BS_KV_F32 */
    int n_threads;         /* 0: 1 (threading comes with the fast kernels) */
    int n_rollback;        /* evals of up to this many tokens record what a cheap rollback
                              needs (longer ones roll back by recomputing); 0: 16 */
} bs_session_params;

bs_session *bs_session_new(bs_model *m, const bs_session_params *params);
void bs_session_free(bs_session *s);
int bs_session_n_ctx(const bs_session *s);
int bs_session_n_past(const bs_session *s);   /* positions evaluated so far */
void bs_session_reset(bs_session *s);          /* back to an empty sequence */

enum { BS_LOGITS_NONE = 0, BS_LOGITS_LAST = 1, BS_LOGITS_ALL = 2 };

/* Evaluate n_tokens new tokens at positions n_past.. (one batch: prefill, decode or a draft
 * block). logits: NULL for BS_LOGITS_NONE, n_vocab floats for LAST, n_tokens * n_vocab for ALL.
 * taps: NULL, or n_tokens rows of (number of tap layers * n_embd) floats receiving the residual
 * stream after each layer set by bs_session_set_taps, concatenated in list order.
 * Bad token ids or running past n_ctx fail before anything changes. Returns 0 or -1. */
int bs_eval(bs_session *s, const int32_t *tokens, int n_tokens, int logits_mode, float *logits,
            float *taps);

/* Capture layers (0-based; duplicates allowed) for the taps of later evals; n = 0 clears. */
int bs_session_set_taps(bs_session *s, const int *layers, int n);
int bs_session_n_taps(const bs_session *s);

/* keep = 0: one-token evals update the recurrent state in place instead of into the other half
 * of its double buffer (a third less state traffic per decoded token: ~150 MB at 27B) and
 * leave nothing to roll back, so bs_session_rollback can no longer undo them. For plain
 * decoding that never rolls back. Default 1. */
void bs_session_set_undo(bs_session *s, int keep);

/* Keep only the first n_keep positions. Exact (bit-identical to never having evaluated the rest)
 * for any n_keep from the start of the last eval's last batch up to n_past; earlier points fail. */
int bs_session_rollback(bs_session *s, int n_keep);

/* Whole sequence state (positions, recurrent state, the used KV cache) as bytes, for prompt
 * caching. The size depends on n_past. Loading needs a session of the same model with an
 * n_ctx >= the saved n_past and the same kv_type. */
size_t bs_session_state_size(const bs_session *s);
int bs_session_state_save(const bs_session *s, void *buf, size_t cap);
int bs_session_state_load(bs_session *s, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
