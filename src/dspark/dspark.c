/* dspark.c: the DSpark drafter's forward pass (dspark.md §2-4; see dspark.h).
 *
 * Context rows never enter the residual stream: each only supplies K/V to every layer, through
 * that layer's own k/v projections and k-norm, RoPE'd at the row's absolute position. They are
 * projected once, when appended, and kept (f32) until cropped. The block attends to
 * [context ; block] with no mask at all.
 *
 * A context of a drafter uploaded to a Vulkan device (bs_dspark_to_device) keeps its K/V rows
 * there (vk_dspark.c runs the appends and blocks); only the bookkeeping below (positions,
 * crops, skips, the window) and the small heads stay on the host, which gets each block's
 * final states and base logits back. */
#include "dspark/dspark.h"
#include "cpu/compute.h"
#include "vulkan/backend.h"
#include "model/session.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

#define APPEND_CHUNK 64

struct bs_dspark_ctx {
    const bs_dspark *d;
    bs_pool *pool;
    int len;                     /* positions covered: the next row appended gets position len */
    int n_rows, cap, n_ctx_max;  /* rows held (fewer than len after bs_dspark_ctx_skip) */
    int *pos;                    /* [cap] position of each row, increasing */
    size_t kv_w;                 /* n_head_kv * head_dim */
    float **k, **v;              /* per layer: [cap][kv_w] context keys (normed, roped) / values */
    /* scratch */
    float *c;                    /* [APPEND_CHUNK][n_embd] fused context rows */
    float *kc, *vc;              /* [APPEND_CHUNK][kv_w] */
    float *rope;                 /* [max(APPEND_CHUNK, B)][head_dim] */
    float *x, *h, *q, *kb, *vb, *att, *f1, *f2;   /* block rows */
    float *scores;               /* [threads][BS_ATTN_MAX_GROUP][n_ctx_max + B] */
    float *qo;                   /* [threads][2][BS_ATTN_MAX_GROUP][head_dim] gathered queries, outputs */
    int n_threads;
    float *hidden;               /* [B][n_embd] final-normed block state */
    float *w1;                   /* [markov_rank] */
    float *logits, *bias;        /* [B][n_vocab], [n_vocab] */
    int block_pos;               /* position of the last block's anchor, -1 before any */
    int nb;                      /* slots of the last block (block_size unless shortened) */
    int window;                  /* > 0: the block attends to the last `window` context rows only */
    int n_logits;                /* slots of the last block whose base logits are in `logits` */
    bool logits_dev;             /* ... still only on the device (read on first use) */
    bool greedy_ahead;           /* device blocks take their greedy drafts in the same submission */
    int n_ahead;                 /* drafts of the last block taken so, its anchor's chain */
    int32_t ahead_anchor, ahead[BS_DSPARK_MAX_BLOCK];
    /* a sampled round's chain with the block (bs_dspark_ctx_sampled_ahead): its steps and
       uniforms (chain_on), then its lists and predicted drafts: n_chain slots from chain_anchor */
    bool chain_on;
    bs_draw chain_p;
    float chain_u[BS_DSPARK_MAX_BLOCK];
    int n_chain, n_chain_u;
    int32_t chain_anchor, chain_pred[BS_DSPARK_MAX_BLOCK], chain_ids[BS_DSPARK_MAX_BLOCK * BS_VK_TOP_MAX];
    float chain_vals[BS_DSPARK_MAX_BLOCK * BS_VK_TOP_MAX];
    int chain_n[BS_DSPARK_MAX_BLOCK];
    float *mb;                   /* scratch of blocks run together (bs_dspark_block_multi) */
    size_t mb_rows;              /* rows mb holds */
    bs_vk_dctx *vk;              /* the K/V rows on the device, or NULL: on the CPU */
};

/* The block rows one pass works on: one block's own scratch, or several blocks stacked. */
typedef struct blk_bufs {
    float *x, *h, *q, *kb, *vb, *att, *f1, *f2;
    float *lg;                   /* stacked blocks only: [R][n_vocab] base logits */
} blk_bufs;

static float *falloc(size_t n) { return bs_xcalloc(n ? n : 1, sizeof(float)); }

