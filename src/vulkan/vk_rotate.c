/* vk_rotate.c: PrismML's Hadamard fold on the device (Bonsai 2 files: cpu/rotation.c is the
 * CPU's side). A folded matrix's products take their activations rotated by rotate.comp, which
 * does the CPU's operations in the CPU's order, so the int8 blocks quantized from them, and the
 * integer sums, are the CPU's. */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <math.h>

const bs_vk_rot *bs_vk_rot_get(bs_vk_ctx *c, bs_vk_rot *rots, int *n, const bs_vk_fold *f) {
    const uint32_t hd = f->perm_hd > 0 ? (uint32_t)f->perm_hd : 0;
    for (int i = 0; i < *n; i++) {
        const bs_vk_rot *r = &rots[i];
        if (r->key == f->signs && r->width == (uint32_t)f->width && r->block == (uint32_t)f->block && r->hd == hd &&
            (!hd || (r->nk == (uint32_t)f->perm_nk && r->rep == (uint32_t)f->perm_rep)) && r->inverse == (uint32_t)f->inverse)
            return r;
    }
    if (hd && f->inverse) {   /* (no loader makes one: the regrouping is a product input's) */
        bs_error("Vulkan: an inverse rotation with the V heads regrouped");
        return NULL;
    }
    if (f->block < 2 || f->block > BS_VK_ROT_MAX_BLOCK || f->width % f->block || f->width > (1 << 24) ||
        f->width / f->block > 65535) {   /* (workgroups per row: the guaranteed dispatch count) */
        bs_error("Vulkan: a Hadamard block of %d over %lld inputs (rotate.comp takes powers of two up to %d)", f->block,
                 (long long)f->width, BS_VK_ROT_MAX_BLOCK);
        return NULL;
    }
    if (*n == BS_VK_MAX_ROTS) {
        bs_error("Vulkan: more than %d Hadamard rotations", BS_VK_MAX_ROTS);
        return NULL;
    }
    bs_vk_rot *r = &rots[*n];
    *r = (bs_vk_rot){.has_signs = f->signs != NULL, .block = (uint32_t)f->block, .width = (uint32_t)f->width, .hd = hd,
                     .nk = hd ? (uint32_t)f->perm_nk : 0, .rep = hd ? (uint32_t)f->perm_rep : 0,
                     .inverse = f->inverse, .scale = (float)(1.0 / sqrt((double)f->block)), .key = f->signs};
    if (f->signs && bs_vk_upload_vec(c, &r->signs, f->signs, (size_t)f->width)) return NULL;
    (*n)++;
    return r;
}

bool bs_vk_fold_same(const bs_vk_fold *a, const bs_vk_fold *b) {
    if (!a->block || !b->block) return !a->block && !b->block;
    return a->block == b->block && a->width == b->width && a->signs == b->signs && a->inverse == b->inverse &&
           a->perm_hd == b->perm_hd && (a->perm_hd <= 0 || (a->perm_nk == b->perm_nk && a->perm_rep == b->perm_rep));
}

/* (the epilogues' butterflies and shared memory: a power of two in [2, 2048] dividing the width) */
static bool block_fits(const bs_vk_rot *r) {
    return r->block >= 2 && r->block <= BS_VK_NORM_ROT_MAX && (r->block & (r->block - 1)) == 0 && r->width % r->block == 0;
}

bool bs_vk_norm_rotates(const bs_vk_rot *r, uint32_t d) {
    return r && !r->inverse && !r->hd && r->width == d && block_fits(r);
}

bool bs_vk_heads_rotate(const bs_vk_rot *r, uint32_t nv, uint32_t dv) {
    return r && !r->inverse && dv && r->width == nv * dv && block_fits(r) && r->block % 32 == 0 && r->block % dv == 0 &&
           (!r->hd || (r->hd == dv && r->nk * r->rep == nv));
}

void bs_vk_rots_free(bs_vk_ctx *c, bs_vk_rot *rots, int n) {
    for (int i = 0; i < n; i++) bs_vk_buf_free(c, &rots[i].signs);
}

int bs_vk_record_rotate_gated(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n,
                              const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am, int gate,
                              const bs_vk_buf *g, uint32_t H, uint32_t D) {
    struct { uint32_t width, block, hd, nk, rep, inverse, signs; float scale; uint32_t quant, gate, H, D; } p = {
        r->width, r->block, r->hd, r->nk, r->rep, r->inverse, r->has_signs, r->scale, aq != NULL, (uint32_t)gate, H, D};
    const bs_vk_buf *bb[7] = {x, y, r->has_signs ? &r->signs : NULL, aq, as, am, gate ? g : NULL};
    return bs_vk_dispatch(c, BS_VK_K_ROTATE, bb, &p, r->width / r->block, (uint32_t)n, 1);
}

int bs_vk_record_rotate_quant(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n,
                              const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am) {
    return bs_vk_record_rotate_gated(c, r, x, y, n, aq, as, am, 0, NULL, 0, 0);
}

int bs_vk_record_rotate(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n) {
    return bs_vk_record_rotate_quant(c, r, x, y, n, NULL, NULL, NULL);
}
