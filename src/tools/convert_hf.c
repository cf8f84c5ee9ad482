/* convert_hf.c: Hugging Face Qwen3.5 / Qwen3.6 dense text checkpoint -> qwen35 GGUF, with the
 * transforms of llama.cpp's converter (qwen35-arch.md §2.7, §4.4, §5):
 *   - every norm but linear_attn.norm gets +1 (HF stores w of (1 + w));
 *   - A_log -> ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias; conv1d [C,1,K] -> ne {K, C};
 *   - the V heads go from HF's grouped order (v head g*R + r pairs with k head g) to GGUF's tiled
 *     order (GGUF head n = r*K + g, so GGUF head n reads HF head (n % K)*R + n / K) in the V
 *     rows of in_proj_qkv and conv1d, the rows of in_proj_z / in_proj_b / in_proj_a, A_log,
 *     dt_bias and the input columns of out_proj;
 *   - q_proj keeps its layout: HF already interleaves [query | gate] per head as GGUF does.
 * Each output row is built in f32 from its source row (dequantized from F32/F16/BF16), then
 * written as the output type, a batch of rows at a time. Vision and MTP tensors are skipped. */
#include "tools/convert.h"
#include "formats/gguf.h"
#include "io/hf_config.h"
#include "io/progress.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "formats/safetensors.h"
#include "io/threadpool.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES (32u << 20)
#define DIM_MAX ((int64_t)1 << 20)

typedef struct hp {
    int64_t n_layer, E, F, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    int64_t nk, nv, dk, dv, conv_k, interval, rope_dim;
    int32_t sections[4];
    double eps, theta;
    bool tied;
    bool *recurrent;              /* per layer */
} hp;

enum xform { X_NONE, X_PLUS1, X_NEG_EXP };

typedef struct job {
    char name[96];
    const st_tensor *src;
    int src_type, type, n_dims;
    int64_t ne0, rows;            /* GGUF shape: ne {ne0, rows} */
    enum xform x;
    int64_t row_off, row_blk;     /* V-head reorder of rows [row_off, +nv*row_blk), row_blk rows a head */
    int64_t col_blk;              /* V-head reorder of columns in blocks of col_blk (0: none) */
} job;

/* --- config ---------------------------------------------------------------------------------- */

/* text_config.KEY, else KEY (text-only configs are flat). */
static const char *tkey(const json_t *cfg, const char *key, char *buf, size_t n) {
    snprintf(buf, n, "text_config.%s", key);
    if (hf_get(cfg, buf)) return buf;
    return key;
}

static int c_int(const json_t *cfg, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    char b[128];
    const char *k = tkey(cfg, key, b, sizeof b);
    if ((def == INT64_MIN ? hf_int_req(cfg, k, out) : hf_int(cfg, k, def, out))) return bs_error_prefix("config.json: ");
    if (*out < lo || *out > hi) return bs_error("config.json: %s = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", k, *out, lo, hi);
    return 0;
}

static int c_float(const json_t *cfg, const char *key, double def, double *out) {
    char b[128];
    return hf_float(cfg, tkey(cfg, key, b, sizeof b), def, out) ? bs_error_prefix("config.json: ") : 0;
}

static int layer_kinds(const json_t *cfg, hp *h) {
    char b[128];
    const json_t *lt = hf_get(cfg, tkey(cfg, "layer_types", b, sizeof b));
    h->recurrent = bs_xcalloc((size_t)h->n_layer, sizeof *h->recurrent);
    for (int64_t i = 0; i < h->n_layer; i++) h->recurrent[i] = (i + 1) % h->interval != 0;
    if (!lt || json_is_null(lt)) return 0;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != h->n_layer)
        return bs_error("config.json: layer_types must list %" PRId64 " layers", h->n_layer);
    for (int64_t i = 0; i < h->n_layer; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (!s || (strcmp(s, "linear_attention") && strcmp(s, "full_attention")))
            return bs_error("config.json: layer_types[%" PRId64 "] is not linear_attention / full_attention", i);
        h->recurrent[i] = !strcmp(s, "linear_attention");
    }
    return 0;
}