bs_dspark_ctx *bs_dspark_ctx_new(const bs_dspark *d, int n_ctx_max, bs_pool *pool) {
    const bs_dspark_hparams *hp = &d->hp;
    if (n_ctx_max < 1 || n_ctx_max > (1 << 24)) {
        bs_error("drafter context %d is out of range", n_ctx_max);
        return NULL;
    }
    bs_dspark_ctx *c = bs_xcalloc(1, sizeof *c);
    const size_t E = (size_t)hp->n_embd, B = (size_t)hp->block_size, D = (size_t)hp->head_dim;
    const size_t q = (size_t)hp->n_head * D, ff = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    c->d = d;
    c->pool = pool;
    c->n_ctx_max = n_ctx_max;
    c->kv_w = (size_t)hp->n_head_kv * D;
    c->k = bs_xcalloc((size_t)hp->n_layer, sizeof *c->k);
    c->v = bs_xcalloc((size_t)hp->n_layer, sizeof *c->v);
    c->c = falloc(APPEND_CHUNK * E);
    c->kc = falloc(APPEND_CHUNK * c->kv_w);
    c->vc = falloc(APPEND_CHUNK * c->kv_w);
    c->rope = falloc(BS_MAX(APPEND_CHUNK, B) * D);
    c->x = falloc(B * E);
    c->h = falloc(B * E);
    c->q = falloc(B * q);
    c->kb = falloc(B * c->kv_w);
    c->vb = falloc(B * c->kv_w);
    c->att = falloc(B * q);
    c->f1 = falloc(B * ff);
    c->f2 = falloc(B * ff);
    c->n_threads = bs_pool_size(pool);
    c->scores = falloc((size_t)c->n_threads * BS_ATTN_MAX_GROUP * ((size_t)n_ctx_max + B));
    c->qo = falloc((size_t)c->n_threads * 2 * BS_ATTN_MAX_GROUP * D);
    c->hidden = falloc(B * E);
    c->w1 = falloc((size_t)hp->markov_rank);
    c->logits = falloc(B * V);
    c->bias = falloc(V);
    c->block_pos = -1;
    /* a context the device cannot hold (e.g. its attention scratch passes one binding) runs on
     * the CPU: drafts are the same up to rounding, verified output is the same */
    if (bs_dspark_on_device(d) && !(c->vk = bs_dspark_dev_ctx_new(d, n_ctx_max))) {
        bs_log(1, "drafter: this context stays on the CPU (%s)\n", bs_last_error());
        bs_clear_error();
    }
    return c;
}

void bs_dspark_ctx_free(bs_dspark_ctx *c) {
    if (!c) return;
    if (c->vk && bs_dspark_dev_flush(c->d)) bs_log(1, "drafter: %s\n", bs_last_error());   /* (none may name it) */
    bs_vk_dctx_free(c->vk);
    for (int l = 0; l < c->d->hp.n_layer; l++) {
        free(c->k[l]);
        free(c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->pos);
    float *bufs[] = {c->c, c->kc, c->vc, c->rope, c->x, c->h, c->q, c->kb, c->vb, c->att,
                     c->f1, c->f2, c->scores, c->qo, c->hidden, c->w1, c->logits, c->bias, c->mb};
    for (size_t i = 0; i < BS_ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(c);
}

int bs_dspark_ctx_len(const bs_dspark_ctx *c) { return c->len; }
int bs_dspark_ctx_rows(const bs_dspark_ctx *c) { return c->n_rows; }
void bs_dspark_ctx_set_window(bs_dspark_ctx *c, int window) { c->window = window > 0 ? window : 0; }

void bs_dspark_ctx_crop(bs_dspark_ctx *c, int n) {
    if (n < 0 || n >= c->len) return;
    while (c->n_rows > 0 && c->pos[c->n_rows - 1] >= n) c->n_rows--;
    c->len = n;
}

int bs_dspark_ctx_skip(bs_dspark_ctx *c, int n) {
    if (n < 0 || n > c->n_ctx_max - c->len) return bs_error("drafter: cannot skip %d positions", n);
    c->len += n;
    return 0;
}

static void reserve(bs_dspark_ctx *c, int need) {
    if (need <= c->cap) return;
    int cap = c->cap ? c->cap : 256;
    while (cap < need) cap = cap > c->n_ctx_max / 2 ? c->n_ctx_max : cap * 2;
    /* block_size rows of slack: a block's keys and values sit after the context rows while the
     * block attends, so that both are one run */
    const size_t rows = (size_t)cap + (size_t)c->d->hp.block_size;
    for (int l = 0; l < c->d->hp.n_layer && !c->vk; l++) {
        c->k[l] = bs_xrealloc(c->k[l], rows * c->kv_w * sizeof(float));
        c->v[l] = bs_xrealloc(c->v[l], rows * c->kv_w * sizeof(float));
    }
    c->pos = bs_xrealloc(c->pos, (size_t)cap * sizeof *c->pos);
    c->cap = cap;
}

static void rope_rows(bs_dspark_ctx *c, int pos0, int n) {
    const bs_dspark_hparams *hp = &c->d->hp;
    for (int t = 0; t < n; t++)
        bs_rope_cache(c->rope + (size_t)t * hp->head_dim, pos0 + t, hp->head_dim, hp->rope_base, NULL);
}

/* Per-head RMSNorm with weight w, then NeoX RoPE with row t's table, over n rows of nh heads. */
static void norm_rope(const bs_dspark_ctx *c, float *rows, int n, int nh, const float *w) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const int D = hp->head_dim;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            float *v = rows + ((size_t)t * nh + h) * D;
            bs_rmsnorm(v, v, w, D, hp->eps);
            bs_rope_neox(v, c->rope + (size_t)t * D, D);
        }
}

