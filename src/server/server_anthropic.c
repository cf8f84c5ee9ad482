/* server_anthropic.c: Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * over the chat path (server_dialect.h). The request becomes an OpenAI chat request: system ->
 * a system message; text / image (base64 or URL source) blocks -> content parts; tool_use blocks
 * -> tool_calls; tool_result blocks -> tool messages; thinking blocks -> reasoning_content;
 * tools (input_schema) -> function tools; tool_choice auto / any / tool / none -> auto /
 * required / a named function / none; stop_sequences -> stop; thinking enabled / disabled ->
 * enable_thinking. The answer: a "message" with thinking, text and tool_use blocks, stop_reason
 * end_turn / max_tokens / stop_sequence / tool_use, or its stream of Anthropic's events. Errors
 * are {"type":"error","error":{"type","message"}}. */
#include "server/server_dialect.h"
#include "io/util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------------------------------- */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static json_t *error_json(int status, const char *msg) {
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", error_type(status), "message", msg);
}

bool srv_anthropic_path(const char *url) {
    return !strncmp(url, "/v1/messages", 12) && (url[12] == '\0' || url[12] == '/' || url[12] == '?');
}

/* An OpenAI-shaped error reply -> Anthropic's (once: an Anthropic one stays). */
void srv_anthropic_error(srv_reply *r) {
    if (r->status < 400 || !r->body) return;
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (j && !json_object_get(j, "type")) {
        free(r->body);
        srv_reply_json(r, r->status, error_json(r->status, msg ? msg : "error"));
    }
    json_decref(j);
}

static bool bad(srv_reply *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply_json(r, 400, error_json(400, msg));
    return false;
}

/* ---- request -> chat request ------------------------------------------------------------------ */

static const char *type_of(json_t *block) { return json_string_value(json_object_get(block, "type")); }

/* An image block -> an image_url part (base64 -> a data: URL; a URL source stays a URL, which
 * the server refuses unless it is a data: URL). */
static json_t *image_part(json_t *blk, srv_reply *r) {
    json_t *src = json_object_get(blk, "source");
    const char *st = json_string_value(json_object_get(src, "type"));
    const char *mt = json_string_value(json_object_get(src, "media_type"));
    json_t *data = json_object_get(src, "data"), *url = json_object_get(src, "url");
    if (st && !strcmp(st, "base64") && mt && json_is_string(data)) {
        srv_buf u = {0};
        srv_buf_adds(&u, "data:");
        srv_buf_adds(&u, mt);
        srv_buf_adds(&u, ";base64,");
        srv_buf_add(&u, json_string_value(data), json_string_length(data));
        json_t *p = json_pack("{s:s,s:{s:s%}}", "type", "image_url", "image_url", "url", u.p, u.len);
        srv_buf_free(&u);
        return p;
    }
    if (st && !strcmp(st, "url") && json_is_string(url))
        return json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url", url);
    bad(r, "an image block needs source {\"type\": \"base64\", \"media_type\", \"data\"} or {\"type\": \"url\", \"url\"}");
    return NULL;
}

/* Text and image blocks (a string is one text block) -> chat content parts, appended to parts. */
static bool content_parts(json_t *c, json_t *parts, const char *where, srv_reply *r) {
    if (json_is_string(c)) {
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", c));
        return true;
    }
    if (!json_is_array(c)) return bad(r, "%s: content must be a string or an array of blocks", where);
    size_t i;
    json_t *blk;
    json_array_foreach(c, i, blk) {
        const char *t = type_of(blk);
        json_t *text = json_object_get(blk, "text");
        if (t && !strcmp(t, "text") && json_is_string(text)) {
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
        } else if (t && !strcmp(t, "text")) {
            return bad(r, "%s: a text block needs a text string", where);
        } else if (t && !strcmp(t, "image")) {
            json_t *p = image_part(blk, r);
            if (!p) return false;
            json_array_append_new(parts, p);
        } else {
            return bad(r, "%s: a content block of type '%.40s' is not supported here (text, image%s)", where,
                       t ? t : "(none)", strcmp(where, "user message") ? "" : ", tool_result");
        }
    }
    return true;
}

