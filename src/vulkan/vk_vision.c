/* vk_vision.c: the qwen3vl_merger ViT on the device, step for step the CPU's encoder.c: patch
 * embedding as one product over the unrolled patches (+ bias + the resized position table), pre-LN
 * blocks (LayerNorm, fused qkv + bias, 2-D RoPE split into Q / K / V, attention of every patch to
 * every patch through attn_nc.comp, output product, residual; LayerNorm, up + GELU, down,
 * residual), then post-LN and the 2x2 merger (the post-LN rows read four at a time: the host
 * orders the patches in 2x2 blocks). The host does what is cheap and shape-dependent: unrolling,
 * resizing the position table, the RoPE table. Products by weights are the target's kernels
 * (bs_vk_record_mv: F32 / F16 / BF16 as F32 with the CPU's activation rounding, Q8_0 on int8).
 * One submission per block; buffers are sized per image. An MLP width the products do not take
 * (not a multiple of 32: Qwen3.5's is 4304) is padded with zero rows of up (and zero biases:
 * GELU(0) = 0) and zero columns of down, which changes no sum. */
#include "vulkan/vk_internal.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { VIT_BIAS = 0, VIT_BIAS_GELU = 1, VIT_ADD = 2, VIT_QKV = 3 };

typedef struct {
    bs_vk_buf ln1_w, ln1_b, ln2_w, ln2_b, qkv_b, out_b, up_b, down_b;
    bs_vk_matrix *qkv, *out, *up, *down;
} vit_block;

struct bs_vk_vit {
    bs_vk_ctx *c;
    int C, FF, L, H, K, proj;     /* width, MLP width (padded), blocks, heads, patch inputs (3 P P), output */
    float eps;
    bs_vk_matrix *patch, *mm0, *mm2;
    bs_vk_buf patch_b, post_w, post_b, mm0_b, mm2_b;
    vit_block *blk;
};

/* One image's buffers. */
typedef struct {
    bs_vk_vit *v;
    int n, chunk;                 /* patches; queries per attention dispatch */
    bs_vk_buf u, x, h, qkv, q, k, vv, att, ff, out, pos, rope, sc, aq, as, am, xr;
} vit_run;


static int vec(bs_vk_ctx *c, bs_vk_buf *b, const float *v, int n) {
    return !v ? bs_error("Vulkan vision: a vector is missing") : bs_vk_upload_vec(c, b, v, (size_t)n);
}

static int mat(bs_vk_ctx *c, bs_vk_matrix **m, const bs_vk_tensor *t, int64_t ne0, int64_t ne1) {
    if (t->ne0 != ne0 || t->ne1 != ne1)
        return bs_error("Vulkan vision: %s is %lld x %lld, want %lld x %lld", t->name ? t->name : "a matrix",
                        (long long)t->ne0, (long long)t->ne1, (long long)ne0, (long long)ne1);
    return bs_vk_upload_mat(c, m, t);
}

/* up with zero rows to ne1 = ff (pad_rows), or down with zero columns to ne0 = ff; F32, F16 or
 * BF16 only (zero bits are 0.0 in each). */
static int mat_padded(bs_vk_ctx *c, bs_vk_matrix **m, const bs_vk_tensor *t, int64_t ne0, int64_t ne1, int ff,
                      bool pad_rows) {
    if ((pad_rows ? t->ne1 : t->ne0) == ff) return mat(c, m, t, ne0, ne1);
    if (t->ne0 != ne0 || t->ne1 != ne1 || (t->type != BS_F32 && t->type != BS_F16 && t->type != BS_BF16))
        return bs_error("Vulkan vision: %s: an MLP width of %d needs an F32, F16 or BF16 matrix", t->name ? t->name : "ffn",
                        pad_rows ? (int)t->ne1 : (int)t->ne0);
    bs_vk_tensor p = *t;
    if (pad_rows) p.ne1 = ff;
    else p.ne0 = ff, p.row_bytes = bs_row_size(t->type, ff);
    uint8_t *data = bs_xcalloc((size_t)p.ne1, p.row_bytes);
    for (int64_t r = 0; r < t->ne1; r++) memcpy(data + (size_t)r * p.row_bytes, (const uint8_t *)t->data + (size_t)r * t->row_bytes, t->row_bytes);
    p.data = data;
    const int rc = bs_vk_upload_mat(c, m, &p) || bs_vk_staging_flush(c);   /* the copies have left data */
    free(data);
    return rc;
}

