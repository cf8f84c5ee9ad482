/* convert_mmproj.c: the vision tower of a Hugging Face Qwen3.5 / Qwen3-VL checkpoint
 * (model.visual.*) -> a clip GGUF with clip.projector_type = "qwen3vl_merger", in the layout
 * llama.cpp's converter writes with --mmproj (docs/vision.md, fixture README):
 *   - the Conv3d patch kernel [C, 3, 2, P, P] is split on its temporal axis into
 *     v.patch_embd.weight (t = 0) and v.patch_embd.weight.1 (t = 1), each ne {P, P, 3, C};
 *   - linear layers, norms and pos_embed keep their bytes' order (torch [out, in] = ne {in, out});
 *   - clip.vision.attention.layer_norm_epsilon is the *text* rms_norm_eps, as llama.cpp does;
 *   - norms, biases and the position table are F32; the patch kernels stay a float type.
 * A visual tensor this layout has no place for (deepstack mergers, ...) is an error, not a skip. */
#include "tools/convert.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "formats/safetensors.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t C, FF, depth, heads, patch, merge, temporal, S, out;
    double eps;
    float mean[3], std[3];
} vhp;

enum vkind { V_MATRIX, V_F32, V_PATCH0, V_PATCH1 };

typedef struct {
    char name[64];               /* GGUF name */
    const st_tensor *src;
    enum vkind kind;
    int type, n_dims;
    int64_t ne[4];
} vjob;

static int vint(const json_t *cfg, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    char k[96];
    snprintf(k, sizeof k, "vision_config.%s", key);
    if (def == INT64_MIN ? hf_int_req(cfg, k, out) : hf_int(cfg, k, def, out)) return bs_error_prefix("config.json: ");
    if (*out < lo || *out > hi) return bs_error("config.json: %s = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", k, *out, lo, hi);
    return 0;
}

/* image_mean / image_std from preprocessor_config.json where there is one, else Qwen's 0.5. */
static int read_norm(const char *dir, vhp *h) {
    for (int c = 0; c < 3; c++) h->mean[c] = h->std[c] = 0.5f;
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    json_t *p = bs_json_load_file(path);
    if (!p) return -1;
    int rc = 0;
    const char *keys[2] = {"image_mean", "image_std"};
    for (int k = 0; k < 2 && !rc; k++) {
        json_t *a = json_object_get(p, keys[k]);
        if (!a) continue;
        if (!json_is_array(a) || json_array_size(a) != 3) { rc = bs_error("%s: %s is not 3 numbers", path, keys[k]); break; }
        for (int c = 0; c < 3; c++) {
            json_t *v = json_array_get(a, (size_t)c);
            if (!json_is_number(v)) { rc = bs_error("%s: %s is not 3 numbers", path, keys[k]); break; }
            (k ? h->std : h->mean)[c] = (float)json_number_value(v);
        }
    }
    for (int c = 0; c < 3 && !rc; c++)
        if (!(h->std[c] > 0)) rc = bs_error("%s: image_std must be positive", path);
    json_decref(p);
    return rc;
}

static int read_vhp(const char *dir, const json_t *cfg, vhp *h) {
    if (!hf_get(cfg, "vision_config")) return bs_error("config.json has no vision_config: not a vision checkpoint");
    int64_t npos, in_ch, dsi[64];
    int n_ds = 0;
    if (vint(cfg, "depth", INT64_MIN, 1, 256, &h->depth) || vint(cfg, "hidden_size", INT64_MIN, 4, 1 << 16, &h->C) ||
        vint(cfg, "intermediate_size", INT64_MIN, 1, 1 << 18, &h->FF) || vint(cfg, "num_heads", INT64_MIN, 1, 1024, &h->heads) ||
        vint(cfg, "out_hidden_size", INT64_MIN, 1, 1 << 18, &h->out) || vint(cfg, "patch_size", 16, 1, 1024, &h->patch) ||
        vint(cfg, "spatial_merge_size", 2, 2, 2, &h->merge) || vint(cfg, "temporal_patch_size", 2, 2, 2, &h->temporal) ||
        vint(cfg, "num_position_embeddings", INT64_MIN, 1, 1 << 20, &npos) || vint(cfg, "in_channels", 3, 3, 3, &in_ch))
        return -1;
    if (hf_int_array(cfg, "vision_config.deepstack_visual_indexes", dsi, 64, &n_ds)) return bs_error_prefix("config.json: ");
    if (n_ds) return bs_error("config.json: deepstack_visual_indexes is not empty (Qwen3-VL deepstack is not supported)");
    if (h->C % h->heads || (h->C / h->heads) % 4) return bs_error("config.json: vision hidden_size must be a multiple of 4 * num_heads");
    h->S = (int64_t)llround(sqrt((double)npos));
    if (h->S * h->S != npos) return bs_error("config.json: num_position_embeddings = %" PRId64 " is not a square", npos);
    const char *ek = hf_get(cfg, "text_config.rms_norm_eps") ? "text_config.rms_norm_eps" : "rms_norm_eps";
    if (hf_float(cfg, ek, 1e-6, &h->eps)) return bs_error_prefix("config.json: ");
    return read_norm(dir, h);
}

