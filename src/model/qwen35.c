/* qwen35.c: load a qwen35 GGUF: hyperparameters from metadata, every tensor checked by name,
 * shape and type, with an error naming the first mismatch (qwen35-arch.md §1, §5). */
#include "model/qwen35.h"
#include "model/device.h"
#include "model/hadamard.h"
#include "model/lora.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/file_map.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KEY_MAX 96

static int get_u32(const gguf_file *f, const char *key, uint32_t lo, uint32_t hi, int *out) {
    uint32_t v;
    if (gguf_get_u32(f, key, &v)) return -1;
    if (v < lo || v > hi) return bs_error("%s = %u is out of range [%u, %u]", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

/* Optional key: keeps *out (the default) when absent. */
static int get_u32_opt(const gguf_file *f, const char *key, uint32_t lo, uint32_t hi, int *out) {
    return gguf_find_kv(f, key) ? get_u32(f, key, lo, hi, out) : 0;
}

static int get_f32_opt(const gguf_file *f, const char *key, float *out) {
    return gguf_find_kv(f, key) ? gguf_get_f32(f, key, out) : 0;
}

static int read_rope_sections(const gguf_file *f, bs_qwen35_hparams *hp) {
    const char *key = "qwen35.rope.dimension_sections";
    memset(hp->rope_sections, 0, sizeof hp->rope_sections);
    if (!gguf_find_kv(f, key)) return 0;   /* plain NeoX then (all pairs use the position) */
    uint64_t n = gguf_get_arr_n(f, key);
    if (n < 3 || n > 4) return bs_error("%s: expected 3 or 4 integers", key);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if (gguf_get_arr_i64(f, key, i, &v)) return -1;
        if (v < 0 || v > 4096) return bs_error("%s[%" PRIu64 "] = %" PRId64 " is out of range", key, i, v);
        hp->rope_sections[i] = (int)v;
    }
    return 0;
}

/* Layer kinds: attention.recurrent_layers (per-layer bool array) if present, else every
 * full_attention_interval-th layer is full attention (default 4: layers 3, 7, 11, ...). */
static int read_layer_pattern(const gguf_file *f, int n_block, bs_qwen35_layer *layers, int n_layer) {
    const char *key = "qwen35.attention.recurrent_layers";
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv) {
        if (kv->val.type != GGUF_TYPE_ARRAY || kv->val.n != (uint64_t)n_block)
            return bs_error("%s: expected an array of %d values", key, n_block);
        for (int i = 0; i < n_layer; i++) {
            int64_t v;
            if (kv->val.arr_type == GGUF_TYPE_BOOL) v = ((const uint8_t *)kv->val.arr)[i] != 0;
            else if (gguf_arr_elem_i64(&kv->val, (uint64_t)i, &v)) return bs_error_prefix("%s: ", key);
            layers[i].recurrent = v != 0;
        }
        return 0;
    }
    int interval = 4;
    if (get_u32_opt(f, "qwen35.full_attention_interval", 1, 1u << 20, &interval)) return -1;
    for (int i = 0; i < n_layer; i++) layers[i].recurrent = (i + 1) % interval != 0;
    return 0;
}

