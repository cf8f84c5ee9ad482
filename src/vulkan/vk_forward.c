/* vk_forward.c: the qwen35 forward on the device (the CPU path's forward.c, deltanet.c and
 * attention.c, step for step): embeddings, per layer RMSNorm, the Gated DeltaNet mixer (four
 * products, causal conv + SiLU, L2-normed q/k, gates, the delta rule, gated RMSNorm, output
 * product) or gated attention (q+gate/k/v products, q/k RMSNorm, partial NeoX RoPE, F16 KV
 * cache, causal softmax with GQA, sigmoid gate, output product), residual adds, the SwiGLU FFN,
 * the final norm and the LM head. Weights and all state stay on the device; per submission
 * only tokens and the positions' rope table go up and logits (or taps) come back.
 *
 * Every kernel computes a row without looking at the others (recurrences run token by token
 * in order inside one invocation per channel / state row), so a row's result does not depend
 * on how many rows are evaluated together or how a batch is cut into submissions. */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* --- recording one chunk -------------------------------------------------------------------- */
typedef struct ew_push { uint32_t mode, n, p0, p1; } ew_push;
enum { EW_ADD, EW_SILU_MUL, EW_SIGMOID_GATE };


static int ew(bs_vk_ctx *c, int mode, const bs_vk_buf *a, const bs_vk_buf *b, const bs_vk_buf *cc, uint64_t n, uint32_t p0,
              uint32_t p1) {
    ew_push p = {(uint32_t)mode, (uint32_t)n, p0, p1};
    const bs_vk_buf *bb[3] = {a, b, cc};
    const uint32_t g = bs_vk_groups(n, 256), gx = BS_MIN(g, 65535u), gy = bs_vk_groups(g, gx);
    return bs_vk_dispatch(c, BS_VK_K_EW, bb, &p, gx, gy, 1);   /* the caller places the barrier */
}

/* groups of d: rows of row_stride, per_row heads of head_stride; mode 0 RMS, 1 L2 */
static int norm(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *w, const bs_vk_buf *y, uint32_t d, uint32_t n_groups,
                uint32_t per_row, uint32_t row_stride, uint32_t head_stride, uint32_t x_off, uint32_t y_off, int mode,
                float eps) {
    norm_push p = {d, (uint32_t)mode, w != NULL, per_row, row_stride, head_stride, x_off, y_off, eps, 0, 0, 0, 0.0f};
    const bs_vk_buf *bb[10] = {x, w, y};   /* NULL: unused (bs_vk_dispatch) */
    return bs_vk_dispatch(c, BS_VK_K_NORM, bb, &p, n_groups, 1, 1);   /* the caller places the barrier */
}

/* RMSNorm of n rows of the residual stream into xn, fused with the residual add of r before
 * it (NORM_ADD) and the int8 quantization of the result for the products that read it, with
 * rot the rows rotated into xrot by the products' fold first (NORM_ROT: the blocks then the
 * rotated rows'); the caller places the barrier (norm_rows: right after it). */
static int norm_rows_nb(bs_vk_sess *s, const bs_vk_buf *w, int n, uint32_t x_off, uint32_t y_off, const bs_vk_buf *r,
                        uint32_t flags, const bs_vk_rot *rot) {
    const uint32_t E = (uint32_t)s->net->hp.n_embd;
    norm_push p = {E, 0, 1, 1, E, 0, x_off, y_off, s->net->hp.eps, flags, 0, 0, 0.0f};
    if (rot) {
        p.flags |= NORM_ROT;
        p.rblock = rot->block;
        p.rsigns = rot->has_signs;
        p.rscale = rot->scale;
    }
    const bs_vk_buf *bb[10] = {&s->x, w, &s->xn, r, &s->aq, &s->as, &s->am, NULL,
                               rot ? &s->xrot : NULL, rot && rot->has_signs ? &rot->signs : NULL};
    return bs_vk_dispatch(s->net->c, rot ? BS_VK_K_NORM_ROT : BS_VK_K_NORM, bb, &p, (uint32_t)n, 1, 1);
}

static int norm_rows(bs_vk_sess *s, const bs_vk_buf *w, int n, uint32_t x_off, uint32_t y_off, const bs_vk_buf *r,
                     uint32_t flags, const bs_vk_rot *rot) {
    TRY(norm_rows_nb(s, w, n, x_off, y_off, r, flags, rot));
    bs_vk_barrier(s->net->c);
    return 0;
}

/* A folded model's layer whose input norm can rotate for its mixer's products W (norm.comp's
 * NORM_ROT): the fold they all carry, those with it in the layout (one dispatch reading the
 * rotated blocks), the others float products of x as it is (DeltaNet's alpha and beta); else
 * NULL (each fold rotated apart: mv_inputs_folded). BITSPARK_VK_NO_NORMROT=1: always NULL. */
static const bs_vk_rot *norm_rot_of(const bs_vk_net *net, const bs_vk_matrix *const *W, int nw) {
    const bs_vk_rot *r = NULL;
    if (!net->folded || net->no_normrot) return NULL;
    for (int i = 0; i < nw; i++) {
        if (!W[i]->rot) {
            if (W[i]->kernel != BS_VK_K_MV_F32 || W[i]->borrowed) return NULL;
            continue;
        }
        if ((r && W[i]->rot != r) || !W[i]->borrowed) return NULL;
        r = W[i]->rot;
    }
    return bs_vk_norm_rotates(r, (uint32_t)net->hp.n_embd) ? r : NULL;
}

static const bs_vk_rot *norm_rot_mix(const bs_vk_net *net, const vk_layer *L) {
    const bs_vk_matrix *rec[4] = {L->qkv, L->gate, L->beta, L->alpha}, *att[3] = {L->wq, L->wk, L->wv};
    return L->rec ? norm_rot_of(net, rec, 4) : norm_rot_of(net, att, 3);
}

/* The FFN's: where its gate and up share a fold and run as one GLU dispatch. */
static const bs_vk_rot *norm_rot_ffn(const bs_vk_net *net, const vk_layer *L) {
    const bs_vk_rot *r = L->ffn_gate->rot;
    return net->folded && !net->no_normrot && r && L->ffn_up->rot == r && bs_vk_glu_fusable(net->c, L->ffn_gate, L->ffn_up) &&
                   bs_vk_norm_rotates(r, (uint32_t)net->hp.n_embd)
               ? r
               : NULL;
}

/* The element-wise gate of x before a product (ew.comp's EW_SILU_MUL / EW_SIGMOID_GATE, g its
 * other operand, H and D the heads of EW_SIGMOID_GATE): folded into the product's quantizer. */
typedef struct mv_gate { int ew_mode; const bs_vk_buf *g; uint32_t H, D; } mv_gate;

/* y = W gate(x) for n rows (x at offset 0, width W->ne0; the gate, if any, applied to x in place,
 * or for a folded W without adapters as the rotation reads x). */