static int read_hparams(const json_t *cfg, hp *h) {
    double prf = 1.0;
    if (c_int(cfg, "num_hidden_layers", INT64_MIN, 1, 4096, &h->n_layer) ||
        c_int(cfg, "hidden_size", INT64_MIN, 1, DIM_MAX, &h->E) ||
        c_int(cfg, "intermediate_size", INT64_MIN, 1, DIM_MAX, &h->F) ||
        c_int(cfg, "num_attention_heads", INT64_MIN, 1, 4096, &h->n_head) ||
        c_int(cfg, "num_key_value_heads", h->n_head, 1, 4096, &h->n_head_kv) ||
        c_int(cfg, "head_dim", h->E / h->n_head, 2, 4096, &h->head_dim) ||
        c_int(cfg, "vocab_size", INT64_MIN, 2, (int64_t)1 << 24, &h->n_vocab) ||
        c_int(cfg, "max_position_embeddings", 262144, 1, (int64_t)1 << 31, &h->n_ctx) ||
        c_int(cfg, "linear_num_key_heads", INT64_MIN, 1, 4096, &h->nk) ||
        c_int(cfg, "linear_num_value_heads", INT64_MIN, 1, 4096, &h->nv) ||
        c_int(cfg, "linear_key_head_dim", INT64_MIN, 1, 4096, &h->dk) ||
        c_int(cfg, "linear_value_head_dim", INT64_MIN, 1, 4096, &h->dv) ||
        c_int(cfg, "linear_conv_kernel_dim", 4, 1, 64, &h->conv_k) ||
        c_int(cfg, "full_attention_interval", 4, 1, 4096, &h->interval) ||
        c_float(cfg, "rms_norm_eps", 1e-6, &h->eps) || c_float(cfg, "rope_theta", 1e7, &h->theta) ||
        c_float(cfg, "rope_parameters.rope_theta", h->theta, &h->theta) ||
        c_float(cfg, "partial_rotary_factor", prf, &prf) ||
        c_float(cfg, "rope_parameters.partial_rotary_factor", prf, &prf))
        return -1;
    if (h->nv % h->nk) return bs_error("config.json: linear_num_value_heads %" PRId64 " is not a multiple of linear_num_key_heads %" PRId64, h->nv, h->nk);
    if (h->n_head % h->n_head_kv) return bs_error("config.json: num_attention_heads is not a multiple of num_key_value_heads");
    if (!(prf > 0 && prf <= 1)) return bs_error("config.json: partial_rotary_factor %g is out of range", prf);
    h->rope_dim = (int64_t)(h->head_dim * prf + 0.5);
    char b[128];
    int64_t sec[8];
    int n = 0;
    const char *keys[] = {"rope_parameters.mrope_section", "rope_scaling.mrope_section"};
    for (int i = 0; i < 2 && n == 0; i++)
        if (hf_int_array(cfg, tkey(cfg, keys[i], b, sizeof b), sec, 8, &n)) return bs_error_prefix("config.json: ");
    if (n > 4) return bs_error("config.json: mrope_section has %d entries (at most 4)", n);
    for (int i = 0; i < 4; i++) h->sections[i] = i < n ? (int32_t)sec[i] : 0;
    if (n == 0) {   /* text-only config: Qwen's split of rope_dim/2 pairs */
        int32_t pairs = (int32_t)(h->rope_dim / 2), a = (pairs + 2) / 3, c = BS_MIN(a, pairs - a);
        h->sections[0] = a; h->sections[1] = c; h->sections[2] = pairs - a - c;
    }
    bool tied = false;
    if (hf_bool(cfg, "tie_word_embeddings", false, &tied)) return bs_error_prefix("config.json: ");
    h->tied = tied;
    if (!(h->eps > 0 && h->eps < 1) || !(h->theta > 0)) return bs_error("config.json: bad rms_norm_eps or rope_theta");
    return layer_kinds(cfg, h);
}

