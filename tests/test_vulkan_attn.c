/* test_vulkan_attn.c: attn_split.comp, the decode attention split over the context, on the
 * Vulkan device (lavapipe in CI) against the CPU's attention (cpu/compute.h: bs_attn_queries)
 * and against attn.comp, on 27B's shape (24 / 4 heads of 256) and odd ones (one, five and
 * twelve query heads per KV head; D 32, 64, 96), F16 and F32 caches, 1..8 rows, contexts of 1,
 * C - 1, C, C + 1 and 5C + 3 positions for small chunks C and the default 256:
 *   - the output within 1e-5 of the CPU's (relative to the head's largest element);
 *   - fused (q/k norms, rope and the KV store in the dispatch) the same bits and cache as
 *     qk.comp then the unfused kernel;
 *   - each row the bits of the same row evaluated alone (T = 1 at its position), fused too;
 *   - with one chunk (every row's context <= C) the bits of attn.comp;
 *   - the epilogue (quant): the output gate and int8 blocks equal to the plain output then
 *     quant_q8.comp's mode 2;
 *   - with a folded output product (rblock: Bonsai 2's blocks of 1024 with signs on 27B's shape,
 *     the widest power of two dividing H * D on the others): the gated rows the same bits, the
 *     rotated rows bs_rotate_rows' of them and their int8 blocks the CPU quantizer's, bit for
 *     bit, the block counters left at 0;
 *   - the merge counters are left at 0. */
#include "test.h"
#include "vk_test.h"
#include "vulkan/backend.h"
#include "cpu/compute.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bs_rng rng;
static bs_vk_ctx *C;

typedef struct { uint32_t H, Hkv, D, n_ctx; float scale; uint32_t f32, quant, qrow0, fused, n_rot; float eps; } attn_push;
typedef struct { attn_push a; uint32_t chunk, n_chunk, rblock, rsigns; float rscale; } split_push;
/* a folded output product's rotation: its block, signs (NULL: none), the rotated rows and the
 * block counters (rows of H * D / block) */
typedef struct { int block; const float *signs; float *xr; uint32_t *bcnt; } attn_rot;

static float *vec(size_t n, float scale) {
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = bs_rng_normal(&rng) * scale;
    return x;
}

static void *dup(const void *p, size_t n) {
    void *d = malloc(n);
    memcpy(d, p, n);
    return d;
}

/* One case's inputs: raw q (+ gate) / k / v rows and the rope table, the sequence's from row r0
 * (a batch's rows: the kernels take rows qrow0.. of every row buffer), norm weights, and a cache
 * whose rows before pos0 a previous step left. */
typedef struct {
    int H, Hkv, D, n_rot, T, pos0, n_ctx, r0;
    bool f32;
    uint32_t chunk;
    size_t qw, kvw, kvb, csb;
    float *a, *b, *v, *qn, *kn, *cs;
    uint8_t *kc, *vc;
} attn_case;

/* kernel run: "attn" (sp->chunk == 0) or "attn_split"; q, k, v, o: the case's r0 + T rows, the
 * dispatch's T from ap->qrow0; aq/as/am: the blocks (quant) */
