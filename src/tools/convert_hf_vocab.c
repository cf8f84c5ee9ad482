/* convert_hf_vocab.c: the tokenizer part of hf-to-gguf (qwen35-arch.md §6): tokenizer.json's
 * BPE vocabulary, merges and added tokens, tokenizer_config.json's special tokens and chat
 * template, written as llama.cpp's converter writes them (gpt2 model, qwen35 pre-tokenizer,
 * [PAD{i}] UNUSED fill up to the embedding's row count, added special tokens CONTROL), plus
 * tokenizer.ggml.normalizer (text/normalize.h) from tokenizer.json's normalizer. */
#include "tools/convert.h"
#include "formats/gguf.h"
#include "io/hf_config.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vocab {
    int64_t n;
    char **tok;
    int32_t *type;
} vocab;

static void vocab_free(vocab *v) {
    for (int64_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->type);
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = bs_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Names like <|im_start|> are special whatever the flag says (llama.cpp's
 * does_token_look_special). */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>';
}

static int set_token(vocab *v, int64_t id, const char *text, int32_t type) {
    if (id < 0 || id >= v->n)
        return bs_error("token '%s' has id %" PRId64 ", outside the %" PRId64 "-row embedding", text, id, v->n);
    free(v->tok[id]);
    v->tok[id] = bs_xstrdup(text);
    v->type[id] = type;
    return 0;
}

static int read_vocab(const json_t *tj, vocab *v) {
    const json_t *model = json_object_get(tj, "model"), *vmap = json_object_get(model, "vocab");
    const char *mt = hf_str(model, "type", "BPE");
    if (!mt || strcmp(mt, "BPE")) return bs_error("tokenizer.json: model type '%s' is not BPE", mt ? mt : "?");
    if (!json_is_object(vmap)) return bs_error("tokenizer.json: model.vocab is not an object");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vmap, key, val) {
        if (!json_is_integer(val)) return bs_error("tokenizer.json: vocab entry '%s' is not an integer", key);
        if (set_token(v, json_integer_value(val), key, BS_TOKEN_NORMAL)) return -1;
    }
    const json_t *added = json_object_get(tj, "added_tokens");
    size_t i;
    json_array_foreach(added, i, val) {
        const json_t *id = json_object_get(val, "id");
        const char *content = hf_str(val, "content", NULL);
        bool special = json_is_true(json_object_get(val, "special"));
        if (!json_is_integer(id) || !content) return bs_error("tokenizer.json: added_tokens[%zu] lacks id/content", i);
        int32_t type = special || looks_special(content) ? BS_TOKEN_CONTROL : BS_TOKEN_USER_DEFINED;
        if (set_token(v, json_integer_value(id), content, type)) return -1;
    }
    for (int64_t k = 0; k < v->n; k++) {
        if (v->tok[k]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%" PRId64 "]", k);
        v->tok[k] = bs_xstrdup(pad);
        v->type[k] = BS_TOKEN_UNUSED;
    }
    return 0;
}

/* Merges as "left right": either strings already, or [left, right] pairs (newer files). */
static int write_merges(gguf_writer *w, const json_t *tj) {
    const json_t *m = json_object_get(json_object_get(tj, "model"), "merges");
    if (!json_is_array(m)) return bs_error("tokenizer.json: model.merges is not an array");
    size_t n = json_array_size(m), i;
    char **s = bs_xcalloc(n + 1, sizeof *s);
    int rc = 0;
    json_t *e;
    json_array_foreach(m, i, e) {
        if (json_is_string(e)) {
            s[i] = bs_xstrdup(json_string_value(e));
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            const char *a = json_string_value(json_array_get(e, 0)), *b = json_string_value(json_array_get(e, 1));
            s[i] = bs_xmalloc(strlen(a) + strlen(b) + 2);
            sprintf(s[i], "%s %s", a, b);
        } else {
            rc = bs_error("tokenizer.json: merges[%zu] is neither \"a b\" nor [a, b]", i);
            break;
        }
    }
    if (!rc) gguf_w_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)s, n);
    for (size_t k = 0; k < n; k++) free(s[k]);
    free(s);
    return rc;
}

/* tokenizer.json's "normalizer" as a tokenizer.ggml.normalizer value: null (or none) -> "none";
 * NFC, NFD, NFKC, NFKD, alone or as the one member of a Sequence -> that form. Anything else
 * (Lowercase, Replace, several steps...) bitspark cannot apply: "none" with a note, which is
 * what llama.cpp does with every normalizer. */
