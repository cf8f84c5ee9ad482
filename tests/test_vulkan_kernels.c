/* test_vulkan_kernels.c: the Vulkan kernels against the CPU oracle (the formats' scalar
 * quantizers and dot products, float64 sums), with the validation layer on (any message
 * fails), on the first Vulkan device of any type (lavapipe in CI). Exits 77 (skipped) where
 * the backend is not built, there is no loader or no device.
 *  - activation quantization: bit for bit the CPU's Q8_0 activations (x86 rounding), ties too;
 *  - products for Q1_0, Q2_0 (128, 64), Q8_0 (integer kernels) and F32, F16, BF16, Q4_1, Q6_K
 *    (converted at upload), odd row counts, 1..9 activation rows, columns split into slices
 *    (split-K): within float rounding of the oracle, and each row bit-identical whatever the
 *    number of rows evaluated together; Bonsai-27B's 5120 and 17408 columns too;
 *  - matrices split by rows (a small maxStorageBufferRange forced), with the plain int8 sums
 *    instead of dp4a, give the same bits;
 *  - on a discrete GPU's memory (BITSPARK_VK_FAKE_MEMORY: device buffers only through the
 *    staging ring) with a 32 KiB maxMemoryAllocationSize, F32 and Q8_0 matrices are split by
 *    it and give the same bits; a buffer past it is refused with a message;
 *  - weights whose fp16 scales are subnormal (the shaders widen the file's fp16 exactly);
 *  - RMSNorm; the copy kernel's bandwidth; --device spellings;
 *  - a folded model's epilogues (the rotations in the output products, the GLU and the fused
 *    DeltaNet step: below, "the folded products' epilogues"). */
/* GCC 12's aarch64 vectorizer crashes (internal compiler error in vect_transform_reduction) on
 * this file's reference reductions, which need not be vectorized. */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-vectorize")
#endif
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
static int n_split;   /* integer matrices that the kernels split by columns */
static bs_vk_ctx *c_asum;   /* mv_q taking the activation block sums the other way (NULL: none) */
static float w_mag = 0.05f;   /* the weights' scale: tiny makes the files' fp16 scales subnormal */

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = bs_rng_normal(&rng) * scale;
}

static void check_quantizer(bs_vk_ctx *c) {
    enum { D = 32 * 37, N = 3 };
    float *x = malloc(sizeof *x * D * N);
    fill(x, D * N, 1.0f);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;                  /* a zero block */
    for (int j = 0; j < 32; j++) x[64 + j] = (float)(j - 16) * 0.5f; /* exact ties: x*127/amax = k+0.5 */
    x[64] = 127.0f; /* amax 127: id = 1, ties at .5 */
    for (int j = 1; j < 32; j++) x[64 + j] = (float)j - 16.5f;
    const size_t bytes = (size_t)D * N / 32 * 34;
    uint8_t *cpu = malloc(bytes), *gpu = malloc(bytes);
    bs_type_get(BS_Q8_0)->act_from_float(x, cpu, (int64_t)D * N);   /* the CPU path's quantizer */
    CHECK(bs_vk_quantize_q8(c, x, D, N, gpu) == 0);
    int diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += cpu[i] != gpu[i];
    CHECKF(diff == 0, "%d of %zu bytes of the Q8_0 activations differ from the CPU's", diff, bytes);
    free(x); free(cpu); free(gpu);
}

/* The CPU path's result for one output: the weight type's activation conversion and scalar
 * dot product (the oracle the CPU kernels are tested against), float64 for F32; mag is the
 * sum of |terms| (the scale of rounding). */
static double oracle(int type, const uint8_t *wrow, const float *x, int64_t d, double *mag) {
    const bs_type_traits *t = bs_type_get(type);
    float *wf = malloc(sizeof *wf * (size_t)d);
    bs_dequantize(type, wrow, wf, d);
    double s = 0, m = 0;
    for (int64_t i = 0; i < d; i++) { s += (double)wf[i] * x[i]; m += fabs((double)wf[i] * x[i]); }
    *mag = m;
    if (t->act_from_float) {
        uint8_t *a = malloc(bs_row_size(t->vec_dot_type, d));
        t->act_from_float(x, a, d);
        float f;
        t->vec_dot(d, &f, wrow, a);
        s = f;
        free(a);
    }
    free(wf);
    return s;
}