static int mv_gated(bs_vk_sess *s, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const bs_vk_buf *y, bool quantize,
                    const mv_gate *gt) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_buf *x0 = x;   /* LoRA terms read the float input */
    if (W->rot) {   /* a folded weight: x gated and rotated into xrot, with its int8 blocks, in one dispatch */
        if (gt && W->lora) {   /* (the LoRA terms read x gated: the gate on its own first) */
            TRY(ew(c, gt->ew_mode, x, gt->g, x, (uint64_t)n * W->ne0, gt->H, gt->D));
            bs_vk_barrier(c);
            gt = NULL;
        }
        const bool q = W->kernel != BS_VK_K_MV_F32;
        const int gm = !gt ? 0 : gt->ew_mode == EW_SILU_MUL ? 1 : 2;
        TRY(bs_vk_record_rotate_gated(c, W->rot, x, &s->xrot, n, q ? &s->aq : NULL, &s->as, &s->am, gm,
                                      gt ? gt->g : NULL, gt ? gt->H : 0, gt ? gt->D : 0));
        gt = NULL;
        bs_vk_barrier(c);
        x = &s->xrot;
        quantize = false;
    }
    const bool quant = W->kernel != BS_VK_K_MV_F32 && quantize;
    if (gt && !quant) {       /* a float product: the gate on its own */
        TRY(ew(c, gt->ew_mode, x, gt->g, x, (uint64_t)n * W->ne0, gt->H, gt->D));
        bs_vk_barrier(c);
    }
    if (quant) {
        const int qm = !gt ? 0 : gt->ew_mode == EW_SILU_MUL ? 1 : 2;
        TRY(bs_vk_record_quant_gated(c, x, gt ? gt->g : NULL, qm, gt ? gt->H : 0, gt ? gt->D : 0, &s->aq, &s->as, &s->am,
                                     (uint64_t)n * W->ne0 / 32));
        bs_vk_barrier(c);
    }
    if (W->act && !bs_vk_act_inline(c, W, n)) {
        TRY(bs_vk_record_act(c, W, x, &s->xr, n));
        bs_vk_barrier(c);
        x = &s->xr;
    }
    TRY(bs_vk_record_mv(c, W, x, &s->aq, &s->as, &s->am, n, y));
    return W->lora ? bs_vk_record_lora(c, W, x0, n, &s->lt, y) : 0;
}

static int mv(bs_vk_sess *s, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const bs_vk_buf *y, bool quantize) {
    return mv_gated(s, W, x, n, y, quantize, NULL);
}

/* A folded model's products of x (quantized by the norm that wrote it), none in a layout: the
 * plain ones first, reading those int8 blocks (or x rounded into xr), then for each fold among
 * the others x rotated into xrot and quantized once, which its products share (attention's q,
 * k and v; DeltaNet's qkv and gate; the FFN's gate and up). LoRA terms read x as it is. */
static int mv_inputs_folded(bs_vk_sess *s, const bs_vk_matrix *const *W, const bs_vk_buf *const *y, int nw,
                            const bs_vk_buf *x, int n) {
    bs_vk_ctx *c = s->net->c;
    bool any = false;
    for (int i = 0; i < nw; i++)
        if (!W[i]->rot) {
            if (W[i]->act && !bs_vk_act_inline(c, W[i], n) && any) bs_vk_barrier(c);   /* xr: the product before may still read it */
            TRY(mv(s, W[i], x, n, y[i], false));
            any = true;
        }
    for (int i = 0; i < nw; i++) {
        const bs_vk_rot *r = W[i]->rot;
        bool first = r != NULL;
        for (int k = 0; k < i && first; k++) first = W[k]->rot != r;
        if (!first) continue;   /* plain, or its fold done with an earlier product's */
        if (any) bs_vk_barrier(c);   /* xrot, aq and xr: the products before read them */
        bool quant = false;
        for (int k = i; k < nw; k++) quant |= W[k]->rot == r && W[k]->kernel != BS_VK_K_MV_F32;
        TRY(bs_vk_record_rotate_quant(c, r, x, &s->xrot, n, quant ? &s->aq : NULL, &s->as, &s->am));
        bs_vk_barrier(c);
        for (int k = i; k < nw; k++) {
            if (W[k]->rot != r) continue;
            const bs_vk_buf *in = &s->xrot;
            const bool act = W[k]->act && !bs_vk_act_inline(c, W[k], n);
            if (act) {   /* a float product that rounds its input as the CPU path does */
                TRY(bs_vk_record_act(c, W[k], &s->xrot, &s->xr, n));
                bs_vk_barrier(c);
                in = &s->xr;
            }
            TRY(bs_vk_record_mv(c, W[k], in, &s->aq, &s->as, &s->am, n, y[k]));
            if (W[k]->lora) TRY(bs_vk_record_lora(c, W[k], x, n, &s->lt, y[k]));
            if (act) bs_vk_barrier(c);   /* (the next one's rounding rewrites xr) */
        }
        any = true;
    }
    bs_vk_barrier(c);
    return 0;
}

/* Whether the int8 blocks of the norm that wrote x (rotated by rot, or not) are what each of
 * W reads: each carries rot or no fold (norm_rot_of: those without it then float products). */
static bool reads_normed(const bs_vk_matrix *const *W, int nw, const bs_vk_rot *rot) {
    for (int i = 0; i < nw; i++)
        if (W[i]->rot && W[i]->rot != rot) return false;
    return true;
}

/* Products sharing the input x (already quantized by the norm that wrote it, rotated by rot):
 * those in the layer's layout (cat) in one dispatch, their adapters' terms after it, the others
 * apart. With conv (window, weights, output: gdn_fused), the DeltaNet conv in the layout's
 * epilogue. */
static int mv_inputs(bs_vk_sess *s, const vk_layer *L, const bs_vk_matrix *const *W, const bs_vk_buf *const *y, int nw,
                     const bs_vk_buf *x, int n, const bs_vk_buf *const *conv, const bs_vk_rot *rot) {
    bs_vk_ctx *c = s->net->c;
    if (!reads_normed(W, nw, rot)) return mv_inputs_folded(s, W, y, nw, x, n);
    const bs_vk_matrix *cm[BS_VK_CAT_MAX];
    const bs_vk_buf *cy[BS_VK_CAT_MAX];
    int nc = 0;
    for (int i = 0; i < nw; i++)
        if (W[i]->borrowed) cm[nc] = W[i], cy[nc++] = y[i];
    if (nc && conv)
        TRY(bs_vk_record_mv_conv(c, L->cat, cm, nc, &s->aq, &s->as, &s->am, n, cy, conv[0], conv[1], conv[2],
                                 s->net->hp.conv_kernel, conv[3]));
    else if (nc) TRY(bs_vk_record_mv_cat(c, L->cat, cm, nc, &s->aq, &s->as, &s->am, n, cy));
    for (int i = 0; i < nc; i++)
        if (cm[i]->lora) TRY(bs_vk_record_lora(c, cm[i], x, n, &s->lt, cy[i]));
    bool quantized = true;
    int xr_act = 0;   /* how the float products before rounded x into xr (0: none yet) */
    for (int i = 0; i < nw; i++) {
        if (W[i]->borrowed) continue;
        if (i + 1 < nw && !s->net->no_pair && bs_vk_mv_pairs(c, W[i], W[i + 1], n)) {   /* (beta and alpha) */
            TRY(bs_vk_record_mv_pair(c, W[i], W[i + 1], x, n, y[i], y[i + 1]));
            i++;
            continue;
        }
        if (bs_vk_act_inline(c, W[i], n)) {   /* a float product rounding x as it reads it */
            TRY(bs_vk_record_mv(c, W[i], x, &s->aq, &s->as, &s->am, n, y[i]));
            if (W[i]->lora) TRY(bs_vk_record_lora(c, W[i], x, n, &s->lt, y[i]));
            continue;
        }
        const bool q = W[i]->kernel != BS_VK_K_MV_F32;
        if (W[i]->act && W[i]->act == xr_act) {   /* xr holds x rounded this way: read it again */
            TRY(bs_vk_record_mv(c, W[i], &s->xr, &s->aq, &s->as, &s->am, n, y[i]));
            if (W[i]->lora) TRY(bs_vk_record_lora(c, W[i], x, n, &s->lt, y[i]));
            continue;
        }
        if (W[i]->act && xr_act) bs_vk_barrier(c);   /* the products before still read xr */
        TRY(mv(s, W[i], x, n, y[i], q && !quantized));
        quantized |= q;
        if (W[i]->act) xr_act = W[i]->act;
    }
    bs_vk_barrier(c);
    return 0;
}

static int mv_shared(bs_vk_sess *s, const vk_layer *L, const bs_vk_matrix *const *W, const bs_vk_buf *const *y, int nw,
                     const bs_vk_buf *x, int n, const bs_vk_rot *rot) {
    return mv_inputs(s, L, W, y, nw, x, n, NULL, rot);
}

