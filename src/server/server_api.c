/* server_api.c: the endpoints of `bitspark serve` (server.h): routing, and OpenAI / llama-server
 * request bodies checked field by field into a srv_task. Every bad field gets a 400 naming it;
 * unknown fields are ignored (clients send many). */
#include "server/server.h"
#include "server/server_vision.h"
#include "server/server_dialect.h"
#include "sample/grammar.h"
#include "io/util.h"
#include "io/utf8.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern const char bs_webui_html[];
extern const size_t bs_webui_html_len;
extern const char bs_webui_html_csp[];   /* (tools/embed.cmake: the page's inline script and style by hash) */

/* ---- replies -------------------------------------------------------------------------------- */

static void bad_request(srv_reply *r, const char *fmt, const char *arg) {
    srv_reply_error(r, 400, "invalid_request_error", fmt, arg);
}

/* ---- shared generation fields --------------------------------------------------------------- */

/* One stop string: no NUL inside (a C string would end there and stop at its first part), at
 * most SRV_MAX_STOP_LEN bytes; an empty one is no stop string. */
static bool add_stop(json_t *e, srv_task *t, srv_reply *r) {
    const size_t n = json_string_length(e);
    if (strlen(json_string_value(e)) != n) { bad_request(r, "'%s' strings must not contain U+0000", "stop"); return false; }
    if (n > SRV_MAX_STOP_LEN) {
        srv_reply_error(r, 400, "invalid_request_error", "'stop' strings must be at most %d bytes (one is %zu)",
                        SRV_MAX_STOP_LEN, n);
        return false;
    }
    size_t all = n;
    for (int k = 0; k < t->n_stop; k++) all += strlen(t->stop[k]);
    if (all > SRV_MAX_STOP_BYTES) {
        srv_reply_error(r, 400, "invalid_request_error", "'stop' strings must be at most %d bytes together",
                        SRV_MAX_STOP_BYTES);
        return false;
    }
    if (n) t->stop[t->n_stop++] = bs_xstrdup(json_string_value(e));
    return true;
}

static bool parse_stop(json_t *b, srv_task *t, srv_reply *r) {
    json_t *v = json_object_get(b, "stop");
    if (!v || json_is_null(v)) return true;
    if (json_is_string(v)) return add_stop(v, t, r);
    if (!json_is_array(v) || json_array_size(v) > SRV_MAX_STOP) {
        srv_reply_error(r, 400, "invalid_request_error", "'stop' must be a string or an array of at most %d strings",
                        SRV_MAX_STOP);
        return false;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) { bad_request(r, "'%s' must hold strings", "stop"); return false; }
        if (!add_stop(e, t, r)) return false;
    }
    return true;
}

/* dry_sequence_breakers: a non-empty array of at most BS_GEN_MAX_BREAKERS strings (the sampler
 * finds the tokens of each over the vocabulary, as llama.cpp does; empty ones are ignored). */
static bool parse_breakers(json_t *b, srv_task *t, srv_reply *r) {
    json_t *v = json_object_get(b, "dry_sequence_breakers");
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v) || !json_array_size(v) || json_array_size(v) > BS_GEN_MAX_BREAKERS) {   /* [] too, as llama-server */
        srv_reply_error(r, 400, "invalid_request_error", "'dry_sequence_breakers' must be a non-empty array of at most %d strings",
                        BS_GEN_MAX_BREAKERS);
        return false;
    }
    t->n_breakers = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || strlen(json_string_value(e)) != json_string_length(e) || json_string_length(e) > 256) {
            bad_request(r, "'%s' must hold strings of at most 256 bytes without U+0000", "dry_sequence_breakers");
            return false;
        }
        t->breakers[t->n_breakers++] = bs_xstrdup(json_string_value(e));
    }
    return true;
}

/* A srv_fail (server_native.c and the files like it) as the reply. */
static void fail_reply(srv *s, const srv_fail *f, srv_reply *r) {
    if (f->status == 400 && !strcmp(f->type, "exceed_context_size_error")) {
        json_t *e = srv_error_json(400, f->type, f->msg);
        json_object_set_new(json_object_get(e, "error"), "n_prompt_tokens", json_integer(f->n_prompt));
        json_object_set_new(json_object_get(e, "error"), "n_ctx", json_integer(srv_sched_n_ctx(s->sched)));
        srv_reply_json(r, 400, e);
        return;
    }
    srv_reply_error(r, f->status, f->type, "%s", f->msg);
}

static bool parse_bias(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    srv_fail f;
    if (!srv_parse_bias(s->tok, b, t, s->tok ? bs_model_n_vocab(s->model) : 0, &f)) return true;
    fail_reply(s, &f, r);
    return false;
}

/* "loop_guard": "off" | "stop" | "rewind", or an object {"mode", "min_repeats", "min_chars",
 * "max_period", "max_rewinds"} (each optional, ranges as the --loop-* options); what is not
 * given comes from the server's --loop-guard settings. */
static bool parse_loop_guard(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    static const char msg[] = "'%s' must be \"off\", \"stop\", \"rewind\" or an object with \"mode\", "
                              "\"min_repeats\", \"min_chars\", \"max_period\", \"max_rewinds\"";
    bs_loop_guard_params *p = &t->loop;
    *p = s->cfg.loop;
    json_t *v = json_object_get(b, "loop_guard"), *mode = v;
    if (!v || json_is_null(v)) return true;
    if (json_is_object(v)) {
        static const char *known[] = {"mode", "min_repeats", "min_chars", "max_period", "max_rewinds"};
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            size_t i = 0;
            while (i < BS_ARRAY_LEN(known) && strcmp(k, known[i])) i++;
            if (i == BS_ARRAY_LEN(known)) { bad_request(r, msg, "loop_guard"); return false; }
        }
        long rep = p->det.min_repeats, chars = p->det.min_chars, per = p->det.max_period, rew = p->max_rewinds;
        if (!srv_get_int(v, "min_repeats", 2, 1000000, &rep, r) || !srv_get_int(v, "min_chars", 1, 100000000, &chars, r) ||
            !srv_get_int(v, "max_period", 1, 1000000, &per, r) || !srv_get_int(v, "max_rewinds", 0, 1000000, &rew, r))
            return false;
        p->det = (bs_loop_params){.min_repeats = (int)rep, .min_chars = (int)chars, .max_period = (int)per};
        p->max_rewinds = (int)rew;
        mode = json_object_get(v, "mode");
        if (!mode || json_is_null(mode)) return true;
    }
    int m = json_is_string(mode) ? bs_loop_guard_mode_parse(json_string_value(mode)) : -1;
    if (m < 0) { bad_request(r, msg, "loop_guard"); return false; }
    p->mode = m;
    return true;
}

/* best_of > 1 would change what is answered and is not implemented: a clear 400, not silence. */
static bool refuse_unsupported(json_t *b, srv_reply *r) {
    json_t *bo = json_object_get(b, "best_of");
    if (!bo || json_is_null(bo) || (json_is_integer(bo) && json_integer_value(bo) == 1)) return true;
    srv_reply_error(r, 400, "not_supported_error", "best_of other than 1 is not supported");
    return false;
}