static int vec_padded(bs_vk_ctx *c, bs_vk_buf *b, const float *v, int n, int padded) {
    if (!v) return bs_error("Vulkan vision: a vector is missing");
    float *p = bs_xcalloc((size_t)padded, sizeof *p);
    memcpy(p, v, sizeof *p * (size_t)n);
    const int rc = bs_vk_upload_vec(c, b, p, (size_t)padded) || bs_vk_staging_flush(c);
    free(p);
    return rc;
}

static int upload(bs_vk_vit *v, const bs_vk_vit_desc *d) {
    bs_vk_ctx *c = v->c;
    const int C = v->C, FF = d->n_ff, FFp = v->FF;
    TRY(mat(c, &v->patch, &d->patch, v->K, C) || vec(c, &v->patch_b, d->patch_b, C));
    TRY(mat(c, &v->mm0, &d->mm0, 4 * C, 4 * C) || mat(c, &v->mm2, &d->mm2, 4 * C, v->proj));
    TRY(vec(c, &v->post_w, d->post_w, C) || vec(c, &v->post_b, d->post_b, C) || vec(c, &v->mm0_b, d->mm0_b, 4 * C) ||
        vec(c, &v->mm2_b, d->mm2_b, v->proj));
    for (int l = 0; l < v->L; l++) {
        const bs_vk_vit_block_desc *b = &d->blocks[l];
        vit_block *o = &v->blk[l];
        TRY(vec(c, &o->ln1_w, b->ln1_w, C) || vec(c, &o->ln1_b, b->ln1_b, C) || vec(c, &o->ln2_w, b->ln2_w, C) ||
            vec(c, &o->ln2_b, b->ln2_b, C) || vec(c, &o->qkv_b, b->qkv_b, 3 * C) || vec(c, &o->out_b, b->out_b, C) ||
            vec_padded(c, &o->up_b, b->up_b, FF, FFp) || vec(c, &o->down_b, b->down_b, C));
        TRY(mat(c, &o->qkv, &b->qkv, C, 3 * C) || mat(c, &o->out, &b->out, C, C) ||
            mat_padded(c, &o->up, &b->up, C, FF, FFp, true) || mat_padded(c, &o->down, &b->down, FF, C, FFp, false));
    }
    return 0;
}

bs_vk_vit *bs_vk_vit_new(bs_vk_ctx *c, const bs_vk_vit_desc *d) {
    if (d->n_head <= 0 || d->n_embd % d->n_head || (d->n_embd / d->n_head) % 4 || d->n_embd / d->n_head > 256 ||
        d->n_layer < 0 || d->n_ff <= 0 || d->patch_k <= 0 || d->proj_dim <= 0)
        return bs_error("Vulkan vision: a shape the kernels do not take (width %d, %d heads)", d->n_embd, d->n_head),
               NULL;
    bs_vk_vit *v = bs_xcalloc(1, sizeof *v);
    *v = (bs_vk_vit){.c = c, .C = d->n_embd, .FF = (d->n_ff + 31) / 32 * 32, .L = d->n_layer, .H = d->n_head, .K = d->patch_k,
                     .proj = d->proj_dim, .eps = d->eps};
    v->blk = bs_xcalloc((size_t)BS_MAX(v->L, 1), sizeof *v->blk);
    if (upload(v, d) || bs_vk_staging_flush(c)) {
        bs_error_prefix("Vulkan vision: ");
        bs_vk_vit_free(v);
        return NULL;
    }
    return v;
}

