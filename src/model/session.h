/* session.h: one sequence being evaluated on a qwen35 model: recurrent state, KV cache, the
 * record that makes rollback exact, and scratch buffers sized once at creation (internal).
 *
 * Recurrent state is double-buffered: each batch reads the state of half `cur` and writes the
 * other half, so the state before the last batch stays intact. Rolling back inside that batch
 * restores it and replays the recurrence over the kept tokens, from the recorded pre-conv rows
 * and gates (batches of <= n_rollback tokens) or by recomputing those tokens (larger batches).
 * The replay runs the very same code on the very same inputs, so it is bit-exact. */
#ifndef BS_SESSION_H
#define BS_SESSION_H

#include "model/qwen35.h"
#include "io/threadpool.h"

struct bs_session {
    const bs_model *m;
    int n_ctx, n_batch, n_rollback, kv_type;
    bs_pool *pool;
    int n_past;
    unsigned loads;            /* resets and state loads so far (bs_session_loads) */

    /* recurrent state of GDN slot g, half h (0/1):
     *   conv window: conv + ((g*2 + h) * conv_sz), (conv_kernel-1) rows of conv_dim, oldest first
     *   SSM state:   ssm  + ((g*2 + h) * ssm_sz), per V head d_v rows of d_k (key index fastest) */
    float *conv, *ssm;
    size_t conv_sz, ssm_sz;
    int cur;
    bool no_undo;                 /* bs_session_set_undo(s, 0): one-token evals update half cur */
    bool in_place;                /* the batch being evaluated updates half cur (no flip) */
    int ahead_limit;              /* bs_session_ahead_limit: no step decoded ahead at or past it (0: none) */
    bool (*abort_cb)(void *ud);   /* bs_session_set_abort: asked before each batch of bs_eval */
    void *abort_ud;

    /* KV cache of attention slot a: k/v + a * n_ctx * kv_row bytes; rows of n_head_kv*head_dim */
    uint8_t *k, *v;
    size_t kv_row;                /* bytes per position */

    /* rollback: the last batch covered positions [rb_base, rb_base + rb_n) */
    int rb_base, rb_n;
    bool rb_recorded;             /* rb_rec holds that batch's GDN inputs */
    int32_t *rb_tokens;           /* [n_batch] */
    float *rb_rec;                /* [n_recurrent][n_rollback][conv_dim + 2*n_v_heads] */

    /* positions: KV row r holds a row whose successor sits at M-RoPE position pos_next[r]
     * (r + 1 for text only; an image of nx x ny rows advances it by max(nx, ny) in all) */
    int32_t *pos_next;            /* [n_ctx] */
    /* the last batch was image rows rb_img_i0.. of an rb_img_nx x rb_img_ny image: their
     * embeddings, kept for a rollback that recomputes (rb_tokens is unused then) */
    bool rb_img;
    int rb_img_nx, rb_img_ny, rb_img_i0;
    float *rb_embd;               /* [n_batch][n_embd], allocated with the first image */

    int *taps, n_taps;

    /* scratch, n_batch rows each */
    float *x;                     /* residual stream [n][n_embd] */
    float *xn;                    /* normed input of a mixer / FFN [n][n_embd] */
    float *y;                     /* output projection [n][n_embd] */
    float *a, *b, *c, *d;         /* projection buffers, widths wa..wd */
    float *gb;                    /* GDN gates [n][2*n_v_heads]: g then beta */
    float *rope;                  /* [n][n_rot] cos/sin pairs */
    float *scores;                /* per pool thread: [n_head][n_ctx] attention weights */
    float *qtmp;                  /* per pool thread: [head_dim] f16 row converted */
    size_t wa, wb, wc, wd;
    bs_vk_sess *vk;               /* the session on the device when the model runs there */
    bool taps_on_device;          /* its taps stay there (a drafter on the device reads them);
                                     the host's tap rows are then not written */
};

/* Float pointers into the state of GDN slot g, half h. */
static inline float *sess_conv(const bs_session *s, int g, int h) { return s->conv + ((size_t)g * 2 + h) * s->conv_sz; }
static inline float *sess_ssm(const bs_session *s, int g, int h) { return s->ssm + ((size_t)g * 2 + h) * s->ssm_sz; }
static inline float *sess_rec(const bs_session *s, int g) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    return s->rb_rec + (size_t)g * s->n_rollback * (size_t)(hp->conv_dim + 2 * hp->n_v_heads);
}

