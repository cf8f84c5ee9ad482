/* convert_drafter.c: DSpark drafter GGUF <-> safetensors + config.json (see convert.h). */
#include "tools/convert.h"
#include "dspark/dspark_names.h"
#include "formats/gguf.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/progress.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "formats/safetensors.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK_BYTES (32u << 20)
#define NAME_LEN 160

/* --- shared helpers ------------------------------------------------------------------------- */

/* A float as the shortest decimal that reads back as the same float, so config.json shows 1e-06
 * (not 9.99999997e-07) and converting back gives the same bits. */
static json_t *json_f32(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return json_real(strtod(buf, NULL));
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = bs_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int make_dir(const char *dir) {
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    }
    return bs_error("%s: cannot create directory: %s", dir, strerror(errno));
}

/* The most common matrix type by element count (for general.file_type / torch_dtype). */
static int dominant_type(const int *types, const uint64_t *elems, const int *n_dims, uint64_t n) {
    int best = BS_F32;
    uint64_t best_n = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (n_dims[i] < 2) continue;
        uint64_t c = 0;
        for (uint64_t j = 0; j < n; j++)
            if (n_dims[j] >= 2 && types[j] == types[i]) c += elems[j];
        if (c > best_n) { best_n = c; best = types[i]; }
    }
    return best;
}

static const char *torch_dtype(int type) {
    return type == BS_F32 ? "float32" : type == BS_F16 ? "float16" : "bfloat16";
}

/* --- GGUF -> safetensors ---------------------------------------------------------------------- */

static int cfg_u32(json_t *cfg, const gguf_file *f, const char *json_key, const char *key, bool req, int64_t def) {
    uint64_t v;
    if (!gguf_find_kv(f, key)) {
        if (req) return bs_error("missing metadata key %s", key);
        if (def >= 0) json_object_set_new(cfg, json_key, json_integer(def));
        return 0;
    }
    if (gguf_get_u64(f, key, &v) || v > INT64_MAX) return bs_error_prefix("%s: ", key);
    json_object_set_new(cfg, json_key, json_integer((json_int_t)v));
    return 0;
}

static int cfg_f32(json_t *cfg, const gguf_file *f, const char *json_key, const char *key, bool req, float def) {
    float v = def;
    if (gguf_find_kv(f, key) ? gguf_get_f32(f, key, &v) : req ? bs_error("missing metadata key %s", key) : 0)
        return -1;
    json_object_set_new(cfg, json_key, json_f32(v));
    return 0;
}

static int cfg_bool(json_t *cfg, const gguf_file *f, const char *json_key, const char *key) {
    bool v = false;
    if (gguf_find_kv(f, key) && gguf_get_bool(f, key, &v)) return -1;
    json_object_set_new(cfg, json_key, json_boolean(v));
    return 0;
}