/* A layer's output product W d (n rows; q: d's int8 blocks), which the residual stream x takes.
 * With nw, where W allows it, added into x and x normed with nw and quantized into aq.. for the
 * next products in the same dispatch (s->normed = 1); with rot (the next norm's rotation,
 * norm_rot_mix/ffn), the normed rows rotated into xrot and the int8 blocks made from those;
 * else into y, which the caller adds and norms. Up to 8 rows (one row group: decode,
 * verification): the norming workgroup overwrites blocks of aq that, with more groups, another
 * group's product may still be reading. */
static int out_product(bs_vk_sess *s, const bs_vk_matrix *W, const bs_vk_buf *d, const bs_vk_buf *const *q, int n,
                       const bs_vk_buf *nw, const bs_vk_rot *rot) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    s->normed = nw && n <= 8 && !s->net->no_normo && bs_vk_norm_fusable(W) && W->ne1 == hp->n_embd && hp->n_embd % 32 == 0 &&
                (!rot || bs_vk_norm_rotates(rot, (uint32_t)hp->n_embd));
    if (s->normed) {
        const bs_vk_buf *qo[3] = {&s->aq, &s->as, &s->am};
        return bs_vk_record_mv_norm(c, W, q[0], q[1], q[2], n, &s->x, nw, hp->eps, &s->xn, qo, &s->cnt, rot, &s->xrot);
    }
    TRY(bs_vk_record_mv(c, W, d, q[0], q[1], q[2], n, &s->y));
    return W->lora ? bs_vk_record_lora(c, W, d, n, &s->lt, &s->y) : 0;
}

/* A layer's output product of gate(x) (mv_gated's) that a folded W takes as out_product: x gated,
 * rotated and quantized first, so that the residual, the norm nw and its rotation rot can come
 * in the product's epilogue; other products as mv_gated makes them, into y (s->normed = 0). */
static int out_gated(bs_vk_sess *s, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const mv_gate *gt, const bs_vk_buf *nw,
                     const bs_vk_rot *rot) {
    s->normed = 0;
    if (!W->rot || W->lora || W->act || W->kernel == BS_VK_K_MV_F32) return mv_gated(s, W, x, n, &s->y, true, gt);
    const int gm = !gt ? 0 : gt->ew_mode == EW_SILU_MUL ? 1 : 2;
    TRY(bs_vk_record_rotate_gated(s->net->c, W->rot, x, &s->xrot, n, &s->aq, &s->as, &s->am, gm, gt ? gt->g : NULL,
                                  gt ? gt->H : 0, gt ? gt->D : 0));
    bs_vk_barrier(s->net->c);
    const bs_vk_buf *q[3] = {&s->aq, &s->as, &s->am};
    return out_product(s, W, x, q, n, nw, rot);
}

static int embed(bs_vk_sess *s, int n) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_matrix *m = s->net->embd;
    const int k = bs_vk_rows_kernel(m);
    for (int i = 0; i < m->n_parts; i++) {
        const bs_vk_mat_part *p = &m->parts[i];
        uint32_t push[4] = {(uint32_t)p->rows, (uint32_t)m->ne0, (uint32_t)p->row0, (uint32_t)n};
        const bs_vk_buf *bb[4] = {&p->codes, &p->scales, &s->tok, &s->x};
        TRY(bs_vk_dispatch(c, k, bb, push, bs_vk_groups((uint64_t)m->ne0, 64), (uint32_t)n, 1));
    }
    bs_vk_barrier(c);
    if (m->rot) {   /* a folded table's rows rotated back, in place */
        TRY(bs_vk_record_rotate(c, m->rot, &s->x, &s->x, n));
        bs_vk_barrier(c);
    }
    return 0;
}


/* A recurrent state of layer L for a step of st (pair: the delta rule's, ssm / ssm_bak, or the
 * conv windows, conv / conv_bak): where it is updated, and, on the step after a snapshot, the
 * other buffer of the pair it is read from (*from_in 1; else *in is NULL, unused). */
static const bs_vk_buf *pair_bind(bs_vk_sess *st, bs_vk_buf *a, bs_vk_buf *b, const vk_layer *L, const bs_vk_buf **in,
                                  uint32_t *from_in) {
    bs_vk_buf *cur = st->pair_flip ? &b[L->slot] : &a[L->slot], *other = st->pair_flip ? &a[L->slot] : &b[L->slot];
    *from_in = st->snap == SNAP_PENDING;
    *in = *from_in ? cur : NULL;
    return *from_in ? other : cur;
}

static const bs_vk_buf *ssm_bind(bs_vk_sess *st, const vk_layer *L, const bs_vk_buf **in, uint32_t *from_in) {
    return pair_bind(st, st->ssm, st->ssm_bak, L, in, from_in);
}

static const bs_vk_buf *conv_bind(bs_vk_sess *st, const vk_layer *L, const bs_vk_buf **in, uint32_t *from_in) {
    return pair_bind(st, st->conv, st->conv_bak, L, in, from_in);
}

typedef struct gdn_rows { const bs_vk_buf *a, *cc, *ga, *gbeta, *d; } gdn_rows;
static gdn_rows rows_of(const bs_vk_sess *io) { return (gdn_rows){&io->a, &io->cc, &io->ga, &io->gbeta, &io->d}; }

/* The recurrence in two phases, each a dispatch per sequence: the conv over the sequence's window
 * with the L2 norms of its q and k heads (a -> cc), then the delta rule (cc, ga, gbeta -> d).
 * io holds the rows (a session's own, a batch's shared scratch with the sequence's rows from
 * r0, or a replay's record), st the sequence's state. */
static int gdn_conv(const gdn_rows *io, bs_vk_sess *st, const vk_layer *L, uint32_t r0, int n) {
    const bs_vk_net_desc *hp = &st->net->hp;
    const uint32_t nk = (uint32_t)hp->n_k_heads, dk = (uint32_t)hp->d_k, cd = (uint32_t)hp->conv_dim;
    struct { uint32_t cd, K, T, nqk, dk; float eps; uint32_t r0, from_in; } cp = {
        cd, (uint32_t)hp->conv_kernel, (uint32_t)n, 2 * nk, dk, hp->eps, r0, 0};
    const bs_vk_buf *in, *win = conv_bind(st, L, &in, &cp.from_in);
    const bs_vk_buf *cb[5] = {io->a, win, &L->conv1d, io->cc, in};
    return bs_vk_dispatch(st->net->c, BS_VK_K_CONV, cb, &cp, 2 * nk + bs_vk_groups(cd - 2 * nk * dk, 64), 1, 1);
}

static int gdn_delta(const gdn_rows *io, bs_vk_sess *st, const vk_layer *L, uint32_t r0, int n) {
    const bs_vk_net_desc *hp = &st->net->hp;
    const uint32_t nk = (uint32_t)hp->n_k_heads, nv = (uint32_t)hp->n_v_heads, dk = (uint32_t)hp->d_k, dv = (uint32_t)hp->d_v;
    struct { uint32_t nk, nv, dk, dv, T, cd; float scale; uint32_t r0, from_in; } dp = {
        nk, nv, dk, dv, (uint32_t)n, (uint32_t)hp->conv_dim, 1.0f / sqrtf((float)dk), r0, 0};
    const bs_vk_buf *in, *out = ssm_bind(st, L, &in, &dp.from_in);
    const bs_vk_buf *db[7] = {io->cc, io->ga, io->gbeta, out, io->d, &L->gates, in};
    return bs_vk_dispatch(st->net->c, BS_VK_K_DELTA, db, &dp, bs_vk_groups(dv, bs_vk_delta_cols(st->net->c)), nv, 1);
}

/* A step's recurrence inputs of layer L (rows r0..r0+n-1 of io's pre-conv rows, alpha and beta
 * rows, written by the products before the last barrier) copied into st's record, for a
 * rollback that replays only the recurrence (bs_vk_sess_replay) instead of the whole step. */
