/* inspect.h: describe a model file (GGUF or safetensors) as a JSON object, and print that
 * object as the human-readable report of `bitspark inspect`. Both views come from the same
 * object, so the text and --json outputs never disagree.
 *
 * The object: {"file", "format", ..., "model": {"kind", "architecture", "description", ...},
 * "metadata": {key: value; arrays longer than 16 summarized as {"array_of", "count", "head"}},
 * "tensors": [{"name", "type", "shape", "bytes", ...}], "totals": {"tensors", "params", "bytes",
 * "bits_per_weight", "types": {type: {"tensors", "params", "bytes"}}}}. */
#ifndef BS_INSPECT_H
#define BS_INSPECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "formats/gguf.h"
#include "formats/safetensors.h"

/* path: a .gguf file, a .safetensors file, an index .json, or a checkpoint directory.
 * no_mmap reads whole files into memory instead of parsing only their headers. NULL + bs_error
 * on failure. */
json_t *bs_inspect_path(const char *path, bool no_mmap);
json_t *bs_inspect_gguf(const gguf_file *f);
/* config: the parsed config.json next to the checkpoint, or NULL. */
json_t *bs_inspect_safetensors(const st_model *m, const json_t *config);

/* inspect_mmproj.c: model facts of a clip (mmproj) GGUF, and whether the vision layer loads it
 * ("supported", or "unsupported_because" with the loader's message). */
void bs_inspect_describe_mmproj(const gguf_file *f, json_t *model, const char *fmt);
void bs_inspect_check_mmproj(const char *path, json_t *info);

/* The one-line "what is this file" text, e.g. "qwen35 target (8 layers: 6 Gated DeltaNet + 2
 * attention), Q1_0" or "DSpark drafter, block 4, taps [1,4,6], mask 1023, markov rank 32, F32". */
const char *bs_inspect_description(const json_t *info);

void bs_inspect_print(FILE *out, const json_t *info);

#endif
