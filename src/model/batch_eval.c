/* batch_eval.c: several sessions through the qwen35 decoder in one pass (batch_eval.h).
 *
 * The layer loop mirrors bs_forward_batch (forward.c) operation for operation (same norms, same
 * residual adds in the same order, the same FFN), with the rows of all sequences stacked: row r
 * of the batch belongs to sequence q for r in [row0[q], row0[q] + n[q]). The mixers are split
 * around their projections (bs_deltanet_mix / bs_attention_mix) so that the projections are
 * batched too and only the recurrence / attention runs per session, on that session's scratch. */
#include "model/batch_eval.h"
#include "cpu/compute.h"
#include "model/session.h"
#include "model/device.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 256

struct bs_batch {
    const bs_model *m;
    bs_pool *pool;
    int max_rows, max_logit_rows;
    float *x, *xn, *y;         /* [rows][n_embd] */
    float *a, *b, *c, *d;      /* projection rows, widths wa..wd */
    float *alpha, *beta;       /* [rows][n_v_heads] */
    float *logits;             /* [rows][n_vocab] */
    size_t wa, wb, wc, wd;
    int row0[MAX_SEQS];
    bs_vk_batch *vk;           /* the shared rows on the device, for a model there */
};

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

static float *rows_alloc(int rows, size_t width) {
    uint64_t bytes;
    if (bs_mul_overflow((uint64_t)rows * width, sizeof(float), &bytes) || bytes > SIZE_MAX / 2) return NULL;
    return calloc((size_t)bytes ? (size_t)bytes : 1, 1);
}

bs_batch *bs_batch_new(const bs_model *m, int max_rows, int max_logit_rows, bs_pool *pool) {
    if (!m || max_rows < 1 || max_rows > 65536 || max_logit_rows < 1 || max_logit_rows > max_rows) {
        bs_error("batch: bad row count %d", max_rows);
        return NULL;
    }
    const bs_qwen35_hparams *hp = &m->hp;
    const size_t H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, ff = hp->n_ff;
    const size_t vdim = (size_t)hp->n_v_heads * hp->d_v, cd = hp->conv_dim, E = hp->n_embd;
    bs_batch *b = bs_xcalloc(1, sizeof *b);
    b->m = m;
    b->pool = pool;
    b->max_rows = max_rows;
    b->max_logit_rows = max_logit_rows;
    b->wa = zmax(zmax(cd, 2 * H * D), ff);
    b->wb = zmax(zmax(vdim, Hkv * D), ff);
    b->wc = Hkv * D;
    b->wd = zmax(vdim, H * D);
    if (!(b->x = rows_alloc(max_rows, E)) || !(b->xn = rows_alloc(max_rows, E)) ||
        !(b->y = rows_alloc(max_rows, E)) || !(b->a = rows_alloc(max_rows, b->wa)) ||
        !(b->b = rows_alloc(max_rows, b->wb)) || !(b->c = rows_alloc(max_rows, b->wc)) ||
        !(b->d = rows_alloc(max_rows, b->wd)) || !(b->alpha = rows_alloc(max_rows, hp->n_v_heads)) ||
        !(b->beta = rows_alloc(max_rows, hp->n_v_heads)) ||
        !(b->logits = rows_alloc(max_logit_rows, (size_t)hp->n_vocab))) {
        bs_batch_free(b);
        bs_error("batch: cannot allocate scratch for %d rows", max_rows);
        return NULL;
    }
    if (m->vk_net && !(b->vk = bs_vk_batch_new(m->vk_net, max_rows, max_logit_rows))) {
        bs_batch_free(b);
        return NULL;
    }
    return b;
}

void bs_batch_free(bs_batch *b) {
    if (!b) return;
    float *bufs[] = {b->x, b->xn, b->y, b->a, b->b, b->c, b->d, b->alpha, b->beta, b->logits};
    for (size_t i = 0; i < BS_ARRAY_LEN(bufs); i++) free(bufs[i]);
    bs_vk_batch_free(b->vk);
    free(b);
}

int bs_batch_max_rows(const bs_batch *b) { return b->max_rows; }

int bs_session_share_pool(bs_session *s, bs_pool *pool) {
    if (bs_pool_size(pool) > bs_pool_size(s->pool))
        return bs_error("a session made for %d threads cannot use a pool of %d", bs_pool_size(s->pool),
                        bs_pool_size(pool));
    if (s->pool != pool) bs_pool_free(s->pool);
    s->pool = pool;
    return 0;
}

