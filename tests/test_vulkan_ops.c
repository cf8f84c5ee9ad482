/* test_vulkan_ops.c: every step shader of the Vulkan forward alone on the device against the
 * CPU path's code (cpu/compute.h: norms, SiLU/sigmoid/softplus, RoPE tables and rotation, the
 * attention of bs_attn_queries, F16 rounding; formats/quant.h: the activation quantizers and
 * dequantizers), or a float64 reference where the CPU code is private to the model layer (the
 * causal conv, the delta rule), on odd shapes (widths not multiples of 32 or 64, one head, many
 * heads, 1..37 tokens, GQA groups of 1, 2, 6) and Bonsai-27B's (hidden 5120, 24/4 heads of 256
 * with 64 rope dims, 16 K / 48 V DeltaNet heads of 128, conv 10240); the greedy argmax against a
 * plain scan (ties, NaN, Bonsai's 248320-token rows, 1..8 rows) and the quantizer with a folded
 * gate against the gate step then the quantizer (bit for bit); the delta rule makes its own
 * gates from the raw alpha / beta projections; the fused DeltaNet decode step (the products with
 * the conv in their epilogue; delta_norm.comp) against its steps apart, bit for bit, on odd and
 * 27B shapes with 1..8 rows. The validation layer is on:
 * any message fails. Exits 77 (skipped) without a backend, loader or device.
 * Tolerances (relative to the size of the terms): bit for bit where the device does the CPU's
 * exact operations (residual add, F16/BF16/int8 rounding, KV stores, conv window, embedding
 * rows of the exact formats); 2e-6 for one rounding step away (norms, RoPE); 1e-5 where the
 * device's exp differs from libm's by ulps (SiLU, sigmoid, softplus, softmax); 1e-4 for the
 * delta rule over 37 tokens (its state carries rounding forward). */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif
#include "test.h"
#include "vk_test.h"
#include "vulkan/backend.h"
#include "cpu/compute.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "formats/quant_impl.h"
#include "io/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bs_rng rng;
static bs_vk_ctx *C;
static bs_vk_ctx *C_spread;   /* the delta rule spread the other way (NULL: none) */

static float *vec(size_t n, float scale) {
    float *x = malloc(sizeof *x * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = bs_rng_normal(&rng) * scale;
    return x;
}

/* --- norm.comp ------------------------------------------------------------------------------ */
typedef struct norm_push {
    uint32_t d, mode, has_w, per_row, row_stride, head_stride, x_off, y_off;
    float eps;
    uint32_t flags, rblock, rsigns;
    float rscale;
} norm_push;

/* Heads of d at stride hs in rows of rs (n rows, per heads each), RMS (weight) or L2. */
static void check_norm(int mode, int d, int n, int per, int hs, int rs) {
    const size_t tot = (size_t)n * rs;
    float *x = vec(tot, 1.5f), *w = vec((size_t)d, 1.0f), *y = vec(tot, 1.0f), *y0 = malloc(sizeof *y0 * tot);
    memcpy(y0, y, sizeof *y * tot);
    const float eps = 1e-6f;
    norm_push p = {(uint32_t)d, (uint32_t)mode, mode == 0, (uint32_t)per, (uint32_t)rs, (uint32_t)hs, 0, 0, eps, 0, 0, 0, 0.0f};
    float dummy[4] = {0};
    void *data[10] = {x, w, y, dummy, dummy, dummy, dummy, dummy, dummy, dummy};
    size_t bytes[10] = {4 * tot, 4 * (size_t)d, 4 * tot, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", data, bytes, 10, &p, sizeof p, (uint32_t)(n * per), 1, 1) == 0);
    double worst = 0;
    int untouched = 1, n_diff = 0;
    float *ref = malloc(sizeof *ref * (size_t)d);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < per; h++) {
            const size_t b = (size_t)r * rs + (size_t)h * hs;
            if (mode == 0) bs_rmsnorm(ref, x + b, w, d, eps);
            else { memcpy(ref, x + b, sizeof *ref * (size_t)d); bs_l2norm(ref, d, eps); }
            for (int i = 0; i < d; i++) worst = fmax(worst, fabs(y[b + i] - ref[i]) / (fabs(ref[i]) + 1e-3));
            for (int i = 0; i < d; i++) n_diff += y[b + i] != ref[i];
            if (hs > d && h + 1 < per)
                for (int i = d; i < hs; i++) untouched &= y[b + i] == y0[b + i];
        }
    CHECKF(worst < 2e-6, "norm mode %d d %d x %d heads: relative error %.3g", mode, d, per, worst);
    /* the scale is the CPU's (norm_rn.glsl), so the values are its bits */
    CHECKF(n_diff == 0, "norm mode %d d %d x %d heads: %d values differ from the CPU's bits", mode, d, per, n_diff);
    CHECKF(untouched, "norm wrote outside its heads");
    free(x); free(w); free(y); free(y0); free(ref);
}

/* RMSNorm fused with the residual add before it and the int8 quantization after it. */
static void check_norm_fused(int d, int n) {
    const size_t tot = (size_t)n * d, nb = tot / 32;
    float *x = vec(tot, 1.0f), *r = vec(tot, 1.0f), *w = vec((size_t)d, 1.0f), *y = calloc(tot, sizeof *y);
    float *x0 = malloc(sizeof *x0 * tot), *s8 = calloc(nb, 4), *m8 = calloc(nb, 4);
    uint8_t *q = calloc(nb, 32);
    memcpy(x0, x, sizeof *x * tot);
    norm_push p = {(uint32_t)d, 0, 1, 1, (uint32_t)d, 0, 0, 0, 1e-6f, 3, 0, 0, 0.0f};
    float dummy[4] = {0};
    void *data[10] = {x, w, y, r, q, s8, m8, dummy, dummy, dummy};
    size_t bytes[10] = {4 * tot, 4 * (size_t)d, 4 * tot, 4 * tot, 32 * nb, 4 * nb, 4 * nb, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", data, bytes, 10, &p, sizeof p, (uint32_t)n, 1, 1) == 0);
    int add_ok = 1;
    for (size_t i = 0; i < tot; i++) add_ok &= x[i] == r[i] + x0[i];
    CHECKF(add_ok, "fused norm: the residual sum differs from r + x");
    float *ref = malloc(sizeof *ref * tot);
    double worst = 0;
    for (int t = 0; t < n; t++) bs_rmsnorm(ref + (size_t)t * d, x + (size_t)t * d, w, d, 1e-6f);
    for (size_t i = 0; i < tot; i++) worst = fmax(worst, fabs(y[i] - ref[i]) / (fabs(ref[i]) + 1e-3));
    CHECKF(worst < 2e-6, "fused norm d %d: relative error %.3g", d, worst);
    /* the codes are the CPU quantizer's of the device's normed rows, bit for bit */
    uint8_t *cq = malloc(nb * 34);
    bs_type_get(BS_Q8_0)->act_from_float(y, cq, (int64_t)tot);
    int diff = 0;
    for (size_t b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, cq + b * 34, 2);
        diff += bs_f16_to_f32(h) != s8[b] || memcmp(cq + b * 34 + 2, q + b * 32, 32) != 0;
    }
    CHECKF(diff == 0, "fused norm: %d of %zu quantized blocks differ from the CPU's", diff, nb);
    /* and Q8_1's block sums (Q4_1 products), from the same codes */
    uint8_t *c1 = malloc(nb * 36);
    bs_type_get(BS_Q4_1)->act_from_float(y, c1, (int64_t)tot);
    diff = 0;
    for (size_t b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, c1 + b * 36 + 2, 2);
        if (bs_f16_to_f32(h) != m8[b] && diff < 3) fprintf(stderr, "  block %zu: Q8_1 sum %.9g device %.9g\n", b, bs_f16_to_f32(h), m8[b]);
        diff += bs_f16_to_f32(h) != m8[b];
    }
    CHECKF(diff == 0, "fused norm: %d of %zu Q8_1 block sums differ from the CPU's", diff, nb);
    free(c1);
    free(x); free(r); free(w); free(y); free(x0); free(s8); free(m8); free(q); free(ref); free(cq);
}

/* The norm rotating its rows for a folded model's products (NORM_ROT, with the residual add and
 * the int8 blocks): y the CPU's norm bit for bit, xr the CPU's rotation of y (cpu/rotation.c) bit
 * for bit, the blocks the CPU quantizer's of xr. Blocks from 2 to norm.comp's largest, rows of
 * one block and of several passes over its shared memory. */
static void check_norm_rot(int d, int block, bool signs, int n) {
    const size_t tot = (size_t)n * d, nb = tot / 32;
    float *x = vec(tot, 1.0f), *r = vec(tot, 1.0f), *w = vec((size_t)d, 1.0f), *y = calloc(tot, sizeof *y);
    float *xr = calloc(tot, sizeof *xr), *sg = malloc(sizeof *sg * (size_t)d), *s8 = calloc(nb, 4), *m8 = calloc(nb, 4);
    float *sum = malloc(sizeof *sum * tot), dummy[4] = {0};
    uint8_t *q = calloc(nb, 32);
    for (int i = 0; i < d; i++) sg[i] = bs_rng_normal(&rng) < 0 ? -1.0f : 1.0f;
    for (size_t i = 0; i < tot; i++) sum[i] = r[i] + x[i];
    norm_push p = {(uint32_t)d, 0, 1, 1, (uint32_t)d, 0, 0, 0, 1e-6f, 1 | 2 | 8, (uint32_t)block, signs,
                   (float)(1.0 / sqrt((double)block))};
    void *data[10] = {x, w, y, r, q, s8, m8, dummy, xr, sg};
    size_t bytes[10] = {4 * tot, 4 * (size_t)d, 4 * tot, 4 * tot, 32 * nb, 4 * nb, 4 * nb, 16, 4 * tot, 4 * (size_t)d};
    CHECK(bs_vk_kernel_run(C, "norm", data, bytes, 10, &p, sizeof p, (uint32_t)n, 1, 1) == 0);
    float *ref = malloc(sizeof *ref * tot), *rot = malloc(sizeof *rot * tot);
    for (int t = 0; t < n; t++) bs_rmsnorm(ref + (size_t)t * d, sum + (size_t)t * d, w, d, 1e-6f);
    const bs_rotation R = {.block = block, .width = d, .signs = signs ? sg : NULL};
    bs_rotate_rows(&R, y, rot, n, NULL);
    int dy = 0, dr = 0, dq = 0;
    for (size_t i = 0; i < tot; i++) dy += y[i] != ref[i], dr += xr[i] != rot[i];
    dq = vk_test_blocks_differ(rot, tot, q, s8, m8);
    CHECKF(dy == 0 && dr == 0 && dq == 0,
           "rotating norm d %d block %d%s, %d rows: %d normed, %d rotated values, %d blocks differ from the CPU's", d, block,
           signs ? " signed" : "", n, dy, dr, dq);
    free(x); free(r); free(w); free(y); free(xr); free(sg); free(s8); free(m8); free(sum); free(q); free(ref); free(rot);
}

/* --- mv_f32n.comp ---------------------------------------------------------------------------- */
static float round_bf16(float f) {   /* the CPU path's conversion there and back */
    uint16_t h;
    bs_bf16_from_float(&f, &h, 1);
    bs_bf16_to_float(&h, &f, 1);
    return f;
}

/* F32 products of few rows, a workgroup per row: against float64 sums of the weights and x
 * rounded as act says (0 none, 1 F16, 2 BF16; the CPU's roundings), and each row's values the
 * same bits when it runs alone as in a batch of n. */
