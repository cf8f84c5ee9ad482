/* api.c: the conveniences of the public API (bitspark.h) over the layers: a model's tokenizer
 * and chat template, prompt tokenization as `run` does it, and a drafter loaded for a target. */
#include "bitspark.h"
#include "dspark/dspark.h"
#include "generate/drafter.h"
#include "formats/gguf.h"
#include "model/qwen35.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

bs_tokenizer *bs_tokenizer_load(const bs_model *m) {
    if (!m) return bs_error("bs_tokenizer_load: no model"), NULL;
    bs_tokenizer *t = bs_tokenizer_from_gguf(m->file);
    if (!t) {
        bs_error_prefix("%s: tokenizer: ", m->file->path);
        return NULL;
    }
    /* every id the tokenizer can give must have an embedding row and a logit (a vocabulary
     * padded past the tokens is fine; the other way round reads outside the matrices) */
    if (bs_tokenizer_n_vocab(t) > bs_model_n_vocab(m)) {
        bs_error("%s: the tokenizer has %d tokens, but the model's matrices only %d rows", m->file->path,
                 (int)bs_tokenizer_n_vocab(t), bs_model_n_vocab(m));
        bs_tokenizer_free(t);
        return NULL;
    }
    return t;
}

int bs_tokenize_prompt(const bs_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n) {
    int32_t *raw;
    size_t nr;
    if (bs_tokenize(t, text, len, true, &raw, &nr) < 0) return bs_error_prefix("prompt: ");
    const int32_t bos = bs_token_bos(t);
    const bool add = bs_tokenizer_add_bos(t) && bos >= 0 && !(nr > 0 && raw[0] == bos);
    *n = nr + add;
    *ids = bs_xmalloc((*n ? *n : 1) * sizeof **ids);
    if (add) (*ids)[0] = bos;
    if (nr) memcpy(*ids + add, raw, nr * sizeof *raw);
    free(raw);
    return 0;
}

char *bs_chat_apply(const bs_model *m, const bs_chat_msg *msgs, size_t n, bool add_generation_prompt,
                    int enable_thinking) {
    if (!m || (n && !msgs)) return bs_error("bs_chat_apply: no model or messages"), NULL;
    bs_chat_template t;
    bs_chat_template_detect(gguf_get_str(m->file, "tokenizer.chat_template"), &t);
    bs_chat_opts o = {.add_generation_prompt = add_generation_prompt, .enable_thinking = enable_thinking};
    char *out = bs_chat_render(&t, msgs, n, &o);
    if (!out) bs_error_prefix("chat template: ");
    return out;
}

bs_drafter *bs_drafter_load(const char *path, const bs_model *target) {
    if (!path || !target) return bs_error("bs_drafter_load: no drafter or target"), NULL;
    return bs_gen_drafter_open(path, target, BS_DRAFT_AUTO, false);
}

int bs_drafter_block_size(const bs_drafter *d) { return d ? d->hp.block_size : 0; }
void bs_drafter_free(bs_drafter *d) { bs_dspark_free(d); }
