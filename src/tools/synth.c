/* synth.c: see synth.h. Presets, the tensor plan, metadata (synth_meta.c has the tokenizer and
 * chat template) and the streaming weight generator. */
#include "tools/synth.h"
#include "tools/synth_impl.h"
#include "formats/gguf.h"
#include "io/progress.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- presets ---------------------------------------------------------------------------------- */
static const char *const preset_names[] = {
    "tiny", "bonsai-27b", "ternary-bonsai-27b", "ternary-bonsai-2-27b", "drafter-tiny", "drafter-bonsai-27b",
    "drafter-ternary-bonsai-27b", NULL};

const char *const *bs_synth_preset_names(void) { return preset_names; }

static void target_tiny(bs_synth_config *c) {
    c->arch = BS_SYNTH_QWEN35;
    c->name = "bitspark-synth-tiny";
    c->n_layer = 8; c->n_embd = 256; c->n_ff = 512; c->n_head = 4; c->n_head_kv = 2;
    c->head_dim = 64; c->rope_dim = 16; c->n_vocab = 1024; c->n_ctx = 8192;
    c->ssm_k_heads = 2; c->ssm_v_heads = 6; c->ssm_head_dim = 64; c->conv_kernel = 4;
    c->attn_interval = 4; c->n_merges = 700;
}

static void target_27b(bs_synth_config *c) {
    c->arch = BS_SYNTH_QWEN35;
    c->name = "bitspark-synth-bonsai-27b";
    c->n_layer = 64; c->n_embd = 5120; c->n_ff = 17408; c->n_head = 24; c->n_head_kv = 4;
    c->head_dim = 256; c->rope_dim = 64; c->n_vocab = 248320; c->n_ctx = 262144;
    c->ssm_k_heads = 16; c->ssm_v_heads = 48; c->ssm_head_dim = 128; c->conv_kernel = 4;
    c->attn_interval = 4; c->n_merges = 2000;
}

static void drafter_common(bs_synth_config *c) {
    c->arch = BS_SYNTH_DSPARK;
    c->block_size = 4;
    c->mask_id = -1;                       /* n_vocab - 1, set by bs_synth_derive */
}

int bs_synth_preset(const char *name, bs_synth_config *c) {
    memset(c, 0, sizeof *c);
    c->rms_eps = 1e-6f;
    c->rope_theta = 1e7f;
    c->seed = 42;
    c->matrix_type = BS_Q1_0;
    c->embd_type = c->output_type = c->ssm_ab_type = -1;
    c->fc_type = c->markov_a_type = c->log_snr_type = -1;
    c->values = BS_SYNTH_VALUES_AUTO;
    if (strcmp(name, "tiny") == 0) {
        target_tiny(c);
    } else if (strcmp(name, "bonsai-27b") == 0) {
        target_27b(c);
    } else if (strcmp(name, "ternary-bonsai-27b") == 0) {
        target_27b(c);
        c->name = "bitspark-synth-ternary-bonsai-27b";
        c->matrix_type = BS_Q2_0;
        c->ssm_ab_type = BS_BF16;
        c->ternary_family = true;
    } else if (strcmp(name, "ternary-bonsai-2-27b") == 0) {
        /* Ternary-Bonsai-2-27B's table: PTQ1_0 matrices and token table, BF16 alpha / beta, every
         * foldable matrix and the token table Hadamard-folded in blocks of 1024 */
        target_27b(c);
        c->name = "bitspark-synth-ternary-bonsai-2-27b";
        c->matrix_type = BS_PTQ1_0;
        c->ssm_ab_type = BS_BF16;
        c->ternary_family = true;
        c->hadamard = 1024;
    } else if (strcmp(name, "drafter-tiny") == 0) {
        drafter_common(c);
        c->name = "bitspark-synth-drafter-tiny";
        c->n_layer = 2; c->n_embd = 256; c->n_ff = 256; c->n_head = 4; c->n_head_kv = 2;
        c->head_dim = 64; c->n_vocab = 1024; c->n_ctx = 8192; c->markov_rank = 32;
        c->n_taps = 3; c->taps[0] = 1; c->taps[1] = 4; c->taps[2] = 6;
        bs_synth_drafter_pack(c, "f32");
    } else if (strcmp(name, "drafter-bonsai-27b") == 0 || strcmp(name, "drafter-ternary-bonsai-27b") == 0) {
        drafter_common(c);
        c->ternary_family = strstr(name, "ternary") != NULL;
        c->name = c->ternary_family ? "bitspark-synth-drafter-ternary-bonsai-27b" : "bitspark-synth-drafter-bonsai-27b";
        c->n_layer = 6; c->n_embd = 5120; c->n_ff = 5120; c->n_head = 40; c->n_head_kv = 4;
        c->head_dim = 128; c->n_vocab = 248320; c->n_ctx = 262144; c->markov_rank = 256;
        c->n_taps = 5;
        for (int i = 0; i < 5; i++) c->taps[i] = 1 + 15 * i;   /* 1, 16, 31, 46, 61 */
        bs_synth_drafter_pack(c, "q4_1");
    } else {
        return bs_error("unknown preset '%s' (tiny, bonsai-27b, ternary-bonsai-27b, ternary-bonsai-2-27b, drafter-tiny, "
                        "drafter-bonsai-27b, drafter-ternary-bonsai-27b)", name);
    }
    return 0;
}

