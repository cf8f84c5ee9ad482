/* lora.c: reading LoRA adapters, GGUF (llama.cpp) and PEFT safetensors (see lora.h). */
#include "model/lora.h"
#include "formats/quant.h"
#include "formats/safetensors.h"
#include "io/util.h"

#include <errno.h>
#include <jansson.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_RANK 65536
#define MAX_DIM (1 << 26)

void bs_lora_free(bs_lora *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free(l->t[i].name);
        free(l->t[i].a);
        free(l->t[i].b);
    }
    free(l->t);
    free(l->path);
    free(l->config);
    free(l);
}

const bs_lora_tensor *bs_lora_find(const bs_lora *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return &l->t[i];
    return NULL;
}

int bs_lora_parse_arg(const char *arg, char **path, float *scale) {
    *scale = 1.0f;
    const char *colon = strrchr(arg, ':');
    if (colon && colon[1]) {
        char *end;
        errno = 0;
        double s = strtod(colon + 1, &end);
        if (!*end && !errno && isfinite(s)) {   /* FILE:SCALE; otherwise the ':' is part of FILE */
            *path = bs_xmalloc((size_t)(colon - arg) + 1);
            memcpy(*path, arg, (size_t)(colon - arg));
            (*path)[colon - arg] = 0;
            *scale = (float)s;
            return **path ? 0 : bs_error("--lora: empty file name in '%s'", arg);
        }
    }
    *path = bs_xstrdup(arg);
    return 0;
}

/* Room for one more tensor; returns it zeroed. */
static bs_lora_tensor *add_tensor(bs_lora *l, int *cap) {
    if (l->n == *cap) l->t = bs_xrealloc(l->t, (size_t)(*cap = *cap ? 2 * *cap : 16) * sizeof *l->t);
    bs_lora_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    return t;
}

/* Rows x cols floats from data of the given bs_type (rows dequantized one at a time). */
static float *to_f32(int type, const void *data, uint64_t nbytes, int64_t cols, int64_t rows, const char *what) {
    uint64_t need = bs_tensor_size(type, cols, (uint64_t)rows), n;
    if (need == UINT64_MAX || need > nbytes) return bs_error("%s: bad size for its shape", what), NULL;
    if (bs_mul_overflow((uint64_t)cols, (uint64_t)rows, &n) || n > (uint64_t)MAX_DIM * 64)
        return bs_error("%s: too large", what), NULL;
    float *out = malloc((n ? n : 1) * sizeof(float));
    if (!out) return bs_error("%s: out of memory", what), NULL;
    size_t row = bs_row_size(type, cols);
    for (int64_t r = 0; r < rows; r++)
        if (bs_dequantize(type, (const uint8_t *)data + (size_t)r * row, out + (size_t)r * (size_t)cols, cols)) {
            free(out);
            return bs_error("%s: cannot read type %s", what, bs_type_name(type)), NULL;
        }
    return out;
}

/* --- GGUF adapters ------------------------------------------------------------------------------ */