/* --- tensor mapping ---------------------------------------------------------------------------- */

static const char *strip_prefix(const char *n) {
    static const char *pre[] = {"model.language_model.", "language_model.model.", "model."};
    for (size_t i = 0; i < BS_ARRAY_LEN(pre); i++)
        if (!strncmp(n, pre[i], strlen(pre[i]))) return n + strlen(pre[i]);
    return n;
}

static bool skipped(const char *n, int *n_vis, int *n_mtp) {
    if (strstr(n, "visual.") == n || strstr(n, ".visual.")) return ++*n_vis, true;
    if (!strncmp(n, "mtp.", 4) || strstr(n, ".mtp.")) return ++*n_mtp, true;
    return false;
}

typedef struct lmap { const char *hf, *gguf; enum xform x; int reorder; } lmap;
enum { R_NONE, R_QKV, R_Z, R_AB, R_VEC, R_CONV, R_OUT };

static const lmap layer_map[] = {
    {"input_layernorm.weight", "attn_norm.weight", X_PLUS1, R_NONE},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", X_PLUS1, R_NONE},
    {"mlp.gate_proj.weight", "ffn_gate.weight", X_NONE, R_NONE},
    {"mlp.up_proj.weight", "ffn_up.weight", X_NONE, R_NONE},
    {"mlp.down_proj.weight", "ffn_down.weight", X_NONE, R_NONE},
    {"self_attn.q_proj.weight", "attn_q.weight", X_NONE, R_NONE},
    {"self_attn.k_proj.weight", "attn_k.weight", X_NONE, R_NONE},
    {"self_attn.v_proj.weight", "attn_v.weight", X_NONE, R_NONE},
    {"self_attn.o_proj.weight", "attn_output.weight", X_NONE, R_NONE},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", X_PLUS1, R_NONE},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", X_PLUS1, R_NONE},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", X_NONE, R_QKV},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", X_NONE, R_Z},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", X_NONE, R_AB},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", X_NONE, R_AB},
    {"linear_attn.A_log", "ssm_a", X_NEG_EXP, R_VEC},
    {"linear_attn.dt_bias", "ssm_dt.bias", X_NONE, R_VEC},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", X_NONE, R_CONV},
    {"linear_attn.norm.weight", "ssm_norm.weight", X_NONE, R_NONE},   /* raw: no +1 */
    {"linear_attn.out_proj.weight", "ssm_out.weight", X_NONE, R_OUT},
};

static const lmap global_map[] = {
    {"embed_tokens.weight", "token_embd.weight", X_NONE, R_NONE},
    {"norm.weight", "output_norm.weight", X_PLUS1, R_NONE},
    {"lm_head.weight", "output.weight", X_NONE, R_NONE},
};

static bool force_f32(const job *j) {
    return j->n_dims < 2 || strstr(j->name, "norm.weight") || strstr(j->name, "ssm_conv1d") ||
           (strlen(j->name) > 6 && !strcmp(j->name + strlen(j->name) - 6, ".ssm_a")) || strstr(j->name, "ssm_dt");
}

