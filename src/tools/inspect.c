/* inspect.c: describe GGUF and safetensors files (see inspect.h). Everything is first gathered
 * into one JSON object; the text report is printed from that object. */
#include "tools/inspect.h"
#include "io/hf_config.h"
#include "model/hadamard.h"
#include "formats/quant.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ARRAY_FULL 16      /* arrays up to this length are shown whole */
#define ARRAY_HEAD 8       /* longer ones: this many leading elements in JSON */

/* --- small helpers ------------------------------------------------------------------------ */
static json_t *jstr_n(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *c = bs_xmalloc(n + 1);    /* not UTF-8: show the ASCII bytes, '?' for the rest */
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    j = json_stringn(c, n);
    free(c);
    return j;
}

/* Shortest decimal that reads back as the same float, so 1e-6f prints as 1e-06. */
static double float_value(double f64, bool is_f32) {
    if (!is_f32 || !isfinite(f64)) return f64;
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, f64);
        if ((float)strtod(buf, NULL) == (float)f64) return strtod(buf, NULL);
    }
    return f64;
}

/* One scalar array element as JSON. */
static json_t *arr_elem(const gguf_value *v, uint64_t i) {
    int64_t x;
    const uint8_t *p = v->arr;
    switch (v->arr_type) {
    case GGUF_TYPE_STRING: {
        const gguf_str *s = &((const gguf_str *)v->arr)[i];
        return jstr_n(s->s, (size_t)s->len);
    }
    case GGUF_TYPE_FLOAT32: { float f; memcpy(&f, p + 4 * i, 4); return json_real(float_value(f, true)); }
    case GGUF_TYPE_FLOAT64: { double d; memcpy(&d, p + 8 * i, 8); return json_real(d); }
    case GGUF_TYPE_BOOL: return json_boolean(p[i]);
    case GGUF_TYPE_UINT64: {
        uint64_t u;
        memcpy(&u, p + 8 * i, 8);
        return u > (uint64_t)INT64_MAX ? json_real((double)u) : json_integer((json_int_t)u);
    }
    default: return gguf_arr_elem_i64(v, i, &x) == 0 ? json_integer(x) : json_null();
    }
}

static json_t *value_json(const gguf_value *v);

static json_t *array_json(const gguf_value *v) {
    uint64_t shown = v->n <= ARRAY_FULL ? v->n : ARRAY_HEAD;
    json_t *a = json_array();
    for (uint64_t i = 0; i < shown; i++)
        json_array_append_new(a, v->arr_type == GGUF_TYPE_ARRAY
                                     ? value_json(&((const gguf_value *)v->arr)[i])
                                     : arr_elem(v, i));
    if (v->n <= ARRAY_FULL) return a;
    return json_pack("{s:s, s:I, s:o}", "array_of", gguf_type_name(v->arr_type), "count",
                     (json_int_t)v->n, "head", a);
}

static json_t *value_json(const gguf_value *v) {
    switch (v->type) {
    case GGUF_TYPE_STRING: return jstr_n(v->str.s, (size_t)v->str.len);
    case GGUF_TYPE_FLOAT32: return json_real(float_value(v->f64, true));
    case GGUF_TYPE_FLOAT64: return json_real(v->f64);
    case GGUF_TYPE_BOOL: return json_boolean(v->b);
    case GGUF_TYPE_ARRAY: return array_json(v);
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        return v->u64 > (uint64_t)INT64_MAX ? json_real((double)v->u64) : json_integer((json_int_t)v->u64);
    default: return json_integer(v->i64);
    }
}

