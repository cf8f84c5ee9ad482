/* dspark_load.c: loading a DSpark drafter from a `dspark` GGUF or from the safetensors +
 * config.json export of DeepSpec's Qwen3DSparkModel (names as in prism-fork.md §3.1), checking
 * it against its target and borrowing the target's embedding / LM head (see dspark.h). */
#include "dspark/dspark.h"
#include "dspark/dspark_names.h"
#include "formats/gguf.h"
#include "io/hf_config.h"
#include "cpu/compute.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "model/hadamard.h"
#include "model/qwen35.h"
#include "formats/safetensors.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NAME_MAX_LEN 128
#define DIM_MAX (1u << 20)
#define HEADS_MAX 4096u

/* A tensor as both formats describe it: ne0 is the contiguous (input) dimension. */
typedef struct tinfo {
    int type;
    int n_dims;
    int64_t ne0, ne1;
    const void *data;
    uint64_t nbytes;
} tinfo;

typedef struct source {
    const gguf_file *g;
    const st_model *st;
} source;

/* --- safetensors names -------------------------------------------------------------------- */

/* The name table is shared with the converters (dspark_names.c). */

static const st_tensor *st_find_prefixed(const st_model *m, const char *hf) {
    static const char *prefixes[] = {"", "model.", "drafter.", "dspark."};
    char n[NAME_MAX_LEN + 16];
    for (size_t i = 0; i < BS_ARRAY_LEN(prefixes); i++) {
        snprintf(n, sizeof n, "%s%s", prefixes[i], hf);
        const st_tensor *t = st_model_find(m, n);
        if (t) return t;
    }
    return NULL;
}

/* The safetensors tensor for a GGUF name, or NULL. */
static const st_tensor *st_lookup(const st_model *m, const char *gguf_name) {
    char hf[NAME_MAX_LEN];
    for (int k = 0; bs_dspark_hf_name(gguf_name, k, hf, sizeof hf); k++) {
        const st_tensor *t = st_find_prefixed(m, hf);
        if (t) return t;
    }
    return NULL;
}

/* --- tensors ------------------------------------------------------------------------------ */

static bool src_has(const source *s, const char *name) {
    return s->g ? gguf_find_tensor(s->g, name) != NULL : st_lookup(s->st, name) != NULL;
}

static int src_find(const source *s, const char *name, tinfo *ti) {
    memset(ti, 0, sizeof *ti);
    if (s->g) {
        const gguf_tensor *t = gguf_find_tensor(s->g, name);
        if (!t) return bs_error("missing tensor %s", name);
        for (int d = 2; d < GGUF_MAX_DIMS; d++)
            if (t->ne[d] != 1) return bs_error("tensor %s has more than 2 dimensions", name);
        *ti = (tinfo){t->type, t->n_dims, t->ne[0], t->n_dims >= 2 ? t->ne[1] : 1, t->data, t->nbytes};
        return 0;
    }
    const st_tensor *t = st_lookup(s->st, name);
    if (!t) return bs_error("missing tensor %s (or its safetensors name)", name);
    int type = st_dtype_to_bs_type(t->dtype);
    if (type != BS_F32 && type != BS_F16 && type != BS_BF16)
        return bs_error("tensor %s has dtype %s (expected F32, F16 or BF16)", t->name, st_dtype_name(t->dtype));
    if (t->n_dims < 1 || t->n_dims > 2) return bs_error("tensor %s must be 1-D or 2-D", t->name);
    /* row-major [out, in]: the last dimension is contiguous */
    int64_t ne0 = t->shape[t->n_dims - 1], ne1 = t->n_dims == 2 ? t->shape[0] : 1;
    *ti = (tinfo){type, t->n_dims, ne0, ne1, t->data, t->nbytes};
    return 0;
}

static int check_shape(const char *name, const tinfo *t, int64_t ne0, int64_t ne1) {
    if (t->ne0 != ne0 || t->ne1 != ne1)
        return bs_error("tensor %s has shape [%" PRId64 ", %" PRId64 "], expected [%" PRId64 ", %" PRId64 "]",
                        name, t->ne0, t->ne1, ne0, ne1);
    return 0;
}

static void *own(bs_dspark *d, void *p);

/* A matrix in place; its name is the drafter's own copy (callers build names in buffers of
 * their own stack frames, which the device upload reads later). */
