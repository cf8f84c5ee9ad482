/* convert.h: model format converters behind `bitspark convert`. All stream one tensor at a time
 * (memory stays small at any model size) and return 0 or -1 with bs_error, removing partial
 * outputs.
 *
 * Drafters (convert_drafter.c): PrismML `dspark` GGUF <-> DeepSpec Qwen3DSparkModel standalone
 * safetensors directory (model.safetensors + config.json), names from dspark_names.h. F32, F16
 * and BF16 tensors keep their dtype and bytes; quantized GGUF tensors become BF16 (noted).
 *
 * Targets (convert_hf.c): a Hugging Face Qwen3.5 / Qwen3.6 dense text checkpoint -> qwen35
 * GGUF with llama.cpp's converter transforms (qwen35-arch.md §2.7, §4.4, §5, §6). */
#ifndef BS_CONVERT_H
#define BS_CONVERT_H

#include <jansson.h>
#include <stdint.h>

int bs_convert_drafter_to_st(const char *in_gguf, const char *out_dir, int n_threads);
int bs_convert_drafter_to_gguf(const char *in_dir, const char *out_gguf, int n_threads);

/* type: bs_type of the weight matrices, or -1 to keep each tensor's own dtype (F32/F16/BF16).
 * Norms, conv, ssm_a and ssm_dt are always F32. */
int bs_convert_hf_to_gguf(const char *in_dir, const char *out_gguf, int type, int n_threads);

/* hf-to-gguf --mmproj (convert_mmproj.c): the checkpoint's vision tower (model.visual.*) -> a
 * qwen3vl_merger clip GGUF in llama.cpp's layout. type: F32, F16, BF16, Q8_0 for the matrices, or
 * -1 to keep each tensor's dtype; norms, biases and the position table are F32. */
int bs_convert_hf_to_mmproj(const char *in_dir, const char *out_gguf, int type, int n_threads);

/* Internal to hf-to-gguf (convert_hf_vocab.c): the tokenizer keys for an n_vocab-row embedding
 * from dir/tokenizer.json and dir/tokenizer_config.json; cfg is config.json (fallback ids). */
struct gguf_writer;
int bs_hf_write_vocab(struct gguf_writer *w, const char *dir, int64_t n_vocab, const json_t *cfg);

#endif
