/* safetensors.c: safetensors reader, sharded checkpoints and streaming writer (see
 * safetensors.h). The header is parsed with jansson (duplicate keys rejected); every number in it
 * is checked against the file before use. */
#include "formats/safetensors.h"
#include "io/atomic_file.h"
#include "io/file_map.h"
#include "formats/quant.h"
#include "io/util.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define ST_MAX_HEADER (100u << 20)   /* the format's own limit on the JSON header */

static const struct { const char *name; size_t size; int bs_type; } dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1, BS_TYPE_INVALID},   [ST_U8] = {"U8", 1, BS_TYPE_INVALID},
    [ST_I8] = {"I8", 1, BS_I8},                 [ST_U16] = {"U16", 2, BS_TYPE_INVALID},
    [ST_I16] = {"I16", 2, BS_I16},              [ST_U32] = {"U32", 4, BS_TYPE_INVALID},
    [ST_I32] = {"I32", 4, BS_I32},              [ST_U64] = {"U64", 8, BS_TYPE_INVALID},
    [ST_I64] = {"I64", 8, BS_TYPE_INVALID},     [ST_F16] = {"F16", 2, BS_F16},
    [ST_BF16] = {"BF16", 2, BS_BF16},           [ST_F32] = {"F32", 4, BS_F32},
    [ST_F64] = {"F64", 8, BS_TYPE_INVALID},     [ST_F8_E4M3] = {"F8_E4M3", 1, BS_TYPE_INVALID},
    [ST_F8_E5M2] = {"F8_E5M2", 1, BS_TYPE_INVALID},
};

static bool valid_dtype(int d) { return d >= 0 && d < ST_DTYPE_COUNT; }
const char *st_dtype_name(int d) { return valid_dtype(d) ? dtypes[d].name : "?"; }
size_t st_dtype_size(int d) { return valid_dtype(d) ? dtypes[d].size : 0; }
int st_dtype_to_bs_type(int d) { return valid_dtype(d) ? dtypes[d].bs_type : BS_TYPE_INVALID; }

int st_dtype_from_name(const char *name) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (strcmp(dtypes[d].name, name) == 0) return d;
    return ST_DTYPE_INVALID;
}

/* Names in error messages may come from a hostile file: keep the message on one line. */
static void sanitize_error(void) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", bs_last_error());
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    bs_error("%s", msg);
}

/* --- reader ------------------------------------------------------------------------------- */
void st_close(st_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (uint64_t i = 0; i < f->n_meta; i++) { free(f->meta[i].key); free(f->meta[i].value); }
    free(f->meta);
    if (f->base) {
        if (f->mmapped) munmap(f->base, f->map_len);
        else free(f->base);
    }
    free(f->path);
    free(f);
}

/* A JSON integer in [0, INT64_MAX]; jansson rejects integers that overflow json_int_t. */
static int get_uint(const json_t *v, const char *name, const char *what, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bs_error("tensor '%s': %s must be a non-negative integer", name, what);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_meta(st_file *f, json_t *m) {
    if (!json_is_object(m)) return bs_error("__metadata__ is not an object");
    f->meta = bs_xcalloc(json_object_size(m) + 1, sizeof *f->meta);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v)) return bs_error("__metadata__ '%s' is not a string", k);
        f->meta[f->n_meta].key = bs_xstrdup(k);
        f->meta[f->n_meta].value = bs_xstrdup(json_string_value(v));
        f->n_meta++;
    }
    return 0;
}