/* What constrains the output, as GBNF: llama-server's "grammar" and "json_schema", OpenAI's
 * response_format (json_object, json_schema) and tool_choice ("required" or a named function;
 * tools: the offered tools as JSON text). At most one; checked here so that a bad grammar or
 * schema is the client's 400. */
static bool parse_constraints(json_t *b, srv_task *t, const char *tools, srv_reply *r) {
    json_t *g = json_object_get(b, "grammar"), *js = json_object_get(b, "json_schema");
    json_t *rf = json_object_get(b, "response_format"), *tc = json_object_get(b, "tool_choice");
    json_t *rt = json_object_get(rf, "type");
    const char *rts = json_string_value(rt);
    int given = 0;
    char *gbnf = NULL;
    if (g && !json_is_null(g) && !(json_is_string(g) && !json_string_length(g))) {
        if (!json_is_string(g)) { bad_request(r, "'%s' must be a string (GBNF)", "grammar"); return false; }
        if (strlen(json_string_value(g)) != json_string_length(g)) {
            bad_request(r, "'%s' holds a NUL character", "grammar");
            return false;
        }
        gbnf = bs_xstrdup(json_string_value(g));
        given++;
    }
    if (js && !json_is_null(js)) {
        char *text = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY);
        free(gbnf);
        gbnf = bs_grammar_from_json_schema(text);
        free(text);
        given++;
    }
    if (rf && !json_is_null(rf) && !(rts && !strcmp(rts, "text"))) {
        /* json_schema.schema (OpenAI), or beside the type (llama-server's README shows both) */
        json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!schema) schema = json_object_get(rf, "schema");
        if (!rts || (strcmp(rts, "json_object") && strcmp(rts, "json_schema")) || (!strcmp(rts, "json_schema") && !schema)) {
            free(gbnf);
            bad_request(r, "'%s' must be text, json_object or json_schema with a schema", "response_format");
            return false;
        }
        char *text = schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        free(gbnf);
        gbnf = bs_grammar_from_json_schema(text);
        free(text);
        given++;
    }
    const char *tcs = json_string_value(tc);
    if (tc && !json_is_null(tc) && !(tcs && (!strcmp(tcs, "auto") || !strcmp(tcs, "none")))) {
        const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!(tcs && !strcmp(tcs, "required")) && !name) {
            free(gbnf);
            bad_request(r, "'%s' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
            return false;
        }
        free(gbnf);
        gbnf = bs_grammar_for_tools(tools, name);
        given++;
    }
    if (given > 1) {
        free(gbnf);
        bad_request(r, "give at most one of grammar, json_schema, response_format and tool_choice%s", "");
        return false;
    }
    if (!given) return true;
    bs_grammar *check = gbnf ? bs_grammar_parse(gbnf) : NULL;
    if (!check) {
        free(gbnf);
        srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
        return false;
    }
    bs_grammar_free(check);
    t->grammar = gbnf;
    return true;
}

/* Sampling and length fields common to both generation endpoints. */
static bool parse_sampling(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    const bs_engine_opts *def = &s->cfg.gen;   /* serve's --temp ... --logit-bias */
    t->sp = def->sp;
    t->ignore_eos = def->ignore_eos;
    for (int k = 0; k < def->n_bias && t->n_bias < SRV_MAX_BIAS; k++) {   /* the request's come after */
        t->bias_id[t->n_bias] = def->bias_id[k];
        t->bias[t->n_bias++] = def->bias[k];
    }
    if (!refuse_unsupported(b, r)) return false;
    bs_sampler_params *p = &t->sp;
    /* --n-predict is also the default of requests without a length, as llama-server */
    long seed = -1, top_k = p->top_k, last_n = p->penalty_last_n, n = 1, n_keep = -1;
    long n_predict = s->cfg.n_predict > 0 ? s->cfg.n_predict : -1;
    long dry_len = p->dry_allowed_length, dry_last = p->dry_penalty_last_n, min_keep = p->min_keep;
    if (!srv_get_float(b, "temperature", -1e30, 100, &p->temp, r) || !srv_get_float(b, "top_p", 0, 1, &p->top_p, r) ||
        !srv_get_float(b, "min_p", 0, 1, &p->min_p, r) || !srv_get_int(b, "top_k", -1, 1 << 30, &top_k, r) ||
        !srv_get_float(b, "presence_penalty", -2, 2, &p->presence_penalty, r) ||
        !srv_get_float(b, "frequency_penalty", -2, 2, &p->frequency_penalty, r) ||
        !srv_get_float(b, "repeat_penalty", 1e-3, 100, &p->repeat_penalty, r) ||
        !srv_get_int(b, "repeat_last_n", -1, 1 << 30, &last_n, r) ||
        !srv_get_float(b, "dry_multiplier", 0, 100, &p->dry_multiplier, r) ||
        !srv_get_float(b, "dry_base", 0, 100, &p->dry_base, r) ||
        !srv_get_int(b, "dry_allowed_length", 0, 1 << 30, &dry_len, r) ||
        !srv_get_int(b, "dry_penalty_last_n", -1, 1 << 30, &dry_last, r) || !srv_get_int(b, "min_keep", 0, 1 << 20, &min_keep, r) ||
        !srv_get_int(b, "seed", -(1L << 62), 1L << 62, &seed, r) || !srv_get_int(b, "n", 1, 1 << 30, &n, r) ||
        !srv_get_int(b, "n_cmpl", 1, 1 << 30, &n, r) ||   /* llama-server's name of n */
        !srv_get_int(b, "n_predict", -1, 1 << 30, &n_predict, r) || !srv_get_int(b, "n_keep", -1, 1 << 30, &n_keep, r) ||
        !srv_get_int(b, "max_tokens", -1, 1 << 30, &n_predict, r) ||
        !srv_get_int(b, "max_completion_tokens", -1, 1 << 30, &n_predict, r) ||
        !srv_get_bool(b, "ignore_eos", &t->ignore_eos, r) || !parse_stop(b, t, r) || !parse_breakers(b, t, r) ||
        !parse_bias(s, b, t, r) || !parse_loop_guard(s, b, t, r) || !srv_slots_parse(s, b, t, r))
        return false;
    if (n > SRV_MAX_CHOICES) { bad_request(r, "'%s' is at most 16", "n"); return false; }
    t->n_choices = (int)n;
    bool cache = true;
    long draft = -1, indent = 0, t_max = 0;
    if (!srv_get_bool(b, "cache_prompt", &cache, r) || !srv_get_int(b, "draft_max", -1, 64, &draft, r) ||
        !srv_get_int(b, "speculative.n_max", -1, 1 << 20, &draft, r) ||   /* llama-server's name: 0 drafts none */
        !srv_get_int(b, "n_indent", 0, 1 << 20, &indent, r) || !srv_get_int(b, "t_max_predict_ms", 0, 1L << 30, &t_max, r))
        return false;
    t->n_indent = (int)indent;
    t->t_max_predict_ms = (int)t_max;
    t->no_cache = !cache;
    t->no_draft = draft == 0;
    p->top_k = (int32_t)top_k;
    p->penalty_last_n = (int32_t)last_n;
    p->dry_allowed_length = (int32_t)dry_len;
    p->dry_penalty_last_n = (int32_t)dry_last;
    p->min_keep = (int32_t)min_keep;
    srv_fail f = {0};
    if (srv_sampler_fields(b, s->cfg.samplers, s->cfg.samplers_letters, p, &f)) {   /* after every field of p is read: it may turn them off */
        srv_reply_error(r, f.status, f.type, "%s", f.msg);
        return false;
    }
    p->seed = seed >= 0         ? (uint64_t)seed
              : def->seed_set ? def->sp.seed
                              : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)t;
    t->n_predict = (int)n_predict;
    t->n_keep = (int)n_keep;
    return true;
}