static int64_t jint(const json_t *o, const char *key, int64_t def) {
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

/* Accumulate per-type totals into info.totals. */
static void add_total(json_t *totals, const char *type, uint64_t params, uint64_t bytes) {
    json_t *types = json_object_get(totals, "types");
    json_t *t = json_object_get(types, type);
    if (!t) {
        t = json_pack("{s:I, s:I, s:I}", "tensors", (json_int_t)0, "params", (json_int_t)0, "bytes", (json_int_t)0);
        json_object_set_new(types, type, t);
    }
    json_object_set_new(t, "tensors", json_integer(jint(t, "tensors", 0) + 1));
    json_object_set_new(t, "params", json_integer(jint(t, "params", 0) + (json_int_t)params));
    json_object_set_new(t, "bytes", json_integer(jint(t, "bytes", 0) + (json_int_t)bytes));
    json_object_set_new(totals, "tensors", json_integer(jint(totals, "tensors", 0) + 1));
    json_object_set_new(totals, "params", json_integer(jint(totals, "params", 0) + (json_int_t)params));
    json_object_set_new(totals, "bytes", json_integer(jint(totals, "bytes", 0) + (json_int_t)bytes));
}

static void finish_totals(json_t *totals) {
    int64_t p = jint(totals, "params", 0), b = jint(totals, "bytes", 0);
    json_object_set_new(totals, "bits_per_weight", json_real(p ? (double)b * 8.0 / (double)p : 0));
    const char *k;
    json_t *t;
    json_object_foreach(json_object_get(totals, "types"), k, t) {
        p = jint(t, "params", 0), b = jint(t, "bytes", 0);
        json_object_set_new(t, "bits_per_weight", json_real(p ? (double)b * 8.0 / (double)p : 0));
    }
}

static json_t *new_totals(void) {
    return json_pack("{s:I, s:I, s:I, s:o}", "tensors", (json_int_t)0, "params", (json_int_t)0,
                     "bytes", (json_int_t)0, "types", json_object());
}

/* --- what the model is -------------------------------------------------------------------- */
/* Display name of a weight format in descriptions. */
static const char *format_name(const char *type) {
    static const struct { const char *type, *name; } names[] = {
        {"q2_0", "legacy Q2_0 (g128)"}, {"q2_0_g64", "Q2_0 (g64)"}, {"pq2_0", "PQ2_0 (g128)"},
        {"ptq1_0", "PTQ1_0 (g128)"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(names); i++)
        if (strcmp(type, names[i].type) == 0) return names[i].name;
    static char up[32];
    size_t i = 0;
    for (; type[i] && i < sizeof up - 1; i++) up[i] = (char)(type[i] >= 'a' && type[i] <= 'z' ? type[i] - 32 : type[i]);
    up[i] = 0;
    return up;
}

/* The matrix type holding the most parameters (matrices: tensors with 2+ dimensions). */
static const char *main_type(const json_t *tensors) {
    json_t *by = json_object();
    size_t i;
    json_t *t;
    json_array_foreach(tensors, i, t) {
        if (json_array_size(json_object_get(t, "shape")) < 2) continue;
        const char *ty = json_string_value(json_object_get(t, "type"));
        int64_t p = jint(t, "params", 0) + jint(by, ty, 0);
        json_object_set_new(by, ty, json_integer(p));
    }
    const char *best = NULL;
    int64_t best_p = -1;
    const char *k;
    json_t *v;
    json_object_foreach(by, k, v)
        if (json_integer_value(v) > best_p) best_p = json_integer_value(v), best = k;
    static char out[32];
    snprintf(out, sizeof out, "%s", best ? best : "none");
    json_decref(by);
    return out;
}

static const char *tensor_type(const json_t *tensors, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tensors, i, t)
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return json_string_value(json_object_get(t, "type"));
    return NULL;
}

/* "Q1_0", "legacy Q2_0 (g128) + BF16 ssm_alpha/beta", "Q1_0 + Q6_K output", ... */
static void format_summary(const json_t *tensors, const char *main, char *out, size_t n) {
    int k = snprintf(out, n, "%s", format_name(main));
    const char *special[] = {"token_embd.weight", "output.weight"};
    for (size_t i = 0; i < BS_ARRAY_LEN(special); i++) {
        const char *ty = tensor_type(tensors, special[i]);
        if (ty && strcmp(ty, main) != 0 && k > 0 && (size_t)k < n)
            k += snprintf(out + k, n - (size_t)k, " + %s %.*s", format_name(ty),
                          (int)(strchr(special[i], '.') - special[i]), special[i]);
    }
    const char *ab = tensor_type(tensors, "blk.0.ssm_alpha.weight");
    if (ab && strcmp(ab, main) != 0 && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, " + %s ssm_alpha/beta", format_name(ab));
}

static bool has_tensor(const gguf_file *f, const char *fmt, int il) {
    char name[96];
    snprintf(name, sizeof name, fmt, il);
    return gguf_find_tensor(f, name) != NULL;
}

static void describe_qwen35(const gguf_file *f, json_t *model, const json_t *tensors) {
    uint32_t n_layer = 0, n_embd = 0;
    gguf_get_u32(f, "qwen35.block_count", &n_layer);
    gguf_get_u32(f, "qwen35.embedding_length", &n_embd);
    int gdn = 0, attn = 0;
    for (uint32_t il = 0; il < n_layer && il < 100000; il++) {
        if (has_tensor(f, "blk.%d.attn_q.weight", (int)il)) attn++;
        else if (has_tensor(f, "blk.%d.ssm_a", (int)il)) gdn++;
    }
    const char *main = main_type(tensors);
    bool ternary = strstr(main, "q2_0") || strstr(main, "tq");
    const char *name = n_layer == 64 && n_embd == 5120 ? (ternary ? "Ternary-Bonsai-27B" : "Bonsai-27B")
                                                        : "qwen35";
    char fmt[160], desc[400];
    format_summary(tensors, main, fmt, sizeof fmt);
    snprintf(desc, sizeof desc, "%s target (%s%u layers: %d Gated DeltaNet + %d attention), %s",
             name, strcmp(name, "qwen35") ? "qwen35, " : "", n_layer, gdn, attn, fmt);
    json_object_set_new(model, "kind", json_string("target"));
    json_object_set_new(model, "name", json_string(name));
    json_object_set_new(model, "layers", json_integer(n_layer));
    json_object_set_new(model, "gdn_layers", json_integer(gdn));
    json_object_set_new(model, "attention_layers", json_integer(attn));
    json_object_set_new(model, "embedding_length", json_integer(n_embd));
    json_object_set_new(model, "main_type", json_string(main));
    json_object_set_new(model, "format", json_string(fmt));
    json_object_set_new(model, "description", json_string(desc));
}

/* Drafter facts (from GGUF keys or HF config keys) into model + description. */
static void describe_drafter(json_t *model, int64_t layers, int64_t block, const int64_t *taps,
                             int n_taps, int64_t mask, int64_t rank, const char *fmt) {
    char desc[400], tl[160] = "";
    int k = 0;
    json_t *jt = json_array();
    for (int i = 0; i < n_taps && k < (int)sizeof tl - 24; i++) {
        k += snprintf(tl + k, sizeof tl - (size_t)k, "%s%lld", i ? "," : "", (long long)taps[i]);
        json_array_append_new(jt, json_integer(taps[i]));
    }
    snprintf(desc, sizeof desc, "DSpark drafter (%lld layers), block %lld, taps [%s], mask %lld, "
             "markov rank %lld%s%s", (long long)layers, (long long)block, tl, (long long)mask,
             (long long)rank, fmt ? ", " : "", fmt ? fmt : "");
    json_object_set_new(model, "kind", json_string("drafter"));
    json_object_set_new(model, "layers", json_integer(layers));
    json_object_set_new(model, "block_size", json_integer(block));
    json_object_set_new(model, "target_layers", jt);
    json_object_set_new(model, "mask_token_id", json_integer(mask));
    json_object_set_new(model, "markov_rank", json_integer(rank));
    if (fmt) json_object_set_new(model, "format", json_string(fmt));
    json_object_set_new(model, "description", json_string(desc));
}

static void describe_dspark(const gguf_file *f, json_t *model, const json_t *tensors) {
    int64_t layers = -1, block = -1, mask = -1, rank = -1, taps[64];
    int n = 0;
    gguf_get_i64(f, "dspark.block_count", &layers);
    gguf_get_i64(f, "dspark.dspark.block_size", &block);
    gguf_get_i64(f, "dspark.dspark.mask_token_id", &mask);
    gguf_get_i64(f, "dspark.dspark.markov_rank", &rank);
    uint64_t nt = gguf_get_arr_n(f, "dspark.dspark.target_layers");
    for (uint64_t i = 0; i < nt && n < 64; i++)
        if (gguf_get_arr_i64(f, "dspark.dspark.target_layers", i, &taps[n]) == 0) n++;
    const char *main = main_type(tensors);
    char fmt[160];
    format_summary(tensors, main, fmt, sizeof fmt);
    describe_drafter(model, layers, block, taps, n, mask, rank, fmt);
    json_object_set_new(model, "main_type", json_string(main));
}

/* A LoRA adapter (general.type = adapter): its A/B pairs, rank and alpha, not a model. */
static void describe_adapter(const gguf_file *f, json_t *model, const json_t *tensors, const char *arch) {
    int64_t pairs = 0, rank = -1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        size_t n = strlen(t->name);
        if (n > 7 && strcmp(t->name + n - 7, ".lora_a") == 0) {
            pairs++;
            if (t->n_dims == 2 && rank < 0) rank = t->ne[1];
        }
    }
    float alpha = 0;
    bool has_alpha = gguf_get_f32(f, "adapter.lora.alpha", &alpha) == 0;
    const char *atype = gguf_get_str(f, "adapter.type");
    char fmt[160], desc[400], al[48] = "";
    format_summary(tensors, main_type(tensors), fmt, sizeof fmt);
    if (has_alpha) snprintf(al, sizeof al, ", alpha %g", (double)alpha);
    snprintf(desc, sizeof desc, "%.32s adapter for %.64s (%lld tensor pairs, rank %lld%s), %s",
             atype && !strcmp(atype, "lora") ? "LoRA" : atype ? atype : "unknown", arch ? arch : "an unknown model",
             (long long)pairs, (long long)rank, al, fmt);
    json_object_set_new(model, "kind", json_string("adapter"));
    json_object_set_new(model, "adapter_type", atype ? json_string(atype) : json_null());
    json_object_set_new(model, "pairs", json_integer(pairs));
    json_object_set_new(model, "rank", json_integer(rank));
    if (has_alpha) json_object_set_new(model, "alpha", json_real(alpha));
    json_object_set_new(model, "format", json_string(fmt));
    json_object_set_new(model, "description", json_string(desc));
}