static int load_mat(bs_dspark *d, const source *s, const char *name, int64_t ne0, int64_t ne1, bs_weight *w) {
    tinfo t;
    if (src_find(s, name, &t) || check_shape(name, &t, ne0, ne1)) return -1;
    const bs_type_traits *tr = bs_type_get(t.type);
    bool ok = tr && t.type != BS_I8 && t.type != BS_I16 && t.type != BS_I32 && tr->to_float && tr->vec_dot &&
              (!tr->is_quantized || tr->act_from_float);
    if (!ok) return bs_error("tensor %s has type %s, which bitspark cannot multiply", name, bs_type_name(t.type));
    size_t row = bs_row_size(t.type, ne0);
    uint64_t total = bs_tensor_size(t.type, ne0, (uint64_t)ne1);
    if (row == 0 || total == UINT64_MAX || total > t.nbytes)
        return bs_error("tensor %s: %" PRIu64 " bytes do not hold [%" PRId64 ", %" PRId64 "] of %s", name,
                        t.nbytes, ne0, ne1, bs_type_name(t.type));
    *w = (bs_weight){.type = t.type, .ne0 = ne0, .ne1 = ne1, .data = t.data, .row_bytes = row, .name = own(d, bs_xstrdup(name))};
    return 0;
}

static void *own(bs_dspark *d, void *p) {
    d->owned = bs_xrealloc(d->owned, (size_t)(d->n_owned + 1) * sizeof *d->owned);
    d->owned[d->n_owned++] = p;
    return p;
}

/* A vector of n floats: F32 data is used in place, other float types are converted once. */
static int load_vec(bs_dspark *d, const source *s, const char *name, int64_t n, const float **out) {
    tinfo t;
    if (src_find(s, name, &t)) return -1;
    if (t.ne0 * t.ne1 != n) return bs_error("tensor %s has %" PRId64 " values, expected %" PRId64, name, t.ne0 * t.ne1, n);
    const bs_type_traits *tr = bs_type_get(t.type);
    uint64_t need = bs_tensor_size(t.type, n, 1);
    if (!tr || !tr->to_float || need == UINT64_MAX || need > t.nbytes)
        return bs_error("tensor %s: type %s cannot be read as %" PRId64 " floats", name, bs_type_name(t.type), n);
    if (t.type == BS_F32) {
        *out = t.data;
        return 0;
    }
    float *v = own(d, bs_xmalloc((size_t)n * sizeof(float)));
    tr->to_float(t.data, v, n);
    *out = v;
    return 0;
}

/* --- hyperparameters ------------------------------------------------------------------------ */