static int run_attn(const attn_case *c, const attn_push *ap, int T, int pos0, const float *q, const float *k, const float *v,
                    uint8_t *kc, uint8_t *vc, float *o, uint32_t *aq, float *as, float *am, bool split, bool *cnt_zero,
                    const attn_rot *rt) {
    const size_t HD = (size_t)c->H * c->D, nr = (size_t)(c->r0 + c->T), nb = nr * HD / 32 + 1;
    const uint32_t n_chunk = (uint32_t)((c->n_ctx + (int)c->chunk - 1) / (int)c->chunk);
    uint32_t params[4] = {(uint32_t)pos0, 0, 0, 0};
    uint32_t *cnt = calloc((size_t)T * c->Hkv, 4);
    void *d[19] = {(void *)q, kc, vc, o, NULL, params, aq, as, am, (void *)k, (void *)v, c->qn, c->kn, c->cs, NULL, cnt,
                   rt ? rt->xr : NULL, rt ? (void *)rt->signs : NULL, rt ? rt->bcnt : NULL};
    size_t by[19] = {4u * nr * c->qw, c->kvb, c->kvb, 4u * nr * HD, 4u * (size_t)T * c->H * (size_t)c->n_ctx, 16,
                     32 * nb, 4 * nb, 4 * nb, 4u * nr * c->kvw, 4u * nr * c->kvw, 4u * c->D, 4u * c->D, c->csb,
                     4u * (size_t)T * c->H * n_chunk * (c->D + 2u), 4u * (size_t)T * c->Hkv,
                     4u * nr * HD, 4u * HD, rt ? 4u * nr * HD / (size_t)rt->block : 16};
    int rc;
    if (split) {
        split_push sp = {*ap, c->chunk, n_chunk, rt ? (uint32_t)rt->block : 0, rt && rt->signs,
                         rt ? (float)(1.0 / sqrt((double)rt->block)) : 0.0f};
        rc = bs_vk_kernel_run(C, "attn_split", d, by, 19, &sp, sizeof sp, n_chunk, (uint32_t)(T * c->Hkv), 1);
    } else {
        rc = bs_vk_kernel_run(C, "attn", d, by, 14, ap, sizeof *ap, (uint32_t)(T * c->H), 1, 1);
    }
    bool z = true;
    for (int i = 0; i < T * c->Hkv; i++) z &= cnt[i] == 0;
    if (cnt_zero) *cnt_zero = z;
    free(cnt);
    return rc;
}

static attn_case make_case(int H, int Hkv, int D, int n_rot, int T, int pos0, bool f32, uint32_t chunk) {
    attn_case c = {.H = H, .Hkv = Hkv, .D = D, .n_rot = n_rot, .T = T, .pos0 = pos0, .n_ctx = pos0 + T + 2, .r0 = 1,
                   .f32 = f32, .chunk = chunk};
    c.qw = 2u * H * D;
    c.kvw = (size_t)Hkv * D;
    c.kvb = (size_t)c.n_ctx * c.kvw * (f32 ? 4 : 2);
    const size_t nr = (size_t)(c.r0 + T);
    c.csb = 4 * nr * BS_MAX(n_rot, 1);
    c.a = vec(nr * c.qw, 1.0f);
    c.b = vec(nr * c.kvw, 2.0f);
    c.v = vec(nr * c.kvw, 1.0f);
    c.qn = vec((size_t)D, 1.0f);
    c.kn = vec((size_t)D, 1.0f);
    c.cs = malloc(c.csb);
    for (size_t t = 0; t < nr; t++) bs_rope_cache(c.cs + t * n_rot, pos0 + (int)t - c.r0, n_rot, 10000000.0f, NULL);
    c.kc = malloc(c.kvb);
    c.vc = malloc(c.kvb);
    /* finite small values in either format; spread wide enough that the softmax is not flat */
    for (size_t i = 0; i < c.kvb; i++) c.kc[i] = (uint8_t)(bs_rng_next(&rng) & 0x3b), c.vc[i] = (uint8_t)(bs_rng_next(&rng) & 0x3b);
    if (!f32)
        for (size_t i = 0; i + 1 < c.kvb; i += 2) {   /* k as f16 of N(0, 1): scores of a few units */
            const uint16_t hk = bs_f32_to_f16(bs_rng_normal(&rng));
            memcpy(c.kc + i, &hk, 2);
        }
    return c;
}

static void free_case(attn_case *c) {
    free(c->a); free(c->b); free(c->v); free(c->qn); free(c->kn); free(c->cs); free(c->kc); free(c->vc);
}

/* the largest |got - ref| over the largest |ref| (a loop of plain comparisons: gcc 12's aarch64
 * vectorizer fails on the same fmax reductions) */
static double rel_error(const float *got, const float *ref, int n) {
    float mag = 0, err = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(ref[i]), e = fabsf(got[i] - ref[i]);
        if (a > mag) mag = a;
        if (e > err) err = e;
    }
    return err / (mag + 1e-6);
}

