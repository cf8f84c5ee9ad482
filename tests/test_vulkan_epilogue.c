/* test_vulkan_epilogue.c: the integer products' epilogues of a folded model on the device
 * (mv_q.glsl's ROT, through bs_vk_matvec_norm / bs_vk_matvec_glu) against the CPU path's code:
 *  - an output product adding into the residual stream, then the rows RMS-normed, rotated by the
 *    next products' Hadamard fold and quantized to int8 blocks (NORM_OUT + ROT): the residual is
 *    the device's product (bs_vk_matvec, bit for bit the same sums) added on the CPU, the normed
 *    rows bs_rmsnorm's, the rotated rows bs_rotate_rows', the blocks the CPU quantizer's, all
 *    bit for bit; without a fold, the blocks are the normed rows';
 *  - a GLU whose rows are rotated by the down product's fold by each block's last workgroup
 *    (QOUT + ROT): its rows within 1e-5 of silu(gate d) * (up d) from the device's products (the
 *    device's exp), and bit for bit the rows of the GLU without the rotation; rotated rows and
 *    blocks bit for bit the CPU's from those rows;
 *  - the fused DeltaNet step (delta_norm.comp) with a folded ssm_out: each rotation block's last
 *    head rotates it, the V heads regrouped or not: outputs and state bit for bit the step's
 *    without the fold, the rotated rows and blocks the CPU's from those outputs.
 * Shapes: Bonsai 2's (5120 and 17408 rows, blocks of 1024 with signs) and small odd ones: 96
 * rows in blocks of 32 (a workgroup meets three blocks), blocks of 2048 over 64 workgroups, 1..8
 * rows. The validation layer is on: any message fails. Exits 77 (skipped) without a device. */
#include "test.h"
#include "vk_test.h"
#include "vulkan/backend.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bs_rng rng;
static bs_vk_ctx *C;

static float *vec(size_t n, float scale) {
    float *x = malloc(sizeof *x * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = bs_rng_normal(&rng) * scale;
    return x;
}

static bs_vk_matrix *matrix(int type, int64_t cols, int64_t rows) {
    const size_t rb = bs_row_size(type, cols);
    float *w = vec((size_t)(cols * rows), 0.05f);
    uint8_t *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) bs_quantize(type, w + r * cols, wq + r * rb, cols);
    bs_vk_tensor T = {.type = type, .ne0 = cols, .ne1 = rows, .data = wq, .row_bytes = rb, .name = bs_type_name(type)};
    bs_vk_matrix *m = bs_vk_matrix_new(C, &T);
    CHECKF(m != NULL, "%s upload: %s", bs_type_name(type), bs_last_error());
    free(w);
    free(wq);
    return m;
}

/* The device's int8 blocks of `tot` values against the CPU quantizer's of v: blocks that differ */
static int blocks_differ(const float *v, size_t tot, const bs_vk_epilogue *e) {
    const size_t nb = tot / 32;
    uint8_t *cq = malloc(nb * 34), *c1 = malloc(nb * 36);
    bs_type_get(BS_Q8_0)->act_from_float(v, cq, (int64_t)tot);
    bs_type_get(BS_Q4_1)->act_from_float(v, c1, (int64_t)tot);
    int dq = 0;
    for (size_t b = 0; b < nb; b++) {
        uint16_t h, h1;
        memcpy(&h, cq + b * 34, 2);
        memcpy(&h1, c1 + b * 36 + 2, 2);
        dq += bs_f16_to_f32(h) != e->scales[b] || memcmp(cq + b * 34 + 2, e->codes + b * 32, 32) != 0 ||
              bs_f16_to_f32(h1) != e->sums[b];
    }
    free(cq);
    free(c1);
    return dq;
}