static int read_hparams(const gguf_file *f, bs_qwen35_hparams *hp, int *n_block) {
    const uint32_t DIM = 1u << 20, HEADS = 4096;
    int nextn = 0, key_len = 0, val_len = 0, inner = 0;
    *n_block = 0;
    memset(hp, 0, sizeof *hp);
    if (get_u32(f, "qwen35.block_count", 1, 4096, n_block) ||
        get_u32_opt(f, "qwen35.nextn_predict_layers", 0, 4096, &nextn) ||
        get_u32(f, "qwen35.embedding_length", 1, DIM, &hp->n_embd) ||
        get_u32(f, "qwen35.feed_forward_length", 1, DIM, &hp->n_ff) ||
        get_u32(f, "qwen35.attention.head_count", 1, HEADS, &hp->n_head) ||
        get_u32(f, "qwen35.attention.head_count_kv", 1, HEADS, &hp->n_head_kv) ||
        gguf_get_f32(f, "qwen35.attention.layer_norm_rms_epsilon", &hp->eps) ||
        get_u32(f, "qwen35.ssm.conv_kernel", 1, 64, &hp->conv_kernel) ||
        get_u32(f, "qwen35.ssm.state_size", 1, DIM, &hp->d_k) ||
        get_u32(f, "qwen35.ssm.group_count", 1, HEADS, &hp->n_k_heads) ||
        get_u32(f, "qwen35.ssm.time_step_rank", 1, HEADS, &hp->n_v_heads) ||
        get_u32(f, "qwen35.ssm.inner_size", 1, DIM, &inner))
        return -1;
    if (nextn >= *n_block) return bs_error("nextn_predict_layers %d >= block_count %d", nextn, *n_block);
    hp->n_layer = *n_block - nextn;
    key_len = hp->n_embd / hp->n_head;
    if (get_u32_opt(f, "qwen35.attention.key_length", 1, DIM, &key_len)) return -1;
    val_len = key_len;
    if (get_u32_opt(f, "qwen35.attention.value_length", 1, DIM, &val_len)) return -1;
    if (key_len != val_len || key_len < 1)
        return bs_error("attention key_length %d != value_length %d (the output gate needs them equal)",
                        key_len, val_len);
    hp->head_dim = key_len;
    hp->n_rot = hp->head_dim;
    hp->rope_base = 10000.0f;
    hp->n_ctx_train = 4096;
    if (get_u32_opt(f, "qwen35.rope.dimension_count", 2, DIM, &hp->n_rot) ||
        get_f32_opt(f, "qwen35.rope.freq_base", &hp->rope_base) ||
        get_u32_opt(f, "qwen35.context_length", 1, 1u << 30, &hp->n_ctx_train) ||
        read_rope_sections(f, hp))
        return -1;
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim)
        return bs_error("rope.dimension_count %d must be even and <= head dim %d", hp->n_rot, hp->head_dim);
    if (hp->n_head % hp->n_head_kv)
        return bs_error("head_count %d is not a multiple of head_count_kv %d", hp->n_head, hp->n_head_kv);
    if (hp->n_v_heads % hp->n_k_heads)
        return bs_error("ssm.time_step_rank %d (V heads) is not a multiple of ssm.group_count %d (K heads)",
                        hp->n_v_heads, hp->n_k_heads);
    if (inner % hp->n_v_heads)
        return bs_error("ssm.inner_size %d is not a multiple of the %d V heads", inner, hp->n_v_heads);
    hp->d_v = inner / hp->n_v_heads;
    if (!(hp->eps > 0.0f && hp->eps < 1.0f)) return bs_error("rms epsilon %g is out of range", hp->eps);
    if (!(hp->rope_base > 0.0f) || !isfinite(hp->rope_base)) return bs_error("rope.freq_base %g is invalid", hp->rope_base);
    uint64_t cd = 2ull * (uint64_t)hp->n_k_heads * (uint64_t)hp->d_k + (uint64_t)inner;
    uint64_t q = 2ull * (uint64_t)hp->n_head * (uint64_t)hp->head_dim;
    if (cd > DIM || q > DIM || (uint64_t)hp->n_head_kv * hp->head_dim > DIM ||
        (uint64_t)hp->d_k * hp->d_v > DIM)
        return bs_error("layer widths are implausibly large");
    hp->conv_dim = (int)cd;
    return 0;
}

/* ---- tensors ------------------------------------------------------------------------------- */

static const gguf_tensor *find(const gguf_file *f, const char *name, int n_dims, int64_t ne0, int64_t ne1) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) { bs_error("missing tensor %s", name); return NULL; }
    int dims = t->n_dims;
    while (dims > 1 && t->ne[dims - 1] == 1) dims--;   /* a trailing 1 is the same shape */
    bool ok = dims <= n_dims && t->ne[0] == ne0 && (n_dims < 2 || t->ne[1] == ne1);
    if (!ok) {
        char got[96], want[64];
        int k = snprintf(got, sizeof got, "[%" PRId64, t->ne[0]);
        for (int d = 1; d < t->n_dims && k < (int)sizeof got - 24; d++)
            k += snprintf(got + k, sizeof got - (size_t)k, ", %" PRId64, t->ne[d]);
        snprintf(got + k, sizeof got - (size_t)k, "]");
        if (n_dims == 1) snprintf(want, sizeof want, "[%" PRId64 "]", ne0);
        else snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "]", ne0, ne1);
        bs_error("tensor %s has shape %s, expected %s", name, got, want);
        return NULL;
    }
    return t;
}

static int load_vec(const gguf_file *f, const char *name, int64_t n, const float **out) {
    const gguf_tensor *t = find(f, name, 1, n, 1);
    if (!t) return -1;
    if (t->type != BS_F32)
        return bs_error("tensor %s has type %s, expected f32", name, bs_type_name(t->type));
    *out = (const float *)t->data;
    return 0;
}

