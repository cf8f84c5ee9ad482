/* vk_mm.c: the integer products of more than 8 rows (prompts, large batches) in mm_q.glsl's
 * tiles, with int8 cooperative matrices (tensor cores) where the device has them, and Q8_0 /
 * Q4_1's in mm_ql.glsl's: which way a context takes, and the check a context makes before it
 * trusts them with a model (the kernels that stand in for mv_q's: vk_kernels.c's
 * bs_vk_mm_kernel). A CPU device
 * has none, so the test suite checks mm_q's plain form against mv_q there, and a context on a
 * GPU checks the cooperative form against mv_q itself, bit for bit, before using it. */
#include "vulkan/vk_internal.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

const char *bs_vk_mm_name(int mode) {
    return mode == BS_VK_MM_COOP ? "cooperative matrix (int8)" : mode == BS_VK_MM_TILE ? "tiles (plain sums)" : "mv_q";
}

int bs_vk_mm_mode(const bs_vk_ctx *c) { return c->mm; }
bool bs_vk_mm_lanes(const bs_vk_ctx *c) { return c->mm_lanes; }

bs_vk_coop_shape bs_vk_mm_coop(const bs_vk_ctx *c, bool *khr) {
    if (khr) *khr = c->coop_khr;
    return c->coop;
}

/* The cooperative matrices a context would take: NV's where the device has them (glslang's own
 * module), else KHR's (the rewritten one); BITSPARK_VK_COOP=nv|khr asks for one. */
static int coop_pick(bs_vk_ctx *c) {
    const char *env = getenv("BITSPARK_VK_COOP");
    const bool nv = c->info.coop_nv.m > 0, khr = c->info.coop_khr.m > 0;
    c->coop_khr = false;
    c->coop = (bs_vk_coop_shape){0, 0, 0};
    if (env && *env && strcmp(env, "nv") && strcmp(env, "khr") && strcmp(env, "auto"))
        return bs_error("BITSPARK_VK_COOP=%s: expected nv, khr or auto", env);
    const bool want_khr = env && !strcmp(env, "khr"), want_nv = env && !strcmp(env, "nv");
    if (want_khr) c->coop_khr = khr;
    else if (!want_nv) c->coop_khr = !nv && khr;
    if (c->coop_khr) c->coop = c->info.coop_khr;
    else if (nv && !want_khr) c->coop = c->info.coop_nv;
    return 0;
}

int bs_vk_mm_want(bs_vk_ctx *c) {
    const char *env = getenv("BITSPARK_VK_MM");
    TRY(coop_pick(c));
    const bool coop = c->coop.m > 0;
    c->mm_auto = false;
    if (!env || !*env || !strcmp(env, "auto")) {
        c->mm = coop ? BS_VK_MM_COOP : BS_VK_MM_OFF;
        c->mm_auto = coop;
    } else if (!strcmp(env, "off")) {
        c->mm = BS_VK_MM_OFF;
    } else if (!strcmp(env, "tile")) {
        if (!c->info.int8) return bs_error("BITSPARK_VK_MM=tile: %s has no shaderInt8", c->info.name);
        c->mm = BS_VK_MM_TILE;
    } else if (!strcmp(env, "coop")) {
        if (!coop)
            return bs_error("BITSPARK_VK_MM=coop: %s has no int8 cooperative matrix mm_q takes%s", c->info.name,
                            getenv("BITSPARK_VK_COOP") ? " by the extension BITSPARK_VK_COOP names" : "");
        c->mm = BS_VK_MM_COOP;
    } else {
        return bs_error("BITSPARK_VK_MM=%s: expected off, tile, coop or auto", env);
    }
    if (c->mm != BS_VK_MM_OFF && bs_env_flag("BITSPARK_VK_MM_CHECK")) c->mm_auto = true;   /* tests: check a way asked for */
    /* Q8_0 / Q4_1 (a drafter's formats) in mm_ql's tiles: plain integer code (dp4a where the
     * device has it), so any device can; a GPU's default, and whenever tiles are asked for.
     * On a CPU device (lavapipe) mv_q's row groups are as fast: they stay the default there. */
    const bool off = env && !strcmp(env, "off");
    c->mm_lanes = !off && (c->mm != BS_VK_MM_OFF || c->info.type != BS_VK_CPU);
    return 0;
}

