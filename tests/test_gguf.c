/* test_gguf.c: GGUF writer -> reader round trips (every value type, nested and string arrays,
 * alignment 32 and 64, chunked writes, mmap / no-mmap / meta-only), Q2_0 layout resolution, and
 * hostile inputs: every truncation, bad magic and versions, absurd counts and lengths, bad
 * dimensions, bad offsets, unknown and ambiguous types, duplicates. Each must fail with a
 * non-empty one-line error and no crash. */
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[512];

static const char *tmp_path(const char *name) {
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/test_gguf_%d_%s", tmpdir, (int)getpid(), name);
    return p[k];
}

static uint8_t pattern(uint64_t i, int t) { return (uint8_t)(i * 31 + (uint64_t)t * 7 + 1); }

/* --- the sample file --------------------------------------------------------------------- */
typedef struct { const char *name; int type, n_dims; int64_t ne[4]; } spec;

static const spec legacy_tensors[] = {
    {"a.f32", BS_F32, 2, {8, 3}},
    {"b.q8_0", BS_Q8_0, 2, {64, 2}},
    {"c.q2_0", BS_Q2_0, 2, {2048, 2}},     /* decisive: only g128 fits its room tightly */
    {"d.q2_0.tiny", BS_Q2_0, 2, {128, 1}}, /* both layouts fit: follows the file's layout */
    {"e.q1_0", BS_Q1_0, 3, {128, 2, 2}},
    {"f.bf16", BS_BF16, 4, {4, 1, 1, 2}},
    {"g.last", BS_F32, 1, {5}},
};
static const spec g64_tensors[] = {
    {"x.g64", BS_Q2_0_G64, 2, {2048, 2}},
    {"y.g64.tiny", BS_Q2_0_G64, 1, {64}},
    {"z.q6_k", BS_Q6_K, 2, {256, 2}},
};

static const char *vocab[] = {"!", "\"", "hello", "", "w\xc3\xb6rld", "<|im_end|>"};

static void set_all_metadata(gguf_writer *w) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_TYPE_UINT8; v.u64 = 200; gguf_w_set_value(w, "t.u8", &v);
    v.type = GGUF_TYPE_INT8; v.i64 = -100; gguf_w_set_value(w, "t.i8", &v);
    v.type = GGUF_TYPE_UINT16; v.u64 = 60000; gguf_w_set_value(w, "t.u16", &v);
    v.type = GGUF_TYPE_INT16; v.i64 = -30000; gguf_w_set_value(w, "t.i16", &v);
    gguf_w_set_u32(w, "t.u32", 4000000000u);
    gguf_w_set_i32(w, "t.i32", -2000000000);
    gguf_w_set_f32(w, "t.f32", 1.5f);
    gguf_w_set_bool(w, "t.bool", true);
    gguf_w_set_str(w, "t.str", "qwen35");
    gguf_w_set_u64(w, "t.u64", 0xfedcba9876543210ull);
    v.type = GGUF_TYPE_INT64; v.i64 = -(1ll << 62); gguf_w_set_value(w, "t.i64", &v);
    v.type = GGUF_TYPE_FLOAT64; v.f64 = -2.25e300; gguf_w_set_value(w, "t.f64", &v);
    int32_t ai[5] = {1, 4, 6, -7, 2147483647};
    gguf_w_set_arr_i32(w, "t.arr_i32", ai, 5);
    float af[3] = {0.5f, -1e-7f, 3e38f};
    gguf_w_set_arr_f32(w, "t.arr_f32", af, 3);
    gguf_w_set_arr_str(w, "t.arr_str", vocab, BS_ARRAY_LEN(vocab));
    gguf_w_set_arr_str(w, "t.arr_empty", vocab, 0);
    uint8_t bools[3] = {1, 0, 1};
    v.type = GGUF_TYPE_ARRAY; v.arr_type = GGUF_TYPE_BOOL; v.n = 3; v.arr = bools;
    gguf_w_set_value(w, "t.arr_bool", &v);
    uint16_t u16s[2] = {1, 65535};
    v.arr_type = GGUF_TYPE_UINT16; v.n = 2; v.arr = u16s;
    gguf_w_set_value(w, "t.arr_u16", &v);
    uint64_t u64s[2] = {0, 1ull << 63};
    v.arr_type = GGUF_TYPE_UINT64; v.n = 2; v.arr = u64s;
    gguf_w_set_value(w, "t.arr_u64", &v);
    /* nested: [[1,4,6,-7,2^31-1], ["!", "\"", "hello"]] and one more level: [[[...]]] */
    gguf_value inner[2], outer[1];
    memset(inner, 0, sizeof inner);
    inner[0].type = GGUF_TYPE_ARRAY; inner[0].arr_type = GGUF_TYPE_INT32; inner[0].n = 5; inner[0].arr = ai;
    gguf_str ss[3] = {{1, "!"}, {1, "\""}, {5, "hello"}};
    inner[1].type = GGUF_TYPE_ARRAY; inner[1].arr_type = GGUF_TYPE_STRING; inner[1].n = 3; inner[1].arr = ss;
    v.arr_type = GGUF_TYPE_ARRAY; v.n = 2; v.arr = inner;
    gguf_w_set_value(w, "t.nested", &v);
    memset(outer, 0, sizeof outer);
    outer[0] = v;                        /* shallow is fine: set_value deep-copies */
    gguf_value v2 = v;
    v2.n = 1; v2.arr = outer;
    gguf_w_set_value(w, "t.nested3", &v2);
    gguf_w_set_str(w, "t.removed", "gone");
    gguf_w_remove(w, "t.removed");
    gguf_w_set_u32(w, "t.replaced", 1);
    gguf_w_set_u32(w, "t.replaced", 2);
}