static bs_vk_matrix *upload(bs_vk_ctx *c, int type, int64_t d, int64_t rows, uint8_t **wq) {
    float *w = malloc(sizeof *w * (size_t)(d * rows));
    fill(w, (size_t)(d * rows), w_mag);
    const size_t rb = bs_row_size(type, d);
    *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) bs_quantize(type, w + r * d, *wq + r * rb, d);
    bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = *wq, .row_bytes = rb, .name = bs_type_name(type)};
    bs_vk_matrix *m = bs_vk_matrix_new(c, &T);
    free(w);
    return m;
}

/* A context whose products of more than 8 rows run in mm_q's tiles (the plain sums; or, where
 * the device has them, the cooperative matrices): the bits of c's for 9 rows (one partial tile)
 * and 41 (a whole one and a partial one). */
static bs_vk_ctx *c_mm;

static void check_mm(bs_vk_ctx *c, int type, int64_t d, int64_t rows, const uint8_t *wq) {
    if (!c_mm) return;
    const bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = wq, .row_bytes = bs_row_size(type, d)};
    bs_vk_matrix *m = bs_vk_matrix_new(c, &T), *mm = bs_vk_matrix_new(c_mm, &T);
    CHECK(m && mm);
    if (type == BS_Q8_0 || type == BS_Q4_1)   /* one of the two takes mm_ql (none fell back at its opening check) */
        CHECKF(bs_vk_mm_lanes(c) != bs_vk_mm_lanes(c_mm), "%s: both contexts take the same way", bs_type_name(type));
    enum { N = 41 };
    float *x = malloc(sizeof *x * (size_t)(d * N)), *y = malloc(sizeof *y * (size_t)(rows * N));
    float *ym = malloc(sizeof *ym * (size_t)(rows * N));
    fill(x, (size_t)(d * N), 1.0f);
    for (int n = 9; n <= N && m && mm; n += N - 9) {
        CHECK(bs_vk_matvec(c, m, x, n, y) == 0);
        CHECK(bs_vk_matvec(c_mm, mm, x, n, ym) == 0);
        CHECKF(!memcmp(y, ym, sizeof *y * (size_t)(rows * n)), "%s %lldx%lld, %d rows: %s and %s differ", bs_type_name(type),
               (long long)rows, (long long)d, n, bs_vk_mm_name(bs_vk_mm_mode(c)), bs_vk_mm_name(bs_vk_mm_mode(c_mm)));
    }
    bs_vk_matrix_free(c, m);
    bs_vk_matrix_free(c_mm, mm);
    free(x); free(y); free(ym);
}

/* BITSPARK_VK_MM: a way the device cannot take, or no way at all, is refused with its name; the
 * check a context makes of a chosen way (on a GPU of its cooperative matrices) passes for tiles. */
static void check_mm_choice(int dev, const bs_vk_device_info *info) {
    static const char *bad[] = {"coop", "tiles"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!strcmp(bad[i], "coop") && (info->coop_nv.m || info->coop_khr.m)) continue;   /* this device has them */
        setenv("BITSPARK_VK_MM", bad[i], 1);
        bs_vk_ctx *x = bs_vk_open(dev);
        CHECKF(!x && strstr(bs_last_error(), "BITSPARK_VK_MM="), "BITSPARK_VK_MM=%s: %s", bad[i], x ? "opened" : bs_last_error());
        bs_vk_close(x);
    }
    setenv("BITSPARK_VK_MM", "tile", 1);
    setenv("BITSPARK_VK_MM_CHECK", "1", 1);
    bs_vk_ctx *x = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_MM");
    unsetenv("BITSPARK_VK_MM_CHECK");
    CHECKF(x && bs_vk_mm_mode(x) == BS_VK_MM_TILE && bs_vk_mm_lanes(x), "tiles after the opening check: %s%s",
           x ? bs_vk_mm_name(bs_vk_mm_mode(x)) : bs_last_error(), x && !bs_vk_mm_lanes(x) ? ", but not for Q8_0 / Q4_1" : "");
    bs_vk_close(x);
}