/* --- GGUF ---------------------------------------------------------------------------------- */
/* "fold": {description} for a file with PrismML's Hadamard fold (Bonsai 2), or {error} when the
 * loader would refuse its keys. */
static json_t *describe_fold(const gguf_file *f, bool drafter) {
    bs_hadamard *h = NULL;
    json_t *o = NULL;
    if (bs_hadamard_read(f, drafter, &h)) {
        o = json_object();
        json_object_set_new(o, "error", json_string(bs_last_error()));
        bs_clear_error();
    } else if (h) {
        char d[200];
        bs_hadamard_describe(h, d, sizeof d);
        o = json_object();
        json_object_set_new(o, "description", json_string(d));
    }
    bs_hadamard_free(h);
    return o;
}

/* "tokenizer": {model, pre, normalization, normalization_source} for files with a vocabulary;
 * an invalid normalizer key shows as normalization null with the error. */
static json_t *describe_tokenizer(const gguf_file *f) {
    const char *model = gguf_get_str(f, "tokenizer.ggml.model");
    if (!model || !strcmp(model, "none")) return NULL;
    const char *pre = gguf_get_str(f, "tokenizer.ggml.pre"), *src = NULL;
    bs_norm_mode m;
    json_t *t = json_pack("{s:s, s:s}", "model", model, "pre", pre ? pre : "default");
    if (bs_tokenizer_gguf_normalize(f, &m, &src) == 0) {
        json_object_set_new(t, "normalization", json_string(bs_norm_name(m)));
        json_object_set_new(t, "normalization_source", json_string(src));
    } else {
        json_object_set_new(t, "normalization", json_null());
        json_object_set_new(t, "normalization_error", json_string(bs_last_error()));
    }
    return t;
}