/* the CPU's attention of every (row, head) of q rows (normed, roped) over the cache */
static double cpu_error(const attn_case *c, const float *q, const uint8_t *kc, const uint8_t *vc, const float *o) {
    const int D = c->D, esz = c->f32 ? 4 : 2;
    float *qb = malloc(sizeof *qb * (size_t)D), *ref = malloc(sizeof *ref * (size_t)D), *sc = malloc(sizeof *sc * (size_t)c->n_ctx);
    float *tmp = malloc(sizeof *tmp * (size_t)D);
    double worst = 0;
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < c->H; h++) {
            const float *src = q + (size_t)(c->r0 + t) * c->qw + (size_t)h * 2 * D;
            for (int i = 0; i < D; i++) qb[i] = c->f32 ? src[i] : bs_f16_to_f32(bs_f32_to_f16(src[i]));
            const int nkv = c->pos0 + t + 1, kvh = h / (c->H / c->Hkv);
            const size_t off = (size_t)kvh * D * esz;
            bs_attn_queries(qb, 1, &nkv, kc + off, vc + off, c->kvw * esz, !c->f32, D, ref, sc, (size_t)c->n_ctx, tmp);
            const float *got = o + ((size_t)(c->r0 + t) * c->H + h) * D;
            worst = fmax(worst, rel_error(got, ref, D));
        }
    free(qb); free(ref); free(sc); free(tmp);
    return worst;
}

/* the epilogue: gate and blocks from the split kernel vs its plain output then quant_q8 mode 2 */
static bool quant_same(const attn_case *c, attn_push ap, const float *q, uint8_t *kc, uint8_t *vc, const float *o_plain) {
    const size_t HD = (size_t)c->H * c->D, n = (size_t)c->T * HD, nb = n / 32, r0 = (size_t)c->r0, all = nb + r0 * HD / 32 + 1;
    ap.quant = 1;   /* the blocks at the sequence's rows, from r0 (ap.qrow0) */
    float *o = calloc(n + r0 * HD, 4), *y = dup(o_plain + r0 * HD, 4 * n), *as = calloc(all, 4), *am = calloc(all, 4);
    float *rs = calloc(nb, 4), *rm = calloc(nb, 4);
    uint32_t *aq = calloc(all * 8, 4), *rq = calloc(nb * 8, 4);
    bool z = false;
    int rc = run_attn(c, &ap, c->T, c->pos0, q, c->b, c->v, kc, vc, o, aq, as, am, true, &z, NULL);
    uint32_t qp[4] = {(uint32_t)nb, 2, (uint32_t)c->H, (uint32_t)c->D};
    void *qd[5] = {y, rq, rs, rm, (void *)(q + r0 * c->qw)};
    size_t qb[5] = {4 * n, 32 * nb, 4 * nb, 4 * nb, 4u * (size_t)c->T * c->qw};
    rc = rc || bs_vk_kernel_run(C, "quant_q8", qd, qb, 5, qp, sizeof qp, (uint32_t)(nb + 63) / 64, 1, 1);
    const size_t b0 = r0 * HD / 32;
    const bool same = !rc && z && !memcmp(o + r0 * HD, y, 4 * n) && !memcmp(aq + 8 * b0, rq, 32 * nb) && !memcmp(as + b0, rs, 4 * nb) &&
                      !memcmp(am + b0, rm, 4 * nb);
    free(o); free(y); free(as); free(am); free(rs); free(rm); free(aq); free(rq);
    return same;
}

/* the epilogue rotating for a folded output product, against the plain epilogue's gated rows
 * rotated and quantized on the CPU */
static bool rot_same(const attn_case *c, attn_push ap, const float *q, uint8_t *kc, uint8_t *vc, int block, bool signs) {
    const size_t HD = (size_t)c->H * c->D, r0 = (size_t)c->r0, nr = r0 + (size_t)c->T, all = nr * HD / 32 + 1;
    ap.quant = 1;
    float *o1 = calloc(nr * HD, 4), *o2 = calloc(nr * HD, 4), *xr = calloc(nr * HD, 4), *rot = calloc(nr * HD, 4);
    float *as = calloc(all, 4), *am = calloc(all, 4), *sg = malloc(4 * HD);
    uint32_t *aq = calloc(all * 8, 4), *bcnt = calloc(nr * HD / (size_t)block, 4);
    for (size_t i = 0; i < HD; i++) sg[i] = bs_rng_normal(&rng) < 0 ? -1.0f : 1.0f;
    const attn_rot rt = {block, signs ? sg : NULL, xr, bcnt};
    bool z1 = false, z2 = false;
    int rc = run_attn(c, &ap, c->T, c->pos0, q, c->b, c->v, kc, vc, o1, aq, as, am, true, &z1, NULL) ||
             run_attn(c, &ap, c->T, c->pos0, q, c->b, c->v, kc, vc, o2, aq, as, am, true, &z2, &rt);
    const bs_rotation R = {.block = block, .width = (int64_t)HD, .signs = signs ? sg : NULL};
    bs_rotate_rows(&R, o1 + r0 * HD, rot, c->T, NULL);
    const size_t n = (size_t)c->T * HD, b0 = r0 * HD / 32;
    bool left = false;
    for (size_t i = 0; i < nr * HD / (size_t)block; i++) left |= bcnt[i] != 0;
    const bool same = !rc && z1 && z2 && !left && !memcmp(o1, o2, 4 * nr * HD) && !memcmp(xr + r0 * HD, rot, 4 * n) &&
                      vk_test_blocks_differ(rot, n, aq + 8 * b0, as + b0, am + b0) == 0;
    free(o1); free(o2); free(xr); free(rot); free(as); free(am); free(sg); free(aq); free(bcnt);
    return same;
}

