/* vk_dspark.c: the DSpark drafter's forward on the device (the CPU path's dspark.c, step for
 * step). Context rows: fc over the tap rows, hidden RMSNorm, then each layer's k/v products,
 * per-head k-norm and NeoX RoPE, kept as F32 rows per layer. The block: embeddings of
 * [anchor, mask...] plus the log-SNR addends, per layer RMSNorm, q/k/v products, q/k norms and
 * RoPE, attention to [context ; block] with no mask, output product, residual, SwiGLU FFN,
 * then the final norm and the LM head. Per block only the anchor and the rope table go up and
 * the final states (for the Markov and confidence heads, which are small) and the base logits
 * of the slots asked for come back. The blocks of several contexts in one submission run their
 * layers as one over all their rows (record_group), the attention a block at a time. */
#include "vulkan/vk_dspark_int.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

/* The widest product input: the taps (fc), the FFN (down) or the heads (wo). */
static size_t widest(const bs_vk_dspark_desc *hp) {
    return zmax(zmax((size_t)hp->n_taps * hp->n_embd, (size_t)hp->n_ff), (size_t)hp->n_head * hp->head_dim);
}

void dl_rows_free(bs_vk_ctx *c, dl_rows *r) {
    bs_vk_buf *bs[] = {&r->x, &r->h, &r->q, &r->kb, &r->vb, &r->att, &r->f1, &r->f2, &r->aq, &r->as, &r->am,
                       &r->xr, &r->aq2, &r->as2, &r->am2, &r->ncnt};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
}

/* Rows for R rows of the drafter's layers. */
int dl_rows_new(bs_vk_ctx *c, const bs_vk_dspark_desc *hp, dl_rows *r, size_t R) {
    const size_t E = (size_t)hp->n_embd, HD = (size_t)hp->n_head * hp->head_dim, ff = (size_t)hp->n_ff;
    const size_t kv_w = (size_t)hp->n_head_kv * hp->head_dim, wq = widest(hp);
    return bs_vk_buf_new(c, &r->x, 4 * R * E, false) || bs_vk_buf_new(c, &r->h, 4 * R * E, false) ||
           bs_vk_buf_new(c, &r->q, 4 * R * HD, false) || bs_vk_buf_new(c, &r->kb, 4 * R * kv_w, false) ||
           bs_vk_buf_new(c, &r->vb, 4 * R * kv_w, false) || bs_vk_buf_new(c, &r->att, 4 * R * HD, false) ||
           bs_vk_buf_new(c, &r->f1, 4 * R * ff, false) || bs_vk_buf_new(c, &r->f2, 4 * R * ff, false) ||
           bs_vk_buf_new(c, &r->aq, R * wq, false) || bs_vk_buf_new(c, &r->as, R * wq / 8 + 4, false) ||
           bs_vk_buf_new(c, &r->am, R * wq / 8 + 4, false) || bs_vk_buf_new(c, &r->xr, 4 * R * wq, false) ||
           bs_vk_buf_new(c, &r->aq2, R * ff, false) || bs_vk_buf_new(c, &r->as2, R * ff / 8 + 4, false) ||
           bs_vk_buf_new(c, &r->am2, R * ff / 8 + 4, false) || bs_vk_counters_new(c, &r->ncnt, 64)
               ? -1
               : 0;
}

static int upload_layer(bs_vk_dspark *d, dl_layer *L, const bs_vk_dspark_layer_desc *s) {
    bs_vk_ctx *c = d->c;
    const size_t E = (size_t)d->hp.n_embd, D = (size_t)d->hp.head_dim;
    /* wq, wk and wv read the same normed rows: one layout where they share an integer format,
       so the block's three products are one dispatch and the append's k and v (a run of it)
       another (record_qkv) */
    const bs_vk_tensor *t[3] = {&s->wq, &s->wk, &s->wv};
    bs_vk_matrix **m[3] = {&L->wq, &L->wk, &L->wv};
    return bs_vk_upload_inputs(c, &L->qkv, t, m, 3) || bs_vk_upload_mat(c, &L->wo, &s->wo) || bs_vk_upload_mat(c, &L->gate, &s->gate) || bs_vk_upload_mat(c, &L->up, &s->up) ||
           bs_vk_upload_mat(c, &L->down, &s->down) || bs_vk_upload_vec(c, &L->attn_norm, s->attn_norm, E) ||
           bs_vk_upload_vec(c, &L->ffn_norm, s->ffn_norm, E) || bs_vk_upload_vec(c, &L->q_norm, s->q_norm, D) ||
           bs_vk_upload_vec(c, &L->k_norm, s->k_norm, D) ? -1 : 0;
}

/* The log-SNR addends as the block's rows: the anchor's, then the mask's for every other slot. */
static int upload_snr(bs_vk_dspark *d, const bs_vk_dspark_desc *s) {
    const size_t E = (size_t)s->n_embd, B = (size_t)s->block_size;
    float *rows = bs_xmalloc(B * E * sizeof *rows);
    for (size_t t = 0; t < B; t++) memcpy(rows + t * E, t ? s->snr_mask : s->snr_anchor, E * sizeof *rows);
    const int rc = bs_vk_upload_vec(d->c, &d->snr, rows, B * E);
    free(rows);
    d->snr_on = rc == 0;
    return rc;
}

bs_vk_dspark *bs_vk_dspark_new(bs_vk_ctx *c, const bs_vk_dspark_desc *s) {
    if (s->head_dim > MAX_HEAD_DIM || s->head_dim % 2 || s->n_head_kv < 1 || s->n_head % s->n_head_kv ||
        s->block_size < 1 || ((s->share_embd || s->share_output) && !s->share)) {
        bs_error("Vulkan drafter: the kernels do not take this shape (head dim %d, %d/%d heads)", s->head_dim, s->n_head,
                 s->n_head_kv);
        return NULL;
    }
    bs_vk_dspark *d = bs_xcalloc(1, sizeof *d);
    d->c = c;
    d->hp = *s;
    d->hp.layers = NULL;
    d->hp.share = NULL;
    d->L = bs_xcalloc((size_t)s->n_layer, sizeof *d->L);
    const char *ch = getenv("BITSPARK_VK_ATTN_CHUNK");
    d->attn_chunk = ch && atoi(ch) > 0 ? atoi(ch) : 256;
    d->no_split = bs_env_flag("BITSPARK_VK_NO_SPLIT");
    d->no_normo = bs_env_flag("BITSPARK_VK_NO_NORMO");
    d->no_qk = bs_env_flag("BITSPARK_VK_NO_QK");
    const char *hd = getenv("BITSPARK_VK_DRAFT_HEAD");
    d->head_apart = hd && !strcmp(hd, "apart");
    const char *la = getenv("BITSPARK_VK_DRAFT_LAYERS");
    d->layers_apart = la && !strcmp(la, "apart");
    const char *ap = getenv("BITSPARK_VK_DRAFT_APPEND");
    d->append_apart = ap && !strcmp(ap, "apart");
    int rc = bs_vk_upload_mat(c, &d->fc, &s->fc) || bs_vk_upload_vec(c, &d->out_norm, s->output_norm, (size_t)s->n_embd) ||
             bs_vk_upload_vec(c, &d->hid_norm, s->hidden_norm, (size_t)s->n_embd);
    if (!rc) rc = s->share_embd ? !(d->embd = bs_vk_net_embd(s->share)) : bs_vk_upload_mat(c, &d->own_embd, &s->tok_embd);
    if (!rc) rc = s->share_output ? !(d->output = bs_vk_net_output(s->share)) : bs_vk_upload_mat(c, &d->own_output, &s->output);
    if (!rc && s->snr_anchor && s->snr_mask) rc = upload_snr(d, s);
    /* the Markov head for greedy drafts on the device; without it they are taken on the host */
    if (!rc && s->markov_rank > 0 && (bs_vk_upload_mat(c, &d->markov_a, &s->markov_a) || bs_vk_upload_mat(c, &d->markov_b, &s->markov_b))) {
        bs_log(1, "Vulkan drafter: the Markov head stays on the host (%s)\n", bs_last_error());
        bs_clear_error();
        bs_vk_matrix_free(c, d->markov_a);
        bs_vk_matrix_free(c, d->markov_b);
        d->markov_a = d->markov_b = NULL;
    }
    for (int l = 0; l < s->n_layer && !rc; l++) rc = upload_layer(d, &d->L[l], &s->layers[l]);
    if (rc) {
        bs_error_prefix("Vulkan: uploading the drafter: ");
        bs_vk_dspark_free(d);
        return NULL;
    }
    if (!s->share_embd) d->embd = d->own_embd;
    if (!s->share_output) d->output = d->own_output;
    return d;
}

