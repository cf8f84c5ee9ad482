/* mmproj.c: load a Qwen3.5 / Qwen3-VL vision projector GGUF (clip.projector_type =
 * "qwen3vl_merger"): every key range-checked, every tensor checked by name, shape and type, and
 * no tensor left unused, so a file this code would misread is refused with a message naming the
 * first problem (docs/vision.md lists the layout). */
#include "vision/mmproj_impl.h"
#include "formats/quant.h"
#include "io/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_ 96

static int key_int(const gguf_file *f, const char *key, int lo, int hi, int *out) {
    uint32_t v;
    if (gguf_get_u32(f, key, &v)) return -1;
    if (v < (uint32_t)lo || v > (uint32_t)hi)
        return bs_error("%s = %u is out of range [%d, %d]", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int key_f32_triple(const gguf_file *f, const char *key, float out[3], float dflt) {
    if (!gguf_find_kv(f, key)) { out[0] = out[1] = out[2] = dflt; return 0; }
    if (gguf_get_arr_n(f, key) != 3) return bs_error("%s: expected an array of 3 floats", key);
    for (int i = 0; i < 3; i++) {
        if (gguf_get_arr_f32(f, key, (uint64_t)i, &out[i])) return -1;
        if (!isfinite(out[i])) return bs_error("%s[%d] is not finite", key, i);
    }
    return 0;
}

static int read_keys(const gguf_file *f, bs_mmproj_hparams *hp) {
    const char *arch = gguf_get_str(f, "general.architecture");
    if (!arch || strcmp(arch, "clip"))
        return bs_error("general.architecture is '%s', not 'clip': not an mmproj file", arch ? arch : "(none)");
    const char *pt = gguf_get_str(f, "clip.projector_type");
    if (!pt) return bs_error("clip.projector_type is missing");
    if (strcmp(pt, "qwen3vl_merger"))
        return bs_error("clip.projector_type '%s' is not supported (only qwen3vl_merger: Qwen3.5 / Qwen3-VL)", pt);
    bool b = true;
    if (gguf_find_kv(f, "clip.has_vision_encoder") && (gguf_get_bool(f, "clip.has_vision_encoder", &b) || !b))
        return bs_error("clip.has_vision_encoder is not true: this projector has no vision encoder");
    b = true;
    if (gguf_find_kv(f, "clip.use_gelu") && (gguf_get_bool(f, "clip.use_gelu", &b) || !b))
        return bs_error("clip.use_gelu is false: only the GELU variant of qwen3vl_merger exists");
    if (key_int(f, "clip.vision.embedding_length", 1, 16384, &hp->n_embd) ||
        key_int(f, "clip.vision.feed_forward_length", 1, 65536, &hp->n_ff) ||
        key_int(f, "clip.vision.block_count", 1, 256, &hp->n_layer) ||
        key_int(f, "clip.vision.attention.head_count", 1, 1024, &hp->n_head) ||
        key_int(f, "clip.vision.patch_size", 1, 64, &hp->patch) ||
        key_int(f, "clip.vision.projection_dim", 1, 65536, &hp->proj_dim))
        return -1;
    hp->merge = 2;
    if (gguf_find_kv(f, "clip.vision.spatial_merge_size") &&
        key_int(f, "clip.vision.spatial_merge_size", 1, 8, &hp->merge))
        return -1;
    if (hp->merge != 2) return bs_error("clip.vision.spatial_merge_size = %d: only 2 is supported", hp->merge);
    hp->image_size = 0;
    if (gguf_find_kv(f, "clip.vision.image_size") && key_int(f, "clip.vision.image_size", 1, 1 << 16, &hp->image_size))
        return -1;
    if (gguf_get_f32(f, "clip.vision.attention.layer_norm_epsilon", &hp->eps)) return -1;
    if (!(hp->eps > 0 && hp->eps < 1)) return bs_error("clip.vision.attention.layer_norm_epsilon = %g is out of range", hp->eps);
    int D = hp->n_embd / hp->n_head;
    if (hp->n_embd % hp->n_head || D % 4)
        return bs_error("ViT width %d over %d heads: head dim must be a whole multiple of 4 (2D RoPE)",
                        hp->n_embd, hp->n_head);
    if (key_f32_triple(f, "clip.vision.image_mean", hp->mean, 0.5f) ||
        key_f32_triple(f, "clip.vision.image_std", hp->std, 0.5f))
        return -1;
    for (int i = 0; i < 3; i++)
        if (!(fabsf(hp->std[i]) > 1e-6f)) return bs_error("clip.vision.image_std[%d] = %g", i, hp->std[i]);
    if (gguf_find_kv(f, "clip.vision.is_deepstack_layers") || gguf_find_kv(f, "clip.vision.n_deepstack_layers"))
        return bs_error("deepstack projectors (Qwen3-VL's v.deepstack.*) are not supported");
    return 0;
}

/* --- tensors: each found, shaped and typed as expected, marked used ------------------------- */

typedef struct {
    const gguf_file *f;
    unsigned char *used;    /* one flag per tensor of f */
    int wtype;              /* type of the first matrix: every matrix must share it */
} loader;

static const gguf_tensor *need(loader *L, const char *name, int nd, const int64_t *ne) {
    const gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) { bs_error("tensor %s is missing", name); return NULL; }
    int tnd = t->n_dims < GGUF_MAX_DIMS ? t->n_dims : GGUF_MAX_DIMS;
    while (tnd > nd && t->ne[tnd - 1] == 1) tnd--;
    bool ok = tnd <= nd;
    for (int i = 0; i < nd && ok; i++) ok = t->ne[i] == ne[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < nd; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, i ? "," : "", ne[i]);
        for (int i = 0; i < t->n_dims; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, i ? "," : "", t->ne[i]);
        bs_error("tensor %s has shape [%s], expected [%s]", name, got, want);
        return NULL;
    }
    L->used[t - L->f->tensors] = 1;
    return t;
}