static int values_differ(const float *a, const float *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

typedef struct epi_mem { bs_vk_epilogue e; float sg[32768]; } epi_mem;

/* Outputs of n rows of E (and a fold of `block` over E, signs or not; block 0: none) */
static epi_mem *epi_new(int64_t E, int n, int block, bool signs) {
    epi_mem *m = calloc(1, sizeof *m);
    const size_t tot = (size_t)n * (size_t)E;
    m->e.out = calloc(tot, 4);
    m->e.xr = calloc(tot, 4);
    m->e.codes = calloc(tot, 1);
    m->e.scales = calloc(tot / 32, 4);
    m->e.sums = calloc(tot / 32, 4);
    for (int64_t i = 0; i < E; i++) m->sg[i] = bs_rng_normal(&rng) < 0 ? -1.0f : 1.0f;
    if (block) {
        bs_vk_fold *f = calloc(1, sizeof *f);
        *f = (bs_vk_fold){.block = block, .width = E, .signs = signs ? m->sg : NULL};
        m->e.fold = f;
    }
    return m;
}

static void epi_free(epi_mem *m) {
    free(m->e.out); free(m->e.xr); free(m->e.codes); free(m->e.scales); free(m->e.sums); free((void *)m->e.fold);
    free(m);
}

/* The fold's rotation of rows on the CPU */
static void rotate_cpu(const bs_vk_fold *f, const float *x, float *y, int n) {
    const bs_rotation R = {.block = f->block, .width = f->width, .signs = f->signs};
    bs_rotate_rows(&R, x, y, n, NULL);
}

static void check_norm(int type, int64_t K, int64_t E, int n, int block, bool signs) {
    bs_vk_matrix *m = matrix(type, K, E);
    if (!m) return;
    const size_t tot = (size_t)n * (size_t)E;
    float *d = vec((size_t)n * (size_t)K, 1.0f), *x = vec(tot, 1.0f), *nw = vec((size_t)E, 1.0f), *v = calloc(tot, 4);
    float *ref = malloc(4 * tot), *xn = malloc(4 * tot), *rot = malloc(4 * tot);
    epi_mem *em = epi_new(E, n, block, signs);
    em->e.x = x;
    em->e.nw = nw;
    em->e.eps = 1e-6f;
    for (size_t i = 0; i < tot; i++) ref[i] = x[i];
    CHECKF(bs_vk_matvec(C, m, d, n, v) == 0, "%s", bs_last_error());
    CHECKF(bs_vk_matvec_norm(C, m, d, n, &em->e) == 0, "mv+norm: %s", bs_last_error());
    for (size_t i = 0; i < tot; i++) ref[i] = ref[i] + v[i];
    for (int t = 0; t < n; t++) bs_rmsnorm(xn + (size_t)t * E, ref + (size_t)t * E, nw, (int)E, 1e-6f);
    if (block) rotate_cpu(em->e.fold, xn, rot, n);
    const int dx = values_differ(x, ref, tot), dn = values_differ(em->e.out, xn, tot);
    const int dr = block ? values_differ(em->e.xr, rot, tot) : 0, dq = blocks_differ(block ? rot : xn, tot, &em->e);
    CHECKF(dx == 0 && dn == 0 && dr == 0 && dq == 0,
           "mv+norm%s %s %lld x %lld, block %d%s, %d rows: %d residual, %d normed, %d rotated values, %d blocks differ",
           block ? "+rotate" : "", bs_type_name(type), (long long)E, (long long)K, block, signs ? " signed" : "", n, dx, dn, dr,
           dq);
    free(d); free(x); free(nw); free(v); free(ref); free(xn); free(rot);
    epi_free(em);
    bs_vk_matrix_free(C, m);
}

static void check_glu(int type, int64_t K, int64_t F, int n, int block, bool signs) {
    bs_vk_matrix *g = matrix(type, K, F), *u = matrix(type, K, F);
    const size_t tot = (size_t)n * (size_t)F;
    float *d = vec((size_t)n * (size_t)K, 1.0f), *vg = calloc(tot, 4), *vu = calloc(tot, 4), *rot = malloc(4 * tot);
    epi_mem *em = epi_new(F, n, block, signs), *plain = epi_new(F, n, 0, false);
    if (g && u) {
        CHECKF(bs_vk_matvec(C, g, d, n, vg) == 0 && bs_vk_matvec(C, u, d, n, vu) == 0, "%s", bs_last_error());
        CHECKF(bs_vk_matvec_glu(C, g, u, d, n, &em->e) == 0, "glu+rotate: %s", bs_last_error());
        CHECKF(bs_vk_matvec_glu(C, g, u, d, n, &plain->e) == 0, "glu: %s", bs_last_error());
        double worst = 0;
        for (size_t i = 0; i < tot; i++) {
            const double want = bs_silu(vg[i]) * (double)vu[i];
            worst = fmax(worst, fabs(em->e.out[i] - want) / (fabs(want) + 1e-3));
        }
        rotate_cpu(em->e.fold, em->e.out, rot, n);
        const int dp = values_differ(em->e.out, plain->e.out, tot), dr = values_differ(em->e.xr, rot, tot);
        const int dq = blocks_differ(rot, tot, &em->e);
        CHECKF(worst <= 1e-5 && dp == 0 && dr == 0 && dq == 0,
               "glu+rotate %s %lld x %lld, block %d%s, %d rows: %.2e from silu(g) u, %d values differ from the GLU's without "
               "the rotation, %d rotated values, %d blocks from the CPU's",
               bs_type_name(type), (long long)F, (long long)K, block, signs ? " signed" : "", n, worst, dp, dr, dq);
    }
    free(d); free(vg); free(vu); free(rot);
    epi_free(em);
    epi_free(plain);
    if (g) bs_vk_matrix_free(C, g);
    if (u) bs_vk_matrix_free(C, u);
}

/* delta_norm.comp's push constants, as the shader declares them */
typedef struct dn_push {
    uint32_t nk, nv, dk, dv, T, cd;
    float scale, eps;
    uint32_t from_in, rblock, rsigns;
    float rscale;
    uint32_t hd, rnk, rrep;
} dn_push;

static void check_delta_rot(int nk, int nv, int dk, int dv, int T, int block, bool signs, bool regroup) {
    const size_t cd = (size_t)(2 * nk * dk + nv * dv), nc = (size_t)T * cd, no = (size_t)T * nv * dv, nb = no / 32;
    const size_t ns = (size_t)nv * dk * dv, W = (size_t)nv * dv;
    float *cc = vec(nc, 1.0f), *alpha = vec((size_t)T * nv, 4.0f), *braw = vec((size_t)T * nv, 2.0f);
    float *gates = vec(2 * (size_t)nv, 1.0f), *st0 = vec(ns, 0.1f), *z = vec(no, 2.0f), *w = vec((size_t)dv, 1.0f);
    float *sg = malloc(4 * W);
    for (int h = 0; h < nv; h++) gates[nv + h] = -0.3f * fabsf(gates[nv + h]) - 0.01f;
    for (size_t i = 0; i < W; i++) sg[i] = bs_rng_normal(&rng) < 0 ? -1.0f : 1.0f;
    const uint32_t cols = bs_vk_delta_cols(C), groups = (uint32_t)nv * (((uint32_t)dv + cols - 1) / cols);
    float *st[2], *y[2], *s8[2], *m8[2], *xr = calloc(no, 4), unbound[4] = {0};
    uint8_t *q[2];
    uint32_t *cnt = calloc((size_t)nv, 4), *bcnt = calloc(W / 32, 4);
    for (int k = 0; k < 2; k++) {   /* without the fold, then with it */
        st[k] = malloc(4 * ns);
        memcpy(st[k], st0, 4 * ns);
        y[k] = calloc(no, 4), s8[k] = calloc(nb, 4), m8[k] = calloc(nb, 4), q[k] = calloc(nb, 32);
        dn_push p = {(uint32_t)nk, (uint32_t)nv, (uint32_t)dk, (uint32_t)dv, (uint32_t)T, (uint32_t)cd, 1.0f / sqrtf((float)dk),
                     1e-6f, 0, k ? (uint32_t)block : 0, signs, (float)(1.0 / sqrt((double)block)), regroup ? (uint32_t)dv : 0,
                     (uint32_t)nk, (uint32_t)(nv / nk)};
        void *data[16] = {cc, alpha, braw, st[k], y[k], gates, w, z, q[k], s8[k], m8[k], cnt, unbound, xr, sg, bcnt};
        size_t bytes[16] = {4 * nc, 4u * T * nv, 4u * T * nv, 4 * ns, 4 * no, 8u * nv, 4u * dv, 4 * no, 32 * nb, 4 * nb, 4 * nb,
                            4u * nv, 16, 4 * no, 4 * W, W / 8};
        CHECKF(bs_vk_kernel_run(C, "delta_norm", data, bytes, 16, &p, sizeof p, groups, 1, 1) == 0, "%s", bs_last_error());
    }
    const bs_rotation R = {.block = block, .width = (int64_t)W, .signs = signs ? sg : NULL, .perm_hd = regroup ? dv : 0,
                           .perm_nk = nk, .perm_rep = nv / nk};
    float *rot = malloc(4 * no);
    bs_rotate_rows(&R, y[1], rot, T, NULL);
    bs_vk_epilogue e = {.codes = (int8_t *)q[1], .scales = s8[1], .sums = m8[1]};
    int left = 0;
    for (size_t i = 0; i < W / 32; i++) left += bcnt[i] != 0;
    for (int h = 0; h < nv; h++) left += cnt[h] != 0;
    const int dy = values_differ(y[0], y[1], no), ds = values_differ(st[0], st[1], ns), dr = values_differ(xr, rot, no);
    const int dq = blocks_differ(rot, no, &e);
    CHECKF(dy == 0 && ds == 0 && dr == 0 && dq == 0 && left == 0,
           "delta+norm+rotate %d/%d heads of %d/%d, %d tokens, block %d%s%s: %d outputs, %d state values differ from the "
           "step's without the fold, %d rotated values, %d blocks from the CPU's, %d counters left",
           nk, nv, dk, dv, T, block, signs ? " signed" : "", regroup ? " regrouped" : "", dy, ds, dr, dq, left);
    for (int k = 0; k < 2; k++) { free(st[k]); free(y[k]); free(s8[k]); free(m8[k]); free(q[k]); }
    free(cc); free(alpha); free(braw); free(gates); free(st0); free(z); free(w); free(sg); free(xr); free(cnt); free(bcnt);
    free(rot);
}

int main(void) {
    bs_rng_seed(&rng, 41);
    const int rc = vk_test_open("test_vulkan_epilogue", &C);
    if (rc || !C) return rc ? rc : 1;
    /* Bonsai 2: ssm_out / down into the 5120-wide stream, blocks of 1024 with signs */
    check_norm(BS_Q2_0, 640, 5120, 1, 1024, true);
    check_norm(BS_Q1_0, 384, 5120, 8, 1024, true);
    check_norm(BS_Q2_0, 256, 256, 3, 64, false);
    check_norm(BS_Q1_0, 128, 96, 5, 32, true);
    check_norm(BS_Q2_0, 384, 2048, 2, 2048, true);
    check_norm(BS_Q1_0, 256, 256, 2, 0, false);   /* no fold: NORM_OUT's blocks of the normed rows */
    /* the FFN's 17408 rows in 17 blocks of 1024 */
    check_glu(BS_Q2_0, 256, 17408, 1, 1024, true);
    check_glu(BS_Q1_0, 256, 512, 8, 128, true);
    check_glu(BS_Q1_0, 128, 96, 3, 32, false);   /* one workgroup meets three blocks */
    check_glu(BS_Q2_0, 2048, 4096, 2, 2048, true);   /* split 8: 64 workgroups a block */
    check_glu(BS_Q1_0, 1024, 512, 4, 64, true);   /* two workgroups a block */
    check_glu(BS_Q2_0, 640, 1024, 7, 1024, false);
    /* Bonsai 2's DeltaNet: 16 K / 48 V heads of 128, regrouped, 1024 a block (8 heads) */
    check_delta_rot(16, 48, 128, 128, 1, 1024, true, true);
    check_delta_rot(16, 48, 128, 128, 4, 1024, true, true);
    check_delta_rot(2, 6, 64, 64, 3, 128, true, true);
    check_delta_rot(1, 3, 32, 32, 8, 32, false, false);   /* a head a block */
    check_delta_rot(2, 4, 16, 64, 2, 256, true, false);   /* one block over all heads */
    bs_vk_close(C);
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary("test_vulkan_epilogue");
}