static json_t *make_config(const gguf_file *f, int64_t n_vocab, int dom_type, bool has_output) {
    json_t *cfg = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string("Qwen3DSparkModel"));
    json_object_set_new(cfg, "architectures", arch);
    json_object_set_new(cfg, "model_type", json_string("qwen3"));
    const char *name = gguf_get_str(f, "general.name");
    if (name) json_object_set_new(cfg, "_name_or_path", json_string(name));
    int rc = cfg_u32(cfg, f, "hidden_size", "dspark.embedding_length", true, -1) ||
             cfg_u32(cfg, f, "intermediate_size", "dspark.feed_forward_length", true, -1) ||
             cfg_u32(cfg, f, "num_hidden_layers", "dspark.block_count", true, -1) ||
             cfg_u32(cfg, f, "num_attention_heads", "dspark.attention.head_count", true, -1) ||
             cfg_u32(cfg, f, "num_key_value_heads", "dspark.attention.head_count_kv", true, -1) ||
             cfg_u32(cfg, f, "max_position_embeddings", "dspark.context_length", false, -1) ||
             cfg_f32(cfg, f, "rms_norm_eps", "dspark.attention.layer_norm_rms_epsilon", false, 1e-6f) ||
             cfg_f32(cfg, f, "rope_theta", "dspark.rope.freq_base", false, 1e6f) ||
             cfg_u32(cfg, f, "block_size", "dspark.dspark.block_size", true, -1) ||
             cfg_u32(cfg, f, "mask_token_id", "dspark.dspark.mask_token_id", true, -1) ||
             cfg_u32(cfg, f, "markov_rank", "dspark.dspark.markov_rank", false, 0) ||
             cfg_bool(cfg, f, "enable_confidence_head", "dspark.dspark.confidence_head") ||
             cfg_bool(cfg, f, "confidence_head_with_markov", "dspark.dspark.confidence_head_with_markov") ||
             cfg_bool(cfg, f, "log_snr_conditioning", "dspark.dspark.log_snr_conditioning");
    bool snr = json_is_true(json_object_get(cfg, "log_snr_conditioning"));
    if (!rc && snr)
        rc = cfg_f32(cfg, f, "min_log_snr", "dspark.dspark.min_log_snr", true, 0) ||
             cfg_f32(cfg, f, "max_log_snr", "dspark.dspark.max_log_snr", true, 0);
    if (!rc) {
        /* head_dim defaults to hidden / heads, as the loader does */
        int64_t hd = json_integer_value(json_object_get(cfg, "hidden_size")) /
                     BS_MAX(1, json_integer_value(json_object_get(cfg, "num_attention_heads")));
        rc = cfg_u32(cfg, f, "head_dim", "dspark.attention.key_length", false, hd);
    }
    json_t *taps = json_array();
    uint64_t nt = gguf_get_arr_n(f, "dspark.dspark.target_layers");
    if (!nt) rc = rc ? rc : bs_error("missing integer array dspark.dspark.target_layers");
    for (uint64_t i = 0; i < nt && !rc; i++) {
        int64_t v;
        if (gguf_get_arr_i64(f, "dspark.dspark.target_layers", i, &v)) rc = -1;
        else json_array_append_new(taps, json_integer(v));
    }
    json_object_set_new(cfg, "target_layer_ids", taps);
    json_object_set_new(cfg, "vocab_size", json_integer(n_vocab));
    json_object_set_new(cfg, "tie_word_embeddings", json_boolean(!has_output));
    json_object_set_new(cfg, "torch_dtype", json_string(torch_dtype(dom_type)));
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_type", json_string("default"));
    json_object_set(rp, "rope_theta", json_object_get(cfg, "rope_theta"));
    json_object_set_new(cfg, "rope_parameters", rp);
    if (rc) { json_decref(cfg); return NULL; }
    return cfg;
}

static int write_json(const json_t *j, const char *path) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(9) | JSON_PRESERVE_ORDER);
    if (!s) return bs_error("%s: cannot encode JSON", path);
    int rc = bs_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}

/* Stream one GGUF tensor into the safetensors writer as `dtype` (same bytes, or dequantized). */
static int st_stream(st_writer *w, bs_pool *pool, const gguf_tensor *t, int out_type, bool mapped, bs_progress *pr) {
    if (out_type == t->type) {
        for (uint64_t off = 0; off < t->nbytes; off += CHUNK_BYTES) {
            size_t n = (size_t)BS_MIN((uint64_t)CHUNK_BYTES, t->nbytes - off);
            if (st_w_write(w, (const uint8_t *)t->data + off, n)) return -1;
            if (mapped) bs_release_mapped((const uint8_t *)t->data + off, n);
            bs_progress_add(pr, n);
        }
        return 0;
    }
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t sr = bs_row_size(t->type, t->ne[0]), dr = bs_row_size(out_type, t->ne[0]);
    uint64_t per = BS_MAX(1, CHUNK_BYTES / dr);
    uint8_t *buf = bs_xmalloc((size_t)(BS_MIN(per, rows) * dr));
    int rc = 0;
    for (uint64_t r0 = 0; r0 < rows && !rc; r0 += per) {
        uint64_t nr = BS_MIN(per, rows - r0);
        rc = bs_convert_rows(pool, t->type, (const uint8_t *)t->data + r0 * sr, out_type, buf, t->ne[0], (int64_t)nr);
        if (!rc) rc = st_w_write(w, buf, (size_t)(nr * dr));
        if (mapped) bs_release_mapped((const uint8_t *)t->data + r0 * sr, nr * sr);
        bs_progress_add(pr, nr * sr);
    }
    free(buf);
    return rc;
}

/* The safetensors dtype of a written type: the float types and integers as they are (their
 * bytes are streamed unchanged), dequantized blocks as BF16. */
static int st_dtype_of(int type) {
    switch (type) {
    case BS_F32: return ST_F32;
    case BS_F16: return ST_F16;
    case BS_I8: return ST_I8;
    case BS_I16: return ST_I16;
    case BS_I32: return ST_I32;
    default: return ST_BF16;
    }
}

