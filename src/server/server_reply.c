/* server_reply.c: a generation task's results as OpenAI responses: one JSON object when it is done,
 * or Server-Sent Events while it runs (chat.completion.chunk / text_completion chunks, then
 * `data: [DONE]`), both with `usage` and llama-server's `timings`.
 *
 * Chat output is split into reasoning_content (the think block) and content as it streams
 * (reasoning.h). When tools were offered, content from the first <tool_call> on is held back
 * and parsed into tool_calls at the end (server_tools.c).
 *
 * Every answer also carries `loop_guard` (next to `timings`; in a stream, on the finish chunk):
 * what the doom-loop guard did, see loop_guard_json.
 *
 * A request of another API (Anthropic's Messages, OpenAI's Responses) carries its own shape
 * (g->shape, server_dialect.h), which renders the finished task and the stream instead. */
#include "server/server.h"
#include "server/server_dialect.h"
#include "text/reasoning.h"
#include "io/utf8.h"
#include "io/util.h"

#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- JSON replies and OpenAI-shaped errors (used by every endpoint) ---------------------------- */

void srv_reply_json(srv_reply *r, int status, json_t *j) {
    r->status = status;
    r->ctype = "application/json; charset=utf-8";
    r->body = json_dumps(j, JSON_COMPACT);
    r->len = r->body ? strlen(r->body) : 0;
    json_decref(j);
}

json_t *srv_error_json(int status, const char *type, const char *msg) {
    return json_pack("{s:{s:i,s:s,s:s}}", "error", "code", status, "message", msg, "type", type);
}

void srv_reply_error(srv_reply *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply_json(r, status, srv_error_json(status, type, msg));
}


struct srv_stream {
    srv *s;
    srv_task *t;
    srv_gen g;
    bool (*client_gone)(void *ud);
    void *ud;
    bs_reasoning *rs;
    size_t sent;               /* bytes of the task's text consumed */
    int toks_sent;             /* logprob entries sent */
    int toks_max;              /* this read's last token (exclusive): LP_CHUNK past toks_sent */
    int phase;                 /* 0: nothing sent, 1: streaming, 2: finished */
    srv_calls calls;           /* chat with tools: the calls read from the content as it comes */
    void *ext;                 /* g.shape's stream state */
    int prog_sent;             /* the task's progress entries sent (prompt_progress events,
                                  Anthropic pings) */
    bool locked;               /* t->mu is held: the chunks may read the task's timings */
};

/* ---- shared pieces -------------------------------------------------------------------------- */

const char *srv_model_name(const srv *s) {
    if (s->cfg.alias) return s->cfg.alias;
    const char *slash = strrchr(s->cfg.model, '/');
    return slash ? slash + 1 : s->cfg.model;
}

static json_t *piece(const srv *s, int32_t id) {
    const char *p = "";
    size_t len = 0;
    bs_token_to_piece(s->tok, id, true, &p, &len);
    return srv_text_json(p, len);
}

static json_t *timings_json(const srv_timings *tm) { return srv_timings_json(tm); }

/* {"mode", "loops_detected", "rewinds", "discarded_tokens", "stopped", "span"}: span describes
 * the last loop detected (null if none) in code points of the generated text as it was then:
 * the first copy starts at `start`, the second at `repeat_start`, the periodic run ends at
 * `end`; `rejected_token` is the index of the generated token the guard rewound to (or stopped
 * after), `rejected_id` its id. */
static json_t *loop_guard_json(const bs_loop_guard_result *g) {
    json_t *span = json_null();
    if (g->n_detected > 0)
        span = json_pack("{s:I,s:I,s:I,s:i,s:i,s:i,s:i}", "start", (json_int_t)g->last.start_char, "repeat_start",
                         (json_int_t)g->last.repeat_start_char, "end", (json_int_t)g->last.end_char, "period",
                         g->last.period, "repeats", g->last.repeats, "rejected_token", g->last.rejected_token,
                         "rejected_id", (int)g->last_rejected_id);
    return json_pack("{s:s,s:i,s:i,s:i,s:b,s:o}", "mode", bs_loop_guard_mode_name(g->mode), "loops_detected",
                     g->n_detected, "rewinds", g->n_rewinds, "discarded_tokens", g->n_discarded, "stopped",
                     g->stopped, "span", span);
}

static json_t *usage_json(const srv_timings *tm) {
    int n_in = tm->n_prompt + tm->n_cached;
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", n_in, "completion_tokens", tm->n_gen, "total_tokens",
                     n_in + tm->n_gen, "prompt_tokens_details", "cached_tokens", tm->n_cached);
}