static int append_chunk(bs_dspark_ctx *c, const float *taps, int n) {
    const bs_dspark *d = c->d;
    const bs_dspark_hparams *hp = &d->hp;
    const int E = hp->n_embd;
    if (c->vk) {
        rope_rows(c, c->len, n);
        if (bs_dspark_dev_flush(d) || bs_vk_dctx_append(c->vk, taps, n, c->n_rows, c->rope)) return -1;
        for (int t = 0; t < n; t++) c->pos[c->n_rows + t] = c->len + t;
        c->n_rows += n;
        c->len += n;
        return 0;
    }
    bs_matmul(&d->fc, taps, n, c->c, c->pool);
    for (int t = 0; t < n; t++) bs_rmsnorm(c->c + (size_t)t * E, c->c + (size_t)t * E, d->hidden_norm, E, hp->eps);
    rope_rows(c, c->len, n);
    for (int l = 0; l < hp->n_layer; l++) {
        const bs_dspark_layer *L = &d->layers[l];
        const bs_weight *in[2] = {&L->wk, &L->wv};
        float *out[2] = {c->kc, c->vc};
        bs_matmul_group(in, 2, c->c, n, out, c->pool);
        norm_rope(c, c->kc, n, hp->n_head_kv, L->k_norm);
        memcpy(c->k[l] + (size_t)c->n_rows * c->kv_w, c->kc, (size_t)n * c->kv_w * sizeof(float));
        memcpy(c->v[l] + (size_t)c->n_rows * c->kv_w, c->vc, (size_t)n * c->kv_w * sizeof(float));
    }
    for (int t = 0; t < n; t++) c->pos[c->n_rows + t] = c->len + t;
    c->n_rows += n;
    c->len += n;
    return 0;
}

int bs_dspark_ctx_append(bs_dspark_ctx *c, const float *taps, int n) {
    if (n < 0 || (n > 0 && !taps)) return bs_error("drafter: bad context rows");
    if (n > c->n_ctx_max - c->len)
        return bs_error("drafter context full: %d + %d rows > %d", c->len, n, c->n_ctx_max);
    reserve(c, c->n_rows + n);
    const size_t row = (size_t)c->d->hp.n_taps * c->d->hp.n_embd;
    for (int off = 0; off < n; off += APPEND_CHUNK)
        if (append_chunk(c, taps + (size_t)off * row, BS_MIN(APPEND_CHUNK, n - off))) return -1;
    return 0;
}

bool bs_dspark_ctx_on_device(const bs_dspark_ctx *c) { return c->vk != NULL; }

bool bs_dspark_ctx_link(bs_dspark_ctx *c, bs_session *s, int rows) {
    s->taps_on_device = c && s->vk && c->vk && rows <= bs_vk_sess_rows(s->vk);
    return s->taps_on_device;
}

int bs_dspark_ctx_append_from(bs_dspark_ctx *c, const bs_session *s, const float *taps, int n) {
    return s->taps_on_device ? bs_dspark_ctx_append_session(c, s->vk, n) : bs_dspark_ctx_append(c, taps, n);
}

