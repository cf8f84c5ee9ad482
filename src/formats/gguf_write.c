/* gguf_write.c: the streaming GGUF writer (see gguf.h): metadata and tensor infos first, then
 * each tensor's bytes as they come, into a temporary file renamed over the target by
 * gguf_w_close (io/atomic_file.h), so a failed write never leaves a partial file. */
#include "formats/gguf.h"
#include "formats/gguf_internal.h"
#include "io/atomic_file.h"
#include "formats/quant.h"
#include "io/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct wtensor {
    char *name;
    int type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} wtensor;

struct gguf_writer {
    bs_aout out;                  /* the temporary, renamed over the path at close; the first error */
    gguf_kv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    bool header_written;
    uint32_t alignment;
    uint64_t cur, cur_done;       /* tensor being streamed, bytes of it written */
    uint64_t pos;                 /* bytes written to the file */
};

gguf_writer *gguf_w_open(const char *path) {
    gguf_writer *w = bs_xcalloc(1, sizeof *w);
    if (bs_aout_open(&w->out, path)) { free(w); return NULL; }
    return w;
}

static void value_copy(gguf_value *dst, const gguf_value *src);

static void array_copy(gguf_value *dst, const gguf_value *src) {
    dst->arr_type = src->arr_type;
    dst->n = src->n;
    if (src->arr_type == GGUF_TYPE_STRING) {
        gguf_str *d = bs_xcalloc((size_t)(src->n ? src->n : 1), sizeof *d);
        for (uint64_t i = 0; i < src->n; i++) {
            const gguf_str *s = &((const gguf_str *)src->arr)[i];
            d[i].len = s->len;
            d[i].s = bs_xmalloc((size_t)s->len + 1);
            memcpy(d[i].s, s->s, (size_t)s->len);
            d[i].s[s->len] = 0;
        }
        dst->arr = d;
    } else if (src->arr_type == GGUF_TYPE_ARRAY) {
        gguf_value *d = bs_xcalloc((size_t)(src->n ? src->n : 1), sizeof *d);
        for (uint64_t i = 0; i < src->n; i++) value_copy(&d[i], &((const gguf_value *)src->arr)[i]);
        dst->arr = d;
    } else {
        size_t sz = (size_t)src->n * gguf_scalar_size(src->arr_type);
        dst->arr = bs_xmalloc(sz ? sz : 1);
        if (sz) memcpy(dst->arr, src->arr, sz);
    }
}

static void value_copy(gguf_value *dst, const gguf_value *src) {
    *dst = *src;
    if (src->type == GGUF_TYPE_STRING) {
        dst->str.s = bs_xmalloc((size_t)src->str.len + 1);
        memcpy(dst->str.s, src->str.s, (size_t)src->str.len);
        dst->str.s[src->str.len] = 0;
    } else if (src->type == GGUF_TYPE_ARRAY) {
        array_copy(dst, src);
    }
}

static bool valid_value(const gguf_value *v, int depth) {
    if ((unsigned)v->type >= GGUF_TYPE_COUNT) return false;
    if (v->type != GGUF_TYPE_ARRAY) return true;
    if ((unsigned)v->arr_type >= GGUF_TYPE_COUNT || depth >= GGUF_MAX_DEPTH) return false;
    if (v->n && !v->arr) return false;
    if (v->arr_type == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->n; i++)
            if (!valid_value(&((const gguf_value *)v->arr)[i], depth + 1)) return false;
    return true;
}

static int64_t w_find_kv(const gguf_writer *w, const char *key) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key.s, key) == 0) return (int64_t)i;
    return -1;
}

void gguf_w_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    if (w->header_written) { bs_aout_fail(&w->out, "metadata '%s' set after tensor data was written", key); return; }
    if (!key[0]) { bs_aout_fail(&w->out, "empty metadata key"); return; }
    if (!valid_value(v, 0)) { bs_aout_fail(&w->out, "metadata '%s': invalid value", key); return; }
    int64_t i = w_find_kv(w, key);
    gguf_kv *kv;
    if (i >= 0) {
        kv = &w->kv[i];
        gguf_value_free(&kv->val);
    } else {
        if (w->n_kv == w->cap_kv) {
            w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 32;
            w->kv = bs_xrealloc(w->kv, (size_t)w->cap_kv * sizeof *w->kv);
        }
        kv = &w->kv[w->n_kv++];
        kv->key.len = strlen(key);
        kv->key.s = bs_xstrdup(key);
    }
    value_copy(&kv->val, v);
}