/* The GGUF shape {ne0, rows} a tensor must have; -1 if the name has no fixed shape here. */
static int expected_shape(const hp *h, const char *g, int64_t *ne0, int64_t *rows) {
    const int64_t kd = h->nk * h->dk, vd = h->nv * h->dv, qd = h->n_head * h->head_dim, kvd = h->n_head_kv * h->head_dim;
    struct { const char *n; int64_t a, b; } t[] = {
        {"attn_norm.weight", h->E, 1}, {"post_attention_norm.weight", h->E, 1},
        {"ffn_gate.weight", h->E, h->F}, {"ffn_up.weight", h->E, h->F}, {"ffn_down.weight", h->F, h->E},
        {"attn_q.weight", h->E, 2 * qd}, {"attn_k.weight", h->E, kvd}, {"attn_v.weight", h->E, kvd},
        {"attn_output.weight", qd, h->E}, {"attn_q_norm.weight", h->head_dim, 1}, {"attn_k_norm.weight", h->head_dim, 1},
        {"attn_qkv.weight", h->E, 2 * kd + vd}, {"attn_gate.weight", h->E, vd}, {"ssm_beta.weight", h->E, h->nv},
        {"ssm_alpha.weight", h->E, h->nv}, {"ssm_a", h->nv, 1}, {"ssm_dt.bias", h->nv, 1},
        {"ssm_conv1d.weight", h->conv_k, 2 * kd + vd}, {"ssm_norm.weight", h->dv, 1}, {"ssm_out.weight", vd, h->E},
        {"token_embd.weight", h->E, h->n_vocab}, {"output_norm.weight", h->E, 1}, {"output.weight", h->E, h->n_vocab},
    };
    const char *dot = strncmp(g, "blk.", 4) ? g : strchr(g + 4, '.') + 1;
    for (size_t i = 0; i < BS_ARRAY_LEN(t); i++)
        if (!strcmp(t[i].n, dot)) { *ne0 = t[i].a; *rows = t[i].b; return 0; }
    return -1;
}

static void set_reorder(job *j, const hp *h, int r) {
    const int64_t kd = h->nk * h->dk;
    switch (r) {
    case R_QKV: j->row_off = 2 * kd; j->row_blk = h->dv; break;
    case R_CONV: j->row_off = 2 * kd; j->row_blk = h->dv; break;
    case R_Z: j->row_blk = h->dv; break;
    case R_AB: j->row_blk = 1; break;
    case R_VEC: j->col_blk = 1; break;
    case R_OUT: j->col_blk = h->dv; break;
    default: break;
    }
}

static int map_tensor(const hp *h, const st_tensor *t, int type, job *j, bool *ok) {
    const char *n = strip_prefix(t->name);
    const lmap *m = NULL;
    char g[96];
    long il = -1;
    *ok = false;
    if (!strncmp(n, "layers.", 7)) {
        char *end;
        il = strtol(n + 7, &end, 10);
        if (end == n + 7 || *end != '.' || il < 0 || il >= h->n_layer) return 0;
        for (size_t i = 0; i < BS_ARRAY_LEN(layer_map) && !m; i++)
            if (!strcmp(end + 1, layer_map[i].hf)) m = &layer_map[i];
        if (m) snprintf(g, sizeof g, "blk.%ld.%s", il, m->gguf);
    } else {
        for (size_t i = 0; i < BS_ARRAY_LEN(global_map) && !m; i++)
            if (!strcmp(n, global_map[i].hf)) m = &global_map[i];
        if (m) snprintf(g, sizeof g, "%s", m->gguf);
    }
    if (!m) return 0;
    *ok = true;
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", g);
    j->src = t;
    j->x = m->x;
    j->src_type = st_dtype_to_bs_type(t->dtype);
    if (j->src_type != BS_F32 && j->src_type != BS_F16 && j->src_type != BS_BF16)
        return bs_error("%s has dtype %s (expected F32, F16 or BF16)", t->name, st_dtype_name(t->dtype));
    if (t->n_dims < 1 || t->n_dims > 3) return bs_error("%s has %d dimensions", t->name, t->n_dims);
    j->ne0 = t->shape[t->n_dims - 1];
    j->rows = t->n_dims == 1 ? 1 : (int64_t)(t->n_elements / (uint64_t)BS_MAX(j->ne0, 1));
    j->n_dims = t->n_dims == 1 ? 1 : 2;
    int64_t e0, er;
    if (expected_shape(h, g, &e0, &er) == 0 && (j->ne0 != e0 || j->rows != er || (m->reorder == R_CONV) != (t->n_dims == 3)))
        return bs_error("%s: shape does not match config.json (expected %" PRId64 " x %" PRId64 " in GGUF order)", t->name, e0, er);
    if (il >= 0) {
        bool lin = !strncmp(m->hf, "linear_attn.", 12), att = !strncmp(m->hf, "self_attn.", 10);
        if ((lin && !h->recurrent[il]) || (att && h->recurrent[il]))
            return bs_error("%s does not fit layer %ld's kind in config.json", t->name, il);
    }
    set_reorder(j, h, m->reorder);
    j->type = force_f32(j) ? BS_F32 : type >= 0 ? bs_quantize_fit_type(type, g, j->ne0, j->src_type) : j->src_type;
    return 0;
}

