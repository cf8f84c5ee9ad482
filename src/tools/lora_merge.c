/* lora_merge.c: W' = W + sum scale * B A, computed in float from the dequantized base and
 * re-quantized, with a report of what the quantization kept (see lora.h; antidoom.md §5.5: on
 * Q1_0 a delta below a block's scale d survives only as a change of d, larger ones as sign
 * flips). */
#include "model/hadamard.h"
#include "model/lora.h"
#include "formats/quant.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_CHUNK 64
#define GROUP 128

/* Add scale * B A to rows [r0, r0 + n) of w (in columns). */
static void add_delta(const bs_lora_tensor *t, float scale, int64_t r0, int64_t n, float *w) {
    for (int64_t o = 0; o < n; o++) {
        const float *b = t->b + (size_t)(r0 + o) * t->r;
        float *row = w + (size_t)o * t->in;
        for (int k = 0; k < t->r; k++) {
            const float s = scale * b[k], *a = t->a + (size_t)k * t->in;
            if (s != 0)
                for (int64_t i = 0; i < t->in; i++) row[i] += s * a[i];
        }
    }
}

/* Compare base (w0), intended (w1) and re-quantized (w2) values of n rows of `in`. */
static void account(const float *w0, const float *w1, const float *w2, int64_t n, int64_t in,
                    bs_lora_merge_stats *st) {
    const int64_t g = in % GROUP == 0 ? GROUP : in;
    for (int64_t j = 0; j < n * in; j += g) {
        double s0 = 0, s2 = 0;
        for (int64_t i = j; i < j + g; i++) {
            st->n_flipped += signbit(w0[i]) != signbit(w2[i]);
            s0 += fabs((double)w0[i]);
            s2 += fabs((double)w2[i]);
            const double d1 = (double)w1[i] - w0[i], d2 = (double)w2[i] - w0[i];
            st->dot += d1 * d2;
            st->norm_delta += d1 * d1;
            st->norm_got += d2 * d2;
        }
        st->scale_abs_change += fabs(s2 - s0) / (double)g;
        st->scale_sum += s0 / (double)g;
    }
    st->n_weights += (uint64_t)(n * in);
}

static void report(const char *name, const char *from, const char *to, const bs_lora_merge_stats *s) {
    double cos = s->norm_delta > 0 && s->norm_got > 0 ? s->dot / sqrt(s->norm_delta * s->norm_got) : 0;
    printf("%-28s %-8s -> %-8s signs flipped %.6f (%llu/%llu)  scale change %.10g  cos(kept, intended delta) %.4f\n",
           name, from, to, s->n_weights ? (double)s->n_flipped / (double)s->n_weights : 0.0,
           (unsigned long long)s->n_flipped, (unsigned long long)s->n_weights,
           s->scale_sum > 0 ? s->scale_abs_change / s->scale_sum : 0.0, cos);
}

/* Where the base is a Bonsai 2 file with the Hadamard fold (model/hadamard.h), the rotation a
 * delta to tensor x is stored with (its rows are stored rotated, so the delta rows are too), or
 * NULL for a plain tensor; -1 on a bad fold. */
static int delta_rotation(const gguf_file *f, bs_hadamard *h, const char *name, int64_t in, const bs_rotation **out) {
    *out = NULL;
    if (!h || !(bs_hadamard_folds(h, name, false) || bs_hadamard_folds(h, name, true))) return 0;
    uint32_t nv = 0, nk = 1, inner = 0;
    const bool regroup = bs_hadamard_regroups(h, name);
    if (regroup && (gguf_get_u32(f, "qwen35.ssm.time_step_rank", &nv) || gguf_get_u32(f, "qwen35.ssm.group_count", &nk) ||
                    gguf_get_u32(f, "qwen35.ssm.inner_size", &inner) || !nv || !nk || nv % nk || inner % nv))
        return bs_error("%s: the DeltaNet head counts are missing or do not divide", name);
    *out = bs_hadamard_rotation(h, in, regroup ? (int)(inner / nv) : 0, (int)nk, (int)(nv / nk), false);
    return *out ? 0 : -1;
}

/* One merged tensor: stream it to w in chunks of rows (a folded tensor's deltas rotated as its
 * rows are, rot: see delta_rotation). */
static int merge_tensor(const bs_lora_merge_params *p, const gguf_tensor *x, const bs_rotation *rot, int out_type,
                        gguf_writer *w, bs_lora_merge_stats *st) {
    const int64_t in = x->ne[0], rows = x->ne[1];
    const size_t rb_in = bs_row_size(x->type, in), rb_out = bs_row_size(out_type, in);
    const size_t chunk = (size_t)ROWS_PER_CHUNK * (size_t)in;
    float *w0 = bs_xmalloc(chunk * sizeof *w0), *w1 = bs_xmalloc(chunk * sizeof *w1), *w2 = bs_xmalloc(chunk * sizeof *w2);
    uint8_t *q = bs_xmalloc((size_t)ROWS_PER_CHUNK * rb_out);
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += ROWS_PER_CHUNK) {
        const int64_t n = BS_MIN((int64_t)ROWS_PER_CHUNK, rows - r0);
        for (int64_t r = 0; r < n; r++)
            bs_dequantize(x->type, (const uint8_t *)x->data + (size_t)(r0 + r) * rb_in, w0 + (size_t)r * in, in);
        if (rot) memset(w1, 0, (size_t)(n * in) * sizeof *w1);   /* the deltas alone, to rotate */
        else memcpy(w1, w0, (size_t)(n * in) * sizeof *w1);
        for (int k = 0; k < p->n_loras; k++) {
            const bs_lora_tensor *t = bs_lora_find(p->loras[k], x->name);
            if (t) add_delta(t, t->scale * p->scales[k], r0, n, w1);
        }
        if (rot) {
            bs_rotate_rows(rot, w1, w1, n, NULL);
            for (int64_t i = 0; i < n * in; i++) w1[i] += w0[i];
        }
        for (int64_t r = 0; r < n; r++) {
            bs_quantize(out_type, w1 + (size_t)r * in, q + (size_t)r * rb_out, in);
            bs_dequantize(out_type, q + (size_t)r * rb_out, w2 + (size_t)r * in, in);
        }
        account(w0, w1, w2, n, in, st);
        if (gguf_w_write(w, q, (size_t)n * rb_out)) rc = -1;
    }
    free(w0), free(w1), free(w2), free(q);
    return rc;
}