static void exceed_context(srv_reply *r, long n_prompt, int n_ctx, bool at_least) {
    json_t *e = srv_error_json(400, "exceed_context_size_error", "");
    char msg[256];
    snprintf(msg, sizeof msg, "the request exceeds the available context size: %s%ld prompt tokens, context %d",
             at_least ? "at least " : "", n_prompt, n_ctx);
    json_t *o = json_object_get(e, "error");
    json_object_set_new(o, "message", json_string(msg));
    json_object_set_new(o, "n_prompt_tokens", json_integer(n_prompt));
    json_object_set_new(o, "n_ctx", json_integer(n_ctx));
    srv_reply_json(r, 400, e);
}

/* Whether a span holds text that would become control tokens if parsed with specials. */
static bool span_has_special(srv *s, const char *p, size_t n) {
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    bool differ = bs_tokenize(s->tok, p, n, true, &a, &na) < 0 || bs_tokenize(s->tok, p, n, false, &b, &nb) < 0 ||
                  na != nb || memcmp(a, b, na * sizeof *a) != 0;
    free(a);
    free(b);
    return differ;
}

int srv_tokenize_prompt(srv *s, const char *text, size_t len, const bs_chat_span *sp, size_t n_sp,
                        int32_t **ids, size_t *n) {
    bool split = false;
    for (size_t i = 0; i < n_sp && !split && !s->cfg.special_in_messages; i++)
        split = span_has_special(s, text + sp[i].begin, sp[i].end - sp[i].begin);
    if (!split) return bs_tokenize(s->tok, text, len, true, ids, n);
    int32_t *all = NULL;
    size_t n_all = 0, at = 0;
    for (size_t i = 0; i <= n_sp; i++) {
        /* structure before span i (or after the last), then span i itself */
        size_t struct_end = i < n_sp ? sp[i].begin : len;
        for (int part = 0; part < 2; part++) {
            size_t b = part == 0 ? at : struct_end, e = part == 0 ? struct_end : (i < n_sp ? sp[i].end : len);
            if (e <= b) continue;
            int32_t *p;
            size_t np;
            if (bs_tokenize(s->tok, text + b, e - b, part == 0, &p, &np) < 0) { free(all); return -1; }
            all = bs_xrealloc(all, (n_all + np + 1) * sizeof *all);
            memcpy(all + n_all, p, np * sizeof *p);
            n_all += np;
            free(p);
        }
        if (i < n_sp) at = sp[i].end;
    }
    *ids = all ? all : bs_xmalloc(sizeof *all);
    *n = n_all;
    return 0;
}

/* A lower bound of the tokens of `bytes` bytes of text: no token is longer than s->max_piece
 * bytes, and Unicode normalization (NFC) composes at most a few bytes into one character, so
 * allow it a factor of 4. 0 when unknown. */
static size_t min_tokens(const srv *s, size_t bytes) { return srv_min_tokens(s, bytes); }

/* Tokenize (spans: see srv_tokenize_prompt; NULL for a raw completion prompt, whose specials are
 * parsed), BOS if the vocab wants one; then check it fits. A prompt whose bytes alone prove it
 * longer than the context (min_tokens) is refused before any tokenizing: an 8 MB body costs
 * no tokenizer memory. */
/* srv_tokenize_prompt of a prompt holding v's images: its pieces, an image marker between two. */
static int tokenize_images(srv *s, const srv_vision *v, const char *text, size_t len, const bs_chat_span *sp,
                           size_t n_sp, int32_t **ids, size_t *n) {
    if (!v || !v->n) return srv_tokenize_prompt(s, text, len, sp, n_sp, ids, n);
    srv_piece *pc;
    size_t np, cap = 0;
    int rc = srv_vision_split(v, text, len, sp, n_sp, &pc, &np);
    *ids = NULL;
    *n = 0;
    for (size_t k = 0; k < np && !rc; k++) {
        int32_t *p;
        size_t m;
        if ((rc = srv_tokenize_prompt(s, text + pc[k].b, pc[k].e - pc[k].b, pc[k].sp, pc[k].n_sp, &p, &m))) break;
        if (*n + m + 1 > cap) *ids = bs_xrealloc(*ids, (cap = 2 * (*n + m + 1)) * sizeof **ids);
        memcpy(*ids + *n, p, m * sizeof *p);
        *n += m;
        free(p);
        if (k + 1 < np) (*ids)[(*n)++] = BS_TOKEN_IMAGE;
    }
    srv_pieces_free(pc, np);
    if (rc) free(*ids);
    return rc;
}

static bool set_prompt(srv *s, srv_task *t, const char *text, size_t len, const bs_chat_span *sp, size_t n_sp,
                       const srv_vision *v, srv_reply *r) {
    size_t bad;
    const int n_ctx = srv_sched_n_ctx(s->sched);
    if (min_tokens(s, len) >= (size_t)n_ctx) {
        exceed_context(r, (long)min_tokens(s, len), n_ctx, true);
        return false;
    }
    if (!bs_utf8_valid(text, len, &bad)) {
        srv_reply_error(r, 400, "invalid_request_error", "the prompt is not valid UTF-8 (offset %zu)", bad);
        return false;
    }
    int32_t *raw;
    size_t nr;
    if (tokenize_images(s, v, text, len, sp, n_sp, &raw, &nr) < 0) {
        srv_reply_error(r, 400, "invalid_request_error", "tokenizing the prompt: %s", bs_last_error());
        return false;
    }
    int32_t bos = bs_token_bos(s->tok);
    bool add = bs_tokenizer_add_bos(s->tok) && bos >= 0 && !(nr > 0 && raw[0] == bos);
    t->n_prompt = (int)(nr + add);
    t->prompt = bs_xmalloc((nr + add + 1) * sizeof(int32_t));
    if (add) t->prompt[0] = bos;
    memcpy(t->prompt + add, raw, nr * sizeof *raw);
    free(raw);
    if (t->n_prompt == 0) { bad_request(r, "the %s is empty", "prompt"); return false; }
    long rows = t->n_prompt;   /* an image takes one position per row */
    for (int k = 0; v && k < v->n; k++) rows += (long)v->im[k].nx * v->im[k].ny - 1;
    if (rows >= n_ctx) {
        exceed_context(r, rows, n_ctx, false);
        return false;
    }
    /* a cache checkpoint where the last message starts (where the next turn will diverge) */
    int32_t im_start = bs_token_lookup(s->tok, "<|im_start|>");
    for (int i = t->n_prompt - 1; i > 0 && im_start >= 0; i--)
        if (t->prompt[i] == im_start) { t->ckpt_at = i; break; }
    return true;
}