static void check_split(int H, int Hkv, int D, int n_rot, int T, int pos0, bool f32, uint32_t chunk) {
    attn_case c = make_case(H, Hkv, D, n_rot, T, pos0, f32, chunk);
    const size_t ob = 4u * (size_t)(c.r0 + T) * H * D;
    char what[160];
    snprintf(what, sizeof what, "attn_split %d/%d heads of %d, %d rows at %d (context %d, chunk %u), %s", H, Hkv, D, T, pos0,
             pos0 + T, chunk, f32 ? "F32" : "F16");
    /* apart: qk.comp's norms, rope and store, then the unfused kernels on what it left */
    float *a2 = dup(c.a, 4u * (size_t)(c.r0 + T) * c.qw), *b2 = dup(c.b, 4u * (size_t)(c.r0 + T) * c.kvw);
    uint8_t *kc2 = dup(c.kc, c.kvb), *vc2 = dup(c.vc, c.kvb);
    uint32_t params[4] = {(uint32_t)pos0, 0, 0, 0};
    qk_push qp = {
        (uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)n_rot, (uint32_t)c.r0, f32, 1e-6f, 1};
    void *qd[9] = {a2, b2, c.v, c.qn, c.kn, c.cs, kc2, vc2, params};
    const size_t nr = (size_t)(c.r0 + T);
    size_t qb[9] = {4u * nr * c.qw, 4u * nr * c.kvw, 4u * nr * c.kvw, 4u * D, 4u * D, c.csb, c.kvb, c.kvb, 16};
    CHECK(bs_vk_kernel_run(C, "qk", qd, qb, 9, &qp, sizeof qp, (uint32_t)(T * (H + Hkv)), 1, 1) == 0);
    attn_push ap = {(uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)c.n_ctx, 1.0f / sqrtf((float)D), f32, 0, (uint32_t)c.r0, 0,
                    (uint32_t)n_rot, 1e-6f};
    float *o_nf = calloc(ob, 1), *o_f = calloc(ob, 1), *o_old = calloc(ob, 1), *o1 = calloc(ob, 1);
    bool z1 = false, z2 = false;
    CHECK(run_attn(&c, &ap, T, pos0, a2, c.b, c.v, kc2, vc2, o_nf, NULL, NULL, NULL, true, &z1, NULL) == 0);
    const double err = cpu_error(&c, a2, kc2, vc2, o_nf);
    CHECKF(err < 1e-5 && z1, "%s: error %.3g vs the CPU, counters left at 0: %d", what, err, z1);
    /* fused, from the raw rows on the cache before the store */
    uint8_t *kc3 = dup(c.kc, c.kvb), *vc3 = dup(c.vc, c.kvb);
    attn_push fp = ap;
    fp.fused = 1;
    CHECK(run_attn(&c, &fp, T, pos0, c.a, c.b, c.v, kc3, vc3, o_f, NULL, NULL, NULL, true, &z2, NULL) == 0);
    CHECKF(!memcmp(o_f, o_nf, ob) && !memcmp(kc3, kc2, c.kvb) && !memcmp(vc3, vc2, c.kvb) && z2,
           "%s: fused differs from qk then unfused (output %d, k %d, v %d, counters %d)", what, !memcmp(o_f, o_nf, ob),
           !memcmp(kc3, kc2, c.kvb), !memcmp(vc3, vc2, c.kvb), z2);
    /* each row alone at its position: unfused over the stored cache, fused from its raw row */
    const size_t HD = (size_t)H * D;
    bool alone = true;
    for (int t = 0; t < T; t++) {
        attn_push p1 = ap, f1 = fp;
        p1.qrow0 = f1.qrow0 = (uint32_t)(c.r0 + t);
        const size_t at = (size_t)(c.r0 + t) * HD;
        uint8_t *kc4 = dup(kc2, c.kvb), *vc4 = dup(vc2, c.kvb);
        CHECK(run_attn(&c, &p1, 1, pos0 + t, a2, c.b, c.v, kc4, vc4, o1, NULL, NULL, NULL, true, NULL, NULL) == 0);
        alone &= !memcmp(o1 + at, o_nf + at, 4 * HD);
        CHECK(run_attn(&c, &f1, 1, pos0 + t, c.a, c.b, c.v, kc4, vc4, o1, NULL, NULL, NULL, true, NULL, NULL) == 0);
        alone &= !memcmp(o1 + at, o_f + at, 4 * HD) && !memcmp(kc4, kc2, c.kvb) && !memcmp(vc4, vc2, c.kvb);
        free(kc4); free(vc4);
    }
    CHECKF(alone, "%s: a row's bits depend on the rows evaluated with it", what);
    if (pos0 + T <= (int)chunk) {   /* one chunk: attn.comp's bits */
        CHECK(run_attn(&c, &ap, T, pos0, a2, c.b, c.v, kc2, vc2, o_old, NULL, NULL, NULL, false, NULL, NULL) == 0);
        CHECKF(!memcmp(o_old, o_nf, ob), "%s: one chunk, not attn.comp's bits", what);
    }
    if (D % 32 == 0) CHECKF(quant_same(&c, ap, a2, kc2, vc2, o_nf), "%s: the epilogue differs from the gate and quantizer apart", what);
    if (D % 32 == 0) {   /* Bonsai 2's block on 27B's shape, else the widest power of two dividing H * D */
        int block = 32;
        while (block * 2 <= 2048 && (H * D) % (block * 2) == 0) block *= 2;
        if (H * D == 6144) block = 1024;
        CHECKF(rot_same(&c, ap, a2, kc2, vc2, block, block != 64), "%s: the rotating epilogue (block %d) differs from the CPU's", what, block);
    }
    printf("%s: error %.2g, fused, alone%s: the same bits\n", what, err, pos0 + T <= (int)chunk ? ", attn.comp" : "");
    free(a2); free(b2); free(kc2); free(vc2); free(kc3); free(vc3); free(o_nf); free(o_f); free(o_old); free(o1);
    free_case(&c);
}

