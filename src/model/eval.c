/* eval.c: bs_eval (validation and splitting into batches of n_batch, the last of which is what
 * rollback can undo) and exact rollback: replaying the recurrence from the recorded inputs of
 * the last batch, or recomputing its kept tokens when it was too large to record. */
#include "model/session.h"
#include "model/device.h"
#include "model/batch_eval.h"
#include "io/util.h"

#include <stdlib.h>

/* What an eval feeds: tokens, or rows i0.. of an nx x ny image's embeddings. */
typedef struct rows_in {
    const int32_t *tokens;
    const float *embd;
    int nx, ny, i0;
} rows_in;

/* Evaluate in batches of n_batch; the last batch is what rollback can undo. */
static int eval_batches(bs_session *s, rows_in in, int n, int mode, float *logits, float *taps) {
    const size_t nv = (size_t)s->m->hp.n_vocab, tap_row = (size_t)s->n_taps * s->m->hp.n_embd;
    const size_t E = (size_t)s->m->hp.n_embd;
    for (int off = 0; off < n; off += s->n_batch) {
        const int c = BS_MIN(s->n_batch, n - off);
        const bool last = off + c == n;
        if (s->abort_cb && s->abort_cb(s->abort_ud)) return bs_error("evaluation aborted after %d of %d tokens", off, n);
        if (!in.embd) bs_session_begin_batch(s, in.tokens + off, c);
        else if (bs_session_begin_image(s, in.embd + (size_t)off * E, c, in.nx, in.ny, in.i0 + off)) return -1;
        int bm = mode == BS_LOGITS_ALL ? BS_LOGITS_ALL : (mode == BS_LOGITS_LAST && last ? BS_LOGITS_LAST : BS_LOGITS_NONE);
        float *bl = mode == BS_LOGITS_ALL ? logits + (size_t)off * nv : logits;
        bs_forward_batch(s, c, s->rb_recorded, bm, bl, taps ? taps + (size_t)off * tap_row : NULL);
    }
    return 0;
}

static int check_logits_args(int n, int logits_mode, const float *logits) {
    if (logits_mode < BS_LOGITS_NONE || logits_mode > BS_LOGITS_ALL) return bs_error("bs_eval: bad logits mode");
    if (logits_mode != BS_LOGITS_NONE && !logits) return bs_error("bs_eval: logits requested without a buffer");
    if (n == 0 && logits_mode != BS_LOGITS_NONE) return bs_error("bs_eval: logits of zero tokens");
    return 0;
}

int bs_eval_image_rows(bs_session *s, const float *embd, int nx, int ny, int i0, int n, int logits_mode,
                       float *logits, float *taps) {
    if (!embd || nx <= 0 || ny <= 0 || nx > s->n_ctx || ny > s->n_ctx) return bs_error("bs_eval_image: bad image rows");
    if (i0 < 0 || n < 0 || (int64_t)n > (int64_t)nx * ny - i0)
        return bs_error("bs_eval_image: rows %d..%d are not in a %dx%d image", i0, i0 + n, nx, ny);
    if (check_logits_args(n, logits_mode, logits)) return -1;
    if (n > s->n_ctx - s->n_past)
        return bs_error("an image of %d rows does not fit in the context: %d of %d positions are used", n, s->n_past,
                        s->n_ctx);
    if (n == 0) return 0;
    if (s->vk) return bs_device_eval_image(s, embd, nx, ny, i0, n, logits_mode, logits, s->n_taps ? taps : NULL);
    rows_in in = {NULL, embd, nx, ny, i0};
    return eval_batches(s, in, n, logits_mode, logits, s->n_taps ? taps : NULL);
}

int bs_eval_image(bs_session *s, const float *embd, int nx, int ny, int logits_mode, float *logits, float *taps) {
    if (nx <= 0 || ny <= 0 || nx > s->n_ctx || ny > s->n_ctx) return bs_error("bs_eval_image: bad image grid %dx%d", nx, ny);
    const int64_t rows = (int64_t)nx * ny;   /* (each side fits the context; their product may not) */
    if (rows > s->n_ctx - s->n_past)
        return bs_error("an image of %lld rows does not fit in the context: %d of %d positions are used", (long long)rows,
                        s->n_past, s->n_ctx);
    return bs_eval_image_rows(s, embd, nx, ny, 0, (int)rows, logits_mode, logits, taps);
}

