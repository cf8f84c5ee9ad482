/* server_embed.c: POST /v1/embeddings (serve --embeddings), llama-server's semantics: each input
 * is evaluated on its own, the last layer's hidden states after the final norm are pooled
 * (--pooling mean, the default, or last) and L2-normalized. The request is a task of the
 * scheduler (server_sched.c), which evaluates its inputs in chunks on a session kept for
 * embeddings, in the same passes through the weights as the slots' prompts and decode steps:
 * queued like a generation (503 when the queue is full), cancelled when its client leaves, ended
 * by the drain; the HTTP threads only tokenize and wait suspended. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The inputs: a string, an array of strings, an array of token ids or of id arrays. */
static json_t *input_at(json_t *in, size_t i) {
    return json_is_array(in) && !json_is_integer(json_array_get(in, 0)) ? json_array_get(in, i) : in;
}

static int input_ids(srv *s, json_t *in, size_t i, int32_t **ids, size_t *n) {
    json_t *v = input_at(in, i);
    if (json_is_string(v)) {
        int32_t *raw;
        if (bs_tokenize(s->tok, json_string_value(v), json_string_length(v), false, &raw, n) < 0) return -1;
        *ids = raw;
        return 0;
    }
    if (!json_is_array(v) || !json_array_size(v)) return bs_error("'input' entries must be strings or token id arrays");
    *n = json_array_size(v);
    *ids = bs_xmalloc(*n * sizeof **ids);
    for (size_t k = 0; k < *n; k++) {
        json_t *e = json_array_get(v, k);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= bs_model_n_vocab(s->model)) {
            free(*ids);
            *ids = NULL;
            return bs_error("'input': token ids must be integers in [0, %d)", bs_model_n_vocab(s->model));
        }
        (*ids)[k] = (int32_t)json_integer_value(e);
    }
    return 0;
}

/* A vector's float32 bytes (little-endian, as the machine's) in base64: OpenAI's
 * encoding_format "base64". */
static json_t *base64_json(const float *v, int n) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;
    const size_t len = (size_t)n * sizeof *v;
    char *out = bs_xmalloc(4 * ((len + 2) / 3) + 1), *w = out;
    for (size_t i = 0; i < len; i += 3) {
        const uint32_t x = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
        *w++ = al[x >> 18 & 63];
        *w++ = al[x >> 12 & 63];
        *w++ = i + 1 < len ? al[x >> 6 & 63] : '=';
        *w++ = i + 2 < len ? al[x & 63] : '=';
    }
    *w = 0;
    json_t *j = json_string(out);
    free(out);
    return j;
}

static json_t *vector_json(const srv_emb *e, const float *v) {
    if (e->base64) return base64_json(v, e->E);
    json_t *a = json_array();
    for (int k = 0; k < e->E; k++) json_array_append_new(a, json_real(v[k]));
    return a;
}

static void emb_reply(srv *s, srv_task *t, srv_reply *r) {
    if (t->finish == SRV_FINISH_SHUTDOWN) {
        srv_reply_error(r, 503, "unavailable_error", "the server shut down before the embeddings were done");
        return;
    }
    const srv_emb *e = t->emb;
    if (t->finish == SRV_FINISH_ERROR || e->cur < e->count) {
        srv_reply_error(r, 500, "server_error", "embeddings failed: %s", t->error);
        return;
    }
    json_t *data = json_array();
    for (int i = 0; i < e->count; i++) {
        if (e->native) {   /* llama-server's /embeddings answer: [{"index", "embedding": [rows]}] */
            json_t *rows = json_array();
            if (!e->none) json_array_append_new(rows, vector_json(e, e->out + (size_t)i * e->E));   /* the pooled row */
            for (int k = 0; e->none && k < e->n[i]; k++)
                json_array_append_new(rows, vector_json(e, e->out + (size_t)(e->off[i] + k) * e->E));   /* one per token */
            json_array_append_new(data, json_pack("{s:i,s:o}", "index", i, "embedding", rows));
            continue;
        }
        json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding",
                                              vector_json(e, e->out + (size_t)i * e->E)));
    }
    if (e->native) { srv_reply_json(r, 200, data); return; }
    srv_reply_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                                     srv_model_name(s), "usage", "prompt_tokens", (json_int_t)e->total,
                                     "total_tokens", (json_int_t)e->total));
}

/* An empty string is the empty prompt: the vocabulary's BOS, or its end-of-text token. */
static void empty_prompt(const srv *s, int32_t **ids, size_t *n) {
    const int32_t bos = bs_token_bos(s->tok), eot = bs_token_lookup(s->tok, "<|endoftext|>");
    const int32_t id = bos >= 0 ? bos : eot >= 0 ? eot : bs_token_eos(s->tok);
    free(*ids);
    *ids = bs_xmalloc(sizeof **ids);
    **ids = id >= 0 ? id : 0;
    *n = 1;
}

