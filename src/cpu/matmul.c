/* matmul.c: the reference implementation of bs_matmul / bs_get_rows (matmul.h).
 *
 * It does what llama.cpp's CPU backend does, in the plainest way: each activation row is
 * converted once to the weight type's vec_dot_type with the table's act_from_float (x86
 * rounding), then every output is one scalar vec_dot of a weight row with an activation row.
 * Each (row, output) pair goes through the same call whatever n_rows is, so a row's result
 * never depends on how many rows were batched with it. Faster kernels (SIMD, threads) replace
 * the inner loops behind this same API and must keep that property. */
#include "cpu/matmul.h"

#include "cpu/cpu_features.h"
#include "formats/gguf.h"
#include "cpu/kernels.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>

int bs_weight_from_tensor(bs_weight *w, const gguf_tensor *t) {
    for (int d = 2; d < GGUF_MAX_DIMS; d++)
        if (t->ne[d] != 1) return bs_error("%s: a weight must be 1-D or 2-D", t->name);
    const bs_type_traits *tt = bs_type_get(t->type);
    if (!tt || !tt->to_float || !tt->vec_dot)
        return bs_error("%s: type %s cannot be used as a weight", t->name, bs_type_name(t->type));
    int64_t ne0 = t->ne[0], ne1 = t->n_dims >= 2 ? t->ne[1] : 1;
    size_t row = bs_row_size(t->type, ne0);
    uint64_t total = bs_tensor_size(t->type, ne0, ne1 > 0 ? (uint64_t)ne1 : 0);
    if (row == 0 || ne1 <= 0 || total == UINT64_MAX)
        return bs_error("%s: bad shape [%lld, %lld] for type %s", t->name, (long long)ne0,
                        (long long)ne1, tt->name);
    if (total > t->nbytes)
        return bs_error("%s: %llu bytes of data, %llu needed", t->name,
                        (unsigned long long)t->nbytes, (unsigned long long)total);
    *w = (bs_weight){.type = t->type, .ne0 = ne0, .ne1 = ne1, .data = t->data,
                     .row_bytes = row, .name = t->name};
    return 0;
}

/* The fast path (kernels.c: SIMD kernels, threads) for every dispatch level above scalar;
 * BITSPARK_CPU=scalar (or bs_cpu_set_level) selects the single-threaded reference below, which
 * is the tests' oracle. */
/* a . x in the order the Vulkan device sums a LoRA factor A's rows (mv_f32n.comp, FMA 0): 64
 * lanes, lane l adding the products of terms l, l + 64, .. (each rounded, then added), then a
 * fixed tree over the lanes. A has a handful of rows of thousands of inputs: summed in one
 * line, a GPU would run each row's thousands of dependent additions on one invocation. */
static float lora_dot(const float *a, const float *x, int64_t n) {
    float lane[64] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float p = a[i] * x[i];
        lane[i & 63] += p;
    }
    for (int h = 32; h > 0; h >>= 1)
        for (int l = 0; l < h; l++) lane[l] += lane[l + h];
    return lane[0];
}

/* y += scale * B (A x) for each adapter attached to W (lora.h); the device's float order. */
static void lora_terms(const bs_weight *W, const float *x, int64_t n_rows, float *y) {
    for (const bs_lora_ref *ref = W->lora; ref; ref = ref->next) {
        const bs_lora_tensor *t = ref->t;
        float *ax = bs_xmalloc((size_t)t->r * sizeof *ax);
        for (int64_t row = 0; row < n_rows; row++) {
            const float *xr = x + row * t->in;
            float *yr = y + row * t->out;
            for (int k = 0; k < t->r; k++) ax[k] = lora_dot(t->a + (size_t)k * t->in, xr, t->in);
            for (int64_t o = 0; o < t->out; o++) {
                const float *b = t->b + (size_t)o * t->r;
                float s = 0;
                for (int k = 0; k < t->r; k++) s += b[k] * ax[k];
                yr[o] += ref->scale * s;
            }
        }
        free(ax);
    }
}