static bool user_message(json_t *c, json_t *out, srv_reply *r) {
    json_t *parts = json_array(), *rest = json_array();
    bool ok = true;
    size_t i;
    json_t *blk;
    if (json_is_array(c)) {
        json_array_foreach(c, i, blk) {
            const char *t = type_of(blk);
            if (!(t && !strcmp(t, "tool_result"))) { json_array_append(rest, blk); continue; }
            json_t *id = json_object_get(blk, "tool_use_id"), *rc = json_object_get(blk, "content"), *tp = json_array();
            if (!json_is_string(id)) { ok = bad(r, "a tool_result block needs a tool_use_id string"); json_decref(tp); break; }
            if (rc && !json_is_null(rc) && !(ok = content_parts(rc, tp, "tool_result", r))) { json_decref(tp); break; }
            if (!json_array_size(tp)) json_array_append_new(tp, json_pack("{s:s,s:s}", "type", "text", "text", ""));
            json_array_append_new(out, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", tp));
        }
        if (ok && json_array_size(rest)) ok = content_parts(rest, parts, "user message", r);
    } else if (json_is_string(c)) {   /* as it is: a long text is not copied */
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", c));
    } else {
        ok = content_parts(c, parts, "user message", r);
    }
    if (ok && json_array_size(parts)) json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", parts));
    json_decref(parts);
    json_decref(rest);
    return ok;
}

static bool assistant_message(json_t *c, json_t *out, srv_reply *r) {
    if (json_is_string(c)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "assistant", "content", c));
        return true;
    }
    if (!json_is_array(c)) return bad(r, "assistant message: content must be a string or an array of blocks");
    srv_buf text = {0}, think = {0};
    srv_buf_adds(&text, "");
    srv_buf_adds(&think, "");
    json_t *calls = json_array();
    size_t i;
    json_t *blk;
    bool ok = true;
    json_array_foreach(c, i, blk) {
        const char *t = type_of(blk);
        json_t *v;
        if (t && !strcmp(t, "text") && json_is_string(v = json_object_get(blk, "text"))) {
            srv_buf_add(&text, json_string_value(v), json_string_length(v));
        } else if (t && !strcmp(t, "thinking") && json_is_string(v = json_object_get(blk, "thinking"))) {
            srv_buf_add(&think, json_string_value(v), json_string_length(v));
        } else if (t && !strcmp(t, "redacted_thinking")) {
            continue;
        } else if (t && !strcmp(t, "tool_use")) {
            json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name"), *in = json_object_get(blk, "input");
            if (!json_is_string(name) || (in && !json_is_object(in))) {
                ok = bad(r, "a tool_use block needs a name string and an input object");
                break;
            }
            json_t *call = json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", name, "arguments",
                                     in ? json_incref(in) : json_object());
            if (json_is_string(id)) json_object_set(call, "id", id);
            json_array_append_new(calls, call);
        } else {
            ok = bad(r, "assistant message: a content block of type '%.40s' is not supported (text, thinking, tool_use)",
                     t ? t : "(none)");
            break;
        }
    }
    if (ok) {
        json_t *m = json_pack("{s:s,s:s%}", "role", "assistant", "content", text.p, text.len);
        if (think.len) json_object_set_new(m, "reasoning_content", json_stringn(think.p, think.len));
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        json_array_append_new(out, m);
    }
    json_decref(calls);
    srv_buf_free(&text);
    srv_buf_free(&think);
    return ok;
}

static bool messages(json_t *b, json_t *chat, srv_reply *r) {
    json_t *out = json_array(), *sys = json_object_get(b, "system"), *msgs = json_object_get(b, "messages");
    json_object_set_new(chat, "messages", out);
    if (json_is_string(sys)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "system", "content", sys));
    } else if (sys && !json_is_null(sys)) {
        json_t *parts = json_array();
        bool ok = content_parts(sys, parts, "system", r);
        size_t i;
        json_t *p;
        json_array_foreach(parts, i, p) if (ok && strcmp(type_of(p), "text")) ok = bad(r, "system: only text blocks");
        if (ok && json_array_size(parts)) json_array_append_new(out, json_pack("{s:s,s:O}", "role", "system", "content", parts));
        json_decref(parts);
        if (!ok) return false;
    }
    if (!json_is_array(msgs) || !json_array_size(msgs)) return bad(r, "messages: a non-empty array of messages is required");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *c = json_object_get(m, "content");
        bool ok;
        if (!json_is_object(m) || !role) ok = bad(r, "messages.%zu: each message needs a role", i);
        else if (!strcmp(role, "user")) ok = user_message(c, out, r);
        else if (!strcmp(role, "assistant")) ok = assistant_message(c, out, r);
        else ok = bad(r, "messages.%zu: role must be \"user\" or \"assistant\" (got '%.40s')", i, role);
        if (!ok) return false;
    }
    return true;
}