static int g_u32(const gguf_file *f, const char *key, uint32_t lo, uint32_t hi, bool req, int *out) {
    if (!gguf_find_kv(f, key)) return req ? bs_error("missing metadata key %s", key) : 0;
    uint32_t v;
    if (gguf_get_u32(f, key, &v)) return -1;
    if (v < lo || v > hi) return bs_error("%s = %u is out of range [%u, %u]", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int g_f32(const gguf_file *f, const char *key, float *out) {
    return gguf_find_kv(f, key) ? gguf_get_f32(f, key, out) : 0;
}

static int g_bool(const gguf_file *f, const char *key, bool *out) {
    return gguf_find_kv(f, key) ? gguf_get_bool(f, key, out) : 0;
}

static int hparams_gguf(const gguf_file *f, bs_dspark_hparams *hp) {
    const char *arch = gguf_get_str(f, "general.architecture");
    if (!arch) return bs_error("no general.architecture key: not a model file");
    if (strcmp(arch, "dspark")) return bs_error("architecture '%s' is not a DSpark drafter (dspark)", arch);
    if (g_u32(f, "dspark.block_count", 1, 4096, true, &hp->n_layer) ||
        g_u32(f, "dspark.embedding_length", 1, DIM_MAX, true, &hp->n_embd) ||
        g_u32(f, "dspark.feed_forward_length", 1, DIM_MAX, true, &hp->n_ff) ||
        g_u32(f, "dspark.attention.head_count", 1, HEADS_MAX, true, &hp->n_head) ||
        g_u32(f, "dspark.attention.head_count_kv", 1, HEADS_MAX, true, &hp->n_head_kv))
        return -1;
    hp->head_dim = hp->n_embd / hp->n_head;
    int vlen = -1;
    if (g_u32(f, "dspark.attention.key_length", 1, DIM_MAX, false, &hp->head_dim) ||
        g_u32(f, "dspark.attention.value_length", 1, DIM_MAX, false, &vlen) ||
        g_f32(f, "dspark.attention.layer_norm_rms_epsilon", &hp->eps) ||
        g_f32(f, "dspark.rope.freq_base", &hp->rope_base) ||
        g_u32(f, "dspark.dspark.block_size", 1, BS_DSPARK_MAX_BLOCK, true, &hp->block_size) ||
        g_u32(f, "dspark.dspark.mask_token_id", 0, 1u << 30, true, &hp->mask_id) ||
        g_u32(f, "dspark.dspark.markov_rank", 0, DIM_MAX, false, &hp->markov_rank) ||
        g_bool(f, "dspark.dspark.confidence_head", &hp->conf_head) ||
        g_bool(f, "dspark.dspark.confidence_head_with_markov", &hp->conf_with_markov) ||
        g_bool(f, "dspark.dspark.log_snr_conditioning", &hp->log_snr))
        return -1;
    if (vlen >= 0 && vlen != hp->head_dim) return bs_error("key_length %d != value_length %d", hp->head_dim, vlen);
    if (hp->log_snr && (gguf_get_f32(f, "dspark.dspark.min_log_snr", &hp->min_log_snr) ||
                        gguf_get_f32(f, "dspark.dspark.max_log_snr", &hp->max_log_snr)))
        return bs_error_prefix("log-SNR conditioning: ");
    const char *key = "dspark.dspark.target_layers";
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->val.type != GGUF_TYPE_ARRAY) return bs_error("missing integer array %s", key);
    if (kv->val.n < 1 || kv->val.n > BS_DSPARK_MAX_TAPS) return bs_error("%s: %" PRIu64 " taps (1..%d)", key, kv->val.n, BS_DSPARK_MAX_TAPS);
    hp->n_taps = (int)kv->val.n;
    for (int i = 0; i < hp->n_taps; i++) {
        int64_t v;
        if (gguf_arr_elem_i64(&kv->val, (uint64_t)i, &v)) return bs_error_prefix("%s: ", key);
        if (v < 0 || v > 65535) return bs_error("%s[%d] = %" PRId64 " is out of range", key, i, v);
        hp->taps[i] = (int)v;
    }
    return 0;
}

static int j_int(const json_t *cfg, const char *key, int64_t def, int64_t lo, int64_t hi, int *out) {
    int64_t v;
    if (hf_int(cfg, key, def, &v)) return -1;
    if (v < lo || v > hi) return bs_error("config %s = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static int hparams_json(const json_t *cfg, bs_dspark_hparams *hp) {
    double eps = 1e-6, theta = 1e6, lo = 0, hi = 0;
    if (j_int(cfg, "num_hidden_layers", -1, 1, 4096, &hp->n_layer) ||
        j_int(cfg, "hidden_size", -1, 1, DIM_MAX, &hp->n_embd) ||
        j_int(cfg, "intermediate_size", -1, 1, DIM_MAX, &hp->n_ff) ||
        j_int(cfg, "num_attention_heads", -1, 1, HEADS_MAX, &hp->n_head) ||
        j_int(cfg, "num_key_value_heads", hp->n_head, 1, HEADS_MAX, &hp->n_head_kv) ||
        j_int(cfg, "head_dim", hp->n_embd / hp->n_head, 1, DIM_MAX, &hp->head_dim) ||
        j_int(cfg, "block_size", 7, 1, BS_DSPARK_MAX_BLOCK, &hp->block_size) ||
        j_int(cfg, "mask_token_id", -1, 0, 1 << 30, &hp->mask_id) ||
        j_int(cfg, "markov_rank", 0, 0, DIM_MAX, &hp->markov_rank) ||
        hf_float(cfg, "rms_norm_eps", eps, &eps) ||
        hf_float(cfg, "rope_theta", theta, &theta) ||
        hf_float(cfg, "rope_parameters.rope_theta", theta, &theta) ||
        hf_bool(cfg, "enable_confidence_head", false, &hp->conf_head) ||
        hf_bool(cfg, "confidence_head_with_markov", false, &hp->conf_with_markov) ||
        hf_bool(cfg, "log_snr_conditioning", false, &hp->log_snr))
        return -1;
    if (hp->log_snr && (hf_float_req(cfg, "min_log_snr", &lo) || hf_float_req(cfg, "max_log_snr", &hi))) return -1;
    hp->eps = (float)eps;
    hp->rope_base = (float)theta;
    hp->min_log_snr = (float)lo;
    hp->max_log_snr = (float)hi;
    int64_t taps[BS_DSPARK_MAX_TAPS];
    if (hf_int_array(cfg, "target_layer_ids", taps, BS_DSPARK_MAX_TAPS, &hp->n_taps)) return -1;
    if (hp->n_taps < 1) return bs_error("config has no target_layer_ids");
    for (int i = 0; i < hp->n_taps; i++) {
        if (taps[i] < 0 || taps[i] > 65535) return bs_error("target_layer_ids[%d] = %" PRId64 " is out of range", i, taps[i]);
        hp->taps[i] = (int)taps[i];
    }
    return 0;
}

static int check_hparams(const bs_dspark_hparams *hp) {
    if (!(hp->eps > 0.0f && hp->eps < 1.0f)) return bs_error("rms epsilon %g is out of range", hp->eps);
    if (!(hp->rope_base > 0.0f) || !isfinite(hp->rope_base)) return bs_error("rope base %g is invalid", hp->rope_base);
    if (hp->n_head % hp->n_head_kv) return bs_error("head_count %d is not a multiple of head_count_kv %d", hp->n_head, hp->n_head_kv);
    if (hp->head_dim % 2) return bs_error("head dim %d is odd (RoPE needs pairs)", hp->head_dim);
    if ((uint64_t)hp->n_head * hp->head_dim > DIM_MAX || (uint64_t)hp->n_taps * hp->n_embd > 64ull * DIM_MAX)
        return bs_error("layer widths are implausibly large");
    if (hp->log_snr && !(isfinite(hp->min_log_snr) && isfinite(hp->max_log_snr) && hp->max_log_snr > hp->min_log_snr))
        return bs_error("log-SNR range [%g, %g] is invalid", hp->min_log_snr, hp->max_log_snr);
    if (hp->mask_id < 0 || hp->mask_id >= hp->n_vocab)
        return bs_error("mask token id %d is outside the vocabulary of %d", hp->mask_id, hp->n_vocab);
    return 0;
}

/* --- tensors of the model ---------------------------------------------------------------------- */

static int load_layer(bs_dspark *d, const source *s, int il) {
    const bs_dspark_hparams *hp = &d->hp;
    bs_dspark_layer *L = &d->layers[il];
    const int64_t E = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    char n[NAME_MAX_LEN];
#define NAME(x) (snprintf(n, sizeof n, "blk.%d." x, il), n)
    if (load_vec(d, s, NAME("attn_norm.weight"), E, &L->attn_norm) ||
        load_vec(d, s, NAME("ffn_norm.weight"), E, &L->ffn_norm) ||
        load_vec(d, s, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm) ||
        load_vec(d, s, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm) ||
        load_mat(d, s, NAME("attn_q.weight"), E, q, &L->wq) ||
        load_mat(d, s, NAME("attn_k.weight"), E, kv, &L->wk) ||
        load_mat(d, s, NAME("attn_v.weight"), E, kv, &L->wv) ||
        load_mat(d, s, NAME("attn_output.weight"), q, E, &L->wo) ||
        load_mat(d, s, NAME("ffn_gate.weight"), E, hp->n_ff, &L->gate) ||
        load_mat(d, s, NAME("ffn_up.weight"), E, hp->n_ff, &L->up) ||
        load_mat(d, s, NAME("ffn_down.weight"), hp->n_ff, E, &L->down))
        return -1;
#undef NAME
    return 0;
}

/* The two log-SNR addends (dspark.md §2.6): a pure function of the slot kind, so computed once.
 * feat = [sin(t f_i) ; cos(t f_i)], f_i = 10000^(-i/half), t = 1000 for the anchor, 0 for masks;
 * addend = fc2(silu(fc1 feat + b1)) + b2. */
static int load_log_snr(bs_dspark *d, const source *s) {
    const int E = d->hp.n_embd;
    bs_weight fc1, fc2;
    const float *b1, *b2;
    tinfo t1;
    if (src_find(s, "dspark.log_snr_fc1.weight", &t1)) return -1;
    const int64_t nf = t1.ne0;
    if (nf < 2 || nf % 2 || nf > 65536) return bs_error("dspark.log_snr_fc1.weight: bad feature width %" PRId64, nf);
    if (load_mat(d, s, "dspark.log_snr_fc1.weight", nf, E, &fc1) ||
        load_vec(d, s, "dspark.log_snr_fc1.bias", E, &b1) ||
        load_mat(d, s, "dspark.log_snr_fc2.weight", E, E, &fc2) ||
        load_vec(d, s, "dspark.log_snr_fc2.bias", E, &b2))
        return -1;
    const int half = (int)nf / 2;
    float *feat = bs_xmalloc((size_t)nf * sizeof(float)), *h = bs_xmalloc((size_t)E * sizeof(float));
    d->snr_anchor = own(d, bs_xmalloc((size_t)E * sizeof(float)));
    d->snr_mask = own(d, bs_xmalloc((size_t)E * sizeof(float)));
    const float lam[2] = {d->hp.max_log_snr, d->hp.min_log_snr};
    float *out[2] = {d->snr_anchor, d->snr_mask};
    for (int k = 0; k < 2; k++) {
        const float t = (lam[k] - d->hp.min_log_snr) / (d->hp.max_log_snr - d->hp.min_log_snr) * 1000.0f;
        for (int i = 0; i < half; i++) {
            const float f = expf(-logf(10000.0f) * (float)i / (float)half);
            feat[i] = sinf(t * f);
            feat[half + i] = cosf(t * f);
        }
        bs_matmul(&fc1, feat, 1, h, NULL);
        for (int i = 0; i < E; i++) h[i] = bs_silu(h[i] + b1[i]);
        bs_matmul(&fc2, h, 1, out[k], NULL);
        for (int i = 0; i < E; i++) out[k][i] += b2[i];
    }
    free(feat);
    free(h);
    return 0;
}

static int load_conf(bs_dspark *d, const source *s) {
    const int w = d->hp.n_embd + (d->hp.conf_with_markov ? d->hp.markov_rank : 0);
    const float *cw, *cb;
    if (load_vec(d, s, "dspark.confidence_head.weight", w, &cw) || load_vec(d, s, "dspark.confidence_head.bias", 1, &cb))
        return -1;
    d->conf_w = own(d, bs_xmalloc((size_t)w * sizeof(float)));
    memcpy(d->conf_w, cw, (size_t)w * sizeof(float));
    d->conf_b = cb[0];
    return 0;
}

static int load_tensors(bs_dspark *d, const source *s) {
    bs_dspark_hparams *hp = &d->hp;
    tinfo emb;
    if (src_find(s, "token_embd.weight", &emb)) return -1;
    if (emb.ne1 < 2 || emb.ne1 > (1 << 24)) return bs_error("token_embd.weight: bad vocabulary size");
    hp->n_vocab = (int)emb.ne1;
    if (check_hparams(hp)) return -1;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if (load_mat(d, s, "token_embd.weight", E, V, &d->tok_embd) ||
        load_vec(d, s, "output_norm.weight", E, &d->output_norm) ||
        load_mat(d, s, "dspark.fc.weight", (int64_t)hp->n_taps * E, E, &d->fc) ||
        load_vec(d, s, "dspark.hidden_norm.weight", E, &d->hidden_norm))
        return -1;
    if (src_has(s, "output.weight")) {
        if (load_mat(d, s, "output.weight", E, V, &d->output)) return -1;
    } else {
        d->output = d->tok_embd;
    }
    if (hp->markov_rank > 0 && (load_mat(d, s, "dspark.markov_head_a.weight", hp->markov_rank, V, &d->markov_a) ||
                                load_mat(d, s, "dspark.markov_head_b.weight", hp->markov_rank, V, &d->markov_b)))
        return -1;
    if (hp->conf_head && load_conf(d, s)) return -1;
    if (hp->log_snr && load_log_snr(d, s)) return -1;
    d->layers = bs_xcalloc((size_t)hp->n_layer, sizeof *d->layers);
    for (int il = 0; il < hp->n_layer; il++)
        if (load_layer(d, s, il)) return -1;
    return 0;
}

/* --- entry points --------------------------------------------------------------------------- */

/* config.json of a safetensors checkpoint: in the directory, or next to the file. */
static json_t *load_config(const char *path) {
    struct stat st;
    char *dir = bs_xstrdup(path);
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else strcpy(dir, ".");
    }
    size_t n = strlen(dir) + 16;
    char *cfg = bs_xmalloc(n);
    snprintf(cfg, n, "%s/config.json", dir);
    json_t *root = bs_json_load_file(cfg);
    free(cfg);
    free(dir);
    return root;
}

/* Matrices whose type has a repacked layout on this CPU (the legacy Q4_1 pack: 16-row groups)
 * are repacked at load, as the target's are. A file read into memory is packed in place; from
 * a mapping, into a copy, and the mapped source pages are dropped (the rare raw-row reader,
 * same_values, faults them back from the file). token_embd and markov_a are read by rows, and
 * an output tied to token_embd shares its bytes, so those stay as they are. */
static int pack_matrices(bs_dspark *d) {
    const bs_dspark_hparams *hp = &d->hp;
    const int n = 3 + 7 * hp->n_layer;
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)n);
    int k = 0;
    ws[k++] = &d->fc;
    ws[k++] = &d->markov_b;
    if (d->output.data != d->tok_embd.data) ws[k++] = &d->output;
    for (int il = 0; il < hp->n_layer; il++) {
        bs_dspark_layer *L = &d->layers[il];
        bs_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < BS_ARRAY_LEN(lw); i++) ws[k++] = lw[i];
    }
    const bool in_place = !d->gguf->mmapped;
    bs_pool *pool = NULL;
    int rc = 0;
    for (int i = 0; i < k && !rc; i++) {
        bs_weight *w = ws[i];
        if (!w->data || !bs_weight_packable(w)) continue;
        if (!pool) pool = bs_pool_new(0);
        if (in_place) {
            rc = bs_weight_pack_in_place(w, pool);
            continue;
        }
        if ((rc = bs_weight_pack(w, pool)) == 0 && w->packed) {
            own(d, w->packed);
            bs_release_mapped(w->data, (uint64_t)w->row_bytes * (uint64_t)w->ne1);
        }
    }
    bs_pool_free(pool);
    free(ws);
    return rc;
}