/* Write a file of `specs` with alignment `align` (0: default), streaming data in chunks of
 * `chunk` bytes (which cross tensor boundaries). */
static int write_sample(const char *path, const spec *specs, int n, uint32_t align, size_t chunk) {
    gguf_writer *w = gguf_w_open(path);
    if (!w) return -1;
    set_all_metadata(w);
    if (align) gguf_w_set_u32(w, "general.alignment", align);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (gguf_w_add_tensor(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].ne) != i) {
            gguf_w_abort(w);
            return -1;
        }
        total += bs_tensor_size(specs[i].type, specs[i].ne[0],
                                (uint64_t)(specs[i].ne[1] ? specs[i].ne[1] : 1) *
                                    (uint64_t)(specs[i].ne[2] ? specs[i].ne[2] : 1) *
                                    (uint64_t)(specs[i].ne[3] ? specs[i].ne[3] : 1));
    }
    uint8_t *all = malloc(total), *p = all;
    for (int i = 0; i < n; i++) {
        int64_t rows = 1;
        for (int d = 1; d < specs[i].n_dims; d++) rows *= specs[i].ne[d];
        uint64_t sz = bs_tensor_size(specs[i].type, specs[i].ne[0], (uint64_t)rows);
        for (uint64_t j = 0; j < sz; j++) *p++ = pattern(j, i);
    }
    for (uint64_t off = 0; off < total; off += chunk) {
        size_t k = total - off < chunk ? (size_t)(total - off) : chunk;
        if (gguf_w_write(w, all + off, k)) { free(all); gguf_w_abort(w); return -1; }
    }
    free(all);
    return gguf_w_close(w);
}