static void record_inputs(const bs_vk_sess *io, bs_vk_sess *st, const vk_layer *L, int r0, int n) {
    if (n > st->rp_rows) return;   /* (rp_rows 0: no record) */
    bs_vk_ctx *c = st->net->c;
    const VkDeviceSize cd = 4u * (VkDeviceSize)st->net->hp.conv_dim, nv = 4u * (VkDeviceSize)st->net->hp.n_v_heads;
    const VkDeviceSize at = (VkDeviceSize)L->slot * (VkDeviceSize)st->rp_rows, r = (VkDeviceSize)r0, m = (VkDeviceSize)n;
    const VkBufferCopy ra = {r * cd, at * cd, m * cd}, rg = {r * nv, at * nv, m * nv};
    bs_vk_cmd_copy(c, &io->a, &st->rp_a, &ra);
    bs_vk_cmd_copy(c, &io->ga, &st->rp_ga, &rg);
    bs_vk_cmd_copy(c, &io->gbeta, &st->rp_gb, &rg);
}

/* The same two phases for the sequences of a batch in one dispatch each (conv_b.comp,
 * delta_b.comp: workgroup z is the sequence, each its own window and state binding, rows and
 * snapshot flag in the push constants): the same workgroups as a dispatch per sequence, so the
 * same bits, without 2 (np - 1) dispatches per layer. */
enum { SEQ_BATCH = 8 };
_Static_assert(BS_VK_BATCH_ROWS < 65536 && BS_VK_BATCH_SEQS <= SEQ_BATCH * 64, "rows and counts in 16 bits");
typedef const bs_vk_buf *state_bind_fn(bs_vk_sess *st, const vk_layer *L, const bs_vk_buf **in, uint32_t *from_in);

/* Each sequence's state of L (bind: conv_bind or ssm_bind) into b: sequence 0's at s0 and its
 * snapshot read at in0, sequence i's at base + i and in_base + i; their rows into rt (r0 | n << 16).
 * Returns the sequences' from_in flags as a mask. */
static uint32_t seq_states(const vk_part *pt, int np, const vk_layer *L, state_bind_fn *bind, const bs_vk_buf **b, int s0,
                           int in0, int base, int in_base, uint32_t *rt) {
    uint32_t mask = 0;
    for (int i = 0; i < np; i++) {
        const bs_vk_buf *in;
        uint32_t from;
        b[i ? base + i : s0] = bind(pt[i].s, L, &in, &from);
        b[i ? in_base + i : in0] = in;
        mask |= from << i;
        rt[i] = (uint32_t)pt[i].r0 | (uint32_t)pt[i].n << 16;
    }
    return mask;
}

static int gdn_conv_batch(const bs_vk_sess *io, const vk_layer *L, const vk_part *pt, int np) {
    const bs_vk_net_desc *hp = &io->net->hp;
    const uint32_t nk = (uint32_t)hp->n_k_heads, dk = (uint32_t)hp->d_k, cd = (uint32_t)hp->conv_dim;
    struct { uint32_t cd, K, nqk, dk; float eps; uint32_t from_mask, rt[SEQ_BATCH]; } cp = {
        cd, (uint32_t)hp->conv_kernel, 2 * nk, dk, hp->eps, 0, {0}};
    const bs_vk_buf *cb[19] = {&io->a, NULL, &L->conv1d, &io->cc, NULL};   /* NULL: unused (bs_vk_dispatch) */
    cp.from_mask = seq_states(pt, np, L, conv_bind, cb, 1, 4, 4, 11, cp.rt);
    return bs_vk_dispatch(io->net->c, BS_VK_K_CONV_B, cb, &cp, 2 * nk + bs_vk_groups(cd - 2 * nk * dk, 64), 1, (uint32_t)np);
}

static int gdn_delta_batch(const bs_vk_sess *io, const vk_layer *L, const vk_part *pt, int np) {
    const bs_vk_net_desc *hp = &io->net->hp;
    const uint32_t nk = (uint32_t)hp->n_k_heads, nv = (uint32_t)hp->n_v_heads, dk = (uint32_t)hp->d_k, dv = (uint32_t)hp->d_v;
    struct { uint32_t nk, nv, dk, dv, cd; float scale; uint32_t from_mask, rt[SEQ_BATCH]; } dp = {
        nk, nv, dk, dv, (uint32_t)hp->conv_dim, 1.0f / sqrtf((float)dk), 0, {0}};
    const bs_vk_buf *db[21] = {&io->cc, &io->ga, &io->gbeta, NULL, &io->d, &L->gates, NULL};
    dp.from_mask = seq_states(pt, np, L, ssm_bind, db, 3, 6, 6, 13, dp.rt);
    return bs_vk_dispatch(io->net->c, BS_VK_K_DELTA_B, db, &dp, bs_vk_groups(dv, bs_vk_delta_cols(io->net->c)), nv, (uint32_t)np);
}

/* pt: NULL for a session's own step of n rows, else a batch's sequences, which touch disjoint
 * rows and states: all their convs, one barrier, all their delta rules, one barrier (each phase
 * one dispatch for up to 8 sequences where the net takes them together, else one per sequence). */
static int deltanet_core(bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt, int np) {
    const vk_part self = {.s = s, .n = n};
    if (!pt) pt = &self, np = 1;
    const bool together = np > 1 && s->net->seq_together;
    const gdn_rows io = rows_of(s);
    for (int i = 0; i < np; i++) record_inputs(s, pt[i].s, L, pt[i].r0, pt[i].n);
    for (int i = 0; i < np; i += together ? SEQ_BATCH : 1)
        TRY(together ? gdn_conv_batch(s, L, pt + i, BS_MIN(SEQ_BATCH, np - i)) : gdn_conv(&io, pt[i].s, L, (uint32_t)pt[i].r0, pt[i].n));
    bs_vk_barrier(s->net->c);
    for (int i = 0; i < np; i += together ? SEQ_BATCH : 1)
        TRY(together ? gdn_delta_batch(s, L, pt + i, BS_MIN(SEQ_BATCH, np - i)) : gdn_delta(&io, pt[i].s, L, (uint32_t)pt[i].r0, pt[i].n));
    bs_vk_barrier(s->net->c);
    return 0;
}

/* Whether this step's recurrence can run fused (gdn_fused): a session's own step of up to 8 rows
 * (the products' one row group holds all rows of a channel; a batch's sequences each have their
 * own window), the products reading the norm's blocks, qkv first in the layout without adapters
 * (their terms come after the product), shapes the kernels hold, and an integer output product
 * that reads int8 blocks (a folded one: the gated rows rotated and quantized after the recurrence). */
static bool gdn_fusable(const bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt) {
    const bs_vk_net_desc *hp = &s->net->hp;
    const bs_vk_matrix *q = L->qkv, *Wo = L->ssm_out;
    const bs_vk_matrix *W[4] = {L->qkv, L->gate, L->beta, L->alpha};
    return !pt && n <= 8 && !s->net->no_gdnf && reads_normed(W, 4, s->rot_mix) && L->cat && bs_vk_conv_fusable(L->cat) && q->borrowed && q->rbase == 0 &&
           !q->lora && q->ne1 == hp->conv_dim && hp->conv_kernel >= 1 && hp->conv_kernel <= 9 && hp->d_k <= 256 &&
           hp->d_v <= 256 && hp->d_v % 32 == 0 && Wo->kernel != BS_VK_K_MV_F32 && !Wo->act;
}

/* The layer in three dispatches and barriers (the steps apart take five): the products with the
 * conv in their epilogue (mv_q.glsl's CONV), then the q/k L2 norms and the delta rule (a workgroup
 * per bs_vk_delta_cols state columns of a V head) with the gated RMSNorm and ssm_out's int8 blocks
 * by each head's last workgroup (delta_norm.comp, its counters in dcnt), then ssm_out.
 * The same float operations in the same order as the steps apart, so the same bits. */
