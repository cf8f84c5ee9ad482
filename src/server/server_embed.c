/* server_embed.c: POST /v1/embeddings (serve --embeddings), llama-server's semantics: each input
 * is evaluated on its own in a session kept for embeddings, the last layer's hidden states after
 * the final norm are pooled (--pooling mean, the default, or last) and L2-normalized. The session
 * is used by one request at a time (a mutex); it runs beside the slots, on its own threads. */
#include "server/server.h"
#include "cpu/compute.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One embedding of ids[0..n) into out[n_embd]. */
static int embed(srv *s, const int32_t *ids, int n, float *out) {
    const bs_model *m = s->model;
    const int E = m->hp.n_embd, last = m->hp.n_layer - 1;
    if (!s->emb_sess) {
        bs_session_params sp = {.n_ctx = srv_sched_n_ctx(s->sched), .n_threads = s->cfg.n_threads};
        if (!(s->emb_sess = bs_session_new(s->model, &sp)) || bs_session_set_taps(s->emb_sess, &last, 1)) return -1;
    }
    bs_session_reset(s->emb_sess);
    float *h = malloc((size_t)n * E * sizeof *h);
    if (!h) return bs_error("embeddings: out of memory");
    int rc = bs_eval(s->emb_sess, ids, n, BS_LOGITS_NONE, NULL, h);
    if (!rc) {
        memset(out, 0, (size_t)E * sizeof *out);
        const int from = s->cfg.pooling_last ? n - 1 : 0;
        for (int i = from; i < n; i++) {
            float *row = h + (size_t)i * E;
            bs_rmsnorm(row, row, m->output_norm, E, m->hp.eps);   /* the final norm, as the LM head sees it */
            for (int k = 0; k < E; k++) out[k] += row[k];
        }
        double norm = 0;
        for (int k = 0; k < E; k++) norm += (double)out[k] * out[k];
        const float scale = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
        for (int k = 0; k < E; k++) out[k] *= scale;
    }
    free(h);
    return rc;
}

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
    const int E = bs_model_n_embd(s->model), n_ctx = srv_sched_n_ctx(s->sched);
    float *vec = bs_xmalloc((size_t)E * sizeof *vec);
    json_t *data = json_array();
    long total = 0;
    int status = 0;
    pthread_mutex_lock(&s->emb_mu);
    for (size_t i = 0; i < count && !status; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (input_ids(s, in, i, &ids, &n)) status = 400;
        else if (n == 0 || n > (size_t)n_ctx) status = 400, bs_error("input %zu: %zu tokens (1..%d)", i, n, n_ctx);
        else if (embed(s, ids, (int)n, vec)) status = 500;
        if (!status) {
            json_t *e = json_array();
            for (int k = 0; k < E; k++) json_array_append_new(e, json_real(vec[k]));
            json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", (int)i, "embedding", e));
            total += (long)n;
        }
        free(ids);
    }
    pthread_mutex_unlock(&s->emb_mu);
    free(vec);
    if (status) {
        json_decref(data);
        srv_reply_error(r, status, status == 400 ? "invalid_request_error" : "server_error", "%s", bs_last_error());
        return;
    }
    srv_reply_json(r, 200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                                     srv_model_name(s), "usage",
                                     "prompt_tokens", (json_int_t)total, "total_tokens", (json_int_t)total));
}