static void check_metadata(const gguf_file *f) {
    const gguf_kv *kv;
    int64_t i64;
    uint32_t u32;
    uint64_t u64;
    float f32;
    bool b;
    CHECK((kv = gguf_find_kv(f, "t.u8")) && kv->val.type == GGUF_TYPE_UINT8 && kv->val.u64 == 200);
    CHECK((kv = gguf_find_kv(f, "t.i8")) && kv->val.type == GGUF_TYPE_INT8 && kv->val.i64 == -100);
    CHECK((kv = gguf_find_kv(f, "t.u16")) && kv->val.type == GGUF_TYPE_UINT16 && kv->val.u64 == 60000);
    CHECK((kv = gguf_find_kv(f, "t.i16")) && kv->val.type == GGUF_TYPE_INT16 && kv->val.i64 == -30000);
    CHECK(gguf_get_u32(f, "t.u32", &u32) == 0 && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "t.i32", &i64) == 0 && i64 == -2000000000);
    CHECK(gguf_get_u32(f, "t.i32", &u32) == -1);                 /* negative: out of range */
    CHECK(gguf_get_f32(f, "t.f32", &f32) == 0 && f32 == 1.5f);
    CHECK(gguf_get_bool(f, "t.bool", &b) == 0 && b);
    CHECK_STR(gguf_get_str(f, "t.str"), "qwen35");
    CHECK(gguf_get_u64(f, "t.u64", &u64) == 0 && u64 == 0xfedcba9876543210ull);
    CHECK(gguf_get_i64(f, "t.u64", &i64) == -1 && strstr(bs_last_error(), "t.u64"));
    CHECK(gguf_get_i64(f, "t.i64", &i64) == 0 && i64 == -(1ll << 62));
    CHECK((kv = gguf_find_kv(f, "t.f64")) && kv->val.type == GGUF_TYPE_FLOAT64 && kv->val.f64 == -2.25e300);
    CHECK(gguf_get_arr_n(f, "t.arr_i32") == 5);
    CHECK(gguf_get_arr_i64(f, "t.arr_i32", 3, &i64) == 0 && i64 == -7);
    CHECK(gguf_get_arr_i64(f, "t.arr_i32", 4, &i64) == 0 && i64 == 2147483647);
    CHECK(gguf_get_arr_i64(f, "t.arr_i32", 5, &i64) == -1);
    CHECK(gguf_get_arr_f32(f, "t.arr_f32", 2, &f32) == 0 && f32 == 3e38f);
    CHECK(gguf_get_arr_f32(f, "t.arr_f32", 1, &f32) == 0 && f32 == -1e-7f);
    CHECK(gguf_get_arr_n(f, "t.arr_str") == BS_ARRAY_LEN(vocab));
    for (size_t i = 0; i < BS_ARRAY_LEN(vocab); i++) CHECK_STR(gguf_get_arr_str(f, "t.arr_str", i), vocab[i]);
    CHECK(gguf_get_arr_str(f, "t.arr_i32", 0) == NULL);
    CHECK((kv = gguf_find_kv(f, "t.arr_empty")) && kv->val.type == GGUF_TYPE_ARRAY && kv->val.n == 0 &&
          kv->val.arr_type == GGUF_TYPE_STRING);
    CHECK((kv = gguf_find_kv(f, "t.arr_bool")) && kv->val.arr_type == GGUF_TYPE_BOOL && kv->val.n == 3 &&
          memcmp(kv->val.arr, "\1\0\1", 3) == 0);
    CHECK(gguf_get_arr_i64(f, "t.arr_u16", 1, &i64) == 0 && i64 == 65535);
    CHECK(gguf_get_arr_i64(f, "t.arr_u64", 1, &i64) == -1);      /* 2^63 does not fit */
    kv = gguf_find_kv(f, "t.nested");
    CHECK(kv && kv->val.arr_type == GGUF_TYPE_ARRAY && kv->val.n == 2);
    if (kv && kv->val.n == 2) {
        const gguf_value *in = kv->val.arr;
        CHECK(in[0].type == GGUF_TYPE_ARRAY && in[0].arr_type == GGUF_TYPE_INT32 && in[0].n == 5);
        CHECK(gguf_arr_elem_i64(&in[0], 1, &i64) == 0 && i64 == 4);
        CHECK(in[1].arr_type == GGUF_TYPE_STRING && in[1].n == 3 &&
              strcmp(((gguf_str *)in[1].arr)[2].s, "hello") == 0 && ((gguf_str *)in[1].arr)[2].len == 5);
    }
    kv = gguf_find_kv(f, "t.nested3");
    CHECK(kv && kv->val.n == 1 && ((gguf_value *)kv->val.arr)[0].n == 2);
    CHECK(gguf_find_kv(f, "t.removed") == NULL);
    CHECK(gguf_get_u32(f, "t.replaced", &u32) == 0 && u32 == 2);
    CHECK(gguf_get_u32(f, "t.missing", &u32) == -1 && strstr(bs_last_error(), "t.missing"));
    CHECK(gguf_get_str(f, "t.u8") == NULL);
    CHECK(gguf_get_f32(f, "t.str", &f32) == -1);
}