/* A drafter made for a Hadamard-folded target (Bonsai 2) may store its LM head folded
 * (prism.hadamard.*, output.weight only): its products then take the final norm rotated. */
static int attach_fold(bs_dspark *d) {
    if (bs_hadamard_read(d->gguf, true, &d->fold)) return -1;
    if (!d->fold) return 0;
    if (bs_hadamard_folds(d->fold, "output.weight", false)) {
        if (d->output.data == d->tok_embd.data)
            return bs_error("prism.hadamard folds output.weight, which this drafter ties to its token table");
        if (!(d->output.rot = bs_hadamard_rotation(d->fold, d->output.ne0, 0, 0, 0, false))) return -1;
    }
    return bs_hadamard_check_all_found(d->fold);
}

static int load_any(bs_dspark *d, const char *path, const bs_dspark_params *p) {
    struct stat st;
    bool dir = !stat(path, &st) && S_ISDIR(st.st_mode);
    if (!dir && !bs_ends_with(path, ".safetensors") && !bs_ends_with(path, ".json")) {
        if (!(d->gguf = gguf_open(path, p->no_mmap ? GGUF_OPEN_NO_MMAP : GGUF_OPEN_PREFAULT))) return -1;
        source s = {.g = d->gguf};
        return hparams_gguf(d->gguf, &d->hp) || load_tensors(d, &s) || attach_fold(d) || pack_matrices(d) ? -1 : 0;
    }
    json_t *cfg = load_config(path);
    if (!cfg) return -1;
    int rc = hparams_json(cfg, &d->hp);
    json_decref(cfg);
    if (rc) return bs_error_prefix("config.json: ");
    if (!(d->st = st_model_open(path, p->no_mmap ? ST_OPEN_NO_MMAP : ST_OPEN_PREFAULT))) return -1;
    source s = {.st = d->st};
    return load_tensors(d, &s);
}

