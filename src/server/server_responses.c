/* server_responses.c: OpenAI's Responses API (POST /v1/responses) over the chat path
 * (server_dialect.h). input (a string, or items: messages with input_text / input_image /
 * output_text parts, function_call and function_call_output items), instructions, function
 * tools, tool_choice, max_output_tokens and text.format become a chat request; the answer is a
 * "response" whose output items are a reasoning item (the think block), a message with
 * output_text, and function_call items, or its stream of response.* events, each with a
 * sequence_number. Nothing is stored: previous_response_id and background are refused. */
#include "server/server_dialect.h"
#include "io/util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool bad(srv_reply *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply_error(r, 400, "invalid_request_error", "%s", msg);
    return false;
}

static const char *type_of(json_t *o) { return json_string_value(json_object_get(o, "type")); }
static bool is(const char *a, const char *b) { return a && !strcmp(a, b); }

/* ---- request -> chat request ------------------------------------------------------------------ */

/* content: a string or parts (input_text / output_text / text, input_image with an image_url) ->
 * chat content parts. */
static json_t *parts(json_t *c, const char *where, srv_reply *r) {
    if (json_is_string(c)) return json_pack("[{s:s,s:O}]", "type", "text", "text", c);
    if (!json_is_array(c)) { bad(r, "%s: content must be a string or an array of parts", where); return NULL; }
    json_t *out = json_array(), *p;
    size_t i;
    json_array_foreach(c, i, p) {
        const char *t = type_of(p);
        json_t *text = json_object_get(p, "text"), *url = json_object_get(p, "image_url");
        if ((is(t, "input_text") || is(t, "output_text") || is(t, "text")) && json_is_string(text)) {
            json_array_append_new(out, json_pack("{s:s,s:O}", "type", "text", "text", text));
        } else if (is(t, "input_image") && json_is_string(url)) {
            json_array_append_new(out, json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url", url));
        } else {
            json_decref(out);
            bad(r, "%s: a content part of type '%.40s' is not supported (input_text, input_image with an image_url, "
                   "output_text)", where, t ? t : "(none)");
            return NULL;
        }
    }
    return out;
}

/* The assistant message a function_call item joins: the last message if it is the assistant's
 * (so consecutive calls are one turn), else a new one. */
static json_t *assistant_turn(json_t *msgs) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!is(json_string_value(json_object_get(last, "role")), "assistant")) {
        last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        json_array_append_new(msgs, last);
    }
    if (!json_object_get(last, "tool_calls")) json_object_set_new(last, "tool_calls", json_array());
    return last;
}

static bool item(json_t *it, size_t i, json_t *msgs, srv_reply *r) {
    const char *t = type_of(it), *role = json_string_value(json_object_get(it, "role"));
    char where[48];
    snprintf(where, sizeof where, "input.%zu", i);
    if (!json_is_object(it)) return bad(r, "%s: each input item must be an object", where);
    if ((!t || is(t, "message")) && role) {
        if (!is(role, "user") && !is(role, "system") && !is(role, "developer") && !is(role, "assistant"))
            return bad(r, "%s: role must be user, system, developer or assistant (got '%.40s')", where, role);
        json_t *c = parts(json_object_get(it, "content"), where, r);
        if (!c) return false;
        json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", is(role, "developer") ? "system" : role, "content", c));
        return true;
    }
    if (is(t, "message")) return bad(r, "%s: a message item needs a role string", where);
    if (is(t, "function_call")) {
        json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
        if (!json_is_string(name) || !json_is_string(args))
            return bad(r, "%s: a function_call needs name and arguments (strings)", where);
        json_t *call = json_pack("{s:s,s:{s:O,s:O}}", "type", "function", "function", "name", name, "arguments", args);
        if (json_is_string(id)) json_object_set(call, "id", id);
        json_array_append_new(json_object_get(assistant_turn(msgs), "tool_calls"), call);
        return true;
    }
    if (is(t, "function_call_output")) {
        json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
        json_t *c = json_is_string(out) || json_is_array(out) ? parts(out, where, r) : NULL;
        if (!c) return json_is_string(out) || json_is_array(out) ? false : bad(r, "%s: a function_call_output needs an output", where);
        json_t *m = json_pack("{s:s,s:o}", "role", "tool", "content", c);
        if (json_is_string(id)) json_object_set(m, "tool_call_id", id);
        json_array_append_new(msgs, m);
        return true;
    }
    if (is(t, "reasoning")) return true;   /* earlier thinking: the template drops it anyway */
    return bad(r, "%s: input items of type '%.40s' are not supported (message, function_call, function_call_output)",
               where, t ? t : "(none)");
}