/* deltanet.c: one Gated DeltaNet mixer over n rows of s->xn; output in s->y. record: keep the
 * pre-conv rows and gates in the rollback record. */
void bs_deltanet_forward(bs_session *s, const bs_qwen35_layer *L, int n, bool record);
/* Rebuild GDN slot L->slot's state after the first n rows of the recorded last batch, from the
 * pre-batch half (used by rollback). */
void bs_deltanet_replay(bs_session *s, const bs_qwen35_layer *L, int n);
/* The part of bs_deltanet_forward between its input projections and ssm_out, for callers that
 * run the projections themselves (batch_eval.c: several sessions' rows in one matmul): rows
 * of mixed [n][conv_dim], z [n][n_v*d_v], alpha and beta [n][n_v] (both transformed in place);
 * the gated-normed output goes to s->d. */
void bs_deltanet_mix(bs_session *s, const bs_qwen35_layer *L, int n, bool record, float *mixed,
                     const float *z, float *alpha, float *beta);

/* attention.c: one gated attention mixer over n rows at positions n_past.. (KV rows written
 * first); rope holds the cos/sin tables of those positions; output in s->y. */
void bs_attention_forward(bs_session *s, const bs_qwen35_layer *L, int n);
/* Its part between the q/k/v projections (rows qg [n][2*H*D], kb/vb [n][Hkv*D]; qg and kb are
 * normed and roped in place) and wo: KV rows written, gated attention output in s->d. */
void bs_attention_mix(bs_session *s, const bs_qwen35_layer *L, int n, float *qg, float *kb,
                      const float *vb);

/* session.c: the bookkeeping around one batch of n tokens (bs_eval and bs_eval_multi alike).
 * begin: the tokens become what rollback can undo (none if the batch updates the state in
 * place); end: the half the recurrent layers wrote becomes current, n_past moves on. */
void bs_session_begin_batch(bs_session *s, const int32_t *tokens, int n);
/* The same for n image rows i0.. of an nx x ny image (embd: n rows of n_embd; it may be
 * s->rb_embd itself); -1 only if the embedding buffer cannot be allocated. */
int bs_session_begin_image(bs_session *s, const float *embd, int n, int nx, int ny, int i0);
/* After begin: the batch's input rows into x, their RoPE tables into s->rope and their
 * successors' positions into pos_next. */
void bs_session_batch_rows(bs_session *s, int n, float *x);
/* The bytes bs_session_state_save writes for a session holding n_past positions (what a saved
 * state of that length must be: the server's slot files check it before reading one). */
size_t bs_session_state_bytes(const bs_session *s, int n_past);
/* The M-RoPE position the next text token gets. */
static inline int sess_pos(const bs_session *s) { return s->n_past ? s->pos_next[s->n_past - 1] : 0; }
void bs_session_end_batch(bs_session *s, int n);

/* eval.c: bs_eval_image over rows i0..i0+n-1 of the image only (embd: those rows), for callers
 * that evaluate an image in chunks: a chunk with i0 > 0 must follow the image's previous rows. */
int bs_eval_image_rows(bs_session *s, const float *embd, int nx, int ny, int i0, int n, int logits_mode,
                       float *logits, float *taps);

/* eval.c: the lowest index of the largest of w[0..n), NaN never winning (the device's argmax). */
int32_t bs_argmax_lowest(const float *w, int n);
/* Greedy steps on a device decode the next one ahead (vulkan/vk_ahead.c) only at positions below
 * n_pos (0: no limit besides the context): a caller that knows it stops there (a token budget)
 * wastes no step. */
void bs_session_ahead_limit(bs_session *s, int n_pos);
/* The k best of w[0..n) as bs_eval_top gives them (on the CPU): their count. */
int bs_top_lowest(const float *w, int n, int k, int32_t *ids, float *vals);

/* forward.c: evaluate the n <= n_batch rows of the batch begun (validated), taps/logits at row
 * offset handled by the caller's pointers. */
void bs_forward_batch(bs_session *s, int n, bool record, int logits_mode,
                      float *logits, float *taps);

/* How many times the session was reset or had a state loaded (attempts included): a caller
 * that tracks what the session holds (the generator's prompt cache) notices a change it did not
 * make itself. */
unsigned bs_session_loads(const bs_session *s);

#endif
