/* qwen35.h: the qwen35 model (Qwen3.5 / Qwen3.6 dense, Bonsai-27B): hyperparameters and weights
 * read from a GGUF, every tensor checked by name, shape and type (qwen35-arch.md §5). The forward
 * pass lives in forward.c / deltanet.c / attention.c and works on a bs_session (session.h). */
#ifndef BS_QWEN35_H
#define BS_QWEN35_H

#include "bitspark.h"
#include "formats/gguf.h"
#include "cpu/compute.h"
#include "vulkan/backend.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct bs_qwen35_hparams {
    int n_layer;           /* decoder blocks run by the main pass (block_count minus MTP blocks) */
    int n_embd, n_ff, n_vocab, n_ctx_train;
    float eps;             /* rms_norm_eps for every norm */
    /* gated full attention */
    int n_head, n_head_kv, head_dim;
    int n_rot;             /* rope.dimension_count: leading dims of each head that rotate */
    int rope_sections[4];  /* interleaved mrope sections; zeros if absent */
    float rope_base;
    /* Gated DeltaNet */
    int conv_kernel;       /* ssm.conv_kernel */
    int n_k_heads, n_v_heads, d_k, d_v;   /* group_count, time_step_rank, state_size, inner/n_v */
    int conv_dim;          /* 2 * n_k_heads * d_k + n_v_heads * d_v */
} bs_qwen35_hparams;

typedef struct bs_qwen35_layer {
    bool recurrent;        /* Gated DeltaNet (true) or gated full attention */
    int slot;              /* index among layers of its kind (state / KV cache slot) */
    const float *attn_norm, *post_norm;
    bs_weight ffn_gate, ffn_up, ffn_down;
    /* Gated DeltaNet */
    bs_weight qkv, gate, beta, alpha, ssm_out;
    const float *conv1d;   /* [conv_dim][conv_kernel], tap conv_kernel-1 hits the current token */
    const float *dt_bias, *ssm_a, *ssm_norm;
    /* attention */
    bs_weight wq, wk, wv, wo;
    const float *q_norm, *k_norm;
} bs_qwen35_layer;

struct bs_model {
    gguf_file *file;
    bs_qwen35_hparams hp;
    bs_weight tok_embd, output;
    const float *output_norm;
    bs_qwen35_layer *layers;
    struct bs_hadamard *fold;   /* a Bonsai 2 file's weight fold (hadamard.h), or NULL */
    /* PTQ1_0 weights run as PQ2_0 (the same trits and scales) in buffers of their own
     * (bs_model_transcode); src: their bytes in the file, to transcode again after a sleep */
    struct bs_transcoded { bs_weight *w; const void *src; bool pack; } *transcoded;
    int n_transcoded;
    int n_recurrent, n_attention;
    /* the device (device.h): NULL on the CPU */
    bs_vk_ctx *vk;
    bs_vk_net *vk_net;
    char device_name[300];
    /* sleep.c: the weights' memory given back while idle; the file's identity at load, checked
     * before it is read again */
    bool asleep;
    uint64_t file_id[4];   /* bs_file_identity */
    uint64_t fingerprint;  /* what saved states name the model by (qwen35.c: model_fingerprint) */
};

/* Every matmul weight of the model, each once (a tied output is the token embedding); out has
 * room for bs_model_max_weights(m). */
int bs_model_weights(bs_model *m, bs_weight **out);
int bs_model_max_weights(const bs_model *m);
/* Read w's raw bytes from the file (fd open on it) into buf (row_bytes x ne1, from the file's
 * mapping offsets) and pack them there; w then uses buf as its packed copy. */
int bs_model_pack_from_file(bs_weight *w, int fd, const gguf_file *f, void *buf, bs_pool *pool);
/* Transcode entry i of m->transcoded from its file bytes into its PQ2_0 buffer (w->data) and
 * pack it there; 0 or -1 with bs_error. */
int bs_model_transcode(bs_model *m, int i, bs_pool *pool);
bool bs_model_transcoded(const bs_model *m, const bs_weight *w);

#endif