/* --- streaming one tensor ---------------------------------------------------------------------- */

static int64_t head_src(const hp *h, int64_t n) { return (n % h->nk) * (h->nv / h->nk) + n / h->nk; }

static void build_row(const hp *h, const job *j, int64_t r, float *tmp, float *out) {
    int64_t sr = r;
    if (j->row_blk && r >= j->row_off && r < j->row_off + h->nv * j->row_blk) {
        int64_t loc = r - j->row_off;
        sr = j->row_off + head_src(h, loc / j->row_blk) * j->row_blk + loc % j->row_blk;
    }
    const bs_type_traits *st = bs_type_get(j->src_type);
    st->to_float((const uint8_t *)j->src->data + (size_t)sr * bs_row_size(j->src_type, j->ne0), j->col_blk ? tmp : out, j->ne0);
    if (j->col_blk)
        for (int64_t c = 0; c < j->ne0; c++) {
            int64_t n = c / j->col_blk;
            out[c] = n < h->nv ? tmp[head_src(h, n) * j->col_blk + c % j->col_blk] : tmp[c];
        }
    for (int64_t c = 0; c < j->ne0; c++) {
        if (j->x == X_PLUS1) out[c] += 1.0f;
        else if (j->x == X_NEG_EXP) out[c] = -expf(out[c]);
    }
}

static int stream_job(gguf_writer *w, bs_pool *pool, const hp *h, const job *j, bs_progress *pr) {
    const st_tensor *t = j->src;
    int rc = 0;
    if (j->type == j->src_type && j->x == X_NONE && !j->row_blk && !j->col_blk) {
        for (uint64_t off = 0; off < t->nbytes && !rc; off += CHUNK_BYTES) {
            size_t n = (size_t)BS_MIN((uint64_t)CHUNK_BYTES, t->nbytes - off);
            rc = gguf_w_write(w, (const uint8_t *)t->data + off, n);
            bs_release_mapped((const uint8_t *)t->data + off, n);   /* opened with mmap */
            bs_progress_add(pr, n);
        }
        return rc;
    }
    const size_t dr = bs_row_size(j->type, j->ne0), sr = bs_row_size(j->src_type, j->ne0);
    const int64_t per = BS_MAX(1, (int64_t)(CHUNK_BYTES / ((size_t)j->ne0 * sizeof(float))));
    const int64_t nb = BS_MIN(per, j->rows);
    float *f = bs_xmalloc((size_t)(nb * j->ne0) * sizeof(float)), *tmp = bs_xmalloc((size_t)j->ne0 * sizeof(float));
    uint8_t *buf = bs_xmalloc((size_t)nb * dr);
    for (int64_t r0 = 0; r0 < j->rows && !rc; r0 += per) {
        int64_t n = BS_MIN(per, j->rows - r0);
        for (int64_t i = 0; i < n; i++) build_row(h, j, r0 + i, tmp, f + i * j->ne0);
        rc = bs_convert_rows(pool, BS_F32, f, j->type, buf, j->ne0, n);
        if (!rc) rc = gguf_w_write(w, buf, (size_t)n * dr);
        if (!j->row_blk) bs_release_mapped((const uint8_t *)t->data + (size_t)r0 * sr, (uint64_t)n * sr);
        bs_progress_add(pr, (uint64_t)n * sr);
    }
    free(f); free(tmp); free(buf);
    return rc;
}

/* --- the file --------------------------------------------------------------------------------- */

static int cmp_job(const void *a, const void *b) {
    const job *x = a, *y = b;
    bool bx = !strncmp(x->name, "blk.", 4), by = !strncmp(y->name, "blk.", 4);
    if (bx != by) return bx ? 1 : -1;
    if (bx) {
        long lx = strtol(x->name + 4, NULL, 10), ly = strtol(y->name + 4, NULL, 10);
        if (lx != ly) return lx < ly ? -1 : 1;
    }
    return strcmp(x->name, y->name);
}