static int gdn_fused(bs_vk_sess *s, const vk_layer *L, int n) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    const uint32_t nk = (uint32_t)hp->n_k_heads, nv = (uint32_t)hp->n_v_heads, dk = (uint32_t)hp->d_k, dv = (uint32_t)hp->d_v;
    const bs_vk_matrix *W[4] = {L->qkv, L->gate, L->beta, L->alpha};
    uint32_t win_from_in;
    const bs_vk_buf *win_in, *win = conv_bind(s, L, &win_in, &win_from_in);
    const bs_vk_buf *Y[4] = {&s->a, &s->b, &s->gbeta, &s->ga}, *cv[4] = {win, &L->conv1d, &s->cc, win_from_in ? win_in : NULL};
    TRY(mv_inputs(s, L, W, Y, 4, &s->xn, n, cv, s->rot_mix));
    record_inputs(s, s, L, 0, n);
    /* a folded ssm_out: its input rotated by delta_norm's last heads where it can (rot) */
    const bs_vk_rot *r = L->ssm_out->rot, *rot = !s->net->no_normrot && bs_vk_heads_rotate(r, nv, dv) ? r : NULL;
    struct { uint32_t nk, nv, dk, dv, T, cd; float scale, eps; uint32_t from_in, rblock, rsigns; float rscale; uint32_t hd, rnk, rrep; } dp = {
        nk, nv, dk, dv, (uint32_t)n, (uint32_t)hp->conv_dim, 1.0f / sqrtf((float)dk), hp->eps, 0,
        rot ? rot->block : 0, rot && rot->has_signs, rot ? rot->scale : 0.0f, rot ? rot->hd : 0, rot ? rot->nk : 0, rot ? rot->rep : 0};
    const bs_vk_buf *in, *out = ssm_bind(s, L, &in, &dp.from_in);
    const bs_vk_buf *db[16] = {&s->cc, &s->ga, &s->gbeta, out, &s->d, &L->gates, &L->ssm_norm, &s->b,
                               &s->aq, &s->as, &s->am, &s->dcnt, in, rot ? &s->xrot : NULL,
                               rot && rot->has_signs ? &rot->signs : NULL, rot ? &s->cnt : NULL};
    TRY(bs_vk_dispatch(c, rot ? BS_VK_K_DELTA_NORM_ROT : BS_VK_K_DELTA_NORM, db, &dp, nv * bs_vk_groups(dv, bs_vk_delta_cols(c)), 1, 1));
    bs_vk_barrier(c);
    if (r && !rot) {   /* (the blocks delta_norm made are the unrotated rows': remade) */
        TRY(bs_vk_record_rotate_quant(c, L->ssm_out->rot, &s->d, &s->xrot, n, &s->aq, &s->as, &s->am));
        bs_vk_barrier(c);
    }
    const bs_vk_buf *q[3] = {&s->aq, &s->as, &s->am};
    TRY(out_product(s, L->ssm_out, &s->d, q, n, &L->post_norm, s->rot_ffn));
    bs_vk_barrier(c);
    return 0;
}

/* pt: NULL for a session's own step, else the sequences of a batch (s is its shared scratch) */
static int deltanet(bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt, int np) {
    s->normed = 0;
    if (gdn_fusable(s, L, n, pt)) return gdn_fused(s, L, n);
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    const uint32_t nv = (uint32_t)hp->n_v_heads, dv = (uint32_t)hp->d_v;
    const bs_vk_matrix *W[4] = {L->qkv, L->gate, L->beta, L->alpha};
    const bs_vk_buf *Y[4] = {&s->a, &s->b, &s->gbeta, &s->ga};
    TRY(mv_shared(s, L, W, Y, 4, &s->xn, n, s->rot_mix));   /* the delta rule makes its gates from ga, gbeta */
    TRY(deltanet_core(s, L, n, pt, np));
    /* gated RMSNorm per head: d = silu(z) * (rmsnorm(d) * ssm_norm); for an integer product the
     * gate and the int8 quantization in the norm's dispatch, else the gate in the product's */
    const bs_vk_matrix *Wo = L->ssm_out;
    if (Wo->kernel != BS_VK_K_MV_F32 && !Wo->act && !Wo->rot && dv % 32 == 0) {
        norm_push p = {dv, 0, 1, nv, nv * dv, dv, 0, 0, hp->eps, NORM_GATE | NORM_QUANT, 0, 0, 0.0f};
        const bs_vk_buf *bb[10] = {&s->d, &L->ssm_norm, &s->d, NULL, &s->aq, &s->as, &s->am, &s->b};
        TRY(bs_vk_dispatch(c, BS_VK_K_NORM, bb, &p, (uint32_t)n * nv, 1, 1));
        bs_vk_barrier(c);
        const bs_vk_buf *q[3] = {&s->aq, &s->as, &s->am};
        TRY(out_product(s, Wo, &s->d, q, n, &L->post_norm, s->rot_ffn));
    } else {
        TRY(norm(c, &s->d, &L->ssm_norm, &s->d, dv, (uint32_t)n * nv, nv, nv * dv, dv, 0, 0, 0, hp->eps));
        bs_vk_barrier(c);
        const mv_gate silu_z = {EW_SILU_MUL, &s->b, 0, 0};
        TRY(out_gated(s, Wo, &s->d, n, &silu_z, &L->post_norm, s->rot_ffn));
    }
    bs_vk_barrier(c);
    return 0;
}

/* attention's q/k RMSNorm per head then RoPE as steps apart (BITSPARK_VK_NO_QK=1): q heads
 * (stride 2D in rows of 2HD), k heads (D in rows of Hkv*D); a batch's rope table holds every
 * sequence's rows, so a batch runs them on its shared scratch */
static int qk_apart(bs_vk_sess *s, const vk_layer *L, int n) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    const uint32_t H = (uint32_t)hp->n_head, Hkv = (uint32_t)hp->n_head_kv, D = (uint32_t)hp->head_dim;
    TRY(norm(c, &s->a, &L->q_norm, &s->a, D, (uint32_t)n * H, H, 2 * H * D, 2 * D, 0, 0, 0, hp->eps));
    TRY(norm(c, &s->b, &L->k_norm, &s->b, D, (uint32_t)n * Hkv, Hkv, Hkv * D, D, 0, 0, 0, hp->eps));
    bs_vk_barrier(c);   /* one for both: the two norms touch different buffers */
    if (hp->n_rot > 0) {
        uint32_t rq[4] = {H, 2 * D, 2 * H * D, (uint32_t)hp->n_rot}, rk[4] = {Hkv, D, Hkv * D, (uint32_t)hp->n_rot};
        const bs_vk_buf *bq[2] = {&s->a, &s->rope}, *bk[2] = {&s->b, &s->rope};
        TRY(bs_vk_dispatch(c, BS_VK_K_ROPE, bq, rq, bs_vk_groups((uint64_t)hp->n_rot / 2, 64), (uint32_t)n * H, 1));
        TRY(bs_vk_dispatch(c, BS_VK_K_ROPE, bk, rk, bs_vk_groups((uint64_t)hp->n_rot / 2, 64), (uint32_t)n * Hkv, 1));
        bs_vk_barrier(c);
    }
    return 0;
}

/* One sequence's attention over its own cache (st: its session) from the rows of io (a session's
 * own, or a batch's shared scratch with the sequence's rows from r0): q and gate (a), k (b), v (cc)
 * into d, and, with quant, gated and quantized into io's int8 blocks. Two phases, each a dispatch:
 * attn_prep, the q/k norms, rope and KV store of its positions (qk.comp; kv_store.comp alone
 * with BITSPARK_VK_NO_QK, which norms and ropes them earlier), left to the attention's own
 * dispatch for up to 8 rows (returns 0 then, else 1); attn_main, the softmax. */
