/* encoder_device.c: the projector's encoder moved onto a Vulkan device (vulkan/backend.h's
 * bs_vk_vit): the ViT's tensors described to the backend and uploaded once; encoder.c then runs
 * each image there. The patch kernel goes as the F32 matrix the CPU path multiplies by. */
#include "vision/mmproj_impl.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>

static bs_vk_tensor tensor_of(const bs_weight *w) {
    return (bs_vk_tensor){.type = w->type, .ne0 = w->ne0, .ne1 = w->ne1, .data = w->data, .row_bytes = w->row_bytes,
                          .name = w->name};
}

int bs_mmproj_use_device(bs_mmproj *m, bs_vk_ctx *c, char *err, size_t errlen) {
    if (!c) {
        bs_vk_vit_free(m->dev);
        m->dev = NULL;
        return 0;
    }
    const bs_mmproj_hparams *hp = &m->hp;
    bs_vk_vit_block_desc *bd = bs_xcalloc((size_t)BS_MAX(hp->n_layer, 1), sizeof *bd);
    for (int l = 0; l < hp->n_layer; l++) {
        const bs_vit_block *b = &m->blk[l];
        bd[l] = (bs_vk_vit_block_desc){.ln1_w = b->ln1_w, .ln1_b = b->ln1_b, .ln2_w = b->ln2_w, .ln2_b = b->ln2_b,
                                       .qkv_b = b->qkv_b, .out_b = b->out_b, .up_b = b->up_b, .down_b = b->down_b,
                                       .qkv = tensor_of(&b->qkv), .out = tensor_of(&b->out), .up = tensor_of(&b->up),
                                       .down = tensor_of(&b->down)};
    }
    bs_vk_vit_desc d = {.n_embd = hp->n_embd, .n_ff = hp->n_ff, .n_layer = hp->n_layer, .n_head = hp->n_head,
                        .patch_k = 3 * hp->patch * hp->patch, .proj_dim = hp->proj_dim, .eps = hp->eps,
                        .patch = tensor_of(&m->patch), .mm0 = tensor_of(&m->mm0), .mm2 = tensor_of(&m->mm2),
                        .patch_b = m->patch_b, .post_w = m->post_w, .post_b = m->post_b, .mm0_b = m->mm0_b,
                        .mm2_b = m->mm2_b, .blocks = bd};
    bs_vk_vit *v = bs_vk_vit_new(c, &d);
    free(bd);
    if (!v) {
        snprintf(err, errlen, "%s", bs_last_error());
        return -1;
    }
    bs_vk_vit_free(m->dev);
    m->dev = v;
    return 0;
}

bool bs_mmproj_on_device(const bs_mmproj *m) { return m->dev != NULL; }