/* ---- chat ----------------------------------------------------------------------------------- */

typedef struct chat_in {
    bs_chat_msg *msgs;
    bs_chat_tool_call *calls;  /* all messages' calls, pointed into by msgs */
    char **strs;               /* strings to free */
    size_t n, n_calls, n_strs;
    srv *s;                    /* NULL: image parts are rendered, not encoded (apply-template) */
    srv_vision vis;            /* the images of the messages */
} chat_in;

static const char *keep(chat_in *c, char *s) {
    c->strs = bs_xrealloc(c->strs, (c->n_strs + 1) * sizeof *c->strs);
    return c->strs[c->n_strs++] = s;
}

static void chat_in_free(chat_in *c) {
    for (size_t i = 0; i < c->n_strs; i++) free(c->strs[i]);
    free(c->strs);
    free(c->msgs);
    free(c->calls);
    srv_vision_free(&c->vis);
}

/* srv_vision_add's failure rc (-1, -2, -3) as its answer: 400, 503 (the image budget), 400
 * exceed_context_size_error. */
static void vision_fail(srv_reply *r, int rc, const char *err) {
    if (rc == -2) srv_reply_error(r, 503, "unavailable_error", "%s", err);
    else if (rc == -3) srv_reply_error(r, 400, "exceed_context_size_error", "%s", err);
    else srv_reply_error(r, 400, "invalid_request_error", "%s", err);
}

/* v's images to t, which owns them from now (v keeps none). */
static void take_images(srv_task *t, srv_vision *v) {
    t->images = v->im;
    t->pixels = v->px;
    t->n_images = v->n;
    v->im = NULL;
    v->px = NULL;
    v->n = 0;
}

/* An image_url part: encoded, its placeholder into the text. */
static bool image_part(chat_in *c, json_t *part, srv_buf *b, srv_reply *r) {
    if (c->s && r->no_images) {   /* an HTTP thread: decoded on the job pool instead */
        r->wants_job = true;
        return false;
    }
    char err[256];
    const int rc = c->s ? srv_vision_add(c->s, &c->vis, part, srv_sched_n_ctx(c->s->sched), err, sizeof err) : 0;
    if (rc) {
        vision_fail(r, rc, err);
        return false;
    }
    srv_buf_adds(b, c->s ? c->vis.part : BS_IMAGE_CHAT);
    return true;
}

/* content: a string, null, or an array of {"type":"text","text":...} and image_url parts. */
static bool content_text(chat_in *c, json_t *v, const char **out, srv_reply *r) {
    if (!v || json_is_null(v)) { *out = NULL; return true; }
    if (json_is_string(v)) {
        const char *p = json_string_value(v);
        size_t n = json_string_length(v);
        if (!memchr(p, 0, n)) { *out = p; return true; }
        /* U+0000 cannot go through the C-string template: drop it (a model's own output may hold it) */
        char *q = bs_xmalloc(n + 1), *w = q;
        for (size_t i = 0; i < n; i++) if (p[i]) *w++ = p[i];
        *w = 0;
        *out = keep(c, q);
        return true;
    }
    if (!json_is_array(v)) { bad_request(r, "'%s' must be a string or an array of parts", "content"); return false; }
    srv_buf b = {0};
    srv_buf_adds(&b, "");
    size_t i;
    json_t *part;
    json_array_foreach(v, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (json_is_string(type) && !strcmp(json_string_value(type), "image_url")) {
            if (!image_part(c, part, &b, r)) { srv_buf_free(&b); return false; }
            continue;
        }
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            srv_buf_free(&b);
            bad_request(r, "content parts must be {\"type\": \"text\", \"text\": ...} or image_url%s (other kinds are not supported)", "");
            return false;
        }
        srv_buf_adds(&b, json_string_value(text));
    }
    *out = keep(c, b.p);
    return true;
}

static bool parse_calls(chat_in *c, json_t *v, bs_chat_msg *m, srv_reply *r) {
    if (!v || json_is_null(v)) return true;
    if (!json_is_array(v)) { bad_request(r, "'%s' must be an array", "tool_calls"); return false; }
    size_t first = c->n_calls, i;
    json_t *e;
    json_array_foreach(v, i, e) {
        json_t *f = json_object_get(e, "function");
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_string(name) || (args && !json_is_string(args) && !json_is_object(args))) {
            bad_request(r, "each tool call needs function.name (string) and function.arguments (string)%s", "");
            return false;
        }
        const char *a = json_is_object(args) ? keep(c, json_dumps(args, JSON_COMPACT)) : json_string_value(args);
        c->calls = bs_xrealloc(c->calls, (c->n_calls + 1) * sizeof *c->calls);
        c->calls[c->n_calls++] = (bs_chat_tool_call){.name = json_string_value(name), .arguments = a};
    }
    m->n_tool_calls = c->n_calls - first;
    m->tool_calls = (const bs_chat_tool_call *)(uintptr_t)first;   /* fixed up once calls stop moving */
    return true;
}

static bool parse_messages(json_t *b, chat_in *c, srv_reply *r) {
    json_t *msgs = json_object_get(b, "messages");
    if (!json_is_array(msgs)) { bad_request(r, "'%s' must be an array of messages", "messages"); return false; }
    if (json_array_size(msgs) == 0) { bad_request(r, "'%s' must not be empty", "messages"); return false; }
    c->n = json_array_size(msgs);
    c->msgs = bs_xcalloc(c->n, sizeof *c->msgs);
    static const char *roles[] = {"system", "user", "assistant", "tool", "developer"};
    for (size_t i = 0; i < c->n; i++) {
        json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) { bad_request(r, "each message needs a '%s' string", "role"); return false; }
        const char *rs = json_string_value(role);
        size_t k = 0;
        while (k < BS_ARRAY_LEN(roles) && strcmp(rs, roles[k])) k++;
        if (k == BS_ARRAY_LEN(roles)) { bad_request(r, "unknown message role '%.64s'", rs); return false; }
        bs_chat_msg *cm = &c->msgs[i];
        cm->role = k == 4 ? "system" : rs;
        if (!content_text(c, json_object_get(m, "content"), &cm->content, r)) return false;
        json_t *reason = json_object_get(m, "reasoning_content");
        if (json_is_string(reason)) cm->reasoning = json_string_value(reason);
        if (!parse_calls(c, json_object_get(m, "tool_calls"), cm, r)) return false;
        if (!cm->content && !cm->n_tool_calls && k != 2) {
            bad_request(r, "a '%s' message needs content", cm->role);
            return false;
        }
    }
    for (size_t i = 0; i < c->n; i++)
        c->msgs[i].tool_calls = c->msgs[i].n_tool_calls ? c->calls + (uintptr_t)c->msgs[i].tool_calls : NULL;
    return true;
}

