/* test_requant_fixtures.c: bitspark's codecs against the files llama.cpp wrote (fixtures).
 *  - tiny-q4_1 / tiny-q8_0 were quantized by llama-quantize from tiny-f32: re-quantizing every
 *    tiny-f32 tensor they store quantized reproduces their bytes exactly, their F32 tensors are
 *    tiny-f32's bytes, and dequantizing agrees with tiny-f32 within each format's rounding
 *    bound per block (h = 2^-11, fp16 rounding of stored scales):
 *      Q8_0: |e| <= amax/127 * (1/2 + 127h)
 *      Q4_1: |e| <= (max-min)/15 * (1/2 + 15h) + |min| h
 *  - tiny-q1_0 / tiny-q2_0 / tiny-q2_0-g64 hold QAT weights (±s, {-s,0,s}): dequantize ->
 *    requantize reproduces every quantized tensor's bytes (BF16 too), and the two Q2_0 layouts
 *    decode to the same floats where the magnitudes are per 128-group.
 *  - tiny-q1_0-q6k's output.weight is Q6_K made from the same ±s weights as tiny-q1_0's output
 *    (the fixtures README; tiny-f32's output is unrelated random data): its dequantization is
 *    within 6-bit error of those weights with every sign kept. Quantizing the fp16-rounded ±s
 *    weights (what Q1_0 stores) reproduces most blocks exactly; the others differ only in the
 *    last bit of d because the Q6_K was made from the unrounded f32 magnitudes. So the check is:
 *    every block is exactly our Q6_K quantization of ±s' weights with each 128-group's s'
 *    within the fp16 rounding of s (|s'/s - 1| <= 2^-11, searched in steps of 2^-16).
 *    Re-quantizing the Q6_K's own dequantization is reported, not required: Q6_K's scale
 *    search is not idempotent. */
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static char fx[512];

static gguf_file *open_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fx, name);
    gguf_file *f = gguf_open(path, 0);
    CHECKF(f != NULL, "%s: %s", path, bs_last_error());
    return f;
}

static int64_t n_elems(const gguf_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}

static float *dequant(const gguf_tensor *t) {
    float *y = bs_xmalloc((size_t)n_elems(t) * sizeof *y);
    CHECKF(bs_dequantize(t->type, t->data, y, n_elems(t)) == 0, "%s: %s", t->name, bs_last_error());
    return y;
}

/* Quantize src as `type` and compare with the tensor's bytes; returns mismatching blocks. */
static int64_t requant_diff(const gguf_tensor *t, const float *src) {
    const bs_type_traits *tt = bs_type_get(t->type);
    int64_t n = n_elems(t);
    uint8_t *q = bs_xmalloc(t->nbytes);
    bs_quantize(t->type, src, q, n);
    int64_t bad = 0;
    for (int64_t b = 0; b < n / tt->blck; b++)
        bad += memcmp(q + b * tt->type_size, (const uint8_t *)t->data + b * tt->type_size, tt->type_size) != 0;
    free(q);
    return bad;
}

static int64_t bound_violations(int type, const float *x, const float *y, int64_t n) {
    const double h = 1.0 / 2048;
    int64_t bad = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float mn = xb[0], mx = xb[0], amax = 0;
        for (int j = 0; j < 32; j++) { mn = fminf(mn, xb[j]); mx = fmaxf(mx, xb[j]); amax = fmaxf(amax, fabsf(xb[j])); }
        double bound = type == BS_Q8_0 ? amax / 127.0 * (0.5 + 127 * h)
                                       : (mx - mn) / 15.0 * (0.5 + 15 * h) + fabs(mn) * h;
        bound = bound * (1 + 1e-6) + 1e-12;
        for (int j = 0; j < 32; j++) bad += fabs((double)xb[j] - y[32 * b + j]) > bound;
    }
    return bad;
}