/* One chat logprobs entry (OpenAI: token, logprob, bytes as integers, top_logprobs). */
static json_t *chat_lp_entry(const srv *s, const srv_tok *k) {
    json_t *top = json_array();
    for (int i = 0; i < k->n_top; i++)
        json_array_append_new(top, json_pack("{s:i,s:o,s:f,s:o}", "id", (int)k->top_id[i], "token", piece(s, k->top_id[i]),
                                             "logprob", (double)k->top_lp[i], "bytes", srv_token_bytes_json(s, k->top_id[i])));
    return json_pack("{s:i,s:o,s:f,s:o,s:o}", "id", (int)k->id, "token", piece(s, k->id), "logprob", (double)k->logprob,
                     "bytes", srv_token_bytes_json(s, k->id), "top_logprobs", top);   /* id: llama-server's too */
}

static json_t *chat_logprobs(const srv *s, const srv_tok *k, int from, int to) {
    json_t *a = json_array();
    for (int i = from; i < to; i++) json_array_append_new(a, chat_lp_entry(s, &k[i]));
    return json_pack("{s:o}", "content", a);
}

/* Completions logprobs (tokens, token_logprobs, top_logprobs, text_offset); echoed prompt tokens
 * come first with null logprobs (their distributions are not computed). */
static json_t *compl_logprobs(const srv *s, const srv_task *t, bool echo, int from, int to, size_t offset0,
                              bool content) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = offset0;
    for (int i = 0; echo && i < t->n_prompt; i++) {
        const char *p;
        size_t len = 0;
        bs_token_to_piece(s->tok, t->prompt[i], true, &p, &len);
        json_array_append_new(toks, srv_text_json(p, len));
        json_array_append_new(lps, json_null());
        json_array_append_new(tops, json_null());
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += len;
    }
    for (int i = from; i < to; i++) {
        const srv_tok *k = &t->toks[i];
        json_array_append_new(toks, piece(s, k->id));
        json_array_append_new(lps, json_real(k->logprob));
        json_t *top = json_object();
        for (int j = 0; j < k->n_top; j++) {
            json_t *ps = piece(s, k->top_id[j]);
            json_object_set_new(top, json_string_value(ps), json_real(k->top_lp[j]));
            json_decref(ps);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)(off + (i ? t->toks[i - 1].text_end : 0))));
    }
    json_t *j = json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                          "text_offset", offs);
    if (content) {   /* llama-server's shape beside OpenAI's: the generated tokens as chat's entries */
        json_t *w = chat_logprobs(s, t->toks, from, to);
        json_object_set(j, "content", json_object_get(w, "content"));
        json_decref(w);
    }
    return j;
}

/* "shutdown": the server stopped before the end (drain timeout or a second SIGTERM). */
static const char *finish_name(const srv_task *t, bool tool_calls) {
    if (t->finish == SRV_FINISH_SHUTDOWN) return "shutdown";
    if (tool_calls) return "tool_calls";
    return t->finish == SRV_FINISH_LENGTH ? "length" : "stop";
}

/* A call as OpenAI shows it: {"id", "type", "function": {"name", "arguments"}} (+ "index" in a
 * stream's first delta of the call). */
static json_t *tool_call_json(const char *id, int i, const char *name, const char *arguments, bool stream) {
    char cid[80];
    snprintf(cid, sizeof cid, "call_%s_%d", id, i);
    json_t *e = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", cid, "type", "function", "function", "name", name, "arguments",
                          arguments);
    if (stream) json_object_set_new(e, "index", json_integer(i));
    return e;
}

static json_t *tool_calls_json(const srv_tool_call *c, int n, const char *id) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, tool_call_json(id, i, c[i].name, c[i].arguments, false));
    return a;
}


/* ---- waiting -------------------------------------------------------------------------------- */

static void cancel(srv *s, srv_task *t) {
    pthread_mutex_lock(&t->mu);
    t->cancel = true;
    pthread_mutex_unlock(&t->mu);
    srv_sched_wake(s->sched);
}

/* Wait (t->mu held) until pred holds, checking every 50 ms that the client is still there.
 * false: it went away (the task is then cancelled by the caller). */
static bool wait_on(srv_task *t, bool (*pred)(srv_task *, void *), void *arg, bool (*gone)(void *), void *ud) {
    while (!pred(t, arg)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        if (pthread_cond_timedwait(&t->cv, &t->mu, &ts) == ETIMEDOUT && gone && gone(ud)) return false;
    }
    return true;
}

static bool is_done(srv_task *t, void *arg) { (void)arg; return t->done; }

