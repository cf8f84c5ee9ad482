/* gguf.c: the GGUF v2/v3 reader (see gguf.h; the writer is gguf_write.c).
 *
 * The reader parses from one contiguous image of the file (mmap'd, read into memory, or a
 * caller's buffer) through a bounds-checked cursor. Every count and length read from the file is
 * compared with the bytes that remain before anything is allocated, so the memory a hostile file
 * can make us allocate is a small multiple of its size. Metadata strings are copied out, so a
 * GGUF_OPEN_META_ONLY file keeps no mapping at all.
 *
 * Host byte order is assumed little-endian (as GGUF is); scalars are read with memcpy. */
#include "formats/gguf.h"
#include "formats/gguf_internal.h"
#include "io/file_map.h"
#include "formats/quant.h"
#include "io/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>


/* Private state around the public struct: hash indexes for keys and tensor names. */
typedef struct gguf_impl {
    gguf_file pub;
    uint32_t *kv_idx;             /* open addressing: index+1, 0 = empty */
    uint32_t *t_idx;
    uint64_t kv_cap, t_cap;       /* powers of two */
    size_t map_len;               /* length of the mapping when mmapped */
} gguf_impl;

static const char *type_names[GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *gguf_type_name(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT ? type_names[t] : "invalid";
}

size_t gguf_scalar_size(enum gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Smallest number of file bytes one array element of type t can occupy. */
static uint64_t min_elem_size(enum gguf_type t) {
    if (t == GGUF_TYPE_STRING) return 8;
    if (t == GGUF_TYPE_ARRAY) return 12;
    return gguf_scalar_size(t);
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* --- freeing ----------------------------------------------------------------------------- */

static void array_free(enum gguf_type t, uint64_t n, void *arr) {
    if (!arr) return;
    if (t == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < n; i++) free(((gguf_str *)arr)[i].s);
    else if (t == GGUF_TYPE_ARRAY)
        for (uint64_t i = 0; i < n; i++) gguf_value_free(&((gguf_value *)arr)[i]);
    free(arr);
}

void gguf_value_free(gguf_value *v) {
    if (v->type == GGUF_TYPE_STRING) free(v->str.s);
    else if (v->type == GGUF_TYPE_ARRAY) array_free(v->arr_type, v->n, v->arr);
    memset(v, 0, sizeof *v);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_impl *im = (gguf_impl *)f;
    for (uint64_t i = 0; i < f->n_kv; i++) { free(f->kv[i].key.s); gguf_value_free(&f->kv[i].val); }
    free(f->kv);
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->base) {
        if (f->mmapped) munmap(f->base, im->map_len);
        else free(f->base);
    }
    free(im->kv_idx);
    free(im->t_idx);
    free(f->path);
    free(im);
}

/* --- cursor ------------------------------------------------------------------------------ */
typedef struct cursor {
    const uint8_t *p;
    uint64_t pos, size;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return bs_error("truncated: %s needs %llu bytes at offset %llu, file is %llu bytes", what,
                        (unsigned long long)n, (unsigned long long)c->pos,
                        (unsigned long long)c->size);
    return 0;
}

static int rd(cursor *c, void *out, size_t n, const char *what) {
    if (need(c, n, what)) return -1;
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > c->size - c->pos)
        return bs_error("%s: string length %llu exceeds the %llu bytes left in the file", what,
                        (unsigned long long)len, (unsigned long long)(c->size - c->pos));
    s->len = len;
    s->s = bs_xmalloc((size_t)len + 1);
    memcpy(s->s, c->p + c->pos, (size_t)len);
    s->s[len] = 0;
    c->pos += len;
    return 0;
}

static int rd_value(cursor *c, enum gguf_type t, gguf_value *v, int depth, const char *what);

static int rd_array(cursor *c, gguf_value *v, int depth, const char *what) {
    uint32_t at;
    uint64_t n;
    if (rd_u32(c, &at, what) || rd_u64(c, &n, what)) return -1;
    if (at >= GGUF_TYPE_COUNT) return bs_error("%s: invalid array element type %u", what, at);
    if (at == GGUF_TYPE_ARRAY && depth >= GGUF_MAX_DEPTH)
        return bs_error("%s: arrays nested deeper than %d", what, GGUF_MAX_DEPTH);
    uint64_t min = min_elem_size((enum gguf_type)at), total;
    if (bs_mul_overflow(n, min, &total) || total > c->size - c->pos)
        return bs_error("%s: array of %llu %s elements does not fit in the %llu bytes left", what,
                        (unsigned long long)n, gguf_type_name((enum gguf_type)at),
                        (unsigned long long)(c->size - c->pos));
    v->arr_type = (enum gguf_type)at;
    v->n = 0;
    v->arr = NULL;
    if (at != GGUF_TYPE_STRING && at != GGUF_TYPE_ARRAY) {
        v->arr = bs_xmalloc((size_t)total);
        v->n = n;
        if (rd(c, v->arr, (size_t)total, what)) return -1;
        if (at == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (((uint8_t *)v->arr)[i] > 1)
                    return bs_error("%s: invalid bool value %u in array", what,
                                    ((uint8_t *)v->arr)[i]);
        return 0;
    }
    size_t esz = at == GGUF_TYPE_STRING ? sizeof(gguf_str) : sizeof(gguf_value);
    v->arr = bs_xcalloc((size_t)(n ? n : 1), esz);
    for (uint64_t i = 0; i < n; i++) {
        v->n = i + 1;   /* so a failure frees what was read so far */
        int r = at == GGUF_TYPE_STRING
                    ? rd_str(c, &((gguf_str *)v->arr)[i], what)
                    : rd_value(c, GGUF_TYPE_ARRAY, &((gguf_value *)v->arr)[i], depth + 1, what);
        if (r) return -1;
    }
    v->n = n;
    return 0;
}

/* Read a value of type t (already read from the file) into v. On failure v is left freeable. */
static int rd_value(cursor *c, enum gguf_type t, gguf_value *v, int depth, const char *what) {
    memset(v, 0, sizeof *v);
    v->type = t;
    uint8_t b[8];
    switch (t) {
    case GGUF_TYPE_UINT8: if (rd(c, b, 1, what)) return -1; v->u64 = b[0]; return 0;
    case GGUF_TYPE_INT8: if (rd(c, b, 1, what)) return -1; v->i64 = (int8_t)b[0]; return 0;
    case GGUF_TYPE_BOOL:
        if (rd(c, b, 1, what)) return -1;
        if (b[0] > 1) return bs_error("%s: invalid bool value %u", what, b[0]);
        v->b = b[0]; return 0;
    case GGUF_TYPE_UINT16: { uint16_t x; if (rd(c, &x, 2, what)) return -1; v->u64 = x; return 0; }
    case GGUF_TYPE_INT16: { int16_t x; if (rd(c, &x, 2, what)) return -1; v->i64 = x; return 0; }
    case GGUF_TYPE_UINT32: { uint32_t x; if (rd(c, &x, 4, what)) return -1; v->u64 = x; return 0; }
    case GGUF_TYPE_INT32: { int32_t x; if (rd(c, &x, 4, what)) return -1; v->i64 = x; return 0; }
    case GGUF_TYPE_FLOAT32: { float x; if (rd(c, &x, 4, what)) return -1; v->f64 = x; return 0; }
    case GGUF_TYPE_UINT64: return rd(c, &v->u64, 8, what);
    case GGUF_TYPE_INT64: return rd(c, &v->i64, 8, what);
    case GGUF_TYPE_FLOAT64: return rd(c, &v->f64, 8, what);
    case GGUF_TYPE_STRING: return rd_str(c, &v->str, what);
    case GGUF_TYPE_ARRAY: return rd_array(c, v, depth, what);
    default: return bs_error("%s: invalid value type %d", what, (int)t);
    }
}

/* --- hash index -------------------------------------------------------------------------- */
/* Insert name (index i) into an open-addressing table; returns the index of an existing entry
 * with the same name, or -1 if inserted. */
static int64_t idx_insert(uint32_t *tab, uint64_t cap, const char *name, size_t len,
                          uint32_t i, const char *(*name_of)(const void *, uint32_t, size_t *),
                          const void *ctx) {
    uint64_t h = hash_bytes(name, len) & (cap - 1);
    while (tab[h]) {
        size_t ol;
        const char *o = name_of(ctx, tab[h] - 1, &ol);
        if (ol == len && memcmp(o, name, len) == 0) return tab[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    tab[h] = i + 1;
    return -1;
}

static const char *kv_name(const void *ctx, uint32_t i, size_t *len) {
    const gguf_kv *kv = &((const gguf_file *)ctx)->kv[i];
    *len = (size_t)kv->key.len;
    return kv->key.s;
}

static const char *tensor_name(const void *ctx, uint32_t i, size_t *len) {
    const char *s = ((const gguf_file *)ctx)->tensors[i].name;
    *len = strlen(s);
    return s;
}

static uint64_t table_cap(uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

static int64_t idx_find(const uint32_t *tab, uint64_t cap, const char *name,
                        const char *(*name_of)(const void *, uint32_t, size_t *),
                        const void *ctx) {
    if (!tab) return -1;
    size_t len = strlen(name);
    uint64_t h = hash_bytes(name, len) & (cap - 1);
    while (tab[h]) {
        size_t ol;
        const char *o = name_of(ctx, tab[h] - 1, &ol);
        if (ol == len && memcmp(o, name, len) == 0) return tab[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

/* --- header parsing ---------------------------------------------------------------------- */
static int parse_kvs(gguf_impl *im, cursor *c, uint64_t n) {
    gguf_file *f = &im->pub;
    /* Each pair takes at least 8 (key length) + 4 (type) + 1 (smallest value) bytes. */
    if (n > (c->size - c->pos) / 13)
        return bs_error("metadata count %llu is impossible for the %llu bytes left in the file",
                        (unsigned long long)n, (unsigned long long)(c->size - c->pos));
    f->kv = bs_xcalloc((size_t)(n ? n : 1), sizeof(gguf_kv));
    im->kv_cap = table_cap(n);
    im->kv_idx = bs_xcalloc((size_t)im->kv_cap, sizeof(uint32_t));
    f->n_kv = 0;
    for (uint64_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "metadata key %llu", (unsigned long long)i);
        gguf_kv *kv = &f->kv[i];
        f->n_kv = i + 1;
        if (rd_str(c, &kv->key, what)) return -1;
        if (kv->key.len == 0) return bs_error("%s: empty key", what);
        if (strlen(kv->key.s) != kv->key.len) return bs_error("%s: key contains a NUL byte", what);
        if (idx_insert(im->kv_idx, im->kv_cap, kv->key.s, (size_t)kv->key.len, (uint32_t)i,
                       kv_name, f) >= 0)
            return bs_error("duplicate metadata key '%s'", kv->key.s);
        uint32_t t;
        snprintf(what, sizeof what, "metadata '%.40s'", kv->key.s);
        if (rd_u32(c, &t, what)) return -1;
        if (t >= GGUF_TYPE_COUNT) return bs_error("%s: invalid value type %u", what, t);
        if (rd_value(c, (enum gguf_type)t, &kv->val, 0, what)) return -1;
    }
    return 0;
}

static int parse_alignment(gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    int64_t a;
    if (gguf_get_i64(f, "general.alignment", &a)) return -1;
    if (a <= 0 || a > (1 << 30) || (a & (a - 1)))
        return bs_error("general.alignment %lld is not a power of two in [1, 2^30]", (long long)a);
    f->alignment = (uint32_t)a;
    return 0;
}

static int parse_tensor_info(cursor *c, gguf_tensor *t, uint64_t i) {
    char what[96];
    gguf_str name = {0};
    snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)i);
    if (rd_str(c, &name, what)) return -1;
    t->name = name.s;
    if (name.len == 0) return bs_error("%s: empty tensor name", what);
    if (strlen(name.s) != name.len) return bs_error("%s: tensor name contains a NUL byte", what);
    snprintf(what, sizeof what, "tensor '%.60s'", t->name);
    uint32_t nd;
    if (rd_u32(c, &nd, what)) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return bs_error("%s: %u dimensions (must be 1..%d)", what, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    uint64_t prod = 1;
    for (uint32_t d = 0; d < nd; d++) {
        if (rd(c, &t->ne[d], 8, what)) return -1;
        if (t->ne[d] < 1) return bs_error("%s: dimension %u is %lld", what, d, (long long)t->ne[d]);
        if (bs_mul_overflow(prod, (uint64_t)t->ne[d], &prod) || prod > (uint64_t)INT64_MAX)
            return bs_error("%s: element count overflows", what);
    }
    if (rd_u32(c, &t->file_type, what) || rd_u64(c, &t->offset, what)) return -1;
    t->type = BS_TYPE_INVALID;
    return 0;
}

/* Byte size of tensor t as type `type`, or UINT64_MAX if the shape does not suit the type. */
static uint64_t size_as(const gguf_tensor *t, int type) {
    return bs_tensor_size(type, t->ne[0], (uint64_t)t->ne[1] * (uint64_t)t->ne[2] *
                                              (uint64_t)t->ne[3]);
}

typedef struct { uint64_t off, idx; } off_idx;
static int cmp_offset(const void *a, const void *b) {
    const off_idx *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Does type `type` fit the `space` bytes the file leaves tensor t? 2: tightly (the gap after it
 * is only alignment padding), 1: loosely, 0: no. */
static int fit(const gguf_file *f, const gguf_tensor *t, int type, uint64_t space) {
    uint64_t sz = size_as(t, type);
    if (sz == UINT64_MAX || sz > space) return 0;
    return space - sz < f->alignment ? 2 : 1;
}

static int err_fits_neither(const gguf_tensor *t, uint64_t space, const int cand[2]) {
    return bs_error("tensor '%s': type id %u with %llu bytes of room fits neither %s (%llu bytes) "
                    "nor %s (%llu bytes)", t->name, t->file_type, (unsigned long long)space,
                    bs_type_name(cand[0]), (unsigned long long)size_as(t, cand[0]),
                    bs_type_name(cand[1]), (unsigned long long)size_as(t, cand[1]));
}

/* Resolve every tensor's bs_type. GGUF id 42 names two layouts; a file uses one of them, so the
 * tensors whose room fits exactly one layout tightly decide it for the file (both at once is an
 * error), and every id-42 tensor must then fit that layout. With no decisive tensor (only tiny
 * ones, where both fit), each tensor takes the layout that alone fits it, else mainline's g64. */
static int resolve_types(gguf_file *f, const uint64_t *ord, const uint64_t *room) {
    uint64_t n = f->n_tensors;
    int file_layout = BS_TYPE_INVALID;
    const char *decider = NULL;
    for (uint64_t k = 0; k < n; k++) {
        gguf_tensor *t = &f->tensors[ord[k]];
        int cand[2], nc = bs_types_for_ggml_id(t->file_type, cand);
        if (nc == 0) return bs_error("tensor '%s': unknown type id %u", t->name, t->file_type);
        if (nc == 1) {
            int64_t blck = bs_type_get(cand[0])->blck;
            if (t->ne[0] % blck)
                return bs_error("tensor '%s': row of %lld elements does not suit type %s "
                                "(block %lld)", t->name, (long long)t->ne[0],
                                bs_type_name(cand[0]), (long long)blck);
            if (size_as(t, cand[0]) == UINT64_MAX)
                return bs_error("tensor '%s': byte size overflows", t->name);
            t->type = cand[0];
            continue;
        }
        int f0 = fit(f, t, cand[0], room[k]), f1 = fit(f, t, cand[1], room[k]);
        if (!f0 && !f1) return err_fits_neither(t, room[k], cand);
        if ((f0 == 2) == (f1 == 2)) continue;             /* not decisive */
        int layout = f0 == 2 ? cand[0] : cand[1];
        if (file_layout != BS_TYPE_INVALID && layout != file_layout)
            return bs_error("tensor '%s' is %s but tensor '%s' is %s: a file uses one layout for "
                            "type id %u", t->name, bs_type_name(layout), decider,
                            bs_type_name(file_layout), t->file_type);
        file_layout = layout;
        decider = t->name;
    }
    for (uint64_t k = 0; k < n; k++) {
        gguf_tensor *t = &f->tensors[ord[k]];
        if (t->type != BS_TYPE_INVALID) continue;
        int cand[2];
        bs_types_for_ggml_id(t->file_type, cand);
        int f0 = fit(f, t, cand[0], room[k]), f1 = fit(f, t, cand[1], room[k]);
        if (file_layout != BS_TYPE_INVALID) {
            if (!fit(f, t, file_layout, room[k]))
                return bs_error("tensor '%s': %llu bytes of room do not fit %s (%llu bytes), the "
                                "layout of tensor '%s'", t->name, (unsigned long long)room[k],
                                bs_type_name(file_layout),
                                (unsigned long long)size_as(t, file_layout), decider);
            t->type = file_layout;
        } else if (f0 && f1) {
            t->type = cand[0] == BS_Q2_0_G64 || cand[1] != BS_Q2_0_G64 ? cand[0] : cand[1];
        } else {
            t->type = f0 ? cand[0] : cand[1];
        }
    }
    return 0;
}

/* Validate offsets, resolve types (id 42 by the room each tensor has), check for overlap. */
static int parse_layout(gguf_file *f) {
    uint64_t n = f->n_tensors, data_size = f->file_size - f->data_offset;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment)
            return bs_error("tensor '%s': data offset %llu is not a multiple of the alignment %u",
                            t->name, (unsigned long long)t->offset, f->alignment);
        if (t->offset >= data_size)
            return bs_error("tensor '%s': data offset %llu out of range (data section is %llu "
                            "bytes)", t->name, (unsigned long long)t->offset,
                            (unsigned long long)data_size);
    }
    off_idx *srt = bs_xmalloc((size_t)(n ? n : 1) * sizeof *srt);
    for (uint64_t i = 0; i < n; i++) srt[i] = (off_idx){f->tensors[i].offset, i};
    qsort(srt, (size_t)n, sizeof *srt, cmp_offset);
    uint64_t *ord = bs_xmalloc((size_t)(n ? n : 1) * sizeof *ord);
    uint64_t *room = bs_xmalloc((size_t)(n ? n : 1) * sizeof *room);
    for (uint64_t k = 0; k < n; k++) {
        ord[k] = srt[k].idx;
        room[k] = (k + 1 < n ? srt[k + 1].off : data_size) - srt[k].off;
    }
    free(srt);
    int rc = resolve_types(f, ord, room);
    for (uint64_t k = 0; k < n && !rc; k++) {
        gguf_tensor *t = &f->tensors[ord[k]];
        t->nbytes = size_as(t, t->type);
        if (t->nbytes > room[k])
            rc = k + 1 < n
                     ? bs_error("tensor '%s' (%llu bytes at offset %llu) overlaps tensor '%s' at "
                                "offset %llu", t->name, (unsigned long long)t->nbytes,
                                (unsigned long long)t->offset, f->tensors[ord[k + 1]].name,
                                (unsigned long long)(t->offset + room[k]))
                     : bs_error("tensor '%s': %llu bytes at offset %llu run past the end of the "
                                "data section (%llu bytes)", t->name,
                                (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                                (unsigned long long)data_size);
    }
    free(ord);
    free(room);
    return rc;
}

static int parse_tensors(gguf_impl *im, cursor *c, uint64_t n) {
    gguf_file *f = &im->pub;
    /* Each info takes at least 8 (name length) + 1 (name) + 4 + 8 (one dim) + 4 + 8 bytes. */
    if (n > (c->size - c->pos) / 33)
        return bs_error("tensor count %llu is impossible for the %llu bytes left in the file",
                        (unsigned long long)n, (unsigned long long)(c->size - c->pos));
    f->tensors = bs_xcalloc((size_t)(n ? n : 1), sizeof(gguf_tensor));
    im->t_cap = table_cap(n);
    im->t_idx = bs_xcalloc((size_t)im->t_cap, sizeof(uint32_t));
    f->n_tensors = 0;
    for (uint64_t i = 0; i < n; i++) {
        f->n_tensors = i + 1;
        gguf_tensor *t = &f->tensors[i];
        if (parse_tensor_info(c, t, i)) return -1;
        if (idx_insert(im->t_idx, im->t_cap, t->name, strlen(t->name), (uint32_t)i, tensor_name,
                       f) >= 0)
            return bs_error("duplicate tensor name '%s'", t->name);
    }
    return 0;
}

/* Parse the image in f->base[0 .. file_size). */
static int parse(gguf_impl *im, const uint8_t *img) {
    gguf_file *f = &im->pub;
    cursor c = {img, 0, f->file_size};
    uint32_t magic;
    if (rd_u32(&c, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC) return bs_error("not a GGUF file (bad magic)");
    if (rd_u32(&c, &f->version, "version")) return -1;
    if (f->version == 1) return bs_error("GGUF version 1 is unsupported (only v2 and v3)");
    if (f->version != 2 && f->version != 3)
        return bs_error("unsupported GGUF version %u%s", f->version,
                        f->version > 0xffff ? " (big-endian file?)" : "");
    uint64_t n_tensors, n_kv;
    if (rd_u64(&c, &n_tensors, "tensor count") || rd_u64(&c, &n_kv, "metadata count")) return -1;
    if (n_tensors > UINT32_MAX - 1 || n_kv > UINT32_MAX - 1)
        return bs_error("absurd counts (%llu tensors, %llu metadata pairs)",
                        (unsigned long long)n_tensors, (unsigned long long)n_kv);
    if (parse_kvs(im, &c, n_kv)) return -1;
    if (parse_alignment(f)) return -1;
    if (parse_tensors(im, &c, n_tensors)) return -1;
    uint64_t a = f->alignment;
    f->data_offset = (c.pos + a - 1) / a * a;
    if (f->n_tensors && f->data_offset > f->file_size)
        return bs_error("data section starts at %llu, past the end of the file (%llu bytes)",
                        (unsigned long long)f->data_offset, (unsigned long long)f->file_size);
    if (f->data_offset > f->file_size) f->data_offset = f->file_size;
    return parse_layout(f);
}

static void set_data_pointers(gguf_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->base ? (const uint8_t *)f->base + f->data_offset +
                                           f->tensors[i].offset
                                     : NULL;
}

/* Names from a hostile file may hold control characters; keep the error on one line. */
static void sanitize_error(void) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", bs_last_error());
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    bs_error("%s", msg);
}

gguf_file *gguf_open_memory(const void *buf, size_t len) {
    gguf_impl *im = bs_xcalloc(1, sizeof *im);
    gguf_file *f = &im->pub;
    f->path = bs_xstrdup("<memory>");
    f->file_size = len;
    if (parse(im, buf)) { sanitize_error(); gguf_close(f); return NULL; }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = (const uint8_t *)buf + f->data_offset + f->tensors[i].offset;
    return f;
}

gguf_file *gguf_open(const char *path, int flags) {
    gguf_impl *im = bs_xcalloc(1, sizeof *im);
    gguf_file *f = &im->pub;
    f->path = bs_xstrdup(path);
    /* META_ONLY maps the file (touching only the header pages) and unmaps it after parsing. */
    bs_file_map m;
    bool use_mmap = !(flags & GGUF_OPEN_NO_MMAP) || (flags & GGUF_OPEN_META_ONLY);
    if (bs_file_map_open(&m, path, use_mmap)) { gguf_close(f); return NULL; }
    f->base = m.base;
    f->mmapped = m.mmapped;
    f->file_size = m.size;
    im->map_len = m.size;
    if (parse(im, f->base)) {
        sanitize_error();
        bs_error_prefix("%s: ", path);
        gguf_close(f);
        return NULL;
    }
    if (flags & GGUF_OPEN_META_ONLY) {   /* everything needed was copied out */
        bs_file_map_close(&m);
        f->base = NULL;
        f->mmapped = false;
    } else if (f->n_tensors) {
        if (flags & GGUF_OPEN_PREFAULT) bs_file_map_prefault(&m);
        else bs_file_map_willneed(&m);
    }
    set_data_pointers(f);
    return f;
}

/* --- lookups ----------------------------------------------------------------------------- */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    const gguf_impl *im = (const gguf_impl *)f;
    int64_t i = idx_find(im->kv_idx, im->kv_cap, key, kv_name, f);
    return i < 0 ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_impl *im = (const gguf_impl *)f;
    int64_t i = idx_find(im->t_idx, im->t_cap, name, tensor_name, f);
    return i < 0 ? NULL : &f->tensors[i];
}

bool gguf_is_signed_int(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}
static bool is_unsigned_int(enum gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static const gguf_kv *find_or_err(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) bs_error("missing metadata key '%s'", key);
    return kv;
}

/* An integer scalar as a signed 128-bit-safe pair: returns -1 if not an integer type. */
int gguf_int_value(const gguf_value *v, int64_t *out, bool *huge) {
    *huge = false;
    if (gguf_is_signed_int(v->type)) { *out = v->i64; return 0; }
    if (is_unsigned_int(v->type)) {
        if (v->u64 > (uint64_t)INT64_MAX) *huge = true;
        *out = (int64_t)(v->u64 & (uint64_t)INT64_MAX);
        return 0;
    }
    return -1;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = find_or_err(f, key);
    bool huge;
    if (!kv) return -1;
    if (gguf_int_value(&kv->val, out, &huge))
        return bs_error("metadata '%s' is %s, not an integer", key, gguf_type_name(kv->val.type));
    if (huge) return bs_error("metadata '%s' = %llu does not fit in int64", key,
                              (unsigned long long)kv->val.u64);
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t v = 0;
    if (gguf_get_i64(f, key, &v)) return -1;
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return bs_error("metadata '%s' = %lld is out of range for u32", key, (long long)v);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (kv->val.type == GGUF_TYPE_UINT64) { *out = kv->val.u64; return 0; }
    int64_t v = 0;
    if (gguf_get_i64(f, key, &v)) return -1;
    if (v < 0) return bs_error("metadata '%s' = %lld is negative", key, (long long)v);
    *out = (uint64_t)v;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_TYPE_FLOAT32 && kv->val.type != GGUF_TYPE_FLOAT64)
        return bs_error("metadata '%s' is %s, not a float", key, gguf_type_name(kv->val.type));
    *out = (float)kv->val.f64;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return -1;
    if (kv->val.type != GGUF_TYPE_BOOL)
        return bs_error("metadata '%s' is %s, not a bool", key, gguf_type_name(kv->val.type));
    *out = kv->val.b;
    return 0;
}

const char *gguf_get_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_STRING) return NULL;
    return kv->val.str.s;
}

uint64_t gguf_get_arr_n(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->val.type == GGUF_TYPE_ARRAY ? kv->val.n : 0;
}

static const gguf_value *find_arr(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_kv *kv = find_or_err(f, key);
    if (!kv) return NULL;
    if (kv->val.type != GGUF_TYPE_ARRAY) {
        bs_error("metadata '%s' is %s, not an array", key, gguf_type_name(kv->val.type));
        return NULL;
    }
    if (i >= kv->val.n) {
        bs_error("metadata '%s': index %llu out of range (%llu elements)", key,
                 (unsigned long long)i, (unsigned long long)kv->val.n);
        return NULL;
    }
    return &kv->val;
}

int gguf_arr_elem_i64(const gguf_value *v, uint64_t i, int64_t *out) {
    if (v->type != GGUF_TYPE_ARRAY || i >= v->n) return bs_error("array index out of range");
    const uint8_t *p = (const uint8_t *)v->arr + i * gguf_scalar_size(v->arr_type);
    switch (v->arr_type) {
    case GGUF_TYPE_UINT8: *out = *p; return 0;
    case GGUF_TYPE_INT8: *out = (int8_t)*p; return 0;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); *out = x; return 0; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); *out = x; return 0; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); *out = x; return 0; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); *out = x; return 0; }
    case GGUF_TYPE_INT64: memcpy(out, p, 8); return 0;
    case GGUF_TYPE_UINT64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > (uint64_t)INT64_MAX) return bs_error("array element %llu does not fit in int64",
                                                     (unsigned long long)x);
        *out = (int64_t)x;
        return 0;
    }
    default: return bs_error("array of %s is not an integer array", gguf_type_name(v->arr_type));
    }
}

int gguf_get_arr_i64(const gguf_file *f, const char *key, uint64_t i, int64_t *out) {
    const gguf_value *v = find_arr(f, key, i);
    if (!v) return -1;
    if (gguf_arr_elem_i64(v, i, out)) return bs_error_prefix("metadata '%s': ", key);
    return 0;
}

int gguf_get_arr_f32(const gguf_file *f, const char *key, uint64_t i, float *out) {
    const gguf_value *v = find_arr(f, key, i);
    if (!v) return -1;
    if (v->arr_type == GGUF_TYPE_FLOAT32) { memcpy(out, (const float *)v->arr + i, 4); return 0; }
    if (v->arr_type == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, (const double *)v->arr + i, 8);
        *out = (float)d;
        return 0;
    }
    return bs_error("metadata '%s' is an array of %s, not of floats", key,
                    gguf_type_name(v->arr_type));
}

const char *gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i) {
    const gguf_value *v = find_arr(f, key, i);
    if (!v) return NULL;
    if (v->arr_type != GGUF_TYPE_STRING) {
        bs_error("metadata '%s' is an array of %s, not of strings", key,
                 gguf_type_name(v->arr_type));
        return NULL;
    }
    return ((const gguf_str *)v->arr)[i].s;
}