int bs_synth_drafter_pack(bs_synth_config *c, const char *pack) {
    c->embd_type = c->output_type = c->fc_type = c->markov_a_type = c->log_snr_type = -1;
    if (strcmp(pack, "q4_1") == 0) {
        /* The published *-dspark-Q4_1.gguf files (prism-fork.md §3.1). token_embd is the
         * target's own embedding: legacy q2_0 in the ternary drafter; q1_0 in the 1-bit one,
         * which is what makes this table add up to the published file sizes (1,787,468,768 and
         * 1,946,393,568 bytes, both with the same 5,820-byte header). */
        c->matrix_type = BS_Q4_1;
        c->embd_type = c->ternary_family ? BS_Q2_0 : BS_Q1_0;
        c->markov_a_type = BS_BF16;
        c->log_snr_type = BS_BF16;
    } else if (strcmp(pack, "bf16") == 0) {
        c->matrix_type = BS_BF16;
    } else if (strcmp(pack, "f32") == 0) {
        c->matrix_type = BS_F32;
    } else {
        return bs_error("unknown drafter pack '%s' (q4_1, bf16, f32)", pack);
    }
    return 0;
}

void bs_synth_derive(bs_synth_config *c, bool explicit_sections, bool explicit_mask) {
    if (!explicit_sections) {
        /* Qwen's text mrope split of rope_dim/2 frequency pairs: [11,11,10,0] for 32 pairs,
         * [3,3,2,0] for 8. */
        int32_t pairs = (int32_t)(c->rope_dim / 2), a = (pairs + 2) / 3, b = BS_MIN(a, pairs - a);
        c->rope_sections[0] = a; c->rope_sections[1] = b;
        c->rope_sections[2] = pairs - a - b; c->rope_sections[3] = 0;
    }
    if (!explicit_mask) c->mask_id = c->n_vocab - 1;
}

/* --- the plan --------------------------------------------------------------------------------- */
static void plan_add(synth_plan *p, const char *name, int type, int n_dims, int64_t ne0, int64_t ne1,
                     enum synth_fill fill, float a, float b) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 128;
        p->t = bs_xrealloc(p->t, p->cap * sizeof *p->t);
    }
    synth_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type; t->n_dims = n_dims; t->ne[0] = ne0; t->ne[1] = ne1;
    t->fill = fill; t->a = a; t->b = b;
}

static enum bs_synth_values values_default(const bs_synth_config *c) {
    int t = c->matrix_type;
    bool ternary = t == BS_Q2_0 || t == BS_Q2_0_G64 || t == BS_PQ2_0 || t == BS_TQ1_0 || t == BS_TQ2_0;
    return ternary ? BS_SYNTH_TERNARY : BS_SYNTH_BINARY;
}