/* ---- one JSON answer ------------------------------------------------------------------------ */

static json_t *chat_message(srv *s, srv_task *t, srv_gen *g, bool *has_calls) {
    char *reasoning, *content;
    size_t rlen, clen;
    /* nothing generated (max_tokens 0, or an immediate end): text is still NULL */
    bs_reasoning_split(t->text ? t->text : "", t->len, g->in_think, &reasoning, &rlen, &content, &clen);
    if (g->reasoning_format) {   /* content as generated (none: no reasoning_content either) */
        free(content);
        clen = t->len;
        content = bs_xmalloc(clen + 1);
        memcpy(content, t->text ? t->text : "", clen);
        content[clen] = 0;
        if (g->reasoning_format == 1) rlen = 0;
    }
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    srv_tool_call *calls = NULL;
    srv_buf rest = {0};
    bool cut = false;
    const int nc = g->tools ? srv_parse_tool_calls(content, clen, g->str_params, g->one_call, &calls, &rest, &cut) : 0;
    *has_calls = srv_calls_finish(t, nc, cut);
    const char *c = g->tools ? rest.p : content;
    const size_t cl = g->tools ? rest.len : clen;
    json_object_set_new(msg, "content", nc && !cl ? json_null() : srv_text_json(c, cl));
    if (rlen) json_object_set_new(msg, "reasoning_content", srv_text_json(reasoning, rlen));
    if (nc) json_object_set_new(msg, "tool_calls", tool_calls_json(calls, nc, g->id));
    srv_free_tool_calls(calls, nc);
    srv_buf_free(&rest);
    free(reasoning);
    free(content);
    return msg;
}

/* ---- a finished answer, written piece by piece ------------------------------------------------
 * A reply of 16 choices with top_logprobs would be millions of jansson nodes at once (and glibc
 * keeps the memory in its arenas). So the answer's frame is built with a placeholder where the
 * big part goes ("choices", "logprobs"), dumped, and the big part written into the text between
 * in chunks of LP_CHUNK tokens, each chunk's nodes freed before the next. A placeholder key
 * cannot occur in user text: quotes inside JSON strings are escaped. */
#define LP_CHUNK 256
#define HOLE "\x01"

static void add_dump(srv_buf *b, json_t *j) {
    char *txt = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(j);
    if (txt) srv_buf_adds(b, txt);
    free(txt);
}

/* The elements of array a (freed), without the brackets, after a comma unless *first. */
static void add_items(srv_buf *b, json_t *a, bool *first) {
    char *txt = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    size_t n = txt ? strlen(txt) : 0;
    if (n > 2) {
        if (!*first) srv_buf_adds(b, ",");
        srv_buf_add(b, txt + 1, n - 2);
        *first = false;
    }
    free(txt);
}

/* j (freed) into b with the value of "key": HOLE written by fill. */
static void add_with_hole(srv_buf *b, json_t *j, const char *key, void (*fill)(srv_buf *, void *), void *arg) {
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"\\u0001\"", key);
    char *at = txt ? strstr(txt, pat) : NULL;
    if (!at) { if (txt) srv_buf_adds(b, txt); free(txt); return; }   /* not expected */
    const size_t k = strlen(key) + 3;   /* "key": */
    srv_buf_add(b, txt, (size_t)(at - txt) + k);
    fill(b, arg);
    srv_buf_adds(b, at + strlen(pat));
    free(txt);
}

typedef struct lp_arg { srv *s; srv_task *t; srv_gen *g; } lp_arg;

static void fill_chat_lp(srv_buf *b, void *arg) {
    const lp_arg *a = arg;
    bool first = true;
    srv_buf_adds(b, "{\"content\":[");
    for (int i = 0; i < a->t->n_toks; i += LP_CHUNK) {
        json_t *c = chat_logprobs(a->s, a->t->toks, i, BS_MIN(i + LP_CHUNK, a->t->n_toks));
        add_items(b, json_incref(json_object_get(c, "content")), &first);
        json_decref(c);
    }
    srv_buf_adds(b, "]}");
}