static int to_st_tensors(const gguf_file *f, st_writer *w, bs_pool *pool, int *types, const char **hf) {
    int rc = 0, n_deq = 0;
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!hf[i]) continue;
        int64_t shape[GGUF_MAX_DIMS];
        for (int d = 0; d < t->n_dims; d++) shape[d] = t->ne[t->n_dims - 1 - d];
        if (st_w_add_tensor(w, hf[i], st_dtype_of(types[i]), t->n_dims, shape) < 0) rc = -1;
        if (types[i] != t->type) {
            fprintf(stderr, "note: %s is %s: written as BF16 (dequantized)\n", t->name, bs_type_name(t->type));
            n_deq++;
        }
        total += t->nbytes;
    }
    bs_progress pr;
    bs_progress_begin(&pr, "convert", total);
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!hf[i]) continue;
        if ((rc = st_stream(w, pool, t, types[i], f->mmapped, &pr))) bs_error_prefix("%s: ", t->name);
        if (f->mmapped) bs_release_mapped(t->data, t->nbytes);
    }
    if (!rc) {
        char extra[64];
        snprintf(extra, sizeof extra, "%" PRIu64 " tensors, %d dequantized", f->n_tensors, n_deq);
        bs_progress_end(&pr, extra);
    }
    return rc;
}

static int gguf_to_st(const gguf_file *f, const char *dir, bs_pool *pool) {
    const char *arch = gguf_get_str(f, "general.architecture");
    if (!arch || strcmp(arch, "dspark")) return bs_error("not a DSpark drafter (general.architecture is '%s')", arch ? arch : "?");
    uint64_t n = f->n_tensors;
    int *types = bs_xcalloc(n + 1, sizeof *types), *nd = bs_xcalloc(n + 1, sizeof *nd);
    uint64_t *el = bs_xcalloc(n + 1, sizeof *el);
    const char **hf = bs_xcalloc(n + 1, sizeof *hf);
    char **names = bs_xcalloc(n + 1, sizeof *names);
    int64_t n_vocab = -1;
    bool has_output = false;
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char buf[NAME_LEN];
        types[i] = bs_type_get(t->type)->is_quantized ? BS_BF16 : t->type;
        nd[i] = t->n_dims;
        el[i] = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        if (!strcmp(t->name, "token_embd.weight")) n_vocab = t->ne[1];
        has_output |= !strcmp(t->name, "output.weight");
        if (!bs_dspark_hf_name(t->name, 0, buf, sizeof buf)) {
            fprintf(stderr, "note: %s is not a DSpark drafter tensor: skipped\n", t->name);
            continue;
        }
        if (!bs_type_get(types[i])->to_float && types[i] != t->type) {
            bs_error("%s: type %s cannot be converted", t->name, bs_type_name(t->type));
            goto fail;
        }
        hf[i] = names[i] = bs_xstrdup(buf);
    }
    int rc = -1;
    if (n_vocab < 0) { bs_error("no token_embd.weight"); goto fail; }
    json_t *cfg = make_config(f, n_vocab, dominant_type(types, el, nd, n), has_output);
    if (!cfg) goto fail;
    char *cfg_path = path_join(dir, "config.json"), *st_path = path_join(dir, "model.safetensors");
    st_writer *w = st_w_open(st_path);
    if (w) {
        st_w_set_meta(w, "format", "pt");
        rc = to_st_tensors(f, w, pool, types, hf);
        if (rc) st_w_abort(w);
        else rc = st_w_close(w);
    }
    if (!rc) rc = write_json(cfg, cfg_path);
    json_decref(cfg);
    free(cfg_path);
    free(st_path);
    goto done;
fail:
    rc = -1;
done:
    for (uint64_t i = 0; i < n; i++) free(names[i]);
    free(names); free(hf); free(types); free(nd); free(el);
    return rc;
}

int bs_convert_drafter_to_st(const char *in_gguf, const char *out_dir, int n_threads) {
    if (make_dir(out_dir)) return -1;
    const char *inputs[] = {in_gguf};
    char *st_path = path_join(out_dir, "model.safetensors"), *cfg_path = path_join(out_dir, "config.json");
    int same = bs_check_outputs(st_path, cfg_path, inputs, 1);
    free(st_path);
    free(cfg_path);
    if (same) return -1;
    gguf_file *f = gguf_open(in_gguf, 0);
    if (!f) return -1;
    bs_pool *pool = bs_pool_new(n_threads > 0 ? n_threads : bs_cpu_count());
    int rc = pool ? gguf_to_st(f, out_dir, pool) : -1;
    bs_pool_free(pool);
    gguf_close(f);
    return rc;
}

/* --- safetensors -> GGUF ---------------------------------------------------------------------- */

typedef struct in_tensor { const st_tensor *t; char name[NAME_LEN]; long rank; int type; } in_tensor;