json_t *bs_inspect_gguf(const gguf_file *f) {
    json_t *info = json_object(), *meta = json_object(), *tensors = json_array();
    json_object_set_new(info, "file", json_string(f->path));
    json_object_set_new(info, "format", json_string("gguf"));
    json_object_set_new(info, "version", json_integer(f->version));
    json_object_set_new(info, "alignment", json_integer(f->alignment));
    json_object_set_new(info, "file_size", json_integer((json_int_t)f->file_size));
    json_object_set_new(info, "data_offset", json_integer((json_int_t)f->data_offset));
    for (uint64_t i = 0; i < f->n_kv; i++)
        json_object_set_new(meta, f->kv[i].key.s, value_json(&f->kv[i].val));
    json_t *totals = new_totals();
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        json_t *shape = json_array();
        uint64_t params = 1;
        for (int d = 0; d < t->n_dims; d++) {
            json_array_append_new(shape, json_integer(t->ne[d]));
            params *= (uint64_t)t->ne[d];
        }
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:o, s:I, s:I, s:I}", "name", t->name,
                                                 "type", bs_type_name(t->type), "shape", shape,
                                                 "params", (json_int_t)params, "bytes",
                                                 (json_int_t)t->nbytes, "offset",
                                                 (json_int_t)t->offset));
        add_total(totals, bs_type_name(t->type), params, t->nbytes);
    }
    finish_totals(totals);
    json_t *model = json_object();
    const char *arch = gguf_get_str(f, "general.architecture");
    json_object_set_new(model, "architecture", arch ? json_string(arch) : json_null());
    const char *gtype = gguf_get_str(f, "general.type");
    if (gtype && strcmp(gtype, "adapter") == 0) {
        describe_adapter(f, model, tensors, arch);
    } else if (arch && strcmp(arch, "qwen35") == 0) {
        describe_qwen35(f, model, tensors);
    } else if (arch && strcmp(arch, "dspark") == 0) {
        describe_dspark(f, model, tensors);
    } else if (arch && strcmp(arch, "clip") == 0) {
        char fmt[160];
        const char *main = main_type(tensors);
        format_summary(tensors, main, fmt, sizeof fmt);
        json_object_set_new(model, "main_type", json_string(main));
        bs_inspect_describe_mmproj(f, model, fmt);
    } else {
        char desc[300], fmt[160];
        const char *main = main_type(tensors);
        format_summary(tensors, main, fmt, sizeof fmt);
        snprintf(desc, sizeof desc, "%.64s model, %s", arch ? arch : "unknown", fmt);
        json_object_set_new(model, "kind", json_string("unknown"));
        json_object_set_new(model, "main_type", json_string(main));
        json_object_set_new(model, "description", json_string(desc));
    }
    json_object_set_new(info, "model", model);
    json_t *fold = describe_fold(f, arch && !strcmp(arch, "dspark"));
    if (fold) json_object_set_new(info, "fold", fold);
    json_t *tok = describe_tokenizer(f);
    if (tok) json_object_set_new(info, "tokenizer", tok);
    json_object_set_new(info, "metadata", meta);
    json_object_set_new(info, "tensors", tensors);
    json_object_set_new(info, "totals", totals);
    return info;
}