static void check_mv_f32n(int rows, int cols, int n, int act) {
    const size_t nw = (size_t)rows * cols, nx = (size_t)n * cols, ny = (size_t)n * rows;
    float *w = vec(nw, 0.05f), *x = vec(nx, 1.0f), *y = calloc(ny, 4), *y1 = calloc((size_t)rows, 4);
    uint32_t pp[6] = {(uint32_t)rows, (uint32_t)cols, (uint32_t)n, (uint32_t)rows, 0, (uint32_t)act};
    float spare[2][4] = {{0}};   /* a pair's second matrix and output: unread */
    void *data[5] = {w, x, y, spare[0], spare[1]};   /* w column-major: w[i * rows + o] */
    size_t bytes[5] = {4 * nw, 4 * nx, 4 * ny, 16, 16};
    CHECK(bs_vk_kernel_run(C, "mv_f32n", data, bytes, 5, pp, sizeof pp, (uint32_t)rows, (uint32_t)(n + 7) / 8, 1) == 0);
    double worst = 0;
    for (int r = 0; r < n; r++)
        for (int o = 0; o < rows; o++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < cols; i++) {
                float xv = x[(size_t)r * cols + i];
                xv = act == 1 ? bs_f16_to_f32(bs_f32_to_f16(xv)) : act == 2 ? round_bf16(xv) : xv;
                ref += (double)w[(size_t)i * rows + o] * xv;
                mag += fabs((double)w[(size_t)i * rows + o] * xv);
            }
            worst = fmax(worst, fabs(y[(size_t)r * rows + o] - ref) / (mag + 1e-30));
        }
    CHECKF(worst < 1e-6, "mv_f32n %d x %d, %d rows, act %d: error %.3g of the terms' magnitude", rows, cols, n, act, worst);
    int same = 1;
    for (int r = 0; r < n; r++) {   /* row r alone */
        uint32_t p1[6] = {(uint32_t)rows, (uint32_t)cols, 1, (uint32_t)rows, 0, (uint32_t)act};
        void *d1[5] = {w, x + (size_t)r * cols, y1, spare[0], spare[1]};
        size_t b1[5] = {4 * nw, 4 * (size_t)cols, 4 * (size_t)rows, 16, 16};
        CHECK(bs_vk_kernel_run(C, "mv_f32n", d1, b1, 5, p1, sizeof p1, (uint32_t)rows, 1, 1) == 0);
        same &= !memcmp(y1, y + (size_t)r * rows, 4 * (size_t)rows);
    }
    CHECKF(same, "mv_f32n %d x %d: a row's values depend on the rows run with it", rows, cols);
    /* a pair (beta and alpha in one dispatch): each output the bits of its matrix alone */
    float *w2 = vec(nw, 0.05f), *y2 = calloc(ny, 4), *ya = calloc(ny, 4), *yb = calloc(ny, 4);
    void *d2[5] = {w2, x, y2, spare[0], spare[1]}, *dp[5] = {w, x, ya, w2, yb};
    size_t bp[5] = {4 * nw, 4 * nx, 4 * ny, 4 * nw, 4 * ny};
    CHECK(bs_vk_kernel_run(C, "mv_f32n", d2, bytes, 5, pp, sizeof pp, (uint32_t)rows, (uint32_t)(n + 7) / 8, 1) == 0);
    CHECK(bs_vk_kernel_run(C, "mv_f32n", dp, bp, 5, pp, sizeof pp, 2u * (uint32_t)rows, (uint32_t)(n + 7) / 8, 1) == 0);
    CHECKF(!memcmp(ya, y, 4 * ny) && !memcmp(yb, y2, 4 * ny), "mv_f32n %d x %d, %d rows: a pair's outputs differ from each alone (%d, %d)",
           rows, cols, n, !!memcmp(ya, y, 4 * ny), !!memcmp(yb, y2, 4 * ny));
    free(w); free(x); free(y); free(y1); free(w2); free(y2); free(ya); free(yb);
}

/* A LoRA factor A's rows on mv_f32n (FMA 0): the CPU's LoRA terms bit for bit. The CPU's come
 * through bs_matmul on a zero F32 weight with the adapter's B the identity (exact: its sums add
 * zeros), so y = A x as the CPU path sums it. */
static void check_lora_a(int r, int in, int n) {
    const size_t na = (size_t)r * in, nx = (size_t)n * in, ny = (size_t)n * r;
    float *a = vec(na, 0.05f), *x = vec(nx, 1.0f), *acm = malloc(4 * na), *b = calloc((size_t)r * r, 4);
    float *zero = calloc(na, 4), *ycpu = calloc(ny, 4), *ydev = calloc(ny, 4);
    for (int k = 0; k < r; k++) b[(size_t)k * r + k] = 1.0f;
    for (int k = 0; k < r; k++)
        for (int i = 0; i < in; i++) acm[(size_t)i * r + k] = a[(size_t)k * in + i];   /* column-major */
    const bs_lora_tensor t = {.in = in, .out = r, .r = r, .scale = 1.0f, .a = a, .b = b};
    const bs_lora_ref ref = {.t = &t, .scale = 1.0f};
    const bs_weight W = {.type = BS_F32, .ne0 = in, .ne1 = r, .data = zero, .row_bytes = 4 * (size_t)in, .lora = &ref};
    bs_matmul(&W, x, n, ycpu, NULL);
    uint32_t pp[6] = {(uint32_t)r, (uint32_t)in, (uint32_t)n, (uint32_t)r, 0, 0};
    float spare[2][4] = {{0}};
    void *data[5] = {acm, x, ydev, spare[0], spare[1]};
    size_t bytes[5] = {4 * na, 4 * nx, 4 * ny, 16, 16};
    CHECK(bs_vk_kernel_run(C, "mv_f32n/lora A", data, bytes, 5, pp, sizeof pp, (uint32_t)r, (uint32_t)(n + 7) / 8, 1) == 0);
    int diff = 0;
    for (size_t i = 0; i < ny; i++) diff += ydev[i] != ycpu[i];
    CHECKF(diff == 0, "LoRA A %d x %d, %d rows: %d of %zu values differ from the CPU's terms", r, in, n, diff, ny);
    free(a); free(x); free(acm); free(b); free(zero); free(ycpu); free(ydev);
}

/* A LoRA factor B added into the product's output in its own dispatch (mv_f32 ADD): y = W x +
 * scale * B t as the CPU path computes it, bit for bit. The CPU's comes through bs_matmul with
 * the adapter's A the identity (t = x exactly: its sums add zeros); the device's y starts as the
 * CPU's W x. */
static void check_lora_b(int out, int r, int n, float scale) {
    const size_t nb = (size_t)out * r, nx = (size_t)n * r, ny = (size_t)n * out;
    float *w = vec(nb, 0.3f), *b = vec(nb, 0.2f), *x = vec(nx, 1.0f), *a = calloc((size_t)r * r, 4), *bcm = malloc(4 * nb);
    float *ycpu = calloc(ny, 4), *ydev = calloc(ny, 4);
    for (int k = 0; k < r; k++) a[(size_t)k * r + k] = 1.0f;
    for (int o = 0; o < out; o++)
        for (int k = 0; k < r; k++) bcm[(size_t)k * out + o] = b[(size_t)o * r + k];   /* column-major */
    const bs_lora_tensor t = {.in = r, .out = out, .r = r, .scale = 1.0f, .a = a, .b = b};
    const bs_lora_ref ref = {.t = &t, .scale = scale};
    bs_weight W = {.type = BS_F32, .ne0 = r, .ne1 = out, .data = w, .row_bytes = 4 * (size_t)r};
    bs_matmul(&W, x, n, ydev, NULL);   /* W x alone: where the device's adds start */
    W.lora = &ref;
    bs_matmul(&W, x, n, ycpu, NULL);
    uint32_t pp[6] = {(uint32_t)out, (uint32_t)r, (uint32_t)n, (uint32_t)out, 0, 0};
    memcpy(&pp[5], &scale, 4);
    void *data[3] = {bcm, x, ydev};
    size_t bytes[3] = {4 * nb, 4 * nx, 4 * ny};
    CHECK(bs_vk_kernel_run(C, "mv_f32/lora B", data, bytes, 3, pp, sizeof pp, (uint32_t)(out + 63) / 64, (uint32_t)(n + 7) / 8, 1) == 0);
    int diff = 0;
    for (size_t i = 0; i < ny; i++) diff += ydev[i] != ycpu[i];
    CHECKF(diff == 0, "LoRA B %d x %d, %d rows, scale %g: %d of %zu values differ from the CPU's", out, r, n, scale, diff, ny);
    free(w); free(b); free(x); free(a); free(bcm); free(ycpu); free(ydev);
}

/* DeltaNet's gated norm in one dispatch: per head of d, y = silu(z) * (rmsnorm(x) * w), then the
 * int8 codes of y: the same bits as the norm, quant_q8.comp's gate (mode 1) and its quantizer
 * run apart. */