static bool tools(json_t *b, json_t *chat, srv_reply *r) {
    json_t *tl = json_object_get(b, "tools"), *tc = json_object_get(b, "tool_choice");
    if (tl && !json_is_null(tl)) {
        if (!json_is_array(tl)) return bad(r, "tools: must be an array");
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        json_t *e;
        json_array_foreach(tl, i, e) {
            const char *t = type_of(e);
            json_t *name = json_object_get(e, "name"), *schema = json_object_get(e, "input_schema");
            if (t && strcmp(t, "custom")) return bad(r, "tools.%zu: tools of type '%.40s' are not supported (client tools only)", i, t);
            if (!json_is_string(name) || !json_is_object(schema))
                return bad(r, "tools.%zu: a tool needs a name string and an input_schema object", i);
            json_t *f = json_pack("{s:O}", "name", name);   /* the usual order: the template renders it */
            if (json_is_string(json_object_get(e, "description"))) json_object_set(f, "description", json_object_get(e, "description"));
            json_object_set(f, "parameters", schema);
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
    }
    if (!tc || json_is_null(tc)) return true;
    const char *t = type_of(tc);
    json_t *name = json_object_get(tc, "name");
    if (t && (!strcmp(t, "auto") || !strcmp(t, "none"))) json_object_set_new(chat, "tool_choice", json_string(t));
    else if (t && !strcmp(t, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (t && !strcmp(t, "tool") && json_is_string(name))
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    else return bad(r, "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}");
    if (strcmp(t, "auto") && !json_array_size(json_object_get(chat, "tools")) && strcmp(t, "none"))
        return bad(r, "tool_choice: there are no tools to choose from");
    json_t *one = json_object_get(tc, "disable_parallel_tool_use");   /* at most one tool_use block */
    if (one && !json_is_boolean(one)) return bad(r, "tool_choice.disable_parallel_tool_use: must be a boolean");
    if (json_is_true(one)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    return true;
}

/* The rest: sampling, stop_sequences, thinking, stream; llama-server's own extras pass. */
static bool options(json_t *b, json_t *chat, bool count, srv_reply *r) {
    json_t *mt = json_object_get(b, "max_tokens"), *ss = json_object_get(b, "stop_sequences");
    json_t *th = json_object_get(b, "thinking"), *mcp = json_object_get(b, "mcp_servers");
    if (json_array_size(mcp)) return bad(r, "mcp_servers: not supported (connect MCP servers in the client)");
    if (!count) {
        if (!mt) return bad(r, "max_tokens: Field required");
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) return bad(r, "max_tokens: must be an integer >= 1");
        json_object_set(chat, "max_tokens", mt);
    }
    json_t *temp = json_object_get(b, "temperature");   /* Anthropic's range: no negative (chat's greedy) */
    if (json_is_number(temp) && json_number_value(temp) < 0) return bad(r, "temperature: must be >= 0");
    static const char *pass[] = {"temperature", "top_p", "top_k", "stream", "seed", "ignore_eos", "min_p",
                                 "repeat_penalty", "cache_prompt", "draft_max", "loop_guard", "chat_template_kwargs"};
    for (size_t i = 0; i < BS_ARRAY_LEN(pass); i++)
        if (json_object_get(b, pass[i]) && !(count && !strcmp(pass[i], "stream")))
            json_object_set(chat, pass[i], json_object_get(b, pass[i]));
    if (ss && !json_is_null(ss)) {
        size_t i;
        json_t *e;
        if (!json_is_array(ss) || json_array_size(ss) > SRV_MAX_STOP)
            return bad(r, "stop_sequences: must be an array of at most %d strings", SRV_MAX_STOP);
        json_array_foreach(ss, i, e) if (!json_is_string(e)) return bad(r, "stop_sequences: must hold strings");
        json_object_set(chat, "stop", ss);
    }
    if (th && !json_is_null(th)) {
        const char *t = type_of(th);
        if (!t || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
            return bad(r, "thinking: type must be \"enabled\", \"disabled\" or \"adaptive\"");
        json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", strcmp(t, "disabled") != 0));
    }
    return true;
}

/* ---- the answer ------------------------------------------------------------------------------ */

static const char *block_type(int kind) {
    return kind == SRV_BLOCK_THINKING ? "thinking" : kind == SRV_BLOCK_TOOL ? "tool_use" : "text";
}

/* A block as it opens (empty: its text comes as deltas, a tool's input as input_json_delta). */
static json_t *block_start(int kind, const srv_tool_call *call, const char *msg_id, int idx) {
    if (kind == SRV_BLOCK_THINKING) return json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
    if (kind == SRV_BLOCK_TEXT) return json_pack("{s:s,s:s}", "type", "text", "text", "");
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%d", msg_id + 4, idx);
    return json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", id, "name", call->name, "input");
}

static const char *stop_reason(const srv *s, const srv_task *t, const srv_blocks *bl, const char **seq) {
    *seq = NULL;
    if (srv_calls_finish(t, bl->n_calls, bl->calls.cut)) return "tool_use";   /* (a call cut: max_tokens) */
    if (t->finish == SRV_FINISH_LENGTH) return "max_tokens";
    if ((*seq = srv_stop_matched(s, t))) return "stop_sequence";
    return "end_turn";
}

static json_t *usage(const srv_timings *tm) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", tm->n_prompt, "output_tokens", tm->n_gen,
                     "cache_read_input_tokens", tm->n_cached, "cache_creation_input_tokens", 0);
}

static void msg_id(const srv_gen *g, char *out, size_t n) {
    const char *dash = strchr(g->id, '-');
    snprintf(out, n, "msg_%s", dash ? dash + 1 : g->id);
}

/* Non-streaming: the blocks collected into a content array. */
typedef struct collect {
    json_t *content, *cur;
    srv_buf acc;
    const char *id;
    int n;
} collect;

static void c_open(void *ud, int kind, const srv_tool_call *call) {
    collect *c = ud;
    c->cur = block_start(kind, call, c->id, c->n++);
    c->acc.len = 0;
    srv_buf_adds(&c->acc, "");
}

static void c_delta(void *ud, int kind, const char *p, size_t n) {
    (void)kind;
    srv_buf_add(&((collect *)ud)->acc, p, n);
}

static void c_close(void *ud, int kind) {
    collect *c = ud;
    if (kind == SRV_BLOCK_TOOL) {
        json_t *in = json_loadb(c->acc.p, c->acc.len, JSON_ALLOW_NUL, NULL);   /* (\u0000 in a string value is JSON) */
        json_object_set_new(c->cur, "input", json_is_object(in) ? in : json_object());
        if (in && !json_is_object(in)) json_decref(in);
    } else {
        json_object_set_new(c->cur, block_type(kind), srv_text_json(c->acc.p, c->acc.len));
    }
    json_array_append_new(c->content, c->cur);
    c->cur = NULL;
}

static const srv_block_ops collect_ops = {c_open, c_delta, c_close};

static void done(srv *s, srv_task *t, const srv_gen *g, srv_reply *r) {
    char id[64];
    msg_id(g, id, sizeof id);
    collect c = {.content = json_array(), .id = id};
    srv_blocks bl;
    srv_blocks_init(&bl, g->in_think, g->tools, g->str_params, g->one_call);
    srv_blocks_feed(&bl, t->text ? t->text : "", t->len, true, &collect_ops, &c);
    const char *seq;
    const char *why = stop_reason(s, t, &bl, &seq);
    srv_blocks_free(&bl);
    srv_buf_free(&c.acc);
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", id, "type", "message", "role", "assistant",
                          "model", srv_model_name(s), "content", c.content, "stop_reason", why, "stop_sequence",
                          seq ? json_string(seq) : json_null(), "usage", usage(&t->tm));
    srv_reply_json(r, 200, j);
}

/* Streaming: each block's start, deltas and stop as events. */
typedef struct astream {
    srv *s;
    srv_task *t;
    srv_blocks bl;
    char id[64];
    int idx;
    srv_buf *out;
    bool started;              /* message_start sent */
} astream;

static void s_open(void *ud, int kind, const srv_tool_call *call) {
    astream *a = ud;
    srv_sse_event(a->out, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                                            a->idx, "content_block", block_start(kind, call, a->id, a->idx)));
}

