/* make_seeds.c: writes the fuzzers' seed corpus with bitspark's own writers:
 * fuzz_make_seeds <dir> creates <dir>/gguf/... and <dir>/safetensors/... (each file < 10 KB). */
#include "formats/gguf.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *out_dir;

static const char *path_of(const char *kind, const char *name) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s/%s", out_dir, kind, name);
    return p;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131u + seed * 17u + 3u);
}

static void die(const char *what) {
    fprintf(stderr, "make_seeds: %s: %s\n", what, bs_last_error());
    exit(1);
}

/* One GGUF: metadata of every kind plus the given tensors (data: a byte pattern). */
static void gguf_seed(const char *name, uint32_t align, uint32_t version, int n_t,
                      const char *const *names, const int *types, const int64_t (*ne)[2],
                      int n_vocab) {
    gguf_writer *w = gguf_w_open(path_of("gguf", name));
    if (!w) die(name);
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_u32(w, "qwen35.block_count", 2);
    gguf_w_set_f32(w, "qwen35.rope.freq_base", 1e7f);
    gguf_w_set_bool(w, "t.bool", true);
    gguf_w_set_u64(w, "t.u64", 1ull << 40);
    int32_t taps[3] = {1, 4, 6};
    gguf_w_set_arr_i32(w, "dspark.dspark.target_layers", taps, 3);
    float f[2] = {-9, 9};
    gguf_w_set_arr_f32(w, "t.arr_f32", f, 2);
    if (n_vocab) {
        char **v = malloc(sizeof(char *) * (size_t)n_vocab);
        for (int i = 0; i < n_vocab; i++) { v[i] = malloc(8); snprintf(v[i], 8, "t%d", i); }
        gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v, (uint64_t)n_vocab);
        for (int i = 0; i < n_vocab; i++) free(v[i]);
        free(v);
    }
    gguf_value inner[2], outer;
    memset(inner, 0, sizeof inner);
    memset(&outer, 0, sizeof outer);
    inner[0].type = inner[1].type = GGUF_TYPE_ARRAY;
    inner[0].arr_type = inner[1].arr_type = GGUF_TYPE_INT32;
    inner[0].n = 3, inner[0].arr = taps, inner[1].n = 1, inner[1].arr = taps;
    outer.type = GGUF_TYPE_ARRAY, outer.arr_type = GGUF_TYPE_ARRAY, outer.n = 2, outer.arr = inner;
    gguf_w_set_value(w, "t.nested", &outer);
    if (align) gguf_w_set_u32(w, "general.alignment", align);
    uint64_t total = 0;
    for (int i = 0; i < n_t; i++) {
        if (gguf_w_add_tensor(w, names[i], types[i], 2, ne[i]) < 0) die(names[i]);
        total += bs_tensor_size(types[i], ne[i][0], (uint64_t)ne[i][1]);
    }
    uint8_t *buf = malloc(total ? total : 1);
    fill(buf, total, (unsigned)n_t);
    if (gguf_w_write(w, buf, total) || gguf_w_close(w)) die(name);
    free(buf);
    if (version != 3) {   /* v2 has the same layout; patch the version field */
        FILE *fp = fopen(path_of("gguf", name), "r+b");
        fseek(fp, 4, SEEK_SET);
        fwrite(&version, 4, 1, fp);
        fclose(fp);
    }
}

/* A Bonsai 2 file's keys: the Hadamard fold (explicit signs for widths 64 and 128, a regrouped
 * ssm_out) over a PTQ1_0 matrix and an inverse-folded token table. */