/* --- safetensors ---------------------------------------------------------------------------- */
static void describe_hf(json_t *model, const json_t *cfg, const json_t *tensors) {
    const char *main = main_type(tensors);
    char fmt[160];
    format_summary(tensors, main, fmt, sizeof fmt);
    json_object_set_new(model, "main_type", json_string(main));
    const json_t *archs = hf_get(cfg, "architectures");
    const char *arch = json_string_value(json_array_get(archs, 0));
    const char *mt = json_string_value(hf_get(cfg, "model_type"));
    json_object_set_new(model, "architecture", arch ? json_string(arch) : mt ? json_string(mt) : json_null());
    bool dspark = (arch && (strstr(arch, "DSpark") || strstr(arch, "Dspark"))) ||
                  (mt && strstr(mt, "dspark"));
    int64_t layers = -1;
    if (hf_int(cfg, "num_hidden_layers", -1, &layers) || layers < 0)
        hf_int(cfg, "text_config.num_hidden_layers", -1, &layers);
    bs_clear_error();
    if (dspark) {
        int64_t block = -1, mask = -1, rank = -1, taps[64];
        int n = 0;
        hf_int(cfg, "block_size", 7, &block);
        hf_int(cfg, "mask_token_id", -1, &mask);
        hf_int(cfg, "markov_rank", -1, &rank);
        hf_int_array(cfg, "target_layer_ids", taps, 64, &n);
        bs_clear_error();
        describe_drafter(model, layers, block, taps, n, mask, rank, fmt);
        return;
    }
    char desc[400];
    snprintf(desc, sizeof desc, "%.80s checkpoint%s%lld layers%s, %s", arch ? arch : mt ? mt : "safetensors",
             layers >= 0 ? " (" : "", (long long)layers, layers >= 0 ? ")" : "", fmt);
    if (layers < 0) snprintf(desc, sizeof desc, "%.80s checkpoint, %s", arch ? arch : mt ? mt : "safetensors", fmt);
    json_object_set_new(model, "kind", json_string(cfg ? "hf-checkpoint" : "unknown"));
    json_object_set_new(model, "layers", json_integer(layers));
    json_object_set_new(model, "description", json_string(desc));
}