/* A weight matrix {ne0 inputs, ne1 outputs} of any type the matmul can multiply. */
static int load_mat(const gguf_file *f, const char *name, int64_t ne0, int64_t ne1, bs_weight *w) {
    const gguf_tensor *t = find(f, name, 2, ne0, ne1);
    if (!t) return -1;
    const bs_type_traits *tr = bs_type_get(t->type);
    bool ok = tr && t->type != BS_I8 && t->type != BS_I16 && t->type != BS_I32 &&
              (!tr->is_quantized || (tr->vec_dot && tr->act_from_float && tr->to_float));
    if (!ok) return bs_error("tensor %s has type %s, which bitspark cannot multiply", name, bs_type_name(t->type));
    if (bs_weight_from_tensor(w, t)) return bs_error_prefix("tensor %s: ", name);
    return 0;
}

static int load_layer(const gguf_file *f, const bs_qwen35_hparams *hp, int il, bs_qwen35_layer *L) {
    char n[KEY_MAX];
    const int64_t E = hp->n_embd;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if (load_vec(f, NAME("attn_norm.weight"), E, &L->attn_norm) ||
        load_vec(f, NAME("post_attention_norm.weight"), E, &L->post_norm) ||
        load_mat(f, NAME("ffn_gate.weight"), E, hp->n_ff, &L->ffn_gate) ||
        load_mat(f, NAME("ffn_up.weight"), E, hp->n_ff, &L->ffn_up) ||
        load_mat(f, NAME("ffn_down.weight"), hp->n_ff, E, &L->ffn_down))
        return -1;
    if (L->recurrent) {
        const int64_t vdim = (int64_t)hp->n_v_heads * hp->d_v, nv = hp->n_v_heads;
        const gguf_tensor *conv;
        if (load_mat(f, NAME("attn_qkv.weight"), E, hp->conv_dim, &L->qkv) ||
            load_mat(f, NAME("attn_gate.weight"), E, vdim, &L->gate) ||
            load_mat(f, NAME("ssm_beta.weight"), E, nv, &L->beta) ||
            load_mat(f, NAME("ssm_alpha.weight"), E, nv, &L->alpha) ||
            load_mat(f, NAME("ssm_out.weight"), vdim, E, &L->ssm_out) ||
            load_vec(f, NAME("ssm_dt.bias"), nv, &L->dt_bias) ||
            load_vec(f, NAME("ssm_a"), nv, &L->ssm_a) ||
            load_vec(f, NAME("ssm_norm.weight"), hp->d_v, &L->ssm_norm) ||
            !(conv = find(f, NAME("ssm_conv1d.weight"), 2, hp->conv_kernel, hp->conv_dim)))
            return -1;
        if (conv->type != BS_F32)
            return bs_error("tensor %s has type %s, expected f32", n, bs_type_name(conv->type));
        L->conv1d = (const float *)conv->data;
    } else {
        const int64_t hd = hp->head_dim, kv = (int64_t)hp->n_head_kv * hd;
        if (load_mat(f, NAME("attn_q.weight"), E, 2 * hd * hp->n_head, &L->wq) ||
            load_mat(f, NAME("attn_k.weight"), E, kv, &L->wk) ||
            load_mat(f, NAME("attn_v.weight"), E, kv, &L->wv) ||
            load_mat(f, NAME("attn_output.weight"), hd * hp->n_head, E, &L->wo) ||
            load_vec(f, NAME("attn_q_norm.weight"), hd, &L->q_norm) ||
            load_vec(f, NAME("attn_k_norm.weight"), hd, &L->k_norm))
            return -1;
    }
#undef NAME
    return 0;
}

/* A Bonsai 2 file's Hadamard fold (hadamard.h): each folded matrix multiplies its input rotated
 * (ssm_out's V heads regrouped first when the file says so); a folded token table gives rows
 * back through the inverse and, tied as the output, multiplies the rotated final norm. */