static void fold_seed(void) {
    gguf_writer *w = gguf_w_open(path_of("gguf", "bonsai2-fold.gguf"));
    if (!w) die("bonsai2-fold.gguf");
    int32_t widths[2] = {64, 128}, signs[192];
    for (int i = 0; i < 192; i++) signs[i] = (i * 7 + i / 5) % 3 ? 1 : -1;
    const char *names[] = {"output.weight", "blk.0.ssm_out.weight", "blk.0.attn_qkv.weight"}, *inv[] = {"token_embd.weight"};
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_u32(w, "prism.hadamard.version", 1);
    gguf_w_set_u32(w, "prism.hadamard.block_size", 64);
    gguf_w_set_str(w, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
    gguf_w_set_str(w, "prism.hadamard.axis", "input-last-dimension");
    gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_widths", widths, 2);
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_values", signs, 192);
    gguf_w_set_arr_str(w, "prism.hadamard.weight_names", names, 3);
    gguf_w_set_arr_str(w, "prism.hadamard.inverse_weight_names", inv, 1);
    gguf_w_set_bool(w, "prism.hadamard.gdn_v_grouped", true);
    const int64_t ne[2] = {128, 2};
    if (gguf_w_add_tensor(w, "blk.0.ssm_out.weight", BS_PTQ1_0, 2, ne) < 0) die("bonsai2-fold.gguf");
    uint8_t data[2 * 28];
    fill(data, sizeof data, 9);
    if (gguf_w_write(w, data, sizeof data) || gguf_w_close(w)) die("bonsai2-fold.gguf");
}

static void gguf_seeds(void) {
    const char *n1[] = {"token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"};
    const int t1[] = {BS_Q1_0, BS_Q8_0, BS_F32};
    const int64_t ne1[][2] = {{128, 4}, {32, 2}, {16, 1}};
    gguf_seed("small-q1_0.gguf", 0, 3, 3, n1, t1, ne1, 8);
    const char *n2[] = {"a.weight", "b.weight"};
    const int t2[] = {BS_Q2_0, BS_BF16};
    const int64_t ne2[][2] = {{1024, 2}, {8, 2}};
    gguf_seed("legacy-q2_0.gguf", 0, 3, 2, n2, t2, ne2, 0);
    const int t3[] = {BS_Q2_0_G64, BS_F16};
    gguf_seed("g64-align64.gguf", 64, 3, 2, n2, t3, ne2, 0);
    const int t4[] = {BS_Q4_1, BS_Q6_K};
    const int64_t ne4[][2] = {{64, 2}, {256, 1}};
    gguf_seed("q4_1-q6_k-v2.gguf", 0, 2, 2, n2, t4, ne4, 0);
    gguf_seed("meta-only.gguf", 0, 3, 0, NULL, NULL, NULL, 40);
    fold_seed();
}

static void st_seed(const char *name, int n_t, const char *const *names, const int *dtypes,
                    const int64_t (*shape)[2], const int *n_dims, bool meta) {
    st_writer *w = st_w_open(path_of("safetensors", name));
    if (!w) die(name);
    if (meta) { st_w_set_meta(w, "format", "pt"); st_w_set_meta(w, "bitspark", "seed"); }
    uint64_t total = 0;
    for (int i = 0; i < n_t; i++) {
        if (st_w_add_tensor(w, names[i], dtypes[i], n_dims[i], shape[i]) < 0) die(names[i]);
        uint64_t n = st_dtype_size(dtypes[i]);
        for (int d = 0; d < n_dims[i]; d++) n *= (uint64_t)shape[i][d];
        total += n;
    }
    uint8_t *buf = malloc(total ? total : 1);
    fill(buf, total, (unsigned)n_t);
    if (st_w_write(w, buf, total) || st_w_close(w)) die(name);
    free(buf);
}

static void st_seeds(void) {
    const char *n1[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    const int d1[] = {ST_BF16, ST_F32, ST_F16};
    const int64_t s1[][2] = {{8, 4}, {4, 0}, {8, 4}};
    const int nd1[] = {2, 1, 2};
    st_seed("small.safetensors", 3, n1, d1, s1, nd1, true);
    const char *n2[] = {"scalar", "empty", "ints", "bools", "f8"};
    const int d2[] = {ST_F64, ST_I32, ST_I64, ST_BOOL, ST_F8_E4M3};
    const int64_t s2[][2] = {{0, 0}, {0, 3}, {2, 2}, {3, 0}, {4, 4}};
    const int nd2[] = {0, 2, 2, 1, 2};
    st_seed("dtypes.safetensors", 5, n2, d2, s2, nd2, false);
    st_seed("no-tensors.safetensors", 0, NULL, NULL, NULL, NULL, true);
}

static void raw_seed(const char *kind, const char *name, const void *p, size_t n) {
    FILE *fp = fopen(path_of(kind, name), "wb");
    if (!fp || fwrite(p, 1, n, fp) != n) { fprintf(stderr, "make_seeds: %s failed\n", name); exit(1); }
    fclose(fp);
}

/* Edge cases the writers never produce: a cut-off file, an old version, a safetensors header
 * padded with spaces whose entries are out of offset order, and one with a bad dtype. */
static void edge_seeds(void) {
    size_t n;
    char *g = bs_read_file(path_of("gguf", "small-q1_0.gguf"), &n);
    if (!g) die("read seed");
    raw_seed("gguf", "edge-truncated.gguf", g, n / 3);
    memcpy(g + 4, "\1\0\0\0", 4);
    raw_seed("gguf", "edge-v1.gguf", g, 64);
    free(g);
    const char *hdrs[2] = {
        "{\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
        "\"__metadata__\":{\"k\":\"v\"}}      ",
        "{\"a\":{\"dtype\":\"F4\",\"shape\":[2,2],\"data_offsets\":[0,2]}}",
    };
    const char *names[2] = {"edge-unsorted.safetensors", "edge-bad-dtype.safetensors"};
    for (int i = 0; i < 2; i++) {
        uint8_t buf[512];
        uint64_t len = strlen(hdrs[i]);
        memcpy(buf, &len, 8);
        memcpy(buf + 8, hdrs[i], len);
        memset(buf + 8 + len, 0x3c, 8);
        raw_seed("safetensors", names[i], buf, 8 + len + 8);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: fuzz_make_seeds DIR\n"); return 2; }
    out_dir = argv[1];
    mkdir(out_dir, 0755);
    mkdir(path_of("gguf", ""), 0755);
    mkdir(path_of("safetensors", ""), 0755);
    gguf_seeds();
    st_seeds();
    edge_seeds();
    return 0;
}