/* n_tokens ids that fit in what is left of the context, each in the vocabulary. */
static int check_tokens(const bs_session *s, const int32_t *tokens, int n_tokens) {
    if (n_tokens > s->n_ctx - s->n_past)
        return bs_error("%d tokens do not fit in the context: %d of %d positions are used", n_tokens,
                        s->n_past, s->n_ctx);
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->hp.n_vocab)
            return bs_error("token id %d (at %d) is out of range [0, %d)", tokens[i], i, s->m->hp.n_vocab);
    return 0;
}

int bs_eval(bs_session *s, const int32_t *tokens, int n_tokens, int logits_mode, float *logits, float *taps) {
    if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return bs_error("bs_eval: bad token array");
    if (check_logits_args(n_tokens, logits_mode, logits)) return -1;
    if (n_tokens == 0) return 0;
    if (check_tokens(s, tokens, n_tokens)) return -1;
    if (s->vk && s->abort_cb && s->abort_cb(s->abort_ud)) return bs_error("evaluation aborted after 0 of %d tokens", n_tokens);
    if (s->vk) return bs_device_eval(s, tokens, n_tokens, logits_mode, logits, s->n_taps ? taps : NULL);
    rows_in in = {tokens, NULL, 0, 0, 0};
    return eval_batches(s, in, n_tokens, logits_mode, logits, s->n_taps ? taps : NULL);
}

/* The lowest index of the largest value, NaN never winning (0 for a row of NaN): the device's
 * argmax.comp, so a greedy step picks the same token on either backend. */
int32_t bs_argmax_lowest(const float *w, int n) {
    int32_t best = -1;
    for (int i = 0; i < n; i++)
        if (w[i] == w[i] && (best < 0 || w[i] > w[best])) best = i;
    return best < 0 ? 0 : best;
}

int bs_eval_top(bs_session *s, const int32_t *tokens, int n_tokens, int k, int32_t *ids, float *logits) {
    if (!ids || !logits) return bs_error("bs_eval_top: no place for the candidates");
    if (k < 1 || k > BS_TOP_MAX) return bs_error("bs_eval_top: k = %d (1..%d)", k, BS_TOP_MAX);
    if (n_tokens <= 0 || !tokens) return bs_error("bs_eval_top: no tokens");
    const int V = s->m->hp.n_vocab;
    if (!s->vk) {
        float *lg = bs_xmalloc(sizeof(float) * (size_t)V);
        const int rc = bs_eval(s, tokens, n_tokens, BS_LOGITS_LAST, lg, NULL);
        const int c = rc ? -1 : bs_top_lowest(lg, V, k, ids, logits);
        free(lg);
        return c;
    }
    if (check_tokens(s, tokens, n_tokens)) return -1;
    int got = 0;
    const bs_vk_out o = {.mode = BS_LOGITS_LAST, .top_k = k, .top_ids = ids, .top_vals = logits, .n_top = &got};
    return bs_device_eval_out(s, tokens, n_tokens, &o, NULL) ? -1 : got;
}

int bs_eval_top_drawn(bs_session *s, int32_t tok, const bs_draw *d, const double *u, int32_t *ids, float *logits) {
    if (!s->vk || d->top_k < 1 || d->top_k > BS_TOP_MAX) return bs_eval_top(s, &tok, 1, d->top_k, ids, logits);
    if (check_tokens(s, &tok, 1)) return -1;
    const float uf[2] = {(float)u[0], (float)u[1]};
    int got = 0;
    const bs_vk_out o = {.mode = BS_LOGITS_LAST, .top_k = d->top_k, .top_ids = ids, .top_vals = logits, .n_top = &got,
                         .draw = d, .u = uf};
    return bs_device_eval_out(s, &tok, 1, &o, NULL) ? -1 : got;
}

bool bs_seq_top_ok(const bs_batch_seq *q) {
    return q->top_k >= 0 && q->top_k <= BS_TOP_MAX &&
           (!q->top_k || (q->logits_mode != BS_LOGITS_NONE && !q->next && q->top_ids && q->top_logits && q->n_top));
}

static int seq_rows(const bs_batch_seq *q) {
    return q->logits_mode == BS_LOGITS_ALL ? q->n : q->logits_mode == BS_LOGITS_LAST;
}

void bs_seq_unset(const bs_batch_seq *q) {
    for (int r = 0; r < seq_rows(q); r++) {
        if (q->next) q->next[r] = -1;
        if (q->top_k) q->n_top[r] = -1;
    }
}