/* The HF tensor behind suffix (model.visual.X or visual.X); NULL if absent. */
static const st_tensor *find_vis(const st_model *m, const char *suffix) {
    static const char *pre[] = {"model.visual.", "visual."};
    char n[160];
    for (size_t i = 0; i < BS_ARRAY_LEN(pre); i++) {
        snprintf(n, sizeof n, "%s%s", pre[i], suffix);
        const st_tensor *t = st_model_find(m, n);
        if (t) return t;
    }
    return NULL;
}

static int add_job(const st_model *m, vjob *jobs, size_t *n, const char *gguf, const char *hf, enum vkind kind,
                   int nd, const int64_t *torch_shape, int type) {
    const st_tensor *t = find_vis(m, hf);
    if (!t) return bs_error("missing vision tensor model.visual.%s", hf);
    const int snd = kind == V_PATCH0 || kind == V_PATCH1 ? 5 : nd;
    bool same = t->n_dims == snd;
    for (int i = 0; same && i < snd; i++) same = t->shape[i] == torch_shape[i];
    if (!same) return bs_error("%s: shape does not match config.json's vision_config", t->name);
    int st = st_dtype_to_bs_type(t->dtype);
    if (st != BS_F32 && st != BS_F16 && st != BS_BF16)
        return bs_error("%s has dtype %s (expected F32, F16 or BF16)", t->name, st_dtype_name(t->dtype));
    vjob *j = &jobs[(*n)++];
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", gguf);
    j->src = t;
    j->kind = kind;
    if (kind == V_PATCH0 || kind == V_PATCH1) {   /* torch [C, 3, T, P, P] -> ne {P, P, 3, C} */
        j->n_dims = 4;
        j->ne[0] = torch_shape[4]; j->ne[1] = torch_shape[3]; j->ne[2] = torch_shape[1]; j->ne[3] = torch_shape[0];
        j->type = type == BS_F32 || type == BS_BF16 || type == BS_F16 ? type : type < 0 ? st : BS_F16;
    } else {
        j->n_dims = nd;
        for (int i = 0; i < nd; i++) j->ne[i] = torch_shape[nd - 1 - i];
        j->type = kind == V_F32 ? BS_F32 : type >= 0 ? type : st;
        if (j->type == BS_Q8_0 && j->ne[0] % 32) j->type = BS_F16;   /* rows must fill whole blocks */
    }
    return 0;
}

