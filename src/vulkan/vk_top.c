/* vk_top.c: the logits rows' reductions on the device, so that only their results come back to
 * the host: sampling's top-k (topk.comp: the k best of each row) and greedy decoding's argmax
 * (argmax.comp). A session's step records them after the LM head (vk_forward.c), the drafter's
 * drafts after each slot's Markov term (vk_dspark.c); docs/kernels.md. */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <string.h>

/* topk.comp's candidates per logits row of V in its level buffers (the first level's workgroups'
 * k best) */
static uint32_t topk_stride(uint32_t V) {
    return (uint32_t)(((uint64_t)V + TOPK_CHUNK - 1) / TOPK_CHUNK * BS_VK_TOP_MAX);
}

/* The k best of each of rows 0..rows-1 of logits (rows of V) into topv (topk.comp: levels of
 * 2048-candidate sorts, each workgroup's k best to the next level, until one workgroup per row
 * is left). */
int bs_vk_record_topk_in(bs_vk_ctx *c, const bs_vk_top_bufs *t, const bs_vk_buf *logits, uint32_t V, uint32_t k,
                         uint32_t rows) {
    const bs_vk_buf *in = NULL, *out = &t->cand[0];
    uint32_t n = V, mode = 0;
    bs_vk_barrier(c);
    for (;;) {
        const uint32_t groups = (n + TOPK_CHUNK - 1) / TOPK_CHUNK, last = groups == 1;
        const struct { uint32_t n, k, mode, last, stride, V; } push = {n, k, mode, last, topk_stride(V), V};
        const bs_vk_buf *bb[4] = {logits, in, last ? NULL : out, &t->topv};
        TRY(bs_vk_dispatch(c, BS_VK_K_TOPK, bb, &push, groups, rows, 1));
        if (last) return 0;
        bs_vk_barrier(c);
        n = groups * k;
        mode = 1;
        in = out;
        out = out == &t->cand[0] ? &t->cand[1] : &t->cand[0];
    }
}

int bs_vk_top_bufs_ready(bs_vk_ctx *c, bs_vk_top_bufs *t, uint32_t V, uint64_t rows) {
    if (t->topv.buf) return 0;
    const uint64_t bytes = 8u * rows * topk_stride(V);
    if (bs_vk_buf_new(c, &t->cand[0], bytes, false) || bs_vk_buf_new(c, &t->cand[1], bytes, false) ||
        bs_vk_buf_new(c, &t->topv, 4u * rows * (1 + 2 * BS_VK_TOP_MAX), true)) {
        bs_vk_top_bufs_free(c, t);
        return bs_error_prefix("Vulkan top-k: ");
    }
    return 0;
}

void bs_vk_top_bufs_free(bs_vk_ctx *c, bs_vk_top_bufs *t) {
    for (int i = 0; i < 2; i++) bs_vk_buf_free(c, &t->cand[i]);
    bs_vk_buf_free(c, &t->topv);
}

int bs_vk_top_list(bs_vk_ctx *c, const bs_vk_top_bufs *t, size_t row, int k, int32_t *ids, float *vals) {
    const uint32_t *o = (const uint32_t *)t->topv.map + row * (1 + 2 * BS_VK_TOP_MAX);
    const int got = (int)BS_MIN(o[0], (uint32_t)k);
    memcpy(ids, o + 1, 4u * (size_t)got);
    memcpy(vals, o + 1 + BS_VK_TOP_MAX, 4u * (size_t)got);
    bs_vk_count_read(c, 4u + 8u * (size_t)got);
    return got;
}

int bs_vk_record_draw(bs_vk_ctx *c, const bs_vk_top_bufs *t, uint32_t k, const bs_draw *p, bool by_id, const bs_vk_buf *u,
                      uint32_t slot, const bs_vk_buf *tok, const bs_vk_buf *out) {
    const struct { uint32_t slot, top_k, min_keep; float top_p, min_p, temp; uint32_t by_id; } dp = {
        slot, k, (uint32_t)BS_MAX(p->min_keep, 0), p->top_p, p->min_p, p->temp, by_id};
    const bs_vk_buf *bb[4] = {&t->topv, u, tok, out};
    return bs_vk_dispatch(c, BS_VK_K_DRAFT_DRAW, bb, &dp, 1, 1, 1);
}

uint32_t bs_vk_amax_chunk(uint32_t V) {
    const uint32_t per = (V + BS_VK_AMAX_CHUNKS - 1) / BS_VK_AMAX_CHUNKS;
    return BS_MAX(1u, (per + 255) / 256) * 256;
}

int bs_vk_amax_bufs_new(bs_vk_ctx *c, bs_vk_amax_bufs *a, uint64_t rows) {
    const int rc = bs_vk_buf_new(c, &a->part, 8u * BS_VK_AMAX_CHUNKS * rows, false) || bs_vk_counters_new(c, &a->cnt, 4u * rows);
    if (rc) bs_vk_amax_bufs_free(c, a);
    return rc ? bs_error_prefix("Vulkan argmax: ") : 0;
}

void bs_vk_amax_bufs_free(bs_vk_ctx *c, bs_vk_amax_bufs *a) {
    bs_vk_buf_free(c, &a->part);
    bs_vk_buf_free(c, &a->cnt);
}

int bs_vk_record_argmax(bs_vk_ctx *c, const bs_vk_amax_bufs *a, const bs_vk_buf *logits, uint32_t V, uint32_t rows,
                        const bs_vk_buf *ids, const bs_vk_buf *feed) {
    const uint32_t chunk = bs_vk_amax_chunk(V), push[3] = {V, feed != NULL, chunk};
    const bs_vk_buf *bb[5] = {logits, ids, feed, &a->part, &a->cnt};
    return bs_vk_dispatch(c, BS_VK_K_ARGMAX, bb, push, (V + chunk - 1) / chunk, rows, 1);
}

int bs_vk_record_topk(bs_vk_sess *s, uint32_t k, uint32_t rows) {
    return bs_vk_record_topk_in(s->net->c, &s->top, &s->logits, (uint32_t)s->net->hp.n_vocab, k, rows);
}

/* for every logits row of the session */
int bs_vk_top_ready(bs_vk_sess *s) {
    const uint64_t rows = s->logits.size / (4u * (uint64_t)s->net->hp.n_vocab);
    return bs_vk_top_bufs_ready(s->net->c, &s->top, (uint32_t)s->net->hp.n_vocab, rows);
}