/* A vector or small table as float (F32, F16 or BF16 in the file). */
static float *need_floats(loader *L, const char *name, int nd, const int64_t *ne) {
    const gguf_tensor *t = need(L, name, nd, ne);
    if (!t) return NULL;
    if (t->type != BS_F32 && t->type != BS_F16 && t->type != BS_BF16) {
        bs_error("tensor %s is %s: vectors must be F32, F16 or BF16", name, bs_type_name(t->type));
        return NULL;
    }
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= ne[i];
    float *v = bs_xmalloc((size_t)n * sizeof *v);
    bs_dequantize(t->type, t->data, v, n);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) { free(v); bs_error("tensor %s holds a non-finite value", name); return NULL; }
    return v;
}

static float *vec(loader *L, const char *name, int64_t n) { return need_floats(L, name, 1, &n); }

static int matrix(loader *L, const char *name, int64_t in, int64_t out, bs_weight *w) {
    const int64_t ne[2] = {in, out};
    const gguf_tensor *t = need(L, name, 2, ne);
    if (!t) return -1;
    if (t->type != BS_F32 && t->type != BS_F16 && t->type != BS_BF16 && t->type != BS_Q8_0)
        return bs_error("tensor %s is %s: projector matrices must be F32, F16, BF16 or Q8_0",
                        name, bs_type_name(t->type));
    if (L->wtype < 0) L->wtype = t->type;
    return bs_weight_from_tensor(w, t);
}

static int load_block(loader *L, bs_mmproj *m, int i) {
    const int64_t C = m->hp.n_embd, FF = m->hp.n_ff;
    bs_vit_block *b = &m->blk[i];
    char n[NAME_MAX_];
#define NM(s) (snprintf(n, sizeof n, "v.blk.%d." s, i), n)
    if (!(b->ln1_w = vec(L, NM("ln1.weight"), C)) || !(b->ln1_b = vec(L, NM("ln1.bias"), C)) ||
        !(b->ln2_w = vec(L, NM("ln2.weight"), C)) || !(b->ln2_b = vec(L, NM("ln2.bias"), C)) ||
        matrix(L, NM("attn_qkv.weight"), C, 3 * C, &b->qkv) || !(b->qkv_b = vec(L, NM("attn_qkv.bias"), 3 * C)) ||
        matrix(L, NM("attn_out.weight"), C, C, &b->out) || !(b->out_b = vec(L, NM("attn_out.bias"), C)) ||
        matrix(L, NM("ffn_up.weight"), C, FF, &b->up) || !(b->up_b = vec(L, NM("ffn_up.bias"), FF)) ||
        matrix(L, NM("ffn_down.weight"), FF, C, &b->down) || !(b->down_b = vec(L, NM("ffn_down.bias"), C)))
        return -1;
#undef NM
    return 0;
}