static void check_norm_gated(int d, int heads, int n) {
    const size_t tot = (size_t)n * heads * d, nb = tot / 32;
    float *x = vec(tot, 1.0f), *z = vec(tot, 2.0f), *w = vec((size_t)d, 1.0f), *y = calloc(tot, sizeof *y);
    float *x2 = malloc(sizeof *x2 * tot), *y2 = calloc(tot, sizeof *y2), *s8 = calloc(nb, 4), *m8 = calloc(nb, 4);
    float *s8b = calloc(nb, 4), *m8b = calloc(nb, 4), dummy[4] = {0};
    uint8_t *q = calloc(nb, 32), *qb = calloc(nb, 32);
    memcpy(x2, x, sizeof *x * tot);
    const uint32_t H = (uint32_t)heads, D = (uint32_t)d;
    norm_push p = {D, 0, 1, H, H * D, D, 0, 0, 1e-6f, 2 | 4, 0, 0, 0.0f};
    void *data[10] = {x, w, y, dummy, q, s8, m8, z, NULL, NULL};
    size_t bytes[10] = {4 * tot, 4 * (size_t)d, 4 * tot, 16, 32 * nb, 4 * nb, 4 * nb, 4 * tot, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", data, bytes, 10, &p, sizeof p, (uint32_t)(n * heads), 1, 1) == 0);
    /* apart: the norm, then the quantizer with the silu(z) gate */
    norm_push p2 = {D, 0, 1, H, H * D, D, 0, 0, 1e-6f, 0, 0, 0, 0.0f};
    void *d2[10] = {x2, w, y2, dummy, dummy, dummy, dummy, dummy, NULL, NULL};
    size_t b2[10] = {4 * tot, 4 * (size_t)d, 4 * tot, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", d2, b2, 10, &p2, sizeof p2, (uint32_t)(n * heads), 1, 1) == 0);
    uint32_t qp[4] = {(uint32_t)nb, 1, 0, 0};
    void *d3[5] = {y2, qb, s8b, m8b, z};
    size_t b3[5] = {4 * tot, 32 * nb, 4 * nb, 4 * nb, 4 * tot};
    CHECK(bs_vk_kernel_run(C, "quant_q8", d3, b3, 5, qp, sizeof qp, (uint32_t)(nb + 63) / 64, 1, 1) == 0);
    CHECKF(!memcmp(y, y2, 4 * tot) && !memcmp(q, qb, 32 * nb) && !memcmp(s8, s8b, 4 * nb) && !memcmp(m8, m8b, 4 * nb),
           "gated norm %d x %d heads: fused differs from the norm, gate and quantizer apart", d, heads);
    free(x); free(z); free(w); free(y); free(x2); free(y2); free(s8); free(m8); free(s8b); free(m8b); free(q); free(qb);
}

/* --- ew.comp -------------------------------------------------------------------------------- */
static void check_ew(int mode, size_t n, uint32_t p0, uint32_t p1) {
    const size_t nb = mode == 2 ? n * 2 : n, nc = n;
    float *a = vec(n, 2.0f), *b = vec(nb, 3.0f), *c = vec(nc, 1.0f);
    float *a0 = malloc(sizeof *a * n), *b0 = malloc(sizeof *b * nb);
    memcpy(a0, a, sizeof *a * n);
    memcpy(b0, b, sizeof *b * nb);
    uint32_t push[4] = {(uint32_t)mode, (uint32_t)n, p0, p1};
    const uint32_t g = (uint32_t)((n + 255) / 256), gx = g < 65535 ? g : 65535, gy = (g + gx - 1) / gx;
    void *data[3] = {a, b, c};
    size_t bytes[3] = {4 * n, 4 * nb, 4 * nc};
    CHECK(bs_vk_kernel_run(C, "ew", data, bytes, 3, push, sizeof push, gx, gy, 1) == 0);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ref;
        if (mode == 0) ref = b0[i] + a0[i];
        else if (mode == 1) ref = bs_silu(b0[i]) * c[i];
        else {
            const size_t hd = (size_t)p0 * p1, t = i / hd, h = (i / p1) % p0, dd = i % p1;
            ref = a0[i] * bs_sigmoid(b0[t * 2 * hd + h * 2 * p1 + p1 + dd]);
        }
        worst = fmax(worst, fabs(a[i] - ref) / (fabs(ref) + 1e-6));
    }
    const double tol = mode == 0 ? 0 : 1e-5;
    CHECKF(worst <= tol, "ew mode %d n %zu: relative error %.3g", mode, n, worst);
    free(a); free(b); free(c); free(a0); free(b0);
}

/* The validation itself: a copy from a buffer the dispatch before wrote. With a barrier between
 * them it is clean; without one the second reads unordered, and where synchronization
 * validation is on it must say so (on a GPU a missing barrier shows only as wrong numbers now
 * and then; here, where dispatches run one by one, never). Returns the messages expected. */
static int check_validation_sees_races(void) {
    enum { N = 4096 };
    float *in = vec(N, 1.0f), *out = calloc(N, sizeof *out);
    const int before = bs_vk_validation_messages();
    CHECK(bs_vk_copy_chain(C, in, out, sizeof *in * N, true) == 0 && !memcmp(in, out, sizeof *in * N));
    CHECKF(bs_vk_validation_messages() == before, "two copies with a barrier: %d validation messages",
           bs_vk_validation_messages() - before);
    int expected = 0;
    if (bs_vk_sync_validation()) {
        printf("synchronization validation: on; a race recorded on purpose (the message below is expected):\n");
        fflush(stdout);
        CHECK(bs_vk_copy_chain(C, in, out, sizeof *in * N, false) == 0);
        expected = bs_vk_validation_messages() - before;
        CHECKF(expected > 0, "two dispatches with no barrier between them: the validation layer saw no hazard");
    } else {
        printf("note: synchronization validation is off (no validation layer, or one without it)\n");
    }
    free(in); free(out);
    return expected;
}

/* The same kernel run again on ctx with copies of data's buffers (before[i] where given: the
 * inputs data[i] held before the first run): its outputs (indices outs[]) must have the bits the
 * first run left in data. in_b >= 0: the state is read from the other buffer of its pair (the
 * step after a snapshot; push sets from_in): binding in_b gets the state binding st_b had, st_b
 * zeros, and in_b must come back unchanged. */
static bool same_run(bs_vk_ctx *ctx, const char *kernel, void **data, size_t *bytes, int n, const int *outs, int n_out,
                     const void *push, size_t push_bytes, uint32_t gx, uint32_t gy, void *const *before, int st_b, int in_b) {
    void *d2[16];
    size_t b2[16];
    for (int i = 0; i < n; i++) {
        b2[i] = bytes[i];
        d2[i] = malloc(bytes[i]);
        memcpy(d2[i], before[i] ? before[i] : data[i], bytes[i]);
    }
    if (in_b >= 0) {
        free(d2[in_b]);
        b2[in_b] = bytes[st_b];
        d2[in_b] = malloc(b2[in_b]);
        memcpy(d2[in_b], d2[st_b], b2[in_b]);
        memset(d2[st_b], 0, b2[st_b]);
    }
    bool same = bs_vk_kernel_run(ctx, kernel, d2, b2, n, push, push_bytes, gx, gy, 1) == 0;
    for (int k = 0; k < n_out && same; k++) same = !memcmp(d2[outs[k]], data[outs[k]], bytes[outs[k]]);
    if (in_b >= 0 && same) same = !memcmp(d2[in_b], before[st_b] ? before[st_b] : data[st_b], b2[in_b]);
    for (int i = 0; i < n; i++) free(d2[i]);
    return same;
}

/* --- conv.comp ------------------------------------------------------------------------------ */
static void check_conv(int cd, int K, int T) {
    const int km1 = K - 1;
    float *mixed = vec((size_t)T * cd, 1.0f), *win = vec((size_t)km1 * cd, 1.0f), *w = vec((size_t)cd * K, 0.5f);
    float *o = calloc((size_t)T * cd, sizeof *o), *win0 = malloc(sizeof *win * (size_t)km1 * cd);
    memcpy(win0, win, sizeof *win * (size_t)km1 * cd);
    struct { uint32_t cd, K, T, nqk, dk; float eps; uint32_t r0, from_in; } push = {(uint32_t)cd, (uint32_t)K, (uint32_t)T, 0, 0, 0.0f, 0, 0};
    float spare[1] = {0};
    void *data[5] = {mixed, win, w, o, spare};
    size_t bytes[5] = {4u * (size_t)T * cd, 4u * (size_t)km1 * cd, 4u * (size_t)cd * K, 4u * (size_t)T * cd, 4};
    CHECK(bs_vk_kernel_run(C, "conv", data, bytes, 5, &push, sizeof push, (uint32_t)(cd + 63) / 64, 1, 1) == 0);
    /* the window read from the pair's other buffer (a snapshot's step): the same bits, it kept */
    push.from_in = 1;
    void *before[5] = {NULL, win0, NULL, NULL, NULL};
    const int outs[2] = {1, 3};
    CHECKF(same_run(C, "conv", data, bytes, 5, outs, 2, &push, sizeof push, (uint32_t)(cd + 63) / 64, 1, before, 1, 4),
           "conv cd %d K %d T %d: the window from the other buffer differs", cd, K, T);
    double worst = 0;
    int win_ok = 1;
    for (int c = 0; c < cd; c++) {
        for (int t = 0; t < T; t++) {
            double s = 0, mag = 0;
            for (int i = 0; i < K; i++) {
                const int r = t + i;
                const double v = r < km1 ? win0[(size_t)r * cd + c] : mixed[(size_t)(r - km1) * cd + c];
                s += v * w[(size_t)c * K + i];
                mag += fabs(v * w[(size_t)c * K + i]);
            }
            const double ref = s / (1.0 + exp(-s));
            worst = fmax(worst, fabs(o[(size_t)t * cd + c] - ref) / (mag + 1e-6));
        }
        for (int r = 0; r < km1; r++) {   /* the window moves on: the last K-1 rows of [win; mixed] */
            const int e = T + r;
            const float want = e < km1 ? win0[(size_t)e * cd + c] : mixed[(size_t)(e - km1) * cd + c];
            win_ok &= win[(size_t)r * cd + c] == want;
        }
    }
    CHECKF(worst < 1e-5, "conv cd %d K %d T %d: relative error %.3g", cd, K, T, worst);
    CHECKF(win_ok, "conv cd %d K %d T %d: the window is not the last K-1 rows", cd, K, T);
    free(mixed); free(win); free(w); free(o); free(win0);
}

/* The conv with the L2 norm of its first nqk heads of dk channels in the same dispatch: the same
 * bits as the conv, then norm.comp's mode 1 on those heads (and the same window). */
static void check_conv_l2(int nqk, int dk, int n_v, int K, int T) {
    const int km1 = K - 1, cd = nqk * dk + n_v;
    float *mixed = vec((size_t)T * cd, 1.0f), *win = vec((size_t)km1 * cd, 1.0f), *w = vec((size_t)cd * K, 0.5f);
    float *win2 = malloc(sizeof *win * (size_t)km1 * cd), *o = calloc((size_t)T * cd, 4), *o2 = calloc((size_t)T * cd, 4);
    memcpy(win2, win, sizeof *win * (size_t)km1 * cd);
    typedef struct { uint32_t cd, K, T, nqk, dk; float eps; uint32_t r0, from_in; } conv_push;
    conv_push fused = {(uint32_t)cd, (uint32_t)K, (uint32_t)T, (uint32_t)nqk, (uint32_t)dk, 1e-6f, 0, 0};
    conv_push plain = {(uint32_t)cd, (uint32_t)K, (uint32_t)T, 0, 0, 0.0f, 0, 0};
    float spare[1] = {0}, *win0 = malloc(sizeof *win * (size_t)km1 * cd);
    memcpy(win0, win, sizeof *win * (size_t)km1 * cd);
    size_t bytes[5] = {4u * (size_t)T * cd, 4u * (size_t)km1 * cd, 4u * (size_t)cd * K, 4u * (size_t)T * cd, 4};
    void *d1[5] = {mixed, win, w, o, spare}, *d2[5] = {mixed, win2, w, o2, spare};
    const uint32_t gx = (uint32_t)(nqk + (n_v + 63) / 64);
    CHECK(bs_vk_kernel_run(C, "conv", d1, bytes, 5, &fused, sizeof fused, gx, 1, 1) == 0);
    CHECK(bs_vk_kernel_run(C, "conv", d2, bytes, 5, &plain, sizeof plain, (uint32_t)(cd + 63) / 64, 1, 1) == 0);
    fused.from_in = 1;   /* the window from the pair's other buffer: the same bits */
    void *before[5] = {NULL, win0, NULL, NULL, NULL};
    const int outs[2] = {1, 3};
    CHECKF(same_run(C, "conv", d1, bytes, 5, outs, 2, &fused, sizeof fused, gx, 1, before, 1, 4),
           "conv + L2 %d heads of %d: the window from the other buffer differs", nqk, dk);
    free(win0);
    norm_push np = {(uint32_t)dk, 1, 0, (uint32_t)nqk, (uint32_t)cd, (uint32_t)dk, 0, 0, 1e-6f, 0, 0, 0, 0.0f};
    float dummy[4] = {0}, wd[1] = {0};
    void *d3[10] = {o2, wd, o2, dummy, dummy, dummy, dummy, dummy, NULL, NULL};
    size_t b3[10] = {4u * (size_t)T * cd, 4, 4u * (size_t)T * cd, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", d3, b3, 10, &np, sizeof np, (uint32_t)(T * nqk), 1, 1) == 0);
    CHECKF(!memcmp(o, o2, 4u * (size_t)T * cd) && !memcmp(win, win2, 4u * (size_t)km1 * cd),
           "conv + L2 %d heads of %d, %d v channels, %d tokens: fused differs from the two steps", nqk, dk, n_v, T);
    free(mixed); free(win); free(w); free(win2); free(o); free(o2);
}

/* --- delta.comp ----------------------------------------------------------------------------- */
/* workgroups along the state columns: bs_vk_delta_cols each (delta_lanes.glsl) */
static uint32_t delta_groups(const bs_vk_ctx *c, int dv) {
    const int cols = (int)bs_vk_delta_cols(c);
    return (uint32_t)((dv + cols - 1) / cols);
}

static void l2(float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / fmax(sqrt(s), 1e-6));
}

static void check_delta(int nk, int nv, int dk, int dv, int T) {
    const int cd = 2 * nk * dk + nv * dv;
    /* the projections as the model feeds them (q, k L2-normed; alpha and beta raw: the kernel
     * makes the gates, g = softplus(alpha + dt_bias) * a with a < 0, beta = sigmoid(beta); some
     * alphas past softplus' branch at 20) */
    float *qkv = vec((size_t)T * cd, 1.0f), *alpha = vec((size_t)T * nv, 4.0f), *braw = vec((size_t)T * nv, 2.0f);
    float *gates = vec(2 * (size_t)nv, 1.0f), *g = malloc(sizeof *g * (size_t)T * nv), *beta = malloc(sizeof *beta * (size_t)T * nv);
    for (int h = 0; h < nv; h++) gates[nv + h] = -0.3f * fabsf(gates[nv + h]) - 0.01f;
    for (int i = 0; i < T * nv; i += 3) alpha[i] += 24.0f;
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < 2 * nk; h++) l2(qkv + (size_t)t * cd + (size_t)h * dk, dk);
        for (int h = 0; h < nv; h++) {
            g[t * nv + h] = bs_softplus(alpha[t * nv + h] + gates[h]) * gates[nv + h];
            beta[t * nv + h] = bs_sigmoid(braw[t * nv + h]);
        }
    }
    const size_t ns = (size_t)nv * dv * dk;
    float *st = vec(ns, 0.1f), *o = calloc((size_t)T * nv * dv, sizeof *o);
    double *S = malloc(sizeof *S * ns), *ref = malloc(sizeof *ref * (size_t)T * nv * dv);
    for (size_t i = 0; i < ns; i++) S[i] = st[i];
    const float scale = 1.0f / sqrtf((float)dk);
    struct { uint32_t nk, nv, dk, dv, T, cd; float scale; uint32_t r0, from_in; } p = {
        (uint32_t)nk, (uint32_t)nv, (uint32_t)dk, (uint32_t)dv, (uint32_t)T, (uint32_t)cd, scale, 0, 0};
    /* the device keeps the state [nv][dk][dv] (coalesced), the CPU [nv][dv][dk] */
    float *dev = malloc(sizeof *dev * ns);
    for (int h = 0; h < nv; h++)
        for (int j = 0; j < dv; j++)
            for (int i = 0; i < dk; i++) dev[((size_t)h * dk + i) * dv + j] = st[((size_t)h * dv + j) * dk + i];
    float unbound[4] = {0};   /* binding 6, the pair's other buffer: read only after a snapshot */
    void *data[7] = {qkv, alpha, braw, dev, o, gates, unbound};
    size_t bytes[7] = {4u * (size_t)T * cd, 4u * (size_t)T * nv, 4u * (size_t)T * nv, 4 * ns, 4u * (size_t)T * nv * dv,
                       8u * (size_t)nv, 16};
    float *dev0 = malloc(bytes[3]);
    memcpy(dev0, dev, bytes[3]);
    CHECK(bs_vk_kernel_run(C, "delta", data, bytes, 7, &p, sizeof p, delta_groups(C, dv), (uint32_t)nv, 1) == 0);
    void *before[7] = {NULL, NULL, NULL, dev0, NULL, NULL, NULL};
    static const int outs[2] = {3, 4};
    if (C_spread)   /* the sums spread over 8 lanes or in one invocation: the same bits */
        CHECKF(same_run(C_spread, "delta", data, bytes, 7, outs, 2, &p, sizeof p, delta_groups(C_spread, dv), (uint32_t)nv, before,
                        3, -1),
               "delta %d/%d heads of %d/%d, %d tokens: spread %d and %d differ", nk, nv, dk, dv, T, bs_vk_delta_spread(C),
               bs_vk_delta_spread(C_spread));
    p.from_in = 1;   /* from the pair's other buffer (a snapshot's step): the same bits, that buffer kept */
    CHECKF(same_run(C, "delta", data, bytes, 7, outs, 2, &p, sizeof p, delta_groups(C, dv), (uint32_t)nv, before, 3, 6),
           "delta %d/%d heads of %d/%d, %d tokens: the state read from the other buffer differs", nk, nv, dk, dv, T);
    free(dev0);
    /* float64 reference of the CPU's recurrence (deltanet.c): decay, delta against the decayed
     * state, read-out with the updated state; V head h reads K/Q head h % nk */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nv; h++) {
            const float *q = qkv + (size_t)t * cd + (size_t)(h % nk) * dk, *k = q + (size_t)nk * dk;
            const float *v = qkv + (size_t)t * cd + (size_t)2 * nk * dk + (size_t)h * dv;
            const double decay = exp(g[t * nv + h]);
            for (int j = 0; j < dv; j++) {
                double *row = S + ((size_t)h * dv + j) * dk, u = 0, y = 0;
                for (int i = 0; i < dk; i++) { row[i] *= decay; u += row[i] * k[i]; }
                const double d = (v[j] - u) * beta[t * nv + h];
                for (int i = 0; i < dk; i++) { row[i] += k[i] * d; y += row[i] * q[i]; }
                ref[((size_t)t * nv + h) * dv + j] = y * scale;
            }
        }
    double scale_o = 0, worst = 0, worst_s = 0, scale_s = 0;
    for (size_t i = 0; i < (size_t)T * nv * dv; i++) scale_o = fmax(scale_o, fabs(ref[i]));
    for (size_t i = 0; i < (size_t)T * nv * dv; i++) worst = fmax(worst, fabs(o[i] - ref[i]) / scale_o);
    for (size_t i = 0; i < ns; i++) scale_s = fmax(scale_s, fabs(S[i]));
    for (int h = 0; h < nv; h++)
        for (int j = 0; j < dv; j++)
            for (int i = 0; i < dk; i++) {
                const size_t cpu = ((size_t)h * dv + j) * dk + i;
                worst_s = fmax(worst_s, fabs(dev[((size_t)h * dk + i) * dv + j] - S[cpu]) / scale_s);
            }
    CHECKF(worst < 1e-4 && worst_s < 1e-4, "delta %d/%d heads of %d/%d, %d tokens: error %.3g (state %.3g)", nk, nv, dk, dv,
           T, worst, worst_s);
    free(qkv); free(alpha); free(braw); free(gates); free(g); free(beta); free(st); free(dev); free(o); free(S); free(ref);
}