/* A matrix {fan_in, fan_out} of the given type with per-group magnitude `scale` (the RMS of its
 * entries). Q1_0 can only hold binary values and the Q2_0 family is always ternary. */
static void add_matrix(synth_plan *p, const bs_synth_config *c, const char *name, int type,
                       int64_t ne0, int64_t ne1, float scale) {
    plan_add(p, name, type, 2, ne0, ne1, SYNTH_MATRIX, scale, 0);
    synth_tensor *t = &p->t[p->n - 1];
    enum bs_synth_values v = c->values != BS_SYNTH_VALUES_AUTO ? c->values : values_default(c);
    if (type == BS_Q2_0 || type == BS_Q2_0_G64 || type == BS_PQ2_0) v = BS_SYNTH_TERNARY;
    t->values = v;
}

static void add_vec(synth_plan *p, const char *name, int64_t n, enum synth_fill fill, float a, float b) {
    plan_add(p, name, BS_F32, 1, n, 1, fill, a, b);
}

static int pick(int type, int fallback) { return type >= 0 ? type : fallback; }

static void plan_qwen35_layer(synth_plan *p, const bs_synth_config *c, int il) {
    char n[64];
    const int64_t E = c->n_embd, F = c->n_ff, L = c->n_layer;
    const int mt = c->matrix_type, ab = pick(c->ssm_ab_type, mt);
    const float s_in = 1.0f / sqrtf((float)E);
    /* Residual branches end with an extra 1/sqrt(n_layer) so the stream stays O(1) at any depth. */
    const float depth = 1.0f / sqrtf((float)L);
    bool attn = (il + 1) % c->attn_interval == 0;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if (attn) {
        const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
        add_matrix(p, c, NAME("attn_k.weight"), mt, E, kvd, s_in);
        add_vec(p, NAME("attn_k_norm.weight"), c->head_dim, SYNTH_NORMAL, 1.0f, 0.05f);
        add_vec(p, NAME("attn_norm.weight"), E, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("attn_output.weight"), mt, qd, E, depth / sqrtf((float)qd));
        add_matrix(p, c, NAME("attn_q.weight"), mt, E, 2 * qd, s_in);   /* query + gate per head */
        add_vec(p, NAME("attn_q_norm.weight"), c->head_dim, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("attn_v.weight"), mt, E, kvd, s_in);
    } else {
        const int64_t kd = c->ssm_k_heads * c->ssm_head_dim, vd = c->ssm_v_heads * c->ssm_head_dim;
        add_matrix(p, c, NAME("attn_gate.weight"), mt, E, vd, s_in);
        add_vec(p, NAME("attn_norm.weight"), E, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("attn_qkv.weight"), mt, E, 2 * kd + vd, s_in);
    }
    add_matrix(p, c, NAME("ffn_down.weight"), mt, F, E, depth / sqrtf((float)F));
    add_matrix(p, c, NAME("ffn_gate.weight"), mt, E, F, s_in);
    add_matrix(p, c, NAME("ffn_up.weight"), mt, E, F, s_in);
    add_vec(p, NAME("post_attention_norm.weight"), E, SYNTH_NORMAL, 1.0f, 0.05f);
    if (!attn) {
        const int64_t kd = c->ssm_k_heads * c->ssm_head_dim, vd = c->ssm_v_heads * c->ssm_head_dim;
        const int64_t H = c->ssm_v_heads;
        /* ssm_a = -exp(A_log) with A_log in [-1, 0.5]: decay rates of order one. */
        add_vec(p, NAME("ssm_a"), H, SYNTH_NEG_EXP, -1.0f, 0.5f);
        add_matrix(p, c, NAME("ssm_alpha.weight"), ab, E, H, s_in);
        add_matrix(p, c, NAME("ssm_beta.weight"), ab, E, H, s_in);
        plan_add(p, NAME("ssm_conv1d.weight"), BS_F32, 2, c->conv_kernel, 2 * kd + vd,
                 SYNTH_UNIFORM, -0.5f, 0.5f);
        add_vec(p, NAME("ssm_dt.bias"), H, SYNTH_UNIFORM, -0.5f, 0.5f);
        add_vec(p, NAME("ssm_norm.weight"), c->ssm_head_dim, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("ssm_out.weight"), mt, vd, E, depth / sqrtf((float)vd));
    }
#undef NAME
}