static int cmp_rank(const void *a, const void *b) {
    const in_tensor *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int w_int(gguf_writer *w, const json_t *cfg, const char *key, const char *jkey, bool req, int64_t def) {
    int64_t v;
    json_t *j = hf_get(cfg, jkey);
    if (!req && def < 0 && (!j || json_is_null(j))) return 0;   /* optional key: omitted */
    if (req ? hf_int_req(cfg, jkey, &v) : hf_int(cfg, jkey, def, &v)) return bs_error_prefix("config.json: ");
    if (v < 0 || v > UINT32_MAX) return bs_error("config.json: %s = %" PRId64 " is out of range", jkey, v);
    gguf_w_set_u32(w, key, (uint32_t)v);
    return 0;
}

static int w_float(gguf_writer *w, const json_t *cfg, const char *key, const char *jkey, double def) {
    double v;
    if (hf_float(cfg, jkey, def, &v)) return bs_error_prefix("config.json: ");
    gguf_w_set_f32(w, key, (float)v);
    return 0;
}

static int w_bool(gguf_writer *w, const json_t *cfg, const char *key, const char *jkey) {
    bool v;
    if (hf_bool(cfg, jkey, false, &v)) return bs_error_prefix("config.json: ");
    gguf_w_set_bool(w, key, v);
    return 0;
}

static int drafter_metadata(gguf_writer *w, const json_t *cfg, const char *dir, int ftype) {
    gguf_w_set_str(w, "general.architecture", "dspark");
    const char *name = hf_str(cfg, "_name_or_path", NULL);
    if (!name) name = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
    gguf_w_set_str(w, "general.name", name);
    int64_t E, H, taps[256];
    int n_taps;
    double theta = 1e6;
    if (hf_int_req(cfg, "hidden_size", &E) || hf_int_req(cfg, "num_attention_heads", &H) || H <= 0)
        return bs_error_prefix("config.json: ");
    bool snr;
    if (w_int(w, cfg, "dspark.block_count", "num_hidden_layers", true, 0) ||
        w_int(w, cfg, "dspark.context_length", "max_position_embeddings", false, -1) ||
        w_int(w, cfg, "dspark.embedding_length", "hidden_size", true, 0) ||
        w_int(w, cfg, "dspark.feed_forward_length", "intermediate_size", true, 0) ||
        w_int(w, cfg, "dspark.attention.head_count", "num_attention_heads", true, 0) ||
        w_int(w, cfg, "dspark.attention.head_count_kv", "num_key_value_heads", true, 0) ||
        w_int(w, cfg, "dspark.attention.key_length", "head_dim", false, -1) ||
        w_int(w, cfg, "dspark.attention.value_length", "head_dim", false, -1) ||
        w_float(w, cfg, "dspark.attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-6) ||
        hf_float(cfg, "rope_parameters.rope_theta", theta, &theta) || hf_float(cfg, "rope_theta", theta, &theta))
        return bs_error_prefix("config.json: ");
    gguf_w_set_f32(w, "dspark.rope.freq_base", (float)theta);
    if (w_int(w, cfg, "dspark.vocab_size", "vocab_size", false, -1) ||
        w_int(w, cfg, "dspark.dspark.block_size", "block_size", false, 7) ||
        w_int(w, cfg, "dspark.dspark.mask_token_id", "mask_token_id", true, 0) ||
        hf_int_array(cfg, "target_layer_ids", taps, 256, &n_taps))
        return bs_error_prefix("config.json: ");
    if (n_taps < 1) return bs_error("config.json: no target_layer_ids");
    int32_t t32[256];
    for (int i = 0; i < n_taps; i++) {
        if (taps[i] < 0 || taps[i] > INT32_MAX) return bs_error("config.json: bad target_layer_ids[%d]", i);
        t32[i] = (int32_t)taps[i];
    }
    gguf_w_set_arr_i32(w, "dspark.dspark.target_layers", t32, (uint64_t)n_taps);
    if (w_int(w, cfg, "dspark.dspark.markov_rank", "markov_rank", true, 0) ||
        w_bool(w, cfg, "dspark.dspark.confidence_head", "enable_confidence_head") ||
        w_bool(w, cfg, "dspark.dspark.confidence_head_with_markov", "confidence_head_with_markov") ||
        w_bool(w, cfg, "dspark.dspark.log_snr_conditioning", "log_snr_conditioning") ||
        hf_bool(cfg, "log_snr_conditioning", false, &snr))
        return -1;
    if (snr && (w_float(w, cfg, "dspark.dspark.min_log_snr", "min_log_snr", NAN) ||
                w_float(w, cfg, "dspark.dspark.max_log_snr", "max_log_snr", NAN)))
        return -1;
    gguf_w_set_str(w, "tokenizer.ggml.model", "none");
    gguf_w_set_u32(w, "general.file_type", bs_ftype_of(ftype));
    return 0;
}

static int collect(const st_model *m, in_tensor **out, uint64_t *n_out) {
    in_tensor *v = bs_xcalloc(m->n_tensors + 1, sizeof *v);
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const st_tensor *t = m->tensors[i];
        in_tensor *x = &v[n];
        if (bs_dspark_gguf_name(t->name, x->name, sizeof x->name)) {
            fprintf(stderr, "note: %s is not a DSpark drafter tensor: skipped\n", t->name);
            continue;
        }
        x->type = st_dtype_to_bs_type(t->dtype);
        if (x->type != BS_F32 && x->type != BS_F16 && x->type != BS_BF16) {
            free(v);
            return bs_error("%s has dtype %s (expected F32, F16 or BF16)", t->name, st_dtype_name(t->dtype));
        }
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            free(v);
            return bs_error("%s has %d dimensions", t->name, t->n_dims);
        }
        for (uint64_t j = 0; j < n; j++)
            if (!strcmp(v[j].name, x->name)) {   /* report before v goes: the names live in it */
                const int rc = bs_error("%s and %s are the same tensor %s", v[j].t->name, t->name, x->name);
                free(v);
                return rc;
            }
        x->t = t;
        x->rank = bs_dspark_name_rank(x->name);
        n++;
    }
    qsort(v, n, sizeof *v, cmp_rank);
    *out = v;
    *n_out = n;
    return 0;
}

