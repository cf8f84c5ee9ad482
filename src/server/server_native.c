/* server_native.c: llama-server's native completion (POST /completion, /completions, /infill):
 * its request fields beyond the sampling ones, its prompt forms and its answer shapes.
 *
 * Requests: `prompt` is a string, token ids, ids mixed with strings (one prompt), or a list of
 * those (one prompt each: the answer is an array, one result per prompt); `n_probs`,
 * `post_sampling_probs`, `return_tokens`, `return_progress`, `response_fields`.
 * Answers: content, tokens, stop, id_slot, tokens_predicted / evaluated / cached, truncated,
 * stop_type, has_new_line, generation_settings, prompt, timings, completion_probabilities;
 * stream events carry the content and tokens of that event, a `prompt_progress` event comes
 * before the first token when asked for.
 *
 * Nothing here answers a request (no server_reply.c): the parsers report what is wrong in a
 * srv_fail, the callers reply; server_reply.c builds its answers with the builders below. */
#include "server/server.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t srv_min_tokens(const srv *s, size_t bytes) {
    return s->max_piece > 0 ? bytes / ((size_t)s->max_piece * 4) : 0;
}

/* ---- JSON pieces shared with server_reply.c ---------------------------------------------------- */

json_t *srv_timings_json(const srv_timings *tm) {
    double pn = tm->n_prompt, gn = tm->n_gen;
    return json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:I,s:I}", "cache_n", tm->n_cached, "prompt_n",
                     tm->n_prompt, "prompt_ms", tm->t_prompt_ms, "prompt_per_token_ms",
                     pn > 0 ? tm->t_prompt_ms / pn : 0.0, "prompt_per_second",
                     tm->t_prompt_ms > 0 ? 1e3 * pn / tm->t_prompt_ms : 0.0, "predicted_n", tm->n_gen,
                     "predicted_ms", tm->t_gen_ms, "predicted_per_token_ms", gn > 0 ? tm->t_gen_ms / gn : 0.0,
                     "predicted_per_second", tm->t_gen_ms > 0 ? 1e3 * gn / tm->t_gen_ms : 0.0, "draft_n",
                     (json_int_t)tm->draft_n, "draft_n_accepted", (json_int_t)tm->draft_accepted);
}

/* ---- request fields ------------------------------------------------------------------------- */

