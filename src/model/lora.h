/* lora.h: LoRA adapters: reading llama.cpp GGUF adapters and PEFT safetensors adapters,
 * applying them at run time (y = W x + scale * B (A x) inside bs_matmul, for every adapter
 * attached to the weight), and merging them offline into a base GGUF (lora_merge.c).
 *
 * An adapter is a set of (A, B) pairs named by the base GGUF tensor they modify:
 *   A: r x in (GGUF lora_a ne {in, r}; PEFT lora_A.weight [r, in]),
 *   B: out x r (GGUF lora_b ne {r, out}; PEFT lora_B.weight [out, r]),
 *   delta W = scale * B A, with scale = user_scale * alpha / r (PEFT's rsLoRA: alpha / sqrt(r);
 *   a GGUF adapter without alpha has scale = user_scale, as in llama.cpp).
 *
 * PEFT names (base_model.model.model[.language_model].layers.N.<module>.lora_A.weight, lm_head)
 * map to qwen35 GGUF names; the Gated DeltaNet projections get the converter's V-head reorder
 * (qwen35-arch.md §2.7): rows of in_proj_qkv's V part, in_proj_z, in_proj_b, in_proj_a, and the
 * input columns of out_proj. */
#ifndef BS_LORA_H
#define BS_LORA_H

#include "bitspark.h"
#include "formats/gguf.h"
#include "cpu/compute.h"

#include <stdbool.h>
#include <stdint.h>


typedef struct bs_lora {
    char *path;
    char *config;             /* a PEFT adapter's adapter_config.json (an input too); NULL for GGUF */
    float alpha;              /* 0: none given */
    int n;
    bs_lora_tensor *t;
} bs_lora;

/* Load a GGUF adapter (general.type = adapter, adapter.type = lora) or a PEFT adapter (a
 * directory with adapter_config.json + adapter_model.safetensors, or the .safetensors file
 * with the config beside it). base: the model's GGUF (architecture check, PEFT name mapping
 * and head reorder). NULL + bs_error. */
bs_lora *bs_lora_load(const char *path, const gguf_file *base);
void bs_lora_free(bs_lora *l);
const bs_lora_tensor *bs_lora_find(const bs_lora *l, const char *name);

/* "FILE" or "FILE:SCALE" -> path (malloc'd) and scale (1 if absent). -1 + bs_error. */
int bs_lora_parse_arg(const char *arg, char **path, float *scale);

/* --- run time (bs_lora_tensor and bs_lora_ref: cpu/matmul.h) --- */

/* Attach every tensor of l (times user_scale) to the model's weights; the adapter must outlive
 * the attachment. Fails (nothing attached) on an unknown tensor or a shape mismatch. */
int bs_lora_attach(bs_model *m, const bs_lora *l, float user_scale);
/* Remove every attached adapter (call before bs_model_free). */
void bs_lora_detach(bs_model *m);
/* (bs_matmul computes a weight with adapters as W x, then y += scale * B (A x) per adapter.) */

/* --- offline merge (lora_merge.c) --- */
typedef struct {
    const char *base, *out;
    const bs_lora *const *loras;
    const float *scales;
    int n_loras;
    int type;                 /* type of the merged tensors; BS_TYPE_INVALID: the base's */
    bool quiet;
} bs_lora_merge_params;

/* Per tensor and overall, what re-quantization kept: sign flips between the dequantized base
 * and the dequantized result, relative change of group scales (mean |w| per 128 weights: the
 * Q1_0 scale d), and the cosine between the intended delta and the one that survived. */
typedef struct {
    uint64_t n_weights, n_flipped;
    double scale_abs_change, scale_sum;   /* sum |d' - d|, sum d over groups */
    double dot, norm_delta, norm_got;     /* <intended, realized>, |intended|^2, |realized|^2 */
} bs_lora_merge_stats;

/* Write base + deltas to out, printing one report line per merged tensor and the total. */
int bs_lora_merge(const bs_lora_merge_params *p, bs_lora_merge_stats *total);

#endif