void bs_seq_from_rows(const bs_batch_seq *q) {
    const int V = q->s->m->hp.n_vocab;
    for (int r = 0; r < seq_rows(q); r++) {
        const float *row = q->logits + (size_t)r * V;
        if (q->next && q->next[r] < 0) q->next[r] = bs_argmax_lowest(row, V);
        if (q->top_k && q->n_top[r] < 0) {
            const size_t at = (size_t)r * (size_t)q->top_k;
            q->n_top[r] = bs_top_lowest(row, V, q->top_k, q->top_ids + at, q->top_logits + at);
        }
    }
}

int bs_eval_seq(const bs_batch_seq *q) {
    bs_session *s = q->s;
    const int rows = seq_rows(q);
    if (!bs_seq_top_ok(q))
        return bs_error("bad top-k request (1..%d of logits rows, with places for them)", BS_TOP_MAX);
    float *taps = s->n_taps ? q->taps : NULL;
    if (s->vk && rows && (q->next || q->top_k)) {   /* the ids or lists found on the device */
        if (q->n <= 0 || !q->tokens || check_logits_args(q->n, q->logits_mode, q->logits) || check_tokens(s, q->tokens, q->n))
            return bs_error_prefix("bs_eval_seq: ");
        if (s->abort_cb && s->abort_cb(s->abort_ud)) return bs_error("evaluation aborted after 0 of %d tokens", q->n);
        const bs_vk_out o = {.mode = q->logits_mode, .logits = q->logits, .next = q->next, .top_k = q->top_k,
                             .top_ids = q->top_ids, .top_vals = q->top_logits, .n_top = q->n_top};
        return bs_device_eval_out(s, q->tokens, q->n, &o, taps);
    }
    if (bs_eval(s, q->tokens, q->n, q->logits_mode, q->logits, taps)) return -1;
    bs_seq_unset(q);
    bs_seq_from_rows(q);
    return 0;
}

int bs_eval_greedy(bs_session *s, const int32_t *tokens, int n_tokens, int32_t *next, float *taps) {
    if (!next) return bs_error("bs_eval_greedy: no place for the token");
    if (n_tokens <= 0 || !tokens) return bs_error("bs_eval_greedy: no tokens");
    if (!s->vk) {
        float *lg = bs_xmalloc(sizeof(float) * (size_t)s->m->hp.n_vocab);
        const int rc = bs_eval(s, tokens, n_tokens, BS_LOGITS_LAST, lg, taps);
        if (!rc) *next = bs_argmax_lowest(lg, s->m->hp.n_vocab);
        free(lg);
        return rc;
    }
    if (check_tokens(s, tokens, n_tokens)) return -1;
    const bs_vk_out o = {.mode = BS_LOGITS_LAST, .next = next};
    return bs_device_eval_out(s, tokens, n_tokens, &o, s->n_taps ? taps : NULL);
}

int bs_session_rollback(bs_session *s, int n_keep) {
    if (n_keep < 0 || n_keep > s->n_past)
        return bs_error("cannot roll back to %d positions: %d are evaluated", n_keep, s->n_past);
    if (n_keep == s->n_past) return 0;
    if (n_keep == 0) { bs_session_reset(s); return 0; }
    if (s->rb_n == 0 || n_keep < s->rb_base)
        return bs_error("cannot roll back to %d positions: only the last batch (from position %d) can be undone",
                        n_keep, s->rb_base);
    const int j = n_keep - s->rb_base;
    if (s->vk) return bs_device_rollback(s, j);
    if (s->rb_recorded) {
        for (int il = 0; il < s->m->hp.n_layer; il++)
            if (s->m->layers[il].recurrent) bs_deltanet_replay(s, &s->m->layers[il], j);
        s->n_past = n_keep;
        s->rb_n = j;
        return 0;
    }
    /* batch too large to record: restore the state before it and recompute the kept rows (not
     * asking the abort callback: it is bs_eval's, and a rollback stopped half way would keep
     * neither the old positions nor the new) */
    rows_in in = {s->rb_tokens, s->rb_img ? s->rb_embd : NULL, s->rb_img_nx, s->rb_img_ny, s->rb_img_i0};
    s->cur = 1 - s->cur;
    s->n_past = s->rb_base;
    s->rb_n = 0;
    bool (*abort_cb)(void *) = s->abort_cb;
    s->abort_cb = NULL;
    const int rc = j > 0 ? eval_batches(s, in, j, BS_LOGITS_NONE, NULL, NULL) : 0;
    s->abort_cb = abort_cb;
    return rc;
}