static int load_gguf(bs_lora *l, const char *path, const gguf_file *base) {
    gguf_file *f = gguf_open(path, 0);
    if (!f) return -1;
    int rc = -1, cap = 0;
    const char *gt = gguf_get_str(f, "general.type"), *at = gguf_get_str(f, "adapter.type");
    const char *arch = gguf_get_str(f, "general.architecture");
    const char *barch = base ? gguf_get_str(base, "general.architecture") : NULL;
    if (!gt || strcmp(gt, "adapter") || !at || strcmp(at, "lora")) {
        bs_error("not a LoRA adapter (general.type = adapter, adapter.type = lora expected)");
        goto done;
    }
    if (arch && barch && strcmp(arch, barch)) {
        bs_error("adapter for architecture '%s', model is '%s'", arch, barch);
        goto done;
    }
    if (gguf_find_kv(f, "adapter.lora.alpha") && gguf_get_f32(f, "adapter.lora.alpha", &l->alpha)) goto done;
    if (!isfinite(l->alpha)) { bs_error("adapter.lora.alpha is %g: not a finite number", (double)l->alpha); goto done; }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *a = &f->tensors[i];
        size_t nl = strlen(a->name);
        if (nl > 7 && !strcmp(a->name + nl - 7, ".lora_b")) continue;
        if (nl <= 7 || strcmp(a->name + nl - 7, ".lora_a")) {
            bs_error("unexpected tensor '%s' (only <name>.lora_a / .lora_b)", a->name);
            goto done;
        }
        char *name = bs_xstrdup(a->name), bname[1024];
        name[nl - 7] = 0;
        snprintf(bname, sizeof bname, "%s.lora_b", name);
        const gguf_tensor *b = gguf_find_tensor(f, bname);
        bs_lora_tensor *t = add_tensor(l, &cap);
        t->name = name;
        if (!b) { bs_error("%s has no %s", a->name, bname); goto done; }
        if (a->n_dims != 2 || b->n_dims != 2 || a->ne[1] != b->ne[0] || a->ne[1] < 1 || a->ne[1] > MAX_RANK ||
            a->ne[0] < 1 || a->ne[0] > MAX_DIM || b->ne[1] < 1 || b->ne[1] > MAX_DIM) {
            bs_error("%s: shapes [%lld, %lld] and [%lld, %lld] are not {in, r} and {r, out}", name,
                     (long long)a->ne[0], (long long)a->ne[1], (long long)b->ne[0], (long long)b->ne[1]);
            goto done;
        }
        t->in = a->ne[0];
        t->r = (int)a->ne[1];
        t->out = b->ne[1];
        t->scale = l->alpha != 0 ? l->alpha / (float)t->r : 1.0f;
        if (!(t->a = to_f32(a->type, a->data, a->nbytes, t->in, t->r, a->name)) ||
            !(t->b = to_f32(b->type, b->data, b->nbytes, t->r, t->out, b->name)))
            goto done;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {   /* every lora_b has its lora_a */
        const char *n = f->tensors[i].name;
        size_t nl = strlen(n);
        char an[1024];
        snprintf(an, sizeof an, "%.*s.lora_a", (int)BS_MIN(nl - 7, 1000), n);
        if (nl > 7 && !strcmp(n + nl - 7, ".lora_b") && !gguf_find_tensor(f, an)) {
            bs_error("%s has no lora_a", n);
            goto done;
        }
    }
    rc = l->n ? 0 : bs_error("the adapter has no tensors");
done:
    gguf_close(f);
    return rc;
}

/* --- PEFT adapters ------------------------------------------------------------------------------ */

typedef struct { int n_k, n_v, d_k, d_v; bool ok; } gdn_shape;

static gdn_shape base_gdn(const gguf_file *base) {
    gdn_shape g = {0};
    const char *arch = base ? gguf_get_str(base, "general.architecture") : NULL;
    if (!arch) return g;
    char key[256];
    int64_t v[4];
    static const char *keys[] = {"ssm.group_count", "ssm.time_step_rank", "ssm.state_size", "ssm.inner_size"};
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "%s.%s", arch, keys[i]);
        if (!gguf_find_kv(base, key) || gguf_get_i64(base, key, &v[i]) || v[i] < 1 || v[i] > MAX_DIM) return g;
    }
    if (v[1] % v[0] || v[3] % v[1]) return g;
    g = (gdn_shape){(int)v[0], (int)v[1], (int)v[2], (int)(v[3] / v[1]), true};
    return g;
}

/* HF v-head of GGUF v-head n (HF groups V heads by K head, GGUF tiles them). */
static int hf_head(const gdn_shape *g, int n) { return (n % g->n_k) * (g->n_v / g->n_k) + n / g->n_k; }

enum { RE_NONE, RE_QKV_ROWS, RE_HEAD_ROWS, RE_ONE_ROWS, RE_COLS };