json_t *bs_inspect_safetensors(const st_model *m, const json_t *config) {
    json_t *info = json_object(), *meta = json_object(), *tensors = json_array(), *files = json_array();
    json_object_set_new(info, "file", json_string(m->n_files == 1 ? m->files[0]->path : m->dir));
    json_object_set_new(info, "format", json_string("safetensors"));
    uint64_t size = 0;
    for (int i = 0; i < m->n_files; i++) {
        const st_file *f = m->files[i];
        size += f->file_size;
        json_array_append_new(files, json_pack("{s:s, s:I, s:I}", "path", f->path, "file_size",
                                               (json_int_t)f->file_size, "tensors",
                                               (json_int_t)f->n_tensors));
        for (uint64_t k = 0; k < f->n_meta; k++)
            json_object_set_new(meta, f->meta[k].key, jstr_n(f->meta[k].value, strlen(f->meta[k].value)));
    }
    json_object_set_new(info, "file_size", json_integer((json_int_t)size));
    json_object_set_new(info, "files", files);
    json_t *totals = new_totals();
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const st_tensor *t = m->tensors[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        char ty[16];
        snprintf(ty, sizeof ty, "%s", st_dtype_name(t->dtype));
        for (char *p = ty; *p; p++) if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:o, s:I, s:I, s:I}", "name", t->name,
                                                 "type", ty, "shape", shape, "params",
                                                 (json_int_t)t->n_elements, "bytes",
                                                 (json_int_t)t->nbytes, "file",
                                                 (json_int_t)m->tensor_file[i]));
        add_total(totals, ty, t->n_elements, t->nbytes);
    }
    finish_totals(totals);
    json_t *model = json_object();
    describe_hf(model, config, tensors);
    json_object_set_new(info, "model", model);
    json_object_set_new(info, "metadata", meta);
    if (config) json_object_set(info, "config", (json_t *)config);
    json_object_set_new(info, "tensors", tensors);
    json_object_set_new(info, "totals", totals);
    return info;
}

/* --- entry point ---------------------------------------------------------------------------- */
static bool is_gguf(const char *path) {
    FILE *fp = fopen(path, "rb");
    unsigned char m[4] = {0};
    if (!fp) return false;
    size_t n = fread(m, 1, 4, fp);
    fclose(fp);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

/* config.json in the checkpoint's directory, if there is one (NULL otherwise or if broken:
 * a broken config is reported as a warning, not a failure of inspect). */
static json_t *load_config(const char *dir) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (stat(path, &st) != 0) return NULL;
    json_t *c = bs_json_load_file(path);
    if (!c) bs_log(0, "warning: %s\n", bs_last_error());
    return c;
}

/* A file named *.safetensors goes to the safetensors reader (its errors are precise); any
 * other file must at least start like one: an 8-byte header length that fits, then '{'. */
static bool looks_like_safetensors(const char *path, uint64_t size) {
    size_t n = strlen(path);
    if (n >= 12 && strcmp(path + n - 12, ".safetensors") == 0) return true;
    FILE *fp = fopen(path, "rb");
    unsigned char h[9];
    bool ok = fp && fread(h, 1, 9, fp) == 9;
    if (fp) fclose(fp);
    if (!ok) return false;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | h[i];
    return len >= 2 && len <= size - 8 && h[8] == '{';
}