static void check_from_f32(const char *name, int qtype) {
    gguf_file *f32 = open_fixture("tiny-f32.gguf"), *q = open_fixture(name);
    if (!f32 || !q) { gguf_close(f32); gguf_close(q); return; }
    int nq = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor *t = &q->tensors[i], *s = gguf_find_tensor(f32, t->name);
        CHECKF(s && s->type == BS_F32 && n_elems(s) == n_elems(t), "%s: %s missing from tiny-f32", name, t->name);
        if (!s) continue;
        if (t->type == BS_F32) {
            CHECKF(memcmp(s->data, t->data, t->nbytes) == 0, "%s: F32 tensor %s differs", name, t->name);
            continue;
        }
        CHECKF(t->type == qtype, "%s: %s has type %s", name, t->name, bs_type_name(t->type));
        nq++;
        int64_t bad = requant_diff(t, s->data);
        CHECKF(bad == 0, "%s: %s: %lld blocks differ after requantizing tiny-f32", name, t->name, (long long)bad);
        float *y = dequant(t);
        int64_t viol = bound_violations(qtype, s->data, y, n_elems(t));
        CHECKF(viol == 0, "%s: %s: %lld elements beyond the rounding bound", name, t->name, (long long)viol);
        free(y);
    }
    CHECKF(nq == 64, "%s: %d quantized tensors", name, nq);
    printf("%s: %d quantized tensors requantized byte-exact from tiny-f32\n", name, nq);
    gguf_close(f32);
    gguf_close(q);
}

static void check_qat(const char *name) {
    gguf_file *q = open_fixture(name);
    if (!q) return;
    int nq = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor *t = &q->tensors[i];
        if (t->type == BS_F32) continue;
        nq++;
        float *y = dequant(t);
        int64_t bad = requant_diff(t, y);
        CHECKF(bad == 0, "%s: %s (%s): %lld blocks differ after dequantize -> requantize", name,
               t->name, bs_type_name(t->type), (long long)bad);
        free(y);
    }
    CHECKF(nq > 0, "%s: no quantized tensors", name);
    printf("%s: %d non-F32 tensors reproduced by dequantize -> requantize\n", name, nq);
    gguf_close(q);
}

/* The ternary weights in the two Q2_0 layouts. */
static void check_q2_layouts(void) {
    gguf_file *a = open_fixture("tiny-q2_0.gguf"), *b = open_fixture("tiny-q2_0-g64.gguf");
    if (!a || !b) { gguf_close(a); gguf_close(b); return; }
    int n = 0, same = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i], *tb = gguf_find_tensor(b, ta->name);
        if (ta->type != BS_Q2_0) continue;
        CHECKF(tb && tb->type == BS_Q2_0_G64, "%s: not Q2_0_G64 in tiny-q2_0-g64", ta->name);
        if (!tb) continue;
        float *ya = dequant(ta), *yb = dequant(tb);
        n++;
        same += memcmp(ya, yb, (size_t)n_elems(ta) * 4) == 0;
        free(ya);
        free(yb);
    }
    CHECKF(n == 52 && same == n, "%d of %d Q2_0 tensors decode identically in both layouts", same, n);
    gguf_close(a);
    gguf_close(b);
}

/* Is `file` (one Q6_K block) our quantization of x with its two 128-groups scaled by
 * 1 + ka 2^-16 and 1 + kb 2^-16? */
static bool q6_k_matches(const uint8_t *file, const float *x, int ka, int kb) {
    float xs[256];
    uint8_t q[210];
    for (int i = 0; i < 256; i++) xs[i] = x[i] * (1.0f + (float)(i < 128 ? ka : kb) * 0x1p-16f);
    bs_quantize(BS_Q6_K, xs, q, 256);
    return memcmp(q, file, 210) == 0;
}

/* Search |ka|, |kb| <= 32: one group at a time first (d follows the group with the largest
 * sub-block scale, so this nearly always suffices), then both. */