static void check_matvec(bs_vk_ctx *c, bs_vk_ctx *c_split, int type, int64_t d, int64_t rows) {
    uint8_t *wq;
    bs_vk_matrix *m = upload(c, type, d, rows, &wq);
    CHECKF(m != NULL, "%s upload: %s", bs_type_name(type), bs_last_error());
    if (!m) return;
    n_split += bs_vk_matrix_split(m) > 1;
    const int N = 9;
    float *x = malloc(sizeof *x * (size_t)(d * N)), *y = malloc(sizeof *y * (size_t)(rows * N));
    float *y1 = malloc(sizeof *y1 * (size_t)rows);
    fill(x, (size_t)(d * N), 1.0f);
    CHECK(bs_vk_matvec(c, m, x, N, y) == 0);
    const size_t rb = bs_row_size(type, d);
    double worst = 0;
    for (int r = 0; r < N; r++)
        for (int64_t o = 0; o < rows; o++) {
            double mag, ref = oracle(type, wq + (size_t)o * rb, x + (size_t)r * d, d, &mag);
            double e = fabs(y[(size_t)r * rows + o] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    CHECKF(worst < 2e-6, "%s %lldx%lld: relative error %.3g", bs_type_name(type), (long long)rows, (long long)d, worst);
    /* batch invariance: each row alone, and in a group of 3, gives the same bits */
    int same = 1;
    for (int r = 0; r < N; r++) {
        CHECK(bs_vk_matvec(c, m, x + (size_t)r * d, 1, y1) == 0);
        same &= !memcmp(y1, y + (size_t)r * rows, sizeof *y1 * (size_t)rows);
    }
    float *y3 = malloc(sizeof *y3 * (size_t)(rows * 3));
    CHECK(bs_vk_matvec(c, m, x + (size_t)5 * d, 3, y3) == 0);
    same &= !memcmp(y3, y + (size_t)5 * rows, sizeof *y3 * (size_t)(rows * 3));
    CHECKF(same, "%s: a row's result depends on how many rows run together", bs_type_name(type));
    const bs_vk_tensor T = {.type = type, .ne0 = d, .ne1 = rows, .data = wq, .row_bytes = rb};
    check_mm(c, type, d, rows, wq);
    if (c_asum) {   /* the other way of taking the activation block sums: the same bits */
        bs_vk_matrix *ma = bs_vk_matrix_new(c_asum, &T);
        float *ya = malloc(sizeof *ya * (size_t)(rows * N));
        CHECK(ma && bs_vk_matvec(c_asum, ma, x, N, ya) == 0);
        CHECKF(ma && !memcmp(ya, y, sizeof *ya * (size_t)(rows * N)), "%s %lldx%lld: the block sums staged or not differ",
               bs_type_name(type), (long long)rows, (long long)d);
        bs_vk_matrix_free(c_asum, ma);
        free(ya);
    }
    if (c_split) {
        bs_vk_matrix *ms = bs_vk_matrix_new(c_split, &T);
        CHECK(ms && bs_vk_matrix_parts(ms) > 1);
        float *ys = malloc(sizeof *ys * (size_t)(rows * N));
        CHECK(ms && bs_vk_matvec(c_split, ms, x, N, ys) == 0);
        CHECKF(ms && !memcmp(ys, y, sizeof *ys * (size_t)(rows * N)), "%s: split matrix (or plain int8 sums) differs", bs_type_name(type));
        bs_vk_matrix_free(c_split, ms);
        free(ys);
    }
    bs_vk_matrix_free(c, m);
    free(x); free(y); free(y1); free(y3); free(wq);
}

static void check_rmsnorm(bs_vk_ctx *c) {
    const int d = 1000, n = 5;
    float *x = malloc(sizeof *x * d * n), *w = malloc(sizeof *w * d), *y = malloc(sizeof *y * d * n);
    fill(x, (size_t)d * n, 2.0f);
    fill(w, d, 1.0f);
    CHECK(bs_vk_rmsnorm(c, x, w, d, n, 1e-6f, y) == 0);
    double worst = 0;
    for (int r = 0; r < n; r++) {
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
        const double sc = 1.0 / sqrt(ss / d + 1e-6);
        for (int i = 0; i < d; i++) {
            const double ref = x[r * d + i] * sc * w[i];
            worst = fmax(worst, fabs(y[r * d + i] - ref) / (fabs(ref) + 1e-3));
        }
    }
    CHECKF(worst < 1e-5, "rmsnorm relative error %.3g", worst);
    free(x); free(w); free(y);
}

static void check_parse(void) {
    int kind, index;
    CHECK(bs_vk_parse_device("auto", &kind, &index) == 0 && kind == BS_DEVICE_AUTO);
    CHECK(bs_vk_parse_device("cpu", &kind, &index) == 0 && kind == BS_DEVICE_CPU);
    CHECK(bs_vk_parse_device("vulkan", &kind, &index) == 0 && kind == BS_DEVICE_VULKAN && index == -1);
    CHECK(bs_vk_parse_device("vulkan:2", &kind, &index) == 0 && kind == BS_DEVICE_VULKAN && index == 2);
    CHECK(bs_vk_parse_device("vulkan:", &kind, &index) < 0);
    CHECK(bs_vk_parse_device("vulkan:x", &kind, &index) < 0);
    CHECK(bs_vk_parse_device("gpu", &kind, &index) < 0);
}

/* A buffer past maxMemoryAllocationSize (32 KiB here) is refused with a message, not a crash
 * or a driver error. */
static void check_alloc_limit(bs_vk_ctx *cm) {
    const int64_t d = 256, rows = 64, n = 40;   /* 40 rows of 256 floats: 40 KiB of input */
    uint8_t *wq;
    bs_vk_matrix *m = upload(cm, BS_Q8_0, d, rows, &wq);
    CHECKF(m != NULL, "upload: %s", bs_last_error());
    float *x = calloc((size_t)(d * n), sizeof *x), *y = calloc((size_t)(rows * n), sizeof *y);
    CHECK(m && bs_vk_matvec(cm, m, x, (int)n, y) != 0);
    CHECKF(strstr(bs_last_error(), "binding") || strstr(bs_last_error(), "larger than the device allows"),
           "past the allocation limit: %s", bs_last_error());
    bs_clear_error();
    bs_vk_matrix_free(cm, m);
    free(x); free(y); free(wq);
}

/* --- the folded products' epilogues (mv_q.glsl's ROT, delta_norm.comp with a fold) -------------
 * Against the CPU path's code:
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
 * rows. (The split attention's rotation: test_vulkan_attn.) */
static bs_vk_ctx *C_epi;

static float *vec(size_t n, float scale) {
    float *x = malloc(sizeof *x * (n ? n : 1));
    fill(x, n, scale);
    return x;
}

static bs_vk_matrix *matrix(int type, int64_t cols, int64_t rows) {
    const size_t rb = bs_row_size(type, cols);
    float *w = vec((size_t)(cols * rows), 0.05f);
    uint8_t *wq = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) bs_quantize(type, w + r * cols, wq + r * rb, cols);
    bs_vk_tensor T = {.type = type, .ne0 = cols, .ne1 = rows, .data = wq, .row_bytes = rb, .name = bs_type_name(type)};
    bs_vk_matrix *m = bs_vk_matrix_new(C_epi, &T);
    CHECKF(m != NULL, "%s upload: %s", bs_type_name(type), bs_last_error());
    free(w);
    free(wq);
    return m;
}

/* The device's int8 blocks of `tot` values against the CPU quantizer's of v: blocks that differ */
static int blocks_differ(const float *v, size_t tot, const bs_vk_epilogue *e) {
    return vk_test_blocks_differ(v, tot, e->codes, e->scales, e->sums);
}

static int values_differ(const float *a, const float *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

typedef struct epi_mem { bs_vk_epilogue e; float *sg; } epi_mem;

/* Outputs of n rows of E (and a fold of `block` over E, signs or not; block 0: none) */
static epi_mem *epi_new(int64_t E, int n, int block, bool signs) {
    epi_mem *m = calloc(1, sizeof *m);
    const size_t tot = (size_t)n * (size_t)E;
    m->e.out = calloc(tot, 4);
    m->e.xr = calloc(tot, 4);
    m->e.codes = calloc(tot, 1);
    m->e.scales = calloc(tot / 32, 4);
    m->e.sums = calloc(tot / 32, 4);
    m->sg = malloc(sizeof *m->sg * (size_t)E);
    for (int64_t i = 0; i < E; i++) m->sg[i] = bs_rng_normal(&rng) < 0 ? -1.0f : 1.0f;
    if (block) {
        bs_vk_fold *f = calloc(1, sizeof *f);
        *f = (bs_vk_fold){.block = block, .width = E, .signs = signs ? m->sg : NULL};
        m->e.fold = f;
    }
    return m;
}

static void epi_free(epi_mem *m) {
    free(m->e.out); free(m->e.xr); free(m->e.codes); free(m->e.scales); free(m->e.sums); free((void *)m->e.fold); free(m->sg);
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
    CHECKF(bs_vk_matvec(C_epi, m, d, n, v) == 0, "%s", bs_last_error());
    CHECKF(bs_vk_matvec_norm(C_epi, m, d, n, &em->e) == 0, "mv+norm: %s", bs_last_error());
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
    bs_vk_matrix_free(C_epi, m);
}

static void check_glu(int type, int64_t K, int64_t F, int n, int block, bool signs) {
    bs_vk_matrix *g = matrix(type, K, F), *u = matrix(type, K, F);
    const size_t tot = (size_t)n * (size_t)F;
    float *d = vec((size_t)n * (size_t)K, 1.0f), *vg = calloc(tot, 4), *vu = calloc(tot, 4), *rot = malloc(4 * tot);
    epi_mem *em = epi_new(F, n, block, signs), *plain = epi_new(F, n, 0, false);
    if (g && u) {
        CHECKF(bs_vk_matvec(C_epi, g, d, n, vg) == 0 && bs_vk_matvec(C_epi, u, d, n, vu) == 0, "%s", bs_last_error());
        CHECKF(bs_vk_matvec_glu(C_epi, g, u, d, n, &em->e) == 0, "glu+rotate: %s", bs_last_error());
        CHECKF(bs_vk_matvec_glu(C_epi, g, u, d, n, &plain->e) == 0, "glu: %s", bs_last_error());
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
    if (g) bs_vk_matrix_free(C_epi, g);
    if (u) bs_vk_matrix_free(C_epi, u);
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
    const uint32_t cols = bs_vk_delta_cols(C_epi), groups = (uint32_t)nv * (((uint32_t)dv + cols - 1) / cols);
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
        CHECKF(bs_vk_kernel_run(C_epi, "delta_norm", data, bytes, 16, &p, sizeof p, groups, 1, 1) == 0, "%s", bs_last_error());
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


static void check_epilogues(bs_vk_ctx *c) {
    C_epi = c;
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
}

int main(void) {
    check_parse();
    bs_vk_device_info info[8];
    const int nd = vk_test_devices(info, 8);
    if (nd < 0) return -nd;
    const int dev = bs_vk_pick(true);
    bs_vk_ctx *c = bs_vk_open(dev);
    CHECKF(c != NULL, "%s", bs_last_error());
    if (!c) return test_summary("test_vulkan_kernels");
    printf("device %d: %s (%s), subgroup %u, max binding %llu\n", dev, info[dev].name, bs_vk_type_name(info[dev].type),
           info[dev].subgroup_size, (unsigned long long)info[dev].max_binding);
    /* a second context whose tensors are split by rows and whose int8 products do not use
     * dp4a: both must give the first context's bits */
    setenv("BITSPARK_VK_MAX_BINDING", "4096", 1);
    setenv("BITSPARK_VK_DP4A", "0", 1);
    bs_vk_ctx *cs = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_MAX_BINDING");
    unsetenv("BITSPARK_VK_DP4A");
    /* a third on a discrete GPU's memory (tests: faked over the device's; device buffers then
     * only through the staging ring) with 32 KiB in one allocation: larger weights are split */
    setenv("BITSPARK_VK_FAKE_MEMORY", "discrete,256K:dl+hv+hc,1G:dl,4G:hv+hc+hca,maxalloc=32K", 1);
    bs_vk_ctx *cm = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_FAKE_MEMORY");
    CHECKF(cm != NULL, "a context on faked memory: %s", bs_last_error());
    printf("int8 products: %s (the second context: plain)\n", bs_vk_uses_dp4a(c) ? "dp4a" : "plain");
    /* a fourth that takes mv_q's activation block sums the other way from the device's choice */
    setenv("BITSPARK_VK_ASUM", bs_vk_asum_staged(c) ? "row" : "stage", 1);
    c_asum = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_ASUM");
    CHECKF(c_asum && bs_vk_asum_staged(c_asum) != bs_vk_asum_staged(c), "a context with the other block sums: %s", bs_last_error());
    printf("activation block sums: %s (the fourth context: the other way)\n", bs_vk_asum_staged(c) ? "staged" : "per row");
    printf("fma(): %s\n", bs_vk_fma_fused(c) ? "fused (native)" : "not fused here: emulated (fma_rn.glsl)");
    /* a fifth whose products of more than 8 rows take mm_q's tiles the other way from c's */
    setenv("BITSPARK_VK_MM", bs_vk_mm_mode(c) == BS_VK_MM_OFF && !bs_vk_mm_lanes(c) ? "tile" : "off", 1);
    c_mm = bs_vk_open(dev);
    unsetenv("BITSPARK_VK_MM");
    CHECKF(c_mm != NULL, "a context with products of many rows in tiles: %s", bs_last_error());
    printf("products of more than 8 rows: %s, Q8_0 / Q4_1 %s (the fifth context: %s, %s)\n", bs_vk_mm_name(bs_vk_mm_mode(c)),
           bs_vk_mm_lanes(c) ? "tiles" : "mv_q", c_mm ? bs_vk_mm_name(bs_vk_mm_mode(c_mm)) : "none",
           c_mm && bs_vk_mm_lanes(c_mm) ? "tiles" : "mv_q");
    check_mm_choice(dev, &info[dev]);
    CHECK(!cs || !bs_vk_uses_dp4a(cs));
    CHECK(cs != NULL);
    bs_rng_seed(&rng, 22);
    check_quantizer(c);
    check_rmsnorm(c);
    /* BS_TEST_QUICK=1 (test_vulkan_kernels_no_layer: the run without the validation layer says
       so and goes on): one product, not every format and shape again */
    const bool quick = getenv("BS_TEST_QUICK") && atoi(getenv("BS_TEST_QUICK")) > 0;
    if (quick) check_matvec(c, NULL, BS_Q1_0, 256, 67);
    static const int types[] = {BS_Q1_0, BS_Q2_0, BS_Q2_0_G64, BS_Q8_0, BS_F32, BS_F16, BS_BF16, BS_Q4_1, BS_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0] && !quick; i++) {
        check_matvec(c, NULL, types[i], 256, 67);   /* odd rows, one 64-row workgroup and a bit */
        check_matvec(c, cs, types[i], 768, 203);    /* split into parts when 4096 bytes bind */
    }
    /* fp16 scales below 2^-14 (subnormal): the shaders widen them exactly, as the CPU does */
    w_mag = 2e-6f;
    static const int sub[] = {BS_Q1_0, BS_Q2_0, BS_Q8_0, BS_Q4_1};
    for (size_t i = 0; i < sizeof sub / sizeof sub[0] && !quick; i++) check_matvec(c, NULL, sub[i], 256, 67);
    w_mag = 0.05f;
    if (cm && !quick) {
        check_matvec(c, cm, BS_F32, 768, 203);
        check_matvec(c, cm, BS_Q8_0, 768, 203);
        check_alloc_limit(cm);
    }
    /* Bonsai-27B's shapes: attention/FFN inputs of 5120 and the FFN down input of 17408
     * columns (odd row counts, fewer rows than the model has) */
    static const int bonsai[] = {BS_Q1_0, BS_Q2_0, BS_Q2_0_G64};
    for (size_t i = 0; i < sizeof bonsai / sizeof bonsai[0] && !quick; i++) {
        check_matvec(c, NULL, bonsai[i], 5120, 517);
        check_matvec(c, NULL, bonsai[i], 17408, 131);
    }
    /* 8 rows of 32768 columns hold more activation block sums than mv_q stages (6144): that
     * group sums its own, the 9th row's group takes the staged ones; the same bits either way */
    if (!quick) {
        check_matvec(c, NULL, BS_Q1_0, 32768, 37);
        check_matvec(c, NULL, BS_Q2_0, 32768, 37);
        CHECKF(n_split >= 5, "only %d matrices took the split-K kernels", n_split);
    }
    if (!quick) check_epilogues(c);
    const double gbs = bs_vk_copy_bandwidth(c, 8u << 20, 4);
    CHECKF(gbs > 0, "copy bandwidth: %s", bs_last_error());
    printf("copy kernel: %.2f GB/s\n", gbs);
    bs_vk_close(cm);
    bs_vk_close(c_asum);
    bs_vk_close(c_mm);
    bs_vk_close(cs);
    bs_vk_close(c);
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary("test_vulkan_kernels");
}
