/* test_safetensors.c: safetensors writer -> reader round trips (every dtype, scalars and empty
 * tensors, __metadata__, chunked writes, mmap / no-mmap / meta-only), sharded checkpoints through
 * model.safetensors.index.json, hostile headers (every truncation, bad lengths, bad JSON, bad
 * dtypes, shapes and offsets, overlaps, duplicates), and the HF config.json getters. */
#include "io/hf_config.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "io/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[512];

static const char *tmp_path(const char *name) {
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/test_st_%d_%s", tmpdir, (int)getpid(), name);
    return p[k];
}

static uint8_t pattern(uint64_t i, int t) { return (uint8_t)(i * 37 + (uint64_t)t * 11 + 5); }

typedef struct { const char *name; int dtype, n_dims; int64_t shape[4]; } spec;

static const spec specs[] = {
    {"model.embed_tokens.weight", ST_BF16, 2, {6, 4}},
    {"model.norm.weight", ST_F32, 1, {4}},
    {"scalar", ST_F64, 0, {0}},
    {"empty", ST_I32, 2, {0, 3}},
    {"lm_head.weight", ST_F16, 2, {6, 4}},
    {"a.bool", ST_BOOL, 1, {3}},
    {"a.u8", ST_U8, 1, {5}},
    {"a.i8", ST_I8, 3, {1, 2, 3}},
    {"a.u16", ST_U16, 1, {2}},
    {"a.i16", ST_I16, 1, {2}},
    {"a.u32", ST_U32, 1, {2}},
    {"a.u64", ST_U64, 1, {1}},
    {"a.i64", ST_I64, 4, {1, 1, 1, 2}},
    {"a.f8e4m3", ST_F8_E4M3, 1, {7}},
    {"a.f8e5m2", ST_F8_E5M2, 1, {1}},
};
#define N_SPECS ((int)BS_ARRAY_LEN(specs))

static uint64_t spec_bytes(const spec *s) {
    uint64_t n = st_dtype_size(s->dtype);
    for (int d = 0; d < s->n_dims; d++) n *= (uint64_t)s->shape[d];
    return n;
}

/* Write specs[first .. first+n) with a byte pattern, streaming `chunk` bytes at a time. */
static int write_file(const char *path, int first, int n, size_t chunk, bool meta) {
    st_writer *w = st_w_open(path);
    if (!w) return -1;
    if (meta) {
        st_w_set_meta(w, "format", "pt");
        st_w_set_meta(w, "note", "h\xc3\xa9llo \"quoted\"");
        st_w_set_meta(w, "format", "pt2");   /* replaced */
    }
    uint64_t total = 0;
    for (int i = first; i < first + n; i++) {
        if (st_w_add_tensor(w, specs[i].name, specs[i].dtype, specs[i].n_dims, specs[i].shape) != i - first) {
            st_w_abort(w);
            return -1;
        }
        total += spec_bytes(&specs[i]);
    }
    uint8_t *all = malloc(total + 1), *p = all;
    for (int i = first; i < first + n; i++)
        for (uint64_t j = 0; j < spec_bytes(&specs[i]); j++) *p++ = pattern(j, i);
    for (uint64_t off = 0; off < total; off += chunk) {
        size_t k = total - off < chunk ? (size_t)(total - off) : chunk;
        if (st_w_write(w, all + off, k)) { free(all); st_w_abort(w); return -1; }
    }
    free(all);
    return st_w_close(w);
}

static void check_tensor(const st_tensor *t, int i, bool with_data) {
    CHECKF(t != NULL, "tensor %s missing", specs[i].name);
    if (!t) return;
    CHECK_STR(t->name, specs[i].name);
    CHECK_EQ_INT(t->dtype, specs[i].dtype);
    CHECK_EQ_INT(t->n_dims, specs[i].n_dims);
    for (int d = 0; d < t->n_dims; d++) CHECK_EQ_INT(t->shape[d], specs[i].shape[d]);
    CHECK_EQ_INT(t->nbytes, spec_bytes(&specs[i]));
    CHECK_EQ_INT(t->n_elements * st_dtype_size(t->dtype), t->nbytes);
    if (!with_data) { CHECK(t->data == NULL); return; }
    bool same = t->data != NULL || t->nbytes == 0;
    for (uint64_t j = 0; same && j < t->nbytes; j++) same = ((const uint8_t *)t->data)[j] == pattern(j, i);
    CHECKF(same, "tensor %s data", t->name);
}