static int attach_fold(bs_model *m) {
    bs_hadamard *h = m->fold;
    if (!h) return 0;
    const bs_qwen35_hparams *hp = &m->hp;
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        bs_weight *w = ws[i];
        if (!bs_hadamard_folds(h, w->name, false)) continue;
        const bool regroup = bs_hadamard_regroups(h, w->name);
        const int hd = regroup ? hp->d_v : 0, nk = hp->n_k_heads, rep = hp->n_v_heads / hp->n_k_heads;
        if (!(w->rot = bs_hadamard_rotation(h, w->ne0, hd, nk, rep, false))) rc = bs_error_prefix("%s: ", w->name);
    }
    free(ws);
    if (rc) return -1;
    const bool tied = m->output.data == m->tok_embd.data;
    if (bs_hadamard_folds(h, "token_embd.weight", true)) {
        if (!(m->tok_embd.rot = bs_hadamard_rotation(h, hp->n_embd, 0, 0, 0, true))) return bs_error_prefix("token_embd: ");
        if (tied) {
            bs_hadamard_folds(h, "output.weight", false);   /* (a file may list it or not) */
            if (!(m->output.rot = bs_hadamard_rotation(h, hp->n_embd, 0, 0, 0, false))) return -1;
        }
    } else if (tied && bs_hadamard_folds(h, "output.weight", false)) {
        return bs_error("prism.hadamard folds the tied output but not the token embedding it is");
    }
    if (bs_hadamard_check_all_found(h)) return -1;
    char what[160];
    bs_hadamard_describe(h, what, sizeof what);
    bs_log(2, "%s\n", what);
    return 0;
}

static int load_model(bs_model *m, bool vocab_only) {
    const gguf_file *f = m->file;
    bs_qwen35_hparams *hp = &m->hp;
    int n_block = 0;
    const char *arch = gguf_get_str(f, "general.architecture");
    if (!arch) return bs_error("no general.architecture key: not a model file");
    if (strcmp(arch, "qwen35")) return bs_error("architecture '%s' is not supported (bitspark runs qwen35)", arch);
    if (bs_hadamard_read(f, false, &m->fold) || read_hparams(f, hp, &n_block)) return -1;

    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return bs_error("missing tensor token_embd.weight");
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24)) return bs_error("token_embd.weight: bad vocabulary size");
    hp->n_vocab = (int)emb->ne[1];
    if (vocab_only) return 0;   /* no weights: m->layers stays NULL, which sessions refuse */
    if (load_mat(f, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd) ||
        load_vec(f, "output_norm.weight", hp->n_embd, &m->output_norm))
        return -1;
    if (gguf_find_tensor(f, "output.weight")) {
        if (load_mat(f, "output.weight", hp->n_embd, hp->n_vocab, &m->output)) return -1;
    } else {
        m->output = m->tok_embd;   /* tied embeddings (not Bonsai, but legal) */
    }

    m->layers = bs_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    if (read_layer_pattern(f, n_block, m->layers, hp->n_layer)) return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        bs_qwen35_layer *L = &m->layers[il];
        L->slot = L->recurrent ? m->n_recurrent++ : m->n_attention++;
        if (load_layer(f, hp, il, L)) return -1;
    }
    return attach_fold(m);
}

/* ---- packed weight layouts (kernels.h) ------------------------------------------------------ */

int bs_model_max_weights(const bs_model *m) { return 1 + 12 * m->hp.n_layer; }

int bs_model_weights(bs_model *m, bs_weight **out) {
    int n = 0;
    if (m->output.data != m->tok_embd.data) out[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        bs_qwen35_layer *L = &m->layers[il];
        bs_weight *ws[] = {&L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->qkv, &L->gate, &L->beta,
                           &L->alpha, &L->ssm_out, &L->wq, &L->wk, &L->wv, &L->wo};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
            if (ws[k]->data) out[n++] = ws[k];
    }
    return n;
}

/* Packed copy of a weight of a mapped file: its bytes are read with pread into anonymous
 * huge-page memory and packed there, so the mapping's pages are never faulted in (no resident
 * file pages, no 4 KiB page faults); w->data stays valid for the rare reader of raw rows (a
 * drafter comparing its LM head), which then reads the file. */
int bs_model_pack_from_file(bs_weight *w, int fd, const gguf_file *f, void *buf, bs_pool *pool) {
    const size_t bytes = w->row_bytes * (size_t)w->ne1;
    const off_t off = (off_t)((const uint8_t *)w->data - (const uint8_t *)f->base);
    for (size_t done = 0; done < bytes;) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, bytes - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return bs_error("%s: reading for repacking: %s", w->name, r < 0 ? strerror(errno) : "file shrank");
        done += (size_t)r;
    }
    bs_weight t = *w;
    t.data = buf;
    t.packed = NULL;
    t.pack_kind = 0;   /* none (matmul.h) */
    if (bs_weight_pack_in_place(&t, pool) || !t.packed)
        return t.packed ? -1 : bs_error("%s: could not be repacked", w->name);
    w->packed = buf;
    w->pack_kind = t.pack_kind;
    return 0;
}