int bs_dspark_ctx_append_session(bs_dspark_ctx *c, const bs_vk_sess *s, int n) {
    if (!c->vk) return bs_error("drafter: the context is not on the device");
    if (n < 0 || n > APPEND_CHUNK) return bs_error("drafter: %d tap rows at once from the device", n);
    if (n > c->n_ctx_max - c->len) return bs_error("drafter context full: %d + %d rows > %d", c->len, n, c->n_ctx_max);
    reserve(c, c->n_rows + n);
    rope_rows(c, c->len, n);
    if (bs_dspark_dev_append(c->d, c->vk, s, n, c->n_rows, c->rope, APPEND_CHUNK)) return -1;
    for (int t = 0; t < n; t++) c->pos[c->n_rows + t] = c->len + t;
    c->n_rows += n;
    c->len += n;
    return 0;
}

typedef struct { const bs_dspark_ctx *c; const float *q; float *att; int l, first, n; } attend_job;

/* Work units: (KV head, up to BS_ATTN_MAX_GROUP of the block's queries on it, over all block
 * rows). A unit reads the KV head's run once for all its queries (attn_simd), which matters once
 * the context outgrows the caches; each query is computed the same way whatever the split, so
 * the result depends on neither the thread count nor the grouping. */
static void attend_all(void *ud, int ith, int nth) {
    const attend_job *j = ud;
    const bs_dspark_ctx *c = j->c;
    const bs_dspark_hparams *hp = &c->d->hp;
    const int H = hp->n_head, D = hp->head_dim, KV = hp->n_head_kv, G = H / KV, n = j->n;
    const int nq = c->nb * G, parts = (nq + BS_ATTN_MAX_GROUP - 1) / BS_ATTN_MAX_GROUP;
    const size_t w = c->kv_w;
    int64_t lo, hi;
    bs_pool_split((int64_t)KV * parts, 1, ith, nth, &lo, &hi);
    float *scores = c->scores + (size_t)ith * BS_ATTN_MAX_GROUP * ((size_t)c->n_ctx_max + hp->block_size);
    float *qb = c->qo + (size_t)ith * 2 * BS_ATTN_MAX_GROUP * D, *ob = qb + (size_t)BS_ATTN_MAX_GROUP * D;
    for (int64_t u = lo; u < hi; u++) {
        const int kvh = (int)(u / parts), q0 = (int)(u % parts) * BS_ATTN_MAX_GROUP;
        const int gn = BS_MIN(BS_ATTN_MAX_GROUP, nq - q0);
        size_t at[BS_ATTN_MAX_GROUP];   /* query i of the unit: block row t, head kvh * G + g */
        int nkv[BS_ATTN_MAX_GROUP];
        for (int i = 0; i < gn; i++) {
            nkv[i] = n;
            const int t = (q0 + i) / G, g = (q0 + i) % G;
            at[i] = ((size_t)t * H + (size_t)kvh * G + g) * D;
            memcpy(qb + (size_t)i * D, j->q + at[i], (size_t)D * sizeof(float));
        }
        const float *kc = c->k[j->l] + (size_t)j->first * w + (size_t)kvh * D;
        const float *vc = c->v[j->l] + (size_t)j->first * w + (size_t)kvh * D;
        bs_attn_queries(qb, gn, nkv, kc, vc, w * sizeof(float), false, D, ob, scores, (size_t)n, NULL);
        for (int i = 0; i < gn; i++) memcpy(j->att + at[i], ob + (size_t)i * D, (size_t)D * sizeof(float));
    }
}

/* Attention of block i (rows row0.. of the stacked buffers) to [its context ; its block]. */
static void attend_block(bs_dspark_ctx *c, const blk_bufs *b, int row0, int l) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const int B = c->nb, H = hp->n_head;
    float *q = b->q + (size_t)row0 * H * hp->head_dim;
    const float *kb = b->kb + (size_t)row0 * c->kv_w, *vb = b->vb + (size_t)row0 * c->kv_w;
    norm_rope(c, q, B, H, c->d->layers[l].q_norm);
    /* the block's keys / values in the slack after the context rows: [window of context ; block] */
    float *k = c->k[l] + (size_t)c->n_rows * c->kv_w, *v = c->v[l] + (size_t)c->n_rows * c->kv_w;
    memcpy(k, kb, (size_t)B * c->kv_w * sizeof(float));
    memcpy(v, vb, (size_t)B * c->kv_w * sizeof(float));
    norm_rope(c, k, B, hp->n_head_kv, c->d->layers[l].k_norm);
    const int first = c->window > 0 && c->n_rows > c->window ? c->n_rows - c->window : 0;
    attend_job job = {c, q, b->att + (size_t)row0 * H * hp->head_dim, l, first, c->n_rows - first + B};
    bs_pool_run(c->pool, attend_all, &job);
}