bs_dspark *bs_dspark_load(const char *path, const bs_dspark_params *params) {
    bs_dspark_params def = {0};
    bs_dspark *d = bs_xcalloc(1, sizeof *d);
    d->dev = bs_dspark_dev_new();
    d->hp.eps = 1e-6f;
    d->hp.rope_base = 1e6f;
    if (load_any(d, path, params ? params : &def)) {
        bs_error_prefix("loading drafter %s: ", path);
        bs_dspark_free(d);
        return NULL;
    }
    return d;
}

void bs_dspark_free(bs_dspark *d) {
    if (!d) return;
    bs_dspark_dev_free(d->dev);
    if (d->gguf) gguf_close(d->gguf);
    if (d->st) st_model_close(d->st);
    bs_hadamard_free(d->fold);
    for (int i = 0; i < d->n_owned; i++) free(d->owned[i]);
    free(d->owned);
    free(d->layers);
    free(d);
}

int bs_dspark_check_pair(const bs_dspark *d, const bs_model *t) {
    const bs_dspark_hparams *hp = &d->hp;
    if (hp->n_vocab != t->hp.n_vocab)
        return bs_error("drafter vocabulary %d != target vocabulary %d", hp->n_vocab, t->hp.n_vocab);
    if (hp->n_embd != t->hp.n_embd)
        return bs_error("drafter hidden size %d != target hidden size %d", hp->n_embd, t->hp.n_embd);
    for (int i = 0; i < hp->n_taps; i++)
        if (hp->taps[i] >= t->hp.n_layer)
            return bs_error("drafter taps target layer %d but the target has %d layers", hp->taps[i], t->hp.n_layer);
    if (hp->mask_id >= t->hp.n_vocab) return bs_error("drafter mask id %d is outside the target vocabulary", hp->mask_id);
    return 0;
}