static int q6_k_full_searches;
static bool q6_k_block_explained(const uint8_t *file, const float *x) {
    for (int k = 0; k <= 32; k++)
        if (q6_k_matches(file, x, k, 0) || q6_k_matches(file, x, -k, 0) ||
            q6_k_matches(file, x, 0, k) || q6_k_matches(file, x, 0, -k)) return true;
    q6_k_full_searches++;
    for (int ka = -32; ka <= 32; ka++)
        for (int kb = -32; kb <= 32; kb++)
            if (ka != 0 && kb != 0 && q6_k_matches(file, x, ka, kb)) return true;
    return false;
}

static void check_q6_k(void) {
    gguf_file *q6 = open_fixture("tiny-q1_0-q6k.gguf"), *q1 = open_fixture("tiny-q1_0.gguf");
    if (!q6 || !q1) { gguf_close(q6); gguf_close(q1); return; }
    const gguf_tensor *t6 = gguf_find_tensor(q6, "output.weight"), *t1 = gguf_find_tensor(q1, "output.weight");
    CHECK(t6 && t6->type == BS_Q6_K && t1 && t1->type == BS_Q1_0);
    if (t6 && t1 && t6->type == BS_Q6_K) {
        int64_t n = n_elems(t6);
        float *y6 = dequant(t6), *y1 = dequant(t1);
        double e2 = 0, x2 = 0;
        int64_t sign = 0;
        for (int64_t i = 0; i < n; i++) {
            e2 += (double)(y6[i] - y1[i]) * (y6[i] - y1[i]);
            x2 += (double)y1[i] * y1[i];
            sign += (y6[i] > 0) != (y1[i] > 0);
        }
        double rel = sqrt(e2 / x2);
        /* 6-bit with 16-element sub-scales on ±s data: a few tenths of a percent. */
        CHECKF(rel < 0.01, "Q6_K output vs the Q1_0 weights: relative L2 %g", rel);
        CHECK_EQ_INT(sign, 0);
        int64_t blocks = n / 256, bad = requant_diff(t6, y1), unexplained = 0;
        for (int64_t b = 0; b < blocks; b++)
            unexplained += !q6_k_block_explained((const uint8_t *)t6->data + 210 * b, y1 + 256 * b);
        CHECKF(unexplained == 0, "Q6_K: %lld of %lld blocks are not our quantization of ±s' weights",
               (long long)unexplained, (long long)blocks);
        int64_t again = requant_diff(t6, y6);
        printf("q6_k output.weight: rel L2 vs Q1_0 weights %.3g; quantize(fp16 ±s weights) differs in "
               "%lld/%lld blocks (explained by unrounded s, %d needing both groups moved); "
               "quantize(dequantize(q6_k)) differs in %lld/%lld blocks\n", rel, (long long)bad,
               (long long)blocks, q6_k_full_searches, (long long)again, (long long)blocks);
        free(y6);
        free(y1);
    }
    /* Every other tensor is tiny-q1_0's. */
    int other = 0;
    for (uint64_t i = 0; i < q6->n_tensors; i++) {
        const gguf_tensor *t = &q6->tensors[i], *s = gguf_find_tensor(q1, t->name);
        if (strcmp(t->name, "output.weight") == 0) continue;
        other += !(s && s->nbytes == t->nbytes && memcmp(s->data, t->data, t->nbytes) == 0);
    }
    CHECK_EQ_INT(other, 0);
    gguf_close(q6);
    gguf_close(q1);
}

int main(void) {
    const char *e = getenv("BS_FIXTURES");
    snprintf(fx, sizeof fx, "%s", e ? e : "tests/fixtures");
    check_from_f32("tiny-q8_0.gguf", BS_Q8_0);
    check_from_f32("tiny-q4_1.gguf", BS_Q4_1);
    check_qat("tiny-q1_0.gguf");
    check_qat("tiny-q2_0.gguf");
    check_qat("tiny-q2_0-g64.gguf");
    check_q2_layouts();
    check_q6_k();
    return test_summary("test_requant_fixtures");
}