/* Layer l over R stacked rows of n blocks: every matrix product is one pass over the weights for
 * all of them; only attention is per block (each has its own context). */
static void layer_forward(bs_dspark_ctx *const *cs, const int *row0, int n, int R, const blk_bufs *b, int l) {
    const bs_dspark *d = cs[0]->d;
    const bs_dspark_hparams *hp = &d->hp;
    const bs_dspark_layer *L = &d->layers[l];
    const int E = hp->n_embd;
    bs_pool *pool = cs[0]->pool;
    for (int t = 0; t < R; t++) bs_rmsnorm(b->h + (size_t)t * E, b->x + (size_t)t * E, L->attn_norm, E, hp->eps);
    const bs_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {b->q, b->kb, b->vb};
    bs_matmul_group(qkv, 3, b->h, R, qkv_out, pool);
    for (int i = 0; i < n; i++) attend_block(cs[i], b, row0[i], l);
    bs_matmul(&L->wo, b->att, R, b->h, pool);
    for (size_t i = 0; i < (size_t)R * E; i++) b->x[i] += b->h[i];

    for (int t = 0; t < R; t++) bs_rmsnorm(b->h + (size_t)t * E, b->x + (size_t)t * E, L->ffn_norm, E, hp->eps);
    const bs_weight *ffn[2] = {&L->gate, &L->up};
    float *ffn_out[2] = {b->f1, b->f2};
    bs_matmul_group(ffn, 2, b->h, R, ffn_out, pool);
    for (size_t i = 0; i < (size_t)R * hp->n_ff; i++) b->f1[i] = bs_silu(b->f1[i]) * b->f2[i];
    bs_matmul(&L->down, b->f1, R, b->h, pool);
    for (size_t i = 0; i < (size_t)R * E; i++) b->x[i] += b->h[i];
}

/* A block's checks and bookkeeping, and its rope table. */
static int block_begin(bs_dspark_ctx *c, int32_t anchor, int pos, int n_slots) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const int B = n_slots;
    if (n_slots < 1 || n_slots > hp->block_size) return bs_error("drafter: %d block slots (1..%d)", n_slots, hp->block_size);
    if (anchor < 0 || anchor >= hp->n_vocab) return bs_error("drafter: anchor id %d is out of range", anchor);
    if (pos < c->len || pos > INT32_MAX - B) return bs_error("drafter: block position %d overlaps the context (%d positions)", pos, c->len);
    rope_rows(c, pos, B);
    c->nb = B;
    c->block_pos = pos;
    c->n_logits = 0;
    c->logits_dev = false;
    c->n_ahead = 0;
    c->n_chain = 0;
    return 0;
}

/* Blocks on the device, as many a submission as it takes (bs_vk_dctx_blocks: up to
 * BS_VK_DRAFT_BLOCKS): every slot's state comes back; the base logits stay there until read
 * (greedy drafts are taken there: bs_dspark_draft_greedy). */
static int blocks_device(bs_dspark_ctx *const *cs, const int32_t *anchors, const int *pos, const int *n_slots, int n) {
    const int max = BS_MIN(bs_dspark_dev_max_blocks(cs[0]->d), (int)BS_VK_DRAFT_BLOCKS);
    if (n > max)
        return blocks_device(cs, anchors, pos, n_slots, max) ||
               blocks_device(cs + max, anchors + max, pos + max, n_slots + max, n - max);
    if (bs_dspark_dev_flush(cs[0]->d)) return -1;   /* the blocks read the contexts' rows */
    bs_vk_dblock b[BS_VK_DRAFT_BLOCKS] = {{0}};
    bs_vk_chain ch[BS_VK_DRAFT_BLOCKS];
    memset(ch, 0, sizeof ch);
    const bool host = bs_env_flag("BITSPARK_VK_DRAFT_HOST");
    for (int i = 0; i < n; i++) {
        bs_dspark_ctx *c = cs[i];
        if (block_begin(c, anchors[i], pos[i], n_slots[i])) return -1;
        const int first = c->window > 0 && c->n_rows > c->window ? c->n_rows - c->window : 0;
        b[i] = (bs_vk_dblock){c->vk, anchors[i], n_slots[i], first, c->n_rows - first, c->rope, c->hidden, n_slots[i], NULL, NULL};
        if (c->greedy_ahead && !host) b[i].drafts = c->ahead;
        else if (c->chain_on && c->n_chain_u >= n_slots[i] && !host && !bs_env_flag("BITSPARK_VK_NO_CHAIN")) {
            ch[i] = (bs_vk_chain){c->chain_p, c->chain_u, c->chain_pred, c->chain_ids, c->chain_vals, c->chain_n, 0};
            b[i].chain = &ch[i];
        }
    }
    if (bs_vk_dctx_blocks(b, n, cs[0]->d->hp.mask_id)) return -1;
    for (int i = 0; i < n; i++) {
        cs[i]->n_logits = n_slots[i];
        cs[i]->logits_dev = true;
        cs[i]->n_ahead = b[i].drafts && b[i].drafts[0] >= 0 ? n_slots[i] : 0;
        cs[i]->ahead_anchor = anchors[i];
        cs[i]->n_chain = ch[i].done ? n_slots[i] : 0;
        cs[i]->chain_anchor = anchors[i];
    }
    return 0;
}