static bool attn_fused(const bs_vk_sess *st, int n) { return !st->net->no_qk && !st->net->no_attf && n <= 8; }

static int attn_prep(const bs_vk_sess *io, bs_vk_sess *st, const vk_layer *L, uint32_t r0, int n) {
    const bs_vk_net_desc *hp = &st->net->hp;
    const uint32_t H = (uint32_t)hp->n_head, Hkv = (uint32_t)hp->n_head_kv, D = (uint32_t)hp->head_dim;
    if (attn_fused(st, n)) return 0;
    if (!st->net->no_qk) {
        qk_push qp = {
            H, Hkv, D, (uint32_t)hp->n_rot, r0, st->kv_f32, hp->eps, 1};
        const bs_vk_buf *qb[9] = {&io->a, &io->b, &io->cc, &L->q_norm, &L->k_norm, &io->rope, &st->kc[L->slot], &st->vc[L->slot], &st->params};
        TRY(bs_vk_dispatch(st->net->c, BS_VK_K_QK, qb, &qp, (uint32_t)n * (H + Hkv), 1, 1));
        return 1;
    }
    uint32_t kp[3] = {Hkv * D, st->kv_f32, r0};
    const bs_vk_buf *kb[5] = {&io->b, &io->cc, &st->kc[L->slot], &st->vc[L->slot], &st->params};
    TRY(bs_vk_dispatch(st->net->c, BS_VK_K_KV_STORE, kb, kp, bs_vk_groups((uint64_t)Hkv * D / 2, 64), (uint32_t)n, 1));
    return 1;
}

/* rot: the output product's fold, which the split attention's epilogue rotates by (attn_rotates) */
static int attn_main(const bs_vk_sess *io, bs_vk_sess *st, const vk_layer *L, uint32_t r0, int n, bool quant, const bs_vk_rot *rot) {
    bs_vk_ctx *c = st->net->c;
    const bs_vk_net_desc *hp = &st->net->hp;
    const uint32_t H = (uint32_t)hp->n_head, Hkv = (uint32_t)hp->n_head_kv, D = (uint32_t)hp->head_dim;
    struct { uint32_t H, Hkv, D, n_ctx; float scale; uint32_t f32, quant, qrow0, fused, n_rot; float eps; uint32_t chunk, n_chunk, rblock, rsigns; float rscale; } ap = {
        H, Hkv, D, (uint32_t)st->n_ctx, 1.0f / sqrtf((float)D), st->kv_f32, quant, r0, attn_fused(st, n), (uint32_t)hp->n_rot, hp->eps,
        (uint32_t)st->net->attn_chunk, (uint32_t)st->n_chunk, rot ? rot->block : 0, rot && rot->has_signs, rot ? rot->scale : 0.0f};
    const bs_vk_buf *ab[19] = {&io->a, &st->kc[L->slot], &st->vc[L->slot], &io->d, &st->scores, &st->params, &io->aq, &io->as, &io->am,
                               &io->b, &io->cc, &L->q_norm, &L->k_norm, &io->rope, &st->apart, &st->acnt,
                               rot ? &io->xrot : NULL, rot && rot->has_signs ? &rot->signs : NULL, rot ? &io->cnt : NULL};
    if (rot && st->n_chunk <= 0) return bs_error("Vulkan: attention's rotation needs the split kernel");
    /* split over the context (attn_split.comp): a workgroup per (chunk, row, KV head), the
       chunks counted per step (attn_split_groups: a recorded step runs again later); else attn.comp */
    if (st->n_chunk > 0) return bs_vk_dispatch_indirect(c, BS_VK_K_ATTN_SPLIT, ab, &ap, &st->params, ATTN_GROUPS);
    return bs_vk_dispatch(c, BS_VK_K_ATTN, ab, &ap, (uint32_t)n * H, 1, 1);
}

/* Whether the output gate and the int8 blocks of the output product go in attention's epilogue. */
static bool attn_quant(const bs_vk_sess *s, const vk_layer *L) {
    const bs_vk_matrix *Wo = L->wo;
    return Wo->kernel != BS_VK_K_MV_F32 && !Wo->act && !Wo->rot && s->net->hp.head_dim % 32 == 0 && !s->net->no_attq;
}

/* A folded output product's fold, where the split attention's epilogue can rotate its input by
 * it (a session's own step of up to 8 rows: the counters; blocks the kernel's shared memory
 * holds, of whole 32-blocks, no regrouping); else NULL. */
static const bs_vk_rot *attn_rotates(const bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt) {
    const bs_vk_matrix *Wo = L->wo;
    const bs_vk_rot *r = Wo->rot;
    const uint32_t W = (uint32_t)(s->net->hp.n_head * s->net->hp.head_dim);
    return r && !pt && n <= BS_VK_EPI_ROWS && s->n_chunk > 0 && Wo->kernel != BS_VK_K_MV_F32 && !Wo->act && !Wo->lora &&
                   s->net->hp.head_dim % 32 == 0 && !s->net->no_attq && !s->net->no_normrot && bs_vk_norm_rotates(r, W) &&
                   r->block >= 32
               ? r
               : NULL;
}

/* A batch's split attentions ATT_BATCH sequences to a dispatch (attn_split_b.comp: workgroup z
 * the sequence; its cache, scores, positions and partials bound apart, its rows and context in
 * the push constants, the counters the batch scratch's, a pair per row): where every sequence
 * splits its attention, the net takes sequences together and the device allows the bindings.
 * The same workgroups as a dispatch per sequence (those past a sequence's rows or chunks
 * return), so the same bits. */
static bool attn_together(const bs_vk_sess *io, const vk_part *pt, int np) {
    if (np < 2 || !io->net->seq_together || io->net->c->info.max_storage < BS_VK_PIPE_MAX_BIND) return false;
    for (int i = 0; i < np; i++)
        if (pt[i].s->n_chunk == 0) return false;
    return true;
}