static void check_file(const st_file *f, int first, int n, bool meta, bool with_data) {
    CHECK_EQ_INT(f->n_tensors, n);
    CHECK(f->data_offset % 8 == 0);
    for (int i = first; i < first + n; i++) check_tensor(st_find_tensor(f, specs[i].name), i, with_data);
    CHECK(st_find_tensor(f, "nope") == NULL);
    if (meta) {
        CHECK_STR(st_get_meta(f, "format"), "pt2");
        CHECK_STR(st_get_meta(f, "note"), "h\xc3\xa9llo \"quoted\"");
        CHECK_EQ_INT(f->n_meta, 2);
    } else {
        CHECK(f->n_meta == 0 && st_get_meta(f, "format") == NULL);
    }
    for (uint64_t i = 1; i < f->n_tensors; i++) CHECK(f->tensors[i - 1].offset <= f->tensors[i].offset);
}

static void test_round_trip(size_t chunk) {
    const char *path = tmp_path("rt.safetensors");
    CHECKF(write_file(path, 0, N_SPECS, chunk, true) == 0, "%s", bs_last_error());
    st_file *a = st_open(path, 0), *b = st_open(path, ST_OPEN_NO_MMAP), *c = st_open(path, ST_OPEN_META_ONLY);
    CHECKF(a && b && c, "%s", bs_last_error());
    if (a && b && c) {
        CHECK(a->mmapped && !b->mmapped && c->base == NULL);
        check_file(a, 0, N_SPECS, true, true);
        check_file(b, 0, N_SPECS, true, true);
        check_file(c, 0, N_SPECS, true, false);
        CHECK(st_dtype_to_bs_type(ST_BF16) == BS_BF16 && st_dtype_to_bs_type(ST_F8_E4M3) == BS_TYPE_INVALID);
        CHECK(st_dtype_from_name("F8_E5M2") == ST_F8_E5M2 && st_dtype_from_name("f32") == ST_DTYPE_INVALID);
    }
    st_close(a);
    st_close(b);
    st_close(c);
    unlink(path);
}

static void test_truncations(void) {
    const char *path = tmp_path("trunc.safetensors");
    CHECK(write_file(path, 0, 6, 64, true) == 0);
    size_t len;
    uint8_t *img = (uint8_t *)bs_read_file(path, &len);
    int bad = 0;
    for (size_t n = 0; img && n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, img, n);
        bs_clear_error();
        st_file *f = st_open_memory(copy, n);
        if (f || !bs_last_error()[0] || strcmp(bs_last_error(), "unknown error") == 0) {
            if (bad++ < 5) fprintf(stderr, "truncation at %zu of %zu accepted\n", n, len);
        }
        st_close(f);
        free(copy);
    }
    CHECKF(bad == 0, "%d truncations misbehaved", bad);
    st_file *f = img ? st_open_memory(img, len) : NULL;
    CHECK(f != NULL);
    st_close(f);
    free(img);
    unlink(path);
}

/* Build a file from a JSON header and `data` bytes of payload; expect failure mentioning want. */
static void expect_fail_hdr(const char *json, size_t data, const char *want, const char *what) {
    size_t n = strlen(json);
    uint8_t *img = malloc(8 + n + data + 1);
    uint64_t len = n;
    memcpy(img, &len, 8);
    memcpy(img + 8, json, n);
    memset(img + 8 + n, 0x11, data);
    bs_clear_error();
    st_file *f = st_open_memory(img, 8 + n + data);
    const char *e = bs_last_error();
    CHECKF(f == NULL, "%s: accepted", what);
    CHECKF(e[0] && strcmp(e, "unknown error") && !strchr(e, '\n'), "%s: error '%s'", what, e);
    if (want) CHECKF(strstr(e, want) != NULL, "%s: error '%s' lacks '%s'", what, e, want);
    st_close(f);
    free(img);
}

static void expect_ok_hdr(const char *json, size_t data, const char *what) {
    size_t n = strlen(json);
    uint8_t *img = calloc(1, 8 + n + data + 1);
    uint64_t len = n;
    memcpy(img, &len, 8);
    memcpy(img + 8, json, n);
    st_file *f = st_open_memory(img, 8 + n + data);
    CHECKF(f != NULL, "%s: %s", what, bs_last_error());
    st_close(f);
    free(img);
}