json_t *bs_inspect_path(const char *path, bool no_mmap) {
    struct stat st;
    if (stat(path, &st) != 0) {
        bs_error("%s: no such file or directory", path);
        return NULL;
    }
    if (!S_ISDIR(st.st_mode) && is_gguf(path)) {
        gguf_file *f = gguf_open(path, no_mmap ? GGUF_OPEN_NO_MMAP : GGUF_OPEN_META_ONLY);
        if (!f) return NULL;
        json_t *info = bs_inspect_gguf(f);
        gguf_close(f);
        if (info) bs_inspect_check_mmproj(path, info);
        return info;
    }
    if (!S_ISDIR(st.st_mode) && !looks_like_safetensors(path, (uint64_t)st.st_size)) {
        bs_error("%s: not a GGUF or safetensors file", path);
        return NULL;
    }
    st_model *m = st_model_open(path, no_mmap ? ST_OPEN_NO_MMAP : ST_OPEN_META_ONLY);
    if (!m) return NULL;
    json_t *cfg = load_config(m->dir);
    json_t *info = bs_inspect_safetensors(m, cfg);
    json_decref(cfg);
    st_model_close(m);
    return info;
}

const char *bs_inspect_description(const json_t *info) {
    const char *d = json_string_value(json_object_get(json_object_get(info, "model"), "description"));
    return d ? d : "";
}

/* --- text report ------------------------------------------------------------------------------ */
static void human_bytes(char *buf, size_t n, double b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void human_count(char *buf, size_t n, double c) {
    if (c >= 1e9) snprintf(buf, n, "%.2f B", c / 1e9);
    else if (c >= 1e6) snprintf(buf, n, "%.2f M", c / 1e6);
    else if (c >= 1e3) snprintf(buf, n, "%.2f K", c / 1e3);
    else snprintf(buf, n, "%.0f", c);
}

/* A JSON value on one line; long strings are cut (the full text is in --json). */
static void print_value(FILE *out, const json_t *v) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v), shown = n > 60 ? 60 : n;
        while (shown < n && shown > 0 && ((unsigned char)s[shown] & 0xc0) == 0x80) shown--;
        json_t *cut = json_stringn_nocheck(s, shown);
        char *enc = json_dumps(cut, JSON_ENCODE_ANY);
        fprintf(out, "%s", enc ? enc : "\"?\"");
        if (shown < n) fprintf(out, "... (%zu bytes)", n);
        free(enc);
        json_decref(cut);
        return;
    }
    if (json_is_object(v) && json_object_get(v, "array_of")) {
        const json_t *head = json_object_get(v, "head");
        const char *of = json_string_value(json_object_get(v, "array_of"));
        fprintf(out, "[%lld %ss: ", (long long)jint(v, "count", 0), of);
        for (size_t i = 0; i < json_array_size(head) && i < 3; i++) {
            print_value(out, json_array_get(head, i));
            fprintf(out, ", ");
        }
        fprintf(out, "... ]");
        return;
    }
    if (json_is_array(v)) {
        fprintf(out, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) fprintf(out, ", ");
            print_value(out, json_array_get(v, i));
        }
        fprintf(out, "]");
        return;
    }
    char *enc = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(9));
    fprintf(out, "%s", enc ? enc : "?");
    free(enc);
}