static int parse_entry(st_tensor *t, const char *name, json_t *e, uint64_t data_size) {
    if (!*name) return bs_error("empty tensor name");
    if (!json_is_object(e)) return bs_error("tensor '%s': entry is not an object", name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
           *of = json_object_get(e, "data_offsets");
    if (!json_is_string(dt)) return bs_error("tensor '%s': missing dtype", name);
    t->dtype = st_dtype_from_name(json_string_value(dt));
    if (t->dtype == ST_DTYPE_INVALID)
        return bs_error("tensor '%s': unknown dtype '%.32s'", name, json_string_value(dt));
    if (!json_is_array(sh)) return bs_error("tensor '%s': missing shape", name);
    if (json_array_size(sh) > ST_MAX_DIMS)
        return bs_error("tensor '%s': %zu dimensions (at most %d)", name, json_array_size(sh),
                        ST_MAX_DIMS);
    t->n_dims = (int)json_array_size(sh);
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t x = 0;
        if (get_uint(json_array_get(sh, (size_t)d), name, "shape entry", &x)) return -1;
        t->shape[d] = (int64_t)x;
        if (bs_mul_overflow(n, x, &n)) return bs_error("tensor '%s': element count overflows", name);
    }
    t->n_elements = n;
    uint64_t begin = 0, end = 0, want;
    if (!json_is_array(of) || json_array_size(of) != 2)
        return bs_error("tensor '%s': data_offsets must be [begin, end]", name);
    if (get_uint(json_array_get(of, 0), name, "data_offsets[0]", &begin) ||
        get_uint(json_array_get(of, 1), name, "data_offsets[1]", &end))
        return -1;
    if (begin > end || end > data_size)
        return bs_error("tensor '%s': data offsets [%llu, %llu] out of range (data section is "
                        "%llu bytes)", name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_size);
    if (bs_mul_overflow(n, st_dtype_size(t->dtype), &want) || want != end - begin)
        return bs_error("tensor '%s': %llu bytes for %llu %s elements", name,
                        (unsigned long long)(end - begin), (unsigned long long)n,
                        st_dtype_name(t->dtype));
    t->offset = begin;
    t->nbytes = end - begin;
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

static int parse_header(st_file *f, json_t *root, uint64_t data_size) {
    if (!json_is_object(root)) return bs_error("header is not a JSON object");
    size_t n = json_object_size(root);
    f->tensors = bs_xcalloc(n + 1, sizeof *f->tensors);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if (parse_meta(f, v)) return -1;
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        if (parse_entry(t, k, v, data_size)) return -1;
        t->name = bs_xstrdup(k);
        f->n_tensors++;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_offset);
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const st_tensor *a = &f->tensors[i - 1], *b = &f->tensors[i];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset)
            return bs_error("tensor '%s' [%llu, %llu) overlaps tensor '%s' [%llu, %llu)", a->name,
                            (unsigned long long)a->offset,
                            (unsigned long long)(a->offset + a->nbytes), b->name,
                            (unsigned long long)b->offset,
                            (unsigned long long)(b->offset + b->nbytes));
    }
    return 0;
}

static int parse(st_file *f, const uint8_t *img) {
    if (f->file_size < 8) return bs_error("truncated: %llu bytes, no header length",
                                          (unsigned long long)f->file_size);
    uint64_t n;
    memcpy(&n, img, 8);
    if (n > f->file_size - 8)
        return bs_error("header length %llu exceeds the %llu bytes after it",
                        (unsigned long long)n, (unsigned long long)(f->file_size - 8));
    if (n > ST_MAX_HEADER)
        return bs_error("header length %llu exceeds the format's limit of %u bytes",
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n < 2 || img[8] != '{') return bs_error("header does not start with '{'");
    f->header_len = n;
    f->data_offset = 8 + n;
    json_error_t err;
    json_t *root = json_loadb((const char *)img + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!root) return bs_error("bad JSON header at byte %d: %s", err.position, err.text);
    int rc = parse_header(f, root, f->file_size - f->data_offset);
    json_decref(root);
    return rc;
}

static void set_data(st_file *f) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->base ? (const uint8_t *)f->base + f->data_offset +
                                           f->tensors[i].offset
                                     : NULL;
}

st_file *st_open_memory(const void *buf, size_t len) {
    st_file *f = bs_xcalloc(1, sizeof *f);
    f->path = bs_xstrdup("<memory>");
    f->file_size = len;
    if (parse(f, buf)) { sanitize_error(); st_close(f); return NULL; }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = (const uint8_t *)buf + f->data_offset + f->tensors[i].offset;
    return f;
}

