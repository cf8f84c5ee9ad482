/* vk_epilogue.c: the integer products' epilogues alone on host data, for their oracle tests:
 * an output product's residual add, norm and the next products' Hadamard fold, and a GLU's
 * output rotated by the down product's fold (mv_q.glsl's NORM_OUT, QOUT and ROT), recorded by
 * the same functions the forward records them with. */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

enum { EB_D, EB_DQ, EB_DS, EB_DM, EB_X, EB_NW, EB_OUT, EB_XR, EB_Q, EB_S, EB_M, EB_CNT, EB_COUNT };

/* The device buffers of one run: d and its int8 blocks (K wide), the residual and norm weight,
 * the output rows, the rotated rows and their blocks (E wide), the workgroup counters. */
static int epi_alloc(bs_vk_ctx *c, bs_vk_buf *b, int64_t K, int64_t E, int n) {
    const uint64_t nk = (uint64_t)n * K, ne = (uint64_t)n * E;
    return bs_vk_buf_new(c, &b[EB_D], 4 * nk, true) || bs_vk_buf_new(c, &b[EB_DQ], nk, false) ||
           bs_vk_buf_new(c, &b[EB_DS], nk / 8, false) || bs_vk_buf_new(c, &b[EB_DM], nk / 8, false) ||
           bs_vk_buf_new(c, &b[EB_X], 4 * ne, true) || bs_vk_buf_new(c, &b[EB_NW], 4 * (uint64_t)E, true) ||
           bs_vk_buf_new(c, &b[EB_OUT], 4 * ne, true) || bs_vk_buf_new(c, &b[EB_XR], 4 * ne, true) ||
           bs_vk_buf_new(c, &b[EB_Q], ne, true) || bs_vk_buf_new(c, &b[EB_S], ne / 8, true) ||
           bs_vk_buf_new(c, &b[EB_M], ne / 8, true) || bs_vk_counters_new(c, &b[EB_CNT], 4 * (size_t)BS_MAX(8, E / 32));
}

static int epi_read(bs_vk_ctx *c, bs_vk_buf *b, int64_t E, int n, const bs_vk_epilogue *e, bool rotated) {
    const size_t ne = (size_t)n * (size_t)E;
    return bs_vk_buf_read(c, &b[EB_OUT], 0, e->out, 4 * ne) || (e->x && bs_vk_buf_read(c, &b[EB_X], 0, e->x, 4 * ne)) ||
           (rotated && bs_vk_buf_read(c, &b[EB_XR], 0, e->xr, 4 * ne)) || bs_vk_buf_read(c, &b[EB_Q], 0, e->codes, ne) ||
           bs_vk_buf_read(c, &b[EB_S], 0, e->scales, ne / 8) || bs_vk_buf_read(c, &b[EB_M], 0, e->sums, ne / 8);
}

/* up NULL: m's output product with the norm; else the GLU of gate m and up */
static int epi_run(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_matrix *up, const float *d, int n, const bs_vk_epilogue *e) {
    const int64_t K = m->ne0, E = m->ne1;
    if (n < 1 || n > 8 || K % 32 || E % 32 || (!up && (!e->x || !e->nw)) || (e->fold && !e->xr))
        return bs_error("Vulkan epilogue: bad arguments");
    bs_vk_rot rots[1];
    int n_rot = 0;
    const bs_vk_rot *rot = e->fold ? bs_vk_rot_get(c, rots, &n_rot, e->fold) : NULL;
    if (e->fold && !rot) return -1;
    bs_vk_buf b[EB_COUNT];
    memset(b, 0, sizeof b);
    const bs_vk_buf *qo[3] = {&b[EB_Q], &b[EB_S], &b[EB_M]};
    int rc = epi_alloc(c, b, K, E, n) || bs_vk_buf_write(c, &b[EB_D], 0, d, 4 * (size_t)n * (size_t)K) ||
             (!up && (bs_vk_buf_write(c, &b[EB_X], 0, e->x, 4 * (size_t)n * (size_t)E) ||
                      bs_vk_buf_write(c, &b[EB_NW], 0, e->nw, 4 * (size_t)E))) ||
             bs_vk_begin(c);
    if (!rc) {
        rc = bs_vk_record_quant(c, &b[EB_D], &b[EB_DQ], &b[EB_DS], &b[EB_DM], (uint64_t)n * K / 32);
        bs_vk_barrier(c);
        if (!rc && up && rot)
            rc = bs_vk_record_glu_rot(c, m, up, &b[EB_DQ], &b[EB_DS], &b[EB_DM], n, &b[EB_OUT], qo, rot, &b[EB_XR], &b[EB_CNT]);
        else if (!rc && up)
            rc = bs_vk_record_glu(c, m, up, &b[EB_DQ], &b[EB_DS], &b[EB_DM], n, &b[EB_OUT], qo);
        else if (!rc)
            rc = bs_vk_record_mv_norm(c, m, &b[EB_DQ], &b[EB_DS], &b[EB_DM], n, &b[EB_X], &b[EB_NW], e->eps, &b[EB_OUT], qo,
                                      &b[EB_CNT], rot, &b[EB_XR]);
        if (c->recording) rc = bs_vk_submit(c) || rc;
    }
    const bs_vk_epilogue glu_out = {.out = e->out, .xr = e->xr, .codes = e->codes, .scales = e->scales, .sums = e->sums};
    if (!rc) rc = epi_read(c, b, E, n, up ? &glu_out : e, rot != NULL);
    if (!rc) {   /* the epilogues leave their counters at 0 (the forward's are shared by every step) */
        const size_t nc = (size_t)BS_MAX(8, E / 32);
        uint32_t *cnt = bs_xmalloc(4 * nc);
        rc = bs_vk_buf_read(c, &b[EB_CNT], 0, cnt, 4 * nc);
        for (size_t i = 0; i < nc && !rc; i++)
            if (cnt[i]) rc = bs_error("Vulkan epilogue: counter %zu left at %u", i, cnt[i]);
        free(cnt);
    }
    for (int i = 0; i < EB_COUNT; i++) bs_vk_buf_free(c, &b[i]);
    bs_vk_rots_free(c, rots, n_rot);
    return rc ? -1 : 0;
}

int bs_vk_matvec_norm(bs_vk_ctx *c, const bs_vk_matrix *m, const float *d, int n, const bs_vk_epilogue *e) {
    return epi_run(c, m, NULL, d, n, e);
}

int bs_vk_matvec_glu(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const float *d, int n,
                     const bs_vk_epilogue *e) {
    return epi_run(c, gate, up, d, n, e);
}