static void check_tensors(const gguf_file *f, const spec *specs, int n, bool with_data) {
    CHECK_EQ_INT(f->n_tensors, n);
    for (int i = 0; i < n && (uint64_t)i < f->n_tensors; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, specs[i].name);
        CHECKF(t == &f->tensors[i], "tensor %s", specs[i].name);
        if (!t) continue;
        CHECK_EQ_INT(t->type, specs[i].type);
        CHECK_EQ_INT(t->file_type, bs_type_get(specs[i].type)->ggml_id);
        CHECK_EQ_INT(t->n_dims, specs[i].n_dims);
        int64_t rows = 1;
        for (int d = 0; d < 4; d++) {
            CHECK_EQ_INT(t->ne[d], d < specs[i].n_dims ? specs[i].ne[d] : 1);
            if (d) rows *= t->ne[d];
        }
        CHECK_EQ_INT(t->nbytes, bs_tensor_size(t->type, t->ne[0], (uint64_t)rows));
        CHECK(t->offset % f->alignment == 0);
        CHECK((f->data_offset + t->offset) % f->alignment == 0);
        if (!with_data) { CHECK(t->data == NULL); continue; }
        bool same = t->data != NULL;
        for (uint64_t j = 0; same && j < t->nbytes; j++)
            same = ((const uint8_t *)t->data)[j] == pattern(j, i);
        CHECKF(same, "tensor %s data", t->name);
    }
    CHECK(gguf_find_tensor(f, "nope") == NULL);
}

static void test_round_trip(const spec *specs, int n, uint32_t align, size_t chunk) {
    const char *path = tmp_path("rt.gguf");
    CHECKF(write_sample(path, specs, n, align, chunk) == 0, "%s", bs_last_error());
    gguf_file *f = gguf_open(path, 0);
    gguf_file *g = gguf_open(path, GGUF_OPEN_NO_MMAP);
    gguf_file *m = gguf_open(path, GGUF_OPEN_META_ONLY);
    CHECKF(f && g && m, "%s", bs_last_error());
    if (f && g && m) {
        CHECK(f->version == 3 && f->mmapped && !g->mmapped && m->base == NULL);
        CHECK_EQ_INT(f->alignment, align ? align : 32);
        CHECK(f->data_offset % f->alignment == 0);
        check_metadata(f);
        check_metadata(g);
        check_metadata(m);
        check_tensors(f, specs, n, true);
        check_tensors(g, specs, n, true);
        check_tensors(m, specs, n, false);
        CHECK(f->n_kv == g->n_kv && f->data_offset == g->data_offset);
        for (uint64_t i = 0; i < f->n_tensors; i++)
            CHECK(f->tensors[i].offset == m->tensors[i].offset &&
                  memcmp(f->tensors[i].data, g->tensors[i].data, (size_t)f->tensors[i].nbytes) == 0);
        /* The same image parsed from memory, and as GGUF v2 (same layout). */
        size_t len;
        char *img = bs_read_file(path, &len);
        gguf_file *h = img ? gguf_open_memory(img, len) : NULL;
        CHECK(h && h->n_tensors == f->n_tensors && h->n_kv == f->n_kv);
        gguf_close(h);
        if (img) {
            img[4] = 2;
            h = gguf_open_memory(img, len);
            CHECK(h && h->version == 2);
            if (h) check_tensors(h, specs, n, true);
            gguf_close(h);
        }
        free(img);
    }
    gguf_close(f);
    gguf_close(g);
    gguf_close(m);
    unlink(path);
}