st_file *st_open(const char *path, int flags) {
    st_file *f = bs_xcalloc(1, sizeof *f);
    f->path = bs_xstrdup(path);
    bs_file_map m;
    bool use_mmap = !(flags & ST_OPEN_NO_MMAP) || (flags & ST_OPEN_META_ONLY);
    if (bs_file_map_open(&m, path, use_mmap)) { st_close(f); return NULL; }
    f->base = m.base;
    f->mmapped = m.mmapped;
    f->map_len = m.size;
    f->file_size = m.size;
    if (parse(f, f->base)) {
        sanitize_error();
        bs_error_prefix("%s: ", path);
        st_close(f);
        return NULL;
    }
    if (flags & ST_OPEN_META_ONLY) {
        bs_file_map_close(&m);
        f->base = NULL;
        f->mmapped = false;
    } else if (f->n_tensors) {
        if (flags & ST_OPEN_PREFAULT) bs_file_map_prefault(&m);
        else bs_file_map_willneed(&m);
    }
    set_data(f);
    return f;
}

const st_tensor *st_find_tensor(const st_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_get_meta(const st_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* --- sharded checkpoints ------------------------------------------------------------------ */
void st_model_close(st_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) st_close(m->files[i]);
    free(m->files);
    free(m->tensors);
    free(m->tensor_file);
    free(m->dir);
    free(m);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = bs_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int add_shard(st_model *m, const char *path, int flags) {
    st_file *f = st_open(path, flags);
    if (!f) return -1;
    m->files = bs_xrealloc(m->files, (size_t)(m->n_files + 1) * sizeof *m->files);
    m->files[m->n_files++] = f;
    return 0;
}

static int find_shard(const st_model *m, const char *path) {
    for (int i = 0; i < m->n_files; i++)
        if (strcmp(m->files[i]->path, path) == 0) return i;
    return -1;
}

static int cmp_tensor_name(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

/* Build the name-sorted table of every tensor across the shards. */
static int index_tensors(st_model *m) {
    uint64_t n = 0;
    for (int i = 0; i < m->n_files; i++) n += m->files[i]->n_tensors;
    m->tensors = bs_xmalloc((size_t)(n + 1) * sizeof *m->tensors);
    for (int i = 0; i < m->n_files; i++)
        for (uint64_t k = 0; k < m->files[i]->n_tensors; k++)
            m->tensors[m->n_tensors++] = &m->files[i]->tensors[k];
    qsort(m->tensors, (size_t)n, sizeof *m->tensors, cmp_tensor_name);
    m->tensor_file = bs_xmalloc((size_t)(n + 1) * sizeof *m->tensor_file);
    for (uint64_t k = 0; k < n; k++) {
        if (k && strcmp(m->tensors[k - 1]->name, m->tensors[k]->name) == 0)
            return bs_error("tensor '%s' appears in more than one shard", m->tensors[k]->name);
        for (int i = 0; i < m->n_files; i++) {
            const st_file *f = m->files[i];
            if (m->tensors[k] >= f->tensors && m->tensors[k] < f->tensors + f->n_tensors)
                m->tensor_file[k] = i;
        }
    }
    return 0;
}

const st_tensor *st_model_find(const st_model *m, const char *name) {
    uint64_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->tensors[mid]->name, name);
        if (c == 0) return m->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Open every shard the index names and check its weight_map against them. */
static int open_index(st_model *m, const char *index_path, int flags) {
    json_error_t err;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &err);
    if (!root) return bs_error("%s: bad JSON at line %d: %s", index_path, err.line, err.text);
    json_t *wm = json_object_get(root, "weight_map");
    int rc = 0;
    const char *k;
    json_t *v;
    if (!json_is_object(wm)) rc = bs_error("%s: no weight_map object", index_path);
    json_object_foreach(wm, k, v) {
        if (rc) break;
        const char *shard = json_string_value(v);
        if (!shard || !*shard || strchr(shard, '/') || strcmp(shard, "..") == 0) {
            rc = bs_error("%s: weight_map['%s'] is not a shard file name", index_path, k);
            break;
        }
        char *path = join(m->dir, shard);
        if (find_shard(m, path) < 0) rc = add_shard(m, path, flags);
        free(path);
    }
    if (!rc) rc = index_tensors(m);
    json_object_foreach(wm, k, v) {
        if (rc) break;
        char *path = join(m->dir, json_string_value(v));
        const st_tensor *t = st_model_find(m, k);
        int want = find_shard(m, path);
        int have = -1;
        for (uint64_t i = 0; t && i < m->n_tensors; i++)
            if (m->tensors[i] == t) have = m->tensor_file[i];
        if (!t || have != want)
            rc = bs_error("%s: tensor '%s' is not in its shard %s", index_path, k,
                          json_string_value(v));
        free(path);
    }
    json_decref(root);
    return rc;
}

/* The lone *.safetensors file in dir, or NULL with an error. */
static char *single_file_in(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) { bs_error("%s: %s", dir, strerror(errno)); return NULL; }
    char *found = NULL;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (bs_ends_with(e->d_name, ".safetensors") && count++ == 0) found = join(dir, e->d_name);
    closedir(d);
    if (count == 1) return found;
    free(found);
    bs_error("%s: %s", dir, count ? "several .safetensors files and no "
                                    "model.safetensors.index.json"
                                  : "no .safetensors file");
    return NULL;
}

st_model *st_model_open(const char *path, int flags) {
    st_model *m = bs_xcalloc(1, sizeof *m);
    struct stat st;
    if (stat(path, &st) != 0) {
        bs_error("%s: %s", path, strerror(errno));
        st_model_close(m);
        return NULL;
    }
    int rc;
    if (S_ISDIR(st.st_mode)) {
        m->dir = bs_xstrdup(path);
        char *index = join(path, "model.safetensors.index.json");
        char *single = join(path, "model.safetensors");
        if (stat(index, &st) == 0) rc = open_index(m, index, flags);
        else if (stat(single, &st) == 0) rc = add_shard(m, single, flags);
        else {
            char *one = single_file_in(path);
            rc = one ? add_shard(m, one, flags) : -1;
            free(one);
        }
        free(index);
        free(single);
    } else {
        const char *slash = strrchr(path, '/');
        m->dir = slash ? strndup(path, (size_t)(slash - path)) : bs_xstrdup(".");
        if (!m->dir) m->dir = bs_xstrdup(".");
        rc = bs_ends_with(path, ".json") ? open_index(m, path, flags) : add_shard(m, path, flags);
    }
    if (!rc && !m->tensors) rc = index_tensors(m);
    if (rc) { st_model_close(m); return NULL; }
    return m;
}

/* --- writer ------------------------------------------------------------------------------- */
typedef struct wtensor {
    char *name;
    int dtype, n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
} wtensor;

struct st_writer {
    bs_aout out;                  /* the temporary, renamed over the path at close; the first error */
    json_t *meta;                 /* NULL until the first st_w_set_meta */
    wtensor *t;
    uint64_t n_t, cap_t;
    bool header_written;
    uint64_t cur, cur_done;
};

st_writer *st_w_open(const char *path) {
    st_writer *w = bs_xcalloc(1, sizeof *w);
    if (bs_aout_open(&w->out, path)) { free(w); return NULL; }
    return w;
}

void st_w_set_meta(st_writer *w, const char *key, const char *value) {
    if (w->header_written) { bs_aout_fail(&w->out, "metadata '%s' set after data was written", key); return; }
    if (!w->meta) w->meta = json_object();
    json_t *s = json_string(value);
    if (!s) { bs_aout_fail(&w->out, "metadata '%s': value is not valid UTF-8", key); return; }
    if (json_object_set_new(w->meta, key, s)) bs_aout_fail(&w->out, "metadata key '%s' is invalid", key);
}

int st_w_add_tensor(st_writer *w, const char *name, int dtype, int n_dims, const int64_t *shape) {
    if (w->header_written) {
        bs_aout_fail(&w->out, "tensor '%s' declared after data was written", name);
        return bs_error("%s", w->out.err);
    }
    if (!valid_dtype(dtype)) return bs_error("tensor '%s': invalid dtype %d", name, dtype);
    if (!*name || strcmp(name, "__metadata__") == 0)
        return bs_error("invalid tensor name '%s'", name);
    if (n_dims < 0 || n_dims > ST_MAX_DIMS)
        return bs_error("tensor '%s': %d dimensions (0..%d)", name, n_dims, ST_MAX_DIMS);
    for (uint64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return bs_error("duplicate tensor name '%s'", name);
    wtensor t = {.dtype = dtype, .n_dims = n_dims};
    uint64_t n = st_dtype_size(dtype);
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0) return bs_error("tensor '%s': negative dimension", name);
        t.shape[d] = shape[d];
        if (bs_mul_overflow(n, (uint64_t)shape[d], &n) || n > (uint64_t)INT64_MAX)
            return bs_error("tensor '%s': size overflows", name);
    }
    t.nbytes = n;
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = bs_xrealloc(w->t, (size_t)w->cap_t * sizeof *w->t);
    }
    t.name = bs_xstrdup(name);
    w->t[w->n_t] = t;
    return (int)w->n_t++;
}