/* One product of `rows` x `cols` of type on `n` rows with the context's mm and with mv_q; 1 when
 * they give the same bits, 0 when not, -1 when either failed. Weights and inputs from a fixed
 * sequence, the weights' scales varied so that every float step matters. */
static int same_bits(bs_vk_ctx *c, int type, int64_t cols, int64_t rows, int n) {
    const size_t rb = bs_row_size(type, cols);
    float *w = bs_xmalloc(sizeof *w * (size_t)(cols * rows));
    float *x = bs_xmalloc(sizeof *x * (size_t)(cols * n)), *y0 = bs_xmalloc(sizeof *y0 * (size_t)(rows * n));
    float *y1 = bs_xmalloc(sizeof *y1 * (size_t)(rows * n));
    uint8_t *q = bs_xmalloc(rb * (size_t)rows);
    uint32_t s = 0x2545f491u;
    for (int64_t i = 0; i < cols * rows; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (1.0f + (float)(i / 128 % 7));
    }
    for (int64_t i = 0; i < cols * n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    int rc = 0;
    for (int64_t r = 0; r < rows && !rc; r++) rc = bs_quantize(type, w + r * cols, q + r * rb, cols) < 0;
    bs_vk_tensor T = {.type = type, .ne0 = cols, .ne1 = rows, .data = q, .row_bytes = rb, .name = "mm check"};
    bs_vk_matrix *m = rc ? NULL : bs_vk_matrix_new(c, &T);
    const int mode = c->mm;
    const bool lanes = c->mm_lanes;
    rc = !m || bs_vk_matvec(c, m, x, n, y1);
    c->mm = BS_VK_MM_OFF;
    c->mm_lanes = false;
    rc = rc || bs_vk_matvec(c, m, x, n, y0);
    c->mm = mode;
    c->mm_lanes = lanes;
    const int same = rc ? -1 : !memcmp(y0, y1, sizeof *y0 * (size_t)(rows * n));
    bs_vk_matrix_free(c, m);
    free(w); free(x); free(y0); free(y1); free(q);
    return same;
}

int bs_vk_mm_check(bs_vk_ctx *c) {
    if (!c->mm_auto && !c->mm_lanes) return 0;
    /* split-K slices (few rows), a partial tile of rows and of activation rows, every format */
    int ok = 1;
    if (c->mm_auto) {
        ok = same_bits(c, BS_Q1_0, 1024, 72, 41);
        if (ok == 1) ok = same_bits(c, BS_Q2_0, 512, 40, 35);
    }
    if (ok != 1) {
        bs_log(0, "bitspark: Vulkan %s: the products by %s %s; products of many rows use mv_q\n", c->info.name,
               bs_vk_mm_name(c->mm), ok < 0 ? "failed to run" : "differ from mv_q's");
        c->mm = BS_VK_MM_OFF;
    }
    int lanes = c->mm_lanes ? same_bits(c, BS_Q8_0, 512, 72, 41) : 1;
    if (lanes == 1 && c->mm_lanes) lanes = same_bits(c, BS_Q4_1, 256, 40, 35);
    if (lanes != 1) {
        bs_log(0, "bitspark: Vulkan %s: Q8_0 / Q4_1 products in tiles %s; they use mv_q\n", c->info.name,
               lanes < 0 ? "failed to run" : "differ from mv_q's");
        c->mm_lanes = false;
    }
    bs_vk_stats_reset(c);   /* the check is not the caller's work */
    memset(c->prof_ms, 0, sizeof c->prof_ms);
    memset(c->prof_n, 0, sizeof c->prof_n);
    return 0;
}