static const char *normalizer_name(const json_t *tj) {
    const json_t *n = json_object_get(tj, "normalizer");
    if (!n || json_is_null(n)) return "none";
    const char *type = hf_str(n, "type", "?");
    const json_t *seq = json_object_get(n, "normalizers");
    if (type && !strcmp(type, "Sequence") && json_array_size(seq) == 1) {
        n = json_array_get(seq, 0);
        type = hf_str(n, "type", "?");
    }
    bs_norm_mode m;
    if (type && (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) &&
        bs_norm_from_name(type, &m) == 0)
        return bs_norm_name(m);
    fprintf(stderr, "note: tokenizer.json normalizer '%s' is not supported; recorded %s = none\n",
            type ? type : "?", BS_NORMALIZER_KEY);
    return "none";
}

static int64_t find_token(const vocab *v, const char *text) {
    for (int64_t i = 0; i < v->n; i++)
        if (!strcmp(v->tok[i], text)) return i;
    return -1;
}

/* A special token id: tokenizer_config's NAME_token (string or {"content": ...}), else
 * config.json's NAME_token_id. */
static int special_id(const vocab *v, const json_t *tc, const json_t *cfg, const char *name, int64_t *out) {
    char key[64];
    snprintf(key, sizeof key, "%s_token", name);
    const json_t *t = json_object_get(tc, key);
    if (json_is_object(t)) t = json_object_get(t, "content");
    if (json_is_string(t)) {
        *out = find_token(v, json_string_value(t));
        if (*out < 0) return bs_error("tokenizer_config.json: %s '%s' is not in the vocabulary", key, json_string_value(t));
        return 0;
    }
    snprintf(key, sizeof key, "%s_token_id", name);
    int64_t id = -1;
    if (hf_int(cfg, key, -1, &id)) return -1;
    if (id < 0) {
        char tk[80];
        snprintf(tk, sizeof tk, "text_config.%s", key);
        if (hf_int(cfg, tk, -1, &id)) return -1;
    }
    if (id >= v->n) return bs_error("config.json: %s = %" PRId64 " is outside the vocabulary", key, id);
    *out = id;
    return 0;
}

static int write_template(gguf_writer *w, const json_t *tc, const char *dir) {
    const json_t *t = json_object_get(tc, "chat_template");
    if (json_is_string(t)) {
        gguf_w_set_str(w, "tokenizer.chat_template", json_string_value(t));
        return 0;
    }
    if (json_is_array(t)) {   /* [{"name": "default", "template": ...}, ...] */
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) {
            const char *name = hf_str(e, "name", NULL), *tmpl = hf_str(e, "template", NULL);
            if (name && tmpl && !strcmp(name, "default")) {
                gguf_w_set_str(w, "tokenizer.chat_template", tmpl);
                return 0;
            }
        }
    }
    char *p = join(dir, "chat_template.jinja");
    size_t len;
    bs_clear_error();
    char *s = bs_read_file(p, &len);
    free(p);
    if (s) gguf_w_set_str(w, "tokenizer.chat_template", s);
    else fprintf(stderr, "note: no chat template (tokenizer_config.json chat_template, chat_template.jinja)\n");
    free(s);
    return 0;
}

int bs_hf_write_vocab(gguf_writer *w, const char *dir, int64_t n_vocab, const json_t *cfg) {
    char *tp = join(dir, "tokenizer.json"), *cp = join(dir, "tokenizer_config.json");
    json_t *tj = bs_json_load_file(tp), *tc = tj ? bs_json_load_file(cp) : NULL;
    free(tp);
    free(cp);
    if (!tc) { json_decref(tj); return -1; }
    vocab v = {n_vocab, bs_xcalloc((size_t)n_vocab, sizeof(char *)), bs_xcalloc((size_t)n_vocab, sizeof(int32_t))};
    int64_t eos = -1, pad = -1, bos = -1;
    bool add_bos = false;
    int rc = read_vocab(tj, &v) || special_id(&v, tc, cfg, "eos", &eos) || special_id(&v, tc, cfg, "pad", &pad) ||
             special_id(&v, tc, cfg, "bos", &bos) || hf_bool(tc, "add_bos_token", false, &add_bos) ? -1 : 0;
    if (!rc) {
        gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_w_set_str(w, "tokenizer.ggml.pre", "qwen35");
        gguf_w_set_str(w, BS_NORMALIZER_KEY, normalizer_name(tj));
        gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
        gguf_w_set_arr_i32(w, "tokenizer.ggml.token_type", v.type, (uint64_t)v.n);
        rc = write_merges(w, tj);
    }
    if (!rc) {
        if (bos >= 0) gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (eos >= 0) gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (pad >= 0) gguf_w_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
        gguf_w_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
        rc = write_template(w, tc, dir);
    }
    if (rc) bs_error_prefix("tokenizer: ");
    vocab_free(&v);
    json_decref(tj);
    json_decref(tc);
    return rc;
}