static void fill_compl_lp(srv_buf *b, void *arg) {
    const lp_arg *a = arg;
    const srv_task *t = a->t;
    const bool echo = a->g->echo;
    const size_t off0 = echo && a->g->prompt_text ? strlen(a->g->prompt_text) : 0;
    size_t base = echo ? 0 : off0;   /* where the generated text starts: after the echoed prompt */
    for (int i = 0; echo && i < t->n_prompt; i++) {
        const char *p;
        size_t len = 0;
        bs_token_to_piece(a->s->tok, t->prompt[i], true, &p, &len);
        base += len;
    }
    static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset", "content"};
    srv_buf_adds(b, "{");
    for (int k = 0; k < 5; k++) {
        bool first = true;
        srv_buf_adds(b, k ? ",\"" : "\"");
        srv_buf_adds(b, keys[k]);
        srv_buf_adds(b, "\":[");
        for (int i = 0; i == 0 || i < t->n_toks; i += LP_CHUNK) {   /* chunk 0 also holds the echo */
            const int to = BS_MIN(i + LP_CHUNK, t->n_toks);   /* (each key builds only its own part) */
            json_t *c = k == 4 ? chat_logprobs(a->s, t->toks, i, to)
                               : compl_logprobs(a->s, t, echo && i == 0, i, to, echo && i == 0 ? 0 : base, false);
            add_items(b, json_incref(json_object_get(c, keys[k])), &first);
            json_decref(c);
        }
        srv_buf_adds(b, "]");
    }
    srv_buf_adds(b, "}");
}

/* Choice idx of a finished task, into b. */
static void add_choice(srv_buf *b, srv *s, srv_task *t, srv_gen *g, int idx) {
    json_t *choice;
    lp_arg a = {s, t, g};
    if (g->chat) {
        bool calls;
        json_t *msg = chat_message(s, t, g, &calls);
        choice = json_pack("{s:i,s:o,s:s}", "index", idx, "message", msg, "finish_reason", finish_name(t, calls));
        json_object_set_new(choice, "logprobs", g->logprobs ? json_string(HOLE) : json_null());
        if (g->logprobs) add_with_hole(b, choice, "logprobs", fill_chat_lp, &a);
        else add_dump(b, choice);
        return;
    }
    srv_buf text = {0};
    srv_buf_adds(&text, "");
    if (g->echo && g->prompt_text) srv_buf_adds(&text, g->prompt_text);
    srv_buf_add(&text, t->text ? t->text : "", t->len);
    choice = json_pack("{s:i,s:o,s:s}", "index", idx, "text", srv_text_json(text.p, text.len), "finish_reason",
                       finish_name(t, false));
    srv_buf_free(&text);
    json_object_set_new(choice, "logprobs", g->logprobs ? json_string(HOLE) : json_null());
    if (g->logprobs) add_with_hole(b, choice, "logprobs", fill_compl_lp, &a);
    else add_dump(b, choice);
}

/* The task's choices: itself, then the other choices it carries ("n"). */
static srv_task *choice_at(srv_task *t, int i) { return i ? t->sib[i - 1] : t; }
static int n_choices(const srv_task *t) { return t->n_choices > 1 ? t->n_choices : 1; }

typedef struct choices_arg { srv *s; srv_task *t; srv_gen *g; } choices_arg;

static void fill_choices(srv_buf *b, void *arg) {
    const choices_arg *a = arg;
    srv_buf_adds(b, "[");
    for (int i = 0; i < n_choices(a->t); i++) {
        if (i) srv_buf_adds(b, ",");
        add_choice(b, a->s, choice_at(a->t, i), a->g, i);
    }
    srv_buf_adds(b, "]");
}

void srv_trim_after(size_t bytes) {
#ifdef __GLIBC__
    if (bytes >= SRV_TRIM_BYTES) malloc_trim(0);
#else
    (void)bytes;
#endif
}

/* A failed choice's error into r: true if there was one. */
static bool reply_failed(srv_task *t, srv_reply *r) {
    for (int i = 0; i < n_choices(t); i++) {
        if (choice_at(t, i)->finish == SRV_FINISH_ERROR) {
            const char *e = choice_at(t, i)->error;
            if (!strncmp(e, "grammar", 7))   /* the request's grammar could not go on: the client's to fix */
                srv_reply_error(r, 422, "invalid_request_error", "generation failed: %s", e);
            else
                srv_reply_error(r, 500, "server_error", "generation failed: %s", e);
            return true;
        }
        /* nothing was sent yet: a 503 lets a balancer retry the request on another replica */
        if (choice_at(t, i)->finish == SRV_FINISH_SHUTDOWN) {
            srv_reply_error(r, 503, "unavailable_error", "the server shut down before the generation finished");
            return true;
        }
    }
    return false;
}