/* Every proper prefix of a valid file that cuts into the header or a tensor's data fails. */
static void test_truncations(void) {
    const char *path = tmp_path("trunc.gguf");
    CHECK(write_sample(path, legacy_tensors, BS_ARRAY_LEN(legacy_tensors), 0, 100) == 0);
    size_t len;
    uint8_t *img = (uint8_t *)bs_read_file(path, &len);
    gguf_file *f = img ? gguf_open_memory(img, len) : NULL;
    CHECK(f != NULL);
    if (!f) { free(img); return; }
    uint64_t need = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        need = BS_MAX(need, f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes);
    gguf_close(f);
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = malloc(n ? n : 1);   /* exact-size copy so ASan sees any overread */
        memcpy(copy, img, n);
        bs_clear_error();
        gguf_file *g = gguf_open_memory(copy, n);
        bool ok = n < need ? (g == NULL && bs_last_error()[0] && strcmp(bs_last_error(), "unknown error"))
                           : g != NULL;
        if (!ok && bad++ < 5) fprintf(stderr, "truncation at %zu of %zu: %s\n", n, len, bs_last_error());
        gguf_close(g);
        free(copy);
    }
    CHECKF(bad == 0, "%d truncations misbehaved", bad);
    /* One through the file API, to see the path in the message. */
    FILE *fp = fopen(path, "wb");
    fwrite(img, 1, len / 2, fp);
    fclose(fp);
    CHECK(gguf_open(path, 0) == NULL && strstr(bs_last_error(), path));
    CHECK(gguf_open(tmp_path("does-not-exist.gguf"), 0) == NULL);
    free(img);
    unlink(path);
}

/* --- hand-made hostile files --------------------------------------------------------------- */
typedef struct { uint8_t p[4096]; size_t n; } buf;
static void put(buf *b, const void *x, size_t n) { memcpy(b->p + b->n, x, n); b->n += n; }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void hdr(buf *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    b->n = 0;
    u32(b, GGUF_MAGIC); u32(b, version); u64(b, nt); u64(b, nkv);
}
static void kv_u32(buf *b, const char *k, uint32_t v) { str(b, k); u32(b, GGUF_TYPE_UINT32); u32(b, v); }
static void tinfo(buf *b, const char *name, uint32_t nd, const int64_t *ne, uint32_t type, uint64_t off) {
    str(b, name); u32(b, nd);
    for (uint32_t d = 0; d < nd; d++) u64(b, (uint64_t)ne[d]);
    u32(b, type); u64(b, off);
}
static void pad_data(buf *b, size_t align, size_t data_bytes) {
    while (b->n % align) b->p[b->n++] = 0;
    memset(b->p + b->n, 0x5a, data_bytes);
    b->n += data_bytes;
}

/* Parse b and expect failure whose message contains `want` (if not NULL). */
static void expect_fail(const buf *b, const char *want, const char *what) {
    uint8_t *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    bs_clear_error();
    gguf_file *f = gguf_open_memory(copy, b->n);
    const char *e = bs_last_error();
    CHECKF(f == NULL, "%s: parsed", what);
    CHECKF(e[0] && strcmp(e, "unknown error") && !strchr(e, '\n'), "%s: error '%s'", what, e);
    if (want) CHECKF(strstr(e, want) != NULL, "%s: error '%s' lacks '%s'", what, e, want);
    gguf_close(f);
    free(copy);
}

static void expect_ok(const buf *b, const char *what, int type0) {
    gguf_file *f = gguf_open_memory(b->p, b->n);
    CHECKF(f != NULL, "%s: %s", what, bs_last_error());
    if (f && type0 != BS_TYPE_INVALID) CHECKF(f->tensors[0].type == type0, "%s: type %d", what, f->tensors[0].type);
    gguf_close(f);
}