static json_t *header_json(st_writer *w) {
    json_t *root = json_object();
    if (w->meta) json_object_set(root, "__metadata__", w->meta);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtype_name(t->dtype), "shape",
                              shape, "data_offsets", (json_int_t)off,
                              (json_int_t)(off + t->nbytes));
        if (!e || json_object_set_new(root, t->name, e)) {
            bs_aout_fail(&w->out, "tensor '%s': name is not valid UTF-8", t->name);
            break;
        }
        off += t->nbytes;
    }
    return root;
}

static void w_header(st_writer *w) {
    w->header_written = true;
    json_t *root = header_json(w);
    char *s = w->out.err[0] ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) { bs_aout_fail(&w->out, "cannot encode the header"); return; }
    uint64_t n = strlen(s), padded = (n + 7) / 8 * 8;   /* data section starts 8-aligned */
    bool ok = fwrite(&padded, 8, 1, w->out.fp) == 1 && fwrite(s, 1, n, w->out.fp) == n;
    for (uint64_t i = n; i < padded && ok; i++) ok = fputc(' ', w->out.fp) != EOF;
    free(s);
    if (!ok) bs_aout_fail(&w->out, "write failed: %s", strerror(errno));
}

int st_w_write(st_writer *w, const void *data, size_t n) {
    if (!w->header_written) w_header(w);
    const uint8_t *p = data;
    while (n && !w->out.err[0]) {
        while (w->cur < w->n_t && w->cur_done == w->t[w->cur].nbytes) w->cur++, w->cur_done = 0;
        if (w->cur >= w->n_t) { bs_aout_fail(&w->out, "%zu bytes written past the last tensor", n); break; }
        uint64_t left = w->t[w->cur].nbytes - w->cur_done;
        size_t k = n < left ? n : (size_t)left;
        if (fwrite(p, 1, k, w->out.fp) != k) bs_aout_fail(&w->out, "write failed: %s", strerror(errno));
        p += k, n -= k, w->cur_done += k;
    }
    if (w->out.err[0]) return bs_error("%s: %s", w->out.path, w->out.err);
    return 0;
}

static void writer_free(st_writer *w) {
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    json_decref(w->meta);
    free(w);
}

int st_w_close(st_writer *w) {
    if (!w->header_written) w_header(w);
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].nbytes) w->cur++, w->cur_done = 0;
    if (!w->out.err[0] && w->cur < w->n_t)
        bs_aout_fail(&w->out, "tensor '%s' got %llu of its %llu bytes", w->t[w->cur].name,
               (unsigned long long)w->cur_done, (unsigned long long)w->t[w->cur].nbytes);
    int rc = bs_aout_close(&w->out);   /* an error keeps any previous file under this name */
    writer_free(w);
    return rc;
}

void st_w_abort(st_writer *w) {
    if (!w) return;
    bs_aout_abort(&w->out);
    writer_free(w);
}