static void test_hostile(void) {
    const char *ok = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    expect_ok_hdr(ok, 16, "base");
    expect_ok_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}    ", 16, "space padded");
    expect_ok_hdr("{}", 0, "empty");
    expect_fail_hdr(ok, 15, "out of range", "data short by one");
    uint8_t small[7] = {1};
    CHECK(st_open_memory(small, 7) == NULL && strstr(bs_last_error(), "truncated"));
    uint8_t hl[16];
    uint64_t huge = 1ull << 62;
    memcpy(hl, &huge, 8);
    memcpy(hl + 8, "{}      ", 8);
    CHECK(st_open_memory(hl, 16) == NULL && strstr(bs_last_error(), "header length"));
    expect_fail_hdr("[1,2]", 0, "'{'", "array header");
    expect_fail_hdr(" {}", 0, "'{'", "leading space");
    expect_fail_hdr("{\"w\":", 0, "JSON", "bad JSON");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "JSON", "duplicate name");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F48\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'w': unknown dtype 'F48'", "unknown dtype");
    expect_fail_hdr("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype", "missing dtype");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape", "missing shape");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape", "negative dim");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape", "real dim");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions", "9 dims");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
                    "overflows", "shape overflow");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
                    "'w'", "byte size overflow");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 4, "JSON", "offset beyond int64");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets", "one offset");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "out of range", "begin > end");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "8 bytes for 1 F32", "size mismatch");
    expect_fail_hdr("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4096,4100]}}", 8, "out of range", "offset past end");
    expect_fail_hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps", "overlap");
    expect_fail_hdr("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__", "non-string metadata");
    expect_fail_hdr("{\"__metadata__\":[]}", 0, "__metadata__", "metadata array");
    expect_fail_hdr("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty tensor name", "empty name");
    expect_fail_hdr("{\"w\\n\\u0001\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "F99", "control chars");
    /* deeply nested JSON must fail cleanly, not overflow the stack */
    static char deep[20010];
    memcpy(deep, "{\"a\":", 5);
    memset(deep + 5, '[', 20000);
    deep[20005] = 0;
    expect_fail_hdr(deep, 0, NULL, "deep nesting");
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (fp) { fputs(text, fp); fclose(fp); }
}

static void test_sharded(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("shards"));
    mkdir(dir, 0755);
    char p1[1200], p2[1200], idx[1200];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    CHECK(write_file(p1, 0, 5, 3, true) == 0);
    CHECK(write_file(p2, 5, N_SPECS - 5, 1 << 16, false) == 0);
    /* weight_map naming every tensor with its shard */
    char *json = malloc(1 << 16);
    size_t k = (size_t)snprintf(json, 1 << 16, "{\"metadata\":{\"total_size\":1},\"weight_map\":{");
    for (int i = 0; i < N_SPECS; i++)
        k += (size_t)snprintf(json + k, (1 << 16) - k, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                              i ? "," : "", specs[i].name, i < 5 ? 1 : 2);
    snprintf(json + k, (1 << 16) - k, "}}");
    write_text(idx, json);
    const char *paths[2] = {dir, idx};
    for (int v = 0; v < 2; v++) {
        st_model *m = st_model_open(paths[v], 0);
        CHECKF(m != NULL, "%s", bs_last_error());
        if (!m) continue;
        CHECK_EQ_INT(m->n_files, 2);
        CHECK_EQ_INT(m->n_tensors, N_SPECS);
        for (int i = 0; i < N_SPECS; i++) check_tensor(st_model_find(m, specs[i].name), i, true);
        CHECK(st_model_find(m, "zzz") == NULL && st_model_find(m, "") == NULL);
        for (uint64_t i = 1; i < m->n_tensors; i++) CHECK(strcmp(m->tensors[i - 1]->name, m->tensors[i]->name) < 0);
        st_model_close(m);
    }
    /* a single file and a directory with one file */
    st_model *m = st_model_open(p1, ST_OPEN_META_ONLY);
    CHECK(m && m->n_files == 1 && m->n_tensors == 5);
    st_model_close(m);
    /* weight_map pointing at the wrong shard */
    char *bad = strdup(json);
    char *pos = strstr(bad, "\"model.norm.weight\":\"model-00001");
    if (pos) pos[strlen("\"model.norm.weight\":\"model-0000")] = '2';
    write_text(idx, bad);
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "model.norm.weight"));
    /* a tensor in weight_map that no shard has, a missing shard, path traversal */
    write_text(idx, "{\"weight_map\":{\"ghost\":\"model-00001-of-00002.safetensors\"}}");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "ghost"));
    write_text(idx, "{\"weight_map\":{\"x\":\"missing.safetensors\"}}");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "missing.safetensors"));
    write_text(idx, "{\"weight_map\":{\"x\":\"../etc/passwd\"}}");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "shard file name"));
    write_text(idx, "{\"weight_map\":[]}");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "weight_map"));
    write_text(idx, "{\"weight_map\":");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "JSON"));
    /* the same tensor in two shards */
    CHECK(write_file(p2, 0, 2, 64, false) == 0);
    write_text(idx, "{\"weight_map\":{\"model.norm.weight\":\"model-00001-of-00002.safetensors\","
                    "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "more than one shard"));
    /* without an index: two files are ambiguous, one is fine */
    unlink(idx);
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "several"));
    unlink(p2);
    m = st_model_open(dir, 0);
    CHECK(m && m->n_tensors == 5);
    st_model_close(m);
    unlink(p1);
    CHECK(st_model_open(dir, 0) == NULL && strstr(bs_last_error(), "no .safetensors"));
    CHECK(st_model_open(tmp_path("nonexistent"), 0) == NULL);
    rmdir(dir);
    free(bad);
    free(json);
}