void bs_dspark_ctx_greedy_ahead(bs_dspark_ctx *c, bool on) { c->greedy_ahead = on; }

void bs_dspark_ctx_sampled_ahead(bs_dspark_ctx *c, const bs_draw *p, const double *u, int n) {
    c->chain_on = p && n > 0 && p->top_k >= 1 && p->top_k <= BS_VK_TOP_MAX;
    c->n_chain_u = c->chain_on ? BS_MIN(n, BS_DSPARK_MAX_BLOCK) : 0;
    if (!c->chain_on) return;
    c->chain_p = *p;
    for (int k = 0; k < c->n_chain_u; k++) c->chain_u[k] = (float)u[k];
}

/* Input rows of one block into x: [anchor, mask...] embeddings (+ log-SNR addends). */
static int block_input(bs_dspark_ctx *c, int32_t anchor, int pos, int n_slots, float *x) {
    const bs_dspark *d = c->d;
    const bs_dspark_hparams *hp = &d->hp;
    const int B = n_slots, E = hp->n_embd;
    if (block_begin(c, anchor, pos, n_slots)) return -1;
    int32_t ids[BS_DSPARK_MAX_BLOCK];
    ids[0] = anchor;
    for (int t = 1; t < B; t++) ids[t] = hp->mask_id;
    if (bs_get_rows(&d->tok_embd, ids, B, x)) return -1;
    if (d->snr_anchor)
        for (int t = 0; t < B; t++) {
            const float *a = t == 0 ? d->snr_anchor : d->snr_mask;
            for (int i = 0; i < E; i++) x[(size_t)t * E + i] += a[i];
        }
    return 0;
}

/* Stacked buffers for R rows in c's multi-block scratch. */
static blk_bufs multi_bufs(bs_dspark_ctx *c, size_t R) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const size_t E = (size_t)hp->n_embd, q = (size_t)hp->n_head * hp->head_dim, ff = (size_t)hp->n_ff;
    const size_t per_row = 2 * E + 2 * q + 2 * c->kv_w + 2 * ff + (size_t)hp->n_vocab;
    if (R > c->mb_rows) {
        free(c->mb);
        c->mb = falloc(R * per_row);
        c->mb_rows = R;
    }
    float *p = c->mb;
    blk_bufs b;
    b.x = p, p += R * E;
    b.h = p, p += R * E;
    b.q = p, p += R * q;
    b.att = p, p += R * q;
    b.kb = p, p += R * c->kv_w;
    b.vb = p, p += R * c->kv_w;
    b.f1 = p, p += R * ff;
    b.f2 = p, p += R * ff;
    b.lg = p;
    return b;
}

int bs_dspark_block(bs_dspark_ctx *c, int32_t anchor, int pos) {
    return bs_dspark_block_n(c, anchor, pos, c->d->hp.block_size);
}

int bs_dspark_block_n(bs_dspark_ctx *c, int32_t anchor, int pos, int n_slots) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const int E = hp->n_embd;
    if (c->vk) return blocks_device(&c, &anchor, &pos, &n_slots, 1);
    if (block_input(c, anchor, pos, n_slots, c->x)) return -1;
    const blk_bufs b = {c->x, c->h, c->q, c->kb, c->vb, c->att, c->f1, c->f2, NULL};
    const int row0 = 0;
    for (int l = 0; l < hp->n_layer; l++) layer_forward(&c, &row0, 1, n_slots, &b, l);
    for (int t = 0; t < n_slots; t++) bs_rmsnorm(c->hidden + (size_t)t * E, c->x + (size_t)t * E, c->d->output_norm, E, hp->eps);
    return 0;
}