/* The Conv3d's two temporal kernels, summed: a still image is the same frame twice. */
static int load_patch(loader *L, bs_mmproj *m) {
    const int64_t P = m->hp.patch, C = m->hp.n_embd;
    const int64_t ne[4] = {P, P, 3, C};
    float *k0 = need_floats(L, "v.patch_embd.weight", 4, ne);
    if (!k0) return -1;
    float *k1 = need_floats(L, "v.patch_embd.weight.1", 4, ne);
    if (!k1) { free(k0); return -1; }
    for (int64_t i = 0; i < P * P * 3 * C; i++) k0[i] += k1[i];
    free(k1);
    m->patch_w = k0;
    m->patch = (bs_weight){.type = BS_F32, .ne0 = 3 * P * P, .ne1 = C, .data = k0,
                           .row_bytes = (size_t)(3 * P * P) * sizeof(float), .name = "v.patch_embd"};
    return (m->patch_b = vec(L, "v.patch_embd.bias", C)) ? 0 : -1;
}

static int load_pos(loader *L, bs_mmproj *m) {
    const gguf_tensor *t = gguf_find_tensor(L->f, "v.position_embd.weight");
    if (!t) return bs_error("tensor v.position_embd.weight is missing");
    int64_t n = t->ne[1], s = (int64_t)llround(sqrt((double)n));
    if (s < 1 || s * s != n || s > 1024)
        return bs_error("v.position_embd.weight has %" PRId64 " rows: not a square grid", n);
    m->hp.pos_side = (int)s;
    const int64_t ne[2] = {m->hp.n_embd, n};
    return (m->pos = need_floats(L, "v.position_embd.weight", 2, ne)) ? 0 : -1;
}

static int load_tensors(loader *L, bs_mmproj *m) {
    const int64_t C = m->hp.n_embd, M = 4 * C;
    if (load_patch(L, m) || load_pos(L, m)) return -1;
    m->blk = bs_xcalloc((size_t)m->hp.n_layer, sizeof *m->blk);
    for (int i = 0; i < m->hp.n_layer; i++)
        if (load_block(L, m, i)) return -1;
    if (!(m->post_w = vec(L, "v.post_ln.weight", C)) || !(m->post_b = vec(L, "v.post_ln.bias", C)) ||
        matrix(L, "mm.0.weight", M, M, &m->mm0) || !(m->mm0_b = vec(L, "mm.0.bias", M)) ||
        matrix(L, "mm.2.weight", M, m->hp.proj_dim, &m->mm2) || !(m->mm2_b = vec(L, "mm.2.bias", m->hp.proj_dim)))
        return -1;
    for (uint64_t i = 0; i < L->f->n_tensors; i++)
        if (!L->used[i])
            return bs_error("unexpected tensor %s (not part of a qwen3vl_merger projector)", L->f->tensors[i].name);
    m->hp.weight_type = L->wtype;
    return 0;
}

static void count_params(bs_mmproj *m) {
    m->hp.n_params = 0;
    m->hp.weight_bytes = 0;
    for (uint64_t i = 0; i < m->f->n_tensors; i++) {
        const gguf_tensor *t = &m->f->tensors[i];
        long long n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
        m->hp.n_params += n;
        m->hp.weight_bytes += t->nbytes;
    }
}

bs_mmproj *bs_mmproj_load(const char *path, char *err, size_t errlen) {
    bs_mmproj *m = bs_xcalloc(1, sizeof *m);
    loader L = {0};
    m->f = gguf_open(path, 0);
    if (!m->f) goto fail;
    L.f = m->f;
    L.used = bs_xcalloc(m->f->n_tensors + 1, 1);
    L.wtype = -1;
    if (read_keys(m->f, &m->hp) || load_tensors(&L, m)) goto fail;
    free(L.used);
    count_params(m);
    return m;
fail:
    if (m->f) bs_error_prefix("%s: ", path);
    if (err && errlen) snprintf(err, errlen, "%s", bs_last_error());
    free(L.used);
    bs_mmproj_free(m);
    return NULL;
}

void bs_mmproj_free(bs_mmproj *m) {
    if (!m) return;
    bs_vk_vit_free(m->dev);
    for (int i = 0; m->blk && i < m->hp.n_layer; i++) {
        bs_vit_block *b = &m->blk[i];
        free(b->ln1_w); free(b->ln1_b); free(b->ln2_w); free(b->ln2_b);
        free(b->qkv_b); free(b->out_b); free(b->up_b); free(b->down_b);
    }
    free(m->blk);
    free(m->patch_w); free(m->patch_b); free(m->pos);
    free(m->post_w); free(m->post_b); free(m->mm0_b); free(m->mm2_b);
    gguf_close(m->f);
    free(m);
}

int bs_mmproj_n_embd(const bs_mmproj *m) { return m->hp.proj_dim; }
const bs_mmproj_hparams *bs_mmproj_hparams_of(const bs_mmproj *m) { return &m->hp; }