static int plan(const vhp *h, const st_model *m, int type, vjob *jobs, size_t *n) {
    const int64_t C = h->C, FF = h->FF, P = h->patch, M4 = C * h->merge * h->merge;
    char g[64], s[96];
    int rc = 0;
#define J(gg, hf, kind, nd, ...) do { const int64_t sh_[] = {__VA_ARGS__}; \
        if (!rc) rc = add_job(m, jobs, n, gg, hf, kind, nd, sh_, type); } while (0)
    J("v.patch_embd.weight", "patch_embed.proj.weight", V_PATCH0, 5, C, 3, h->temporal, P, P);
    J("v.patch_embd.weight.1", "patch_embed.proj.weight", V_PATCH1, 5, C, 3, h->temporal, P, P);
    J("v.patch_embd.bias", "patch_embed.proj.bias", V_F32, 1, C);
    J("v.position_embd.weight", "pos_embed.weight", V_F32, 2, h->S * h->S, C);
    static const struct { const char *g, *hf; int mat; int o, i; } blk[] = {   /* o, i: 0 C, 1 3C, 2 FF */
        {"ln1.weight", "norm1.weight", 0, 0, -1}, {"ln1.bias", "norm1.bias", 0, 0, -1},
        {"attn_qkv.weight", "attn.qkv.weight", 1, 1, 0}, {"attn_qkv.bias", "attn.qkv.bias", 0, 1, -1},
        {"attn_out.weight", "attn.proj.weight", 1, 0, 0}, {"attn_out.bias", "attn.proj.bias", 0, 0, -1},
        {"ln2.weight", "norm2.weight", 0, 0, -1}, {"ln2.bias", "norm2.bias", 0, 0, -1},
        {"ffn_up.weight", "mlp.linear_fc1.weight", 1, 2, 0}, {"ffn_up.bias", "mlp.linear_fc1.bias", 0, 2, -1},
        {"ffn_down.weight", "mlp.linear_fc2.weight", 1, 0, 2}, {"ffn_down.bias", "mlp.linear_fc2.bias", 0, 0, -1},
    };
    const int64_t dim[3] = {C, 3 * C, FF};
    for (int64_t il = 0; il < h->depth && !rc; il++)
        for (size_t k = 0; k < BS_ARRAY_LEN(blk); k++) {
            snprintf(g, sizeof g, "v.blk.%" PRId64 ".%s", il, blk[k].g);
            snprintf(s, sizeof s, "blocks.%" PRId64 ".%s", il, blk[k].hf);
            if (blk[k].mat) J(g, s, V_MATRIX, 2, dim[blk[k].o], dim[blk[k].i]);
            else J(g, s, V_F32, 1, dim[blk[k].o]);
        }
    J("v.post_ln.weight", "merger.norm.weight", V_F32, 1, C);
    J("v.post_ln.bias", "merger.norm.bias", V_F32, 1, C);
    J("mm.0.weight", "merger.linear_fc1.weight", V_MATRIX, 2, M4, M4);
    J("mm.0.bias", "merger.linear_fc1.bias", V_F32, 1, M4);
    J("mm.2.weight", "merger.linear_fc2.weight", V_MATRIX, 2, h->out, M4);
    J("mm.2.bias", "merger.linear_fc2.bias", V_F32, 1, h->out);
#undef J
    return rc;
}

/* Every model.visual.* tensor must have found its place (the patch kernel twice). */
static int check_all_used(const st_model *m, const vjob *jobs, size_t n) {
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const st_tensor *t = m->tensors[i];
        if (strncmp(t->name, "model.visual.", 13) && strncmp(t->name, "visual.", 7)) continue;
        bool used = false;
        for (size_t k = 0; k < n && !used; k++) used = jobs[k].src == t;
        if (!used) return bs_error("%s has no place in a qwen3vl_merger projector (deepstack is not supported)", t->name);
    }
    return 0;
}

/* The tensor as f32 in GGUF element order (the patch kernels take their temporal slice). */
static void gather_f32(const vjob *j, float *out) {
    const bs_type_traits *st = bs_type_get(st_dtype_to_bs_type(j->src->dtype));
    const size_t es = bs_row_size(st_dtype_to_bs_type(j->src->dtype), 1);
    const uint8_t *d = j->src->data;
    if (j->kind != V_PATCH0 && j->kind != V_PATCH1) {
        st->to_float(d, out, (int64_t)j->src->n_elements);
        return;
    }
    const int64_t P2 = j->ne[0] * j->ne[1], T = j->src->shape[2], t = j->kind == V_PATCH1;
    for (int64_t r = 0; r < j->ne[2] * j->ne[3]; r++)   /* r = c * 3 + ch: one P x P kernel */
        st->to_float(d + (size_t)((r * T + t) * P2) * es, out + r * P2, P2);
}

static int write_job(gguf_writer *w, bs_pool *pool, const vjob *j) {
    int64_t n = 1;
    for (int i = 0; i < j->n_dims; i++) n *= j->ne[i];
    const int64_t rows = n / j->ne[0];
    float *f = bs_xmalloc((size_t)n * sizeof *f);
    uint8_t *buf = bs_xmalloc(bs_row_size(j->type, j->ne[0]) * (size_t)rows);
    gather_f32(j, f);
    int rc = bs_convert_rows(pool, BS_F32, f, j->type, buf, j->ne[0], rows);
    if (!rc) rc = gguf_w_write(w, buf, bs_row_size(j->type, j->ne[0]) * (size_t)rows);
    free(f);
    free(buf);
    return rc;
}