static void test_hostile(void) {
    buf b;
    int64_t ne1[1] = {32}, ne2[2] = {128, 1};
    /* the valid base case used by the variations below */
    hdr(&b, 3, 1, 1); kv_u32(&b, "k", 1); tinfo(&b, "t", 1, ne1, BS_F32, 0); pad_data(&b, 32, 128);
    expect_ok(&b, "base", BS_F32);
    b.p[0] = 'X'; expect_fail(&b, "magic", "bad magic");
    hdr(&b, 1, 0, 0); expect_fail(&b, "version 1", "version 1");
    hdr(&b, 99, 0, 0); expect_fail(&b, "99", "version 99");
    hdr(&b, 0x03000000, 0, 0); expect_fail(&b, "big-endian", "big-endian");
    hdr(&b, 3, 0, 1ull << 60); expect_fail(&b, NULL, "n_kv 2^60");
    hdr(&b, 3, 1ull << 60, 0); expect_fail(&b, NULL, "n_tensors 2^60");
    hdr(&b, 3, 0, 3); kv_u32(&b, "a", 1); expect_fail(&b, "metadata count", "n_kv larger than present");
    hdr(&b, 3, 0, 1); u64(&b, 1ull << 62); u64(&b, 0); u64(&b, 0); expect_fail(&b, "string length", "key length 2^62");
    hdr(&b, 3, 0, 1); str(&b, "s"); u32(&b, GGUF_TYPE_STRING); u64(&b, ~0ull); expect_fail(&b, "string length", "value length 2^64-1");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT32); u64(&b, 1ull << 61);
    expect_fail(&b, "array", "array count 2^61");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_STRING); u64(&b, 1ull << 40);
    expect_fail(&b, "array", "string array count 2^40");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, GGUF_TYPE_ARRAY);
    for (int i = 0; i < 100; i++) { u32(&b, GGUF_TYPE_ARRAY); u64(&b, 1); }
    expect_fail(&b, "nested", "arrays nested 100 deep");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, GGUF_TYPE_ARRAY); u32(&b, 13); u64(&b, 0); expect_fail(&b, "type", "array element type 13");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, 13); u32(&b, 0); expect_fail(&b, "type", "value type 13");
    hdr(&b, 3, 0, 1); str(&b, "a"); u32(&b, GGUF_TYPE_BOOL); b.p[b.n++] = 2; expect_fail(&b, "bool", "bool 2");
    hdr(&b, 3, 0, 1); str(&b, ""); u32(&b, GGUF_TYPE_UINT32); u32(&b, 0); expect_fail(&b, "empty", "empty key");
    hdr(&b, 3, 0, 2); kv_u32(&b, "dup", 1); kv_u32(&b, "dup", 2); expect_fail(&b, "duplicate metadata key 'dup'", "duplicate key");
    const uint32_t bad_align[] = {0, 3, 48, 1u << 31};
    for (size_t i = 0; i < BS_ARRAY_LEN(bad_align); i++) {
        hdr(&b, 3, 0, 1); kv_u32(&b, "general.alignment", bad_align[i]); expect_fail(&b, "alignment", "bad alignment");
    }
    hdr(&b, 3, 0, 1); str(&b, "general.alignment"); u32(&b, GGUF_TYPE_STRING); str(&b, "32");
    expect_fail(&b, "general.alignment", "string alignment");
    /* tensor infos */
    int64_t ne5[5] = {32, 1, 1, 1, 1};
    hdr(&b, 3, 1, 0); tinfo(&b, "t5", 5, ne5, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "'t5': 5 dimensions", "n_dims 5");
    hdr(&b, 3, 1, 0); tinfo(&b, "t0", 0, ne5, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "dimensions", "n_dims 0");
    int64_t big[3] = {1ll << 32, 1ll << 32, 1ll << 32};
    hdr(&b, 3, 1, 0); tinfo(&b, "huge", 3, big, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "overflows", "ne product overflow");
    int64_t big2[2] = {1ll << 40, 1ll << 22};   /* element count fits in int64, bytes do not fit */
    hdr(&b, 3, 1, 0); tinfo(&b, "huge2", 2, big2, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "'huge2': byte size overflows", "huge byte size");
    int64_t big3[2] = {1ll << 40, 1ll << 20};   /* 2^62 bytes: fits in u64, not in the file */
    hdr(&b, 3, 1, 0); tinfo(&b, "huge3", 2, big3, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "'huge3'", "huge tensor");
    int64_t neg[2] = {32, -1};
    hdr(&b, 3, 1, 0); tinfo(&b, "neg", 2, neg, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "'neg'", "negative dim");
    int64_t zero[1] = {0};
    hdr(&b, 3, 1, 0); tinfo(&b, "zero", 1, zero, BS_F32, 0); pad_data(&b, 32, 128); expect_fail(&b, "'zero'", "zero dim");
    hdr(&b, 3, 1, 0); tinfo(&b, "mis", 1, ne1, BS_F32, 8); pad_data(&b, 32, 256); expect_fail(&b, "not a multiple of the alignment", "misaligned offset");
    hdr(&b, 3, 1, 0); tinfo(&b, "far", 1, ne1, BS_F32, 4096); pad_data(&b, 32, 128); expect_fail(&b, "out of range", "offset out of range");
    hdr(&b, 3, 1, 0); tinfo(&b, "short", 1, ne1, BS_F32, 0); pad_data(&b, 32, 100); expect_fail(&b, "'short'", "data past end");
    hdr(&b, 3, 1, 0); tinfo(&b, "nodata", 1, ne1, BS_F32, 0); expect_fail(&b, NULL, "no data section");
    hdr(&b, 3, 2, 0); tinfo(&b, "o1", 1, ne1, BS_F32, 0); tinfo(&b, "o2", 1, ne1, BS_F32, 64); pad_data(&b, 32, 256);
    expect_fail(&b, "overlaps", "overlap");
    hdr(&b, 3, 2, 0); tinfo(&b, "s1", 1, ne1, BS_F32, 0); tinfo(&b, "s2", 1, ne1, BS_F32, 0); pad_data(&b, 32, 256);
    expect_fail(&b, "overlaps", "same offset");
    hdr(&b, 3, 1, 0); tinfo(&b, "unk", 1, ne1, 99, 0); pad_data(&b, 32, 128); expect_fail(&b, "'unk': unknown type id 99", "unknown type");
    hdr(&b, 3, 1, 0); tinfo(&b, "i64", 1, ne1, 27, 0); pad_data(&b, 32, 256); expect_fail(&b, "27", "type i64 (not supported)");
    int64_t ne33[1] = {33};
    hdr(&b, 3, 1, 0); tinfo(&b, "blk", 1, ne33, BS_Q8_0, 0); pad_data(&b, 32, 128); expect_fail(&b, "'blk'", "row not a block multiple");
    hdr(&b, 3, 2, 0); tinfo(&b, "dup", 1, ne1, BS_F32, 0); tinfo(&b, "dup", 1, ne1, BS_F32, 128); pad_data(&b, 32, 256);
    expect_fail(&b, "duplicate tensor name 'dup'", "duplicate tensor");
    hdr(&b, 3, 1, 0); str(&b, ""); u32(&b, 1); u64(&b, 32); u32(&b, 0); u64(&b, 0); pad_data(&b, 32, 128);
    expect_fail(&b, "empty tensor name", "empty tensor name");
    /* id 42: a 128x1 tensor needs 34 (g128) or 36 (g64) bytes. */
    hdr(&b, 3, 2, 0); tinfo(&b, "q2", 2, ne2, 42, 0); tinfo(&b, "next", 1, ne1, BS_F32, 32); pad_data(&b, 32, 160);
    expect_fail(&b, "'q2': type id 42 with 32 bytes of room fits neither", "id 42 fits neither");
    hdr(&b, 3, 1, 0); tinfo(&b, "q2", 2, ne2, 42, 0); pad_data(&b, 32, 35); expect_ok(&b, "id 42 room 35", BS_Q2_0);
    hdr(&b, 3, 1, 0); tinfo(&b, "q2", 2, ne2, 42, 0); pad_data(&b, 32, 64); expect_ok(&b, "id 42 room 64", BS_Q2_0_G64);
    hdr(&b, 3, 1, 0); tinfo(&b, "q2", 2, ne2, 42, 0); pad_data(&b, 32, 30); expect_fail(&b, "fits neither", "id 42 room 30");
    /* id 42 with ne0 = 64: only the g64 layout suits the row at all */
    int64_t ne64[1] = {64};
    hdr(&b, 3, 1, 0); tinfo(&b, "q64", 1, ne64, 42, 0); pad_data(&b, 32, 32); expect_ok(&b, "id 42 ne0 64", BS_Q2_0_G64);
}