/* --- the fused DeltaNet decode step (gdn_fused in vk_forward.c) ------------------------------- */
/* The products with the conv in their epilogue (mv_q.glsl's CONV) of a type x rows (= conv
 * channels) x d matrix for n rows: the same bits as the product, then conv.comp (y, conv
 * output, window). */
static void check_mv_conv(int type, int64_t d, int64_t rows, int n, int K) {
    const size_t rb = bs_row_size(type, d), nw = (size_t)(K - 1) * rows, no = (size_t)n * rows;
    float *w = vec((size_t)(d * rows), 0.05f), *x = vec((size_t)d * n, 1.0f), *cw = vec((size_t)rows * K, 0.5f);
    float *win = vec(nw, 1.0f), *win2 = malloc(4 * nw + 4), *y = calloc(no, 4), *y2 = calloc(no, 4), *o = calloc(no, 4);
    float *o2 = calloc(no, 4);
    uint8_t *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) bs_quantize(type, w + r * d, wq + r * rb, d);
    memcpy(win2, win, 4 * nw);
    bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = wq, .row_bytes = rb, .name = bs_type_name(type)};
    bs_vk_matrix *m = bs_vk_matrix_new(C, &T);
    CHECKF(m != NULL, "%s upload: %s", bs_type_name(type), bs_last_error());
    if (m) {
        float *win3 = malloc(4 * nw + 4), *y3 = calloc(no, 4), *o3 = calloc(no, 4);
        memcpy(win3, win, 4 * nw);
        CHECKF(bs_vk_matvec_conv(C, m, x, n, y, win, cw, K, o, false) == 0, "mv+conv: %s", bs_last_error());
        /* the window read from a buffer of its own (the step after a snapshot): the same bits */
        CHECKF(bs_vk_matvec_conv(C, m, x, n, y3, win3, cw, K, o3, true) == 0, "mv+conv: %s", bs_last_error());
        CHECKF(!memcmp(y, y3, 4 * no) && !memcmp(o, o3, 4 * no) && !memcmp(win, win3, 4 * nw),
               "mv+conv %s, %d rows: the window from its own buffer differs", bs_type_name(type), n);
        free(win3); free(y3); free(o3);
        CHECK(bs_vk_matvec(C, m, x, n, y2) == 0);
        struct { uint32_t cd, K, T, nqk, dk; float eps; uint32_t r0, from_in; } push = {(uint32_t)rows, (uint32_t)K, (uint32_t)n, 0, 0, 0.0f, 0, 0};
        float spare[1] = {0};
        void *data[5] = {y2, win2, cw, o2, spare};
        size_t bytes[5] = {4 * no, 4 * nw + 4, 4u * (size_t)rows * K, 4 * no, 4};
        CHECK(bs_vk_kernel_run(C, "conv", data, bytes, 5, &push, sizeof push, (uint32_t)(rows + 63) / 64, 1, 1) == 0);
        CHECKF(!memcmp(y, y2, 4 * no) && !memcmp(o, o2, 4 * no) && !memcmp(win, win2, 4 * nw),
               "mv+conv %s %lld x %lld, %d rows, K %d: differs from the product then conv.comp (y %d, out %d, window %d)",
               bs_type_name(type), (long long)rows, (long long)d, n, K, !!memcmp(y, y2, 4 * no), !!memcmp(o, o2, 4 * no),
               !!memcmp(win, win2, 4 * nw));
        bs_vk_matrix_free(C, m);
    }
    free(w); free(x); free(cw); free(win); free(win2); free(y); free(y2); free(o); free(o2); free(wq);
}

/* delta_norm.comp (q/k L2 norms, delta rule, gated RMSNorm, int8 blocks; a workgroup per 32
 * state columns of a V head, the head's last one norming) against its steps apart: norm.comp mode 1 on the q/k heads, delta.comp, norm.comp's
 * NORM_GATE | NORM_QUANT. Bit for bit: outputs, int8 blocks and state. */