/* Tensor order follows the fixtures: output, output_norm, token_embd, then each block with its
 * tensors in name order. Embedding rows have RMS 1; the head gives logits of RMS ~2. */
static void plan_qwen35(synth_plan *p, const bs_synth_config *c) {
    const int64_t E = c->n_embd, V = c->n_vocab;
    add_matrix(p, c, "output.weight", pick(c->output_type, c->matrix_type), E, V, 2.0f / sqrtf((float)E));
    add_vec(p, "output_norm.weight", E, SYNTH_NORMAL, 1.0f, 0.05f);
    add_matrix(p, c, "token_embd.weight", pick(c->embd_type, c->matrix_type), E, V, 1.0f);
    for (int il = 0; il < c->n_layer; il++) plan_qwen35_layer(p, c, il);
}

/* Tensor order and names of PrismML's drafter files (prism-fork.md §3.1). token_embd and output
 * use the target's names and scales, so a drafter and a target made with one seed and the same
 * weight type share those two tensors exactly, as a trained drafter shares the target's. */
static void plan_dspark(synth_plan *p, const bs_synth_config *c) {
    char n[64];
    const int64_t E = c->n_embd, V = c->n_vocab, R = c->markov_rank, L = c->n_layer;
    const int64_t qd = c->n_head * c->head_dim, kvd = c->n_head_kv * c->head_dim;
    const int mt = c->matrix_type;
    const float s_in = 1.0f / sqrtf((float)E), depth = 1.0f / sqrtf((float)L);
    add_matrix(p, c, "token_embd.weight", pick(c->embd_type, mt), E, V, 1.0f);
    add_vec(p, "output_norm.weight", E, SYNTH_NORMAL, 1.0f, 0.05f);
    add_matrix(p, c, "output.weight", pick(c->output_type, mt), E, V, 2.0f / sqrtf((float)E));
    add_matrix(p, c, "dspark.fc.weight", pick(c->fc_type, mt), c->n_taps * E, E,
               1.0f / sqrtf((float)(c->n_taps * E)));
    add_vec(p, "dspark.hidden_norm.weight", E, SYNTH_NORMAL, 1.0f, 0.05f);
    /* Markov bias W2 * W1[prev] of RMS ~0.5 */
    add_matrix(p, c, "dspark.markov_head_a.weight", pick(c->markov_a_type, mt), R, V, 1.0f);
    add_matrix(p, c, "dspark.markov_head_b.weight", mt, R, V, 0.5f / sqrtf((float)R));
    add_matrix(p, c, "dspark.confidence_head.weight", mt, E + R, 1, 1.0f / sqrtf((float)(E + R)));
    add_vec(p, "dspark.confidence_head.bias", 1, SYNTH_NORMAL, 0.0f, 0.02f);
    add_matrix(p, c, "dspark.log_snr_fc1.weight", pick(c->log_snr_type, mt), SYNTH_LOG_SNR_DIM, E,
               1.0f / sqrtf((float)SYNTH_LOG_SNR_DIM));
    add_vec(p, "dspark.log_snr_fc1.bias", E, SYNTH_NORMAL, 0.0f, 0.02f);
    add_matrix(p, c, "dspark.log_snr_fc2.weight", pick(c->log_snr_type, mt), E, E, s_in);
    add_vec(p, "dspark.log_snr_fc2.bias", E, SYNTH_NORMAL, 0.0f, 0.02f);
    for (int il = 0; il < L; il++) {
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
        add_vec(p, NAME("attn_norm.weight"), E, SYNTH_NORMAL, 1.0f, 0.05f);
        add_vec(p, NAME("ffn_norm.weight"), E, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("attn_q.weight"), mt, E, qd, s_in);
        add_matrix(p, c, NAME("attn_k.weight"), mt, E, kvd, s_in);
        add_matrix(p, c, NAME("attn_v.weight"), mt, E, kvd, s_in);
        add_matrix(p, c, NAME("attn_output.weight"), mt, qd, E, depth / sqrtf((float)qd));
        add_vec(p, NAME("attn_q_norm.weight"), c->head_dim, SYNTH_NORMAL, 1.0f, 0.05f);
        add_vec(p, NAME("attn_k_norm.weight"), c->head_dim, SYNTH_NORMAL, 1.0f, 0.05f);
        add_matrix(p, c, NAME("ffn_gate.weight"), mt, E, c->n_ff, s_in);
        add_matrix(p, c, NAME("ffn_up.weight"), mt, E, c->n_ff, s_in);
        add_matrix(p, c, NAME("ffn_down.weight"), mt, c->n_ff, E, depth / sqrtf((float)c->n_ff));
#undef NAME
    }
}