static void write_hparams(gguf_writer *w, const hp *h, const char *name, int ftype, bool quant) {
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_str(w, "general.name", name);
    gguf_w_set_u32(w, "qwen35.block_count", (uint32_t)h->n_layer);
    gguf_w_set_u32(w, "qwen35.context_length", (uint32_t)h->n_ctx);
    gguf_w_set_u32(w, "qwen35.embedding_length", (uint32_t)h->E);
    gguf_w_set_u32(w, "qwen35.feed_forward_length", (uint32_t)h->F);
    gguf_w_set_u32(w, "qwen35.attention.head_count", (uint32_t)h->n_head);
    gguf_w_set_u32(w, "qwen35.attention.head_count_kv", (uint32_t)h->n_head_kv);
    gguf_w_set_u32(w, "qwen35.attention.key_length", (uint32_t)h->head_dim);
    gguf_w_set_u32(w, "qwen35.attention.value_length", (uint32_t)h->head_dim);
    gguf_w_set_f32(w, "qwen35.attention.layer_norm_rms_epsilon", (float)h->eps);
    gguf_w_set_f32(w, "qwen35.rope.freq_base", (float)h->theta);
    gguf_w_set_u32(w, "qwen35.rope.dimension_count", (uint32_t)h->rope_dim);
    gguf_w_set_arr_i32(w, "qwen35.rope.dimension_sections", h->sections, 4);
    gguf_w_set_u32(w, "qwen35.ssm.conv_kernel", (uint32_t)h->conv_k);
    gguf_w_set_u32(w, "qwen35.ssm.state_size", (uint32_t)h->dk);
    gguf_w_set_u32(w, "qwen35.ssm.group_count", (uint32_t)h->nk);
    gguf_w_set_u32(w, "qwen35.ssm.time_step_rank", (uint32_t)h->nv);
    gguf_w_set_u32(w, "qwen35.ssm.inner_size", (uint32_t)(h->nv * h->dv));
    gguf_w_set_u32(w, "qwen35.full_attention_interval", (uint32_t)h->interval);
    bool rule = true;
    for (int64_t i = 0; i < h->n_layer; i++) rule &= h->recurrent[i] == ((i + 1) % h->interval != 0);
    if (!rule) {   /* layer_types that the interval cannot express */
        gguf_value v = {.type = GGUF_TYPE_ARRAY};
        uint8_t *b = bs_xmalloc((size_t)h->n_layer);
        for (int64_t i = 0; i < h->n_layer; i++) b[i] = h->recurrent[i];
        v.arr_type = GGUF_TYPE_BOOL; v.n = (uint64_t)h->n_layer; v.arr = b;
        gguf_w_set_value(w, "qwen35.attention.recurrent_layers", &v);
        free(b);
    }
    if (quant) gguf_w_set_u32(w, "general.quantization_version", 2);
    gguf_w_set_u32(w, "general.file_type", bs_ftype_of(ftype));
}

static int check_complete(const hp *h, const job *jobs, size_t n) {
    for (int64_t il = 0; il < h->n_layer; il++) {
        int want = h->recurrent[il] ? 14 : 11, have = 0;
        char pre[32];
        int pl = snprintf(pre, sizeof pre, "blk.%" PRId64 ".", il);
        for (size_t i = 0; i < n; i++) have += !strncmp(jobs[i].name, pre, (size_t)pl);
        if (have != want) return bs_error("layer %" PRId64 " has %d of its %d tensors", il, have, want);
    }
    bool emb = false, norm = false, out = false;
    for (size_t i = 0; i < n; i++) {
        emb |= !strcmp(jobs[i].name, "token_embd.weight");
        norm |= !strcmp(jobs[i].name, "output_norm.weight");
        out |= !strcmp(jobs[i].name, "output.weight");
    }
    if (!emb || !norm) return bs_error("missing embed_tokens or the final norm");
    if (!out && !h->tied) return bs_error("missing lm_head.weight (and tie_word_embeddings is false)");
    return 0;
}

