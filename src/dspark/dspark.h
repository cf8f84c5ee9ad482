/* dspark.h: the DSpark drafter (dspark.md §1-4, prism-fork.md §3): a small non-causal transformer
 * that reads the target's layer taps as extra K/V and proposes a block of tokens in one pass.
 *
 * Loading (dspark_load.c): PrismML's `dspark` GGUFs (F32, BF16 and the Q4_1 pack whose
 * token_embd is legacy 128-group Q2_0) and the safetensors + config.json export of DeepSpec's
 * Qwen3DSparkModel. The pair check and the borrowing of the target's embedding / LM head live
 * there too.
 *
 * Forward (dspark.c), on a bs_dspark_ctx that holds the drafter's context K/V:
 *   - bs_dspark_ctx_append: tap rows of committed positions -> fc -> hidden_norm -> each layer's
 *     k/v projections (k-norm, RoPE at the row's position). Only new rows are ever projected.
 *   - bs_dspark_block: the block [anchor, mask...] at positions pos.. through every layer,
 *     attending to [context K/V ; block K/V] without a causal mask; leaves the final-normed
 *     hidden state of every slot. Block K/V are never kept.
 *   - heads on that state: lm head for chosen slots (base logits), the low-rank Markov bias
 *     W2 * W1[prev], the confidence head sigmoid(w . [h ; W1[prev]] + b). */
#ifndef BS_DSPARK_H
#define BS_DSPARK_H

#include "bitspark.h"
#include "cpu/compute.h"
#include "vulkan/backend.h"

#include <stdbool.h>
#include <stdint.h>

#define BS_DSPARK_MAX_TAPS 64
#define BS_DSPARK_MAX_BLOCK 64
#define BS_DSPARK_MAX_MULTI 64   /* blocks one bs_dspark_block_multi runs together */

typedef struct bs_dspark_hparams {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab;
    float eps, rope_base;
    int block_size, mask_id, markov_rank;
    int n_taps, taps[BS_DSPARK_MAX_TAPS];   /* target layers, in concatenation order */
    bool conf_head, conf_with_markov, log_snr;
    float min_log_snr, max_log_snr;
} bs_dspark_hparams;

typedef struct bs_dspark_layer {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    bs_weight wq, wk, wv, wo, gate, up, down;
} bs_dspark_layer;

typedef struct bs_dspark {
    bs_dspark_hparams hp;
    bs_weight tok_embd, output, fc, markov_a, markov_b;
    const float *output_norm, *hidden_norm;
    bs_dspark_layer *layers;
    float *conf_w;               /* [n_embd (+ markov_rank)], dequantized; NULL without the head */
    float conf_b;
    float *snr_anchor, *snr_mask;/* log-SNR addends of the anchor / mask slots [n_embd]; NULL if off */
    bool embd_borrowed, output_borrowed;
    /* where the weights live */
    struct gguf_file *gguf;
    struct st_model *st;
    void **owned;                /* buffers converted at load (bf16/f16 vectors), freed with it */
    int n_owned;
    struct bs_dspark_dev *dev;   /* its copy on a Vulkan device (dspark_device.c), once uploaded */
    struct bs_hadamard *fold;    /* a folded LM head's fold (model/hadamard.h), or NULL */
} bs_dspark;

typedef struct bs_dspark_params {
    bool no_mmap;
} bs_dspark_params;

/* Load a drafter: a .gguf file, or a safetensors checkpoint (a .safetensors file, an index .json,
 * or a directory) with config.json next to it. NULL + bs_error on failure. */
bs_dspark *bs_dspark_load(const char *path, const bs_dspark_params *params);
void bs_dspark_free(bs_dspark *d);

/* Check the drafter fits the target: same vocabulary and hidden size, every tap inside the
 * target's layers, mask id in range. 0 or -1 + bs_error. */
int bs_dspark_check_pair(const bs_dspark *d, const bs_model *target);

/* Borrow the target's token_embd / output where they hold the same values as the drafter's
 * (every row compared dequantized), or unconditionally with force. The drafter's own copies are
 * then no longer touched (the OS drops mapped pages). Returns how many were borrowed (0..2). */
int bs_dspark_share_embeddings(bs_dspark *d, const bs_model *target, bool force);