static bool parse_tools(json_t *b, char **tools_text, srv_reply *r) {
    json_t *tools = json_object_get(b, "tools"), *choice = json_object_get(b, "tool_choice");
    if (!tools || json_is_null(tools)) return true;
    if (!json_is_array(tools)) { bad_request(r, "'%s' must be an array", "tools"); return false; }
    size_t i;
    json_t *e;
    json_array_foreach(tools, i, e) {
        if (!json_is_string(json_object_get(json_object_get(e, "function"), "name"))) {
            bad_request(r, "each tool needs function.name%s", "");
            return false;
        }
    }
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "none")) return true;
    if (json_array_size(tools)) *tools_text = json_dumps(tools, JSON_COMPACT);
    return true;
}

/* enable_thinking when a request does not say: -1 the template's, else 0 / 1 (--reasoning-budget 0,
 * --chat-template-kwargs) */
static int thinking_default(const srv *s) { return s->cfg.thinking == 0 ? -1 : s->cfg.thinking > 0; }

static bool thinking_flag(json_t *b, int *enable, srv_reply *r) {
    json_t *kw = json_object_get(b, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) { bad_request(r, "'%s' must be an object", "chat_template_kwargs"); return false; }
    json_t *effort = json_object_get(b, "reasoning_effort");   /* OpenAI's: none (and minimal) think not */
    if (json_is_string(effort) && (!strcmp(json_string_value(effort), "none") || !strcmp(json_string_value(effort), "minimal")))
        *enable = 0;
    bool on = false;
    json_t *src = json_object_get(kw, "enable_thinking") ? kw : b;
    if (json_object_get(src, "enable_thinking")) {
        if (!srv_get_bool(src, "enable_thinking", &on, r)) return false;
        *enable = on;
    }
    return true;
}

/* llama-server's reasoning_format: "auto" and "deepseek" split the think block out (the default),
 * "none" leaves it in content, "deepseek-legacy" leaves it there and splits it out too. */
static bool reasoning_format(json_t *b, int *rf, srv_reply *r) {
    json_t *v = json_object_get(b, "reasoning_format");
    if (!v || json_is_null(v)) return true;
    static const char *const names[] = {"auto", "deepseek", "none", "deepseek-legacy"};
    static const int mode[] = {0, 0, 1, 2};
    for (size_t i = 0; json_is_string(v) && i < BS_ARRAY_LEN(names); i++)
        if (!strcmp(json_string_value(v), names[i])) { *rf = mode[i]; return true; }
    bad_request(r, "'%s' must be \"auto\", \"deepseek\", \"none\" or \"deepseek-legacy\"", "reasoning_format");
    return false;
}

static void gen_init(srv_gen *g, bool chat) {
    memset(g, 0, sizeof *g);
    g->chat = chat;
    g->created = (long)time(NULL);
    static unsigned long counter;
    unsigned long k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(g->id, sizeof g->id, "%s-%lx%06lx", chat ? "chatcmpl" : "cmpl", (unsigned long)g->created, k);
}

static bool parse_stream(json_t *b, srv_gen *g, srv_reply *r) {
    if (!srv_get_bool(b, "stream", &g->stream, r) || !srv_get_bool(b, "timings_per_token", &g->timings_per_token, r) ||
        !srv_get_bool(b, "return_progress", &g->progress, r))
        return false;
    json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) { bad_request(r, "'%s' must be an object", "stream_options"); return false; }
        if (!srv_get_bool(so, "include_usage", &g->include_usage, r)) return false;
    }
    return true;
}

/* Logprob entries the request may produce: choices x tokens x (top + 1), the tokens bounded by
 * --n-predict and, without a context shift, by the context left after the prompt. */
static long logprob_entries(const srv *s, const srv_task *t) {
    if (t->n_probs < 0) return 0;
    const long most = srv_task_n_predict(&s->cfg, t);
    long all = 0;
    for (int k = 0; k < BS_MAX(t->n_choices, 1); k++) {   /* each answer by its own prompt's room */
        const srv_task *c = k && t->sib[k - 1] ? t->sib[k - 1] : t;
        long n = most;
        if (!s->cfg.gen.context_shift) n = BS_MIN(n, (long)srv_sched_n_ctx(s->sched) - c->n_prompt);
        all += BS_MAX(n, 0L);
    }
    return all * (t->n_probs + 1);
}

static void submit(srv *s, srv_task *t, srv_gen *g, srv_reply *r) {
    if (g->shape && g->shape->count) {   /* count_tokens: the prompt is all it wanted */
        g->shape->count(s, t, r);
        srv_gen_free(g);
        srv_task_unref(t);
        return;
    }
    const long lp = logprob_entries(s, t);
    bool refused = true;
    if (t->n_choices > 1 && g->stream && !t->sib[0])   /* sib[0]: several prompts */
        srv_reply_error(r, 400, "not_supported_error", "n > 1 is supported without streaming");
    else if (lp > SRV_LOGPROB_MAX)
        srv_reply_error(r, 400, "invalid_request_error",
                        "logprobs: n x max_tokens x (top_logprobs + 1) = %ld entries, more than the limit of %ld "
                        "(ask for fewer tokens, choices or top_logprobs)", lp, SRV_LOGPROB_MAX);
    else if (lp && !srv_logprob_reserve(lp))
        srv_reply_error(r, 503, "unavailable_error", "the server is sending as many logprobs as it may: retry soon");
    else
        refused = false;
    if (refused) {
        srv_gen_free(g);
        for (int k = 1; k < t->n_choices; k++) srv_task_unref(t->sib[k - 1]);
        srv_task_unref(t);
        return;
    }
    t->lp_reserved = lp;
    /* the other choices ("n"): the same prompt and parameters, seeds + 1, + 2, ...; they wait
     * for the first one's prompt and take its evaluated state */
    for (int k = 1; k < t->n_choices; k++)
        if (!t->sib[k - 1]) t->sib[k - 1] = srv_task_choice(t, k);
    int failed = srv_sched_submit(s->sched, t);
    for (int k = 1; k < t->n_choices && !failed; k++) failed = srv_sched_submit(s->sched, t->sib[k - 1]);
    if (failed) {
        char err[256];
        snprintf(err, sizeof err, "%s", bs_last_error());
        for (int k = 0; k < t->n_choices; k++) {   /* what was queued ends at once */
            srv_task *c = k ? t->sib[k - 1] : t;
            pthread_mutex_lock(&c->mu);
            c->cancel = true;
            pthread_mutex_unlock(&c->mu);
        }
        srv_sched_wake(s->sched);
        srv_reply_error(r, 503, "unavailable_error", "%s", err);
        srv_gen_free(g);
        for (int k = 1; k < t->n_choices; k++) srv_task_unref(t->sib[k - 1]);
        srv_task_unref(t);
        return;
    }
    srv_reply_generation(s, t, g, r);
}

/* A lower bound of the bytes a message puts into the prompt: the template keeps system, user
 * and tool content whole but stripped (Python's str.strip: ASCII and Unicode blanks), so strip
 * more than that - blanks and every non-ASCII byte at both ends. Assistant turns may lose their
 * reasoning, so they count nothing. */