static int convert(const char *dir, const json_t *cfg, const st_model *m, gguf_writer *w, int type, bs_pool *pool) {
    hp h = {0};
    int rc = read_hparams(cfg, &h), n_vis = 0, n_mtp = 0;
    job *jobs = bs_xcalloc(m->n_tensors + 1, sizeof *jobs);
    size_t n = 0;
    for (uint64_t i = 0; i < m->n_tensors && !rc; i++) {
        const st_tensor *t = m->tensors[i];
        bool ok;
        if (skipped(strip_prefix(t->name), &n_vis, &n_mtp)) continue;
        if ((rc = map_tensor(&h, t, type, &jobs[n], &ok))) break;
        if (ok) n++;
        else if (strstr(t->name, "rotary_emb.inv_freq")) continue;
        else rc = bs_error("tensor %s is not part of a Qwen3.5 text model", t->name);
    }
    if (n_vis) fprintf(stderr, "note: skipped %d vision tensors (model.visual.*: --mmproj writes them as the projector)\n", n_vis);
    if (n_mtp) fprintf(stderr, "note: skipped %d MTP tensors (mtp.*)\n", n_mtp);
    if (!rc) rc = check_complete(&h, jobs, n);
    qsort(jobs, n, sizeof *jobs, cmp_job);
    uint64_t total = 0;
    int ftype = BS_F32;
    bool quant = false;
    for (size_t i = 0; i < n; i++) {
        total += jobs[i].src->nbytes;
        if (!strcmp(jobs[i].name, "blk.0.ffn_up.weight")) ftype = jobs[i].type;
        quant |= bs_type_get(jobs[i].type)->is_quantized;
    }
    if (!rc) {
        const char *name = hf_str(cfg, "_name_or_path", NULL);
        const char *slash = strrchr(dir, '/');
        if (!name || !*name) name = slash && slash[1] ? slash + 1 : dir;
        write_hparams(w, &h, name, ftype, quant);
        rc = bs_hf_write_vocab(w, dir, h.n_vocab, cfg);
    }
    for (size_t i = 0; i < n && !rc; i++) {
        int64_t ne[2] = {jobs[i].ne0, jobs[i].rows};
        if (gguf_w_add_tensor(w, jobs[i].name, jobs[i].type, jobs[i].n_dims, ne) < 0) rc = -1;
    }
    bs_progress pr;
    bs_progress_begin(&pr, "convert", total);
    for (size_t i = 0; i < n && !rc; i++) {
        if ((rc = stream_job(w, pool, &h, &jobs[i], &pr))) bs_error_prefix("%s: ", jobs[i].src->name);
        bs_release_mapped(jobs[i].src->data, jobs[i].src->nbytes);
    }
    if (!rc) {
        char extra[48];
        snprintf(extra, sizeof extra, "%zu tensors", n);
        bs_progress_end(&pr, extra);
    }
    free(jobs);
    free(h.recurrent);
    return rc;
}

int bs_convert_hf_to_gguf(const char *in_dir, const char *out_gguf, int type, int n_threads) {
    json_t *cfg = bs_hf_config_of_dir(in_dir);
    if (!cfg) return -1;
    const char *inputs[] = {in_dir};
    if (bs_check_not_input(out_gguf, inputs, 1)) { json_decref(cfg); return -1; }
    st_model *m = st_model_open(in_dir, 0);
    bs_pool *pool = m ? bs_pool_new(n_threads > 0 ? n_threads : bs_cpu_count()) : NULL;
    gguf_writer *w = pool ? gguf_w_open(out_gguf) : NULL;
    int rc = w ? convert(in_dir, cfg, m, w, type, pool) : -1;
    if (w) {
        if (rc) gguf_w_abort(w);
        else rc = gguf_w_close(w);
    }
    bs_pool_free(pool);
    st_model_close(m);
    json_decref(cfg);
    return rc;
}