/* --- on a Vulkan device (dspark_device.c) ---------------------------------------------------- */
typedef struct bs_dspark_dev bs_dspark_dev;
/* Upload the drafter to the device: the target's Vulkan context when target runs there (the
 * tensors it borrows then come from the target's network), else the device spec names
 * ("vulkan", "vulkan:N"; "cpu": nothing). Contexts made afterwards (bs_dspark_ctx_new) run on
 * the device. Once per drafter (later calls return 0); the drafter must then be freed before
 * the target. 0 or -1 + bs_error. */
int bs_dspark_to_device(const bs_dspark *d, const bs_model *target, const char *spec);
bool bs_dspark_on_device(const bs_dspark *d);
bs_dspark_dev *bs_dspark_dev_new(void);
void bs_dspark_dev_free(bs_dspark_dev *dev);
struct bs_vk_dctx *bs_dspark_dev_ctx_new(const bs_dspark *d, int n_rows_max);
/* Blocks one device submission takes (bs_vk_dspark_max_blocks). */
int bs_dspark_dev_max_blocks(const bs_dspark *d);
/* A context's append of n rows of its device session's taps (bs_vk_dctx_append_sess), or, while
 * collecting, kept for the next flush (a context already kept flushes first); rope: [n][head_dim]
 * (copied), n <= max_rows. The flush runs the kept appends as one pass (bs_vk_dctx_append_multi)
 * and is called before anything reads a context's rows on the device. */
int bs_dspark_dev_append(const bs_dspark *d, struct bs_vk_dctx *s, const struct bs_vk_sess *sess, int n, int row0,
                         const float *rope, int max_rows);
int bs_dspark_dev_flush(const bs_dspark *d);
/* Appends from device sessions collected (on) and run as one pass (off: 0 or -1 + bs_error).
 * The server collects its slots' appends after a batch pass: fc and the K/V products are read
 * once for all of them, not once a slot. The sessions' taps must stay as they are till then. */
int bs_dspark_collect(const bs_dspark *d, bool on);

/* --- forward ---------------------------------------------------------------------------------- */
typedef struct bs_dspark_ctx bs_dspark_ctx;

/* n_ctx_max: positions the context may grow to. pool: threads for the matmuls (may be NULL). */
bs_dspark_ctx *bs_dspark_ctx_new(const bs_dspark *d, int n_ctx_max, bs_pool *pool);
/* window > 0: blocks attend to the last `window` context rows only (PrismML's
 * DSPARK_DRAFT_WINDOW; rows keep their absolute positions). Changes drafts, never output. */
void bs_dspark_ctx_set_window(bs_dspark_ctx *c, int window);
void bs_dspark_ctx_free(bs_dspark_ctx *c);
/* Positions the context covers (the next row appended gets position len). */
int bs_dspark_ctx_len(const bs_dspark_ctx *c);
/* Rows it holds: len minus the positions skipped. */
int bs_dspark_ctx_rows(const bs_dspark_ctx *c);
/* Append n tap rows (n_taps * n_embd floats each) as positions len..len+n-1. */
int bs_dspark_ctx_append(bs_dspark_ctx *c, const float *taps, int n);
/* The same for a context on the device, from the first n tap rows a device session (vulkan/
 * backend.h's bs_vk_sess) just evaluated: the taps never come to the host. */
struct bs_vk_sess;
int bs_dspark_ctx_append_session(bs_dspark_ctx *c, const struct bs_vk_sess *s, int n);
bool bs_dspark_ctx_on_device(const bs_dspark_ctx *c);
/* Let c read the taps of target session s where s evaluated them: on the device when both run
 * there and a pass of `rows` rows (a verify) fits one submission, since the device keeps the
 * taps of its last submission only. Returns whether the taps stay there; c NULL ends it. Then
 * bs_dspark_ctx_append_from appends s's last n tap rows from the device, or from taps (the rows
 * the host got) otherwise. */
bool bs_dspark_ctx_link(bs_dspark_ctx *c, bs_session *s, int rows);
int bs_dspark_ctx_append_from(bs_dspark_ctx *c, const bs_session *s, const float *taps, int n);
/* Advance len by n positions that get no row (a gap, as PrismML's DSPARK_DRAFT_WINDOW leaves:
 * later rows keep their absolute RoPE positions; drafts change, verified output never does). */
int bs_dspark_ctx_skip(bs_dspark_ctx *c, int n);
/* Forget positions >= n (n <= len), rows and skipped ones alike. */
void bs_dspark_ctx_crop(bs_dspark_ctx *c, int n);

