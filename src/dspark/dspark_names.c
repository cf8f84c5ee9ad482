/* dspark_names.c: see dspark_names.h. */
#include "dspark/dspark_names.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Head tensors in PrismML's file order, then aliases of older exports. */
static const struct { const char *gguf, *hf; } head_names[] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"output_norm.weight", "norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"dspark.fc.weight", "fc.weight"},
    {"dspark.hidden_norm.weight", "hidden_norm.weight"},
    {"dspark.markov_head_a.weight", "markov_head.markov_w1.weight"},
    {"dspark.markov_head_b.weight", "markov_head.markov_w2.weight"},
    {"dspark.confidence_head.weight", "confidence_head.proj.weight"},
    {"dspark.confidence_head.bias", "confidence_head.proj.bias"},
    {"dspark.log_snr_fc1.weight", "log_snr_embed.fc1.weight"},
    {"dspark.log_snr_fc1.bias", "log_snr_embed.fc1.bias"},
    {"dspark.log_snr_fc2.weight", "log_snr_embed.fc2.weight"},
    {"dspark.log_snr_fc2.bias", "log_snr_embed.fc2.bias"},
    /* older exports (EasyDeL): down = the prev-token table (vocab -> rank), up = rank -> vocab */
    {"dspark.markov_head_a.weight", "markov_head.down.weight"},
    {"dspark.markov_head_b.weight", "markov_head.up.weight"},
    {"dspark.confidence_head.weight", "confidence_head.weight"},
    {"dspark.confidence_head.bias", "confidence_head.bias"},
};
#define N_HEAD_CANONICAL 13

/* Per-layer tensors in file order. */
static const struct { const char *gguf, *hf; } layer_names[] = {
    {"attn_norm", "input_layernorm"},     {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},       {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

/* "blk.N.KIND.SUFFIX" -> N, KIND, SUFFIX; false if the name has another shape. */
static bool split_layer(const char *name, const char *fmt, int *il, char *kind, char *suffix) {
    int k = 0;
    return sscanf(name, fmt, il, kind, suffix, &k) == 3 && k > 0 && !name[k] && *il >= 0;
}

const char *bs_dspark_hf_name(const char *gguf_name, int k, char *buf, size_t n) {
    int seen = 0;
    for (size_t i = 0; i < BS_ARRAY_LEN(head_names); i++) {
        if (strcmp(head_names[i].gguf, gguf_name)) continue;
        if (seen++ == k) {
            snprintf(buf, n, "%s", head_names[i].hf);
            return buf;
        }
    }
    int il;
    char kind[64], suffix[16];
    if (k != 0 || !split_layer(gguf_name, "blk.%d.%63[a-z_].%15[a-z]%n", &il, kind, suffix)) return NULL;
    for (size_t i = 0; i < BS_ARRAY_LEN(layer_names); i++) {
        if (strcmp(layer_names[i].gguf, kind)) continue;
        snprintf(buf, n, "layers.%d.%s.%s", il, layer_names[i].hf, suffix);
        return buf;
    }
    return NULL;
}

int bs_dspark_gguf_name(const char *hf_name, char *buf, size_t n) {
    static const char *prefixes[] = {"model.", "drafter.", "dspark."};
    for (size_t i = 0; i < BS_ARRAY_LEN(prefixes); i++) {
        size_t l = strlen(prefixes[i]);
        if (!strncmp(hf_name, prefixes[i], l)) { hf_name += l; break; }
    }
    for (size_t i = 0; i < BS_ARRAY_LEN(head_names); i++) {
        if (strcmp(head_names[i].hf, hf_name)) continue;
        snprintf(buf, n, "%s", head_names[i].gguf);
        return 0;
    }
    /* layers.N.KIND.SUFFIX, KIND may hold dots (self_attn.q_proj) */
    char *end;
    if (strncmp(hf_name, "layers.", 7) || hf_name[7] < '0' || hf_name[7] > '9') return -1;
    long il = strtol(hf_name + 7, &end, 10);
    const char *dot = strrchr(end, '.');
    if (*end != '.' || il > 1000000 || !dot || dot == end) return -1;
    size_t kl = (size_t)(dot - end - 1);
    for (size_t i = 0; i < BS_ARRAY_LEN(layer_names); i++) {
        if (strlen(layer_names[i].hf) != kl || strncmp(layer_names[i].hf, end + 1, kl)) continue;
        snprintf(buf, n, "blk.%ld.%s.%s", il, layer_names[i].gguf, dot + 1);
        return 0;
    }
    return -1;
}

long bs_dspark_name_rank(const char *gguf_name) {
    for (size_t i = 0; i < N_HEAD_CANONICAL; i++)
        if (!strcmp(head_names[i].gguf, gguf_name)) return (long)i;
    int il;
    char kind[64], suffix[16];
    if (split_layer(gguf_name, "blk.%d.%63[a-z_].%15[a-z]%n", &il, kind, suffix) && il < 1000000)
        for (size_t i = 0; i < BS_ARRAY_LEN(layer_names); i++)
            if (!strcmp(layer_names[i].gguf, kind))
                return 1000 + (long)il * 100 + (long)i * 2 + (strcmp(suffix, "weight") ? 1 : 0);
    return 1L << 40;
}
