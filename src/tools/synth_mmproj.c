/* synth_mmproj.c: write a random qwen3vl_merger projector in the layout llama.cpp's converter
 * writes (docs/vision.md): matrices in the chosen type scaled by 1/sqrt(fan_in), LayerNorm
 * weights near 1, small biases and position table; the patch kernels in F16 unless the matrices
 * are F32 or BF16 (llama.cpp keeps conv kernels in a float type). */
#include "tools/synth_mmproj.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bs_synth_mmproj_preset(const char *name, bs_synth_mmproj_config *c) {
    if (!strcmp(name, "mmproj-tiny")) {
        *c = (bs_synth_mmproj_config){64, 128, 2, 2, 16, 6, 256, BS_F32, 42};
        return 0;
    }
    if (!strcmp(name, "mmproj-bonsai-27b")) {
        *c = (bs_synth_mmproj_config){1152, 4304, 27, 16, 16, 48, 5120, BS_F16, 42};
        return 0;
    }
    return -1;
}

typedef enum { K_MATRIX, K_ONES, K_SMALL } fill_kind;

static uint64_t name_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int put(gguf_writer *w, const char *name, int type, int nd, const int64_t *ne, fill_kind k, uint64_t seed) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= ne[i];
    bs_rng r;
    bs_rng_seed(&r, name_hash(name, seed));
    const float scale = k == K_MATRIX ? 1.0f / sqrtf((float)ne[0]) : 0.05f;
    float *v = bs_xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (k == K_ONES ? 1.0f : 0.0f) + scale * bs_rng_normal(&r);
    size_t bytes = (size_t)bs_tensor_size(type, ne[0], (uint64_t)(n / ne[0]));
    void *q = bs_xmalloc(bytes);
    int rc = bs_quantize(type, v, q, n);
    if (!rc) rc = gguf_w_write(w, q, bytes);
    free(v);
    free(q);
    return rc;
}

/* --dry-run: one 'name<TAB>type<TAB>ne0[,ne1...]<TAB>bytes' line, as bs_synth_list prints. */
static void list_tensor(FILE *out, const char *name, int type, int nd, const int64_t *ne, uint64_t *total, int *n) {
    int64_t rows = 1;
    fprintf(out, "%s\t%s\t", name, bs_type_name(type));
    for (int i = 0; i < nd; i++) {
        fprintf(out, "%s%lld", i ? "," : "", (long long)ne[i]);
        if (i) rows *= ne[i];
    }
    const uint64_t nb = bs_tensor_size(type, ne[0], (uint64_t)rows);
    fprintf(out, "\t%llu\n", (unsigned long long)nb);
    *total += nb;
    ++*n;
}

/* One pass declares (write = false), the second streams the data in the same order; with list,
 * the pass prints the tensor table instead. */
static int tensors_or_list(gguf_writer *w, const bs_synth_mmproj_config *c, bool write, FILE *list, uint64_t *total,
                           int *count) {
    const int64_t C = c->n_embd, FF = c->n_ff, P = c->patch, S = c->pos_side;
    const int kt = c->type == BS_F32 || c->type == BS_BF16 ? c->type : BS_F16;
    char n[96];
#define T(name, type, kind, nd, ...) do { const int64_t ne_[] = {__VA_ARGS__}; \
        if (list) list_tensor(list, name, type, nd, ne_, total, count); \
        else if (write ? put(w, name, type, nd, ne_, kind, c->seed) : gguf_w_add_tensor(w, name, type, nd, ne_) < 0) \
            return -1; } while (0)
    T("v.patch_embd.weight", kt, K_MATRIX, 4, P, P, 3, C);
    T("v.patch_embd.weight.1", kt, K_MATRIX, 4, P, P, 3, C);
    T("v.patch_embd.bias", BS_F32, K_SMALL, 1, C);
    T("v.position_embd.weight", BS_F32, K_SMALL, 2, C, S * S);
    for (int i = 0; i < c->n_layer; i++) {
#define B(s) (snprintf(n, sizeof n, "v.blk.%d." s, i), n)
        T(B("ln1.weight"), BS_F32, K_ONES, 1, C);
        T(B("ln1.bias"), BS_F32, K_SMALL, 1, C);
        T(B("attn_qkv.weight"), c->type, K_MATRIX, 2, C, 3 * C);
        T(B("attn_qkv.bias"), BS_F32, K_SMALL, 1, 3 * C);
        T(B("attn_out.weight"), c->type, K_MATRIX, 2, C, C);
        T(B("attn_out.bias"), BS_F32, K_SMALL, 1, C);
        T(B("ln2.weight"), BS_F32, K_ONES, 1, C);
        T(B("ln2.bias"), BS_F32, K_SMALL, 1, C);
        T(B("ffn_up.weight"), c->type, K_MATRIX, 2, C, FF);
        T(B("ffn_up.bias"), BS_F32, K_SMALL, 1, FF);
        T(B("ffn_down.weight"), c->type, K_MATRIX, 2, FF, C);
        T(B("ffn_down.bias"), BS_F32, K_SMALL, 1, C);
#undef B
    }
    T("v.post_ln.weight", BS_F32, K_ONES, 1, C);
    T("v.post_ln.bias", BS_F32, K_SMALL, 1, C);
    T("mm.0.weight", c->type, K_MATRIX, 2, 4 * C, 4 * C);
    T("mm.0.bias", BS_F32, K_SMALL, 1, 4 * C);
    T("mm.2.weight", c->type, K_MATRIX, 2, 4 * C, (int64_t)c->proj_dim);
    T("mm.2.bias", BS_F32, K_SMALL, 1, (int64_t)c->proj_dim);