static bool targeted(const bs_lora_merge_params *p, const char *name) {
    for (int k = 0; k < p->n_loras; k++)
        if (bs_lora_find(p->loras[k], name)) return true;
    return false;
}

/* Every delta names a 2-D base tensor of its shape; the output type fits every merged row. */
static int check(const bs_lora_merge_params *p, const gguf_file *f) {
    for (int k = 0; k < p->n_loras; k++)
        for (int i = 0; i < p->loras[k]->n; i++) {
            const bs_lora_tensor *t = &p->loras[k]->t[i];
            const gguf_tensor *x = gguf_find_tensor(f, t->name);
            if (!x) return bs_error("%s: the base has no tensor %s", p->loras[k]->path, t->name);
            if (x->n_dims != 2 || x->ne[0] != t->in || x->ne[1] != t->out)
                return bs_error("%s: %s is %lld x %lld, the delta %lld x %lld", p->loras[k]->path, t->name,
                                (long long)x->ne[1], (long long)x->ne[0], (long long)t->out, (long long)t->in);
            const bs_type_traits *bt = bs_type_get(x->type);
            const int ot = p->type != BS_TYPE_INVALID ? p->type : x->type;
            const bs_type_traits *ott = bs_type_get(ot);
            if (!bt || !bt->to_float) return bs_error("%s: cannot dequantize %s", t->name, bs_type_name(x->type));
            if (!ott || !ott->from_float || !ott->to_float) return bs_error("cannot quantize to %s", bs_type_name(ot));
            if (bs_row_size(ot, t->in) == 0)
                return bs_error("%s: rows of %lld do not fit %s blocks", t->name, (long long)t->in, ott->name);
        }
    return 0;
}

int bs_lora_merge(const bs_lora_merge_params *p, bs_lora_merge_stats *total) {
    memset(total, 0, sizeof *total);
    gguf_file *f = gguf_open(p->base, 0);
    if (!f) return -1;
    if (check(p, f)) { gguf_close(f); return -1; }
    /* the base is mapped and the adapters are inputs too: writing over any of them would
     * destroy it (the output is renamed into place only at the end, but refuse anyway: the
     * user almost certainly mistyped) */
    const char **inputs = bs_xmalloc((size_t)(2 * p->n_loras + 1) * sizeof *inputs);
    inputs[0] = p->base;
    for (int k = 0; k < p->n_loras; k++) {   /* a PEFT adapter's config beside its tensors too */
        inputs[2 * k + 1] = p->loras[k]->path;
        inputs[2 * k + 2] = p->loras[k]->config;
    }
    int same = bs_check_not_input(p->out, inputs, 2 * p->n_loras + 1);
    free(inputs);
    if (same) { gguf_close(f); return -1; }
    gguf_writer *w = gguf_w_open(p->out);
    if (!w) { gguf_close(f); return -1; }
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_w_set_value(w, f->kv[i].key.s, &f->kv[i].val);
    int *types = bs_xmalloc((f->n_tensors ? f->n_tensors : 1) * sizeof *types);
    bs_hadamard *fold = NULL;
    int rc = bs_hadamard_read(f, false, &fold);
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *x = &f->tensors[i];
        types[i] = targeted(p, x->name) && p->type != BS_TYPE_INVALID ? p->type : x->type;
        if (gguf_w_add_tensor(w, x->name, types[i], x->n_dims, x->ne) < 0) rc = -1;
    }
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *x = &f->tensors[i];
        if (!targeted(p, x->name)) {
            uint64_t nrows = 1;
            for (int d = 1; d < x->n_dims; d++) nrows *= (uint64_t)x->ne[d];
            if (gguf_w_write(w, x->data, (size_t)bs_tensor_size(x->type, x->ne[0], nrows))) rc = -1;
            continue;
        }
        bs_lora_merge_stats st = {0};
        const bs_rotation *rot;
        if (delta_rotation(f, fold, x->name, x->ne[0], &rot) || merge_tensor(p, x, rot, types[i], w, &st)) {
            rc = -1;
            break;
        }
        if (!p->quiet) report(x->name, bs_type_name(x->type), bs_type_name(types[i]), &st);
        total->n_weights += st.n_weights;
        total->n_flipped += st.n_flipped;
        total->scale_abs_change += st.scale_abs_change;
        total->scale_sum += st.scale_sum;
        total->dot += st.dot;
        total->norm_delta += st.norm_delta;
        total->norm_got += st.norm_got;
    }
    free(types);
    bs_hadamard_free(fold);
    gguf_close(f);
    if (rc) { gguf_w_abort(w); return bs_error_prefix("merging into %s: ", p->out); }
    if (gguf_w_close(w)) return bs_error_prefix("%s: ", p->out);
    if (!p->quiet) report("total", "", "", total);
    return 0;
}