void bs_matmul(const bs_weight *W, const float *x, int64_t n_rows, float *y, bs_pool *pool) {
    if (W->lora) {   /* W x, then the LoRA terms */
        bs_weight base = *W;
        base.lora = NULL;
        bs_matmul(&base, x, n_rows, y, pool);
        lora_terms(W, x, n_rows, y);
        return;
    }
    if (W->rot) {   /* a folded weight multiplies the rotated activations */
        float *xr = bs_xmalloc((size_t)n_rows * (size_t)W->ne0 * sizeof *xr);
        bs_rotate_rows(W->rot, x, xr, n_rows, pool);
        bs_weight base = *W;
        base.rot = NULL;
        bs_matmul(&base, xr, n_rows, y, pool);
        free(xr);
        return;
    }
    if (bs_matmul_fast(W, x, n_rows, y, pool, bs_cpu_level()) == 0) return;
    const bs_type_traits *t = bs_type_get(W->type);
    if (!t || !t->vec_dot) {
        /* bs_weight_from_tensor rejects these; reaching here is a programming error. */
        fprintf(stderr, "bitspark: bs_matmul: no dot product for type %s\n", bs_type_name(W->type));
        abort();
    }
    const int64_t ne0 = W->ne0, ne1 = W->ne1;
    const uint8_t *act = (const uint8_t *)x;
    size_t act_row = (size_t)ne0 * sizeof(float);
    void *buf = NULL;
    if (t->act_from_float) {
        act_row = bs_row_size(t->vec_dot_type, ne0);
        buf = bs_xmalloc(act_row * (size_t)n_rows);
        for (int64_t r = 0; r < n_rows; r++)
            t->act_from_float(x + r * ne0, (uint8_t *)buf + r * act_row, ne0);
        act = buf;
    }
    uint8_t *rowbuf = bs_xmalloc(W->row_bytes);   /* a row unpacked from a layout packed in place */
    for (int64_t o = 0; o < ne1; o++) {
        const uint8_t *wrow = bs_weight_row(W, o, rowbuf);
        for (int64_t r = 0; r < n_rows; r++)
            t->vec_dot(ne0, &y[r * ne1 + o], wrow, act + (size_t)r * act_row);
    }
    free(rowbuf);
    free(buf);
}

int bs_get_rows(const bs_weight *W, const int32_t *ids, int64_t n, float *out) {
    const bs_type_traits *t = bs_type_get(W->type);
    if (!t || !t->to_float) return bs_error("get_rows: cannot dequantize type %s", bs_type_name(W->type));
    uint8_t *rowbuf = NULL;
    for (int64_t r = 0; r < n; r++) {
        if (ids[r] < 0 || ids[r] >= W->ne1) {
            free(rowbuf);
            return bs_error("get_rows: id %d out of range [0, %lld)", (int)ids[r], (long long)W->ne1);
        }
        if (W->packed && !rowbuf) rowbuf = bs_xmalloc(W->row_bytes);
        t->to_float(bs_weight_row(W, ids[r], rowbuf), out + r * W->ne0, W->ne0);
        if (W->rot) bs_rotate_rows(W->rot, out + r * W->ne0, out + r * W->ne0, 1, NULL);
    }
    free(rowbuf);
    return 0;
}

static void group_plain(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                        bs_pool *pool);

/* Products some of which are folded: the ones sharing a rotation (and carrying no LoRA terms,
 * which want x as given) take x rotated once; the rest go as they are. */
static void group_rotated(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                          bs_pool *pool) {
    bs_weight *base = bs_xmalloc((size_t)nw * sizeof *base);
    const bs_weight **sub = bs_xmalloc((size_t)nw * sizeof *sub);
    float **ys = bs_xmalloc((size_t)nw * sizeof *ys);
    bool *taken = bs_xcalloc((size_t)nw, sizeof *taken);
    for (int i = 0; i < nw; i++) {
        if (taken[i]) continue;
        const bs_rotation *r = W[i]->lora ? NULL : W[i]->rot;
        if (!r) {   /* plain, or folded with LoRA terms: bs_matmul does both right */
            taken[i] = true;
            bs_matmul(W[i], x, n_rows, y[i], pool);
            continue;
        }
        int n = 0;
        for (int k = i; k < nw; k++)
            if (!taken[k] && !W[k]->lora && W[k]->rot == r) {
                taken[k] = true;
                base[n] = *W[k];
                base[n].rot = NULL;
                sub[n] = &base[n];
                ys[n++] = y[k];
            }
        float *xr = bs_xmalloc((size_t)n_rows * (size_t)r->width * sizeof *xr);
        bs_rotate_rows(r, x, xr, n_rows, pool);
        group_plain(sub, n, xr, n_rows, ys, pool);
        free(xr);
    }
    free(taken), free(ys), free(sub), free(base);
}

void bs_matmul_group(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                     bs_pool *pool) {
    for (int i = 0; i < nw; i++)
        if (W[i]->rot) {
            group_rotated(W, nw, x, n_rows, y, pool);
            return;
        }
    group_plain(W, nw, x, n_rows, y, pool);
}

static void group_plain(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                        bs_pool *pool) {
    bool small[16], *done = nw <= 16 ? small : bs_xmalloc((size_t)nw * sizeof *done);
    bs_matmul_group_fast(W, nw, x, n_rows, y, pool, bs_cpu_level(), done);
    for (int i = 0; i < nw; i++)
        if (!done[i]) bs_matmul(W[i], x, n_rows, y[i], pool);
    if (done != small) free(done);
}