/* Run the block [anchor, mask x (block_size-1)] at positions pos.. (pos >= len: the context
 * covers positions < pos). Afterwards bs_dspark_hidden() holds each slot's final-normed state. */
int bs_dspark_block(bs_dspark_ctx *c, int32_t anchor, int pos);
/* The same with only the first n_slots slots (anchor + n_slots-1 masks), for at most n_slots
 * drafts at a fraction of the cost. Not what the drafter was trained on (its masks attend to each
 * other), so drafts can differ from the full block's; slots >= n_slots are then undefined. */
int bs_dspark_block_n(bs_dspark_ctx *c, int32_t anchor, int pos, int n_slots);
/* The blocks of n contexts of one drafter (several sequences: server slots) in one pass over its
 * weights: block i is [anchors[i], mask...] of n_slots[i] slots at positions pos[i].., as
 * bs_dspark_block_n would run it on cs[i] alone, with the same results (matrix rows are batch
 * invariant); the base logits of every slot are computed too, in one pass over the LM head, and
 * bs_dspark_logits / bs_dspark_draft_greedy then read them. 0 or -1 + bs_error. */
int bs_dspark_block_multi(bs_dspark_ctx *const *cs, const int32_t *anchors, const int *pos, const int *n_slots, int n);
const float *bs_dspark_hidden(const bs_dspark_ctx *c, int slot);
/* Base logits (no Markov bias) of slots first..first+n-1 into logits[n][n_vocab]. */
void bs_dspark_logits(bs_dspark_ctx *c, int first, int n, float *logits);
/* Markov bias of the token after prev: bias[v] = sum_r W2[v][r] * W1[prev][r] (zeros if rank 0). */
void bs_dspark_markov_bias(bs_dspark_ctx *c, int32_t prev, float *bias);
/* Confidence of slot given the token before it (prev); -1 if the drafter has no head. */
float bs_dspark_confidence(bs_dspark_ctx *c, int slot, int32_t prev);
/* Slot `slot`'s k best scores (base logits + the Markov term of prev, the mask id never), in
 * the sampler's order, found on the device from the last block's rows there: their count, or 0
 * where they are not there (a CPU context, rows already read back, BITSPARK_VK_DRAFT_HOST=1):
 * then the caller takes the row (bs_dspark_logits + bs_dspark_markov_bias). */
int bs_dspark_slot_top(bs_dspark_ctx *c, int slot, int32_t prev, int k, int32_t *ids, float *vals);
/* Slots 0..n-1's lists for a chain of sampled drafts from anchor, and the drafts the device
 * predicts from them with the uniforms u (one submission: no host between the slots). Slot k's
 * list (ids/vals + k * top_k, counts[k] long) is that of pred[k-1]: the caller draws each draft
 * itself from its list with u[k] and takes the lists only as long as its draws equal pred.
 * Returns n, or 0 where the chain cannot run there (as bs_dspark_slot_top). */
int bs_dspark_draft_sampled(bs_dspark_ctx *c, int32_t anchor, int n, const bs_draw *p, const double *u,
                            int32_t *pred, int32_t *ids, float *vals, int *counts);
/* The next device block runs such a chain of its slots in its own submission (p NULL: none),
 * with the first n of uniforms u: bs_dspark_draft_sampled then gives its results for the same
 * anchor, steps and uniforms without a submission of its own. */
void bs_dspark_ctx_sampled_ahead(bs_dspark_ctx *c, const bs_draw *p, const double *u, int n);

/* Greedy drafts of slots 0..n-1: argmax of base logits + Markov bias chained on the token just
 * drafted (prev = anchor for slot 0), mask id excluded, ties to the lowest id. conf (may be NULL)
 * gets each slot's confidence. Requires a bs_dspark_block before. */
void bs_dspark_draft_greedy(bs_dspark_ctx *c, int32_t anchor, int n, int32_t *drafts, float *conf);
/* On: the context's blocks on the device take their greedy drafts in the same submission (the
 * next bs_dspark_draft_greedy of the block's anchor reads them): one wait on the device a
 * greedy round instead of two. Off (the default) where rounds sample their drafts. */
void bs_dspark_ctx_greedy_ahead(bs_dspark_ctx *c, bool on);

#endif
