/* dspark_names.h: DSpark drafter tensor names, PrismML GGUF <-> DeepSpec Qwen3DSparkModel
 * safetensors (prism-fork.md §3.1). One table shared by the loader (dspark_load.c) and the
 * converters (convert_drafter.c). */
#ifndef BS_DSPARK_NAMES_H
#define BS_DSPARK_NAMES_H

#include <stddef.h>

/* The k-th HF name for a GGUF name (k = 0 is the DeepSpec name; higher k are older aliases such
 * as EasyDeL's markov_head.down/up), without a "model." prefix. Returns buf, or NULL when there
 * is no k-th name. */
const char *bs_dspark_hf_name(const char *gguf_name, int k, char *buf, size_t n);
/* The GGUF name of an HF tensor name (a leading "model.", "drafter." or "dspark." is ignored;
 * aliases are accepted). 0, or -1 if the name is not a drafter tensor. */
int bs_dspark_gguf_name(const char *hf_name, char *buf, size_t n);
/* Rank of a GGUF name in PrismML's file order (head tensors, then per layer, layers in order),
 * for writing tensors in canonical order; large for unknown names. */
long bs_dspark_name_rank(const char *gguf_name);

#endif