void bs_session_unshare_pool(bs_session *s) { s->pool = NULL; }

static int validate(const bs_batch *b, const bs_batch_seq *q, int n_seq) {
    if (n_seq < 1 || n_seq > MAX_SEQS) return bs_error("batch: %d sequences (1..%d)", n_seq, MAX_SEQS);
    long rows = 0, logit_rows = 0;
    for (int i = 0; i < n_seq; i++) {
        const bs_session *s = q[i].s;
        if (!s || s->m != b->m) return bs_error("batch: sequence %d is not a session of this model", i);
        for (int j = 0; j < i; j++)
            if (q[j].s == s) return bs_error("batch: session given twice");
        if (q[i].n < 1 || q[i].n > s->n_batch || !q[i].tokens)
            return bs_error("batch: sequence %d has %d tokens (1..%d)", i, q[i].n, s->n_batch);
        if (q[i].n > s->n_ctx - s->n_past)
            return bs_error("%d tokens do not fit in the context: %d of %d positions are used", q[i].n,
                            s->n_past, s->n_ctx);
        if (q[i].logits_mode < BS_LOGITS_NONE || q[i].logits_mode > BS_LOGITS_ALL ||
            (q[i].logits_mode != BS_LOGITS_NONE && !q[i].logits))
            return bs_error("batch: bad logits request");
        if (!bs_seq_top_ok(&q[i]))
            return bs_error("batch: bad top-k request (1..%d of logits rows, with places for them)", BS_TOP_MAX);
        for (int t = 0; t < q[i].n; t++)
            if (q[i].tokens[t] < 0 || q[i].tokens[t] >= b->m->hp.n_vocab)
                return bs_error("token id %d is out of range [0, %d)", q[i].tokens[t], b->m->hp.n_vocab);
        rows += q[i].n;
        logit_rows += q[i].logits_mode == BS_LOGITS_ALL ? q[i].n : q[i].logits_mode == BS_LOGITS_LAST;
    }
    if (rows > b->max_rows || logit_rows > b->max_logit_rows)
        return bs_error("batch: %ld rows (%ld with logits) exceed the scratch of %d (%d)", rows, logit_rows,
                        b->max_rows, b->max_logit_rows);
    return 0;
}

static void norm_rows(float *dst, const float *src, const float *w, int n, int width, float eps) {
    for (int t = 0; t < n; t++)
        bs_rmsnorm(dst + (size_t)t * width, src + (size_t)t * width, w, width, eps);
}

static void add_rows(float *x, const float *y, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] = y[i] + x[i];
}

static void deltanet(bs_batch *b, const bs_qwen35_layer *L, const bs_batch_seq *q, int n_seq, int R) {
    const bs_qwen35_hparams *hp = &b->m->hp;
    const size_t cd = hp->conv_dim, nv = hp->n_v_heads, vdim = nv * hp->d_v;
    const bs_weight *in[4] = {&L->qkv, &L->gate, &L->beta, &L->alpha};
    float *out[4] = {b->a, b->b, b->beta, b->alpha};
    bs_matmul_group(in, 4, b->xn, R, out, b->pool);
    for (int i = 0; i < n_seq; i++) {
        bs_session *s = q[i].s;
        const size_t r0 = (size_t)b->row0[i];
        bs_deltanet_mix(s, L, q[i].n, s->rb_recorded, b->a + r0 * cd, b->b + r0 * vdim,
                        b->alpha + r0 * nv, b->beta + r0 * nv);
        memcpy(b->d + r0 * vdim, s->d, (size_t)q[i].n * vdim * sizeof(float));
    }
    bs_matmul(&L->ssm_out, b->d, R, b->y, b->pool);
}

static void attention(bs_batch *b, const bs_qwen35_layer *L, const bs_batch_seq *q, int n_seq, int R) {
    const bs_qwen35_hparams *hp = &b->m->hp;
    const size_t HD = (size_t)hp->n_head * hp->head_dim, kvw = (size_t)hp->n_head_kv * hp->head_dim;
    const bs_weight *in[3] = {&L->wq, &L->wk, &L->wv};
    float *out[3] = {b->a, b->b, b->c};
    bs_matmul_group(in, 3, b->xn, R, out, b->pool);
    for (int i = 0; i < n_seq; i++) {
        bs_session *s = q[i].s;
        const size_t r0 = (size_t)b->row0[i];
        bs_attention_mix(s, L, q[i].n, b->a + r0 * 2 * HD, b->b + r0 * kvw, b->c + r0 * kvw);
        memcpy(b->d + r0 * HD, s->d, (size_t)q[i].n * HD * sizeof(float));
    }
    bs_matmul(&L->wo, b->d, R, b->y, b->pool);
}