static size_t rendered_at_least(const bs_chat_msg *m) {
    if (!m->content || !strcmp(m->role, "assistant")) return 0;
    const unsigned char *p = (const unsigned char *)m->content;
    size_t b = 0, e = strlen(m->content);
    while (b < e && (p[b] <= ' ' || p[b] >= 0x80)) b++;
    while (e > b && (p[e - 1] <= ' ' || p[e - 1] >= 0x80)) e--;
    return e - b;
}

/* Whether a rendered prompt ends inside an opened think block (the generation prompt with
 * thinking on): the output starts as reasoning, and no prefill may follow it. */
static bool opens_think(const char *p, size_t len) { return len >= 8 && !memcmp(p + len - 8, "<think>\n", 8); }

/* The conversation rendered (spans: the request's own text, see bs_chat_render_spans). As
 * llama-server, a last assistant message is a prefill, not a finished turn: the messages before
 * it are rendered with the generation prompt and its content follows as typed, for the model to
 * continue. Its refusals are llama-server's: two assistant messages at the end, and a prefill
 * after an opened think block (thinking on). NULL + a 400 in r. */
static char *render_chat(const srv *s, const chat_in *c, const bs_chat_opts *co, bs_chat_span **sp, size_t *n_sp,
                         srv_reply *r) {
    const bs_chat_msg *last = c->n ? &c->msgs[c->n - 1] : NULL;
    const bool prefill = co->add_generation_prompt && last && !strcmp(last->role, "assistant");
    if (prefill && c->n >= 2 && !strcmp(c->msgs[c->n - 2].role, "assistant")) {
        bad_request(r, "%s", "Cannot have 2 or more assistant messages at the end of the list.");
        return NULL;
    }
    if (prefill && last->n_tool_calls) {
        bad_request(r, "%s", "a last assistant message with tool_calls cannot be continued (prefill takes content)");
        return NULL;
    }
    char *p = bs_chat_render_spans(&s->tmpl, c->msgs, c->n - prefill, co, sp, n_sp);
    if (!p) {
        srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
        return NULL;
    }
    if (!prefill) return p;
    const size_t plen = strlen(p), clen = last->content ? strlen(last->content) : 0;
    if (opens_think(p, plen)) {
        free(p);
        free(*sp);
        *sp = NULL;
        bad_request(r, "%s", "Assistant response prefill is incompatible with enable_thinking.");
        return NULL;
    }
    p = bs_xrealloc(p, plen + clen + 1);
    memcpy(p + plen, last->content ? last->content : "", clen + 1);
    if (clen) {
        *sp = bs_xrealloc(*sp, (*n_sp + 1) * sizeof **sp);
        (*sp)[(*n_sp)++] = (bs_chat_span){plen, plen + clen};
    }
    return p;
}

/* shape: another API's answer (server_dialect.h), NULL: OpenAI's */
static void api_chat(srv *s, json_t *b, srv_reply *r, const srv_shape *shape) {
    srv_task *t = srv_task_new();
    chat_in c = {.s = s};
    srv_vision_init(&c.vis);
    char *tools = NULL, *prompt = NULL;
    bs_chat_span *spans = NULL;
    size_t n_spans = 0;
    srv_gen g;
    gen_init(&g, true);
    g.shape = shape;
    int think = thinking_default(s);
    bool lp = false, gen_prompt = true, parallel = true;
    long top = 0;
    json_t *offered = json_object_get(b, "tools");
    char *offered_text = json_is_array(offered) ? json_dumps(offered, JSON_COMPACT) : NULL;
    int rf = s->cfg.reasoning_format;
    const bool ok = parse_messages(b, &c, r) && parse_tools(b, &tools, r) && thinking_flag(b, &think, r) &&
                    reasoning_format(b, &rf, r) &&
                    parse_sampling(s, b, t, r) && parse_constraints(b, t, offered_text, r) && parse_stream(b, &g, r) &&
                    srv_get_bool(b, "logprobs", &lp, r) && srv_get_int(b, "top_logprobs", 0, SRV_MAX_TOP, &top, r) &&
                    srv_get_bool(b, "add_generation_prompt", &gen_prompt, r) &&
                    srv_get_bool(b, "parallel_tool_calls", &parallel, r);
    free(offered_text);
    if (!ok) goto fail;
    if (t->grammar && think < 0) think = 0;   /* constrained output starts at once, not in a think block */
    /* the messages' text alone may prove the prompt too long: refuse before rendering a copy */
    size_t text_bytes = 0;
    for (size_t i = 0; i < c.n; i++) text_bytes += rendered_at_least(&c.msgs[i]);
    const int n_ctx = srv_sched_n_ctx(s->sched);
    if (min_tokens(s, text_bytes) >= (size_t)n_ctx) {
        exceed_context(r, (long)min_tokens(s, text_bytes), n_ctx, true);
        goto fail;
    }
    bs_chat_opts co = {.tools = tools, .add_generation_prompt = gen_prompt, .enable_thinking = think};
    if (!(prompt = render_chat(s, &c, &co, &spans, &n_spans, r))) goto fail;
    size_t plen = strlen(prompt);
    if (!set_prompt(s, t, prompt, plen, spans, n_spans, &c.vis, r)) goto fail;
    take_images(t, &c.vis);
    free(spans);
    spans = NULL;
    long n_probs = 0;   /* llama-server's native n_probs read on chat too: logprobs with that many top */
    if (!srv_get_int(b, "n_probs", 0, SRV_MAX_TOP, &n_probs, r)) goto fail;
    if (n_probs > 0 && !lp) lp = true, top = n_probs;
    g.logprobs = lp;
    t->n_probs = lp ? (int)top : -1;
    g.tools = tools != NULL;
    g.str_params = tools ? srv_tool_string_params(offered) : NULL;
    g.one_call = !parallel;
    g.in_think = opens_think(prompt, plen);
    g.reasoning_format = rf;
    free(prompt);
    free(tools);
    chat_in_free(&c);
    submit(s, t, &g, r);
    return;
fail:
    free(spans);
    free(prompt);
    free(tools);
    chat_in_free(&c);
    srv_task_unref(t);
}

enum { COMPL_OPENAI, COMPL_NATIVE, COMPL_INFILL };

#define MEDIA_MARKER "<__media__>"   /* llama-server's (mtmd's default marker) */
#define MEDIA_LEN (sizeof MEDIA_MARKER - 1)

/* /completion's prompt object {"prompt_string", "multimodal_data": [base64, ...]}: each marker
 * in the string is the next image, placed as a chat's image part is (<|vision_start|> ...
 * <|vision_end|>); the images go to t as a chat's do. 1 done, 0 not that form, -1 refused (r). */