void bs_vk_vit_free(bs_vk_vit *v) {
    if (!v) return;
    bs_vk_ctx *c = v->c;
    for (int l = 0; l < v->L; l++) {
        vit_block *o = &v->blk[l];
        bs_vk_buf *bs[] = {&o->ln1_w, &o->ln1_b, &o->ln2_w, &o->ln2_b, &o->qkv_b, &o->out_b, &o->up_b, &o->down_b};
        for (size_t i = 0; i < BS_ARRAY_LEN(bs); i++) bs_vk_buf_free(c, bs[i]);
        bs_vk_matrix *ms[] = {o->qkv, o->out, o->up, o->down};
        for (size_t i = 0; i < BS_ARRAY_LEN(ms); i++) bs_vk_matrix_free(c, ms[i]);
    }
    bs_vk_buf *bs[] = {&v->patch_b, &v->post_w, &v->post_b, &v->mm0_b, &v->mm2_b};
    for (size_t i = 0; i < BS_ARRAY_LEN(bs); i++) bs_vk_buf_free(c, bs[i]);
    bs_vk_matrix_free(c, v->patch);
    bs_vk_matrix_free(c, v->mm0);
    bs_vk_matrix_free(c, v->mm2);
    free(v->blk);
    free(v);
}

/* --- recording -------------------------------------------------------------------------------- */

static int ew(vit_run *r, int mode, const bs_vk_buf *a, const bs_vk_buf *b, uint64_t n, uint32_t width, uint32_t p0,
              const bs_vk_buf *c3, const bs_vk_buf *d3, const bs_vk_buf *e3) {
    bs_vk_ctx *c = r->v->c;
    const bs_vk_buf *bb[5] = {a, b, c3, d3, e3};   /* NULL: unused (bs_vk_dispatch) */
    const uint32_t push[4] = {(uint32_t)mode, (uint32_t)n, width, p0};
    const uint32_t g = bs_vk_groups(n, 256), gx = g < 65535 ? g : 65535;
    TRY(bs_vk_dispatch(c, BS_VK_K_VIT_EW, bb, push, gx, bs_vk_groups(g, gx), 1));
    bs_vk_barrier(c);
    return 0;
}

static int layer_norm(vit_run *r, const bs_vk_buf *x, const bs_vk_buf *w, const bs_vk_buf *b, const bs_vk_buf *y) {
    bs_vk_ctx *c = r->v->c;
    const bs_vk_buf *bb[4] = {x, w, b, y};
    struct { uint32_t d; float eps; } push = {(uint32_t)r->v->C, r->v->eps};
    TRY(bs_vk_dispatch(c, BS_VK_K_VIT_LN, bb, &push, (uint32_t)r->n, 1, 1));
    bs_vk_barrier(c);
    return 0;
}

/* y = W x + b for n rows (then GELU when asked) */
static int linear(vit_run *r, const bs_vk_matrix *W, const bs_vk_buf *b, const bs_vk_buf *x, int n, const bs_vk_buf *y,
                  bool gelu) {
    bs_vk_ctx *c = r->v->c;
    if (W->kernel != BS_VK_K_MV_F32) {
        TRY(bs_vk_record_quant(c, x, &r->aq, &r->as, &r->am, (uint64_t)n * W->ne0 / 32));
        bs_vk_barrier(c);
    }
    if (W->act && !bs_vk_act_inline(c, W, n)) {   /* (mv_f32n rounds x as it reads it) */
        TRY(bs_vk_record_act(c, W, x, &r->xr, n));
        bs_vk_barrier(c);
        x = &r->xr;
    }
    TRY(bs_vk_record_mv(c, W, x, &r->aq, &r->as, &r->am, n, y));
    bs_vk_barrier(c);
    return ew(r, gelu ? VIT_BIAS_GELU : VIT_BIAS, y, b, (uint64_t)n * W->ne1, (uint32_t)W->ne1, 0, NULL, NULL, NULL);
}