int main(void) {
    const int rc = vk_test_open("test_vulkan_attn", &C);
    if (rc || !C) return rc;
    bs_rng_seed(&rng, 3607);
    /* contexts (pos0 + rows) of 1, C - 1, C, C + 1, 5C + 3 with chunks of 16; 27B's shape */
    static const int ctx[] = {1, 15, 16, 17, 83};
    for (size_t i = 0; i < BS_ARRAY_LEN(ctx); i++) {
        const int T = BS_MIN(ctx[i], 1 + (int)(i * 2) % 8);
        check_split(24, 4, 256, 64, T, ctx[i] - T, false, 16);
    }
    check_split(24, 4, 256, 64, 8, 75, false, 16);
    check_split(24, 4, 256, 64, 2, 300, false, 256);   /* the default chunk: two of them */
    check_split(24, 4, 256, 64, 1, 255, false, 256);   /* one chunk, full */
    /* odd shapes: groups of 1, 3, 5 and 12 (two passes of 8 V sums), D 32 / 64 / 96, F32 caches */
    check_split(3, 3, 32, 32, 3, 14, true, 16);
    check_split(6, 2, 96, 0, 8, 9, true, 16);
    check_split(5, 1, 64, 16, 5, 78, false, 16);
    check_split(12, 1, 128, 64, 4, 49, false, 16);
    check_split(1, 1, 64, 64, 1, 0, false, 16);
    check_split(6, 2, 96, 32, 7, 23, true, 5);   /* a chunk smaller than a K tile and the rows */
    bs_vk_close(C);
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary("test_vulkan_attn");
}