static int media_prompt(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    json_t *p = json_object_get(b, "prompt");
    if (!json_is_object(p)) return 0;
    json_t *ps = json_object_get(p, "prompt_string"), *md = json_object_get(p, "multimodal_data");
    if (!json_is_string(ps) || (md && !json_is_null(md) && !json_is_array(md))) {
        bad_request(r, "'prompt' as an object is {\"prompt_string\": text, \"multimodal_data\": [base64, ...]}%s", "");
        return -1;
    }
    const size_t n_md = json_is_array(md) ? json_array_size(md) : 0;
    if (n_md > SRV_MAX_IMAGES) {   /* before decoding any */
        srv_reply_error(r, 400, "invalid_request_error", "at most %d images in a request (multimodal_data has %zu)",
                        SRV_MAX_IMAGES, n_md);
        return -1;
    }
    if (n_md && r->no_images) {   /* an HTTP thread: decoded on the job pool instead */
        r->wants_job = true;
        return -1;
    }
    const char *text = json_string_value(ps), *end = text + json_string_length(ps);
    size_t n_mark = 0;
    for (const char *q = text; (q = memmem(q, (size_t)(end - q), MEDIA_MARKER, MEDIA_LEN)); q += MEDIA_LEN) n_mark++;
    if (n_mark != n_md) {
        srv_reply_error(r, 400, "invalid_request_error", "the prompt holds %zu " MEDIA_MARKER " markers for %zu "
                        "multimodal_data entries", n_mark, n_md);
        return -1;
    }
    srv_vision vis;
    srv_vision_init(&vis);
    srv_buf out = {0};
    int rc = 1;
    const char *q = text;
    for (size_t i = 0; i < n_md && rc > 0; i++) {
        json_t *e = json_array_get(md, i);
        const char *m = memmem(q, (size_t)(end - q), MEDIA_MARKER, MEDIA_LEN);
        char err[256];
        if (!json_is_string(e)) { bad_request(r, "'multimodal_data' must hold base64 strings%s", ""); rc = -1; break; }
        srv_buf url = {0};
        srv_buf_adds(&url, "data:application/octet-stream;base64,");
        srv_buf_add(&url, json_string_value(e), json_string_length(e));
        json_t *part = json_pack("{s:s,s:{s:s%}}", "type", "image_url", "image_url", "url", url.p, url.len);
        srv_buf_free(&url);
        const int v = srv_vision_add(s, &vis, part, srv_sched_n_ctx(s->sched), err, sizeof err);
        json_decref(part);
        if (v) {
            vision_fail(r, v, err);
            rc = -1;
            break;
        }
        srv_buf_add(&out, q, (size_t)(m - q));
        srv_buf_adds(&out, vis.part);
        q = m + MEDIA_LEN;
    }
    if (rc > 0) {
        srv_buf_add(&out, q, (size_t)(end - q));
        if (set_prompt(s, t, out.p ? out.p : "", out.len, NULL, 0, &vis, r)) take_images(t, &vis);
        else rc = -1;
    }
    srv_buf_free(&out);
    srv_vision_free(&vis);
    return rc;
}

/* POST /v1/completions (OpenAI's answer), /completion and /completions (llama-server's native
 * answer), /infill (native, the prompt made of the FIM tokens). Prompt forms, native fields and
 * the FIM prompt: server_native.c and server_infill.c. */
static void api_completions(srv *s, json_t *b, srv_reply *r, int mode) {
    srv_task *t = srv_task_new();
    srv_gen g;
    gen_init(&g, false);
    g.native = mode != COMPL_OPENAI;
    long lp = -1;
    srv_fail f = {0};
    srv_prompt *pr = NULL;
    int np = 0;
    json_t *suffix = json_object_get(b, "suffix");
    if (suffix && !json_is_null(suffix) && !(json_is_string(suffix) && json_string_length(suffix) == 0)) {
        srv_reply_error(r, 400, "not_supported_error", "'suffix' is not supported (POST /infill takes input_suffix)");
        goto fail;
    }
    t->n_predict = g.native ? -1 : 16;   /* OpenAI's default for completions; llama-server's: none */
    if (!parse_sampling(s, b, t, r) || !parse_constraints(b, t, NULL, r) || !parse_stream(b, &g, r) ||
        !srv_get_bool(b, "echo", &g.echo, r) || (!g.native && !srv_get_int(b, "logprobs", 0, SRV_MAX_TOP, &lp, r)))
        goto fail;
    if (!json_object_get(b, "max_tokens") && !json_object_get(b, "n_predict"))
        t->n_predict = s->cfg.n_predict > 0 ? s->cfg.n_predict : g.native ? -1 : 16;
    int rc = g.native ? srv_native_opts(b, &g, t, &f) : 0;
    const int media = !rc && mode == COMPL_NATIVE ? media_prompt(s, b, t, r) : 0;
    if (media < 0) goto fail;
    if (media > 0) {   /* one prompt, with images */
        g.prompt_text = bs_xstrdup(json_string_value(json_object_get(json_object_get(b, "prompt"), "prompt_string")));
        submit(s, t, &g, r);
        return;
    }
    if (!rc && mode == COMPL_INFILL) {
        pr = bs_xcalloc(1, sizeof *pr);
        np = 1;
        rc = srv_infill_prompt(s, b, t->n_predict, pr, &t->prompt_cut, &f);
    } else if (!rc) {
        rc = srv_native_prompts(s, b, SRV_MAX_CHOICES, &pr, &np, &f);   /* a list: a choice each */
        if (!rc && np > 1 && g.echo)
            rc = srv_fail_set(&f, 400, "not_supported_error", "'echo' is supported with one prompt");
    }
    if (rc) { fail_reply(s, &f, r); goto fail; }
    t->prompt = pr[0].ids;
    t->n_prompt = pr[0].n;
    pr[0].ids = NULL;
    g.prompt_text = pr[0].text;
    pr[0].text = NULL;
    if (srv_native_more(t, pr, np, &g, &f)) { fail_reply(s, &f, r); goto fail; }
    srv_prompts_free(pr, np);
    if (!g.native) {
        g.logprobs = lp >= 0;
        t->n_probs = (int)lp;
    }
    submit(s, t, &g, r);
    return;
fail:
    srv_prompts_free(pr, np);
    srv_gen_free(&g);
    srv_task_unref(t);
}

/* Anthropic's and the Responses API's requests: translated into chat requests (NULL: refused,
 * r says why), then run as chat; errors in the API's own shape. */
static void api_dialect(srv *s, json_t *chat, srv_reply *r, const srv_shape *shape) {
    if (chat) api_chat(s, chat, r, shape);
    shape->error(r);
    json_decref(chat);
}

/* ---- small endpoints ------------------------------------------------------------------------ */

static void api_apply_template(srv *s, json_t *b, srv_reply *r) {
    chat_in c = {0};
    char *tools = NULL;
    int think = thinking_default(s);
    bool gen_prompt = true;   /* add_generation_prompt: false renders no assistant opener */
    if (parse_messages(b, &c, r) && parse_tools(b, &tools, r) && thinking_flag(b, &think, r) &&
        srv_get_bool(b, "add_generation_prompt", &gen_prompt, r)) {
        bs_chat_opts co = {.tools = tools, .add_generation_prompt = gen_prompt, .enable_thinking = think};
        bs_chat_span *sp = NULL;
        size_t n_sp = 0;
        char *p = render_chat(s, &c, &co, &sp, &n_sp, r);
        if (p) srv_reply_json(r, 200, json_pack("{s:s}", "prompt", p));
        free(p);
        free(sp);
    }
    free(tools);
    chat_in_free(&c);
}

