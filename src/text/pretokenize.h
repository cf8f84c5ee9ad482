/* pretokenize.h: the pre-tokenizers of byte-level BPE vocabularies. They cut text into words
 * before any merge runs; BPE never merges across a word boundary.
 *
 * The GGUF names the rule set in `tokenizer.ggml.pre`; the rules themselves live in the engine.
 * Each is written as a hand-made scanner over Unicode categories (utf8proc) that reproduces
 * what llama.cpp's own scanners (unicode_regex_split_custom_*) do, since that is what the
 * vocabularies are used with in practice. The regexes, for reference:
 *
 *   qwen35    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
 *             | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2     the same without \p{M} in the two letter classes
 *   llama3    qwen2 with \p{N}{1,3} instead of \p{N} (and whole-word vocab hits skip merging)
 *   gpt2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   default   llama.cpp's fallback (also used when a GGUF names no pre-tokenizer): four splits
 *             in a row, each cutting the pieces of the previous one, matches and the text
 *             between them both becoming pieces: [\p{P}$+<=>^~|]+, then gpt2, then \p{N}+,
 *             then [0-9][0-9][0-9]
 *
 * \s is Unicode White_Space (U+0009..000D, 0020, 0085, 00A0, 1680, 2000..200A, 2028, 2029,
 * 202F, 205F, 3000), as in llama.cpp's tables and Python's `regex`; \p{L}, \p{M}, \p{N} are the
 * general categories L*, M*, N*. */
#ifndef BS_PRETOKENIZE_H
#define BS_PRETOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { BS_PRE_QWEN35, BS_PRE_QWEN2, BS_PRE_LLAMA3, BS_PRE_GPT2, BS_PRE_DEFAULT } bs_pre_type;

/* Map a `tokenizer.ggml.pre` name to a splitter. *ignore_merges is set for vocabularies whose
 * words are looked up whole before merging (llama3). Returns -1 with bs_error if unknown. */
int bs_pre_from_name(const char *name, bs_pre_type *type, bool *ignore_merges);
const char *bs_pre_name(bs_pre_type type);

/* Split code points cps[0..n) into words: writes each word's length in code points to lens
 * (room for n entries is always enough) and returns the number of words. Lengths sum to n. */
size_t bs_pretokenize(bs_pre_type type, const uint32_t *cps, size_t n, size_t *lens);

/* Character classes used by the splitters (exposed for tests). */
enum { BS_CC_ANY = 1, BS_CC_LETTER = 2, BS_CC_MARK = 4, BS_CC_NUMBER = 8, BS_CC_SPACE = 16 };
unsigned bs_char_class(uint32_t cp);

#endif