static bool parse_format(json_t *b, srv_emb *e, srv_reply *r) {
    json_t *f = json_object_get(b, "encoding_format");
    const char *fs = json_string_value(f);
    if (!f || json_is_null(f) || (fs && !strcmp(fs, "float"))) return true;
    if (fs && !strcmp(fs, "base64")) { e->base64 = true; return true; }
    srv_reply_error(r, 400, "invalid_request_error", "'encoding_format' must be \"float\" or \"base64\"");
    return false;
}

void srv_api_embeddings(srv *s, json_t *b, srv_reply *r, bool oai) {
    if (!s->cfg.embeddings) {
        srv_reply_error(r, 501, "not_supported_error", "embeddings are off: start the server with --embeddings");
        return;
    }
    if (oai && s->cfg.pooling_none) {
        srv_reply_error(r, 400, "invalid_request_error", "Pooling type 'none' is not OAI compatible. Please use a "
                        "different pooling type (or POST /embeddings for a vector per token)");
        return;
    }
    json_t *in = json_object_get(b, "input");
    if (!in) in = json_object_get(b, "content");   /* llama-server's /embedding spelling */
    const bool list = json_is_array(in) && json_array_size(in) && !json_is_integer(json_array_get(in, 0));
    const size_t count = list ? json_array_size(in) : 1;
    if (!in || (json_is_array(in) && !json_array_size(in)) || count > 256) {
        srv_reply_error(r, 400, "invalid_request_error", "'input' must be a string, token ids, or a list of up to 256 of them");
        return;
    }
    const int n_ctx = srv_sched_n_ctx(s->sched);
    srv_emb *e = bs_xcalloc(1, sizeof *e);
    e->E = bs_model_n_embd(s->model);
    e->last = s->cfg.pooling_last;
    e->none = s->cfg.pooling_none;
    e->native = !oai;
    long norm = s->cfg.embd_normalize ? s->cfg.embd_normalize - 1 : 2;   /* (cfg: 0 unset, else norm + 1) */
    if (!srv_get_int(b, "embd_normalize", -1, 64, &norm, r)) { srv_emb_free(e); return; }
    e->norm = (int)norm;
    e->ids = bs_xcalloc(count, sizeof *e->ids);
    e->n = bs_xcalloc(count, sizeof *e->n);
    e->off = bs_xcalloc(count, sizeof *e->off);
    if (!parse_format(b, e, r)) { srv_emb_free(e); return; }
    for (size_t i = 0; i < count; i++, e->count++) {
        size_t n = 0;
        json_t *text = input_at(in, i);   /* bytes that alone prove it too long: not tokenized */
        const size_t least = json_is_string(text) ? srv_min_tokens(s, json_string_length(text)) : 0;
        if (least > (size_t)n_ctx) {
            srv_emb_free(e);
            srv_reply_error(r, 400, "invalid_request_error", "input %zu (at least %zu tokens) is too large to process. "
                            "increase the context size (current context size: %d)", i, least, n_ctx);
            return;
        }
        if (input_ids(s, in, i, &e->ids[i], &n)) {
            srv_emb_free(e);
            srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
            return;
        }
        if (n == 0) empty_prompt(s, &e->ids[i], &n);
        if (n > (size_t)n_ctx) {
            e->count++;
            srv_emb_free(e);
            /* llama-server's words, the context in place of its batch */
            srv_reply_error(r, 400, "invalid_request_error", "input %zu (%zu tokens) is too large to process. increase "
                            "the context size (current context size: %d)", i, n, n_ctx);
            return;
        }
        e->n[i] = (int)n;
        e->off[i] = e->total;
        e->total += (long)n;
    }
    if (e->none && e->total * e->E > SRV_EMB_ROWS_MAX) {   /* the answer would be gigabytes of JSON */
        srv_reply_error(r, 400, "invalid_request_error", "input is too large to process: %ld tokens x %d values per "
                        "token with --pooling none, more than %ld values in one answer", e->total, e->E, SRV_EMB_ROWS_MAX);
        srv_emb_free(e);
        return;
    }
    e->out = bs_xcalloc((size_t)(e->none ? e->total : e->count) * e->E, sizeof *e->out);
    srv_task *t = srv_task_new();
    t->emb = e;
    if (srv_sched_submit(s->sched, t)) {
        srv_reply_error(r, 503, "unavailable_error", "%s", bs_last_error());
        srv_task_unref(t);
        return;
    }
    srv_gen g = {.answer = emb_reply};
    srv_reply_generation(s, t, &g, r);
}
