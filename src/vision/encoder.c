/* encoder.c: the qwen3vl_merger ViT on the CPU (docs/vision.md): patch embedding as one matrix
 * product over the unrolled patches, the learned position table resized with torch's
 * antialiased bilinear, pre-LN blocks (fused qkv, 2D RoPE, full attention, GELU MLP), then
 * post-LN and the 2x2 merger. Every product by a weight goes through bs_matmul (SIMD, threads);
 * attention is two bs_matmul products per head and chunk of queries (Q K^T, then P V) with K
 * and V^T gathered as F32 "weights", so it runs on the same kernels. Patches are kept in merge
 * order (2x2 blocks row-major, (0,0),(0,1),(1,0),(1,1) inside) from the start, so the merger's
 * 4C input rows are the post-LN rows read four at a time. */
#include "vision/mmproj_impl.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const bs_mmproj *m;
    bs_pool *pool;
    int n, C, D, H, wp, hp;   /* patches, width, head dim, heads, patch grid */
    int *py, *px;             /* patch k -> grid (y, x) */
    float *rope;              /* [n][D/2][2]: cos, sin of each rotated pair */
} vit;

/* --- element-wise work, split over the pool by rows ----------------------------------------- */

typedef void (*rows_fn)(const vit *v, void *arg, int64_t r0, int64_t r1);
typedef struct { const vit *v; void *arg; rows_fn fn; int64_t n; } rows_job;

static void rows_worker(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    bs_pool_split(j->n, 1, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j->v, j->arg, lo, hi);
}

static void for_rows(const vit *v, int64_t n, rows_fn fn, void *arg) {
    rows_job j = {v, arg, fn, n};
    bs_pool_run(v->pool, rows_worker, &j);
}

typedef struct { float *x; const float *w, *b; int width; float eps; float *y; } ln_arg;

static void layer_norm_rows(const vit *v, void *a_, int64_t r0, int64_t r1) {
    ln_arg *a = a_;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->width;
        float *y = a->y + r * a->width;
        double s = 0, ss = 0;
        for (int i = 0; i < a->width; i++) s += x[i];
        const float mean = (float)(s / a->width);
        for (int i = 0; i < a->width; i++) ss += (double)(x[i] - mean) * (x[i] - mean);
        const float inv = 1.0f / sqrtf((float)(ss / a->width) + a->eps);
        for (int i = 0; i < a->width; i++) y[i] = (x[i] - mean) * inv * a->w[i] + a->b[i];
    }
}

static void layer_norm(const vit *v, const float *x, const float *w, const float *b, int width, int64_t n, float *y) {
    ln_arg a = {(float *)x, w, b, width, v->m->hp.eps, y};
    for_rows(v, n, layer_norm_rows, &a);
}

typedef struct { float *y; const float *b; int width; int gelu; } bias_arg;

/* ggml's GELU: the tanh approximation (llama.cpp's CPU path reads it from an fp16 table; the
 * exact formula stays well within the fixture's tolerance, docs/vision.md). */