static int attn_main_batch(bs_vk_sess *io, const vk_layer *L, const vk_part *pt, int np, uint32_t grp, bool quant) {
    const bs_vk_net_desc *hp = &io->net->hp;
    const uint32_t D = (uint32_t)hp->head_dim;
    struct { uint32_t H, Hkv, D; float scale; uint32_t quant, n_rot; float eps; uint32_t chunk, flags, rt[ATT_BATCH], n_ctx[ATT_BATCH]; } ap = {
        (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv, D, 1.0f / sqrtf((float)D), quant, (uint32_t)hp->n_rot, hp->eps,
        (uint32_t)io->net->attn_chunk, 0, {0}, {0}};
    const bs_vk_buf *ab[BS_VK_PIPE_MAX_BIND] = {&io->a, NULL, NULL, &io->d, NULL, NULL, &io->aq, &io->as, &io->am, &io->b,
                                               &io->cc, &L->q_norm, &L->k_norm, &io->rope, NULL, &io->acnt};
    for (int i = 0; i < np; i++) {   /* sequence 0's where attn_split.comp has them, i's from 15 + i */
        bs_vk_sess *st = pt[i].s;
        ab[i ? 15 + i : 1] = &st->kc[L->slot];
        ab[i ? 18 + i : 2] = &st->vc[L->slot];
        ab[i ? 21 + i : 4] = &st->scores;
        ab[i ? 24 + i : 5] = &st->params;
        ab[i ? 27 + i : 14] = &st->apart;
        ap.flags |= (uint32_t)st->kv_f32 << i | (uint32_t)attn_fused(st, pt[i].n) << (8 + i);
        ap.rt[i] = (uint32_t)pt[i].r0 | (uint32_t)pt[i].n << 16;
        ap.n_ctx[i] = (uint32_t)st->n_ctx;
    }
    return bs_vk_dispatch_indirect(io->net->c, BS_VK_K_ATTN_SPLIT_B, ab, &ap, &io->agrp, 16u * grp);
}

/* pt: NULL for a session's own step of n rows, else a batch's sequences (disjoint rows and
 * caches): every sequence's first phase, a barrier where there was one, every softmax (a
 * dispatch per sequence, or per ATT_BATCH of them), a barrier. */
static int attention_core(bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt, int np, bool quant, const bs_vk_rot *rot) {
    const vk_part self = {.s = s, .n = n};
    if (!pt) pt = &self, np = 1;
    int prep = 0;
    for (int i = 0; i < np; i++) {
        const int rc = attn_prep(s, pt[i].s, L, (uint32_t)pt[i].r0, pt[i].n);
        if (rc < 0) return -1;
        prep |= rc;
    }
    if (prep) bs_vk_barrier(s->net->c);
    if (pt != &self && attn_together(s, pt, np)) {
        for (int i = 0; i < np; i += ATT_BATCH) TRY(attn_main_batch(s, L, pt + i, BS_MIN(ATT_BATCH, np - i), (uint32_t)(i / ATT_BATCH), quant));
    } else {
        for (int i = 0; i < np; i++) TRY(attn_main(s, pt[i].s, L, (uint32_t)pt[i].r0, pt[i].n, quant, rot));
    }
    bs_vk_barrier(s->net->c);
    return 0;
}

static int attention(bs_vk_sess *s, const vk_layer *L, int n, const vk_part *pt, int np) {
    const bs_vk_net_desc *hp = &s->net->hp;
    const uint32_t H = (uint32_t)hp->n_head, D = (uint32_t)hp->head_dim;
    const bs_vk_matrix *W[3] = {L->wq, L->wk, L->wv};
    const bs_vk_buf *Y[3] = {&s->a, &s->b, &s->cc};
    TRY(mv_shared(s, L, W, Y, 3, &s->xn, n, s->rot_mix));
    if (s->net->no_qk) TRY(qk_apart(s, L, n));
    const bs_vk_rot *ar = attn_rotates(s, L, n, pt);   /* (and rotated by its last groups) */
    const bool aq = ar || attn_quant(s, L);
    TRY(attention_core(s, L, n, pt, np, aq, ar));
    s->normed = 0;
    if (aq) {   /* d gated and quantized by the attention's epilogue */
        const bs_vk_buf *q[3] = {&s->aq, &s->as, &s->am};
        TRY(out_product(s, L->wo, &s->d, q, n, &L->post_norm, s->rot_ffn));
    } else {
        const mv_gate sig = {EW_SIGMOID_GATE, &s->a, H, D};   /* d *= sigmoid(gate half of a) */
        TRY(out_gated(s, L->wo, &s->d, n, &sig, &L->post_norm, s->rot_ffn));
    }
    bs_vk_barrier(s->net->c);
    return 0;
}

/* nw: the next layer's input norm, which the down product may take (s->normed), rotating by rot */
static int ffn(bs_vk_sess *s, const vk_layer *L, int n, const bs_vk_buf *nw, const bs_vk_rot *rot) {
    bs_vk_ctx *c = s->net->c;
    s->normed = 0;
    const bs_vk_matrix *Wd = L->ffn_down;
    const bs_vk_rot *r = L->ffn_gate->rot;
    if (s->rot_ffn || (r && L->ffn_up->rot == r && bs_vk_glu_fusable(c, L->ffn_gate, L->ffn_up))) {
        /* a folded GLU: xn rotated and quantized (by the norm: rot_ffn), both products and SiLU
           in one dispatch, with the down product's input rotated by the blocks' last workgroups
           (bs_vk_glu_rotates; else on its own) */
        if (!s->rot_ffn) {
            TRY(bs_vk_record_rotate_quant(c, r, &s->xn, &s->xrot, n, &s->aq, &s->as, &s->am));
            bs_vk_barrier(c);
        }
        const bs_vk_buf *q2[3] = {&s->aq2, &s->as2, &s->am2};
        if (!s->net->no_gluq && !s->net->no_normrot && Wd->rot && !Wd->lora && !Wd->act && Wd->kernel != BS_VK_K_MV_F32 &&
            bs_vk_glu_rotates(L->ffn_gate, Wd->rot, n)) {
            TRY(bs_vk_record_glu_rot(c, L->ffn_gate, L->ffn_up, &s->aq, &s->as, &s->am, n, &s->a, q2, Wd->rot, &s->xrot, &s->cnt));
            bs_vk_barrier(c);
            TRY(out_product(s, Wd, &s->a, q2, n, nw, rot));
        } else {
            TRY(bs_vk_record_glu(c, L->ffn_gate, L->ffn_up, &s->aq, &s->as, &s->am, n, &s->a, NULL));
            bs_vk_barrier(c);
            TRY(out_gated(s, Wd, &s->a, n, NULL, nw, rot));
        }
        bs_vk_barrier(c);
        return 0;
    }
    if (!r && !L->ffn_up->rot && bs_vk_glu_fusable(c, L->ffn_gate, L->ffn_up)) {   /* xn is quantized by the norm */
        /* the down product's int8 blocks in the GLU's epilogue, into the second set */
        const bool qo = Wd->kernel != BS_VK_K_MV_F32 && !Wd->act && !Wd->rot && L->ffn_gate->ne1 % 32 == 0 && !s->net->no_gluq;
        const bs_vk_buf *q2[3] = {&s->aq2, &s->as2, &s->am2};
        TRY(bs_vk_record_glu(c, L->ffn_gate, L->ffn_up, &s->aq, &s->as, &s->am, n, &s->a, qo ? q2 : NULL));
        bs_vk_barrier(c);
        if (qo) {
            TRY(out_product(s, Wd, &s->a, q2, n, nw, rot));
        } else {
            TRY(mv(s, Wd, &s->a, n, &s->y, true));
        }
        bs_vk_barrier(c);
        return 0;
    }
    const bs_vk_matrix *W[2] = {L->ffn_gate, L->ffn_up};
    const bs_vk_buf *Y[2] = {&s->a, &s->b};
    TRY(mv_shared(s, L, W, Y, 2, &s->xn, n, NULL));
    TRY(ew(c, EW_SILU_MUL, &s->a, &s->a, &s->b, (uint64_t)n * s->net->hp.n_ff, 0, 0));
    bs_vk_barrier(c);
    TRY(out_gated(s, Wd, &s->a, n, NULL, nw, rot));
    bs_vk_barrier(c);
    return 0;
}

static bool tapped_at(const int *taps, int n_taps, int il) {
    for (int k = 0; k < n_taps; k++)
        if (taps[k] == il) return true;
    return false;
}

/* Rows row0..row0+n-1 of the residual stream x into tap slot k of a session's tap rows. */
static void copy_taps(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *taps, int row0, int n, int n_taps, int k, uint32_t E) {
    for (int t = 0; t < n; t++) {
        VkBufferCopy r = {4u * (VkDeviceSize)(row0 + t) * E, 4u * ((VkDeviceSize)t * n_taps + k) * E, 4u * E};
        bs_vk_cmd_copy(c, x, taps, &r);
    }
}

/* After layer il: the taps that layer feeds (each sequence's into its own session); whether any. */
static bool record_taps(bs_vk_sess *s, int il, int n, const int *taps, int n_taps, const vk_part *pt, int np) {
    bs_vk_ctx *c = s->net->c;
    const uint32_t E = (uint32_t)s->net->hp.n_embd;
    bool any = false;
    for (int i = 0; i < (pt ? np : 1); i++) {
        const int *tp = pt ? pt[i].taps : taps, nt = pt ? pt[i].n_taps : n_taps;
        for (int k = 0; k < nt; k++)
            if (tp[k] == il) {
                if (pt) copy_taps(c, &s->x, &pt[i].s->taps, pt[i].r0, pt[i].n, nt, k, E);
                else copy_taps(c, &s->x, &s->taps, 0, n, nt, k, E);
                any = true;
            }
    }
    if (any) bs_vk_barrier(c);
    return any;
}

/* A folded head's fold, where the final norm rotates for it (its LoRA terms would read xn, its
 * rounding xrot); else NULL. */
static const bs_vk_rot *head_rot(const bs_vk_sess *s) {
    const bs_vk_matrix *W = s->net->output;
    return s->net->folded && !s->net->no_normrot && !W->lora && !W->act && bs_vk_norm_rotates(W->rot, (uint32_t)s->net->hp.n_embd)
               ? W->rot
               : NULL;
}

/* The final norm and LM head: the last logits_rows rows of a step, or each sequence's last
 * n_logit rows of a batch, normed into xn from row 0 on, one product over them all. normed: a
 * step's rows (all of them) normed already by the last down product's epilogue. */
static int record_logits(bs_vk_sess *s, int n, int logits_rows, const vk_part *pt, int np, bool normed) {
    const uint32_t E = (uint32_t)s->net->hp.n_embd;
    const bs_vk_matrix *W = s->net->output;
    const bs_vk_rot *hr = head_rot(s);
    int k = 0;
    if (!pt && logits_rows > 0) {
        if (!normed) TRY(norm_rows(s, &s->net->out_norm, logits_rows, (uint32_t)(n - logits_rows) * E, 0, NULL, NORM_QUANT, hr));
        k = logits_rows;
    }
    for (int i = 0; pt && i < np; i++)   /* each its own rows: one barrier after them all */
        if (pt[i].n_logit > 0) {
            const uint32_t first = (uint32_t)(pt[i].r0 + pt[i].n - pt[i].n_logit);
            TRY(norm_rows_nb(s, &s->net->out_norm, pt[i].n_logit, first * E, (uint32_t)k * E, NULL, NORM_QUANT, hr));
            k += pt[i].n_logit;
        }
    if (!k) return 0;
    if (pt) bs_vk_barrier(s->net->c);
    TRY(hr ? bs_vk_record_mv(s->net->c, W, &s->xrot, &s->aq, &s->as, &s->am, k, &s->logits)
           : mv(s, W, &s->xn, k, &s->logits, false));
    if (s->greedy) {
        bs_vk_barrier(s->net->c);
        const uint32_t V = (uint32_t)s->net->hp.n_vocab;
        /* feed: the token the step submitted after this one embeds, in the other set */
        TRY(bs_vk_record_argmax(s->net->c, &s->amax, &s->logits, V, (uint32_t)k, &s->ids, s->feed ? &s->tok_alt : NULL));
    }
    if (s->topk <= 0) return 0;
    TRY(bs_vk_record_topk(s, (uint32_t)s->topk, (uint32_t)k));
    if (!s->draw) return 0;
    /* the draw predicted from the list, fed: the token the step submitted after this one embeds */
    bs_vk_barrier(s->net->c);   /* (in bs_sampler_pick's order: the list's) */
    return bs_vk_record_draw(s->net->c, &s->top, (uint32_t)s->topk, s->draw, false, &s->unif, 0, &s->tok_alt, &s->ids);
}

/* Everything of one step of n rows but its per-step values (tokens, rope table, positions in
 * the params buffer), so that the recording can be submitted again for every step of that shape.
 * pt: a batch's sequences (s is then its shared scratch; taps and logits rows are theirs). */
int bs_vk_record_chunk(bs_vk_sess *s, int n, int logits_rows, const int *taps, int n_taps, const vk_part *pt, int np) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    const uint32_t E = (uint32_t)hp->n_embd;
    if (!s->rows_in) TRY(embed(s, n));
    bool pending = false;         /* the FFN's output still to be added (in the next norm) */
    bool normed = false;          /* x holds the residual stream with the FFN's output, normed */
    /* the final norm in the last down product's epilogue: a session's step whose rows all take logits */
    const bool fin = !pt && logits_rows == n && !s->net->no_normfin;
    for (int il = 0; il < hp->n_layer; il++) {
        const vk_layer *L = &s->net->L[il];
        s->rot_mix = norm_rot_mix(s->net, L);
        s->rot_ffn = norm_rot_ffn(s->net, L);
        if (!normed) TRY(norm_rows(s, &L->attn_norm, n, 0, 0, &s->y, NORM_QUANT | (pending ? NORM_ADD : 0), s->rot_mix));
        TRY(L->rec ? deltanet(s, L, n, pt, np) : attention(s, L, n, pt, np));
        if (!s->normed) TRY(norm_rows(s, &L->post_norm, n, 0, 0, &s->y, NORM_QUANT | NORM_ADD, s->rot_ffn));
        /* the next layer's input norm (or the final one) in the down product's epilogue */
        const vk_layer *next = il + 1 < hp->n_layer ? &s->net->L[il + 1] : NULL;
        TRY(ffn(s, L, n, next ? &next->attn_norm : fin ? &s->net->out_norm : NULL,
                next ? norm_rot_mix(s->net, next) : fin ? head_rot(s) : NULL));
        normed = s->normed;
        bool tapped = tapped_at(taps, n_taps, il);
        for (int i = 0; pt && i < np; i++) tapped |= tapped_at(pt[i].taps, pt[i].n_taps, il);
        pending = !normed && !tapped && il + 1 < hp->n_layer;
        if (!pending && !normed) {
            TRY(ew(c, EW_ADD, &s->x, &s->y, &s->y, (uint64_t)n * E, 0, 0));
            bs_vk_barrier(c);
        }
        record_taps(s, il, n, taps, n_taps, pt, np);
    }
    return record_logits(s, n, logits_rows, pt, np, normed);
}