static int pack_from_file(bs_weight *w, int fd, const gguf_file *f, bs_pool *pool) {
    const size_t bytes = w->row_bytes * (size_t)w->ne1;
    void *buf = NULL;
    if (posix_memalign(&buf, (size_t)2 << 20, bytes) != 0)
        return bs_error("%s: out of memory repacking %zu bytes", w->name, bytes);
    madvise(buf, bytes, MADV_HUGEPAGE);
    if (bs_model_pack_from_file(w, fd, f, buf, pool)) {
        free(buf);
        return -1;
    }
    return 0;
}

typedef struct transcode_job { const bs_weight *w; const uint8_t *src; size_t src_row; } transcode_job;

static void transcode_rows(void *ctx, int ith, int nth) {
    const transcode_job *j = ctx;
    int64_t lo, hi;
    bs_pool_split(j->w->ne1, 1, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++)
        bs_ptq1_0_to_pq2_0(j->src + (size_t)r * j->src_row, (uint8_t *)j->w->data + (size_t)r * j->w->row_bytes, j->w->ne0);
}

int bs_model_transcode(bs_model *m, int i, bs_pool *pool) {
    bs_weight *w = m->transcoded[i].w;
    transcode_job j = {w, m->transcoded[i].src, bs_row_size(BS_PTQ1_0, w->ne0)};
    bs_pool_run(pool, transcode_rows, &j);
    w->packed = NULL;
    w->pack_kind = 0;   /* none (matmul.h) */
    return m->transcoded[i].pack && bs_weight_packable(w) ? bs_weight_pack_in_place(w, pool) : 0;
}

bool bs_model_transcoded(const bs_model *m, const bs_weight *w) {
    for (int i = 0; i < m->n_transcoded; i++)
        if (m->transcoded[i].w == w) return true;
    return false;
}

/* w to PQ2_0 in a buffer of its own (entry of m->transcoded); its PTQ1_0 bytes are given back
 * (a wake transcodes them again from the file). */
static int transcode_one(bs_model *m, bs_weight *w, bool pack, bs_pool **pool) {
    const size_t row = bs_row_size(BS_PQ2_0, w->ne0), bytes = row * (size_t)w->ne1, src_bytes = w->row_bytes * (size_t)w->ne1;
    void *buf = NULL;
    if (posix_memalign(&buf, (size_t)2 << 20, bytes) != 0)
        return bs_error("%s: out of memory for %zu bytes of PQ2_0", w->name, bytes);
    madvise(buf, bytes, MADV_HUGEPAGE);
    m->transcoded = bs_xrealloc(m->transcoded, (size_t)(m->n_transcoded + 1) * sizeof *m->transcoded);
    m->transcoded[m->n_transcoded++] = (struct bs_transcoded){w, w->data, pack};
    const void *src = w->data;
    w->type = BS_PQ2_0;
    w->row_bytes = row;
    w->data = buf;
    if (!*pool) *pool = bs_pool_new(0);
    const int rc = bs_model_transcode(m, m->n_transcoded - 1, *pool);
    bs_release_mapped(src, src_bytes);
    return rc;
}

/* PTQ1_0 (Bonsai 2's base-3 ternary, 1.75 bits per weight) has no SIMD kernel: its weights are
 * transcoded once to PQ2_0 (2.125 bits; the same trits and scales, so the same products, bit
 * for bit) in memory of their own, which the Q2 kernels then read. Every PTQ1_0 matrix, and a
 * PTQ1_0 token table (read by rows: not packed; a tied output then multiplies by its PQ2_0 rows
 * too). */
static int transcode_weights(bs_model *m, bs_pool **pool) {
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (ws[i]->type == BS_PTQ1_0) rc = transcode_one(m, ws[i], true, pool);
    free(ws);
    if (rc || m->tok_embd.type != BS_PTQ1_0) return rc;
    const bool tied = m->output.data == m->tok_embd.data;
    if (transcode_one(m, &m->tok_embd, false, pool)) return -1;
    if (tied) {   /* (its own fold kept: the forward rotation) */
        m->output.type = m->tok_embd.type;
        m->output.row_bytes = m->tok_embd.row_bytes;
        m->output.data = m->tok_embd.data;
    }
    return 0;
}

/* Repack the Q1_0 matrices for the fast kernel without doubling memory: a file read into memory
 * (--no-mmap) is repacked in place; from a mapping, see pack_from_file. token_embd is only read
 * by rows (bs_get_rows) and stays as is (also when tied to the output). */