static void reply_done(srv *s, srv_task *t, srv_gen *g, srv_reply *r) {
    if (g->answer) { g->answer(s, t, r); return; }
    if (reply_failed(t, r)) {
        if (g->shape) g->shape->error(r);
        return;
    }
    if (g->shape) { g->shape->done(s, t, g, r); return; }
    if (g->native) {
        json_t *a = srv_native_answer(s, srv_model_name(s), t, g);
        for (int i = 0; !g->fields_set && i < n_choices(t); i++)   /* bitspark's own field, as on the others */
            json_object_set_new(json_is_array(a) ? json_array_get(a, (size_t)i) : a, "loop_guard",
                                loop_guard_json(&choice_at(t, i)->loop_res));
        srv_reply_json(r, 200, a);
        return;
    }
    /* every choice's generated tokens; a shared prompt counted once, a choice's own (one of a
       list of prompts) each time */
    srv_timings sum = t->tm;
    for (int i = 1; i < n_choices(t); i++) {
        const srv_task *c = choice_at(t, i);
        sum.n_gen += c->tm.n_gen;
        if (!c->leader) sum.n_prompt += c->tm.n_prompt, sum.n_cached += c->tm.n_cached;
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:o,s:o}", "id", g->id, "object",
                          g->chat ? "chat.completion" : "text_completion", "created", (json_int_t)g->created, "model",
                          srv_model_name(s), "system_fingerprint", "bitspark-" BITSPARK_VERSION, "choices", HOLE,
                          "usage", usage_json(&sum), "timings", timings_json(&t->tm));
    json_object_set_new(j, "loop_guard", loop_guard_json(&t->loop_res));
    choices_arg a = {s, t, g};
    srv_buf b = {0};
    add_with_hole(&b, j, "choices", fill_choices, &a);
    r->status = 200;
    r->ctype = "application/json; charset=utf-8";
    r->body = b.p;
    r->len = b.len;
    srv_trim_after(b.len);
}

static bool all_done(srv_task *t) {
    bool done = true;
    for (int i = 0; i < n_choices(t) && done; i++) {
        srv_task *c = choice_at(t, i);
        pthread_mutex_lock(&c->mu);
        done = c->done;
        pthread_mutex_unlock(&c->mu);
    }
    return done;
}

static void cancel_all(srv *s, srv_task *t) {
    for (int i = 0; i < n_choices(t); i++) cancel(s, choice_at(t, i));
}

static void unref_choices(srv_task *t) {
    for (int i = 1; i < n_choices(t); i++) srv_task_unref(choice_at(t, i));
}

/* A non-streaming answer still being generated (event-loop server: nobody blocks on it). */
struct srv_pending {
    srv *s;
    srv_task *t;
    srv_gen g;
};

void srv_gen_free(srv_gen *g) {
    free(g->prompt_text);
    free(g->str_params);
    g->prompt_text = g->str_params = NULL;
}

bool srv_pending_ready(srv_pending *p) { return all_done(p->t); }

void srv_pending_finish(srv_pending *p, srv_reply *r) {
    pthread_mutex_lock(&p->t->mu);   /* done: the scheduler no longer writes the task */
    pthread_mutex_unlock(&p->t->mu);
    reply_done(p->s, p->t, &p->g, r);
    srv_pending_free(p);
}

void srv_pending_free(srv_pending *p) {
    if (!p) return;
    if (!srv_pending_ready(p)) cancel_all(p->s, p->t);
    srv_gen_free(&p->g);
    unref_choices(p->t);
    srv_task_unref(p->t);
    free(p);
}

void srv_reply_generation(srv *s, srv_task *t, srv_gen *g, srv_reply *r) {
    if (!g->stream && r->async) {
        srv_pending *p = bs_xcalloc(1, sizeof *p);
        p->s = s;
        p->t = t;
        p->g = *g;
        r->pending = p;
        return;
    }
    if (g->stream) {
        srv_stream *st = bs_xcalloc(1, sizeof *st);
        st->s = s;
        st->t = t;
        st->g = *g;
        st->client_gone = r->client_gone;
        st->ud = r->ud;
        if (g->shape) st->ext = g->shape->stream_new(s, t, g);
        else if (g->chat) st->rs = bs_reasoning_new(g->in_think);
        srv_calls_init(&st->calls, st->g.str_params, st->g.one_call);
        r->status = 200;
        r->ctype = "text/event-stream";
        r->stream = st;
        return;
    }
    bool ok = true;
    for (int i = 0; i < n_choices(t) && ok; i++) {
        srv_task *c = choice_at(t, i);
        pthread_mutex_lock(&c->mu);
        ok = wait_on(c, is_done, NULL, r->client_gone, r->ud);
        pthread_mutex_unlock(&c->mu);
    }
    if (!ok) {
        cancel_all(s, t);
        srv_reply_error(r, 499, "client_closed", "the client went away");
    } else {
        reply_done(s, t, g, r);
    }
    srv_gen_free(g);
    unref_choices(t);
    srv_task_unref(t);
}