/* Every patch attends to every patch: softmax(Q_h K_h^T / sqrt(D)) V_h, in chunks of queries
 * (a dispatch's group count and the scores scratch bound them), each reading its q rows and
 * writing its output rows from row i0 (the kernel's qrow0). */
static int attention(vit_run *r) {
    bs_vk_ctx *c = r->v->c;
    const uint32_t H = (uint32_t)r->v->H, C = (uint32_t)r->v->C, D = C / H;
    for (int i0 = 0; i0 < r->n; i0 += r->chunk) {
        const int m = BS_MIN(r->chunk, r->n - i0);
        struct { uint32_t H, Hkv, D, first, n_kv, sc_stride; float scale; uint32_t qrow0; } ap = {
            H, H, D, 0, (uint32_t)r->n, (uint32_t)r->n, 1.0f / sqrtf((float)D), (uint32_t)i0};
        const bs_vk_buf *ab[5] = {&r->q, &r->k, &r->vv, &r->att, &r->sc};
        TRY(bs_vk_dispatch(c, BS_VK_K_ATTN_NC, ab, &ap, (uint32_t)m * H, 1, 1));
        bs_vk_barrier(c);   /* (the next chunk's scores take the same scratch) */
    }
    return 0;
}

static int block(vit_run *r, const vit_block *b) {
    const uint64_t nC = (uint64_t)r->n * r->v->C;
    const uint32_t C = (uint32_t)r->v->C;
    TRY(layer_norm(r, &r->x, &b->ln1_w, &b->ln1_b, &r->h));
    TRY(linear(r, b->qkv, &b->qkv_b, &r->h, r->n, &r->qkv, false));
    const uint32_t D = C / (uint32_t)r->v->H;
    TRY(ew(r, VIT_QKV, &r->qkv, &r->rope, nC / 2, C, D, &r->q, &r->k, &r->vv));
    TRY(attention(r));
    TRY(linear(r, b->out, &b->out_b, &r->att, r->n, &r->h, false));
    TRY(ew(r, VIT_ADD, &r->x, &r->h, nC, C, 0, NULL, NULL, NULL));
    TRY(layer_norm(r, &r->x, &b->ln2_w, &b->ln2_b, &r->h));
    TRY(linear(r, b->up, &b->up_b, &r->h, r->n, &r->ff, true));
    TRY(linear(r, b->down, &b->down_b, &r->ff, r->n, &r->h, false));
    return ew(r, VIT_ADD, &r->x, &r->h, nC, C, 0, NULL, NULL, NULL);
}

/* One submission: what rec records. */
static int submit(vit_run *r, int (*rec)(vit_run *, int), int arg) {
    TRY(bs_vk_begin(r->v->c));
    const int rc = rec(r, arg);
    return bs_vk_submit(r->v->c) || rc ? -1 : 0;
}

static int rec_embed(vit_run *r, int arg) {
    (void)arg;
    TRY(linear(r, r->v->patch, &r->v->patch_b, &r->u, r->n, &r->x, false));
    return ew(r, VIT_ADD, &r->x, &r->pos, (uint64_t)r->n * r->v->C, (uint32_t)r->v->C, 0, NULL, NULL, NULL);
}

static int rec_block(vit_run *r, int l) { return block(r, &r->v->blk[l]); }

static int rec_merge(vit_run *r, int arg) {
    (void)arg;
    TRY(layer_norm(r, &r->x, &r->v->post_w, &r->v->post_b, &r->h));
    TRY(linear(r, r->v->mm0, &r->v->mm0_b, &r->h, r->n / 4, &r->ff, true));   /* h read as [n/4][4C] */
    return linear(r, r->v->mm2, &r->v->mm2_b, &r->ff, r->n / 4, &r->out, false);
}

/* --- one image -------------------------------------------------------------------------------- */