/* ---- routing -------------------------------------------------------------------------------- */

typedef struct route {
    const char *path;
    bool post;
    int kind;
} route;

enum { R_HEALTH, R_MODELS, R_PROPS, R_SLOTS, R_METRICS, R_WEBUI, R_CHAT, R_COMPL, R_NATIVE, R_EMBED, R_TOK, R_DETOK, R_TMPL,
       R_MSGS, R_MSGS_COUNT, R_RESP, R_INFILL, R_EMBED_V1, R_SHOW };

static const route routes[] = {
    {"/health", false, R_HEALTH}, {"/v1/health", false, R_HEALTH}, {"/v1/models", false, R_MODELS},
    {"/models", false, R_MODELS}, {"/api/tags", false, R_MODELS}, {"/api/show", true, R_SHOW},
    {"/props", false, R_PROPS}, {"/slots", false, R_SLOTS},
    {"/metrics", false, R_METRICS}, {"/", false, R_WEBUI}, {"/index.html", false, R_WEBUI},
    {"/v1/chat/completions", true, R_CHAT}, {"/chat/completions", true, R_CHAT},
    /* /completions is llama-server's native endpoint too, not OpenAI's shape (that is /v1/completions) */
    {"/v1/completions", true, R_COMPL}, {"/completions", true, R_NATIVE}, {"/completion", true, R_NATIVE},
    {"/infill", true, R_INFILL},
    {"/v1/embeddings", true, R_EMBED_V1}, {"/embeddings", true, R_EMBED}, {"/embedding", true, R_EMBED},
    {"/tokenize", true, R_TOK},
    {"/detokenize", true, R_DETOK}, {"/apply-template", true, R_TMPL},
    {"/v1/messages", true, R_MSGS}, {"/v1/messages/count_tokens", true, R_MSGS_COUNT}, {"/v1/responses", true, R_RESP},
    {"/responses", true, R_RESP},
};

static const route *find_route(const char *url) {
    size_t plen = strcspn(url, "?");
    for (size_t i = 0; i < BS_ARRAY_LEN(routes); i++)
        if (strlen(routes[i].path) == plen && !strncmp(url, routes[i].path, plen)) return &routes[i];
    return NULL;
}

bool srv_route_generates(const char *url) {
    const route *rt = find_route(url);
    return rt && (rt->kind == R_CHAT || rt->kind == R_COMPL || rt->kind == R_NATIVE || rt->kind == R_EMBED ||
                  rt->kind == R_MSGS || rt->kind == R_RESP || rt->kind == R_INFILL || rt->kind == R_EMBED_V1);
}

static void get_route(srv *s, int kind, srv_reply *r) {
    switch (kind) {
    case R_HEALTH: srv_reply_json(r, 200, json_pack("{s:s}", "status", "ok")); break;
    case R_MODELS: srv_api_models(s, r); break;
    case R_PROPS: srv_api_props(s, r); break;
    case R_SLOTS: break;   /* (srv_slots_route answers GET /slots) */
    case R_METRICS:
        r->status = 200;
        r->ctype = "text/plain; version=0.0.4";
        r->body = srv_metrics_text(&s->metrics, srv_sched_n_slots(s->sched));
        r->len = strlen(r->body);
        break;
    case R_WEBUI:
        if (s->cfg.no_webui) { srv_reply_error(r, 404, "not_found_error", "the web page is disabled"); break; }
        r->status = 200;
        r->ctype = "text/html; charset=utf-8";
        r->csp = bs_webui_html_csp;
        r->body = bs_xmalloc(bs_webui_html_len + 1);
        memcpy(r->body, bs_webui_html, bs_webui_html_len + 1);
        r->len = bs_webui_html_len;
        break;
    }
}

/* llama-server's endpoints this server does not offer: its 501 answers rather than a 404, so a
 * client can tell "not here" from "wrong address". */
static bool unsupported_route(const char *method, const char *url, srv_reply *r) {
    const size_t n = strcspn(url, "?");
    static const char *const rerank[] = {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"};
    for (size_t i = 0; i < BS_ARRAY_LEN(rerank); i++)
        if (n == strlen(rerank[i]) && !strncmp(url, rerank[i], n)) {
            srv_reply_error(r, 501, "not_supported_error", "reranking is not supported by this server");
            return true;
        }
    if (!strcmp(method, "POST") && n == 6 && !strncmp(url, "/props", 6)) {
        srv_reply_error(r, 501, "not_supported_error", "This server does not support changing global properties.");
        return true;
    }
    return false;
}

void srv_handle(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r) {
    if (srv_slots_route(s, method, url, body, len, r) || srv_lora_route(s, method, url, body, len, r) ||
        unsupported_route(method, url, r))
        return;
    const route *rt = find_route(url);
    if (!rt) { srv_reply_error(r, 404, "not_found_error", "no such endpoint: %.200s", url); return; }
    /* only the methods a route has; anything else (DELETE, FOO, ...) is 405 with Allow */
    bool allowed = rt->post ? !strcmp(method, "POST") : !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!allowed) {
        srv_reply_error(r, 405, "invalid_request_error", "%s needs %s", rt->path, rt->post ? "POST" : "GET");
        r->allow = rt->post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
        return;
    }
    if (!rt->post) { get_route(s, rt->kind, r); return; }
    json_error_t je;
    json_t *b = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!b) {
        srv_reply_error(r, 400, "invalid_request_error", "the body is not valid JSON: %s (line %d, column %d)",
                        je.text, je.line, je.column);
        return;
    }
    if (!json_is_object(b)) {
        srv_reply_error(r, 400, "invalid_request_error", "the body must be a JSON object");
    } else {
        switch (rt->kind) {
        case R_CHAT: api_chat(s, b, r, NULL); break;
        case R_MSGS: api_dialect(s, srv_anthropic_request(b, false, r), r, &srv_anthropic_shape); break;
        case R_MSGS_COUNT: api_dialect(s, srv_anthropic_request(b, true, r), r, &srv_anthropic_count_shape); break;
        case R_RESP: api_dialect(s, srv_responses_request(b, r), r, &srv_responses_shape); break;
        case R_COMPL: api_completions(s, b, r, COMPL_OPENAI); break;
        case R_NATIVE: api_completions(s, b, r, COMPL_NATIVE); break;
        case R_INFILL: api_completions(s, b, r, COMPL_INFILL); break;
        case R_EMBED: case R_EMBED_V1: srv_api_embeddings(s, b, r, rt->kind == R_EMBED_V1); break;
        case R_TOK: srv_api_tokenize(s, b, r); break;
        case R_DETOK: srv_api_detokenize(s, b, r); break;
        case R_TMPL: api_apply_template(s, b, r); break;
        case R_SHOW: srv_api_show(s, r); break;
        }
    }
    json_decref(b);
}
