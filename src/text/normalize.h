/* normalize.h: the Unicode normalization a Hugging Face tokenizer applies to text before its
 * pre-tokenizer (tokenizer.json "normalizer"), done with utf8proc.
 *
 * Which one applies to a vocabulary: the GGUF key `tokenizer.ggml.normalizer` when present
 * ("none", "nfc", "nfd", "nfkc", "nfkd"; `convert hf-to-gguf` writes it from tokenizer.json),
 * else the rule for its `tokenizer.ggml.pre` name (bs_norm_for_pre): "qwen35" and "qwen2" are NFC
 * (the Qwen2, Qwen2.5, Qwen3 and Qwen3.5 tokenizer.json files declare {"type": "NFC"}); every
 * other name is none: llama-bpe/llama3 (Llama 3), gpt2 and default declare no normalizer, and
 * the aliases that share the qwen2 splitter (deepseek-r1-qwen, stablelm2) are not known to
 * declare one, so they keep llama.cpp's behaviour unless the key says otherwise. llama.cpp
 * applies no normalization to any BPE vocabulary, so `none` reproduces its token ids. */
#ifndef BS_NORMALIZE_H
#define BS_NORMALIZE_H

#include <stddef.h>

/* The GGUF metadata key (a string, one of the names below). */
#define BS_NORMALIZER_KEY "tokenizer.ggml.normalizer"

typedef enum { BS_NORM_NONE, BS_NORM_NFC, BS_NORM_NFD, BS_NORM_NFKC, BS_NORM_NFKD } bs_norm_mode;

/* "none", "nfc", "nfd", "nfkc", "nfkd" (any case) -> mode; -1 with bs_error otherwise. */
int bs_norm_from_name(const char *name, bs_norm_mode *mode);
const char *bs_norm_name(bs_norm_mode mode);
/* The normalization the HF tokenizers behind a tokenizer.ggml.pre name declare (see above). */
bs_norm_mode bs_norm_for_pre(const char *pre_name);

/* Normalize s[0..len), which must be valid UTF-8 (NUL bytes allowed). *out is NULL when the text
 * is left as it is without work (mode none, or pure ASCII, which every form leaves alone), else
 * a malloc'd, NUL-terminated normalized copy of *out_len bytes. -1 with bs_error on failure. */
int bs_normalize(bs_norm_mode mode, const char *s, size_t len, char **out, size_t *out_len);

#endif