#undef T
    return 0;
}

static int tensors(gguf_writer *w, const bs_synth_mmproj_config *c, bool write) {
    return tensors_or_list(w, c, write, NULL, NULL, NULL);
}

static void keys(gguf_writer *w, const bs_synth_mmproj_config *c) {
    const float half[3] = {0.5f, 0.5f, 0.5f};
    gguf_w_set_str(w, "general.architecture", "clip");
    gguf_w_set_str(w, "general.name", "synthetic qwen3vl_merger projector");
    gguf_w_set_u32(w, "general.file_type", c->type == BS_F32 ? 0 : c->type == BS_F16 ? 1 : c->type == BS_Q8_0 ? 7 : 32);
    gguf_w_set_bool(w, "clip.has_vision_encoder", true);
    gguf_w_set_str(w, "clip.projector_type", "qwen3vl_merger");
    gguf_w_set_bool(w, "clip.use_gelu", true);
    gguf_w_set_u32(w, "clip.vision.embedding_length", (uint32_t)c->n_embd);
    gguf_w_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)c->n_ff);
    gguf_w_set_u32(w, "clip.vision.block_count", (uint32_t)c->n_layer);
    gguf_w_set_u32(w, "clip.vision.attention.head_count", (uint32_t)c->n_head);
    gguf_w_set_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    gguf_w_set_u32(w, "clip.vision.patch_size", (uint32_t)c->patch);
    gguf_w_set_u32(w, "clip.vision.spatial_merge_size", 2);
    gguf_w_set_u32(w, "clip.vision.image_size", (uint32_t)(c->pos_side * c->patch));
    gguf_w_set_u32(w, "clip.vision.projection_dim", (uint32_t)c->proj_dim);
    gguf_w_set_arr_f32(w, "clip.vision.image_mean", half, 3);
    gguf_w_set_arr_f32(w, "clip.vision.image_std", half, 3);
}

static int validate(const bs_synth_mmproj_config *c) {
    if (c->type != BS_F32 && c->type != BS_F16 && c->type != BS_BF16 && c->type != BS_Q8_0)
        return bs_error("projector matrices must be f32, f16, bf16 or q8_0");
    if (c->n_embd < 4 || c->n_head < 1 || c->n_embd % c->n_head || (c->n_embd / c->n_head) % 4 ||
        c->n_ff < 1 || c->n_layer < 1 || c->patch < 1 || c->pos_side < 1 || c->proj_dim < 1)
        return bs_error("bad projector shape (width a multiple of 4 * heads, everything positive)");
    if (c->type == BS_Q8_0 && (c->n_embd % 32 || c->n_ff % 32))
        return bs_error("q8_0 needs the ViT width and MLP width to be multiples of 32");
    return 0;
}

int bs_synth_mmproj_list(const bs_synth_mmproj_config *c, FILE *out) {
    if (validate(c)) return -1;
    uint64_t total = 0;
    int n = 0;
    tensors_or_list(NULL, c, false, out, &total, &n);
    fprintf(out, "# tensors %d bytes %llu\n", n, (unsigned long long)total);
    return 0;
}

int bs_synth_mmproj_write(const bs_synth_mmproj_config *c, const char *path) {
    if (validate(c)) return -1;
    gguf_writer *w = gguf_w_open(path);
    if (!w) return -1;
    keys(w, c);
    if (tensors(w, c, false) || tensors(w, c, true)) {
        gguf_w_abort(w);
        return -1;
    }
    return gguf_w_close(w);
}
