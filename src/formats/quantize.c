/* quantize.c: see quantize.h. */
#include "formats/quantize.h"
#include "formats/gguf.h"
#include "io/progress.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK_BYTES (32u << 20)   /* output bytes converted per batch of rows */

uint32_t bs_ftype_of(int type) {
    switch (type) {
    case BS_F32: return 0;
    case BS_F16: return 1;
    case BS_Q4_0: return 2;
    case BS_Q4_1: return 3;
    case BS_Q8_0: return 7;
    case BS_Q6_K: return 18;
    case BS_BF16: return 32;
    case BS_TQ1_0: return 36;
    case BS_TQ2_0: return 37;
    case BS_Q1_0: return 40;
    default: return 41;            /* the Q2_0 family, as the fixtures' ternary files say; PQ2_0 and
                                      PTQ1_0 too (no ftype of their own is known) */
    }
}

void bs_release_mapped(const void *p, uint64_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, lo = (a + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    uintptr_t hi = (a + (uintptr_t)n) & ~(uintptr_t)(pg - 1);
    if (pg > 0 && hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* --- parameters ------------------------------------------------------------------------------ */

void bs_quantize_params_init(bs_quantize_params *p) {
    memset(p, 0, sizeof *p);
    p->type = BS_TYPE_INVALID;
    p->output_type = p->embd_type = -1;
}

int bs_quantize_add_override(bs_quantize_params *p, const char *spec) {
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) return bs_error("--tensor-type '%s': expected PATTERN=TYPE", spec);
    if (p->n_overrides == BS_QUANTIZE_MAX_OVERRIDES) return bs_error("too many --tensor-type options");
    if ((size_t)(eq - spec) >= sizeof p->overrides[0].pattern) return bs_error("--tensor-type pattern too long");
    int type = bs_type_from_name(eq + 1);
    const bs_type_traits *tr = bs_type_get(type);
    if (!tr || !tr->from_float) return bs_error("--tensor-type '%s': unknown or unwritable type '%s'", spec, eq + 1);
    bs_quantize_override *o = &p->overrides[p->n_overrides];
    memcpy(o->pattern, spec, (size_t)(eq - spec));
    o->pattern[eq - spec] = 0;
    int rc = regcomp(&o->re, o->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[128];
        regerror(rc, &o->re, msg, sizeof msg);
        return bs_error("--tensor-type '%s': bad regular expression: %s", spec, msg);
    }
    o->type = type;
    p->n_overrides++;
    return 0;
}

void bs_quantize_params_free(bs_quantize_params *p) {
    for (int i = 0; i < p->n_overrides; i++) regfree(&p->overrides[i].re);
    p->n_overrides = 0;
}

/* --- row conversion ------------------------------------------------------------------------- */

typedef struct conv_job {
    const bs_type_traits *st, *dt;
    const uint8_t *src;
    uint8_t *dst;
    size_t src_row, dst_row;
    int64_t ne0, n_rows;
    float **tmp;                  /* one row buffer per thread */
} conv_job;

static void conv_run(void *ctx, int ith, int nth) {
    conv_job *j = ctx;
    int64_t lo, hi;
    bs_pool_split(j->n_rows, 1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const uint8_t *s = j->src + (size_t)r * j->src_row;
        uint8_t *d = j->dst + (size_t)r * j->dst_row;
        if (j->st->type == BS_F32) {
            j->dt->from_float((const float *)(const void *)s, d, j->ne0);
        } else {
            j->st->to_float(s, j->tmp[ith], j->ne0);
            j->dt->from_float(j->tmp[ith], d, j->ne0);
        }
    }
}

int bs_convert_rows(bs_pool *pool, int src_type, const void *src, int dst_type, void *dst, int64_t ne0,
                    int64_t n_rows) {
    const bs_type_traits *st = bs_type_get(src_type), *dt = bs_type_get(dst_type);
    if (!st || !st->to_float) return bs_error("cannot read values of type %s", bs_type_name(src_type));
    if (!dt || !dt->from_float) return bs_error("cannot write values of type %s", bs_type_name(dst_type));
    size_t sr = bs_row_size(src_type, ne0), dr = bs_row_size(dst_type, ne0);
    if (!sr || !dr) return bs_error("rows of %lld values do not fit %s -> %s", (long long)ne0, st->name, dt->name);
    int nth = bs_pool_size(pool);
    float **tmp = bs_xcalloc((size_t)nth, sizeof *tmp);
    for (int i = 0; i < nth; i++) tmp[i] = bs_xmalloc((size_t)ne0 * sizeof(float));
    conv_job j = {st, dt, src, dst, sr, dr, ne0, n_rows, tmp};
    bs_pool_run(pool, conv_run, &j);
    for (int i = 0; i < nth; i++) free(tmp[i]);
    free(tmp);
    return 0;
}

/* --- per-tensor policy ---------------------------------------------------------------------- */

static int ggml_n_dims(const gguf_tensor *t) {
    for (int d = GGUF_MAX_DIMS - 1; d > 0; d--)
        if (t->ne[d] != 1) return d + 1;
    return 1;
}

static bool quantizable(const gguf_tensor *t) {
    return bs_ends_with(t->name, "weight") && ggml_n_dims(t) >= 2 && !strstr(t->name, "_norm.weight") &&
           !strstr(t->name, "ssm_conv1d.weight");
}

static bool is_float(int type) { return type == BS_F32 || type == BS_F16 || type == BS_BF16; }

int bs_quantize_fit_type(int want, const char *name, int64_t ne0, int src_type) {
    if (bs_row_size(want, ne0)) return want;
    int alt = want == BS_Q6_K ? BS_Q8_0 : BS_Q4_0;
    if (!bs_row_size(alt, ne0)) alt = is_float(src_type) ? src_type : BS_F32;
    fprintf(stderr, "note: %s: rows of %lld are not a multiple of the %s block (%lld); using %s\n", name,
            (long long)ne0, bs_type_name(want), (long long)bs_type_get(want)->blck, bs_type_name(alt));
    return alt;
}

static int target_type(const gguf_tensor *t, const bs_quantize_params *p) {
    if (!quantizable(t)) return t->type;
    int type = p->type;
    if (!strcmp(t->name, "token_embd.weight") && p->embd_type >= 0) type = p->embd_type;
    if (!strcmp(t->name, "output.weight") && p->output_type >= 0) type = p->output_type;
    for (int i = 0; i < p->n_overrides; i++)
        if (regexec(&p->overrides[i].re, t->name, 0, NULL, 0) == 0) type = p->overrides[i].type;
    return bs_quantize_fit_type(type, t->name, t->ne[0], t->type);
}

/* --- the file -------------------------------------------------------------------------------- */

static int copy_metadata(gguf_writer *w, const gguf_file *in, const bs_quantize_params *p, bool any_quant) {
    bool has_qv = false;
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const gguf_kv *kv = &in->kv[i];
        if (!strcmp(kv->key.s, "general.file_type")) {
            gguf_w_set_u32(w, "general.file_type", bs_ftype_of(p->type));
            continue;
        }
        has_qv |= !strcmp(kv->key.s, "general.quantization_version");
        gguf_w_set_value(w, kv->key.s, &kv->val);
    }
    if (any_quant && !has_qv) gguf_w_set_u32(w, "general.quantization_version", 2);
    if (!gguf_find_kv(in, "general.file_type")) gguf_w_set_u32(w, "general.file_type", bs_ftype_of(p->type));
    return 0;
}

static uint64_t n_rows_of(const gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
    return n;
}

/* mapped: the source is a file mapping whose pages can be dropped once read (RSS stays at the
 * chunk size, not the biggest tensor). */
static int write_tensor(gguf_writer *w, bs_pool *pool, const gguf_tensor *t, int dst_type, bool mapped,
                        bs_progress *pr) {
    const uint64_t rows = n_rows_of(t);
    if (dst_type == t->type) {
        for (uint64_t off = 0; off < t->nbytes; off += CHUNK_BYTES) {
            size_t n = (size_t)BS_MIN((uint64_t)CHUNK_BYTES, t->nbytes - off);
            if (gguf_w_write(w, (const uint8_t *)t->data + off, n)) return -1;
            if (mapped) bs_release_mapped((const uint8_t *)t->data + off, n);
            bs_progress_add(pr, n);
        }
        return 0;
    }
    const size_t sr = bs_row_size(t->type, t->ne[0]), dr = bs_row_size(dst_type, t->ne[0]);
    const uint64_t per = BS_MAX(1, CHUNK_BYTES / dr);
    uint8_t *buf = bs_xmalloc((size_t)(BS_MIN(per, rows) * dr));
    int rc = 0;
    for (uint64_t r0 = 0; r0 < rows && !rc; r0 += per) {
        uint64_t nr = BS_MIN(per, rows - r0);
        rc = bs_convert_rows(pool, t->type, (const uint8_t *)t->data + r0 * sr, dst_type, buf, t->ne[0], (int64_t)nr);
        if (!rc) rc = gguf_w_write(w, buf, (size_t)(nr * dr));
        if (mapped) bs_release_mapped((const uint8_t *)t->data + r0 * sr, nr * sr);
        bs_progress_add(pr, nr * sr);
    }
    free(buf);
    return rc;
}

static int check_tensor(const gguf_tensor *t, int dst, const bs_quantize_params *p) {
    const bs_type_traits *st = bs_type_get(t->type), *dt = bs_type_get(dst);
    if (dst == t->type) return 0;
    if (st->is_quantized && !p->allow_requantize)
        return bs_error("%s is already %s: converting it to %s needs --allow-requantize", t->name, st->name, dt->name);
    if (!st->to_float) return bs_error("%s: cannot convert values of type %s", t->name, st->name);
    if (!dt->from_float) return bs_error("%s: cannot write type %s", t->name, dt->name);
    return 0;
}

static int run(gguf_file *in, gguf_writer *w, const bs_quantize_params *p, bs_pool *pool) {
    int *types = bs_xmalloc((size_t)BS_MAX(in->n_tensors, 1) * sizeof *types);
    bool any_quant = false;
    int rc = 0;
    uint64_t total = 0, in_bytes = 0, out_bytes = 0;
    for (uint64_t i = 0; i < in->n_tensors && !rc; i++) {
        const gguf_tensor *t = &in->tensors[i];
        types[i] = target_type(t, p);
        rc = check_tensor(t, types[i], p);
        any_quant |= bs_type_get(types[i])->is_quantized;
        total += t->nbytes;
    }
    if (!rc) rc = copy_metadata(w, in, p, any_quant);
    for (uint64_t i = 0; i < in->n_tensors && !rc; i++) {
        const gguf_tensor *t = &in->tensors[i];
        if (gguf_w_add_tensor(w, t->name, types[i], t->n_dims, t->ne) < 0) rc = -1;
    }
    bs_progress pr;
    bs_progress_begin(&pr, "quantize", total);
    for (uint64_t i = 0; i < in->n_tensors && !rc; i++) {
        const gguf_tensor *t = &in->tensors[i];
        rc = write_tensor(w, pool, t, types[i], in->mmapped, &pr);
        if (rc) bs_error_prefix("%s: ", t->name);
        if (in->mmapped) bs_release_mapped(t->data, t->nbytes);
        in_bytes += t->nbytes;
        out_bytes += bs_tensor_size(types[i], t->ne[0], n_rows_of(t));
    }
    if (!rc) {
        char extra[96], a[24], b[24];
        snprintf(extra, sizeof extra, "%llu tensors, %s -> %s", (unsigned long long)in->n_tensors,
                 bs_fmt_bytes(in_bytes, a, sizeof a), bs_fmt_bytes(out_bytes, b, sizeof b));
        bs_progress_end(&pr, extra);
    }
    free(types);
    return rc;
}

int bs_quantize_file(const char *in_path, const char *out_path, const bs_quantize_params *p) {
    const bs_type_traits *tr = bs_type_get(p->type);
    if (!tr || !tr->from_float) return bs_error("cannot quantize to type %s", bs_type_name(p->type));
    const char *inputs[] = {in_path};
    if (bs_check_not_input(out_path, inputs, 1)) return -1;
    gguf_file *in = gguf_open(in_path, 0);
    if (!in) return -1;
    bs_pool *pool = bs_pool_new(p->n_threads > 0 ? p->n_threads : bs_cpu_count());
    gguf_writer *w = pool ? gguf_w_open(out_path) : NULL;
    int rc = w ? run(in, w, p, pool) : -1;
    if (w) {
        if (rc) gguf_w_abort(w);
        else rc = gguf_w_close(w);
    }
    bs_pool_free(pool);
    gguf_close(in);
    return rc;
}