static void plan_build(synth_plan *p, const bs_synth_config *c) {
    memset(p, 0, sizeof *p);
    if (c->arch == BS_SYNTH_QWEN35) plan_qwen35(p, c);
    else plan_dspark(p, c);
}

static void plan_free(synth_plan *p) { free(p->t); memset(p, 0, sizeof *p); }

/* --- validation ------------------------------------------------------------------------------- */
#define DIM_MAX ((int64_t)1 << 20)

static int check_dim(const char *what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) return bs_error("%s = %lld is out of range [%lld, %lld]", what, (long long)v,
                                          (long long)lo, (long long)hi);
    return 0;
}

static int validate_hparams(const bs_synth_config *c) {
    if (check_dim("n_layer", c->n_layer, 1, 1024) || check_dim("n_embd", c->n_embd, 1, DIM_MAX) ||
        check_dim("n_ff", c->n_ff, 1, DIM_MAX) || check_dim("n_head", c->n_head, 1, 4096) ||
        check_dim("n_head_kv", c->n_head_kv, 1, 4096) || check_dim("head_dim", c->head_dim, 2, 4096) ||
        check_dim("n_vocab", c->n_vocab, 2, (int64_t)1 << 24))
        return -1;
    if (c->n_head % c->n_head_kv) return bs_error("n_head %lld is not a multiple of n_head_kv %lld",
                                                  (long long)c->n_head, (long long)c->n_head_kv);
    if (c->head_dim % 2) return bs_error("head_dim must be even");
    if (c->arch == BS_SYNTH_QWEN35) {
        if (check_dim("rope_dim", c->rope_dim, 2, c->head_dim) || check_dim("ssm_k_heads", c->ssm_k_heads, 1, 4096) ||
            check_dim("ssm_v_heads", c->ssm_v_heads, 1, 4096) || check_dim("ssm_head_dim", c->ssm_head_dim, 1, 4096) ||
            check_dim("conv_kernel", c->conv_kernel, 1, 64) || check_dim("attn_interval", c->attn_interval, 1, 1024))
            return -1;
        if (c->rope_dim % 2) return bs_error("rope_dim must be even");
        if (c->ssm_v_heads % c->ssm_k_heads)
            return bs_error("ssm_v_heads %lld is not a multiple of ssm_k_heads %lld",
                            (long long)c->ssm_v_heads, (long long)c->ssm_k_heads);
        if (c->n_vocab < SYNTH_MIN_VOCAB)
            return bs_error("n_vocab %lld is too small for 256 byte tokens and the %d special tokens "
                            "(minimum %d)", (long long)c->n_vocab, SYNTH_N_SPECIALS, SYNTH_MIN_VOCAB);
    } else {
        if (check_dim("markov_rank", c->markov_rank, 1, 65536) || check_dim("block_size", c->block_size, 1, 64) ||
            check_dim("mask_id", c->mask_id, 0, c->n_vocab - 1) || check_dim("taps", c->n_taps, 1, BS_SYNTH_MAX_TAPS))
            return -1;
        for (int i = 0; i < c->n_taps; i++)
            if (check_dim("tap", c->taps[i], 0, 1023)) return -1;
    }
    return 0;
}

