/* synth.h: synthetic qwen35 targets and dspark drafters with random weights shaped like
 * quantization-aware training, written straight to GGUF in any supported weight type.
 *
 * A model is first described as a plan: the list of tensors (name, type, shape, how to fill
 * it) plus hyperparameters. The same plan drives `--dry-run` (print the table) and the writer,
 * which streams one tensor at a time through gguf_writer, so even the 27B preset never sits in
 * memory. Matrices get one magnitude s per 128-element group of a row and values in {-s, +s}
 * ("binary", as Q1_0 stores them) or {-s, 0, +s} ("ternary", Q2_0). Every matrix is generated
 * from its own RNG stream (seed, tensor name), so the same seed gives the same logical values
 * in every type: an f32 model and a q1_0 model from one seed agree exactly. */
#ifndef BS_SYNTH_H
#define BS_SYNTH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum bs_synth_arch { BS_SYNTH_QWEN35, BS_SYNTH_DSPARK };
enum bs_synth_values { BS_SYNTH_VALUES_AUTO = -1, BS_SYNTH_BINARY, BS_SYNTH_TERNARY };
#define BS_SYNTH_MAX_TAPS 16

typedef struct bs_synth_config {
    enum bs_synth_arch arch;
    const char *name;               /* general.name */
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    float rms_eps, rope_theta;
    /* qwen35 only */
    int64_t rope_dim, ssm_k_heads, ssm_v_heads, ssm_head_dim, conv_kernel, attn_interval;
    int32_t rope_sections[4];
    uint32_t n_merges;              /* BPE merges to train (fewer if the corpus runs out) */
    /* dspark only */
    int64_t block_size, mask_id, markov_rank, n_taps;
    int32_t taps[BS_SYNTH_MAX_TAPS];
    /* weight types (bs_type); matrix_type is the default for every matrix */
    int matrix_type, embd_type, output_type, ssm_ab_type;        /* target */
    int fc_type, markov_a_type, log_snr_type;                       /* drafter extras */
    enum bs_synth_values values;   /* AUTO: ternary for the q2_0 / tq types, else binary */
    bool ternary_family;            /* Ternary-Bonsai: the drafter's q4_1 pack has a q2_0 token_embd */
    uint64_t seed;
    int hadamard;                   /* targets: > 0 stores the weights folded with PrismML's Hadamard
                                       rotation of this block (prism.hadamard.*, Bonsai 2) */
} bs_synth_config;

/* Fill c from a preset: tiny, bonsai-27b, ternary-bonsai-27b, drafter-tiny, drafter-bonsai-27b,
 * drafter-ternary-bonsai-27b.
 * Returns 0 or -1 (unknown name). */
int bs_synth_preset(const char *name, bs_synth_config *c);
const char *const *bs_synth_preset_names(void);   /* NULL-terminated */
/* Drafter weight packs: "q4_1" (the published *-dspark-Q4_1.gguf mix), "bf16", "f32". */
int bs_synth_drafter_pack(bs_synth_config *c, const char *pack);
/* Recompute the derived fields after shape overrides (rope sections, mask id, taps, types of
 * ssm_alpha/beta) - call before validating. `explicit_*` say which ones the user set. */
void bs_synth_derive(bs_synth_config *c, bool explicit_sections, bool explicit_mask);
/* Check shapes and types (row widths vs block sizes, head counts, ...). 0 or -1 + bs_error. */
int bs_synth_validate(const bs_synth_config *c);

/* Print the tensor table (same plan as the writer) to out: one line per tensor
 * "name<TAB>type<TAB>ne0,ne1<TAB>bytes", then "# tensors N bytes B". */
int bs_synth_list(const bs_synth_config *c, FILE *out);
/* Write the model to path. Returns 0 or -1 with bs_error (partial file removed). */
int bs_synth_write(const bs_synth_config *c, const char *path);

#endif
