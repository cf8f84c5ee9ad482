/* loop_model.h: a tiny qwen35 model that falls into a doom loop, for the loop guard and antidoom
 * tests (static helpers, included by the tests that need it).
 *
 * Built from the fixture tiny-f32.gguf: a few chosen words get embeddings A * e_k (one axis
 * each, so the residual stream is dominated by the current word) and output.weight reads those
 * axes only, making the model a near-bigram machine: cycle word c_i is followed by c_{i+1 mod K}
 * (logit ~ 16 * BEST) with the escape word e_0 second (16 * SECOND); escape word e_m is followed
 * by e_{m+1}, the last one by end-of-generation. Every other token gets the embedding A * e_{K+M}
 * (one more axis) that output.weight maps to c_0, so any other text (a chat template's assistant
 * header) leads into the cycle whatever the fixture's random weights. The layers are left as
 * they are, so the logits still depend (a little) on the whole context and the recurrent/KV state.
 *
 * Greedy from c_0 loops c_1 .. c_{K-1} c_0 c_1 ...; banning the first token of the second copy
 * gives e_0 instead and the text ends after the escape chain. */
#ifndef BS_TEST_LOOP_MODEL_H
#define BS_TEST_LOOP_MODEL_H

#include "formats/gguf.h"
#include "formats/quant.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define LOOP_K 5
#define LOOP_M 8

typedef struct {
    int32_t cycle[LOOP_K], escape[LOOP_M], eos;
} loop_model;

/* " word" pieces (space + >= 3 lowercase letters) that tokenize back to themselves. */
static int loop_pick_words(const bs_tokenizer *t, int32_t *out, int n) {
    int k = 0;
    for (int32_t id = 0; id < bs_tokenizer_n_vocab(t) && k < n; id++) {
        const char *p;
        size_t len;
        if (bs_token_type(t, id) != BS_TOKEN_NORMAL || bs_token_to_piece(t, id, false, &p, &len) || len < 4 ||
            p[0] != ' ')
            continue;
        bool ok = true;
        for (size_t i = 1; i < len; i++) ok = ok && islower((unsigned char)p[i]);
        int32_t *ids;
        size_t nid;
        if (!ok || bs_tokenize(t, p, len, false, &ids, &nid)) continue;
        ok = nid == 1 && ids[0] == id;
        free(ids);
        if (ok) out[k++] = id;
    }
    return k == n ? 0 : -1;
}

static int loop_model_write(const char *src, const char *dst, loop_model *lm) {
    gguf_file *f = gguf_open(src, 0);
    if (!f) return -1;
    bs_tokenizer *t = bs_tokenizer_from_gguf(f);
    int32_t words[LOOP_K + LOOP_M];
    if (!t || loop_pick_words(t, words, LOOP_K + LOOP_M)) { bs_tokenizer_free(t); gguf_close(f); return -1; }
    memcpy(lm->cycle, words, sizeof lm->cycle);
    memcpy(lm->escape, words + LOOP_K, sizeof lm->escape);
    lm->eos = bs_token_eos(t);
    bs_tokenizer_free(t);
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    const int64_t E = te->ne[0], V = te->ne[1];
    const float A = 40.0f, BEST = 10.0f, SECOND = 6.0f;
    gguf_writer *w = gguf_w_open(dst);
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_w_set_value(w, f->kv[i].key.s, &f->kv[i].val);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        gguf_w_add_tensor(w, f->tensors[i].name, f->tensors[i].type, f->tensors[i].n_dims, f->tensors[i].ne);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *x = &f->tensors[i];
        float *buf = bs_xmalloc(x->nbytes);
        memcpy(buf, x->data, x->nbytes);
        if (!strcmp(x->name, "token_embd.weight")) {
            for (int64_t id = 0; id < V; id++) {
                float *row = buf + (size_t)id * E;
                memset(row, 0, (size_t)E * sizeof *row);
                row[LOOP_K + LOOP_M] = A;
            }
            for (int k = 0; k < LOOP_K + LOOP_M; k++) {
                float *row = buf + (size_t)words[k] * E;
                row[LOOP_K + LOOP_M] = 0.0f;
                row[k] = A;
            }
        } else if (!strcmp(x->name, "output.weight")) {
            memset(buf, 0, x->nbytes);
            for (int k = 0; k < LOOP_K; k++) {
                buf[(size_t)lm->cycle[(k + 1) % LOOP_K] * E + k] = BEST;
                buf[(size_t)lm->escape[0] * E + k] = SECOND;
            }
            for (int m = 0; m < LOOP_M; m++)
                buf[(size_t)(m + 1 < LOOP_M ? lm->escape[m + 1] : lm->eos) * E + LOOP_K + m] = BEST;
            buf[(size_t)lm->cycle[0] * E + LOOP_K + LOOP_M] = BEST;
        } else if (!strcmp(x->name, "output_norm.weight")) {
            for (int64_t k = 0; k < E; k++) buf[k] = 1.0f;
        }
        gguf_w_write(w, buf, x->nbytes);
        free(buf);
    }
    gguf_close(f);
    return gguf_w_close(w);
}

#endif