/* Rollback to the first j rows of the last step by replaying its recurrence: after
 * bs_vk_sess_restore, each recurrent layer's conv and delta rule over the j rows recorded in
 * that step (record_inputs), all layers' convs then all their delta rules (the layers'
 * recurrences are independent given their inputs): the state the step's first j rows left,
 * from the same kernels on the same inputs (products are batch invariant), so the bits of
 * evaluating those j rows again, without their products, attention or FFN. The KV rows past j
 * are rewritten before any step reads them. */
static int replay_scratch(bs_vk_net *net, int rows) {
    const bs_vk_net_desc *hp = &net->hp;
    const size_t n = (size_t)net->n_rec * (size_t)rows, cc = 4 * n * (size_t)hp->conv_dim, d = 4 * n * (size_t)hp->n_v_heads * hp->d_v;
    if (net->rp_cc.size >= cc && net->rp_d.size >= d) return 0;
    bs_vk_buf_free(net->c, &net->rp_cc);
    bs_vk_buf_free(net->c, &net->rp_d);
    return bs_vk_buf_new(net->c, &net->rp_cc, cc, false) || bs_vk_buf_new(net->c, &net->rp_d, d, false) ? -1 : 0;
}

int bs_vk_sess_replay(bs_vk_sess *s, int j) {
    bs_vk_net *net = s->net;
    if (j < 1 || j > s->rp_n || s->snap != SNAP_PENDING || s->lora_gen != net->lora_gen) return 1;
    TRY(bs_vk_sess_settle(s) || replay_scratch(net, s->rp_rows));
    bs_vk_ctx *c = net->c;
    const gdn_rows io = {&s->rp_a, &net->rp_cc, &s->rp_ga, &s->rp_gb, &net->rp_d};
    TRY(bs_vk_begin(c));
    int rc = 0;
    for (int phase = 0; phase < 2 && !rc; phase++) {
        for (int il = 0; il < net->hp.n_layer && !rc; il++) {
            const vk_layer *L = &net->L[il];
            if (!L->rec) continue;
            const uint32_t r0 = (uint32_t)(L->slot * s->rp_rows);
            rc = phase ? gdn_delta(&io, s, L, r0, j) : gdn_conv(&io, s, L, r0, j);
        }
        bs_vk_barrier(c);
    }
    if (bs_vk_submit(c) || rc) return bs_error_prefix("Vulkan rollback: ");
    bs_vk_sess_stepped(s);
    return 0;
}