static bool input(json_t *b, json_t *chat, srv_reply *r) {
    json_t *msgs = json_array(), *in = json_object_get(b, "input"), *ins = json_object_get(b, "instructions");
    json_object_set_new(chat, "messages", msgs);
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) return bad(r, "instructions: must be a string");
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
    }
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
        return true;
    }
    if (!json_is_array(in) || !json_array_size(in)) return bad(r, "input: must be a string or a non-empty array of items");
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it) if (!item(it, i, msgs, r)) return false;
    return true;
}

static bool tools(json_t *b, json_t *chat, srv_reply *r) {
    json_t *tl = json_object_get(b, "tools"), *tc = json_object_get(b, "tool_choice");
    if (tl && !json_is_null(tl)) {
        if (!json_is_array(tl)) return bad(r, "tools: must be an array");
        json_t *out = json_array(), *e;
        json_object_set_new(chat, "tools", out);
        size_t i;
        json_array_foreach(tl, i, e) {
            json_t *name = json_object_get(e, "name"), *params = json_object_get(e, "parameters");
            if (!is(type_of(e), "function")) return bad(r, "tools.%zu: only tools of type function are supported", i);
            if (!json_is_string(name)) return bad(r, "tools.%zu: a function tool needs a name", i);
            json_t *f = json_pack("{s:O}", "name", name);
            if (json_is_string(json_object_get(e, "description"))) json_object_set(f, "description", json_object_get(e, "description"));
            if (json_is_object(params)) json_object_set(f, "parameters", params);
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
    }
    json_t *par = json_object_get(b, "parallel_tool_calls");   /* false: at most one function_call item */
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par)) return bad(r, "parallel_tool_calls: must be a boolean");
        json_object_set(chat, "parallel_tool_calls", par);
    }
    if (!tc || json_is_null(tc)) return true;
    const char *s = json_string_value(tc);
    json_t *name = json_object_get(tc, "name");
    if (is(s, "auto") || is(s, "none") || is(s, "required")) json_object_set(chat, "tool_choice", tc);
    else if (is(type_of(tc), "function") && json_is_string(name))
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    else return bad(r, "tool_choice: must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
    return true;
}

static bool options(json_t *b, json_t *chat, srv_reply *r) {
    json_t *prev = json_object_get(b, "previous_response_id"), *bg = json_object_get(b, "background");
    json_t *mt = json_object_get(b, "max_output_tokens"), *fmt = json_object_get(json_object_get(b, "text"), "format");
    json_t *effort = json_object_get(json_object_get(b, "reasoning"), "effort");
    if (prev && !json_is_null(prev))
        return bad(r, "previous_response_id: not supported (the server stores no responses: send the whole conversation as input)");
    if (json_is_true(bg)) return bad(r, "background: not supported");
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) return bad(r, "max_output_tokens: must be an integer >= 1");
        json_object_set(chat, "max_tokens", mt);
    }
    json_t *temp = json_object_get(b, "temperature");   /* OpenAI's range: no negative (chat's greedy) */
    if (json_is_number(temp) && json_number_value(temp) < 0) return bad(r, "temperature: must be >= 0");
    static const char *pass[] = {"temperature", "top_p", "stream", "seed", "top_k", "min_p", "ignore_eos", "repeat_penalty",
                                 "cache_prompt", "draft_max", "loop_guard", "chat_template_kwargs"};
    for (size_t i = 0; i < BS_ARRAY_LEN(pass); i++)
        if (json_object_get(b, pass[i])) json_object_set(chat, pass[i], json_object_get(b, pass[i]));
    if (fmt && !json_is_null(fmt)) {
        const char *t = type_of(fmt);
        if (is(t, "json_schema"))
            json_object_set_new(chat, "response_format", json_pack("{s:s,s:{s:O*}}", "type", "json_schema", "json_schema",
                                                                   "schema", json_object_get(fmt, "schema")));
        else if (is(t, "json_object")) json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        else if (!is(t, "text")) return bad(r, "text.format: type must be text, json_object or json_schema");
    }
    const char *e = json_string_value(effort);
    if (is(e, "none") || is(e, "minimal"))
        json_object_set_new(chat, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", 0));
    return true;
}

/* ---- the answer ------------------------------------------------------------------------------ */

typedef struct rstate {
    srv *s;
    srv_task *t;
    char id[64];               /* resp_... */
    long created;
    json_t *output;            /* the items so far */
    json_t *cur;               /* the open item */
    srv_buf acc;               /* its text or arguments */
    srv_buf *out;              /* streaming: where events go (NULL: not streaming) */
    bool in_think;             /* the output starts inside a think block (the template opened it) */
    bool one_call;             /* parallel_tool_calls false: one function_call item at most */
    long seq;
    srv_blocks bl;
} rstate;

