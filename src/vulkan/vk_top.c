/* vk_top.c: sampling's top-k on the device (topk.comp): the k best of each logits row of a step,
 * found there so that only they come back to the host (vk_forward.c records it after the LM
 * head; docs/kernels.md). */
#include "vulkan/vk_net.h"
#include "io/util.h"

/* topk.comp's candidates per logits row in its level buffers (the first level's workgroups' k best) */
static uint32_t topk_stride(const bs_vk_sess *s) {
    return (uint32_t)(((uint64_t)s->net->hp.n_vocab + TOPK_CHUNK - 1) / TOPK_CHUNK * BS_VK_TOP_MAX);
}

/* The k best of each of logits rows 0..rows-1 into topv (topk.comp: levels of 2048-candidate
 * sorts, each workgroup's k best to the next level, until one workgroup per row is left). */
int bs_vk_record_topk(bs_vk_sess *s, uint32_t k, uint32_t rows) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_buf *in = NULL, *out = &s->cand[0];
    const uint32_t V = (uint32_t)s->net->hp.n_vocab;
    uint32_t n = V, mode = 0;
    bs_vk_barrier(c);
    for (;;) {
        const uint32_t groups = (n + TOPK_CHUNK - 1) / TOPK_CHUNK, last = groups == 1;
        const struct { uint32_t n, k, mode, last, stride, V; } push = {n, k, mode, last, topk_stride(s), V};
        const bs_vk_buf *bb[4] = {&s->logits, in, last ? NULL : out, &s->topv};
        TRY(bs_vk_dispatch(c, BS_VK_K_TOPK, bb, &push, groups, rows, 1));
        if (last) return 0;
        bs_vk_barrier(c);
        n = groups * k;
        mode = 1;
        in = out;
        out = out == &s->cand[0] ? &s->cand[1] : &s->cand[0];
    }
}

/* topk.comp's buffers for every logits row, made on first use: level outputs (a workgroup's k
 * best each) and the lists */
int bs_vk_top_ready(bs_vk_sess *s) {
    if (s->topv.buf) return 0;
    bs_vk_ctx *c = s->net->c;
    const uint64_t rows = s->logits.size / (4u * (uint64_t)s->net->hp.n_vocab), bytes = 8u * rows * topk_stride(s);
    if (bs_vk_buf_new(c, &s->cand[0], bytes, false) || bs_vk_buf_new(c, &s->cand[1], bytes, false) ||
        bs_vk_buf_new(c, &s->topv, 4u * rows * (1 + 2 * BS_VK_TOP_MAX), true)) {
        for (int i = 0; i < 2; i++) bs_vk_buf_free(c, &s->cand[i]);
        bs_vk_buf_free(c, &s->topv);
        return bs_error_prefix("Vulkan top-k: ");
    }
    return 0;
}