/* ---- streaming ------------------------------------------------------------------------------ */

static void sse(srv_buf *out, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    srv_buf_adds(out, "data: ");
    srv_buf_adds(out, s);
    srv_buf_adds(out, "\n\n");
    free(s);
    json_decref(j);
}

static json_t *chunk(srv_stream *st, json_t *choice) {
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[]}", "id", st->g.id, "object",
                          st->g.chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)st->g.created,
                          "model", srv_model_name(st->s), "system_fingerprint", "bitspark-" BITSPARK_VERSION, "choices");
    if (choice) json_array_append_new(json_object_get(j, "choices"), choice);
    if (st->g.timings_per_token && st->locked) json_object_set_new(j, "timings", timings_json(&st->t->tm));
    return j;
}

static json_t *chat_delta(json_t *delta, json_t *logprobs, const char *finish) {
    json_t *c = json_pack("{s:i,s:o}", "index", 0, "delta", delta);
    json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

/* Tokens whose logprobs may be sent (t->mu held): all once done, else those no rewind reaches. */
static int toks_ready(const srv_task *t) { return t->done ? t->n_toks : t->n_toks_safe; }

/* One read's chat delta: its content and its tool_calls entries (a call's first with its id and
 * name, then its arguments as they come, pieces of one call in one read joined). */
typedef struct chat_acc {
    srv_stream *st;
    srv_buf text;
    json_t *calls;
    srv_buf args;              /* the last entry's arguments of this read, put in at the end */
    int args_index;            /* whose (-1: none) */
} chat_acc;

static void acc_text(void *ud, const char *p, size_t n) { srv_buf_add(&((chat_acc *)ud)->text, p, n); }

/* The arguments gathered for the last entry into it (each piece is not re-encoded with all before it). */
static void acc_flush(chat_acc *a) {
    if (a->args_index < 0) return;
    json_t *last = json_array_get(a->calls, json_array_size(a->calls) - 1);
    if (!last || json_integer_value(json_object_get(last, "index")) != a->args_index) {
        last = json_pack("{s:i,s:{}}", "index", a->args_index, "function");
        json_array_append_new(a->calls, last);
    }
    json_object_set_new(json_object_get(last, "function"), "arguments", srv_text_json(a->args.p, a->args.len));
    a->args.len = 0;
    a->args_index = -1;
}

static void acc_open(void *ud, int index, const char *name) {
    chat_acc *a = ud;
    acc_flush(a);
    if (!a->calls) a->calls = json_array();
    json_array_append_new(a->calls, tool_call_json(a->st->g.id, index, name, "", true));
}

static void acc_args(void *ud, int index, const char *p, size_t n) {
    chat_acc *a = ud;
    if (a->args_index != index) acc_flush(a);
    if (!a->calls) a->calls = json_array();
    a->args_index = index;
    srv_buf_add(&a->args, p, n);
}

static void acc_close(void *ud, int index) { (void)ud, (void)index; }

static const srv_calls_ops acc_ops = {acc_text, acc_open, acc_args, acc_close};

/* Chat: feed new text through the reasoning splitter (and, with tools, the call reader) and emit
 * a delta. */
static void chat_text(srv_stream *st, const char *text, size_t len, bool final, srv_buf *out) {
    bs_reasoning_out ro = {0};
    srv_buf reasoning = {0}, content = {0};
    const int rf = st->g.reasoning_format;   /* 1, 2: content as generated; 2: reasoning too */
    if (len && rf) srv_buf_add(&content, text, len);
    if (len && rf != 1) {
        bs_reasoning_feed(st->rs, text, len, &ro);
        srv_buf_add(&reasoning, ro.reasoning ? ro.reasoning : "", ro.reasoning_len);
        if (ro.content_len && !rf) srv_buf_add(&content, ro.content, ro.content_len);
    }
    if (final && rf != 1) {
        bs_reasoning_finish(st->rs, &ro);
        srv_buf_add(&reasoning, ro.reasoning ? ro.reasoning : "", ro.reasoning_len);
        if (ro.content_len && !rf) srv_buf_add(&content, ro.content, ro.content_len);
    }
    chat_acc acc = {.st = st, .args_index = -1};
    if (st->g.tools) srv_calls_feed(&st->calls, content.p, content.len, final, &acc_ops, &acc);
    else acc.text = content, content = (srv_buf){0};
    acc_flush(&acc);
    srv_buf_free(&acc.args);
    json_t *delta = json_object();
    if (reasoning.len) json_object_set_new(delta, "reasoning_content", srv_text_json(reasoning.p, reasoning.len));
    if (acc.text.len) json_object_set_new(delta, "content", srv_text_json(acc.text.p, acc.text.len));
    if (acc.calls) json_object_set_new(delta, "tool_calls", acc.calls);
    srv_buf_free(&reasoning);
    srv_buf_free(&content);
    srv_buf_free(&acc.text);
    json_t *lp = NULL;
    int n_toks = BS_MIN(toks_ready(st->t), st->toks_max);
    if (st->g.logprobs && n_toks > st->toks_sent) {
        lp = chat_logprobs(st->s, st->t->toks, st->toks_sent, n_toks);
        st->toks_sent = n_toks;
    }
    if (json_object_size(delta) || lp) sse(out, chunk(st, chat_delta(delta, lp, NULL)));
    else json_decref(delta);
}

/* The end of a chat stream: the finish chunk with timings. */
static void chat_final(srv_stream *st, srv_buf *out) {
    const bool calls = srv_calls_finish(st->t, st->calls.n_calls, st->calls.cut);
    json_t *j = chunk(st, chat_delta(json_object(), NULL, finish_name(st->t, calls)));
    json_object_set_new(j, "timings", timings_json(&st->t->tm));
    json_object_set_new(j, "loop_guard", loop_guard_json(&st->t->loop_res));
    sse(out, j);
}

static void compl_text(srv_stream *st, const char *text, size_t len, bool final, srv_buf *out) {
    json_t *lp = NULL;
    int n_toks = BS_MIN(toks_ready(st->t), st->toks_max);
    if (st->g.logprobs && n_toks > st->toks_sent) {
        lp = compl_logprobs(st->s, st->t, false, st->toks_sent, n_toks, 0, true);
        st->toks_sent = n_toks;
    }
    if (!len && !lp && !final) return;
    json_t *c = json_pack("{s:i,s:o}", "index", 0, "text", srv_text_json(text, len));
    json_object_set_new(c, "logprobs", lp ? lp : json_null());
    json_object_set_new(c, "finish_reason", final ? json_string(finish_name(st->t, false)) : json_null());
    json_t *j = chunk(st, c);
    if (final) {
        json_object_set_new(j, "timings", timings_json(&st->t->tm));
        json_object_set_new(j, "loop_guard", loop_guard_json(&st->t->loop_res));
    }
    sse(out, j);
}

/* Whether this stream reports prompt progress: native return_progress, or a shape's events. */
static bool wants_progress(const srv_stream *st) {
    return st->g.shape ? st->g.shape->progress != NULL : st->g.progress;
}

/* OpenAI's streams (return_progress, as llama-server sends it there): a chunk with an empty
 * delta and prompt_progress {total, cache, processed, time_ms} beside the choices. */
static json_t *oai_progress(srv_stream *st, int k) {
    json_t *choice = st->g.chat ? chat_delta(json_pack("{s:s,s:n}", "role", "assistant", "content"), NULL, NULL)
                                : json_pack("{s:i,s:s,s:n,s:n}", "index", 0, "text", "", "logprobs", "finish_reason");
    json_t *j = chunk(st, choice);
    json_object_set_new(j, "prompt_progress", srv_prompt_progress(st->t, k));
    return j;
}

static bool has_news(srv_task *t, void *arg) {
    const srv_stream *st = arg;
    return t->done || t->n_safe > st->sent || (st->g.logprobs && toks_ready(t) > st->toks_sent) ||
           (t->n_prog > st->prog_sent && wants_progress(st));
}

/* Each progress entry not sent yet (t->mu held): llama-server's prompt_progress events, one
 * per prompt chunk, or the shape's (Anthropic: a ping). */
static void send_progress(srv_stream *st, srv_buf *out) {
    srv_task *t = st->t;
    if (!wants_progress(st)) return;
    for (; st->prog_sent < t->n_prog; st->prog_sent++) {
        if (st->g.shape) st->g.shape->progress(st->ext, out);
        else sse(out, st->g.native ? srv_native_progress(t, st->prog_sent) : oai_progress(st, st->prog_sent));
    }
}

bool srv_stream_done(const srv_stream *st) { return st->phase == 2; }

bool srv_stream_ready(srv_stream *st) {
    if (st->phase != 1) return true;
    pthread_mutex_lock(&st->t->mu);
    bool news = has_news(st->t, st);
    pthread_mutex_unlock(&st->t->mu);
    return news;
}

int srv_stream_poll(srv_stream *st, srv_buf *out) {
    if (!srv_stream_ready(st)) return 2;
    return srv_stream_read(st, out);
}

int srv_stream_read(srv_stream *st, srv_buf *out) {
    srv_task *t = st->t;
    if (st->phase == 2) return 0;
    if (st->phase == 0) {
        st->phase = 1;
        if (st->g.shape) {
            st->g.shape->stream_begin(st->ext, out);
        } else if (st->g.native) {
            return 1;
        } else if (st->g.chat) {
            json_t *d = json_pack("{s:s,s:n}", "role", "assistant", "content");
            sse(out, chunk(st, chat_delta(d, NULL, NULL)));
        } else if (st->g.echo && st->g.prompt_text) {
            sse(out, chunk(st, json_pack("{s:i,s:s,s:n,s:n}", "index", 0, "text", st->g.prompt_text, "logprobs",
                                         "finish_reason")));
        }
        return 1;
    }
    pthread_mutex_lock(&t->mu);
    if (!wait_on(t, has_news, st, st->client_gone, st->ud)) {
        pthread_mutex_unlock(&t->mu);
        cancel(st->s, t);
        return -1;
    }
    st->locked = true;
    bool done = t->done;
    size_t end = done ? t->len : t->n_safe;
    /* one read carries at most LP_CHUNK tokens with their logprobs (and the text up to the last
     * of them): a client that reads late does not have one huge event built, in memory and under
     * the task's lock (which the scheduler and the other readers wait on); the rest follows in
     * the next reads */
    st->toks_max = INT_MAX;
    const bool per_token = !st->g.shape && (st->g.logprobs || (st->g.native && st->g.n_probs > 0));
    if (per_token && toks_ready(t) - st->toks_sent > LP_CHUNK) {
        st->toks_max = st->toks_sent + LP_CHUNK;
        end = BS_MIN(end, BS_MAX(st->sent, t->toks[st->toks_max - 1].text_end));
        done = false;
    }
    const char *text = t->text ? t->text + st->sent : "";
    size_t len = end > st->sent ? end - st->sent : 0;
    if (t->finish != SRV_FINISH_ERROR) send_progress(st, out);
    if (st->g.shape) {
        st->g.shape->stream_step(st->ext, text, len, done, out);
    } else if (done && t->finish == SRV_FINISH_ERROR) {
        const bool client = !strncmp(t->error, "grammar", 7);   /* as reply_done: the request's grammar */
        json_t *e = json_pack("{s:{s:i,s:s,s:s}}", "error", "code", client ? 422 : 500, "message", t->error, "type",
                              client ? "invalid_request_error" : "server_error");
        sse(out, e);
    } else if (st->g.native) {
        if (done && (len || st->toks_sent < t->n_toks)) {   /* the rest first: the last event has none */
            sse(out, srv_native_chunk(st->s, srv_model_name(st->s), t, &st->g, text, len, end, false, &st->toks_sent));
            len = 0;
        }
        json_t *c = len || done ? srv_native_chunk(st->s, srv_model_name(st->s), t, &st->g, text, len, end, done,
                                                   &st->toks_sent)
                                : NULL;
        if (c && done && !st->g.fields_set) json_object_set_new(c, "loop_guard", loop_guard_json(&t->loop_res));
        if (c) sse(out, c);
    } else if (st->g.chat) {
        chat_text(st, text, len, done, out);
        if (done) chat_final(st, out);
    } else {
        compl_text(st, text, len, done, out);
    }
    if (end > st->sent) st->sent = end;   /* never re-send (see guard_limit in server_sched.c) */
    if (done) {
        if (st->g.include_usage && !st->g.native && t->finish != SRV_FINISH_ERROR) {
            json_t *j = chunk(st, NULL);
            json_object_set_new(j, "usage", usage_json(&t->tm));
            json_object_set_new(j, "timings", timings_json(&t->tm));   /* llama-server's, on this chunk too */
            sse(out, j);
        }
        if (!st->g.native && !st->g.shape) srv_buf_adds(out, "data: [DONE]\n\n");   /* llama-server's own stream ends without it */
        st->phase = 2;
    }
    st->locked = false;
    pthread_mutex_unlock(&t->mu);
    return 1;
}

void srv_stream_free(srv_stream *st) {
    if (!st) return;
    pthread_mutex_lock(&st->t->mu);
    bool running = !st->t->done;
    pthread_mutex_unlock(&st->t->mu);
    if (running) cancel(st->s, st->t);
    srv_task_unref(st->t);
    bs_reasoning_free(st->rs);
    if (st->g.shape) st->g.shape->stream_free(st->ext);
    srv_calls_free(&st->calls);
    srv_gen_free(&st->g);
    free(st);
}
