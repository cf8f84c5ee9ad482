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
#include <stdlib.h>
#include <string.h>

/* The inputs: a string, an array of strings, an array of token ids or of id arrays. */
static int input_ids(srv *s, json_t *in, size_t i, int32_t **ids, size_t *n) {
    json_t *v = json_is_array(in) && !json_is_integer(json_array_get(in, 0)) ? json_array_get(in, i) : in;
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
        json_t *v = json_array();
        for (int k = 0; k < e->E; k++) json_array_append_new(v, json_real(e->out[(size_t)i * e->E + k]));
        json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", v));
    }
    srv_reply_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                                     srv_model_name(s), "usage", "prompt_tokens", (json_int_t)e->total,
                                     "total_tokens", (json_int_t)e->total));
}

void srv_api_embeddings(srv *s, json_t *b, srv_reply *r) {
    if (!s->cfg.embeddings) {
        srv_reply_error(r, 501, "not_supported_error", "embeddings are off: start the server with --embeddings");
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
    e->ids = bs_xcalloc(count, sizeof *e->ids);
    e->n = bs_xcalloc(count, sizeof *e->n);
    for (size_t i = 0; i < count; i++, e->count++) {
        size_t n = 0;
        if (input_ids(s, in, i, &e->ids[i], &n)) {
            srv_emb_free(e);
            srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
            return;
        }
        if (n == 0 || n > (size_t)n_ctx) {
            e->count++;
            srv_emb_free(e);
            srv_reply_error(r, 400, "invalid_request_error", "input %zu: %zu tokens (1..%d)", i, n, n_ctx);
            return;
        }
        e->n[i] = (int)n;
        e->total += (long)n;
    }
    e->out = bs_xcalloc((size_t)e->count * e->E, sizeof *e->out);
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