static void check_delta_norm(int nk, int nv, int dk, int dv, int T) {
    const size_t cd = (size_t)(2 * nk * dk + nv * dv), nc = (size_t)T * cd, no = (size_t)T * nv * dv, nb = no / 32;
    const size_t ns = (size_t)nv * dk * dv;
    float *cc = vec(nc, 1.0f), *alpha = vec((size_t)T * nv, 4.0f), *braw = vec((size_t)T * nv, 2.0f);
    float *gates = vec(2 * (size_t)nv, 1.0f), *st = vec(ns, 0.1f), *z = vec(no, 2.0f), *w = vec((size_t)dv, 1.0f);
    for (int h = 0; h < nv; h++) gates[nv + h] = -0.3f * fabsf(gates[nv + h]) - 0.01f;
    for (int i = 0; i < T * nv; i += 3) alpha[i] += 24.0f;
    float *cc2 = malloc(4 * nc), *st2 = malloc(4 * ns), *y = calloc(no, 4), *y2 = calloc(no, 4);
    float *s8 = calloc(nb, 4), *m8 = calloc(nb, 4), *s8b = calloc(nb, 4), *m8b = calloc(nb, 4), dummy[4] = {0};
    uint8_t *q = calloc(nb, 32), *qb = calloc(nb, 32);
    memcpy(cc2, cc, 4 * nc);
    memcpy(st2, st, 4 * ns);
    const float scale = 1.0f / sqrtf((float)dk), eps = 1e-6f;
    /* (no fold: rblock 0; test_vulkan_kernels runs the rotation) */
    struct { uint32_t nk, nv, dk, dv, T, cd; float scale, eps; uint32_t from_in, rblock, rsigns; float rscale; uint32_t hd, rnk, rrep; } p = {
        (uint32_t)nk, (uint32_t)nv, (uint32_t)dk, (uint32_t)dv, (uint32_t)T, (uint32_t)cd, scale, eps, 0, 0, 0, 0.0f, 0, 0, 0};
    uint32_t *cnt = calloc((size_t)nv, 4);   /* the heads' counters: 0 before and after */
    float unbound[4] = {0};   /* binding 12, the pair's other buffer: read only after a snapshot */
    float spare[3][4] = {{0}};   /* bindings 13-15: the rotation's (unused without a fold) */
    void *d1[16] = {cc, alpha, braw, st, y, gates, w, z, q, s8, m8, cnt, unbound, spare[0], spare[1], spare[2]};
    size_t b1[16] = {4 * nc, 4u * T * nv, 4u * T * nv, 4 * ns, 4 * no, 8u * nv, 4u * dv, 4 * no, 32 * nb, 4 * nb, 4 * nb, 4u * nv, 16, 16, 16, 16};
    /* ("delta_norm" alone names the rotating pipeline: the plain one, which unfolded models run) */
    CHECK(bs_vk_kernel_run(C, "delta_norm/gdn delta+norm", d1, b1, 16, &p, sizeof p, (uint32_t)nv * delta_groups(C, dv), 1, 1) == 0);
    void *before[16] = {NULL, NULL, NULL, st2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    static const int outs[6] = {3, 4, 8, 9, 10, 11};
    if (C_spread)   /* outputs, blocks, state and counters with the sums spread the other way */
        CHECKF(same_run(C_spread, "delta_norm/gdn delta+norm", d1, b1, 16, outs, 6, &p, sizeof p, (uint32_t)nv * delta_groups(C_spread, dv), 1,
                        before, 3, -1),
               "delta+norm %d/%d heads of %d/%d, %d tokens: spread %d and %d differ", nk, nv, dk, dv, T,
               bs_vk_delta_spread(C), bs_vk_delta_spread(C_spread));
    p.from_in = 1;   /* from the pair's other buffer (a snapshot's step): the same bits, that buffer kept */
    CHECKF(same_run(C, "delta_norm/gdn delta+norm", d1, b1, 16, outs, 6, &p, sizeof p, (uint32_t)nv * delta_groups(C, dv), 1, before, 3, 12),
           "delta+norm %d/%d heads of %d/%d, %d tokens: the state read from the other buffer differs", nk, nv, dk, dv, T);
    for (int h = 0; h < nv; h++) CHECKF(cnt[h] == 0, "delta_norm left head %d's counter at %u", h, cnt[h]);
    free(cnt);
    /* apart: the L2 norms of the q and k heads, the delta rule, the gated norm with its blocks */
    norm_push l2p = {(uint32_t)dk, 1, 0, (uint32_t)(2 * nk), (uint32_t)cd, (uint32_t)dk, 0, 0, eps, 0, 0, 0, 0.0f};
    void *d2[10] = {cc2, dummy, cc2, dummy, dummy, dummy, dummy, dummy, NULL, NULL};
    size_t b2[10] = {4 * nc, 16, 4 * nc, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", d2, b2, 10, &l2p, sizeof l2p, (uint32_t)(T * 2 * nk), 1, 1) == 0);
    struct { uint32_t nk, nv, dk, dv, T, cd; float scale; uint32_t r0, from_in; } dp = {
        (uint32_t)nk, (uint32_t)nv, (uint32_t)dk, (uint32_t)dv, (uint32_t)T, (uint32_t)cd, scale, 0, 0};
    void *d3[7] = {cc2, alpha, braw, st2, y2, gates, unbound};
    size_t b3[7] = {4 * nc, 4u * T * nv, 4u * T * nv, 4 * ns, 4 * no, 8u * nv, 16};
    CHECK(bs_vk_kernel_run(C, "delta", d3, b3, 7, &dp, sizeof dp, delta_groups(C, dv), (uint32_t)nv, 1) == 0);
    norm_push gp = {(uint32_t)dv, 0, 1, (uint32_t)nv, (uint32_t)(nv * dv), (uint32_t)dv, 0, 0, eps, 2 | 4, 0, 0, 0.0f};
    void *d4[10] = {y2, w, y2, dummy, qb, s8b, m8b, z, NULL, NULL};
    size_t b4[10] = {4 * no, 4u * dv, 4 * no, 16, 32 * nb, 4 * nb, 4 * nb, 4 * no, 16, 16};
    CHECK(bs_vk_kernel_run(C, "norm", d4, b4, 10, &gp, sizeof gp, (uint32_t)(T * nv), 1, 1) == 0);
    const int dy = !!memcmp(y, y2, 4 * no), dq = memcmp(q, qb, 32 * nb) || memcmp(s8, s8b, 4 * nb) || memcmp(m8, m8b, 4 * nb);
    const int ds = !!memcmp(st, st2, 4 * ns);
    CHECKF(!dy && !dq && !ds, "delta+norm %d/%d heads of %d/%d, %d tokens: differs from the steps apart (y %d, blocks %d, state %d)",
           nk, nv, dk, dv, T, dy, dq, ds);
    free(cc); free(alpha); free(braw); free(gates); free(st); free(z); free(w); free(cc2); free(st2); free(y); free(y2);
    free(s8); free(m8); free(s8b); free(m8b); free(q); free(qb);
}

/* --- rope.comp ------------------------------------------------------------------------------ */
static void check_rope(int heads, int D, int hs, int rs, int n_rot, int T, int pos0) {
    const size_t tot = (size_t)T * rs;
    float *x = vec(tot, 1.0f), *ref = malloc(sizeof *ref * tot), *cs = malloc(sizeof *cs * (size_t)T * n_rot);
    memcpy(ref, x, sizeof *x * tot);
    for (int t = 0; t < T; t++) bs_rope_cache(cs + (size_t)t * n_rot, pos0 + t, n_rot, 10000000.0f, NULL);
    uint32_t push[4] = {(uint32_t)heads, (uint32_t)hs, (uint32_t)rs, (uint32_t)n_rot};
    void *data[2] = {x, cs};
    size_t bytes[2] = {4 * tot, 4u * (size_t)T * n_rot};
    CHECK(bs_vk_kernel_run(C, "rope", data, bytes, 2, push, sizeof push, (uint32_t)(n_rot / 2 + 63) / 64, (uint32_t)(T * heads), 1) == 0);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++) bs_rope_neox(ref + (size_t)t * rs + (size_t)h * hs, cs + (size_t)t * n_rot, n_rot);
    double worst = 0;
    int rest = 1;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < D; i++) {
                const size_t e = (size_t)t * rs + (size_t)h * hs + (size_t)i;
                if (i >= n_rot) rest &= x[e] == ref[e];
                else worst = fmax(worst, fabs(x[e] - ref[e]) / (fabs(ref[e]) + 1e-3));
            }
    CHECKF(worst < 2e-6 && rest, "rope %d heads of %d, %d dims, %d rows: error %.3g, dims past n_rot kept: %d", heads, D, n_rot, T,
           worst, rest);
    free(x); free(ref); free(cs);
}

/* attn.comp fused (up to 8 rows): from raw q/k/v rows, the same output and cache bits as
 * qk.comp then attn.comp. */
static void check_attn_fused(int H, int Hkv, int D, int n_rot, int T, int pos0, bool f32, int r0);

/* --- kv_store.comp and attn.comp ------------------------------------------------------------- */
typedef struct { uint32_t H, Hkv, D, n_ctx; float scale; uint32_t f32, quant, qrow0, fused, n_rot; float eps; } attn_push;

/* attn.comp's epilogue (quant): the output gate and the int8 blocks, the same bits as its plain
 * output then quant_q8.comp's mode 2; q, the output and the blocks at rows qrow0 + t (a batch's
 * rows), rows before qrow0 left as they were. */
static void check_attn_quant(float *q, uint8_t *kc, uint8_t *vc, uint32_t *params, size_t kvb, const attn_push *plain, int T,
                             const float *o_plain) {
    const size_t HD = (size_t)plain->H * plain->D, n = (size_t)T * HD, nb = n / 32, r0 = 2;
    attn_push ap = *plain;
    ap.quant = 1;
    ap.qrow0 = (uint32_t)r0;
    const size_t no = n + r0 * HD;   /* r0 rows before the sequence's */
    float *o = calloc(no, sizeof *o), *y = malloc(sizeof *y * n), *qq = vec(2 * no, 1.0f);
    memcpy(qq + 2 * r0 * HD, q, 8u * n);
    uint32_t *aq = calloc((nb + r0 * HD / 32) * 8, 4), *rq = calloc(nb * 8, 4);
    float *as = calloc(nb + r0 * HD / 32, 4), *am = calloc(nb + r0 * HD / 32, 4), *rs = calloc(nb, 4), *rm = calloc(nb, 4);
    void *ad[14] = {qq, kc, vc, o, NULL, params, aq, as, am, NULL, NULL, NULL, NULL, NULL};
    size_t ab[14] = {8u * no, kvb, kvb, 4 * no, 4u * (size_t)T * plain->H * plain->n_ctx, 16, 32 * (nb + r0 * HD / 32), 4 * (nb + r0 * HD / 32),
                     4 * (nb + r0 * HD / 32), 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "attn", ad, ab, 14, &ap, sizeof ap, (uint32_t)T * plain->H, 1, 1) == 0);
    memcpy(y, o_plain, sizeof *y * n);
    uint32_t qp[4] = {(uint32_t)nb, 2, plain->H, plain->D};
    void *qd[5] = {y, rq, rs, rm, q};
    size_t qb[5] = {4 * n, 32 * nb, 4 * nb, 4 * nb, 8u * n};
    CHECK(bs_vk_kernel_run(C, "quant_q8", qd, qb, 5, qp, sizeof qp, (uint32_t)(nb + 63) / 64, 1, 1) == 0);
    const size_t b0 = r0 * HD / 32;
    bool before = true;   /* rows before r0 untouched */
    for (size_t i = 0; i < r0 * HD; i++) before &= o[i] == 0.0f;
    for (size_t i = 0; i < 8 * b0; i++) before &= aq[i] == 0u;
    CHECKF(before && !memcmp(o + r0 * HD, y, 4 * n) && !memcmp(aq + 8 * b0, rq, 32 * nb) && !memcmp(as + b0, rs, 4 * nb) &&
               !memcmp(am + b0, rm, 4 * nb),
           "attn %u heads of %u with its epilogue at row %zu: differs from attn then the gate and the quantizer", plain->H,
           plain->D, r0);
    free(o); free(y); free(qq); free(aq); free(rq); free(as); free(am); free(rs); free(rm);
}

/* --- qk.comp: q/k RMSNorm per head, rope, KV store; the same bits as norm, rope, kv_store ----
 * gated: q heads each followed by their gate (the target's); else packed (the drafter's, whose
 * context rows have no q heads: H = 0) */