static void print_shape(char *buf, size_t n, const json_t *shape) {
    int k = snprintf(buf, n, "[");
    for (size_t i = 0; i < json_array_size(shape) && (size_t)k < n; i++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", i ? ", " : "",
                      (long long)json_integer_value(json_array_get(shape, i)));
    if ((size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

/* One line: which vocabulary, and which Unicode normalization bitspark applies to its text. */
static void print_tokenizer(FILE *out, const json_t *tok) {
    if (!tok) return;
    const char *norm = json_string_value(json_object_get(tok, "normalization"));
    fprintf(out, "tokenizer: %s, pre-tokenizer %s, normalization ", json_string_value(json_object_get(tok, "model")),
            json_string_value(json_object_get(tok, "pre")));
    if (norm) fprintf(out, "%s (%s)\n", norm, json_string_value(json_object_get(tok, "normalization_source")));
    else fprintf(out, "invalid: %s\n", json_string_value(json_object_get(tok, "normalization_error")));
}

static void print_report(FILE *out, const json_t *info);

/* The report is rendered first and copied with every control byte but the newline shown as
 * '?': names and strings come from the file, and a terminal must never take one for an escape
 * sequence. */
void bs_inspect_print(FILE *out, const json_t *info) {
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    if (!m) return;
    print_report(m, info);
    if (fclose(m) == 0)
        for (size_t i = 0; i < n; i++) {
            const unsigned char c = (unsigned char)buf[i];
            fputc((c < 0x20 && c != '\n') || c == 0x7f ? '?' : c, out);
        }
    free(buf);
}

static void print_report(FILE *out, const json_t *info) {
    char b1[64], b2[64];
    const char *fmt = json_string_value(json_object_get(info, "format"));
    bool gguf = strcmp(fmt, "gguf") == 0;
    human_bytes(b1, sizeof b1, (double)jint(info, "file_size", 0));
    fprintf(out, "file:     %s\n", json_string_value(json_object_get(info, "file")));
    if (gguf)
        fprintf(out, "format:   GGUF v%lld, %s, alignment %lld\n", (long long)jint(info, "version", 0),
                b1, (long long)jint(info, "alignment", 0));
    else
        fprintf(out, "format:   safetensors, %zu file(s), %s\n",
                json_array_size(json_object_get(info, "files")), b1);
    fprintf(out, "model:    %s\n", bs_inspect_description(info));
    const json_t *sup = json_object_get(json_object_get(info, "model"), "supported");
    if (sup)
        fprintf(out, "vision:   %s\n", json_is_true(sup) ? "bitspark takes this projector (--mmproj)"
                : json_string_value(json_object_get(json_object_get(info, "model"), "unsupported_because")));
    const json_t *fold = json_object_get(info, "fold");
    if (fold && json_object_get(fold, "error"))
        fprintf(out, "fold:     refused: %s\n", json_string_value(json_object_get(fold, "error")));
    else if (fold)
        fprintf(out, "fold:     %s\n", json_string_value(json_object_get(fold, "description")));
    print_tokenizer(out, json_object_get(info, "tokenizer"));
    const json_t *meta = json_object_get(info, "metadata");
    fprintf(out, "\nmetadata (%zu):\n", json_object_size(meta));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        fprintf(out, "  %-44s = ", k);
        print_value(out, v);
        fputc('\n', out);
    }
    const json_t *cfg = json_object_get(info, "config");
    if (cfg) fprintf(out, "\nconfig.json: %zu keys (see --json)\n", json_object_size(cfg));
    const json_t *tensors = json_object_get(info, "tensors");
    fprintf(out, "\ntensors (%zu; shape %s):\n", json_array_size(tensors),
            gguf ? "as ggml ne: ne0 = row length first" : "row-major, outermost first");
    fprintf(out, "  %-44s %-9s %-22s %14s\n", "name", "type", "shape", "bytes");
    size_t i;
    json_array_foreach((json_t *)tensors, i, v) {
        char shape[96];
        print_shape(shape, sizeof shape, json_object_get(v, "shape"));
        fprintf(out, "  %-44s %-9s %-22s %14lld\n", json_string_value(json_object_get(v, "name")),
                json_string_value(json_object_get(v, "type")), shape, (long long)jint(v, "bytes", 0));
    }
    const json_t *tot = json_object_get(info, "totals");
    human_count(b1, sizeof b1, (double)jint(tot, "params", 0));
    human_bytes(b2, sizeof b2, (double)jint(tot, "bytes", 0));
    fprintf(out, "\ntotals:   %lld tensors, %s params, %s of tensor data, %.4f bits per weight\n",
            (long long)jint(tot, "tensors", 0), b1, b2,
            json_real_value(json_object_get(tot, "bits_per_weight")));
    json_object_foreach(json_object_get(tot, "types"), k, v) {
        human_count(b1, sizeof b1, (double)jint(v, "params", 0));
        human_bytes(b2, sizeof b2, (double)jint(v, "bytes", 0));
        fprintf(out, "  %-9s %5lld tensors, %12s params, %12s, %.4f bpw\n", k,
                (long long)jint(v, "tensors", 0), b1, b2,
                json_real_value(json_object_get(v, "bits_per_weight")));
    }
}