/* A file with both Q2_0 layouts decisively is rejected; a tiny ambiguous tensor follows the
 * decisive ones. */
static void test_q2_layouts(void) {
    const char *path = tmp_path("mixed.gguf");
    const spec mixed[] = {{"m.g128", BS_Q2_0, 2, {512, 4}}, {"m.g64", BS_Q2_0_G64, 2, {512, 4}}};
    CHECK(write_sample(path, mixed, 2, 0, 4096) == 0);
    CHECK(gguf_open(path, 0) == NULL && strstr(bs_last_error(), "one layout"));
    const spec small[] = {{"s.g128", BS_Q2_0, 2, {128, 2}}, {"s.big", BS_Q2_0, 2, {1024, 2}}};
    CHECK(write_sample(path, small, 2, 0, 4096) == 0);
    gguf_file *f = gguf_open(path, 0);
    CHECKF(f && f->tensors[0].type == BS_Q2_0 && f->tensors[1].type == BS_Q2_0, "%s", bs_last_error());
    gguf_close(f);
    unlink(path);
}

static void test_writer_errors(void) {
    const char *path = tmp_path("werr.gguf");
    int64_t ne[2] = {64, 2};
    gguf_writer *w = gguf_w_open(path);
    CHECK(w != NULL);
    if (!w) return;
    CHECK(gguf_w_add_tensor(w, "a", BS_Q8_0, 2, ne) == 0);
    CHECK(gguf_w_add_tensor(w, "a", BS_Q8_0, 2, ne) == -1);            /* duplicate */
    int64_t bad[2] = {33, 1};
    CHECK(gguf_w_add_tensor(w, "b", BS_Q8_0, 2, bad) == -1);           /* not a block multiple */
    CHECK(gguf_w_add_tensor(w, "c", 12345, 2, ne) == -1);              /* unknown type */
    CHECK(gguf_w_add_tensor(w, "d", BS_F32, 5, ne) == -1);             /* too many dims */
    uint8_t data[200] = {0};
    CHECK(gguf_w_write(w, data, 100) == 0);                            /* 136 bytes needed */
    CHECK(gguf_w_close(w) == -1 && strstr(bs_last_error(), "'a'"));
    CHECK(access(path, F_OK) != 0);                                    /* partial file removed */
    w = gguf_w_open(path);
    CHECK(gguf_w_add_tensor(w, "a", BS_Q8_0, 2, ne) == 0);
    CHECK(gguf_w_write(w, data, 200) == -1);                           /* past the last tensor */
    gguf_w_abort(w);
    CHECK(access(path, F_OK) != 0);
    w = gguf_w_open(path);                                             /* no tensors at all */
    gguf_w_set_str(w, "general.architecture", "none");
    CHECK(gguf_w_close(w) == 0);
    gguf_file *f = gguf_open(path, 0);
    CHECK(f && f->n_tensors == 0 && f->n_kv == 1);
    gguf_close(f);
    w = gguf_w_open(path);
    gguf_w_set_u32(w, "general.alignment", 24);
    CHECK(gguf_w_close(w) == -1 && strstr(bs_last_error(), "alignment"));
    CHECK(gguf_w_open("/nonexistent-dir/x.gguf") == NULL);
    unlink(path);
}

int main(void) {
    const char *t = getenv("BS_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s", t && *t ? t : "/tmp");
    int nl = (int)BS_ARRAY_LEN(legacy_tensors), ng = (int)BS_ARRAY_LEN(g64_tensors);
    test_round_trip(legacy_tensors, nl, 0, 1 << 20);
    test_round_trip(legacy_tensors, nl, 64, 7);
    test_round_trip(legacy_tensors, nl, 32, 1);
    test_round_trip(g64_tensors, ng, 0, 1000);
    test_round_trip(g64_tensors, ng, 64, 3);
    test_truncations();
    test_hostile();
    test_q2_layouts();
    test_writer_errors();
    return test_summary("test_gguf");
}