static int opt_bool(json_t *b, const char *k, bool *out, srv_fail *f) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return srv_fail_set(f, 400, "invalid_request_error", "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

int srv_native_opts(json_t *b, srv_gen *g, srv_task *t, srv_fail *f) {
    json_t *np = json_object_get(b, "n_probs"), *rf = json_object_get(b, "response_fields");
    if ((!np || json_is_null(np)) && json_is_integer(json_object_get(b, "logprobs")))
        np = json_object_get(b, "logprobs");   /* llama-server's fallback for n_probs */
    if (opt_bool(b, "post_sampling_probs", &g->post_probs, f) || opt_bool(b, "return_tokens", &g->return_tokens, f) ||
        opt_bool(b, "return_progress", &g->progress, f))
        return f->status;
    t->post_probs = g->post_probs;
    if (np && !json_is_null(np)) {
        if (!json_is_integer(np) || json_integer_value(np) < 0 || json_integer_value(np) > SRV_MAX_TOP)
            return srv_fail_set(f, 400, "invalid_request_error", "'n_probs' must be an integer in [0, %d]", SRV_MAX_TOP);
        g->n_probs = (int)json_integer_value(np);
        t->n_probs = g->n_probs > 0 ? g->n_probs : -1;
    }
    if (rf && !json_is_null(rf)) {
        static const char msg[] = "'response_fields' must be an array of at most %d field names (each under %d bytes)";
        if (!json_is_array(rf) || json_array_size(rf) > SRV_MAX_FIELDS)
            return srv_fail_set(f, 400, "invalid_request_error", msg, SRV_MAX_FIELDS, SRV_FIELD_LEN);
        size_t i;
        json_t *e;
        g->fields_set = true;   /* [""] (llama.vim's cache warm-up): an empty answer */
        json_array_foreach(rf, i, e) {
            if (!json_is_string(e) || json_string_length(e) >= SRV_FIELD_LEN)
                return srv_fail_set(f, 400, "invalid_request_error", msg, SRV_MAX_FIELDS, SRV_FIELD_LEN);
            if (json_string_length(e)) snprintf(g->fields[g->n_fields++], SRV_FIELD_LEN, "%s", json_string_value(e));
        }
    }
    return 0;
}

/* ---- prompts -------------------------------------------------------------------------------- */

static bool is_id(json_t *e) { return json_is_integer(e); }

/* llama-server's test for one prompt of ids mixed with strings: ids only, or ids and strings. */
static bool one_prompt(json_t *p) {
    if (json_is_string(p)) return true;
    if (!json_is_array(p) || !json_array_size(p)) return false;
    bool id = false, other = false;
    size_t i;
    json_t *e;
    json_array_foreach(p, i, e) {
        if (is_id(e)) id = true;
        else if (!json_is_string(e)) other = true;
    }
    return id && !other;
}

static void ids_add(srv_prompt *pr, const int32_t *ids, size_t n) {
    if ((size_t)pr->n + n + 1 > (size_t)pr->cap) {   /* doubling: a prompt of many pieces stays linear */
        pr->cap = (int)BS_MAX((size_t)pr->n + n + 1, 2 * (size_t)pr->cap);
        pr->ids = bs_xrealloc(pr->ids, (size_t)pr->cap * sizeof *pr->ids);
    }
    memcpy(pr->ids + pr->n, ids, n * sizeof *ids);
    pr->n += (int)n;
}

/* One prompt (a string, or ids mixed with strings) into pr; BOS first when the vocabulary wants
 * one and the prompt is not ids that start with it. */
static int build_prompt(srv *s, json_t *p, srv_prompt *pr, srv_fail *f) {
    const int n_ctx = srv_sched_n_ctx(s->sched), nv = bs_model_n_vocab(s->model);
    json_t *one = json_is_string(p) ? p : NULL;
    size_t bytes = 0, n_ids = 0, i;
    json_t *e;
    json_array_foreach(p, i, e) {
        bytes += json_string_length(e);
        n_ids += is_id(e);
    }
    if (one) bytes = json_string_length(one);
    if (srv_min_tokens(s, bytes) + n_ids >= (size_t)n_ctx) {   /* known too long before tokenizing */
        f->n_prompt = (long)(srv_min_tokens(s, bytes) + n_ids);
        return srv_fail_set(f, 400, "exceed_context_size_error", "the request exceeds the available context size: "
                            "at least %ld prompt tokens, context %d", f->n_prompt, n_ctx);
    }
    const int32_t bos = bs_token_bos(s->tok);
    if (bs_tokenizer_add_bos(s->tok) && bos >= 0 && (one || !is_id(json_array_get(p, 0)))) ids_add(pr, &bos, 1);
    for (i = 0; i < (one ? 1 : json_array_size(p)); i++) {
        e = one ? one : json_array_get(p, i);
        if (is_id(e)) {
            if (json_integer_value(e) < 0 || json_integer_value(e) >= nv)
                return srv_fail_set(f, 400, "invalid_request_error", "'prompt': token id %lld is not in the vocabulary "
                                    "[0, %d)", (long long)json_integer_value(e), nv);
            int32_t id = (int32_t)json_integer_value(e);
            ids_add(pr, &id, 1);
            continue;
        }
        int32_t *ids;
        size_t n;
        if (bs_tokenize(s->tok, json_string_value(e), json_string_length(e), true, &ids, &n) < 0)
            return srv_fail_set(f, 400, "invalid_request_error", "tokenizing the prompt: %s", bs_last_error());
        ids_add(pr, ids, n);
        free(ids);
    }
    if (pr->n == 0) return srv_fail_set(f, 400, "invalid_request_error", "the prompt is empty");
    if (pr->n >= n_ctx) {
        f->n_prompt = pr->n;
        return srv_fail_set(f, 400, "exceed_context_size_error", "the request exceeds the available context size: "
                            "%d prompt tokens, context %d", pr->n, n_ctx);
    }
    if (one) {
        pr->text = bs_xstrdup(json_string_value(one));
    } else {
        size_t len;
        if (bs_detokenize(s->tok, pr->ids, (size_t)pr->n, true, &pr->text, &len)) pr->text = NULL;
    }
    return 0;
}

void srv_prompts_free(srv_prompt *p, int n) {
    for (int i = 0; p && i < n; i++) {
        free(p[i].ids);
        free(p[i].text);
    }
    free(p);
}

int srv_native_prompts(srv *s, json_t *b, int max, srv_prompt **out, int *n, srv_fail *f) {
    json_t *p = json_object_get(b, "prompt");
    const bool single = one_prompt(p);
    const int count = single ? 1 : json_is_array(p) ? (int)json_array_size(p) : 0;
    *out = NULL;
    *n = 0;
    if (count == 0 || (!single && !json_is_array(p)))
        return srv_fail_set(f, 400, "invalid_request_error", "'prompt' must be a string, token ids, ids mixed with "
                            "strings, or a non-empty list of those");
    if (count > max)
        return max == 1 ? srv_fail_set(f, 400, "invalid_request_error", "'prompt': one prompt here (POST /completion "
                                       "takes a list of several)")
                        : srv_fail_set(f, 400, "invalid_request_error", "'prompt': at most %d prompts in one request", max);
    srv_prompt *pr = bs_xcalloc((size_t)count, sizeof *pr);
    for (int i = 0; i < count; i++) {
        json_t *e = single ? p : json_array_get(p, (size_t)i);
        if (!single && !json_is_string(e) && !one_prompt(e)) {
            srv_fail_set(f, 400, "invalid_request_error", "'prompt' %d must be a string or token ids (mixed with "
                         "strings)", i);
        } else if (!build_prompt(s, e, &pr[i], f)) {
            continue;
        }
        srv_prompts_free(pr, count);
        return f->status;
    }
    *out = pr;
    *n = count;
    return 0;
}

int srv_native_more(srv_task *t, srv_prompt *pr, int np, const srv_gen *g, srv_fail *f) {
    const int n = t->n_choices > 1 ? t->n_choices : 1;   /* completions per prompt (n, n_cmpl) */
    if (np <= 1) return 0;
    if (g->stream) return srv_fail_set(f, 400, "not_supported_error", "several prompts are supported without streaming");
    if (np * n > SRV_MAX_CHOICES)
        return srv_fail_set(f, 400, "invalid_request_error", "%d prompts x %d completions: at most %d in one request", np,
                            n, SRV_MAX_CHOICES);
    /* answer q = prompt i's completion j (q = i * n + j, llama-server's order): each prompt's
     * first has its own prompt and seed, the others take its evaluated prompt with seed + j */
    srv_task *base = t;
    for (int q = 1; q < np * n; q++) {
        const int i = q / n, j = q % n;
        srv_task *c = srv_task_choice(j ? base : t, j);
        if (!j) {
            srv_task_unref(c->leader);   /* its own prompt: it waits for no other */
            c->leader = NULL;
            free(c->prompt);
            c->prompt = pr[i].ids;
            c->n_prompt = pr[i].n;
            pr[i].ids = NULL;
            c->sp.seed = t->sp.seed;
            base = c;
        }
        t->sib[q - 1] = c;
    }
    t->n_choices = np * n;
    return 0;
}

/* ---- answers -------------------------------------------------------------------------------- */

static json_t *bytes_json(const char *p, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; i < len; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

json_t *srv_token_bytes_json(const srv *s, int32_t id) {
    const char *p = "";
    size_t len = 0;
    bs_token_to_piece(s->tok, id, true, &p, &len);
    return bytes_json(p, len);
}

/* {"id", "token", "bytes", "logprob" | "prob"}; post: probabilities instead of logprobs. */
static json_t *prob_entry(const srv *s, int32_t id, float lp, bool post) {
    const char *p = "";
    size_t len = 0;
    bs_token_to_piece(s->tok, id, true, &p, &len);
    json_t *j = json_pack("{s:i,s:o,s:o}", "id", (int)id, "token", srv_text_json(p, len), "bytes", bytes_json(p, len));
    json_object_set_new(j, post ? "prob" : "logprob", json_real(post ? exp((double)lp) : (double)lp));
    return j;
}

static json_t *probs_json(const srv *s, const srv_task *t, const srv_gen *g, int from, int to) {
    json_t *a = json_array();
    for (int i = from; i < to; i++) {
        const srv_tok *k = &t->toks[i];
        json_t *e = prob_entry(s, k->id, k->logprob, g->post_probs), *top = json_array();
        for (int j = 0; j < k->n_top; j++) json_array_append_new(top, prob_entry(s, k->top_id[j], k->top_lp[j], g->post_probs));
        json_object_set_new(e, g->post_probs ? "top_probs" : "top_logprobs", top);
        json_array_append_new(a, e);
    }
    return a;
}

static json_t *ids_json(const srv_task *t, int from, int to) {
    json_t *a = json_array();
    for (int i = from; i < to; i++) json_array_append_new(a, json_integer(t->toks[i].id));
    return a;
}

/* The request's settings as llama-server reports them (generation_settings). */
static json_t *settings_json(const srv *s, const srv_task *t, const srv_gen *g) {
    const bs_sampler_params *p = &t->sp;
    json_t *stop = json_array(), *bias = json_array();
    for (int i = 0; i < t->n_stop; i++) json_array_append_new(stop, json_string(t->stop[i]));
    for (int i = 0; i < t->n_bias; i++)
        json_array_append_new(bias, json_pack("[i,o]", t->bias_id[i], isinf(t->bias[i]) ? json_false()
                                                                                        : json_real(t->bias[i])));
    json_t *j = json_pack("{s:i,s:I}", "n_predict", t->n_predict, "seed", (json_int_t)p->seed);
    srv_sampler_settings(j, p);
    json_object_set_new(j, "n_keep", json_integer(t->n_keep >= 0 ? t->n_keep : s->cfg.gen.n_keep));   /* as it ran */
    json_object_set_new(j, "n_probs", json_integer(g->n_probs));
    json_object_set_new(j, "post_sampling_probs", json_boolean(g->post_probs));
    json_object_set_new(j, "ignore_eos", json_boolean(t->ignore_eos));
    json_object_set_new(j, "n_indent", json_integer(t->n_indent));
    json_object_set_new(j, "t_max_predict_ms", json_integer(t->t_max_predict_ms));
    json_object_set_new(j, "stream", json_boolean(g->stream));
    json_object_set_new(j, "timings_per_token", json_boolean(g->timings_per_token));
    json_object_set_new(j, "speculative.n_max", json_integer(s->cfg.drafter && !t->no_draft ? s->cfg.draft_max : 0));
    json_object_set_new(j, "samplers", srv_sampler_chain_json(t->sp.mirostat ? NULL : t->sp.order));
    json_object_set_new(j, "cache_prompt", json_boolean(!t->no_cache));
    json_object_set_new(j, "stop", stop);
    json_object_set_new(j, "logit_bias", bias);
    json_object_set_new(j, "grammar", json_string(t->grammar ? t->grammar : ""));
    return j;
}

static const char *stop_type(const srv_task *t) {
    if (t->finish == SRV_FINISH_SHUTDOWN) return "shutdown";
    return t->gen_stop == BS_GEN_STOP_STRING ? "word" : t->finish == SRV_FINISH_LENGTH ? "limit" : "eos";
}

/* llama-server's response_fields: only the named fields, nested ones by "a/b" paths (the path
 * is the key of the answer); names that are not there are left out. */
static json_t *pick_fields(json_t *j, const srv_gen *g) {
    if (!g->fields_set) return j;
    json_t *out = json_object();
    for (int i = 0; i < g->n_fields; i++) {
        char path[SRV_FIELD_LEN], *save = NULL;
        snprintf(path, sizeof path, "%s", g->fields[i]);
        json_t *v = j;
        for (char *k = strtok_r(path, "/", &save); k && v; k = strtok_r(NULL, "/", &save)) v = json_object_get(v, k);
        if (v && v != j) json_object_set(out, g->fields[i], v);
    }
    json_decref(j);
    return out;
}

bool srv_task_truncated(const srv_task *t) {
    return t->prompt_cut || t->shifted || t->gen_stop == BS_GEN_CTX;
}

static json_t *final_json(const srv *s, const char *model, srv_task *t, const srv_gen *g, int index, bool stream) {
    const char *text = t->text ? t->text : "";
    json_t *j = json_pack("{s:i,s:o,s:b,s:i,s:i}", "index", index, "content",
                          srv_text_json(stream ? "" : text, stream ? 0 : t->len), "stop", 1, "id_slot", t->slot,
                          "tokens_predicted", t->tm.n_gen);
    json_object_set_new(j, "tokens", ids_json(t, 0, stream || !g->return_tokens ? 0 : t->n_toks));
    json_object_set_new(j, "model", json_string(model));
    json_object_set_new(j, "tokens_evaluated", json_integer(t->tm.n_prompt + t->tm.n_cached));
    json_object_set_new(j, "tokens_cached", json_integer(t->tm.n_cached));
    json_object_set_new(j, "generation_settings", settings_json(s, t, g));
    /* the other prompts of a list: their text as the model reads it (the request's is the first's) */
    char *own = NULL;
    size_t own_len;
    const bool first_prompt = index == 0 || t->leader;   /* another completion of the first prompt */
    if (!first_prompt && bs_detokenize(s->tok, t->prompt, (size_t)t->n_prompt, true, &own, &own_len)) own = NULL;
    const char *pt = first_prompt ? g->prompt_text : own;
    json_object_set_new(j, "prompt", pt ? srv_text_json(pt, strlen(pt)) : json_string(""));
    free(own);
    json_object_set_new(j, "has_new_line", json_boolean(t->len && memchr(text, '\n', t->len)));
    json_object_set_new(j, "truncated", json_boolean(srv_task_truncated(t)));
    json_object_set_new(j, "stop_type", json_string(stop_type(t)));
    const char *word = srv_stop_matched(s, t);
    json_object_set_new(j, "stopping_word", json_string(word ? word : ""));
    json_object_set_new(j, "timings", srv_timings_json(&t->tm));
    if (!stream && g->n_probs > 0) json_object_set_new(j, "completion_probabilities", probs_json(s, t, g, 0, t->n_toks));
    return j;
}

json_t *srv_native_answer(const srv *s, const char *model, srv_task *t, const srv_gen *g) {
    if (t->n_choices <= 1) return pick_fields(final_json(s, model, t, g, 0, false), g);
    json_t *a = json_array();
    for (int i = 0; i < t->n_choices; i++)
        json_array_append_new(a, pick_fields(final_json(s, model, i ? t->sib[i - 1] : t, g, i, false), g));
    return a;
}

json_t *srv_native_chunk(const srv *s, const char *model, srv_task *t, const srv_gen *g, const char *text, size_t len,
                         size_t end, bool final, int *toks_sent) {
    /* the tokens whose text is in what was sent so far (all of them once the text is whole) */
    int n = *toks_sent;
    if (t->done && end >= t->len) n = t->n_toks;
    while (n < t->n_toks_safe && t->toks[n].text_end <= end) n++;
    json_t *j = json_pack("{s:i,s:o,s:o,s:b,s:i,s:i,s:i}", "index", 0, "content", srv_text_json(text, len), "tokens",
                          ids_json(t, *toks_sent, n), "stop", 0, "id_slot", t->slot, "tokens_predicted", n,
                          "tokens_evaluated", t->n_prompt);
    if (g->n_probs > 0 && n > *toks_sent) json_object_set_new(j, "completion_probabilities", probs_json(s, t, g, *toks_sent, n));
    *toks_sent = n;
    if (g->timings_per_token) json_object_set_new(j, "timings", srv_timings_json(&t->tm));
    if (!final) return j;
    /* the last event: the whole final answer's fields, with this event's content and tokens */
    json_t *fin = final_json(s, model, t, g, 0, true);
    json_object_update_existing(fin, j);
    json_object_set(fin, "tokens", json_object_get(j, "tokens"));
    json_object_del(fin, "completion_probabilities");
    if (json_object_get(j, "completion_probabilities"))
        json_object_set(fin, "completion_probabilities", json_object_get(j, "completion_probabilities"));
    json_object_set_new(fin, "stop", json_true());
    json_object_set_new(fin, "tokens_predicted", json_integer(t->tm.n_gen));
    json_object_set_new(fin, "tokens_evaluated", json_integer(t->tm.n_prompt + t->tm.n_cached));
    json_decref(j);
    return pick_fields(fin, g);
}

json_t *srv_prompt_progress(const srv_task *t, int k) {
    return json_pack("{s:I,s:i,s:i,s:I}", "total", (json_int_t)srv_task_positions(t), "cache", t->tm.n_cached,
                     "processed", t->prog_done[k], "time_ms", (json_int_t)t->prog_ms[k]);
}

json_t *srv_native_progress(const srv_task *t, int k) {
    return json_pack("{s:i,s:s,s:[],s:b,s:i,s:o}", "index", 0, "content", "", "tokens", "stop", 0, "id_slot", t->slot,
                     "prompt_progress", srv_prompt_progress(t, k));
}