static void ffn(bs_batch *b, const bs_qwen35_layer *L, int R) {
    const size_t count = (size_t)R * b->m->hp.n_ff;
    const bs_weight *in[2] = {&L->ffn_gate, &L->ffn_up};
    float *out[2] = {b->a, b->b};
    bs_matmul_group(in, 2, b->xn, R, out, b->pool);
    bs_silu_mul(b->a, b->a, b->b, count);   /* as forward.c: the same bits */
    bs_matmul(&L->ffn_down, b->a, R, b->y, b->pool);
}

static void capture(const bs_batch *b, const bs_batch_seq *q, int i, int il) {
    const bs_session *s = q[i].s;
    const int E = b->m->hp.n_embd;
    const size_t row = (size_t)s->n_taps * E;
    for (int c = 0; c < s->n_taps; c++)
        if (s->taps[c] == il)
            for (int t = 0; t < q[i].n; t++)
                memcpy(q[i].taps + t * row + (size_t)c * E, b->x + ((size_t)b->row0[i] + t) * E,
                       (size_t)E * sizeof(float));
}

/* Final norm and LM head over the rows that want logits, in one matmul. */
static void logits(bs_batch *b, const bs_batch_seq *q, int n_seq) {
    const bs_qwen35_hparams *hp = &b->m->hp;
    const int E = hp->n_embd;
    const size_t V = (size_t)hp->n_vocab;
    int k = 0;
    for (int i = 0; i < n_seq; i++) {
        if (q[i].logits_mode == BS_LOGITS_NONE) continue;
        const int first = q[i].logits_mode == BS_LOGITS_ALL ? 0 : q[i].n - 1;
        for (int t = first; t < q[i].n; t++, k++)
            bs_rmsnorm(b->xn + (size_t)k * E, b->x + ((size_t)b->row0[i] + t) * E, b->m->output_norm, E, hp->eps);
    }
    if (!k) return;
    bs_matmul(&b->m->output, b->xn, k, b->logits, b->pool);
    k = 0;
    for (int i = 0; i < n_seq; i++) {
        if (q[i].logits_mode == BS_LOGITS_NONE) continue;
        const int rows = q[i].logits_mode == BS_LOGITS_ALL ? q[i].n : 1;
        memcpy(q[i].logits, b->logits + (size_t)k * V, (size_t)rows * V * sizeof(float));
        k += rows;
    }
}

/* The next piece of sequence q (done[i] rows of it evaluated) that fits a pass with `used`
 * rows (`lused` with logits) of b's: 0 rows when none fits. */
static int next_piece(const bs_vk_batch *vb, const bs_batch_seq *q, int done, bool snap, int used, int lused,
                      bs_vk_seq *v) {
    bs_session *s = q->s;
    const size_t V = (size_t)s->m->hp.n_vocab, tap_row = (size_t)s->n_taps * s->m->hp.n_embd;
    int m = BS_MIN(BS_MIN(bs_vk_sess_rows(s->vk), q->n - done), bs_vk_batch_rows(vb) - used);
    const int lroom = bs_vk_batch_logit_rows(vb) - lused;
    if (q->logits_mode == BS_LOGITS_ALL) m = BS_MIN(m, lroom);
    const bool all = q->logits_mode == BS_LOGITS_ALL;
    const int lr = all ? m : (q->logits_mode == BS_LOGITS_LAST && done + m == q->n);
    if (m <= 0 || lr > lroom) return 0;
    const size_t r0 = all ? (size_t)done : 0, k = (size_t)q->top_k;   /* the piece's first logits row */
    *v = (bs_vk_seq){.s = s->vk, .snapshot = snap && done == 0, .tokens = s->rb_tokens + done, .n = m,
                     .pos0 = s->n_past + done, .rope = s->rope + (size_t)done * s->m->hp.n_rot, .logit_rows = lr,
                     .logits = q->logits ? q->logits + r0 * V : NULL, .next = lr && q->next ? q->next + r0 : NULL,
                     .top_k = lr ? q->top_k : 0, .top_ids = q->top_k ? q->top_ids + r0 * k : NULL,
                     .top_logits = q->top_k ? q->top_logits + r0 * k : NULL, .n_top = q->top_k ? q->n_top + r0 : NULL,
                     .taps = s->taps, .n_taps = q->taps ? s->n_taps : 0,
                     .tap_out = q->taps && !s->taps_on_device ? q->taps + (size_t)done * tap_row : NULL};
    return m;
}

