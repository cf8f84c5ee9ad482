/* tokenizer.h: byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`), as used by
 * Qwen3.5/3.6 and the Bonsai models, matching llama.cpp's tokenization id for id.
 *
 * Pipeline of bs_tokenize: (1) the text must be valid UTF-8; (2) special tokens are cut out:
 * USER_DEFINED tokens always, CONTROL/UNKNOWN tokens only with parse_special, longest token
 * text first (llama.cpp's order), matched on the text as given; (3) each remaining fragment is
 * Unicode-normalized as the vocabulary's HF tokenizer does (normalize.h: NFC for qwen35/qwen2,
 * from `tokenizer.ggml.normalizer` when the GGUF has it), which is where bitspark departs
 * from llama.cpp (no normalization; bs_tokenizer_set_normalize(t, BS_NORM_NONE) gives its
 * ids); (4) the fragment is split into words by the pre-tokenizer named in
 * `tokenizer.ggml.pre` (pretokenize.h); (5) each word's bytes are merged by BPE rank (lowest
 * rank first, leftmost first on ties). No BOS is added; callers that want one check
 * bs_tokenizer_add_bos(). Detokenization gives back the bytes the tokens hold: the normalized
 * text, never the original spelling. */
#ifndef BS_TOKENIZER_H
#define BS_TOKENIZER_H

#include "bitspark.h"
#include "formats/gguf.h"
#include "text/normalize.h"
#include "text/pretokenize.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Token types as stored in `tokenizer.ggml.token_type` (llama.cpp's llama_token_type). */
enum bs_token_type {
    BS_TOKEN_UNDEFINED = 0, BS_TOKEN_NORMAL = 1, BS_TOKEN_UNKNOWN = 2, BS_TOKEN_CONTROL = 3,
    BS_TOKEN_USER_DEFINED = 4, BS_TOKEN_UNUSED = 5, BS_TOKEN_BYTE = 6
};

typedef struct bs_tokenizer bs_tokenizer;

/* Everything a tokenizer is built from; lets tests build one without a file. */
typedef struct bs_vocab_spec {
    size_t n_tokens;
    const char *const *tokens;   /* token texts as in the vocabulary (byte-level encoded) */
    const size_t *token_lens;    /* NULL: NUL-terminated */
    const int32_t *types;        /* NULL: all NORMAL */
    size_t n_merges;
    const char *const *merges;   /* "left right", rank = index */
    const size_t *merge_lens;    /* NULL: NUL-terminated */
    const char *pre;             /* pre-tokenizer name; NULL means "qwen35" */
    const char *normalizer;      /* "none", "nfc", ...; NULL: the pre-tokenizer's rule */
    int32_t bos_id, eos_id, eot_id, eom_id, pad_id;   /* -1: none */
    bool add_bos;
} bs_vocab_spec;

bs_tokenizer *bs_tokenizer_new(const bs_vocab_spec *spec);
/* Reads tokenizer.ggml.{model,pre,normalizer,tokens,token_type,merges,*_token_id,add_bos_token}. */
bs_tokenizer *bs_tokenizer_from_gguf(const gguf_file *f);
void bs_tokenizer_free(bs_tokenizer *t);

int32_t bs_tokenizer_n_vocab(const bs_tokenizer *t);
const char *bs_tokenizer_pre_name(const bs_tokenizer *t);
int32_t bs_token_bos(const bs_tokenizer *t);   /* -1 if none */
int32_t bs_token_eos(const bs_tokenizer *t);
bool bs_tokenizer_add_bos(const bs_tokenizer *t);

/* The Unicode normalization applied to the text between special tokens (normalize.h). It comes
 * from the vocabulary (see bs_tokenizer_normalize_source); set_normalize overrides it, e.g.
 * BS_NORM_NONE for llama.cpp's ids (-1 with bs_error for a value outside the enum). Set it before
 * the tokenizer is shared: it is not synchronized with a concurrent bs_tokenize. */
int bs_tokenizer_set_normalize(bs_tokenizer *t, bs_norm_mode mode);
bs_norm_mode bs_tokenizer_get_normalize(const bs_tokenizer *t);
/* Where the mode came from: "tokenizer.ggml.normalizer", "pre-tokenizer rule" or "override". */
const char *bs_tokenizer_normalize_source(const bs_tokenizer *t);
/* The mode a GGUF's tokenizer metadata selects and where it comes from (as above), without
 * loading the vocabulary: -1 with bs_error if tokenizer.ggml.normalizer or .pre is invalid. */
int bs_tokenizer_gguf_normalize(const gguf_file *f, bs_norm_mode *mode, const char **source);

/* Tokenize text[0..len). On success *ids is a malloc'd array (free()) of *n ids. Invalid UTF-8
 * gives -1 with an error naming the byte offset. */
int bs_tokenize(const bs_tokenizer *t, const char *text, size_t len, bool parse_special,
                int32_t **ids, size_t *n);

/* Raw bytes of one token: NORMAL tokens byte-decoded, USER_DEFINED tokens as written,
 * CONTROL/UNKNOWN tokens as written if `special` else empty, other types empty. The bytes may
 * be a fragment of a UTF-8 sequence. Returns -1 with bs_error if id is out of range. */
int bs_token_to_piece(const bs_tokenizer *t, int32_t id, bool special, const char **piece,
                      size_t *len);
/* Callbacks for bs_sampler_vocab (sampler.h; ud = the tokenizer): a token's text with specials,
 * and tokenization without specials into at most max ids (how many were written, -1 on error). */
const char *bs_tokenizer_piece_cb(void *ud, int32_t id, size_t *len);
int bs_tokenizer_tokenize_cb(void *ud, const char *text, size_t len, int32_t *out, int max);
/* Vocabulary text of a token (NUL-terminated) and its type; NULL / UNDEFINED if out of range. */
const char *bs_token_text(const bs_tokenizer *t, int32_t id);
enum bs_token_type bs_token_type(const bs_tokenizer *t, int32_t id);
/* Id of the token whose vocabulary text is exactly `text`, or -1. */
int32_t bs_token_lookup(const bs_tokenizer *t, const char *text);
/* End of generation: eos/eot/eom ids from metadata plus tokens recognised by their text
 * (<|im_end|>, <|endoftext|>, <|eot_id|>, ... and the FIM pad/repo/file-sep tokens), as
 * llama.cpp does. */
bool bs_token_is_eog(const bs_tokenizer *t, int32_t id);

/* Streaming detokenizer: feed ids one at a time; each call returns only complete, valid UTF-8
 * (a code point split across tokens is held back until it is complete). Bytes that can never
 * form valid UTF-8 come out as U+FFFD. The returned text stays valid until the next call. */
typedef struct bs_detok bs_detok;
bs_detok *bs_detok_new(const bs_tokenizer *t, bool special);
/* Render the token whose vocabulary text is `text` even when special is false (llama.cpp's
 * "preserved tokens"): an output parser that looks for <think>, </think> or <tool_call> needs
 * to see them even if the vocabulary marks them CONTROL. Returns -1 if there is no such token. */
int bs_detok_preserve(bs_detok *d, const char *text);
int bs_detok_push(bs_detok *d, int32_t id, const char **text, size_t *len);
/* Emit whatever is held back (an incomplete sequence becomes U+FFFD) and reset. */
void bs_detok_flush(bs_detok *d, const char **text, size_t *len);
void bs_detok_free(bs_detok *d);

/* Whole-sequence convenience over bs_detok: *text is malloc'd and NUL-terminated. */
int bs_detokenize(const bs_tokenizer *t, const int32_t *ids, size_t n, bool special,
                  char **text, size_t *len);

#endif