static int st_to_gguf(const st_model *m, const json_t *cfg, const char *dir, gguf_writer *w) {
    in_tensor *v = NULL;
    uint64_t n = 0;
    if (collect(m, &v, &n)) return -1;
    int *types = bs_xcalloc(n + 1, sizeof *types), *nd = bs_xcalloc(n + 1, sizeof *nd);
    uint64_t *el = bs_xcalloc(n + 1, sizeof *el), total = 0;
    for (uint64_t i = 0; i < n; i++) {
        types[i] = v[i].type;
        nd[i] = v[i].t->n_dims;
        el[i] = v[i].t->n_elements;
        total += v[i].t->nbytes;
    }
    int rc = drafter_metadata(w, cfg, dir, dominant_type(types, el, nd, n));
    for (uint64_t i = 0; i < n && !rc; i++) {
        const st_tensor *t = v[i].t;
        int64_t ne[GGUF_MAX_DIMS];
        for (int d = 0; d < t->n_dims; d++) ne[d] = t->shape[t->n_dims - 1 - d];
        if (gguf_w_add_tensor(w, v[i].name, v[i].type, t->n_dims, ne) < 0) rc = -1;
    }
    bs_progress pr;
    bs_progress_begin(&pr, "convert", total);
    for (uint64_t i = 0; i < n && !rc; i++) {
        const st_tensor *t = v[i].t;
        for (uint64_t off = 0; off < t->nbytes && !rc; off += CHUNK_BYTES) {
            size_t k = (size_t)BS_MIN((uint64_t)CHUNK_BYTES, t->nbytes - off);
            rc = gguf_w_write(w, (const uint8_t *)t->data + off, k);
            bs_release_mapped((const uint8_t *)t->data + off, k);   /* opened with mmap */
            bs_progress_add(&pr, k);
        }
        bs_release_mapped(t->data, t->nbytes);
    }
    if (!rc) {
        char extra[32];
        snprintf(extra, sizeof extra, "%" PRIu64 " tensors", n);
        bs_progress_end(&pr, extra);
    }
    free(types); free(nd); free(el); free(v);
    return rc;
}

int bs_convert_drafter_to_gguf(const char *in_dir, const char *out_gguf, int n_threads) {
    (void)n_threads;   /* a pure copy: nothing to parallelize */
    char *cfg_path = path_join(in_dir, "config.json");
    json_t *cfg = bs_json_load_file(cfg_path);
    free(cfg_path);
    if (!cfg) return -1;
    const char *inputs[] = {in_dir};
    if (bs_check_not_input(out_gguf, inputs, 1)) { json_decref(cfg); return -1; }
    st_model *m = st_model_open(in_dir, 0);
    gguf_writer *w = m ? gguf_w_open(out_gguf) : NULL;
    int rc = w ? st_to_gguf(m, cfg, in_dir, w) : -1;
    if (w) {
        if (rc) gguf_w_abort(w);
        else rc = gguf_w_close(w);
    }
    st_model_close(m);
    json_decref(cfg);
    return rc;
}