static void event(rstate *a, const char *name, json_t *j) {
    json_object_set_new(j, "type", json_string(name));
    json_object_set_new(j, "sequence_number", json_integer(a->seq++));
    srv_sse_event(a->out, name, j);
}

/* Output tokens spent thinking: those whose text ends by the close of the think block the
 * output starts in (all of them while it is still open); 0 when the output does not think. */
static int reasoning_tokens(const srv_task *t, bool in_think) {
    const size_t end = bs_reasoning_end(t->text ? t->text : "", t->len, in_think);
    int n = 0;
    while (end && n < t->n_toks && t->toks[n].text_end <= end) n++;
    return n;
}

static json_t *usage(const srv_task *t, bool in_think) {
    const srv_timings *tm = &t->tm;
    int in = tm->n_prompt + tm->n_cached;
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     tm->n_cached, "output_tokens", tm->n_gen, "output_tokens_details", "reasoning_tokens",
                     reasoning_tokens(t, in_think), "total_tokens", in + tm->n_gen);
}

/* The response object: in progress (done false: no usage yet) or finished. */
static json_t *response(rstate *a, bool done) {
    const bool cut = done && a->t->finish == SRV_FINISH_LENGTH;
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:n,s:s,s:O,s:b}", "id", a->id, "object", "response", "created_at",
                          (json_int_t)a->created, "status", !done ? "in_progress" : cut ? "incomplete" : "completed",
                          "error", "model", srv_model_name(a->s), "output", a->output, "parallel_tool_calls", !a->one_call);
    json_object_set_new(j, "incomplete_details", cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(j, "usage", done ? usage(a->t, a->in_think) : json_null());
    return j;
}

static json_t *text_part(const char *p, size_t n, const char *type) {
    json_t *j = json_pack("{s:s,s:o}", "type", type, "text", srv_text_json(p, n));
    if (!strcmp(type, "output_text")) {
        json_object_set_new(j, "annotations", json_array());
        json_object_set_new(j, "logprobs", json_array());
    }
    return j;
}

static void r_open(void *ud, int kind, const srv_tool_call *call) {
    rstate *a = ud;
    char id[96];
    const int k = (int)json_array_size(a->output);
    const char *hex = a->id + 5;
    a->acc.len = 0;
    srv_buf_adds(&a->acc, "");
    if (kind == SRV_BLOCK_THINKING) {
        snprintf(id, sizeof id, "rs_%s_%d", hex, k);
        a->cur = json_pack("{s:s,s:s,s:[],s:[]}", "type", "reasoning", "id", id, "summary", "content");
    } else if (kind == SRV_BLOCK_TEXT) {
        snprintf(id, sizeof id, "msg_%s_%d", hex, k);
        a->cur = json_pack("{s:s,s:s,s:s,s:s,s:[]}", "type", "message", "id", id, "status", "in_progress", "role",
                           "assistant", "content");
    } else {
        char cid[96];
        snprintf(id, sizeof id, "fc_%s_%d", hex, k);
        snprintf(cid, sizeof cid, "call_%s_%d", hex, k);
        a->cur = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", "function_call", "id", id, "call_id", cid, "name",
                           call->name, "arguments", "", "status", "in_progress");
    }
    if (!a->out) return;
    event(a, "response.output_item.added", json_pack("{s:i,s:O}", "output_index", k, "item", a->cur));
    if (kind != SRV_BLOCK_TOOL)
        event(a, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", k,
                                                          "content_index", 0, "part",
                                                          text_part("", 0, kind == SRV_BLOCK_TEXT ? "output_text" : "reasoning_text")));
}

static void r_delta(void *ud, int kind, const char *p, size_t n) {
    rstate *a = ud;
    srv_buf_add(&a->acc, p, n);
    if (!a->out) return;
    const int k = (int)json_array_size(a->output);
    const char *id = json_string_value(json_object_get(a->cur, "id"));
    const char *name = kind == SRV_BLOCK_TEXT ? "response.output_text.delta"
                       : kind == SRV_BLOCK_TOOL ? "response.function_call_arguments.delta"
                                                : "response.reasoning_text.delta";
    json_t *j = json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", k, "delta", srv_text_json(p, n));
    if (kind != SRV_BLOCK_TOOL) json_object_set_new(j, "content_index", json_integer(0));
    if (kind == SRV_BLOCK_TEXT) json_object_set_new(j, "logprobs", json_array());
    event(a, name, j);
}