static int run_alloc(vit_run *r) {
    bs_vk_ctx *c = r->v->c;
    const size_t n = (size_t)r->n, C = (size_t)r->v->C, FF = (size_t)r->v->FF, H = (size_t)r->v->H;
    const size_t ffw = FF > 4 * C ? FF : 4 * C, wq = BS_MAX(BS_MAX((size_t)r->v->K, ffw), 4 * C);
    /* queries per attention dispatch: at most 65535 groups, scores within a binding and 256 MiB */
    const uint64_t cap = BS_MIN(c->max_binding, (uint64_t)256 << 20) / (4u * H * n);
    r->chunk = (int)BS_MIN(BS_MIN((uint64_t)n, cap), 65535u / H);
    const char *force = getenv("BITSPARK_VK_VIT_CHUNK");   /* tests: the chunked path on small images */
    if (force && atoi(force) > 0) r->chunk = BS_MIN(r->chunk, atoi(force));
    if (r->chunk < 1) return bs_error("an image of %zu patches is too large for the device's attention", n);
    const size_t ch = (size_t)r->chunk;
    return bs_vk_buf_new(c, &r->u, 4 * n * (size_t)r->v->K, false) || bs_vk_buf_new(c, &r->x, 4 * n * C, false) ||
           bs_vk_buf_new(c, &r->h, 4 * n * C, false) || bs_vk_buf_new(c, &r->qkv, 12 * n * C, false) ||
           bs_vk_buf_new(c, &r->q, 4 * n * C, false) || bs_vk_buf_new(c, &r->k, 4 * n * C, false) ||
           bs_vk_buf_new(c, &r->vv, 4 * n * C, false) || bs_vk_buf_new(c, &r->att, 4 * n * C, false) ||
           bs_vk_buf_new(c, &r->ff, 4 * n * ffw, false) || bs_vk_buf_new(c, &r->out, 4 * (n / 4) * (size_t)r->v->proj, false) ||
           bs_vk_buf_new(c, &r->pos, 4 * n * C, false) || bs_vk_buf_new(c, &r->rope, 4 * n * (C / H), false) ||
           bs_vk_buf_new(c, &r->sc, 4 * ch * H * n, false) || bs_vk_buf_new(c, &r->aq, n * wq, false) ||
           bs_vk_buf_new(c, &r->as, n * wq / 8 + 16, false) || bs_vk_buf_new(c, &r->am, n * wq / 8 + 16, false) ||
           bs_vk_buf_new(c, &r->xr, 4 * n * wq, false)
               ? -1 : 0;
}

static void run_free(vit_run *r) {
    bs_vk_buf *bs[] = {&r->u, &r->x, &r->h, &r->qkv, &r->q, &r->k, &r->vv, &r->att, &r->ff, &r->out, &r->pos,
                       &r->rope, &r->sc, &r->aq, &r->as, &r->am, &r->xr};
    for (size_t i = 0; i < BS_ARRAY_LEN(bs); i++) bs_vk_buf_free(r->v->c, bs[i]);
}

int bs_vk_vit_encode(bs_vk_vit *v, const float *patches, const float *pos, const float *rope, int n, float *out) {
    if (n < 4 || n % 4) return bs_error("Vulkan vision: %d patches (a multiple of 4 is needed)", n);
    vit_run r = {.v = v, .n = n};
    const size_t C = (size_t)v->C, D = C / (size_t)v->H;
    int rc = run_alloc(&r) || bs_vk_buf_write(v->c, &r.u, 0, patches, 4 * (size_t)n * v->K) ||
             bs_vk_buf_write(v->c, &r.pos, 0, pos, 4 * (size_t)n * C) ||
             bs_vk_buf_write(v->c, &r.rope, 0, rope, 4 * (size_t)n * D) || submit(&r, rec_embed, 0);
    for (int l = 0; l < v->L && !rc; l++) rc = submit(&r, rec_block, l);
    rc = rc || submit(&r, rec_merge, 0) || bs_vk_buf_read(v->c, &r.out, 0, out, 4 * (size_t)(n / 4) * v->proj);
    run_free(&r);
    return rc ? bs_error_prefix("Vulkan vision: ") : 0;
}