static void check_qk(int H, int Hkv, int D, int n_rot, int T, int pos0, bool f32, int cs_row0, bool gated) {
    const int n_ctx = pos0 + T + 2, kvw = Hkv * D, esz = f32 ? 4 : 2;
    const size_t qh = (gated ? 2u : 1u) * D, qw = qh * H, kvb = (size_t)n_ctx * kvw * esz, nr = (size_t)(cs_row0 + T),
                 r0 = (size_t)cs_row0;
    /* the sequence's rows from cs_row0 of a, b, v and the rope table (a batch's rows) */
    float *a = vec(nr * BS_MAX(qw, 1), 1.0f), *b = vec(nr * kvw, 2.0f), *v = vec(nr * kvw, 1.0f);
    float *qn = vec((size_t)D, 1.0f), *kn = vec((size_t)D, 1.0f), *cs = malloc(sizeof *cs * nr * BS_MAX(n_rot, 1));
    for (size_t t = 0; t < nr; t++) bs_rope_cache(cs + t * n_rot, pos0 + (int)t - cs_row0, n_rot, 10000000.0f, NULL);
    float *a2 = malloc(sizeof *a2 * nr * BS_MAX(qw, 1)), *b2 = malloc(sizeof *b2 * nr * kvw);   /* (one unread row for H 0) */
    memcpy(a2, a, sizeof *a2 * nr * qw);
    memcpy(b2, b, sizeof *b2 * nr * kvw);
    uint8_t *kc = calloc(kvb, 1), *vc = calloc(kvb, 1), *kc2 = calloc(kvb, 1), *vc2 = calloc(kvb, 1);
    uint32_t params[4] = {(uint32_t)pos0, 0, 0, 0};
    qk_push qp = {
        (uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)n_rot, (uint32_t)cs_row0, f32, 1e-6f, gated};
    void *qd[9] = {a, b, v, qn, kn, cs, kc, vc, params};
    size_t qb[9] = {4 * nr * BS_MAX(qw, 1), 4u * nr * kvw, 4u * nr * kvw, 4u * D, 4u * D, 4 * nr * BS_MAX(n_rot, 1), kvb, kvb, 16};
    CHECK(bs_vk_kernel_run(C, "qk", qd, qb, 9, &qp, sizeof qp, (uint32_t)(T * (H + Hkv)), 1, 1) == 0);
    /* apart: norm.comp per head of q and k, rope.comp (its rows from cs_row0), on the sequence's
       rows alone, then kv_store.comp from row cs_row0 of the whole b and v */
    float *ra = a2 + r0 * qw, *rb = b2 + r0 * kvw;
    norm_push nq = {(uint32_t)D, 0, 1, (uint32_t)H, (uint32_t)qw, (uint32_t)qh, 0, 0, 1e-6f, 0, 0, 0, 0.0f};
    norm_push nk = {(uint32_t)D, 0, 1, (uint32_t)Hkv, (uint32_t)kvw, (uint32_t)D, 0, 0, 1e-6f, 0, 0, 0, 0.0f};
    void *d1[10] = {ra, qn, ra, NULL, NULL, NULL, NULL, NULL, NULL, NULL}, *d2[10] = {rb, kn, rb, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t by1[10] = {4 * (size_t)T * qw, 4u * D, 4 * (size_t)T * qw, 16, 16, 16, 16, 16, 16, 16};
    size_t by2[10] = {4u * (size_t)T * kvw, 4u * D, 4u * (size_t)T * kvw, 16, 16, 16, 16, 16, 16, 16};
    if (H) CHECK(bs_vk_kernel_run(C, "norm", d1, by1, 10, &nq, sizeof nq, (uint32_t)(T * H), 1, 1) == 0);
    CHECK(bs_vk_kernel_run(C, "norm", d2, by2, 10, &nk, sizeof nk, (uint32_t)(T * Hkv), 1, 1) == 0);
    if (n_rot > 0) {
        uint32_t rq[4] = {(uint32_t)H, (uint32_t)qh, (uint32_t)qw, (uint32_t)n_rot}, rk[4] = {(uint32_t)Hkv, (uint32_t)D, (uint32_t)kvw, (uint32_t)n_rot};
        void *r1[2] = {ra, cs + (size_t)cs_row0 * n_rot}, *r2[2] = {rb, cs + (size_t)cs_row0 * n_rot};
        size_t rb1[2] = {4 * (size_t)T * qw, 4u * (size_t)T * n_rot}, rb2[2] = {4u * (size_t)T * kvw, 4u * (size_t)T * n_rot};
        if (H) CHECK(bs_vk_kernel_run(C, "rope", r1, rb1, 2, rq, sizeof rq, (uint32_t)(n_rot / 2 + 63) / 64, (uint32_t)(T * H), 1) == 0);
        CHECK(bs_vk_kernel_run(C, "rope", r2, rb2, 2, rk, sizeof rk, (uint32_t)(n_rot / 2 + 63) / 64, (uint32_t)(T * Hkv), 1) == 0);
    }
    uint32_t kp[3] = {(uint32_t)kvw, f32, (uint32_t)cs_row0};
    void *kd[5] = {b2, v, kc2, vc2, params};
    size_t kb[5] = {4u * nr * kvw, 4u * nr * kvw, kvb, kvb, 16};
    CHECK(bs_vk_kernel_run(C, "kv_store", kd, kb, 5, kp, sizeof kp, (uint32_t)(kvw / 2 + 63) / 64, (uint32_t)T, 1) == 0);
    CHECKF(!memcmp(a, a2, 4 * nr * qw) && !memcmp(b, b2, 4u * nr * kvw) && !memcmp(kc, kc2, kvb) && !memcmp(vc, vc2, kvb),
           "qk %d/%d heads of %d%s, rope %d, %d rows at %d (table row %d), %s: differs from norm, rope, kv_store apart", H, Hkv, D,
           gated ? " (gated)" : "", n_rot, T, pos0, cs_row0, f32 ? "F32" : "F16");
    free(a); free(b); free(v); free(qn); free(kn); free(cs); free(a2); free(b2); free(kc); free(vc); free(kc2); free(vc2);
}

static void check_attn(int H, int Hkv, int D, int T, int pos0, bool f32) {
    const int n_ctx = pos0 + T + 3, kvw = Hkv * D, esz = f32 ? 4 : 2;
    const size_t kvb = (size_t)n_ctx * kvw * esz;
    /* the cache rows before pos0 as a previous step left them */
    float *prevk = vec((size_t)pos0 * kvw, 1.0f), *prevv = vec((size_t)pos0 * kvw, 1.0f);
    float *k = vec((size_t)T * kvw, 1.0f), *v = vec((size_t)T * kvw, 1.0f);
    uint8_t *kc = calloc(kvb, 1), *vc = calloc(kvb, 1), *rk = calloc(kvb, 1), *rv = calloc(kvb, 1);
    for (size_t i = 0; i < (size_t)pos0 * kvw; i++) {
        if (f32) { memcpy(kc + 4 * i, &prevk[i], 4); memcpy(vc + 4 * i, &prevv[i], 4); }
        else {
            const uint16_t hk = bs_f32_to_f16(prevk[i]), hv = bs_f32_to_f16(prevv[i]);
            memcpy(kc + 2 * i, &hk, 2);
            memcpy(vc + 2 * i, &hv, 2);
        }
    }
    memcpy(rk, kc, kvb);
    memcpy(rv, vc, kvb);
    for (size_t i = 0; i < (size_t)T * kvw; i++) {   /* what the CPU's cache gets */
        const size_t e = (size_t)pos0 * kvw + i;
        if (f32) { memcpy(rk + 4 * e, &k[i], 4); memcpy(rv + 4 * e, &v[i], 4); }
        else {
            const uint16_t hk = bs_f32_to_f16(k[i]), hv = bs_f32_to_f16(v[i]);
            memcpy(rk + 2 * e, &hk, 2);
            memcpy(rv + 2 * e, &hv, 2);
        }
    }
    uint32_t params[4] = {(uint32_t)pos0, 0, 0, 0};
    uint32_t kp[3] = {(uint32_t)kvw, f32, 0};
    void *kd[5] = {k, v, kc, vc, params};
    size_t kbytes[5] = {4u * (size_t)T * kvw, 4u * (size_t)T * kvw, kvb, kvb, 16};
    CHECK(bs_vk_kernel_run(C, "kv_store", kd, kbytes, 5, kp, sizeof kp, (uint32_t)(kvw / 2 + 63) / 64, (uint32_t)T, 1) == 0);
    CHECKF(!memcmp(kc, rk, kvb) && !memcmp(vc, rv, kvb), "kv_store %s: the cache differs from the CPU's rows", f32 ? "F32" : "F16");
    /* attention of T queries over the cache the store left */
    const size_t qw = 2u * H * D;
    float *q = vec((size_t)T * qw, 1.0f), *o = calloc((size_t)T * H * D, sizeof *o);
    attn_push ap = {(uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)n_ctx, 1.0f / sqrtf((float)D), f32, 0, 0, 0, 0, 0};
    const size_t scb = 4u * (size_t)T * H * n_ctx;
    void *ad[14] = {q, rk, rv, o, NULL, params, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t abytes[14] = {4 * (size_t)T * qw, kvb, kvb, 4u * (size_t)T * H * D, scb, 16, 16, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "attn", ad, abytes, 14, &ap, sizeof ap, (uint32_t)(T * H), 1, 1) == 0);
    if (D % 32 == 0) check_attn_quant(q, rk, rv, params, kvb, &ap, T, o);
    /* the CPU's attention: per query, q rounded to f16 for an F16 cache, KV head h / (H / Hkv) */
    float *qb = malloc(sizeof *qb * (size_t)D), *ref = malloc(sizeof *ref * (size_t)D), *sc = malloc(sizeof *sc * (size_t)n_ctx);
    float *tmp = malloc(sizeof *tmp * (size_t)D);
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *src = q + (size_t)t * qw + (size_t)h * 2 * D;
            for (int i = 0; i < D; i++) qb[i] = f32 ? src[i] : bs_f16_to_f32(bs_f32_to_f16(src[i]));
            const int nkv = pos0 + t + 1, kvh = h / (H / Hkv);
            const size_t off = (size_t)kvh * D * esz;
            bs_attn_queries(qb, 1, &nkv, rk + off, rv + off, (size_t)kvw * esz, !f32, D, ref, sc, (size_t)n_ctx, tmp);
            const float *got = o + (size_t)t * H * D + (size_t)h * D;
            double mag = 0;
            for (int i = 0; i < D; i++) mag = fmax(mag, fabs(ref[i]));
            for (int i = 0; i < D; i++) worst = fmax(worst, fabs(got[i] - ref[i]) / (mag + 1e-6));
        }
    CHECKF(worst < 1e-5, "attn %d/%d heads of %d, %d queries at %d, %s: error %.3g", H, Hkv, D, T, pos0, f32 ? "F32" : "F16", worst);
    free(prevk); free(prevv); free(k); free(v); free(kc); free(vc); free(rk); free(rv);
    free(q); free(o); free(qb); free(ref); free(sc); free(tmp);
}

/* --- act_round.comp: the CPU's activation conversion, then back to floats, bit for bit ------ */
static void check_act_round(int mode, int n) {
    static const int wtype[] = {0, BS_F16, BS_BF16, BS_Q8_0, BS_Q6_K};
    const bs_type_traits *tt = bs_type_get(wtype[mode]);
    const int blk = mode == 4 ? 256 : 32;
    float *x = vec((size_t)n, 2.0f), *y = calloc((size_t)n, sizeof *y), *ref = malloc(sizeof *ref * (size_t)n);
    for (int j = 0; j < 32 && j < n; j++) x[j] = 0.0f;   /* a zero block */
    uint8_t *a = malloc(bs_row_size(tt->vec_dot_type, n));
    if (tt->act_from_float) tt->act_from_float(x, a, n);
    else bs_quantize(tt->vec_dot_type, x, a, n);
    bs_dequantize(tt->vec_dot_type, a, ref, n);
    uint32_t push[2] = {(uint32_t)mode, (uint32_t)(n / blk)};
    void *data[2] = {x, y};
    size_t bytes[2] = {4u * (size_t)n, 4u * (size_t)n};
    CHECK(bs_vk_kernel_run(C, "act_round", data, bytes, 2, push, sizeof push, (uint32_t)(n / blk + 63) / 64, 1, 1) == 0);
    int diff = 0;
    for (int i = 0; i < n; i++) {   /* == : a code of 0 from a negative value gives -0 here, +0 there */
        if (y[i] != ref[i] && diff < 4) fprintf(stderr, "  act_round mode %d [%d]: x %.9g device %.9g CPU %.9g\n", mode, i, x[i], y[i], ref[i]);
        diff += y[i] != ref[i];
    }
    CHECKF(diff == 0, "act_round mode %d (%s activations): %d of %d values differ from the CPU's", mode,
           bs_type_name(tt->vec_dot_type), diff, n);
    free(x); free(y); free(ref); free(a);
}

/* --- argmax.comp: greedy tokens on the device ------------------------------------------------ */
/* The lowest index of the largest value, NaN never winning (a row of NaN: 0), by a plain scan. */
static uint32_t argmax_ref(const float *w, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(w[i]) && (best < 0 || w[i] > w[best])) best = i;
    return best < 0 ? 0u : (uint32_t)best;
}

/* rows of n logits, kind 0 random, 1 few distinct values (ties everywhere; +0 and -0 equal),
 * 2 NaN and infinities sprinkled in, 3 every value NaN; in chunks of `chunk` logits a workgroup
 * (0: the backend's choice, bs_vk_amax_chunk) */
