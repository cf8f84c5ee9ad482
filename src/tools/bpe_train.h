/* bpe_train.h: train a small byte-level BPE vocabulary (GPT-2 style) from plain text.
 *
 * Output has exactly the shape of a GGUF `gpt2` tokenizer: token strings in GPT-2's
 * byte-to-unicode form (ids 0..255 are the 256 single bytes in byte order, then one token per
 * merge that produced a new string) and merges as "left right" strings in rank order. Training
 * is deterministic: ties between equally frequent pairs go to the lowest (left, right) ids.
 * Synthetic models (synth.c) use it so later stages can tokenize with them. */
#ifndef BS_BPE_TRAIN_H
#define BS_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

typedef struct bs_bpe_vocab {
    uint32_t n_tokens;   /* 256 byte tokens + merge results */
    char **tokens;       /* UTF-8, GPT-2 byte-to-unicode form, NUL-terminated */
    uint32_t n_merges;
    char **merges;       /* "left right", rank order; both sides are tokens */
} bs_bpe_vocab;

/* Train up to max_merges merges on text (pre-split with bs_bpe_split); stops early when no pair
 * occurs twice. Returns 0, or -1 with bs_error. Free with bs_bpe_vocab_free. */
int bs_bpe_train(const char *text, size_t len, uint32_t max_merges, bs_bpe_vocab *out);
void bs_bpe_vocab_free(bs_bpe_vocab *v);

/* Pre-tokenizer used for training: returns the end of the piece that starts at pos (< len).
 * An ASCII approximation of the qwen35 regex (contractions, [^\r\n L N]?L+, single digits,
 * " ?punct+[\r\n]*", "\s*[\r\n]+", "\s+(?!\S)", "\s+"); bytes >= 0x80 count as letters. */
size_t bs_bpe_split(const char *s, size_t len, size_t pos);

/* GPT-2's reversible byte <-> unicode code point mapping (printable bytes map to themselves). */
uint32_t bs_gpt2_byte_to_cp(uint8_t b);
int bs_gpt2_cp_to_byte(uint32_t cp);   /* -1 if cp is not the image of a byte */
/* Appends the UTF-8 form of byte b's code point to out (at most 2 bytes); returns the count. */
int bs_gpt2_byte_utf8(uint8_t b, char *out);

/* The built-in training corpus (corpus_data.c): original plain-English prose, NUL-terminated. */
const char *bs_corpus(size_t *len);

#endif