/* PEFT module prefix -> GGUF tensor name and reorder kind; 0, or -1 if unknown. */
static int map_name(const char *prefix, char *out, size_t cap, int *reorder) {
    static const struct { const char *hf, *gg; int re; } mods[] = {
        {"self_attn.q_proj", "attn_q", RE_NONE},        {"self_attn.k_proj", "attn_k", RE_NONE},
        {"self_attn.v_proj", "attn_v", RE_NONE},        {"self_attn.o_proj", "attn_output", RE_NONE},
        {"mlp.gate_proj", "ffn_gate", RE_NONE},         {"mlp.up_proj", "ffn_up", RE_NONE},
        {"mlp.down_proj", "ffn_down", RE_NONE},         {"linear_attn.in_proj_qkv", "attn_qkv", RE_QKV_ROWS},
        {"linear_attn.in_proj_z", "attn_gate", RE_HEAD_ROWS}, {"linear_attn.in_proj_b", "ssm_beta", RE_ONE_ROWS},
        {"linear_attn.in_proj_a", "ssm_alpha", RE_ONE_ROWS},  {"linear_attn.out_proj", "ssm_out", RE_COLS},
    };
    *reorder = RE_NONE;
    size_t pl = strlen(prefix);
    if (pl >= 8 && !strcmp(prefix + pl - 8, "lm_head.")) {
        snprintf(out, cap, "output.weight");
        return 0;
    }
    const char *p = strstr(prefix, "layers.");
    if (!p) return -1;
    char *end;
    long il = strtol(p + 7, &end, 10);
    if (end == p + 7 || *end != '.' || il < 0 || il > 100000) return -1;
    for (size_t k = 0; k < BS_ARRAY_LEN(mods); k++) {
        size_t ml = strlen(mods[k].hf);
        if (!strncmp(end + 1, mods[k].hf, ml) && !strcmp(end + 1 + ml, ".")) {
            snprintf(out, cap, "blk.%ld.%s.weight", il, mods[k].gg);
            *reorder = mods[k].re;
            return 0;
        }
    }
    return -1;
}

/* Apply the V-head reorder: B's rows (out) or A's columns (in), HF order -> GGUF order. */
static int reorder(bs_lora_tensor *t, int kind, const gdn_shape *g) {
    if (kind == RE_NONE) return 0;
    if (!g->ok) return bs_error("%s: the base model has no Gated DeltaNet shape for the head reorder", t->name);
    const int64_t qk = 2LL * g->n_k * g->d_k, head = kind == RE_ONE_ROWS ? 1 : g->d_v;
    const int64_t off = kind == RE_QKV_ROWS ? qk : 0;
    const int64_t dim = kind == RE_COLS ? t->in : t->out;
    if (dim != off + (int64_t)g->n_v * head)
        return bs_error("%s: %lld %s do not match the base's %d V heads", t->name, (long long)dim,
                        kind == RE_COLS ? "inputs" : "outputs", g->n_v);
    if (kind == RE_COLS) {
        float *row = bs_xmalloc((size_t)t->in * sizeof *row);
        for (int r = 0; r < t->r; r++) {
            float *a = t->a + (size_t)r * t->in;
            memcpy(row, a, (size_t)t->in * sizeof *row);
            for (int n = 0; n < g->n_v; n++)
                memcpy(a + (size_t)n * head, row + (size_t)hf_head(g, n) * head, (size_t)head * sizeof *row);
        }
        free(row);
        return 0;
    }
    float *old = bs_xmalloc((size_t)t->out * t->r * sizeof *old);
    memcpy(old, t->b, (size_t)t->out * t->r * sizeof *old);
    const size_t rowsz = (size_t)t->r;
    for (int n = 0; n < g->n_v; n++)
        memcpy(t->b + (size_t)(off + n * head) * rowsz, old + (size_t)(off + hf_head(g, n) * head) * rowsz,
               (size_t)head * rowsz * sizeof *old);
    free(old);
    return 0;
}

static json_t *read_config(const char *path) {
    size_t len;
    char *text = bs_read_file(path, &len);
    if (!text) return NULL;
    json_error_t err;
    json_t *j = json_loadb(text, len, 0, &err);
    free(text);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        bs_error("%s: not a JSON object (%s)", path, err.text);
        return NULL;
    }
    return j;
}