static void check_argmax(int n, int rows, int kind, uint32_t chunk) {
    float *x = vec((size_t)n * rows, 3.0f);
    for (size_t i = 0; i < (size_t)n * rows; i++) {
        if (kind == 1) x[i] = (float)(bs_rng_next(&rng) % 4) - 1.0f, x[i] = x[i] == 0.0f && i % 2 ? -0.0f : x[i];
        if (kind == 2 && bs_rng_next(&rng) % 5 == 0) x[i] = bs_rng_next(&rng) % 2 ? NAN : -INFINITY;
        if (kind == 3) x[i] = NAN;
    }
    if (kind == 2) x[0] = NAN;           /* a NaN first does not stick */
    if (kind == 1 && n > 300) x[n - 1] = 2.0f, x[300] = 2.0f;   /* the max twice, far apart */
    if (!chunk) chunk = bs_vk_amax_chunk((uint32_t)n);
    const uint32_t nc = ((uint32_t)n + chunk - 1) / chunk;
    CHECKF(nc <= BS_VK_AMAX_CHUNKS, "argmax of %d in chunks of %u: %u chunks", n, chunk, nc);
    uint32_t *ids = calloc((size_t)rows, sizeof *ids), fed = 0xdeadbeefu, *cnt = calloc((size_t)rows, 4);
    void *data[5] = {x, ids, &fed, NULL, cnt};   /* the chunks' bests start as zeros */
    size_t bytes[5] = {4u * (size_t)n * rows, 4u * (size_t)rows, 4, 8u * BS_VK_AMAX_CHUNKS * rows, 4u * (size_t)rows};
    const uint32_t push[3] = {(uint32_t)n, (uint32_t)(kind % 2 == 0), chunk};   /* feed: row 0's id to the next step too */
    CHECK(bs_vk_kernel_run(C, "argmax", data, bytes, 5, push, sizeof push, nc, (uint32_t)rows, 1) == 0);
    int bad = 0;
    for (int r = 0; r < rows; r++) bad += ids[r] != argmax_ref(x + (size_t)r * n, n);
    CHECKF(bad == 0, "argmax of %d rows of %d in chunks of %u (kind %d): %d rows differ from the scan", rows, n, chunk, kind, bad);
    int left = 0;
    for (int r = 0; r < rows; r++) left += cnt[r] != 0;
    CHECKF(left == 0, "argmax of %d rows of %d in chunks of %u: %d counters not left at 0", rows, n, chunk, left);
    CHECKF(fed == (push[1] ? ids[0] : 0xdeadbeefu), "argmax (kind %d, feed %u): the next step's token %u, row 0's %u", kind,
           push[1], fed, ids[0]);
    free(x); free(ids); free(cnt);
}

/* topk.comp: the sampler's candidates (sampler.c: NaN and -inf dropped, +inf as FLT_MAX, higher
 * logit then lower id first) of a row of n logits, the kinds of check_argmax (4: +inf too) */
typedef struct topk_ref { float v; uint32_t id; } topk_ref;
static int topk_cmp(const void *a, const void *b) {
    const topk_ref *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void check_topk(int n, int k, int kind, int rows) {
    float *x = vec((size_t)n * rows, 3.0f);
    for (size_t i = 0; i < (size_t)n * rows; i++) {
        if (kind == 1) x[i] = (float)(bs_rng_next(&rng) % 4) - 1.0f, x[i] = x[i] == 0.0f && i % 2 ? -0.0f : x[i];
        if (kind == 2 && bs_rng_next(&rng) % 5 == 0) x[i] = bs_rng_next(&rng) % 2 ? NAN : -INFINITY;
        if (kind == 3) x[i] = NAN;
        if (kind == 4 && i % 97 == 5) x[i] = INFINITY;
    }
    /* the levels as vk_forward.c's record_topk runs them, each a dispatch of its own here */
    const uint32_t groups0 = (uint32_t)(n + 2047) / 2048, stride = groups0 * (uint32_t)k;
    uint32_t *ca = calloc((size_t)stride * rows * 2, 4), *cb = calloc((size_t)stride * rows * 2, 4), spare[2] = {0};
    uint32_t *out = calloc(129u * (size_t)rows, 4), nn = (uint32_t)n, mode = 0, *in = spare, *o = ca;
    for (;;) {
        const uint32_t groups = (nn + 2047) / 2048, last = groups == 1;
        const uint32_t push[6] = {nn, (uint32_t)k, mode, last, stride, (uint32_t)n};
        void *data[4] = {x, in, last ? spare : o, out};
        size_t bytes[4] = {4u * (size_t)n * rows, mode ? 8u * stride * rows : 8u, last ? 8u : 8u * stride * rows,
                           4u * 129 * (size_t)rows};
        CHECK(bs_vk_kernel_run(C, "topk", data, bytes, 4, push, sizeof push, groups, (uint32_t)rows, 1) == 0);
        if (last) break;
        nn = groups * (uint32_t)k;
        mode = 1;
        in = o;
        o = o == ca ? cb : ca;
    }
    topk_ref *ref = malloc(sizeof *ref * (size_t)n);
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        const uint32_t *orow = out + 129u * (size_t)r;
        int nr = 0;
        for (int i = 0; i < n; i++)
            if (!isnan(xr[i]) && xr[i] != -INFINITY) ref[nr++] = (topk_ref){xr[i] > FLT_MAX ? FLT_MAX : xr[i], (uint32_t)i};
        qsort(ref, (size_t)nr, sizeof *ref, topk_cmp);
        const int want = nr < k ? nr : k;
        int bad = (int)orow[0] != want;
        for (int i = 0; i < want && !bad; i++) {
            float v;
            memcpy(&v, &orow[1 + 64 + i], 4);
            bad += orow[1 + i] != ref[i].id || !(v == ref[i].v || (v > FLT_MAX && ref[i].v == FLT_MAX));
        }
        CHECKF(!bad, "top-%d of %d logits (kind %d, row %d of %d): %u candidates, want %d; first id %u, want %u", k, n, kind,
               r, rows, orow[0], want, orow[1], want ? ref[0].id : 0);
    }
    free(x); free(ref); free(ca); free(cb); free(out);
}

/* --- quant_q8.comp with a gate: the same bits as ew.comp's gate, then the plain quantizer ---- */
static void quant_run(float *x, const float *g, size_t gn, int mode, uint32_t H, uint32_t D, size_t n, uint8_t *q, float *sc,
                      float *sm) {
    const size_t nb = n / 32;
    float *gc = malloc(4 * (gn ? gn : 1));
    if (g) memcpy(gc, g, 4 * gn);
    void *data[5] = {x, q, sc, sm, gc};
    size_t bytes[5] = {4 * n, nb * 32, 4 * nb, 4 * nb, 4 * (gn ? gn : 1)};
    uint32_t push[4] = {(uint32_t)nb, (uint32_t)mode, H, D};
    CHECK(bs_vk_kernel_run(C, "quant_q8", data, bytes, 5, push, sizeof push, (uint32_t)(nb + 63) / 64, 1, 1) == 0);
    free(gc);
}

/* mode 1: x = silu(g) * x (g as wide as x); mode 2: x *= sigmoid(gate half of g's rows of 2HD) */
static void check_quant_gate(int mode, int rows, uint32_t H, uint32_t D) {
    const size_t n = (size_t)rows * H * D, gn = mode == 1 ? n : 2 * n, nb = n / 32;
    float *x = vec(n, 1.5f), *g = vec(gn, 2.0f), *xr = malloc(4 * n), *cc = malloc(4 * n);
    memcpy(xr, x, 4 * n);
    memcpy(cc, x, 4 * n);
    /* reference: ew.comp's step, then the quantizer without a gate */
    uint32_t ep[4] = {mode == 1 ? 1u : 2u, (uint32_t)n, H, D};
    void *ed[3] = {xr, g, cc};
    size_t eb[3] = {4 * n, 4 * gn, 4 * n};
    CHECK(bs_vk_kernel_run(C, "ew", ed, eb, 3, ep, sizeof ep, (uint32_t)(n + 255) / 256, 1, 1) == 0);
    uint8_t *q0 = malloc(nb * 32), *q1 = malloc(nb * 32);
    float *s0 = malloc(4 * nb), *s1 = malloc(4 * nb), *m0 = malloc(4 * nb), *m1 = malloc(4 * nb);
    quant_run(xr, NULL, 0, 0, 0, 0, n, q0, s0, m0);
    quant_run(x, g, gn, mode, H, D, n, q1, s1, m1);
    CHECKF(!memcmp(x, xr, 4 * n) && !memcmp(q0, q1, nb * 32) && !memcmp(s0, s1, 4 * nb) && !memcmp(m0, m1, 4 * nb),
           "quantizer with gate %d (%d rows, %u x %u): not the bits of the gate then the quantizer", mode, rows, H, D);
    free(x); free(g); free(xr); free(cc); free(q0); free(q1); free(s0); free(s1); free(m0); free(m1);
}

/* --- get_rows.comp: embedding rows of every layout against the format's dequantizer -------- */
static void check_embed(int type, int64_t d, int64_t rows, int n) {
    float *w = vec((size_t)(d * rows), 0.05f);
    const size_t rb = bs_row_size(type, d);
    uint8_t *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) bs_quantize(type, w + r * d, wq + r * rb, d);
    bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = wq, .row_bytes = rb, .name = bs_type_name(type)};
    bs_vk_matrix *m = bs_vk_matrix_new(C, &T);
    CHECKF(m != NULL, "%s: %s", bs_type_name(type), bs_last_error());
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    for (int t = 0; t < n; t++) tok[t] = t == 0 ? 0 : t == 1 ? (int32_t)rows - 1 : (int32_t)(bs_rng_next(&rng) % (uint64_t)rows);
    float *out = malloc(sizeof *out * (size_t)(n * d)), *ref = malloc(sizeof *ref * (size_t)d);
    CHECK(m && bs_vk_embed(C, m, tok, n, out) == 0);
    double worst = 0;
    for (int t = 0; t < n && m; t++) {
        bs_dequantize(type, wq + (size_t)tok[t] * rb, ref, d);
        for (int64_t i = 0; i < d; i++) worst = fmax(worst, fabs(out[t * d + i] - ref[i]) / (fabs(ref[i]) + 1e-30));
    }
    /* Q4_1 rows are q*d + m: one rounding either side of the CPU's; the rest are exact */
    const double tol = type == BS_Q4_1 ? 1e-6 : 0;
    CHECKF(worst <= tol, "embed %s %lldx%lld: relative error %.3g", bs_type_name(type), (long long)rows, (long long)d, worst);
    bs_vk_matrix_free(C, m);
    free(w); free(wq); free(tok); free(out); free(ref);
}