static void r_close(void *ud, int kind) {
    rstate *a = ud;
    const int k = (int)json_array_size(a->output);
    const char *id = json_string_value(json_object_get(a->cur, "id"));
    json_t *part = NULL;
    if (kind == SRV_BLOCK_TOOL) {
        json_object_set_new(a->cur, "arguments", srv_text_json(a->acc.p, a->acc.len));
        json_object_set_new(a->cur, "status", json_string("completed"));
    } else {
        part = text_part(a->acc.p, a->acc.len, kind == SRV_BLOCK_TEXT ? "output_text" : "reasoning_text");
        json_array_append(json_object_get(a->cur, "content"), part);
        if (kind == SRV_BLOCK_TEXT) json_object_set_new(a->cur, "status", json_string("completed"));
    }
    if (a->out) {
        if (kind == SRV_BLOCK_TOOL) {
            event(a, "response.function_call_arguments.done",
                  json_pack("{s:s,s:i,s:O,s:O}", "item_id", id, "output_index", k, "name", json_object_get(a->cur, "name"),
                            "arguments", json_object_get(a->cur, "arguments")));
        } else {
            event(a, kind == SRV_BLOCK_TEXT ? "response.output_text.done" : "response.reasoning_text.done",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", k, "content_index", 0, "text",
                            srv_text_json(a->acc.p, a->acc.len)));
            event(a, "response.content_part.done",
                  json_pack("{s:s,s:i,s:i,s:O}", "item_id", id, "output_index", k, "content_index", 0, "part", part));
        }
        event(a, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", k, "item", a->cur));
    }
    json_decref(part);
    json_array_append_new(a->output, a->cur);
    a->cur = NULL;
}

static const srv_block_ops ops = {r_open, r_delta, r_close};

static rstate *state_new(srv *s, srv_task *t, const srv_gen *g) {
    rstate *a = bs_xcalloc(1, sizeof *a);
    a->s = s;
    a->t = t;
    const char *dash = strchr(g->id, '-');
    snprintf(a->id, sizeof a->id, "resp_%s", dash ? dash + 1 : g->id);
    a->created = g->created;
    a->output = json_array();
    srv_blocks_init(&a->bl, g->in_think, g->tools, g->str_params, g->one_call);
    a->in_think = g->in_think;
    a->one_call = g->one_call;
    return a;
}

static void state_free(void *st) {
    rstate *a = st;
    if (!a) return;
    srv_blocks_free(&a->bl);
    srv_buf_free(&a->acc);
    json_decref(a->output);
    json_decref(a->cur);
    free(a);
}

static void done(srv *s, srv_task *t, const srv_gen *g, srv_reply *r) {
    rstate *a = state_new(s, t, g);
    srv_blocks_feed(&a->bl, t->text ? t->text : "", t->len, true, &ops, a);
    srv_reply_json(r, 200, response(a, true));
    state_free(a);
}

static void keep_error(srv_reply *r) { (void)r; }   /* OpenAI's error shape is this API's */

static void *stream_new(srv *s, srv_task *t, const srv_gen *g) { return state_new(s, t, g); }

static void stream_begin(void *st, srv_buf *out) {
    rstate *a = st;
    a->out = out;
    event(a, "response.created", json_pack("{s:o}", "response", response(a, false)));
    event(a, "response.in_progress", json_pack("{s:o}", "response", response(a, false)));
}

static void stream_step(void *st, const char *text, size_t len, bool fin, srv_buf *out) {
    rstate *a = st;
    srv_task *t = a->t;
    a->out = out;
    if (fin && (t->finish == SRV_FINISH_ERROR || t->finish == SRV_FINISH_SHUTDOWN)) {
        const char *msg = t->finish == SRV_FINISH_SHUTDOWN ? "the server shut down before the generation finished" : t->error;
        event(a, "error", json_pack("{s:s,s:s,s:n}", "code", t->finish == SRV_FINISH_SHUTDOWN ? "unavailable_error" : "server_error",
                                    "message", msg, "param"));
        json_t *resp = response(a, true);
        json_object_set_new(resp, "status", json_string("failed"));
        json_object_set_new(resp, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", msg));
        event(a, "response.failed", json_pack("{s:o}", "response", resp));
        return;
    }
    srv_blocks_feed(&a->bl, text, len, fin, &ops, a);
    if (!fin) return;
    const bool cut = t->finish == SRV_FINISH_LENGTH;
    event(a, cut ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", response(a, true)));
}

const srv_shape srv_responses_shape = {done, keep_error, stream_new, stream_begin, stream_step, state_free, NULL, NULL};

json_t *srv_responses_request(json_t *b, srv_reply *r) {
    json_t *chat = json_object();
    if (input(b, chat, r) && tools(b, chat, r) && options(b, chat, r)) return chat;
    json_decref(chat);
    return NULL;
}