static void write_keys(gguf_writer *w, const vhp *h, const char *name, int ftype) {
    gguf_w_set_str(w, "general.architecture", "clip");
    gguf_w_set_str(w, "general.name", name);
    gguf_w_set_u32(w, "general.file_type", bs_ftype_of(ftype));
    gguf_w_set_bool(w, "clip.has_vision_encoder", true);
    gguf_w_set_str(w, "clip.projector_type", "qwen3vl_merger");
    gguf_w_set_bool(w, "clip.use_gelu", true);
    gguf_w_set_u32(w, "clip.vision.embedding_length", (uint32_t)h->C);
    gguf_w_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)h->FF);
    gguf_w_set_u32(w, "clip.vision.block_count", (uint32_t)h->depth);
    gguf_w_set_u32(w, "clip.vision.attention.head_count", (uint32_t)h->heads);
    gguf_w_set_f32(w, "clip.vision.attention.layer_norm_epsilon", (float)h->eps);
    gguf_w_set_u32(w, "clip.vision.patch_size", (uint32_t)h->patch);
    gguf_w_set_u32(w, "clip.vision.spatial_merge_size", (uint32_t)h->merge);
    gguf_w_set_u32(w, "clip.vision.image_size", (uint32_t)(h->S * h->patch));
    gguf_w_set_u32(w, "clip.vision.projection_dim", (uint32_t)h->out);
    gguf_w_set_arr_f32(w, "clip.vision.image_mean", h->mean, 3);
    gguf_w_set_arr_f32(w, "clip.vision.image_std", h->std, 3);
}

static int convert(const char *dir, const json_t *cfg, const st_model *m, int type, bs_pool *pool, const char *out) {
    vhp h = {0};
    if (read_vhp(dir, cfg, &h)) return -1;
    vjob *jobs = bs_xcalloc((size_t)(h.depth * 12 + 10), sizeof *jobs);
    size_t n = 0;
    int rc = plan(&h, m, type, jobs, &n);
    if (!rc) rc = check_all_used(m, jobs, n);
    gguf_writer *w = rc ? NULL : gguf_w_open(out);
    if (!rc && !w) rc = -1;
    if (!rc) {
        const char *name = hf_str(cfg, "_name_or_path", NULL);
        const char *slash = strrchr(dir, '/');
        if (!name || !*name) name = slash && slash[1] ? slash + 1 : dir;
        int ftype = BS_F32;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(jobs[i].name, "v.blk.0.attn_qkv.weight")) ftype = jobs[i].type;
        write_keys(w, &h, name, ftype);
        for (size_t i = 0; i < n && !rc; i++)
            if (gguf_w_add_tensor(w, jobs[i].name, jobs[i].type, jobs[i].n_dims, jobs[i].ne) < 0) rc = -1;
        for (size_t i = 0; i < n && !rc; i++)
            if ((rc = write_job(w, pool, &jobs[i]))) bs_error_prefix("%s: ", jobs[i].src->name);
        if (rc) gguf_w_abort(w);
        else rc = gguf_w_close(w);
    }
    if (!rc) fprintf(stderr, "wrote %s: qwen3vl_merger projector, %zu tensors\n", out, n);
    free(jobs);
    return rc;
}

int bs_convert_hf_to_mmproj(const char *in_dir, const char *out_gguf, int type, int n_threads) {
    if (type >= 0 && type != BS_F32 && type != BS_F16 && type != BS_BF16 && type != BS_Q8_0)
        return bs_error("--mmproj --type: projector matrices are f32, f16, bf16 or q8_0");
    json_t *cfg = bs_hf_config_of_dir(in_dir);
    if (!cfg) return -1;
    const char *inputs[] = {in_dir};
    if (bs_check_not_input(out_gguf, inputs, 1)) { json_decref(cfg); return -1; }
    st_model *m = st_model_open(in_dir, 0);
    bs_pool *pool = m ? bs_pool_new(n_threads > 0 ? n_threads : bs_cpu_count()) : NULL;
    int rc = pool ? convert(in_dir, cfg, m, type, pool, out_gguf) : -1;
    bs_pool_free(pool);
    st_model_close(m);
    json_decref(cfg);
    return rc;
}