void gguf_w_remove(gguf_writer *w, const char *key) {
    if (w->header_written) { bs_aout_fail(&w->out, "metadata '%s' removed after tensor data was written", key); return; }
    int64_t i = w_find_kv(w, key);
    if (i < 0) return;
    free(w->kv[i].key.s);
    gguf_value_free(&w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - (uint64_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
}

static void set_scalar(gguf_writer *w, const char *key, enum gguf_type t, uint64_t u, int64_t s,
                       double d, bool b) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = t;
    if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) v.f64 = d;
    else if (t == GGUF_TYPE_BOOL) v.b = b;
    else if (gguf_is_signed_int(t)) v.i64 = s;
    else v.u64 = u;
    gguf_w_set_value(w, key, &v);
}

void gguf_w_set_u32(gguf_writer *w, const char *k, uint32_t v) { set_scalar(w, k, GGUF_TYPE_UINT32, v, 0, 0, 0); }
void gguf_w_set_i32(gguf_writer *w, const char *k, int32_t v) { set_scalar(w, k, GGUF_TYPE_INT32, 0, v, 0, 0); }
void gguf_w_set_u64(gguf_writer *w, const char *k, uint64_t v) { set_scalar(w, k, GGUF_TYPE_UINT64, v, 0, 0, 0); }
void gguf_w_set_f32(gguf_writer *w, const char *k, float v) { set_scalar(w, k, GGUF_TYPE_FLOAT32, 0, 0, v, 0); }
void gguf_w_set_bool(gguf_writer *w, const char *k, bool v) { set_scalar(w, k, GGUF_TYPE_BOOL, 0, 0, 0, v); }

void gguf_w_set_str(gguf_writer *w, const char *key, const char *s) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_STRING;
    v.str.len = strlen(s);
    v.str.s = (char *)s;          /* value_copy duplicates it */
    gguf_w_set_value(w, key, &v);
}

static void set_packed(gguf_writer *w, const char *key, enum gguf_type at, const void *a,
                       uint64_t n) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_ARRAY;
    v.arr_type = at;
    v.n = n;
    v.arr = (void *)a;
    gguf_w_set_value(w, key, &v);
}

void gguf_w_set_arr_i32(gguf_writer *w, const char *key, const int32_t *a, uint64_t n) {
    set_packed(w, key, GGUF_TYPE_INT32, a, n);
}
void gguf_w_set_arr_f32(gguf_writer *w, const char *key, const float *a, uint64_t n) {
    set_packed(w, key, GGUF_TYPE_FLOAT32, a, n);
}

void gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *a, uint64_t n) {
    gguf_str *tmp = bs_xcalloc((size_t)(n ? n : 1), sizeof *tmp);
    for (uint64_t i = 0; i < n; i++) { tmp[i].len = strlen(a[i]); tmp[i].s = (char *)a[i]; }
    set_packed(w, key, GGUF_TYPE_STRING, tmp, n);
    free(tmp);
}

int gguf_w_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne) {
    const bs_type_traits *tt = bs_type_get(type);
    if (w->header_written) { bs_aout_fail(&w->out, "tensor '%s' declared after tensor data was written", name); return bs_error("%s", w->out.err); }
    if (!tt) return bs_error("tensor '%s': unknown type %d", name, type);
    if (!name[0]) return bs_error("empty tensor name");
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return bs_error("tensor '%s': %d dimensions (must be 1..%d)", name, n_dims, GGUF_MAX_DIMS);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return bs_error("duplicate tensor name '%s'", name);
    wtensor t = {.type = type, .n_dims = n_dims};
    uint64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1) return bs_error("tensor '%s': dimension %d is %lld", name, d, (long long)t.ne[d]);
        if (d > 0 && bs_mul_overflow(rows, (uint64_t)t.ne[d], &rows))
            return bs_error("tensor '%s': element count overflows", name);
    }
    t.nbytes = bs_tensor_size(type, t.ne[0], rows);
    if (t.nbytes == UINT64_MAX)
        return bs_error("tensor '%s': shape does not suit type %s (row %lld, block %lld)", name,
                        tt->name, (long long)t.ne[0], (long long)tt->blck);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = bs_xrealloc(w->t, (size_t)w->cap_t * sizeof *w->t);
    }
    t.name = bs_xstrdup(name);
    w->t[w->n_t] = t;
    return (int)w->n_t++;
}

static void w_bytes(gguf_writer *w, const void *p, size_t n) {
    if (w->out.err[0] || n == 0) return;
    if (fwrite(p, 1, n, w->out.fp) != n) bs_aout_fail(&w->out, "write failed: %s", strerror(errno));
    w->pos += n;
}
static void w_u32(gguf_writer *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_u64(gguf_writer *w, uint64_t v) { w_bytes(w, &v, 8); }
static void w_str(gguf_writer *w, const char *s, uint64_t len) { w_u64(w, len); w_bytes(w, s, (size_t)len); }

static void w_pad(gguf_writer *w) {
    static const uint8_t zeros[256];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad) {
        size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        w_bytes(w, zeros, k);
        pad -= k;
    }
}