static int pack_weights(bs_model *m, const bs_model_params *p) {
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    int fd = -1, rc = 0;
    bs_pool *pool = NULL;
    rc = transcode_weights(m, &pool);
    for (int i = 0; i < n && !rc; i++) {
        if (p->progress && !p->progress((float)i / (float)n, p->progress_ud)) {
            rc = bs_error("cancelled by the progress callback");
            break;
        }
        bs_weight *w = ws[i];
        if (bs_model_transcoded(m, w)) continue;   /* packed where it was transcoded */
        /* Q4_1 stays in llama.cpp's exact float order for targets (bit-identical on the
         * tiny-q4_1 fixture); drafters, whose legacy pack is Q4_1, take the faster X16 */
        if (!bs_weight_packable(w) || w->type == BS_Q4_1) continue;
        if (!pool) pool = bs_pool_new(0);
        if (!m->file->mmapped) {
            rc = bs_weight_pack_in_place(w, pool);
            continue;
        }
        if (fd < 0 && (fd = open(m->file->path, O_RDONLY | O_CLOEXEC)) < 0) {
            rc = bs_error("%s: %s", m->file->path, strerror(errno));
            break;
        }
        rc = pack_from_file(w, fd, m->file, pool);
    }
    if (fd >= 0) close(fd);
    bs_pool_free(pool);
    free(ws);
    return rc;
}

/* What a saved state names its model by: the file's header (metadata and tensor table) and 64
 * samples of its weights, hashed. Another model, another quantization or another fine-tune of
 * the same shapes differs; a copy of the file does not. */
static uint64_t model_fingerprint(const gguf_file *f) {
    const uint8_t *b = f->base;
    uint64_t h[2] = {bs_hash_bytes(b, (size_t)f->data_offset), 0};
    const uint64_t n = f->file_size > f->data_offset ? f->file_size - f->data_offset : 0;
    for (int i = 0; i < 64 && n >= 64; i++) {
        h[1] = bs_hash_bytes(b + f->data_offset + (n - 64) / 63 * (uint64_t)i, 64);
        h[0] = bs_hash_bytes(h, sizeof h);
    }
    return h[0];
}

bs_model *bs_model_load(const char *path, const bs_model_params *params) {
    bs_model_params def = {0};
    if (!params) params = &def;
    bs_model *m = bs_xcalloc(1, sizeof *m);
    const bool vo = params->vocab_only;
    m->file = gguf_open(path, (params->no_mmap ? GGUF_OPEN_NO_MMAP : 0) | (vo ? GGUF_OPEN_META_ONLY : 0));
    if (m->file && !vo) m->fingerprint = model_fingerprint(m->file);   /* (before the weights are moved) */
    /* on Vulkan the weights go to the device as the file has them: no CPU repacking */
    if (!m->file || load_model(m, vo) || bs_file_identity(path, m->file_id) || (!vo && bs_model_choose_device(m, params->device)) ||
        (!vo && !m->vk && pack_weights(m, params)) ||
        (params->progress && !params->progress(1.0f, params->progress_ud) && bs_error("cancelled by the progress callback"))) {
        if (m->file) bs_error_prefix("loading %s: ", path);
        else bs_error_prefix("loading model: ");   /* the GGUF reader's message names the file */
        bs_model_free(m);
        return NULL;
    }
    if (!vo) bs_log(1, "device: %s\n", bs_model_device(m));
    return m;
}

void bs_model_free(bs_model *m) {
    if (!m) return;
    bs_lora_detach(m);   /* adapters still attached: their references go with the model */
    if (m->layers) {
        bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
        const int n = bs_model_weights(m, ws);
        for (int i = 0; i < n; i++) bs_weight_release(ws[i]);
        free(ws);
    }
    for (int i = 0; i < m->n_transcoded; i++) free((void *)m->transcoded[i].w->data);
    free(m->transcoded);
    bs_model_release_device(m);
    bs_hadamard_free(m->fold);
    if (m->file) gguf_close(m->file);
    free(m->layers);
    free(m);
}

int bs_model_n_vocab(const bs_model *m) { return m->hp.n_vocab; }
int bs_model_n_embd(const bs_model *m) { return m->hp.n_embd; }
int bs_model_n_layer(const bs_model *m) { return m->hp.n_layer; }
int bs_model_n_ctx_train(const bs_model *m) { return m->hp.n_ctx_train; }