static void s_delta(void *ud, int kind, const char *p, size_t n) {
    astream *a = ud;
    json_t *d = kind == SRV_BLOCK_THINKING ? json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", srv_text_json(p, n))
                : kind == SRV_BLOCK_TOOL   ? json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", srv_text_json(p, n))
                                           : json_pack("{s:s,s:o}", "type", "text_delta", "text", srv_text_json(p, n));
    srv_sse_event(a->out, "content_block_delta",
                  json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", a->idx, "delta", d));
}

static void s_close(void *ud, int kind) {
    astream *a = ud;
    if (kind == SRV_BLOCK_THINKING)   /* no signature: nothing signs a local model's thinking */
        srv_sse_event(a->out, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta",
                                                                "index", a->idx, "delta", "type", "signature_delta", "signature", ""));
    srv_sse_event(a->out, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", a->idx++));
}

static const srv_block_ops stream_ops = {s_open, s_delta, s_close};

static void *stream_new(srv *s, srv_task *t, const srv_gen *g) {
    astream *a = bs_xcalloc(1, sizeof *a);
    a->s = s;
    a->t = t;
    msg_id(g, a->id, sizeof a->id);
    srv_blocks_init(&a->bl, g->in_think, g->tools, g->str_params, g->one_call);
    return a;
}

/* message_start waits for the task's first news (its slot took it: the prompt cache's share is
 * known), so its usage splits the prompt as the final usage does: input_tokens the tokens
 * evaluated, cache_read_input_tokens those the cache gave (Anthropic's input_tokens exclude
 * cache reads). (t->mu is held.) */
static void start(astream *a, srv_buf *out) {
    if (a->started) return;
    a->started = true;
    const int cached = a->t->started ? a->t->tm.n_cached : 0;
    const int input = (int)srv_task_positions(a->t) - cached;
    json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i,s:i,s:i}}", "id", a->id, "type", "message", "role",
                          "assistant", "model", srv_model_name(a->s), "content", "stop_reason", "stop_sequence", "usage",
                          "input_tokens", input, "output_tokens", 0, "cache_read_input_tokens", cached,
                          "cache_creation_input_tokens", 0);
    srv_sse_event(out, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", m));
    srv_sse_event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void stream_begin(void *st, srv_buf *out) { (void)st, (void)out; }

static void stream_step(void *st, const char *text, size_t len, bool fin, srv_buf *out) {
    astream *a = st;
    srv_task *t = a->t;
    a->out = out;
    start(a, out);
    if (fin && (t->finish == SRV_FINISH_ERROR || t->finish == SRV_FINISH_SHUTDOWN)) {
        const char *msg = t->finish == SRV_FINISH_SHUTDOWN ? "the server shut down before the generation finished" : t->error;
        srv_sse_event(out, "error", error_json(t->finish == SRV_FINISH_SHUTDOWN ? 503 : 500, msg));
        return;
    }
    srv_blocks_feed(&a->bl, text, len, fin, &stream_ops, a);
    if (!fin) return;
    const char *seq;
    const char *why = stop_reason(a->s, t, &a->bl, &seq);
    srv_sse_event(out, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta",
                                                  "stop_reason", why, "stop_sequence", seq ? json_string(seq) : json_null(),
                                                  "usage", usage(&t->tm)));
    srv_sse_event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void stream_free(void *st) {
    astream *a = st;
    if (!a) return;
    srv_blocks_free(&a->bl);
    free(a);
}

/* count_tokens: the prompt's positions (an image takes one per row of its grid). */
static void count(srv *s, srv_task *t, srv_reply *r) {
    (void)s;
    long n = t->n_prompt;
    for (int k = 0; k < t->n_images; k++) n += (long)t->images[k].nx * t->images[k].ny - 1;
    srv_reply_json(r, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}

/* While the prompt is evaluated, a ping per chunk (Anthropic's keep-alive event): a long prompt
 * on a big model takes minutes before the first token. */
static void stream_progress(void *st, srv_buf *out) {
    astream *a = st;
    if (!a->started) start(a, out);   /* (its ping is this chunk's) */
    else srv_sse_event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

const srv_shape srv_anthropic_shape = {done, srv_anthropic_error, stream_new, stream_begin, stream_step, stream_free,
                                       NULL, stream_progress};
const srv_shape srv_anthropic_count_shape = {done, srv_anthropic_error, stream_new, stream_begin, stream_step,
                                             stream_free, count, NULL};

json_t *srv_anthropic_request(json_t *b, bool counting, srv_reply *r) {
    json_t *chat = json_object();
    if (messages(b, chat, r) && tools(b, chat, r) && options(b, chat, counting, r)) return chat;
    json_decref(chat);
    return NULL;
}