static void w_value(gguf_writer *w, const gguf_value *v);

static void w_array_body(gguf_writer *w, const gguf_value *v) {
    w_u32(w, (uint32_t)v->arr_type);
    w_u64(w, v->n);
    if (v->arr_type == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < v->n; i++) {
            const gguf_str *s = &((const gguf_str *)v->arr)[i];
            w_str(w, s->s, s->len);
        }
    else if (v->arr_type == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < v->n; i++) w_value(w, &((const gguf_value *)v->arr)[i]);
    else
        w_bytes(w, v->arr, (size_t)v->n * gguf_scalar_size(v->arr_type));
}

/* The value body (without its type tag, except that nested arrays carry their own header). */
static void w_value(gguf_writer *w, const gguf_value *v) {
    switch (v->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64: {
        uint64_t u = v->u64;          /* the low bytes of the two's complement are the value */
        w_bytes(w, &u, gguf_scalar_size(v->type));
        break;
    }
    case GGUF_TYPE_BOOL: { uint8_t b = v->b; w_bytes(w, &b, 1); break; }
    case GGUF_TYPE_FLOAT32: { float x = (float)v->f64; w_bytes(w, &x, 4); break; }
    case GGUF_TYPE_FLOAT64: w_bytes(w, &v->f64, 8); break;
    case GGUF_TYPE_STRING: w_str(w, v->str.s, v->str.len); break;
    case GGUF_TYPE_ARRAY: w_array_body(w, v); break;
    default: break;
    }
}

static void w_header(gguf_writer *w) {
    w->header_written = true;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = w_find_kv(w, "general.alignment");
    if (ai >= 0) {
        const gguf_value *v = &w->kv[ai].val;
        int64_t a;
        bool huge;
        if (gguf_int_value(v, &a, &huge) || huge || a <= 0 || a > (1 << 30) || (a & (a - 1))) {
            bs_aout_fail(&w->out, "general.alignment must be a power of two");
            return;
        }
        w->alignment = (uint32_t)a;
    }
    w_u32(w, GGUF_MAGIC);
    w_u32(w, 3);
    w_u64(w, w->n_t);
    w_u64(w, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        w_str(w, w->kv[i].key.s, w->kv[i].key.len);
        w_u32(w, (uint32_t)w->kv[i].val.type);
        w_value(w, &w->kv[i].val);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        t->offset = off;
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
        w_str(w, t->name, strlen(t->name));
        w_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) w_u64(w, (uint64_t)t->ne[d]);
        w_u32(w, (uint32_t)bs_type_get(t->type)->ggml_id);
        w_u64(w, t->offset);
    }
    if (w->n_t) w_pad(w);   /* no data section, no padding (alignment may be huge) */
}

int gguf_w_write(gguf_writer *w, const void *data, size_t n) {
    if (!w->header_written) w_header(w);
    const uint8_t *p = data;
    while (n && !w->out.err[0]) {
        if (w->cur >= w->n_t) {
            bs_aout_fail(&w->out, "%zu bytes written past the last tensor", n);
            break;
        }
        wtensor *t = &w->t[w->cur];
        uint64_t left = t->nbytes - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        w_bytes(w, p, k);
        p += k, n -= k, w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            w_pad(w);
            w->cur++;
            w->cur_done = 0;
        }
    }
    if (w->out.err[0]) return bs_error("%s: %s", w->out.path, w->out.err);
    return 0;
}

static void writer_free(gguf_writer *w) {
    for (uint64_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key.s); gguf_value_free(&w->kv[i].val); }
    free(w->kv);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

int gguf_w_close(gguf_writer *w) {
    if (!w->header_written) w_header(w);
    if (!w->out.err[0] && w->cur < w->n_t)
        bs_aout_fail(&w->out, "tensor '%s' got %llu of its %llu bytes (%llu tensors declared, %llu complete)",
               w->t[w->cur].name, (unsigned long long)w->cur_done,
               (unsigned long long)w->t[w->cur].nbytes, (unsigned long long)w->n_t,
               (unsigned long long)w->cur);
    int rc = bs_aout_close(&w->out);   /* an error keeps any previous file under this name */
    writer_free(w);
    return rc;
}

void gguf_w_abort(gguf_writer *w) {
    if (!w) return;
    bs_aout_abort(&w->out);
    writer_free(w);
}