static void test_writer_errors(void) {
    const char *path = tmp_path("werr.safetensors");
    st_writer *w = st_w_open(path);
    int64_t shape[2] = {2, 3};
    CHECK(st_w_add_tensor(w, "a", ST_F32, 2, shape) == 0);
    CHECK(st_w_add_tensor(w, "a", ST_F32, 2, shape) == -1);
    CHECK(st_w_add_tensor(w, "__metadata__", ST_F32, 2, shape) == -1);
    CHECK(st_w_add_tensor(w, "b", 99, 2, shape) == -1);
    int64_t neg[1] = {-2};
    CHECK(st_w_add_tensor(w, "c", ST_F32, 1, neg) == -1);
    uint8_t data[64] = {0};
    CHECK(st_w_write(w, data, 20) == 0);
    CHECK(st_w_close(w) == -1 && strstr(bs_last_error(), "'a'"));
    CHECK(access(path, F_OK) != 0);
    w = st_w_open(path);
    CHECK(st_w_add_tensor(w, "a", ST_F32, 2, shape) == 0);
    CHECK(st_w_write(w, data, 25) == -1);
    st_w_abort(w);
    CHECK(access(path, F_OK) != 0);
    CHECK(st_w_open("/nonexistent-dir/x.safetensors") == NULL);
}

static void test_hf_config(void) {
    const char *path = tmp_path("config.json");
    write_text(path, "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"tie_word_embeddings\":false,"
                     "\"text_config\":{\"num_hidden_layers\":64,\"rope_theta\":10000000.0,\"hidden_size\":5120.0,"
                     "\"rms_norm_eps\":1e-06,\"layer_types\":null,\"mrope_section\":[11,11,10],\"model_type\":\"qwen3_5_text\"}}");
    json_t *c = bs_json_load_file(path);
    CHECKF(c != NULL, "%s", bs_last_error());
    int64_t i;
    double d;
    bool b;
    int64_t arr[4];
    int n;
    CHECK(hf_int_req(c, "text_config.num_hidden_layers", &i) == 0 && i == 64);
    CHECK(hf_int(c, "text_config.hidden_size", 0, &i) == 0 && i == 5120);
    CHECK(hf_int(c, "text_config.rms_norm_eps", 0, &i) == -1 && strstr(bs_last_error(), "rms_norm_eps"));
    CHECK(hf_int(c, "text_config.missing", 7, &i) == 0 && i == 7);
    CHECK(hf_int(c, "text_config.layer_types", 3, &i) == 0 && i == 3);    /* null -> default */
    CHECK(hf_int_req(c, "num_hidden_layers", &i) == -1 && strstr(bs_last_error(), "num_hidden_layers"));
    CHECK(hf_float_req(c, "text_config.rope_theta", &d) == 0 && d == 1e7);
    CHECK(hf_float(c, "text_config.num_hidden_layers", 0, &d) == 0 && d == 64);
    CHECK(hf_float(c, "architectures", 0, &d) == -1);
    CHECK(hf_bool(c, "tie_word_embeddings", true, &b) == 0 && !b);
    CHECK(hf_bool(c, "text_config.num_hidden_layers", true, &b) == -1);
    CHECK_STR(hf_str(c, "text_config.model_type", NULL), "qwen3_5_text");
    CHECK_STR(hf_str(c, "nope", "dflt"), "dflt");
    CHECK(hf_str(c, "tie_word_embeddings", "x") == NULL);
    CHECK(hf_int_array(c, "text_config.mrope_section", arr, 4, &n) == 0 && n == 3 && arr[2] == 10);
    CHECK(hf_int_array(c, "text_config.mrope_section", arr, 2, &n) == -1);
    CHECK(hf_int_array(c, "absent", arr, 4, &n) == 0 && n == 0);
    CHECK(hf_get(c, "text_config.num_hidden_layers.x") == NULL && hf_get(c, "a..b") == NULL);
    json_decref(c);
    write_text(path, "{\"a\":1,\n\"a\":2}");
    CHECK(bs_json_load_file(path) == NULL && strstr(bs_last_error(), "line 2"));
    CHECK(bs_json_load_file(tmp_path("none.json")) == NULL);
    unlink(path);
}

int main(void) {
    const char *t = getenv("BS_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s", t && *t ? t : "/tmp");
    test_round_trip(1 << 20);
    test_round_trip(1);
    test_round_trip(7);
    test_truncations();
    test_hostile();
    test_sharded();
    test_writer_errors();
    test_hf_config();
    return test_summary("test_safetensors");
}