static int validate_tensor(const synth_tensor *t) {
    const bs_type_traits *tt = bs_type_get(t->type);
    if (!tt) return bs_error("%s: unknown type", t->name);
    if (t->ne[0] % tt->blck)
        return bs_error("type %s needs rows that are a multiple of %lld elements, but %s has rows of %lld",
                        tt->name, (long long)tt->blck, t->name, (long long)t->ne[0]);
    if (t->fill == SYNTH_MATRIX && !synth_can_generate(t->type))
        return bs_error("%s: cannot write weights of type %s", t->name, tt->name);
    if (t->fill == SYNTH_MATRIX && t->type == BS_Q1_0 && t->values == BS_SYNTH_TERNARY)
        return bs_error("%s: q1_0 cannot hold ternary values (use --values binary)", t->name);
    if (bs_tensor_size(t->type, t->ne[0], (uint64_t)t->ne[1]) == UINT64_MAX)
        return bs_error("%s: tensor too large", t->name);
    return 0;
}

int bs_synth_validate(const bs_synth_config *c) {
    if (validate_hparams(c)) return -1;
    synth_plan p;
    plan_build(&p, c);
    int rc = 0;
    for (size_t i = 0; i < p.n && !rc; i++) rc = validate_tensor(&p.t[i]);
    if (!rc) rc = synth_fold_check(c, &p);
    plan_free(&p);
    return rc;
}

/* --- listing ---------------------------------------------------------------------------------- */
int bs_synth_list(const bs_synth_config *c, FILE *out) {
    if (bs_synth_validate(c)) return -1;
    synth_plan p;
    plan_build(&p, c);
    uint64_t total = 0;
    for (size_t i = 0; i < p.n; i++) {
        const synth_tensor *t = &p.t[i];
        uint64_t nb = bs_tensor_size(t->type, t->ne[0], (uint64_t)t->ne[1]);
        total += nb;
        if (t->n_dims == 1) fprintf(out, "%s\t%s\t%lld\t%llu\n", t->name, bs_type_name(t->type),
                                    (long long)t->ne[0], (unsigned long long)nb);
        else fprintf(out, "%s\t%s\t%lld,%lld\t%llu\n", t->name, bs_type_name(t->type),
                     (long long)t->ne[0], (long long)t->ne[1], (unsigned long long)nb);
    }
    fprintf(out, "# tensors %zu bytes %llu\n", p.n, (unsigned long long)total);
    plan_free(&p);
    return 0;
}

/* --- writing ---------------------------------------------------------------------------------- */
int bs_synth_write(const bs_synth_config *c, const char *path) {
    if (bs_synth_validate(c)) return -1;
    synth_plan p;
    plan_build(&p, c);
    gguf_writer *w = gguf_w_open(path);
    if (!w) { plan_free(&p); return -1; }
    int rc = synth_write_metadata(w, c, &p);
    for (size_t i = 0; i < p.n && !rc; i++) {
        const synth_tensor *t = &p.t[i];
        int64_t ne[2] = {t->ne[0], t->ne[1]};
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, ne) < 0) rc = -1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < p.n; i++) total += bs_tensor_size(p.t[i].type, p.t[i].ne[0], (uint64_t)p.t[i].ne[1]);
    bs_progress pr;   /* a bar on a terminal; the caller prints the summary */
    bs_progress_begin(&pr, "synth", total);
    for (size_t i = 0; i < p.n && !rc; i++) {
        rc = synth_write_tensor(w, c, &p.t[i]);
        if (rc) bs_error_prefix("%s: ", p.t[i].name);
        bs_progress_add(&pr, bs_tensor_size(p.t[i].type, p.t[i].ne[0], (uint64_t)p.t[i].ne[1]));
    }
    bs_progress_clear(&pr);
    plan_free(&p);
    if (rc) { gguf_w_abort(w); return -1; }
    return gguf_w_close(w);
}