static inline float gelu(float x) {
    const float c = 0.7978845608028654f;   /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static void bias_rows(const vit *v, void *a_, int64_t r0, int64_t r1) {
    bias_arg *a = a_;
    for (int64_t r = r0; r < r1; r++) {
        float *y = a->y + r * a->width;
        for (int i = 0; i < a->width; i++) y[i] += a->b[i];
        if (a->gelu)
            for (int i = 0; i < a->width; i++) y[i] = gelu(y[i]);
    }
}

/* y = W x + b (then GELU when asked), n rows. */
static void linear(const vit *v, const bs_weight *W, const float *b, const float *x, int64_t n, float *y, int act) {
    bs_matmul(W, x, n, y, v->pool);
    bias_arg a = {y, b, (int)W->ne1, act};
    for_rows(v, n, bias_rows, &a);
}

/* --- patch grid, positions, RoPE table ------------------------------------------------------- */

static void patch_order(vit *v) {
    const int bw = v->wp / 2;
    for (int k = 0; k < v->n; k++) {
        int b = k / 4, q = k % 4;
        v->py[k] = (b / bw) * 2 + q / 2;
        v->px[k] = (b % bw) * 2 + q % 2;
    }
}

/* The unrolled patches [n][3*P*P] in the order of the conv kernel (channel, ky, kx). */
static float *unroll_patches(const vit *v, const float *pix, int W, int Hh) {
    const int P = v->m->hp.patch, K = 3 * P * P;
    float *u = bs_xmalloc((size_t)v->n * K * sizeof *u);
    for (int k = 0; k < v->n; k++)
        for (int c = 0; c < 3; c++)
            for (int ky = 0; ky < P; ky++)
                memcpy(u + (size_t)k * K + (c * P + ky) * P,
                       pix + ((size_t)c * Hh + (size_t)v->py[k] * P + ky) * W + (size_t)v->px[k] * P,
                       (size_t)P * sizeof(float));
    return u;
}

/* torch's antialiased bilinear weights (align_corners = False) for one output index: a triangle
 * filter stretched to the source step when shrinking, normalised to sum 1. */
static int aa_weights(int in, int out, int i, float *w, int *first) {
    const float scale = (float)in / (float)out;
    const float support = scale >= 1.0f ? scale : 1.0f, inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    const float center = scale * ((float)i + 0.5f);
    int lo = (int)(center - support + 0.5f), hi = (int)(center + support + 0.5f);
    if (lo < 0) lo = 0;
    if (hi > in) hi = in;
    float total = 0;
    for (int j = lo; j < hi; j++) {
        float t = fabsf(((float)j - center + 0.5f) * inv);
        w[j - lo] = t < 1.0f ? 1.0f - t : 0.0f;
        total += w[j - lo];
    }
    for (int j = lo; j < hi; j++) w[j - lo] = total > 0 ? w[j - lo] / total : 0;
    *first = lo;
    return hi - lo;
}

/* The S x S table resized to hp x wp: [hp*wp][C], separable (columns, then rows). */
static float *resize_pos(const vit *v) {
    const int S = v->m->hp.pos_side, C = v->C, wp = v->wp, hp = v->hp;
    float *tmp = bs_xcalloc((size_t)S * wp * C, sizeof *tmp);   /* [S][wp][C] */
    float *out = bs_xcalloc((size_t)hp * wp * C, sizeof *out);
    float *w = bs_xmalloc(sizeof *w * (size_t)(2 * S + 4));
    int lo;
    for (int x = 0; x < wp; x++) {
        int nw = aa_weights(S, wp, x, w, &lo);
        for (int r = 0; r < S; r++)
            for (int j = 0; j < nw; j++) {
                const float *src = v->m->pos + ((size_t)r * S + lo + j) * C;
                float *dst = tmp + ((size_t)r * wp + x) * C;
                for (int c = 0; c < C; c++) dst[c] += w[j] * src[c];
            }
    }
    for (int y = 0; y < hp; y++) {
        int nw = aa_weights(S, hp, y, w, &lo);
        for (int j = 0; j < nw; j++)
            for (int x = 0; x < wp; x++) {
                const float *src = tmp + ((size_t)(lo + j) * wp + x) * C;
                float *dst = out + ((size_t)y * wp + x) * C;
                for (int c = 0; c < C; c++) dst[c] += w[j] * src[c];
            }
    }
    free(w);
    free(tmp);
    return out;
}

/* 2D RoPE (ggml's vision mode, base 10000): pairs (j, j + D/2); the first D/4 pairs turn with
 * the patch row, the rest with its column, each quarter with frequencies 10000^(-4i/D). */
static void rope_table(vit *v) {
    const int half = v->D / 2, q = v->D / 4;
    v->rope = bs_xmalloc((size_t)v->n * half * 2 * sizeof *v->rope);
    for (int k = 0; k < v->n; k++)
        for (int j = 0; j < half; j++) {
            int i = j < q ? j : j - q;
            double pos = j < q ? v->py[k] : v->px[k];
            double th = pos * pow(10000.0, -4.0 * i / v->D);
            v->rope[((size_t)k * half + j) * 2] = (float)cos(th);
            v->rope[((size_t)k * half + j) * 2 + 1] = (float)sin(th);
        }
}

static void rope_rows(const vit *v, void *a_, int64_t r0, int64_t r1) {
    float *qkv = a_;
    const int half = v->D / 2, C = v->C;
    for (int64_t k = r0; k < r1; k++)
        for (int part = 0; part < 2; part++)          /* Q then K */
            for (int h = 0; h < v->H; h++) {
                float *x = qkv + (size_t)k * 3 * C + part * C + h * v->D;
                const float *cs = v->rope + (size_t)k * half * 2;
                for (int j = 0; j < half; j++) {
                    float a = x[j], b = x[j + half], c = cs[2 * j], s = cs[2 * j + 1];
                    x[j] = a * c - b * s;
                    x[j + half] = a * s + b * c;
                }
            }
}

/* --- attention -------------------------------------------------------------------------------- */

typedef struct { float *s; int n; float scale; } sm_arg;

static void softmax_rows(const vit *v, void *a_, int64_t r0, int64_t r1) {
    sm_arg *a = a_;
    for (int64_t r = r0; r < r1; r++) {
        float *s = a->s + r * a->n;
        for (int j = 0; j < a->n; j++) s[j] *= a->scale;
        bs_softmax(s, a->n);
    }
}

/* out[k][h*D + d] = softmax(Q_h K_h^T / sqrt(D)) V_h, queries in chunks to bound the scores. */
static void attention(const vit *v, const float *qkv, float *out) {
    const int n = v->n, C = v->C, D = v->D;
    int chunk = (int)((64u << 20) / ((size_t)n * sizeof(float)));
    if (chunk < 1) chunk = 1;
    if (chunk > n) chunk = n;
    float *q = bs_xmalloc((size_t)chunk * D * sizeof *q), *k = bs_xmalloc((size_t)n * D * sizeof *k);
    float *vt = bs_xmalloc((size_t)n * D * sizeof *vt), *s = bs_xmalloc((size_t)chunk * n * sizeof *s);
    float *o = bs_xmalloc((size_t)chunk * D * sizeof *o);
    for (int h = 0; h < v->H; h++) {
        for (int j = 0; j < n; j++) {
            memcpy(k + (size_t)j * D, qkv + (size_t)j * 3 * C + C + h * D, (size_t)D * sizeof *k);
            for (int d = 0; d < D; d++) vt[(size_t)d * n + j] = qkv[(size_t)j * 3 * C + 2 * C + h * D + d];
        }
        bs_weight Wk = {.type = BS_F32, .ne0 = D, .ne1 = n, .data = k, .row_bytes = (size_t)D * 4, .name = "vit.K"};
        bs_weight Wv = {.type = BS_F32, .ne0 = n, .ne1 = D, .data = vt, .row_bytes = (size_t)n * 4, .name = "vit.Vt"};
        for (int i0 = 0; i0 < n; i0 += chunk) {
            int m = n - i0 < chunk ? n - i0 : chunk;
            for (int i = 0; i < m; i++)
                memcpy(q + (size_t)i * D, qkv + (size_t)(i0 + i) * 3 * C + h * D, (size_t)D * sizeof *q);
            bs_matmul(&Wk, q, m, s, v->pool);
            sm_arg a = {s, n, 1.0f / sqrtf((float)D)};
            for_rows(v, m, softmax_rows, &a);
            bs_matmul(&Wv, s, m, o, v->pool);
            for (int i = 0; i < m; i++)
                memcpy(out + (size_t)(i0 + i) * C + h * D, o + (size_t)i * D, (size_t)D * sizeof *o);
        }
    }
    free(q); free(k); free(vt); free(s); free(o);
}

/* --- blocks and merger ------------------------------------------------------------------------ */

typedef struct { float *x; const float *y; int64_t n; } add_arg;

static void add_rows(const vit *v, void *a_, int64_t r0, int64_t r1) {
    add_arg *a = a_;
    for (int64_t i = r0 * v->C; i < r1 * v->C; i++) a->x[i] += a->y[i];
}

static void add_into(const vit *v, float *x, const float *y) {
    add_arg a = {x, y, v->n};
    for_rows(v, v->n, add_rows, &a);
}

static void block(const vit *v, const bs_vit_block *b, float *x, float *h, float *qkv, float *att, float *ff) {
    const int n = v->n, C = v->C;
    layer_norm(v, x, b->ln1_w, b->ln1_b, C, n, h);
    linear(v, &b->qkv, b->qkv_b, h, n, qkv, 0);
    for_rows(v, n, rope_rows, qkv);
    attention(v, qkv, att);
    linear(v, &b->out, b->out_b, att, n, h, 0);
    add_into(v, x, h);
    layer_norm(v, x, b->ln2_w, b->ln2_b, C, n, h);
    linear(v, &b->up, b->up_b, h, n, ff, 1);
    linear(v, &b->down, b->down_b, ff, n, h, 0);
    add_into(v, x, h);
}

/* Patch embedding plus resized positions: x [n][C]. */
static void embed(const vit *v, const float *pix, int W, int Hh, float *x) {
    float *u = unroll_patches(v, pix, W, Hh);
    linear(v, &v->m->patch, v->m->patch_b, u, v->n, x, 0);
    free(u);
    float *pos = resize_pos(v);
    for (int k = 0; k < v->n; k++) {
        const float *p = pos + ((size_t)v->py[k] * v->wp + v->px[k]) * v->C;
        for (int c = 0; c < v->C; c++) x[(size_t)k * v->C + c] += p[c];
    }
    free(pos);
}

static void run_vit(vit *v, const float *pix, int W, int Hh, float *embd) {
    const bs_mmproj *m = v->m;
    const int n = v->n, C = v->C, FF = m->hp.n_ff;
    float *x = bs_xmalloc((size_t)n * C * sizeof *x), *h = bs_xmalloc((size_t)n * C * sizeof *h);
    float *qkv = bs_xmalloc((size_t)n * 3 * C * sizeof *qkv), *att = bs_xmalloc((size_t)n * C * sizeof *att);
    size_t ffw = (size_t)(FF > 4 * C ? FF : 4 * C);
    float *ff = bs_xmalloc((size_t)n * ffw * sizeof *ff);
    embed(v, pix, W, Hh, x);
    for (int l = 0; l < m->hp.n_layer; l++) block(v, &m->blk[l], x, h, qkv, att, ff);
    layer_norm(v, x, m->post_w, m->post_b, C, n, h);
    linear(v, &m->mm0, m->mm0_b, h, n / 4, ff, 1);    /* h read as [n/4][4C] */
    linear(v, &m->mm2, m->mm2_b, ff, n / 4, embd, 0);
    free(x); free(h); free(qkv); free(att); free(ff);
}

/* The same network on the device: the host unrolls the patches and orders the position rows and
 * the RoPE table as the blocks read them (cheap); the rest runs there (vulkan/vk_vision.c). */
static int run_vit_device(vit *v, const float *pix, int W, int Hh, float *embd) {
    const int C = v->C;
    float *u = unroll_patches(v, pix, W, Hh), *grid = resize_pos(v), *pos = bs_xmalloc((size_t)v->n * C * sizeof *pos);
    for (int k = 0; k < v->n; k++)
        memcpy(pos + (size_t)k * C, grid + ((size_t)v->py[k] * v->wp + v->px[k]) * C, (size_t)C * sizeof *pos);
    const int rc = bs_vk_vit_encode(v->m->dev, u, pos, v->rope, v->n, embd);
    free(u); free(grid); free(pos);
    return rc;
}

int bs_vision_encode_pixels(const bs_mmproj *m, const float *pixels, int w, int h, int n_threads,
                            bs_image_embd *out, char *err, size_t errlen) {
    const int A = m->hp.patch * m->hp.merge;
    memset(out, 0, sizeof *out);
    if (w < A || h < A || w % A || h % A) {
        snprintf(err, errlen, "encoder input %d x %d is not a multiple of %d", w, h, A);
        return -1;
    }
    vit v = {.m = m, .C = m->hp.n_embd, .H = m->hp.n_head};
    v.D = v.C / v.H;
    v.wp = w / m->hp.patch;
    v.hp = h / m->hp.patch;
    v.n = v.wp * v.hp;
    v.pool = m->dev ? NULL : bs_pool_new(n_threads);
    if (!m->dev && !v.pool) {
        snprintf(err, errlen, "%s", bs_last_error());
        return -1;
    }
    v.py = bs_xmalloc(sizeof *v.py * (size_t)v.n);
    v.px = bs_xmalloc(sizeof *v.px * (size_t)v.n);
    patch_order(&v);
    rope_table(&v);
    out->nx = v.wp / 2;
    out->ny = v.hp / 2;
    out->n_rows = v.n / 4;
    out->n_embd = m->hp.proj_dim;
    out->embd = bs_xmalloc((size_t)out->n_rows * out->n_embd * sizeof *out->embd);
    int rc = 0;
    if (m->dev) rc = run_vit_device(&v, pixels, w, h, out->embd);
    else run_vit(&v, pixels, w, h, out->embd);
    free(v.py); free(v.px); free(v.rope);
    bs_pool_free(v.pool);
    if (rc) {
        snprintf(err, errlen, "%s", bs_last_error());
        free(out->embd);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

double bs_vision_matmul_flops(const bs_mmproj *m, int w, int h) {
    const double P = m->hp.patch, C = m->hp.n_embd, FF = m->hp.n_ff;
    const double n = (double)(w / m->hp.patch) * (h / m->hp.patch);
    double per_layer = n * (3 * C * C + C * C + 2 * C * FF) + 2 * n * n * C;   /* + QK^T and PV */
    double f = n * 3 * P * P * C + m->hp.n_layer * per_layer + n / 4 * (16 * C * C + 4 * C * m->hp.proj_dim);
    return 2 * f;
}