int bs_dspark_block_multi(bs_dspark_ctx *const *cs, const int32_t *anchors, const int *pos, const int *n_slots, int n) {
    if (n < 1) return 0;
    if (n > BS_DSPARK_MAX_MULTI) return bs_error("drafter: %d blocks at once (at most %d)", n, BS_DSPARK_MAX_MULTI);
    const bs_dspark *d = cs[0]->d;
    const bs_dspark_hparams *hp = &d->hp;
    const int E = hp->n_embd, V = hp->n_vocab;
    int row0[BS_DSPARK_MAX_MULTI], R = 0;
    for (int i = 0; i < n; i++) {
        if (cs[i]->d != d) return bs_error("drafter: blocks of different drafters cannot run together");
        for (int j = 0; j < i; j++)
            if (cs[j] == cs[i]) return bs_error("drafter: one context twice in a batch of blocks");
        row0[i] = R;
        R += BS_MAX(n_slots[i], 0);
    }
    /* on the device: one block after another in one submission, the rows left there */
    if (cs[0]->vk) return blocks_device(cs, anchors, pos, n_slots, n);
    blk_bufs b = multi_bufs(cs[0], (size_t)R);
    for (int i = 0; i < n; i++)
        if (block_input(cs[i], anchors[i], pos[i], n_slots[i], b.x + (size_t)row0[i] * E)) return -1;
    for (int l = 0; l < hp->n_layer; l++) layer_forward(cs, row0, n, R, &b, l);
    for (int t = 0; t < R; t++) bs_rmsnorm(b.h + (size_t)t * E, b.x + (size_t)t * E, d->output_norm, E, hp->eps);
    /* base logits of every slot in one pass over the LM head (the largest matrix) */
    bs_matmul(&d->output, b.h, R, b.lg, cs[0]->pool);
    for (int i = 0; i < n; i++) {
        bs_dspark_ctx *c = cs[i];
        memcpy(c->hidden, b.h + (size_t)row0[i] * E, (size_t)c->nb * E * sizeof(float));
        memcpy(c->logits, b.lg + (size_t)row0[i] * V, (size_t)c->nb * V * sizeof(float));
        c->n_logits = c->nb;
    }
    return 0;
}

const float *bs_dspark_hidden(const bs_dspark_ctx *c, int slot) {
    return c->hidden + (size_t)slot * c->d->hp.n_embd;
}

void bs_dspark_logits(bs_dspark_ctx *c, int first, int n, float *logits) {
    const size_t V = (size_t)c->d->hp.n_vocab;
    if (c->logits_dev) {   /* the block's rows, from the device on first use (else computed below) */
        c->logits_dev = false;
        if (bs_vk_dctx_logits(c->vk, 0, c->n_logits, c->logits)) c->n_logits = 0;
    }
    if (first + n <= c->n_logits) {   /* computed with the block, or with other blocks (bs_dspark_block_multi) */
        if (logits != c->logits + (size_t)first * V) memcpy(logits, c->logits + (size_t)first * V, (size_t)n * V * sizeof(float));
        return;
    }
    bs_matmul(&c->d->output, c->hidden + (size_t)first * c->d->hp.n_embd, n, logits, c->pool);
}

void bs_dspark_markov_bias(bs_dspark_ctx *c, int32_t prev, float *bias) {
    const bs_dspark *d = c->d;
    if (d->hp.markov_rank == 0) {
        memset(bias, 0, (size_t)d->hp.n_vocab * sizeof(float));
        return;
    }
    bs_get_rows(&d->markov_a, &prev, 1, c->w1);
    bs_matmul(&d->markov_b, c->w1, 1, bias, c->pool);
}

float bs_dspark_confidence(bs_dspark_ctx *c, int slot, int32_t prev) {
    const bs_dspark *d = c->d;
    const int E = d->hp.n_embd, R = d->hp.markov_rank;
    if (!d->conf_w) return -1.0f;
    const float *h = bs_dspark_hidden(c, slot);
    double z = d->conf_b;
    for (int i = 0; i < E; i++) z += (double)d->conf_w[i] * h[i];
    if (d->hp.conf_with_markov && R > 0) {
        bs_get_rows(&d->markov_a, &prev, 1, c->w1);
        for (int r = 0; r < R; r++) z += (double)d->conf_w[E + r] * c->w1[r];
    }
    return (float)(1.0 / (1.0 + exp(-z)));
}