static int load_peft(bs_lora *l, const char *path, const gguf_file *base) {
    char st_path[4096], cfg_path[4096];
    struct stat sb;
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", path);
        snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", path);
    } else {
        snprintf(st_path, sizeof st_path, "%s", path);
        const char *slash = strrchr(path, '/');
        snprintf(cfg_path, sizeof cfg_path, "%.*sadapter_config.json", slash ? (int)(slash - path + 1) : 0, path);
    }
    l->config = bs_xstrdup(cfg_path);
    json_t *cfg = read_config(cfg_path);
    if (!cfg) return -1;
    int rc = -1, cap = 0;
    st_file *f = NULL;
    json_t *ra = json_object_get(cfg, "rank_pattern"), *aa = json_object_get(cfg, "alpha_pattern");
    if (json_is_true(json_object_get(cfg, "fan_in_fan_out"))) { bs_error("fan_in_fan_out adapters are not supported"); goto done; }
    if (json_object_size(ra) || json_object_size(aa)) { bs_error("rank_pattern / alpha_pattern are not supported"); goto done; }
    if (!json_is_number(json_object_get(cfg, "lora_alpha"))) { bs_error("%s: no lora_alpha", cfg_path); goto done; }
    const double alpha = json_number_value(json_object_get(cfg, "lora_alpha"));
    if (!(fabs(alpha) <= FLT_MAX)) { bs_error("%s: lora_alpha %g is not a finite float", cfg_path, alpha); goto done; }
    l->alpha = (float)alpha;
    const bool rslora = json_is_true(json_object_get(cfg, "use_rslora"));
    if (!(f = st_open(st_path, 0))) goto done;
    const gdn_shape g = base_gdn(base);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *a = &f->tensors[i];
        const char *p = strstr(a->name, "lora_B.weight");
        if (p && !p[13]) continue;
        p = strstr(a->name, "lora_A.weight");
        if (!p || p[13]) { bs_error("unsupported adapter tensor '%s'", a->name); goto done; }
        char prefix[1024], bn[1100], gname[256];
        snprintf(prefix, sizeof prefix, "%.*s", (int)BS_MIN(p - a->name, 1000), a->name);
        snprintf(bn, sizeof bn, "%slora_B.weight", prefix);
        const st_tensor *b = st_find_tensor(f, bn);
        int re;
        if (!b) { bs_error("%s has no %s", a->name, bn); goto done; }
        if (map_name(prefix, gname, sizeof gname, &re)) { bs_error("no qwen35 tensor for '%s'", a->name); goto done; }
        if (a->n_dims != 2 || b->n_dims != 2 || a->shape[0] != b->shape[1] || a->shape[0] < 1 ||
            a->shape[0] > MAX_RANK || a->shape[1] < 1 || a->shape[1] > MAX_DIM || b->shape[0] < 1 || b->shape[0] > MAX_DIM) {
            bs_error("%s: shapes are not [r, in] and [out, r]", prefix);
            goto done;
        }
        int ta = st_dtype_to_bs_type(a->dtype), tb = st_dtype_to_bs_type(b->dtype);
        bs_lora_tensor *t = add_tensor(l, &cap);
        t->name = bs_xstrdup(gname);
        t->r = (int)a->shape[0];
        t->in = a->shape[1];
        t->out = b->shape[0];
        t->scale = l->alpha / (rslora ? sqrtf((float)t->r) : (float)t->r);
        if (ta == BS_TYPE_INVALID || tb == BS_TYPE_INVALID) { bs_error("%s: unsupported dtype", prefix); goto done; }
        if (!(t->a = to_f32(ta, a->data, a->nbytes, t->in, t->r, a->name)) ||
            !(t->b = to_f32(tb, b->data, b->nbytes, t->r, t->out, b->name)) || reorder(t, re, &g))
            goto done;
    }
    rc = l->n ? 0 : bs_error("the adapter has no LoRA tensors");
done:
    st_close(f);
    json_decref(cfg);
    return rc;
}

bs_lora *bs_lora_load(const char *path, const gguf_file *base) {
    bs_lora *l = bs_xcalloc(1, sizeof *l);
    l->path = bs_xstrdup(path);
    struct stat sb;
    size_t n = strlen(path);
    bool peft = (!stat(path, &sb) && S_ISDIR(sb.st_mode)) || (n > 12 && !strcmp(path + n - 12, ".safetensors"));
    if ((peft ? load_peft(l, path, base) : load_gguf(l, path, base)) == 0) {
        for (int i = 0; i < l->n; i++)
            for (int j = 0; j < i; j++)
                if (!strcmp(l->t[i].name, l->t[j].name)) {
                    bs_error("two deltas for %s", l->t[i].name);
                    goto fail;
                }
        return l;
    }
fail:
    bs_error_prefix("LoRA %s: ", path);
    bs_lora_free(l);
    return NULL;
}