int main(void) {
    const int rc = vk_test_open("test_vulkan_ops", &C);
    if (rc || !C) return rc;
    /* a second context that spreads the delta rule's sums the other way from the device's choice */
    setenv("BITSPARK_VK_DELTA", bs_vk_delta_spread(C) == 8 ? "column" : "lanes", 1);
    C_spread = bs_vk_open(bs_vk_pick(true));
    unsetenv("BITSPARK_VK_DELTA");
    CHECKF(C_spread && bs_vk_delta_spread(C_spread) != bs_vk_delta_spread(C), "a context with the other delta spread: %s",
           bs_last_error());
    printf("delta rule: %d lanes per state column (the second context: %d)\n", bs_vk_delta_spread(C),
           C_spread ? bs_vk_delta_spread(C_spread) : 0);
    const int expected_messages = check_validation_sees_races();
    /* pipelines are built on first use: here every one, so a driver that rejects any says so */
    CHECKF(bs_vk_pipes_build(C) == 0 && (!C_spread || bs_vk_pipes_build(C_spread) == 0), "building every pipeline: %s",
           bs_last_error());
    bs_rng_seed(&rng, 2201);
    /* norms: rows (odd widths, 27B's 5120), q heads in rows of 2HD, k heads, DeltaNet's q/k
     * L2 heads and gated-norm heads; the fused add+norm+quantize */
    check_norm(0, 77, 3, 1, 77, 77);
    check_norm(0, 1000, 5, 1, 1000, 1000);
    check_norm(0, 5120, 2, 1, 5120, 5120);
    check_norm(0, 64, 3, 1, 128, 128);          /* one q head (gate half kept) */
    check_norm(0, 256, 2, 24, 512, 24 * 512);   /* 27B: 24 q heads of 256 */
    check_norm(0, 256, 3, 4, 256, 1024);        /* 27B: 4 k heads */
    check_norm(1, 33, 2, 3, 33, 99);
    check_norm(1, 128, 2, 32, 128, 10240);      /* 27B: 2 x 16 q/k heads in the conv rows */
    check_norm_fused(96, 7);
    check_norm_fused(5120, 2);
    check_norm_rot(5120, 1024, true, 2);   /* Bonsai 2: three passes of two blocks */
    check_norm_rot(256, 64, true, 3);
    check_norm_rot(2048, 2048, false, 1);
    check_norm_rot(96, 32, true, 2);
    check_norm_rot(64, 2, true, 1);
    check_mv_f32n(48, 5120, 1, 2);   /* 27B's alpha / beta, bf16 */
    check_mv_f32n(48, 5120, 13, 2);
    check_mv_f32n(7, 77, 9, 1);
    check_mv_f32n(1, 1, 1, 0);
    check_mv_f32n(97, 300, 8, 0);
    check_lora_a(8, 5120, 1);   /* a rank-8 adapter on a 27B product */
    check_lora_a(4, 17408, 3);
    check_lora_a(3, 77, 13);
    check_lora_b(5120, 8, 1, 0.7f);
    check_lora_b(77, 3, 13, 2.0f);
    check_norm_gated(128, 3, 2);
    check_norm_gated(128, 48, 3);   /* 27B: 48 V heads of 128 */
    check_norm_gated(64, 6, 1);
    /* element-wise */
    const size_t ns[] = {1, 37, 70001};
    for (size_t i = 0; i < 3; i++) {
        check_ew(0, ns[i], 0, 0);
        check_ew(1, ns[i], 0, 0);
    }
    check_ew(2, 1 * 1 * 33, 1, 33);
    check_ew(2, 3 * 24 * 256, 24, 256);
    /* argmax: odd widths, one and 8 rows, Bonsai's vocabulary; ties, NaN, all NaN; in the
       backend's chunks (Bonsai's: 61), in one, and in up to 64 of 256 */
    static const int an[] = {1, 7, 255, 257, 1000, 5000, 16383, 248320};
    for (size_t i = 0; i < BS_ARRAY_LEN(an); i++)
        for (int kind = 0; kind < 4; kind++) {
            const int rows = kind == 0 ? 8 : 1 + (int)(i % 3);
            check_argmax(an[i], rows, kind, 0);
            check_argmax(an[i], rows, kind, (uint32_t)an[i]);
            if (an[i] <= 256 * BS_VK_AMAX_CHUNKS) check_argmax(an[i], rows, kind, 256);
        }
    /* top-k: one workgroup, two and three levels (Bonsai's vocabulary), k 1..64, 1..3 rows */
    static const int tn[] = {5, 100, 2048, 2049, 5000, 248320}, tk[] = {1, 40, 64};
    for (size_t i = 0; i < BS_ARRAY_LEN(tn); i++)
        for (int kind = 0; kind < 5; kind++) check_topk(tn[i], tk[(i + (size_t)kind) % 3], kind, 1 + (int)((i + (size_t)kind) % 3));
    /* the gates folded into the quantizer: odd head counts, 1..8 rows, 27B's 48 x 128 and 24 x 256 */
    for (int rows = 1; rows <= 8; rows += 3) {
        check_quant_gate(1, rows, 3, 32);
        check_quant_gate(2, rows, 3, 32);
    }
    check_quant_gate(1, 2, 48, 128);
    check_quant_gate(2, 2, 24, 256);
    /* conv (K 4 as Qwen3.5, 2 and 8 the limits), DeltaNet */
    check_conv(37, 4, 1);
    check_conv_l2(4, 64, 6 * 64, 4, 5);
    check_conv_l2(2, 128, 100, 4, 1);
    check_conv_l2(32, 128, 48 * 128, 4, 3);   /* 27B: 2 x 16 q/k heads, 48 v heads */
    check_conv(200, 4, 37);
    check_conv(65, 2, 5);
    check_conv(70, 8, 3);
    check_conv(10240, 4, 3);
    check_delta(1, 1, 16, 16, 1);
    check_delta(1, 3, 33, 17, 7);
    check_delta(2, 6, 64, 64, 37);
    check_delta(16, 48, 128, 128, 2);
    /* the fused decode step: odd shapes, 1..8 rows, every integer format; 27B's (Q1_0 qkv of
     * 10240 x 5120, conv K 4; 16 / 48 heads of 128) */
    check_mv_conv(BS_Q1_0, 256, 77, 1, 4);
    check_mv_conv(BS_Q2_0, 256, 300, 5, 4);
    check_mv_conv(BS_Q2_0_G64, 128, 65, 8, 2);
    check_mv_conv(BS_Q8_0, 96, 70, 3, 9);
    check_mv_conv(BS_Q4_1, 64, 33, 7, 1);
    for (int n = 1; n <= 8; n += 7) check_mv_conv(BS_Q1_0, 5120, 10240, n, 4);
    check_delta_norm(1, 1, 16, 32, 1);
    check_delta_norm(1, 3, 33, 64, 7);
    check_delta_norm(2, 6, 64, 96, 5);
    check_delta_norm(3, 3, 200, 256, 2);
    for (int T = 1; T <= 8; T += 2) check_delta_norm(16, 48, 128, 128, T);
    /* RoPE: partial (16 of 64, 64 of 256), one and many heads, q heads at stride 2D */
    check_rope(1, 64, 64, 64, 64, 1, 0);
    check_rope(4, 64, 128, 512, 16, 5, 3);
    check_rope(24, 256, 512, 24 * 512, 64, 3, 1000);
    check_rope(4, 256, 256, 1024, 64, 2, 37);
    /* KV store + attention: GQA groups 1, 2, 6; one head; F16 and F32 caches; 1..37 positions */
    check_qk(1, 1, 64, 64, 1, 0, false, 0, true);
    check_qk(4, 2, 64, 16, 5, 32, false, 3, true);
    check_qk(3, 1, 96, 0, 2, 7, true, 0, true);
    check_qk(24, 4, 256, 64, 3, 1000, false, 1, true);
    /* the DSpark drafter's: packed q heads, RoPE over the whole head, F32 rows; its context rows
       (no q heads: 37 rows, more than a block) */
    check_qk(4, 2, 64, 64, 7, 30, true, 0, false);
    check_qk(32, 8, 128, 128, 16, 1000, true, 0, false);
    check_qk(0, 2, 64, 64, 37, 5, true, 0, false);
    check_attn_fused(1, 1, 64, 64, 1, 0, false, 0);
    check_attn_fused(4, 2, 64, 16, 5, 32, false, 3);
    check_attn_fused(6, 2, 96, 0, 8, 7, true, 0);
    check_attn_fused(24, 4, 256, 64, 2, 300, false, 1);
    check_attn(1, 1, 64, 1, 0, false);
    check_attn(4, 2, 64, 5, 32, false);
    check_attn(6, 1, 32, 3, 7, true);
    check_attn(2, 2, 96, 2, 35, true);
    check_attn(24, 4, 256, 2, 20, false);
    /* activation rounding of the formats that run as F32 */
    check_act_round(1, 32 * 37);
    check_act_round(2, 32 * 37);
    check_act_round(3, 32 * 37);
    check_act_round(4, 256 * 3);
    check_act_round(3, 5120);
    /* embedding rows */
    static const int et[] = {BS_Q1_0, BS_Q2_0, BS_Q2_0_G64, BS_Q8_0, BS_Q4_1, BS_F16, BS_BF16, BS_Q6_K, BS_F32};
    for (size_t i = 0; i < sizeof et / sizeof et[0]; i++) check_embed(et[i], 256, 301, 37);
    check_embed(BS_Q1_0, 5120, 67, 3);
    bs_vk_close(C_spread);
    bs_vk_close(C);
    CHECKF(bs_vk_validation_messages() == expected_messages, "%d validation messages (%d expected)",
           bs_vk_validation_messages(), expected_messages);
    return test_summary("test_vulkan_ops");
}

static void check_attn_fused(int H, int Hkv, int D, int n_rot, int T, int pos0, bool f32, int r0) {
    const int n_ctx = pos0 + T + 2, kvw = Hkv * D, esz = f32 ? 4 : 2;
    /* the sequence's rows from r0 of q, k, v, the rope table and the output (a batch's rows) */
    const size_t qw = 2u * H * D, kvb = (size_t)n_ctx * kvw * esz, nr = (size_t)(r0 + T), ob = 4u * nr * H * D;
    float *a = vec(nr * qw, 1.0f), *b = vec(nr * kvw, 2.0f), *v = vec(nr * kvw, 1.0f);
    float *qn = vec((size_t)D, 1.0f), *kn = vec((size_t)D, 1.0f), *cs = malloc(sizeof *cs * nr * BS_MAX(n_rot, 1));
    for (size_t t = 0; t < nr; t++) bs_rope_cache(cs + t * n_rot, pos0 + (int)t - r0, n_rot, 10000000.0f, NULL);
    uint8_t *kc = malloc(kvb), *vc = malloc(kvb);
    for (size_t i = 0; i < kvb; i++) kc[i] = (uint8_t)(bs_rng_next(&rng) & 0x3b), vc[i] = (uint8_t)(bs_rng_next(&rng) & 0x3b);
    uint8_t *kc2 = malloc(kvb), *vc2 = malloc(kvb);
    memcpy(kc2, kc, kvb);
    memcpy(vc2, vc, kvb);
    float *a2 = malloc(sizeof *a2 * nr * qw), *b2 = malloc(sizeof *b2 * nr * kvw);
    memcpy(a2, a, sizeof *a2 * nr * qw);
    memcpy(b2, b, sizeof *b2 * nr * kvw);
    float *o1 = calloc(nr * H * D, 4), *o2 = calloc(nr * H * D, 4);
    uint32_t params[4] = {(uint32_t)pos0, 0, 0, 0};
    const size_t scb = 4u * (size_t)T * H * n_ctx, csb = 4 * nr * BS_MAX(n_rot, 1);
    /* apart: qk.comp, then attn.comp on what it left */
    qk_push qp = {
        (uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)n_rot, (uint32_t)r0, f32, 1e-6f, 1};
    void *qd[9] = {a2, b2, v, qn, kn, cs, kc2, vc2, params};
    size_t qb[9] = {4 * nr * qw, 4u * nr * kvw, 4u * nr * kvw, 4u * D, 4u * D, csb, kvb, kvb, 16};
    CHECK(bs_vk_kernel_run(C, "qk", qd, qb, 9, &qp, sizeof qp, (uint32_t)(T * (H + Hkv)), 1, 1) == 0);
    attn_push ap = {(uint32_t)H, (uint32_t)Hkv, (uint32_t)D, (uint32_t)n_ctx, 1.0f / sqrtf((float)D), f32, 0, (uint32_t)r0, 0,
                    (uint32_t)n_rot, 1e-6f};
    void *d1[14] = {a2, kc2, vc2, o1, NULL, params, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t b1[14] = {4 * nr * qw, kvb, kvb, ob, scb, 16, 16, 16, 16, 16, 16, 16, 16, 16};
    CHECK(bs_vk_kernel_run(C, "attn", d1, b1, 14, &ap, sizeof ap, (uint32_t)(T * H), 1, 1) == 0);
    /* fused, from the raw rows */
    ap.fused = 1;
    void *d2[14] = {a, kc, vc, o2, NULL, params, NULL, NULL, NULL, b, v, qn, kn, cs};
    size_t b2s[14] = {4 * nr * qw, kvb, kvb, ob, scb, 16, 16, 16, 16, 4u * nr * kvw, 4u * nr * kvw, 4u * D, 4u * D, csb};
    CHECK(bs_vk_kernel_run(C, "attn", d2, b2s, 14, &ap, sizeof ap, (uint32_t)(T * H), 1, 1) == 0);
    bool before = true;   /* output rows before r0 untouched */
    for (size_t i = 0; i < (size_t)r0 * H * D; i++) before &= o2[i] == 0.0f;
    CHECKF(before && !memcmp(o1, o2, ob) && !memcmp(kc, kc2, kvb) && !memcmp(vc, vc2, kvb),
           "attn fused %d/%d heads of %d, rope %d, %d rows at %d (row %d), %s: differs from qk then attn", H, Hkv, D, n_rot, T,
           pos0, r0, f32 ? "F32" : "F16");
    free(a); free(b); free(v); free(qn); free(kn); free(cs); free(kc); free(vc); free(kc2); free(vc2);
    free(a2); free(b2); free(o1); free(o2);
}