/* The greedy drafts taken on the device from the block's rows there (BITSPARK_VK_DRAFT_HOST=1
 * reads the rows back and takes them here: comparisons); false where they cannot be. */
static bool draft_greedy_device(bs_dspark_ctx *c, int32_t anchor, int n, int32_t *drafts, float *conf) {
    if (!c->logits_dev || n > c->n_logits || bs_env_flag("BITSPARK_VK_DRAFT_HOST")) return false;
    if (n <= c->n_ahead && anchor == c->ahead_anchor)   /* taken with the block */
        memcpy(drafts, c->ahead, (size_t)n * sizeof *drafts);
    else if (bs_vk_dctx_draft_greedy(c->vk, anchor, c->d->hp.mask_id, n, drafts)) {
        bs_log(1, "drafter: greedy drafts on the host (%s)\n", bs_last_error());
        bs_clear_error();
        return false;
    }
    for (int k = 0; k < n && conf; k++) conf[k] = bs_dspark_confidence(c, k, k ? drafts[k - 1] : anchor);
    return true;
}

int bs_dspark_slot_top(bs_dspark_ctx *c, int slot, int32_t prev, int k, int32_t *ids, float *vals) {
    if (!c->logits_dev || slot >= c->n_logits || bs_env_flag("BITSPARK_VK_DRAFT_HOST")) return 0;
    const int n = bs_vk_dctx_slot_top(c->vk, slot, prev, c->d->hp.mask_id, k, ids, vals);
    if (n < 0) {
        bs_log(1, "drafter: sampled drafts from the rows (%s)\n", bs_last_error());
        bs_clear_error();
        return 0;
    }
    return n;
}

int bs_dspark_draft_sampled(bs_dspark_ctx *c, int32_t anchor, int n, const bs_draw *p, const double *u,
                            int32_t *pred, int32_t *ids, float *vals, int *counts) {
    if (!c->logits_dev || n < 1 || n > c->n_logits || bs_env_flag("BITSPARK_VK_DRAFT_HOST") ||
        bs_env_flag("BITSPARK_VK_NO_CHAIN"))
        return 0;
    float uf[BS_DSPARK_MAX_BLOCK];
    for (int k = 0; k < n; k++) uf[k] = (float)u[k];
    if (n <= c->n_chain && anchor == c->chain_anchor && !memcmp(p, &c->chain_p, sizeof *p) &&
        !memcmp(uf, c->chain_u, sizeof *uf * (size_t)n)) {   /* run with the block */
        memcpy(pred, c->chain_pred, sizeof *pred * (size_t)n);
        memcpy(counts, c->chain_n, sizeof *counts * (size_t)n);
        memcpy(ids, c->chain_ids, sizeof *ids * (size_t)n * (size_t)p->top_k);
        memcpy(vals, c->chain_vals, sizeof *vals * (size_t)n * (size_t)p->top_k);
        return n;
    }
    if (bs_vk_dctx_draft_sampled(c->vk, anchor, c->d->hp.mask_id, n, p, uf, pred, ids, vals, counts)) {
        bs_log(1, "drafter: sampled drafts a slot at a time (%s)\n", bs_last_error());
        bs_clear_error();
        return 0;
    }
    return n;
}

void bs_dspark_draft_greedy(bs_dspark_ctx *c, int32_t anchor, int n, int32_t *drafts, float *conf) {
    const bs_dspark_hparams *hp = &c->d->hp;
    const int V = hp->n_vocab;
    if (n <= 0 || draft_greedy_device(c, anchor, n, drafts, conf)) return;
    bs_dspark_logits(c, 0, n, c->logits);
    int32_t prev = anchor;
    for (int k = 0; k < n; k++) {
        const float *u = c->logits + (size_t)k * V;
        bs_dspark_markov_bias(c, prev, c->bias);
        int32_t best = -1;
        float bv = -INFINITY;
        for (int v = 0; v < V; v++) {
            if (v == hp->mask_id) continue;
            const float s = u[v] + c->bias[v];
            if (best < 0 || s > bv) { best = v; bv = s; }
        }
        if (conf) conf[k] = bs_dspark_confidence(c, k, prev);
        drafts[k] = best;
        prev = best;
    }
}