/* Passes of up to bs_vk_batch_seqs pieces (each at most a device submission's rows of one
 * sequence, in order) until every sequence is evaluated; a sequence's first piece takes its
 * rollback snapshot in the pass. */
static int eval_device(bs_vk_batch *vb, const bs_batch_seq *q, int n_seq) {
    int *done = bs_xcalloc((size_t)n_seq, sizeof *done), rc = 0;
    bool *snap = bs_xcalloc((size_t)n_seq, sizeof *snap);
    for (int i = 0; i < n_seq && !rc; i++) rc = bs_device_begin(q[i].s, q[i].tokens, q[i].n, &snap[i]);
    for (bool more = true; more && !rc;) {
        bs_vk_seq v[BS_VK_BATCH_SEQS];
        int idx[BS_VK_BATCH_SEQS], nv = 0, used = 0, lused = 0;
        const int max_seqs = bs_vk_batch_seqs(vb);
        for (int i = 0; i < n_seq && nv < max_seqs; i++) {
            if (done[i] == q[i].n) continue;
            const int m = next_piece(vb, &q[i], done[i], snap[i], used, lused, &v[nv]);
            if (!m) break;
            used += m;
            lused += v[nv].logit_rows;
            idx[nv++] = i;
        }
        /* (ids and lists the pass does not take stay -1: bs_eval_multi takes them from the rows) */
        if ((more = nv > 0) && !(rc = bs_vk_batch_eval(vb, v, nv)))
            for (int k = 0; k < nv; k++) done[idx[k]] += v[k].n;
    }
    for (int i = 0; i < n_seq && !rc; i++) bs_device_end(q[i].s, q[i].n);
    free(done);
    free(snap);
    return rc;
}

static int eval_rows(bs_batch *b, const bs_batch_seq *q, int n_seq);

int bs_eval_multi(bs_batch *b, const bs_batch_seq *q, int n_seq) {
    if (validate(b, q, n_seq)) return -1;
    for (int i = 0; i < n_seq; i++) bs_seq_unset(&q[i]);
    if (eval_rows(b, q, n_seq)) return -1;
    for (int i = 0; i < n_seq; i++) bs_seq_from_rows(&q[i]);   /* where the rows came back */
    return 0;
}

static int eval_rows(bs_batch *b, const bs_batch_seq *q, int n_seq) {
    /* sessions on the device: their rows through each weight product together there (one
     * alone takes bs_eval's recorded steps: the same bits) */
    if (b->vk && n_seq > 1) return eval_device(b->vk, q, n_seq);
    if (b->vk) return bs_eval_seq(&q[0]);   /* one alone: the ids or lists found on the device where asked */
    const bs_qwen35_hparams *hp = &b->m->hp;
    const int E = hp->n_embd;
    int R = 0;
    for (int i = 0; i < n_seq; i++) {
        bs_session *s = q[i].s;
        b->row0[i] = R;
        bs_session_begin_batch(s, q[i].tokens, q[i].n);   /* so rollback works as after bs_eval */
        bs_session_batch_rows(s, q[i].n, b->x + (size_t)R * E);
        R += q[i].n;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const bs_qwen35_layer *L = &b->m->layers[il];
        norm_rows(b->xn, b->x, L->attn_norm, R, E, hp->eps);
        if (L->recurrent) deltanet(b, L, q, n_seq, R);
        else attention(b, L, q, n_seq, R);
        add_rows(b->x, b->y, (size_t)R * E);
        norm_rows(b->xn, b->x, L->post_norm, R, E, hp->eps);
        ffn(b, L, R);
        add_rows(b->x, b->y, (size_t)R * E);
        for (int i = 0; i < n_seq; i++)
            if (q[i].taps && q[i].s->n_taps) capture(b, q, i, il);
    }
    for (int i = 0; i < n_seq; i++) bs_session_end_batch(q[i].s, q[i].n);
    logits(b, q, n_seq);
    return 0;
}