/* record_head's buffers (bs_vk_buf_free leaves a buffer never made alone) */
static void head_bufs_free(bs_vk_dspark *d) {
    bs_vk_buf *bs[] = {&d->hx, &d->haq, &d->has, &d->ham, &d->hxr, &d->hlogits};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(d->c, bs[i]);
}

void bs_vk_dspark_free(bs_vk_dspark *d) {
    if (!d) return;
    bs_vk_ctx *c = d->c;
    for (int l = 0; l < d->hp.n_layer; l++) {
        dl_layer *L = &d->L[l];
        bs_vk_matrix *ms[] = {L->wq, L->wk, L->wv, L->qkv, L->wo, L->gate, L->up, L->down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) bs_vk_matrix_free(c, ms[i]);
        bs_vk_buf *bs[] = {&L->attn_norm, &L->ffn_norm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
    }
    bs_vk_matrix_free(c, d->own_embd);
    bs_vk_matrix_free(c, d->own_output);
    bs_vk_matrix_free(c, d->fc);
    bs_vk_matrix_free(c, d->markov_a);
    bs_vk_matrix_free(c, d->markov_b);
    bs_vk_buf *bs[] = {&d->out_norm, &d->hid_norm, &d->snr};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
    head_bufs_free(d);
    dl_rows_free(c, &d->gr);
    bs_vk_buf_free(c, &d->ghidden);
    bs_vk_buf_free(c, &d->ain);
    bs_vk_buf_free(c, &d->grope);
    free(d->L);
    free(d);
}

/* --- contexts ------------------------------------------------------------------------------- */

/* The split attention's chunks and buffers, where it takes the shape (the group's q heads in its
 * shared memory: G * D <= 2048) and its partials fit one binding; else attn_nc.comp. */
static int split_bufs(bs_vk_dctx *s) {
    const bs_vk_dspark *d = s->d;
    const bs_vk_dspark_desc *hp = &d->hp;
    const size_t B = (size_t)hp->block_size, H = (size_t)hp->n_head, Hkv = (size_t)hp->n_head_kv, D = (size_t)hp->head_dim;
    const size_t n_chunk = ((size_t)s->n_rows_max + B + (size_t)d->attn_chunk - 1) / (size_t)d->attn_chunk;
    const size_t pt_bytes = 4 * B * H * n_chunk * (D + 2);
    if (d->no_split || H / Hkv * D > 2048 || n_chunk > 65535 || pt_bytes > d->c->max_binding) return 0;
    const int rc = bs_vk_buf_new(d->c, &s->apart, pt_bytes, false) || bs_vk_counters_new(d->c, &s->acnt, 4 * B * Hkv);
    s->n_chunk = rc ? 0 : (int)n_chunk;
    return rc ? -1 : 0;
}

static int ctx_bufs(bs_vk_dctx *s) {
    bs_vk_ctx *c = s->d->c;
    const bs_vk_dspark_desc *hp = &s->d->hp;
    const size_t R = (size_t)s->R, E = (size_t)hp->n_embd, B = (size_t)hp->block_size, V = (size_t)hp->n_vocab;
    const size_t kvb = 4 * ((size_t)s->n_rows_max + B) * s->kv_w, scb = 4 * B * hp->n_head * ((size_t)s->n_rows_max + B);
    if (kvb > c->max_binding || scb > c->max_binding || 4 * B * V > c->max_binding)
        return bs_error("a drafter context of %d rows does not fit one binding of %llu bytes", s->n_rows_max,
                        (unsigned long long)c->max_binding);
    int rc = dl_rows_new(c, hp, &s->r, R) || bs_vk_buf_new(c, &s->scores, scb, false) ||
             bs_vk_buf_new(c, &s->in, 4 * APPEND_ROWS * (size_t)hp->n_taps * E, true) ||
             bs_vk_buf_new(c, &s->tok, 4 * B, true) || bs_vk_buf_new(c, &s->rope, 4 * R * hp->head_dim, true) ||
             bs_vk_buf_new(c, &s->hidden, 4 * B * E, true) || bs_vk_buf_new(c, &s->logits, 4 * B * V, true) ||
             bs_vk_buf_new(c, &s->mrow, 4 * (size_t)BS_MAX(hp->markov_rank, 1), false) || bs_vk_buf_new(c, &s->score, 4 * V, false) ||
             bs_vk_buf_new(c, &s->best, 4, false) || bs_vk_buf_new(c, &s->prev, 4, true) || bs_vk_buf_new(c, &s->drafts, 4 * B, true) ||
             bs_vk_amax_bufs_new(c, &s->amax, 1);
    for (int l = 0; l < hp->n_layer && !rc; l++)
        rc = bs_vk_buf_new(c, &s->k[l], kvb, false) || bs_vk_buf_new(c, &s->v[l], kvb, false);
    rc = rc || bs_vk_buf_new(c, &s->kvpos, 4, false);
    return rc ? -1 : split_bufs(s);
}

bs_vk_dctx *bs_vk_dctx_new(bs_vk_dspark *d, int n_rows_max) {
    const bs_vk_dspark_desc *hp = &d->hp;
    if (n_rows_max < 1 || n_rows_max > (1 << 24)) {
        bs_error("Vulkan drafter: context of %d rows is out of range", n_rows_max);
        return NULL;
    }
    bs_vk_dctx *s = bs_xcalloc(1, sizeof *s);
    s->d = d;
    s->n_rows_max = n_rows_max;
    s->R = BS_MAX(APPEND_ROWS, hp->block_size);
    s->kv_w = (size_t)hp->n_head_kv * hp->head_dim;
    s->k = bs_xcalloc((size_t)hp->n_layer, sizeof *s->k);
    s->v = bs_xcalloc((size_t)hp->n_layer, sizeof *s->v);
    if (ctx_bufs(s)) {
        bs_error_prefix("Vulkan drafter context: ");
        bs_vk_dctx_free(s);
        return NULL;
    }
    return s;
}

void bs_vk_dctx_free(bs_vk_dctx *s) {
    if (!s) return;
    bs_vk_ctx *c = s->d->c;
    bs_vk_buf *bs[] = {&s->scores, &s->in, &s->tok, &s->rope, &s->hidden, &s->logits, &s->mrow, &s->score,
                       &s->best, &s->prev, &s->drafts, &s->apart, &s->acnt, &s->kvpos, &s->unif, &s->lists};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
    dl_rows_free(c, &s->r);
    bs_vk_top_bufs_free(c, &s->top);
    bs_vk_amax_bufs_free(c, &s->amax);
    for (int l = 0; l < s->d->hp.n_layer; l++) {
        bs_vk_buf_free(c, &s->k[l]);
        bs_vk_buf_free(c, &s->v[l]);
    }
    free(s->k);
    free(s->v);
    free(s);
}

/* --- recording ------------------------------------------------------------------------------ */
enum { EW_ADD = 0, EW_SILU_MUL = 1 };

/* ew.comp over n elements (b read from element b0 on: EW_ADD only), then a barrier */
static int ew_at(bs_vk_ctx *c, int mode, const bs_vk_buf *a, const bs_vk_buf *b, const bs_vk_buf *cc, uint64_t n, uint32_t b0) {
    uint32_t p[4] = {(uint32_t)mode, (uint32_t)n, b0, 0};
    const bs_vk_buf *bb[3] = {a, b, cc};
    const uint32_t g = bs_vk_groups(n, 256), gx = BS_MIN(g, 65535u), gy = bs_vk_groups(g, gx);
    TRY(bs_vk_dispatch(c, BS_VK_K_EW, bb, p, gx, gy, 1));
    bs_vk_barrier(c);
    return 0;
}

static int ew(bs_vk_ctx *c, int mode, const bs_vk_buf *a, const bs_vk_buf *b, const bs_vk_buf *cc, uint64_t n) {
    return ew_at(c, mode, a, b, cc, n, 0);
}

/* RMSNorm of groups of d (n_groups; per_row of them a row of row_stride, head_stride apart). */
static int norm(const bs_vk_dspark *dk, const bs_vk_buf *x, const bs_vk_buf *w, const bs_vk_buf *y, uint32_t d,
                uint32_t n_groups, uint32_t per_row, uint32_t row_stride, uint32_t head_stride) {
    norm_push p = {d, 0, 1, per_row, row_stride, head_stride, 0, 0, dk->hp.eps, 0, 0, 0, 0.0f};
    const bs_vk_buf *bb[10] = {x, w, y};
    TRY(bs_vk_dispatch(dk->c, BS_VK_K_NORM, bb, &p, n_groups, 1, 1));
    bs_vk_barrier(dk->c);
    return 0;
}

int dl_norm_rows(const bs_vk_dspark *d, const bs_vk_buf *x, const bs_vk_buf *w, const bs_vk_buf *y, int n) {
    const uint32_t E = (uint32_t)d->hp.n_embd;
    return norm(d, x, w, y, E, (uint32_t)n, 1, E, 0);
}

/* y = W x for n rows, activations quantized (into aq, as, am) or rounded (into xr) as the CPU
 * path does. */
static int mv_with(bs_vk_ctx *c, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const bs_vk_buf *y,
                   const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am, const bs_vk_buf *xr) {
    if (W->rot) {   /* a folded target's head, shared: x rotated into xr with its int8 blocks */
        if (W->act) return bs_error("Vulkan drafter: a folded product that rounds its input (%s)", W->name ? W->name : "");
        TRY(bs_vk_record_rotate_quant(c, W->rot, x, xr, n, W->kernel != BS_VK_K_MV_F32 ? aq : NULL, as, am));
        bs_vk_barrier(c);
        TRY(bs_vk_record_mv(c, W, xr, aq, as, am, n, y));
        bs_vk_barrier(c);
        return 0;
    }
    if (W->kernel != BS_VK_K_MV_F32) {
        TRY(bs_vk_record_quant(c, x, aq, as, am, (uint64_t)n * W->ne0 / 32));
        bs_vk_barrier(c);
    }
    if (W->act && !bs_vk_act_inline(c, W, n)) {   /* (mv_f32n rounds x as it reads it) */
        TRY(bs_vk_record_act(c, W, x, xr, n));
        bs_vk_barrier(c);
        x = xr;
    }
    TRY(bs_vk_record_mv(c, W, x, aq, as, am, n, y));
    bs_vk_barrier(c);
    return 0;
}

int dl_mv(const bs_vk_dspark *d, const dl_rows *r, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const bs_vk_buf *y) {
    return mv_with(d->c, W, x, n, y, &r->aq, &r->as, &r->am, &r->xr);
}

/* Per-head RMSNorm with w, then NeoX RoPE over all head_dim dims (rope's rows), of n rows of nh
 * heads. */
int dl_norm_rope(const bs_vk_dspark *d, const bs_vk_buf *rope, const bs_vk_buf *x, const bs_vk_buf *w, int n, int nh) {
    const uint32_t D = (uint32_t)d->hp.head_dim, H = (uint32_t)nh;
    TRY(norm(d, x, w, x, D, (uint32_t)n * H, H, H * D, D));
    uint32_t rp[4] = {H, D, H * D, D};
    const bs_vk_buf *bb[2] = {x, rope};
    TRY(bs_vk_dispatch(d->c, BS_VK_K_ROPE, bb, rp, bs_vk_groups(D / 2, 64), (uint32_t)n * H, 1));
    bs_vk_barrier(d->c);
    return 0;
}

/* n rows of w floats: src's from row s0 into dst's from row d0. */
void dl_copy_w(bs_vk_ctx *c, const bs_vk_buf *src, int s0, const bs_vk_buf *dst, int d0, int n, size_t w) {
    const VkDeviceSize rb = 4u * (VkDeviceSize)w;
    bs_vk_cmd_copy(c, src, dst, &(VkBufferCopy){(VkDeviceSize)s0 * rb, (VkDeviceSize)d0 * rb, (VkDeviceSize)n * rb});
}

/* The target's qk.comp over n rows of r from row0 with rope's rows from row0: q's nq heads (the
 * block's; none for context rows) and kb's normed and roped in place, k and v stored at s's
 * layer-L cache rows from kvpos (filled by the recording); the bits of norm.comp, rope.comp
 * and the copies (BITSPARK_VK_NO_QK=1 runs those). No barrier after it. */
int dl_qk_dispatch(bs_vk_dctx *s, const dl_rows *r, int row0, const bs_vk_buf *rope, const dl_layer *L, int n, int nq) {
    const bs_vk_dspark_desc *hp = &s->d->hp;
    const int l = (int)(L - s->d->L);
    const uint32_t Hkv = (uint32_t)hp->n_head_kv, D = (uint32_t)hp->head_dim;
    qk_push qp = {(uint32_t)nq, Hkv, D, D, (uint32_t)row0, 1, hp->eps, 0};
    const bs_vk_buf *qb[9] = {&r->q, &r->kb, &r->vb, &L->q_norm, &L->k_norm, rope, &s->k[l], &s->v[l], &s->kvpos};
    return bs_vk_dispatch(s->d->c, BS_VK_K_QK, qb, &qp, (uint32_t)n * ((uint32_t)nq + Hkv), 1, 1);
}

/* Whether every layer's K and V products read int8 blocks (the append quantizes h once for all;
 * BITSPARK_VK_NO_NORMO=1: a quantizer per product, as before, the same bits). */
bool dl_reads_int8(const bs_vk_matrix *m) { return m->kernel != BS_VK_K_MV_F32 && !m->act; }

bool dl_kv_integer(const bs_vk_dspark *d) {
    if (d->no_normo) return false;
    for (int l = 0; l < d->hp.n_layer; l++)
        if (!dl_reads_int8(d->L[l].wk) || !dl_reads_int8(d->L[l].wv)) return false;
    return d->hp.n_embd % 32 == 0;
}

/* RMSNorm of n rows of x with w into y, quantized into aq.. for the products that read it. */
int dl_norm_q(const bs_vk_dspark *d, const dl_rows *r, const bs_vk_buf *w, const bs_vk_buf *y, int n) {
    const uint32_t E = (uint32_t)d->hp.n_embd;
    norm_push p = {E, 0, 1, 1, E, 0, 0, 0, d->hp.eps, NORM_QUANT, 0, 0, 0.0f};
    const bs_vk_buf *bb[10] = {&r->x, w, y, NULL, &r->aq, &r->as, &r->am};
    TRY(bs_vk_dispatch(d->c, BS_VK_K_NORM, bb, &p, (uint32_t)n, 1, 1));
    bs_vk_barrier(d->c);
    return 0;
}

/* The products of h (its int8 blocks in aq..) for q, k and v (from = 0) or k and v alone
 * (from = 1): one dispatch where the layer has its layout. */
int dl_record_qkv(bs_vk_ctx *c, const dl_rows *r, const dl_layer *L, int from, int n) {
    const bs_vk_matrix *m[3] = {L->wq, L->wk, L->wv};
    const bs_vk_buf *y[3] = {&r->q, &r->kb, &r->vb};
    const bs_vk_matrix *cm[3];
    const bs_vk_buf *cy[3];
    int nc = 0;
    for (int i = from; i < 3; i++) {   /* the layout's in one dispatch (a suffix of it is a run) */
        if (m[i]->borrowed) cm[nc] = m[i], cy[nc++] = y[i];
        else TRY(bs_vk_record_mv(c, m[i], &r->h, &r->aq, &r->as, &r->am, n, y[i]));
    }
    return nc ? bs_vk_record_mv_cat(c, L->qkv, cm, nc, &r->aq, &r->as, &r->am, n, cy) : 0;
}

static int embed_block(bs_vk_dctx *s, int nb) {
    bs_vk_dspark *d = s->d;
    const bs_vk_matrix *m = d->embd;
    const int k = bs_vk_rows_kernel(m);
    for (int i = 0; i < m->n_parts; i++) {
        const bs_vk_mat_part *p = &m->parts[i];
        uint32_t push[4] = {(uint32_t)p->rows, (uint32_t)m->ne0, (uint32_t)p->row0, (uint32_t)nb};
        const bs_vk_buf *bb[4] = {&p->codes, &p->scales, &s->tok, &s->r.x};
        TRY(bs_vk_dispatch(d->c, k, bb, push, bs_vk_groups((uint64_t)m->ne0, 64), (uint32_t)nb, 1));
    }
    bs_vk_barrier(d->c);
    if (m->rot) {   /* a folded target's table, shared: its rows rotated back, in place */
        TRY(bs_vk_record_rotate(d->c, m->rot, &s->r.x, &s->r.x, nb));
        bs_vk_barrier(d->c);
    }
    if (d->snr_on) TRY(ew(d->c, EW_ADD, &s->r.x, &d->snr, &d->snr, (uint64_t)nb * d->hp.n_embd));
    return 0;
}

/* The block's attention (its q rows from row0 of r, into att's from row0) over cache rows
 * first..first+n_kv-1 of layer l: split over the context
 * (attn_nc_split.comp: a workgroup per (chunk, row, KV head) for the group's query heads, each
 * K/V row read once per group, the chunks merged by the last one) where the context has its
 * buffers, else a workgroup per (row, head) over all of it (attn_nc.comp). */
static int block_attention(bs_vk_dctx *s, const dl_rows *r, int row0, int l, int nb, int first, int n_kv) {
    const bs_vk_dspark_desc *hp = &s->d->hp;
    const uint32_t H = (uint32_t)hp->n_head, Hkv = (uint32_t)hp->n_head_kv, D = (uint32_t)hp->head_dim;
    const uint32_t sc_stride = (uint32_t)(s->n_rows_max + hp->block_size), C = (uint32_t)s->d->attn_chunk;
    const float scale = 1.0f / sqrtf((float)D);
    if (s->n_chunk > 0) {
        struct { uint32_t H, Hkv, D, first, n_kv, sc_stride; float scale; uint32_t chunk, n_chunk, n_rot; float eps; uint32_t qrow0; } sp = {
            H, Hkv, D, (uint32_t)first, (uint32_t)n_kv, sc_stride, scale, C, (uint32_t)s->n_chunk, 0, 0.0f, (uint32_t)row0};
        const bs_vk_buf *sb[16] = {&r->q, &s->k[l], &s->v[l], &r->att, &s->scores};
        sb[14] = &s->apart;
        sb[15] = &s->acnt;
        return bs_vk_dispatch(s->d->c, BS_VK_K_ATTN_NC_SPLIT, sb, &sp, ((uint32_t)n_kv + C - 1) / C, (uint32_t)nb * Hkv, 1);
    }
    struct { uint32_t H, Hkv, D, first, n_kv, sc_stride; float scale; uint32_t qrow0; } ap = {
        H, Hkv, D, (uint32_t)first, (uint32_t)n_kv, sc_stride, scale, (uint32_t)row0};
    const bs_vk_buf *ab[5] = {&r->q, &s->k[l], &s->v[l], &r->att, &s->scores};
    return bs_vk_dispatch(s->d->c, BS_VK_K_ATTN_NC, ab, &ap, (uint32_t)nb * H, 1, 1);
}

/* The blocks whose layers run as one: their rows one after another in r (a block alone: its
 * context's own rows), the final states into hidden (its context's). Every step but the
 * attention (a block's own, over its context) takes a row alone and the products are
 * batch-invariant, so each block keeps its own bits; the layers' weights are read once for all
 * the blocks rather than once a block. */
typedef struct dl_group {
    bs_vk_dspark *d;
    const dl_rows *r;
    const bs_vk_dblock *b;
    int n, rows;
    const bs_vk_buf *hidden, *rope;   /* (rope: the rows' positions, each block's at its rows) */
} dl_group;

static bool group_own(const dl_group *g) { return g->r == &g->b[0].s->r; }

/* The blocks' q and k (in q, kb; v in vb) normed and roped, k and v stored after each context's
 * rows (first + n_ctx, as the recording filled kvpos), then their attention into att: the
 * kernels read and write a block's rows where they are (from its first row in the group's),
 * each over its own context. */
static int group_attention(const dl_group *g, const dl_layer *L) {
    bs_vk_dspark *d = g->d;
    const dl_rows *r = g->r;
    const int l = (int)(L - d->L);
    if (d->no_qk) {   /* the steps apart: norms and RoPE over all the rows, then each block's cache rows */
        TRY(dl_norm_rope(d, g->rope, &r->q, &L->q_norm, g->rows, d->hp.n_head));
        TRY(dl_norm_rope(d, g->rope, &r->kb, &L->k_norm, g->rows, d->hp.n_head_kv));
    }
    for (int i = 0, off = 0; i < g->n; off += g->b[i].nb, i++) {
        bs_vk_dctx *s = g->b[i].s;
        if (!d->no_qk) {
            TRY(dl_qk_dispatch(s, r, off, g->rope, L, g->b[i].nb, d->hp.n_head));
        } else {
            dl_copy_w(d->c, &r->kb, off, &s->k[l], g->b[i].first + g->b[i].n_ctx, g->b[i].nb, s->kv_w);
            dl_copy_w(d->c, &r->vb, off, &s->v[l], g->b[i].first + g->b[i].n_ctx, g->b[i].nb, s->kv_w);
        }
    }
    bs_vk_barrier(d->c);
    for (int i = 0, off = 0; i < g->n; off += g->b[i].nb, i++)
        TRY(block_attention(g->b[i].s, r, off, l, g->b[i].nb, g->b[i].first, g->b[i].n_ctx + g->b[i].nb));
    bs_vk_barrier(d->c);
    return 0;
}

static int block_layer(const dl_group *g, const dl_layer *L) {
    bs_vk_dspark *d = g->d;
    bs_vk_ctx *c = d->c;
    const dl_rows *r = g->r;
    const int nb = g->rows;
    const uint64_t E = (uint64_t)d->hp.n_embd;
    TRY(dl_norm_rows(d, &r->x, &L->attn_norm, &r->h, nb));
    TRY(dl_mv(d, r, L->wq, &r->h, nb, &r->q));
    TRY(dl_mv(d, r, L->wk, &r->h, nb, &r->kb));
    TRY(dl_mv(d, r, L->wv, &r->h, nb, &r->vb));
    TRY(group_attention(g, L));
    TRY(dl_mv(d, r, L->wo, &r->att, nb, &r->h));
    TRY(ew(c, EW_ADD, &r->x, &r->h, &r->h, (uint64_t)nb * E));
    TRY(dl_norm_rows(d, &r->x, &L->ffn_norm, &r->h, nb));
    TRY(dl_mv(d, r, L->gate, &r->h, nb, &r->f1));
    TRY(dl_mv(d, r, L->up, &r->h, nb, &r->f2));
    TRY(ew(c, EW_SILU_MUL, &r->f1, &r->f1, &r->f2, (uint64_t)nb * d->hp.n_ff));
    TRY(dl_mv(d, r, L->down, &r->f1, nb, &r->h));
    TRY(ew(c, EW_ADD, &r->x, &r->h, &r->h, (uint64_t)nb * E));
    return 0;
}

/* Whether the block's layers take the target step's fusions (docs/kernels.md, "The decode step's
 * fusions"): up to 8 rows (mv_q's one row group), integer products that read int8 blocks, and
 * wo, down, gate / up as mv_q's NORM_OUT and GLU take them. */
static bool block_fusable(const bs_vk_dspark *d, int nb) {
    if (nb > 8 || d->no_normo || d->hp.n_embd % 32 || d->hp.n_ff % 32) return false;
    for (int l = 0; l < d->hp.n_layer; l++) {
        const dl_layer *L = &d->L[l];
        if (!dl_reads_int8(L->wq) || !dl_reads_int8(L->wk) || !dl_reads_int8(L->wv)) return false;
        if (!bs_vk_norm_fusable(L->wo) || !bs_vk_norm_fusable(L->down) || !bs_vk_glu_fusable(d->c, L->gate, L->up)) return false;
    }
    return true;
}

/* A layer of the fused block: h normed and quantized (aq..) on entry; wo and down add into x
 * and norm it with the FFN's norm, then nw (the next layer's, or the output norm into the
 * drafter's hidden rows), for the products after them; gate, up and SwiGLU in one dispatch
 * with down's int8 blocks. The same bits as block_layer's steps apart. */
static int block_layer_fused(const dl_group *g, const dl_layer *L, const bs_vk_buf *nw, const bs_vk_buf *xn) {
    bs_vk_dspark *d = g->d;
    bs_vk_ctx *c = d->c;
    const bs_vk_dspark_desc *hp = &d->hp;
    const dl_rows *r = g->r;
    const int nb = g->rows;
    const bs_vk_buf *q1[3] = {&r->aq, &r->as, &r->am}, *q2[3] = {&r->aq2, &r->as2, &r->am2};
    TRY(dl_record_qkv(c, r, L, 0, nb));
    bs_vk_barrier(c);
    TRY(group_attention(g, L));
    TRY(bs_vk_record_quant(c, &r->att, &r->aq, &r->as, &r->am, (uint64_t)nb * hp->n_head * hp->head_dim / 32));
    bs_vk_barrier(c);
    TRY(bs_vk_record_mv_norm(c, L->wo, &r->aq, &r->as, &r->am, nb, &r->x, &L->ffn_norm, hp->eps, &r->h, q1, &r->ncnt, NULL, NULL));
    bs_vk_barrier(c);
    TRY(bs_vk_record_glu(c, L->gate, L->up, &r->aq, &r->as, &r->am, nb, &r->f1, q2));
    bs_vk_barrier(c);
    TRY(bs_vk_record_mv_norm(c, L->down, &r->aq2, &r->as2, &r->am2, nb, &r->x, nw, hp->eps, xn, q1, &r->ncnt, NULL, NULL));
    bs_vk_barrier(c);
    return 0;
}

/* The group's blocks embedded (each in its context's rows, then copied to the group's), its
 * layers, and the final states into g->hidden, then each context's hidden rows. *q_hidden: the
 * final states' int8 blocks are in the group's aq.. (the fused path's last product). */
static int record_group(const dl_group *g, bool *q_hidden) {
    bs_vk_dspark *d = g->d;
    const dl_rows *r = g->r;
    const size_t E = (size_t)d->hp.n_embd;
    for (int i = 0; i < g->n; i++) {
        bs_vk_dctx *s = g->b[i].s;
        bs_vk_cmd_fill_at(d->c, &s->kvpos, 0, 4, (uint32_t)(g->b[i].first + g->b[i].n_ctx));   /* (embed_block's barrier covers it) */
        TRY(embed_block(s, g->b[i].nb));
    }
    if (!group_own(g)) {
        for (int i = 0, off = 0; i < g->n; off += g->b[i].nb, i++) dl_copy_w(d->c, &g->b[i].s->r.x, 0, &r->x, off, g->b[i].nb, E);
        bs_vk_barrier(d->c);
    }
    *q_hidden = block_fusable(d, g->rows);
    if (*q_hidden) {   /* the output norm in the last layer's down product */
        TRY(dl_norm_q(d, r, &d->L[0].attn_norm, &r->h, g->rows));
        for (int l = 0; l < d->hp.n_layer; l++) {
            const bool last = l + 1 == d->hp.n_layer;
            TRY(block_layer_fused(g, &d->L[l], last ? &d->out_norm : &d->L[l + 1].attn_norm, last ? g->hidden : &r->h));
        }
    } else {
        for (int l = 0; l < d->hp.n_layer; l++) TRY(block_layer(g, &d->L[l]));
        TRY(dl_norm_rows(d, &r->x, &d->out_norm, g->hidden, g->rows));
    }
    if (!group_own(g)) {
        for (int i = 0, off = 0; i < g->n; off += g->b[i].nb, i++) dl_copy_w(d->c, g->hidden, off, &g->b[i].s->hidden, 0, g->b[i].nb, E);
        bs_vk_barrier(d->c);
    }
    return 0;
}

/* A block's own LM-head product over its first n_logits final states; q_hidden: their int8
 * blocks are in its rows' aq.. already. */
static int record_block_head(bs_vk_dctx *s, int n_logits, bool q_hidden) {
    const bs_vk_dspark *d = s->d;
    if (n_logits <= 0) return 0;
    if (q_hidden && dl_reads_int8(d->output) && !d->output->rot)
        return bs_vk_record_mv(d->c, d->output, &s->hidden, &s->r.aq, &s->r.as, &s->r.am, n_logits, &s->logits);
    return dl_mv(d, &s->r, d->output, &s->hidden, n_logits, &s->logits);
}

static int record_chain(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n);
static int chain_ready(bs_vk_dctx *s, int n, const bs_draw *p);
static int record_sampled_chain(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n, const bs_draw *p, const float *u);
static void chain_read(bs_vk_dctx *s, int n, int top_k, int32_t *pred, int32_t *ids, float *vals, int *counts);
/* Whether the Markov term can be added here (a drafter without one needs none; else its head
 * may have stayed on the host: bs_vk_dspark_new). */
static bool markov_here(const bs_vk_dspark *d) { return d->hp.markov_rank == 0 || d->markov_a; }

static int check_block(const bs_vk_dblock *b, int32_t mask_id) {
    const bs_vk_dspark_desc *hp = &b->s->d->hp;
    if (b->nb < 1 || b->nb > hp->block_size || b->n_logits < 0 || b->n_logits > b->nb)
        return bs_error("Vulkan drafter: %d block slots, %d logits rows", b->nb, b->n_logits);
    if (b->anchor < 0 || b->anchor >= hp->n_vocab || mask_id < 0 || mask_id >= hp->n_vocab)
        return bs_error("Vulkan drafter: token id out of range");
    if (b->first < 0 || b->n_ctx < 0 || b->first > b->s->n_rows_max - b->n_ctx) return bs_error("Vulkan drafter: bad context range");
    if (b->drafts && b->n_logits < 1) return bs_error("Vulkan drafter: greedy drafts without logits rows");
    return 0;
}

int dl_grow_rows(const bs_vk_dspark *d, int rows) {
    const int step = GROW_BLOCKS * d->hp.block_size;
    return (rows + step - 1) / step * step;
}

/* Whether the blocks' logits rows go through the LM head as one product (record_head): two or
 * more blocks with rows, the head's buffers there (made now, or again larger, where its logits
 * fit one binding; else each block keeps its own product). Nothing in flight reads them: the
 * caller settled the device. */
static bool head_shared(bs_vk_dspark *d, const bs_vk_dblock *b, int n) {
    int with = 0;
    for (int i = 0; i < n; i++) with += b[i].n_logits > 0;
    if (with < 2 || d->head_apart) return false;
    if (d->h_rows >= n * d->hp.block_size) return true;
    bs_vk_ctx *c = d->c;
    const size_t R = (size_t)dl_grow_rows(d, n * d->hp.block_size), E = (size_t)d->hp.n_embd, V = (size_t)d->hp.n_vocab;
    head_bufs_free(d);
    d->h_rows = 0;
    if (4 * R * V > c->max_binding) return false;
    if (bs_vk_buf_new(c, &d->hx, 4 * R * E, false) || bs_vk_buf_new(c, &d->haq, R * E, false) ||
        bs_vk_buf_new(c, &d->has, R * E / 8 + 4, false) || bs_vk_buf_new(c, &d->ham, R * E / 8 + 4, false) ||
        bs_vk_buf_new(c, &d->hxr, 4 * R * E, false) || bs_vk_buf_new(c, &d->hlogits, 4 * R * V, false)) {
        head_bufs_free(d);
        bs_clear_error();   /* (each block its own product, as before) */
        return false;
    }
    d->h_rows = (int)R;
    return true;
}

bool dl_group_rows(bs_vk_dspark *d, int rows) {
    if (d->g_rows >= rows) return true;
    const int R = dl_grow_rows(d, rows);
    bs_vk_buf *bs[] = {&d->ghidden, &d->grope};
    dl_rows_free(d->c, &d->gr);
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(d->c, bs[i]);
    d->g_rows = 0;
    if (dl_rows_new(d->c, &d->hp, &d->gr, (size_t)R) || bs_vk_buf_new(d->c, &d->ghidden, 4 * (size_t)R * d->hp.n_embd, false) ||
        bs_vk_buf_new(d->c, &d->grope, 4 * (size_t)R * d->hp.head_dim, true)) {
        dl_rows_free(d->c, &d->gr);
        for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(d->c, bs[i]);
        bs_clear_error();
        return false;
    }
    d->g_rows = R;
    return true;
}

/* Whether the blocks' layers run as one (record_group over the drafter's shared rows; where they
 * cannot be, each block runs its own as before). */
static bool layers_shared(bs_vk_dspark *d, int n, int rows) { return n >= 2 && !d->layers_apart && dl_group_rows(d, rows); }

/* A submission's descriptor sets, a dispatch each, bound from above: a block's embedding, layers
 * (a block alone, every step apart: 24 a layer), head, and a chain of block_size slots (16 a
 * slot); the shared layers and head once. */
int bs_vk_dspark_max_blocks(const bs_vk_dspark *d) {
    const int L = d->hp.n_layer, per = d->embd->n_parts + 2 + 24 * L + 4 + 16 * d->hp.block_size, shared = 24 * L + 8;
    return BS_MAX(1, BS_MIN((int)MAX_BLOCKS, (BS_VK_MAX_SETS - shared) / per));
}

/* The blocks' logits rows through the LM head as one product: each block's hidden rows copied
 * into the head's rows, one product over all of them (the head, most of a drafter's bytes, read
 * once a submission rather than once a block), its rows copied to each block's logits. The
 * products are batch-invariant, so a block's rows are the bits of its own product. */
static int record_head(bs_vk_dspark *d, const bs_vk_dblock *b, int n) {
    bs_vk_ctx *c = d->c;
    const VkDeviceSize E4 = 4u * (VkDeviceSize)d->hp.n_embd, V4 = 4u * (VkDeviceSize)d->hp.n_vocab;
    bs_vk_barrier(c);
    VkDeviceSize r = 0;
    for (int i = 0; i < n; r += (VkDeviceSize)BS_MAX(b[i].n_logits, 0), i++)
        if (b[i].n_logits > 0) bs_vk_cmd_copy(c, &b[i].s->hidden, &d->hx, &(VkBufferCopy){0, r * E4, (VkDeviceSize)b[i].n_logits * E4});
    bs_vk_barrier(c);
    TRY(mv_with(c, d->output, &d->hx, (int)r, &d->hlogits, &d->haq, &d->has, &d->ham, &d->hxr));
    r = 0;
    for (int i = 0; i < n; r += (VkDeviceSize)BS_MAX(b[i].n_logits, 0), i++)
        if (b[i].n_logits > 0) bs_vk_cmd_copy(c, &d->hlogits, &b[i].s->logits, &(VkBufferCopy){r * V4, 0, (VkDeviceSize)b[i].n_logits * V4});
    bs_vk_barrier(c);
    return 0;
}

int bs_vk_dctx_blocks(const bs_vk_dblock *b, int n, int32_t mask_id) {
    if (n < 1) return bs_error("Vulkan drafter: no blocks to run");
    bs_vk_dspark *d = b[0].s->d;
    if (n > bs_vk_dspark_max_blocks(d))
        return bs_error("Vulkan drafter: %d blocks in one submission (1..%d)", n, bs_vk_dspark_max_blocks(d));
    for (int i = 0; i < n; i++) {
        TRY(check_block(&b[i], mask_id));
        if (b[i].s->d != d) return bs_error("Vulkan drafter: blocks of different drafters in one submission");
        for (int j = 0; j < i; j++)
            if (b[j].s == b[i].s) return bs_error("Vulkan drafter: one context twice in a submission");
    }
    const size_t E = (size_t)d->hp.n_embd, R4 = 4u * (size_t)d->hp.head_dim;
    TRY(bs_vk_settle(d->c));   /* an append in flight reads rope and the shared buffers */
    /* the blocks' layers as one where they can be (else a block at a time, each in its
       context's rows), the LM head, then the greedy chains asked for (each context's own
       score, argmax and prev buffers) */
    int rows = 0;
    for (int i = 0; i < n; i++) rows += b[i].nb;
    const bool shared = head_shared(d, b, n), together = layers_shared(d, n, rows);
    rows = 0;
    for (int i = 0; i < n; rows += b[i].nb, i++) {   /* RoPE rows where the layers read them */
        bs_vk_dctx *s = b[i].s;
        for (int t = 0; t < b[i].nb; t++) ((int32_t *)s->tok.map)[t] = t ? mask_id : b[i].anchor;
        memcpy(together ? (float *)d->grope.map + (size_t)rows * d->hp.head_dim : s->rope.map, b[i].rope, R4 * (size_t)b[i].nb);
        s->n_logits = 0;
    }
    TRY(bs_vk_begin(d->c));
    int rc = 0;
    bool q_hidden = false;
    if (together) rc = record_group(&(dl_group){d, &d->gr, b, n, rows, &d->ghidden, &d->grope}, &q_hidden);
    for (int i = 0; i < n && !rc; i++) {
        if (!together) rc = record_group(&(dl_group){d, &b[i].s->r, &b[i], 1, b[i].nb, &b[i].s->hidden, &b[i].s->rope}, &q_hidden);
        if (!rc && !shared) rc = record_block_head(b[i].s, b[i].n_logits, q_hidden && !together);
    }
    if (!rc && shared) rc = record_head(d, b, n);
    const bool chains = markov_here(d);
    bool sampled[MAX_BLOCKS] = {false};
    for (int i = 0; i < n && !rc; i++) {
        bs_vk_chain *ch = b[i].drafts ? NULL : b[i].chain;
        if (b[i].drafts && chains) rc = record_chain(b[i].s, b[i].anchor, mask_id, b[i].n_logits);
        else if (ch && b[i].n_logits > 0 && chain_ready(b[i].s, b[i].n_logits, &ch->p) == 0)
            rc = record_sampled_chain(b[i].s, b[i].anchor, mask_id, b[i].n_logits, &ch->p, ch->u), sampled[i] = true;
        else bs_clear_error();   /* (no chain: the caller's drafts go a slot at a time) */
    }
    if (bs_vk_submit(d->c) || rc) return bs_error_prefix("Vulkan drafter block: ");
    for (int i = 0; i < n; i++) {
        b[i].s->n_logits = b[i].n_logits;
        if (b[i].chain && !b[i].drafts) b[i].chain->done = sampled[i];
        if (sampled[i]) chain_read(b[i].s, b[i].n_logits, b[i].chain->p.top_k, b[i].chain->pred, b[i].chain->ids,
                                   b[i].chain->vals, b[i].chain->counts);
        if (b[i].hidden) memcpy(b[i].hidden, b[i].s->hidden.map, 4u * (size_t)b[i].nb * E);
        const bool took = b[i].drafts && chains;
        if (took) memcpy(b[i].drafts, b[i].s->drafts.map, 4u * (size_t)b[i].n_logits);
        else if (b[i].drafts) b[i].drafts[0] = -1;
        bs_vk_count_read(d->c, (b[i].hidden ? 4u * (size_t)b[i].nb * E : 0) + (took ? 4u * (size_t)b[i].n_logits : 0));
    }
    return 0;
}

int bs_vk_dctx_logits(bs_vk_dctx *s, int first, int n, float *out) {
    const size_t V = (size_t)s->d->hp.n_vocab;
    if (first < 0 || n < 0 || first + n > s->n_logits) return bs_error("Vulkan drafter: logits rows %d..%d of %d", first, first + n, s->n_logits);
    memcpy(out, (const float *)s->logits.map + (size_t)first * V, 4u * V * (size_t)n);
    bs_vk_count_read(s->d->c, 4u * V * (size_t)n);
    return 0;
}

/* Slot k's scores: its base logits plus the Markov term of the token in prev (markov_b times
 * markov_a's row of it), the mask id at -inf. */
static int record_score(bs_vk_dctx *s, int k, int32_t mask_id) {
    bs_vk_dspark *d = s->d;
    bs_vk_ctx *c = d->c;
    const uint32_t V = (uint32_t)d->hp.n_vocab;
    if (d->markov_a) {
        const bs_vk_matrix *m = d->markov_a;
        for (int i = 0; i < m->n_parts; i++) {
            const bs_vk_mat_part *p = &m->parts[i];
            const uint32_t push[4] = {(uint32_t)p->rows, (uint32_t)m->ne0, (uint32_t)p->row0, 1};
            const bs_vk_buf *bb[4] = {&p->codes, &p->scales, &s->prev, &s->mrow};
            TRY(bs_vk_dispatch(c, bs_vk_rows_kernel(m), bb, push, bs_vk_groups((uint64_t)m->ne0, 64), 1, 1));
        }
        bs_vk_barrier(c);
        TRY(dl_mv(d, &s->r, d->markov_b, &s->mrow, 1, &s->score));
        TRY(ew_at(c, EW_ADD, &s->score, &s->logits, NULL, V, (uint32_t)k * V));   /* base + Markov, as the CPU adds */
    } else {
        const VkBufferCopy r = {(VkDeviceSize)k * V * 4u, 0, (VkDeviceSize)V * 4u};
        bs_vk_cmd_copy(c, &s->logits, &s->score, &r);
        bs_vk_barrier(c);
    }
    bs_vk_cmd_fill_at(c, &s->score, 4u * (VkDeviceSize)mask_id, 4, 0xff800000u);   /* -inf: never drafted */
    bs_vk_barrier(c);
    return 0;
}

/* Slot k's greedy draft: the argmax of its scores, into prev (the next slot's) and drafts[k]. */
static int record_draft(bs_vk_dctx *s, int k, int32_t mask_id) {
    bs_vk_ctx *c = s->d->c;
    TRY(record_score(s, k, mask_id));
    TRY(bs_vk_record_argmax(c, &s->amax, &s->score, (uint32_t)s->d->hp.n_vocab, 1, &s->best, &s->prev));
    bs_vk_barrier(c);
    const VkBufferCopy r = {0, 4u * (VkDeviceSize)k, 4};
    bs_vk_cmd_copy(c, &s->prev, &s->drafts, &r);
    return 0;
}

int bs_vk_dctx_slot_top(bs_vk_dctx *s, int slot, int32_t prev, int32_t mask_id, int k, int32_t *ids, float *vals) {
    bs_vk_dspark *d = s->d;
    const bs_vk_dspark_desc *hp = &d->hp;
    if (slot < 0 || slot >= s->n_logits || k < 1 || k > BS_VK_TOP_MAX)
        return bs_error("Vulkan drafter: slot %d of %d, top-%d", slot, s->n_logits, k);
    if (prev < 0 || prev >= hp->n_vocab || mask_id < 0 || mask_id >= hp->n_vocab) return bs_error("Vulkan drafter: token id out of range");
    if (!markov_here(d)) return bs_error("Vulkan drafter: no Markov head on the device");
    TRY(bs_vk_top_bufs_ready(d->c, &s->top, (uint32_t)hp->n_vocab, 1));
    TRY(bs_vk_begin(d->c));
    memcpy(s->prev.map, &prev, 4);   /* (after begin: nothing in flight reads it then) */
    int rc = record_score(s, slot, mask_id);
    if (!rc) rc = bs_vk_record_topk_in(d->c, &s->top, &s->score, (uint32_t)hp->n_vocab, (uint32_t)k, 1);
    if (bs_vk_submit(d->c) || rc) return bs_error_prefix("Vulkan drafter's slot list: ");
    return bs_vk_top_list(d->c, &s->top, 0, k, ids, vals);
}

/* Slots 0..n-1's greedy drafts into drafts, the chain starting at anchor. */
static int record_chain(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n) {
    memcpy(s->prev.map, &anchor, 4);   /* (host-visible: read by the first slot's Markov row) */
    for (int k = 0; k < n; k++) TRY(record_draft(s, k, mask_id));
    return 0;
}

int bs_vk_dctx_draft_greedy(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n, int32_t *drafts) {
    bs_vk_dspark *d = s->d;
    const bs_vk_dspark_desc *hp = &d->hp;
    if (n < 1 || n > s->n_logits) return bs_error("Vulkan drafter: %d greedy drafts from %d logits rows", n, s->n_logits);
    if (anchor < 0 || anchor >= hp->n_vocab || mask_id < 0 || mask_id >= hp->n_vocab)
        return bs_error("Vulkan drafter: token id out of range");
    if (!markov_here(d)) return bs_error("Vulkan drafter: no Markov head on the device");
    TRY(bs_vk_begin(d->c));
    const int rc = record_chain(s, anchor, mask_id, n);
    if (bs_vk_submit(d->c) || rc) return bs_error_prefix("Vulkan drafter's greedy drafts: ");
    memcpy(drafts, s->drafts.map, 4u * (size_t)n);
    bs_vk_count_read(d->c, 4u * (size_t)n);
    return 0;
}

/* Slot k of a sampled chain: its list (of the draft before, in prev) into lists row k, and its
 * draft predicted from it with uniform k (draft_draw.comp) into prev and drafts[k]. */
static int record_sampled(bs_vk_dctx *s, int k, int32_t mask_id, const bs_draw *p) {
    bs_vk_ctx *c = s->d->c;
    const uint32_t row = 4u * (1 + 2 * BS_VK_TOP_MAX);
    TRY(record_score(s, k, mask_id));
    TRY(bs_vk_record_topk_in(c, &s->top, &s->score, (uint32_t)s->d->hp.n_vocab, (uint32_t)p->top_k, 1));
    bs_vk_barrier(c);
    TRY(bs_vk_record_draw(c, &s->top, (uint32_t)p->top_k, p, true, &s->unif, (uint32_t)k, &s->prev, &s->drafts));
    const VkBufferCopy r = {0, (VkDeviceSize)row * (VkDeviceSize)k, row};
    bs_vk_cmd_copy(c, &s->top.topv, &s->lists, &r);
    bs_vk_barrier(c);   /* the next slot's Markov row reads prev */
    return 0;
}

/* A sampled chain's checks and buffers (made on first use). */
static int chain_ready(bs_vk_dctx *s, int n, const bs_draw *p) {
    bs_vk_dspark *d = s->d;
    const bs_vk_dspark_desc *hp = &d->hp;
    const size_t row = 1 + 2 * BS_VK_TOP_MAX, B = (size_t)hp->block_size;
    if (n < 1 || n > hp->block_size || p->top_k < 1 || p->top_k > BS_VK_TOP_MAX || !(p->temp > 0.0f))
        return bs_error("Vulkan drafter: a sampled chain of %d slots, top-%d", n, p->top_k);
    if (!markov_here(d)) return bs_error("Vulkan drafter: no Markov head on the device");
    TRY(bs_vk_top_bufs_ready(d->c, &s->top, (uint32_t)hp->n_vocab, 1));
    if (!s->lists.buf && (bs_vk_buf_new(d->c, &s->unif, 4 * B, true) || bs_vk_buf_new(d->c, &s->lists, 4 * row * B, true))) {
        bs_vk_buf_free(d->c, &s->unif);
        return bs_error_prefix("Vulkan drafter's sampled chain: ");
    }
    return 0;
}

/* Slots 0..n-1 of a sampled chain from anchor with uniforms u into the recording. */
static int record_sampled_chain(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n, const bs_draw *p, const float *u) {
    memcpy(s->prev.map, &anchor, 4);   /* (host visible: read by the first slot's Markov row) */
    memcpy(s->unif.map, u, 4u * (size_t)n);
    for (int k = 0; k < n; k++) TRY(record_sampled(s, k, mask_id, p));
    return 0;
}

/* A submitted chain's predicted drafts and lists read back. */
static void chain_read(bs_vk_dctx *s, int n, int top_k, int32_t *pred, int32_t *ids, float *vals, int *counts) {
    const bs_vk_top_bufs t = {.topv = s->lists};   /* (topk.comp's rows, a slot's each) */
    memcpy(pred, s->drafts.map, 4u * (size_t)n);
    bs_vk_count_read(s->d->c, 4u * (size_t)n);
    for (int k = 0; k < n; k++)
        counts[k] = bs_vk_top_list(s->d->c, &t, (size_t)k, top_k, ids + (size_t)k * top_k, vals + (size_t)k * top_k);
}

int bs_vk_dctx_draft_sampled(bs_vk_dctx *s, int32_t anchor, int32_t mask_id, int n, const bs_draw *p, const float *u,
                             int32_t *drafts, int32_t *ids, float *vals, int *counts) {
    bs_vk_dspark *d = s->d;
    if (n > s->n_logits) return bs_error("Vulkan drafter: a sampled chain of %d from %d logits rows", n, s->n_logits);
    if (anchor < 0 || anchor >= d->hp.n_vocab || mask_id < 0 || mask_id >= d->hp.n_vocab)
        return bs_error("Vulkan drafter: token id out of range");
    TRY(chain_ready(s, n, p) || bs_vk_begin(d->c));
    const int rc = record_sampled_chain(s, anchor, mask_id, n, p, u);
    if (bs_vk_submit(d->c) || rc) return bs_error_prefix("Vulkan drafter's sampled chain: ");
    chain_read(s, n, p->top_k, drafts, ids, vals, counts);
    return 0;
}