static bool same_fold(const bs_rotation *a, const bs_rotation *b) {
    if (!a || !b) return a == b;
    return a->block == b->block && a->width == b->width && a->perm_hd == b->perm_hd && a->inverse == b->inverse &&
           (!a->perm_hd || (a->perm_nk == b->perm_nk && a->perm_rep == b->perm_rep)) && !a->signs == !b->signs &&
           (!a->signs || !memcmp(a->signs, b->signs, (size_t)a->width * sizeof *a->signs));
}

/* Same values in every row (compared after dequantization, so a Q2_0 copy of Q2_0 data matches
 * whatever the storage, and different data never does). A drafter's own fold must be the
 * target's; a drafter that declares none but stores a folded target's bytes (a copy of its
 * table or head, as Bonsai 2 drafters carry) takes the target's fold with them when borrowing. */
static bool same_values(const bs_weight *a, const bs_weight *b) {
    if (a->ne0 != b->ne0 || a->ne1 != b->ne1) return false;
    if (a->rot && !same_fold(a->rot, b->rot)) return false;
    if (a->type == b->type && (a->data == b->data || (a->packed != a->data && b->packed != b->data &&
                                                      !memcmp(a->data, b->data, a->row_bytes * (size_t)a->ne1))))
        return true;
    if (a->type == BS_PTQ1_0 && b->type == BS_PQ2_0) {   /* a PTQ1_0 target runs transcoded: compare as PQ2_0 */
        const size_t rb2 = bs_row_size(BS_PQ2_0, a->ne0);
        uint8_t *qa = bs_xmalloc(a->row_bytes), *ta2 = bs_xmalloc(rb2), *qb = bs_xmalloc(b->row_bytes);
        bool same = true;
        for (int64_t r = 0; r < a->ne1 && same; r++) {
            bs_ptq1_0_to_pq2_0(bs_weight_row(a, r, qa), ta2, a->ne0);
            same = !memcmp(ta2, bs_weight_row(b, r, qb), rb2);
        }
        free(qa), free(ta2), free(qb);
        return same;
    }
    const bs_type_traits *ta = bs_type_get(a->type), *tb = bs_type_get(b->type);
    float *ra = bs_xmalloc((size_t)a->ne0 * sizeof(float)), *rb = bs_xmalloc((size_t)a->ne0 * sizeof(float));
    uint8_t *qa = bs_xmalloc(a->row_bytes), *qb = bs_xmalloc(b->row_bytes);   /* rows packed in place */
    bool same = true;
    for (int64_t r = 0; r < a->ne1 && same; r++) {
        ta->to_float(bs_weight_row(a, r, qa), ra, a->ne0);
        tb->to_float(bs_weight_row(b, r, qb), rb, b->ne0);
        same = !memcmp(ra, rb, (size_t)a->ne0 * sizeof(float));
    }
    free(ra), free(rb), free(qa), free(qb);
    return same;
}

int bs_dspark_share_embeddings(bs_dspark *d, const bs_model *t, bool force) {
    int n = 0;
    if (!d->embd_borrowed && (force || same_values(&d->tok_embd, &t->tok_embd))) {
        d->tok_embd = t->tok_embd;
        d->embd_borrowed = true;
        n++;
    }
    if (!d->output_borrowed && (force || same_values(&d->output, &t->output))) {
        d->output = t->output;
        d->output_borrowed = true;
        n++;
    }
    return n;
}
