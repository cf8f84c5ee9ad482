/* server_calls.c: tool calls read from a chat's content as it is generated, so a stream can send
 * each call as the model writes it (OpenAI's tool_calls deltas, Anthropic's input_json_delta,
 * the Responses API's function_call_arguments.delta) and a finished answer, fed all at once,
 * says exactly the same.
 *
 * The Qwen3.5 XML form
 *   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * is a call once its <function=NAME> header is read: the call opens there and its arguments, a
 * JSON object, come a parameter at a time. A parameter the tool's schema types as a string
 * streams as it comes (escaped into a JSON string, the newline the template puts before and after
 * the value trimmed); any other keeps its JSON type where its text parses as JSON (as the
 * template renders non-strings with tojson), else is a string, and comes whole when its
 * </parameter> is read. A key given twice keeps its first value (the first was sent already). A
 * generation that ends inside a call closes it (an open string value keeps the text it has);
 * srv_calls.cut tells that the last call was cut. The Qwen3 JSON form
 * <tool_call>{"name": ..., "arguments": {...}}</tool_call> (what tool_choice's grammar writes)
 * comes whole at its </tool_call> (or at the end of the text, where what came parses). Text that
 * is not a call stays text; whitespace just before a call (its last 256 bytes) and at the end of
 * an answer with calls is dropped; an end inside a call's opening drops that opening (a call cut
 * short, srv_calls.cut). */
#include "server/server.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum { T_TEXT, T_OPEN, T_PARAMS, T_PNAME, T_PSTR, T_PVAL, T_PSKIP, T_AFTER, T_JSON };

#define NAME_MAX_LEN 256
#define WS_HELD 256          /* whitespace held before a call, or read after <tool_call>, at most */

static const char OPEN_TAG[] = "<tool_call>", CLOSE_TAG[] = "</tool_call>";
static const char FN_TAG[] = "<function=", FN_END[] = "</function>";
static const char P_TAG[] = "<parameter=", P_END[] = "</parameter>";
#define LEN(s) (sizeof(s) - 1)

void srv_calls_init(srv_calls *c, const char *str_params, bool one_call) {
    memset(c, 0, sizeof *c);
    c->str_params = str_params;
    c->one_call = one_call;
}

/* Whether the open call's events go out (one_call: the first call's only). */
static bool shown(const srv_calls *c) { return !(c->one_call && c->n_calls > 1); }

void srv_calls_free(srv_calls *c) {
    srv_buf_free(&c->buf);
    srv_buf_free(&c->keys);
    free(c->name);
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r'; }

/* Whether [p, p + n) starts with tag: 1 all of it, 0 a proper prefix of it (more may come), -1 not. */
static int starts(const char *p, size_t n, const char *tag, size_t tn) {
    if (n >= tn) return memcmp(p, tag, tn) ? -1 : 1;
    return memcmp(p, tag, n) ? -1 : 0;
}

/* The longest end of [p, p + n) that is a proper prefix of tag (it may become the tag). */
static size_t tail_prefix(const char *p, size_t n, const char *tag, size_t tn) {
    for (size_t k = BS_MIN(tn - 1, n); k > 0; k--)
        if (!memcmp(p + n - k, tag, k)) return k;
    return 0;
}

/* Bytes at the end of [p, p + n) that begin a UTF-8 sequence not complete yet. */
static size_t utf8_tail(const char *p, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const unsigned char b = (unsigned char)p[n - k];
        if ((b & 0xC0) == 0x80) continue;   /* a continuation byte: look further back */
        const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

static void args(srv_calls *c, const srv_calls_ops *ops, void *ud, const char *p, size_t n) {
    if (n && shown(c)) ops->args(ud, c->n_calls - 1, p, n);
}

/* Text as the inside of a JSON string (no quotes; bad UTF-8 as U+FFFD, as srv_text_json). */
static void args_escaped(srv_calls *c, const srv_calls_ops *ops, void *ud, const char *p, size_t n) {
    if (!n) return;
    json_t *s = srv_text_json(p, n);
    char *t = json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(s);
    if (t && strlen(t) >= 2) args(c, ops, ud, t + 1, strlen(t) - 2);
    free(t);
}

/* A member's opening: {"KEY": or ,"KEY": (the key's kn bytes) */
static void args_key(srv_calls *c, const srv_calls_ops *ops, void *ud, const char *key, size_t kn) {
    json_t *k = json_stringn(key, kn);
    char *kt = k ? json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    args(c, ops, ud, c->n_params++ ? "," : "{", 1);
    if (kt) args(c, ops, ud, kt, strlen(kt));
    args(c, ops, ud, ":", 1);
    free(kt);
}

static void open_call(srv_calls *c, const srv_calls_ops *ops, void *ud, const char *name, size_t n) {
    free(c->name);
    c->name = bs_xmalloc(n + 1);
    memcpy(c->name, name, n);
    c->name[n] = 0;
    c->n_params = 0;
    c->keys.len = 0;
    c->n_calls++;
    if (shown(c)) ops->open(ud, c->n_calls - 1, c->name);
}

/* The XML call ends: its arguments' closing brace. cut: the generation ended inside it. */
static void close_call(srv_calls *c, const srv_calls_ops *ops, void *ud, bool cut) {
    args(c, ops, ud, c->n_params ? "}" : "{}", c->n_params ? 1 : 2);
    if (shown(c)) ops->close(ud, c->n_calls - 1);
    c->cut = cut;
}

static void consume(srv_calls *c, size_t n) {
    c->at += n;
    c->scan = 0;
}

/* The text ended inside an open call: it closes (cut), the rest goes. Returns false (done). */
static bool cut_call(srv_calls *c, const srv_calls_ops *ops, void *ud, size_t n) {
    close_call(c, ops, ud, true);
    consume(c, n);
    c->mode = T_TEXT;
    return false;
}

/* tag in [p + from, p + n), searched from where the last search of this stretch stopped (a long
 * value is not searched again from its start at every feed). */
static const char *find(srv_calls *c, const char *p, size_t n, size_t from, const char *tag, size_t tn) {
    size_t s = c->scan >= tn ? c->scan - tn + 1 : 0;
    if (s < from) s = from;
    const char *e = s < n ? memmem(p + s, n - s, tag, tn) : NULL;
    if (!e) c->scan = n;
    return e;
}

static void text(srv_calls *c, const srv_calls_ops *ops, void *ud, const char *p, size_t n) {
    if (n) ops->text(ud, p, n);
}

/* Whether this call's tool types KEY as a string (str_params: "\nNAME\x1fKEY\n" entries). */
static bool string_param(const srv_calls *c, const char *key, size_t kn) {
    if (!c->str_params || !c->name) return false;
    const size_t nn = strlen(c->name), n = nn + kn + 3;
    char *pat = bs_xmalloc(n + 1);
    snprintf(pat, n + 1, "\n%s\x1f%.*s\n", c->name, (int)kn, key);
    const bool hit = strstr(c->str_params, pat) != NULL;
    free(pat);
    return hit;
}

/* Whether KEY was given already in this call (keys: "\nKEY\n" entries); records it if not. */
static bool seen_key(srv_calls *c, const char *key, size_t kn) {
    for (size_t i = 0; i + kn + 2 <= c->keys.len; i++)
        if (c->keys.p[i] == '\n' && !memcmp(c->keys.p + i + 1, key, kn) && c->keys.p[i + 1 + kn] == '\n') return true;
    if (!c->keys.len) srv_buf_add(&c->keys, "\n", 1);
    srv_buf_add(&c->keys, key, kn);
    srv_buf_add(&c->keys, "\n", 1);
    return false;
}

/* A name up to '>' at p (n bytes there): its length, 0 when it cannot be one (empty, a line
 * break, '<' or NUL in it, not UTF-8, too long), SIZE_MAX when its '>' has not come yet. */
static size_t name_at(const char *p, size_t n) {
    for (size_t i = 0; i < n && i <= NAME_MAX_LEN; i++) {
        if (p[i] == '>') return bs_utf8_valid(p, i, NULL) ? i : 0;   /* (names go out as JSON strings) */
        if (p[i] == '\n' || p[i] == '<' || !p[i]) return 0;
    }
    return n > NAME_MAX_LEN ? 0 : SIZE_MAX;
}

/* ---- one step per mode: true when it moved on, false when it needs more text ---- */

static bool step_text(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const char *o = memmem(p, n, OPEN_TAG, LEN(OPEN_TAG));
    size_t tail = o ? 0 : tail_prefix(p, n, OPEN_TAG, LEN(OPEN_TAG));
    if (final && tail < 2) tail = 0;   /* at the end a lone '<' is text; "<t"... is a call cut short */
    const size_t upto = o ? (size_t)(o - p) : n - tail;
    /* whitespace before a call is held (it goes if a call follows): the last WS_HELD of it, so a
     * long run is not read again at every feed */
    size_t ws = 0;
    while (ws < upto && ws < WS_HELD && is_ws(p[upto - ws - 1])) ws++;
    if (final && !o && !tail && !c->n_calls) ws = 0;   /* an answer without calls keeps its end */
    text(c, ops, ud, p, upto - ws);
    consume(c, upto - ws);
    if (o) {
        c->held = ws;
        c->mode = T_OPEN;
        return true;
    }
    if (final) {   /* the held whitespace of an answer with calls, a call's opening cut short */
        consume(c, ws + tail);
        if (tail) c->cut = true;
    }
    return false;
}

/* Not a call after all: its whitespace and <tool_call> are text; what follows is read again. */
static bool not_a_call(srv_calls *c, const char *p, const srv_calls_ops *ops, void *ud) {
    text(c, ops, ud, p, c->held + LEN(OPEN_TAG));
    consume(c, c->held + LEN(OPEN_TAG));
    c->mode = T_TEXT;
    return true;
}

/* The text ended inside a call's opening (or a JSON-form call): it goes, the call was cut. */
static bool cut_short(srv_calls *c, size_t n) {
    consume(c, n);
    c->cut = true;
    c->mode = T_TEXT;
    return false;
}

static bool step_open(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const size_t q0 = c->held + LEN(OPEN_TAG);
    size_t q = q0;
    while (q < n && q - q0 < WS_HELD && is_ws(p[q])) q++;
    if (q - q0 == WS_HELD) return not_a_call(c, p, ops, ud);
    if (q < n && p[q] == '{') { c->mode = T_JSON; return true; }
    const int f = starts(p + q, n - q, FN_TAG, LEN(FN_TAG));
    if (f < 0) return not_a_call(c, p, ops, ud);
    if (f == 0) return final ? cut_short(c, n) : false;
    const size_t a = q + LEN(FN_TAG), len = name_at(p + a, n - a);
    if (len == 0) return not_a_call(c, p, ops, ud);
    if (len == SIZE_MAX) return final ? cut_short(c, n) : false;
    open_call(c, ops, ud, p + a, len);
    consume(c, a + len + 1);
    c->mode = T_PARAMS;
    return true;
}

static bool step_params(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    size_t k = 0;
    while (k < n && p[k] != '<') k++;   /* whitespace, or text a call does not hold: skipped */
    if (k) { consume(c, k); return true; }
    if (!n || starts(p, n, P_TAG, LEN(P_TAG)) == 0 || starts(p, n, FN_END, LEN(FN_END)) == 0 ||
        starts(p, n, CLOSE_TAG, LEN(CLOSE_TAG)) == 0) {
        return final ? cut_call(c, ops, ud, n) : false;
    }
    if (starts(p, n, P_TAG, LEN(P_TAG)) > 0) {
        c->mode = T_PNAME;
        return true;
    }
    const bool fn_end = starts(p, n, FN_END, LEN(FN_END)) > 0;
    if (fn_end || starts(p, n, CLOSE_TAG, LEN(CLOSE_TAG)) > 0) {   /* a missing </function> is forgiven */
        close_call(c, ops, ud, false);
        consume(c, fn_end ? LEN(FN_END) : LEN(CLOSE_TAG));
        c->mode = fn_end ? T_AFTER : T_TEXT;
        return true;
    }
    consume(c, 1);   /* a '<' that opens nothing */
    return true;
}

static bool step_pname(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const size_t a = LEN(P_TAG), len = name_at(p + a, n - a);
    if (len == SIZE_MAX && !final) return false;
    if (len == 0 || len == SIZE_MAX) {   /* no name: the tag is skipped as text a call does not hold */
        consume(c, a);
        c->mode = T_PARAMS;
        return true;
    }
    const char *key = p + a;
    consume(c, a + len + 1);
    c->lead = true;
    if (seen_key(c, key, len)) {
        c->mode = T_PSKIP;
    } else if (string_param(c, key, len)) {
        args_key(c, ops, ud, key, len);
        args(c, ops, ud, "\"", 1);
        c->mode = T_PSTR;
    } else {
        c->key_len = len;   /* the key stays in keys' last entry until the value ends */
        c->mode = T_PVAL;
    }
    return true;
}

/* A string value: sent as it comes, less what could still be its closing "\n</parameter>". */
static bool step_pstr(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    if (c->lead) {   /* the newline the template puts after <parameter=KEY> */
        if (!n && !final) return false;
        c->lead = false;
        if (n && p[0] == '\n') { consume(c, 1); return true; }
    }
    const char *e = find(c, p, n, 0, P_END, LEN(P_END));
    if (e) {
        size_t v = (size_t)(e - p);
        args_escaped(c, ops, ud, p, v && p[v - 1] == '\n' ? v - 1 : v);
        args(c, ops, ud, "\"", 1);
        consume(c, v + LEN(P_END));
        c->mode = T_PARAMS;
        return true;
    }
    /* (at the end, what had begun to close the value is dropped: "\n</par" is no part of it) */
    size_t keep = BS_MAX(tail_prefix(p, n, "\n</parameter>", LEN(P_END) + 1), tail_prefix(p, n, P_END, LEN(P_END)));
    if (!final) keep = BS_MAX(keep, utf8_tail(p, n));
    args_escaped(c, ops, ud, p, n - keep);
    if (!final) {
        consume(c, n - keep);
        return false;
    }
    args(c, ops, ud, "\"", 1);
    return cut_call(c, ops, ud, n);
}

/* Another value: whole at its </parameter>, typed by its text. */
static bool step_pval(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const char *e = find(c, p, n, 0, P_END, LEN(P_END));
    if (!e) return final ? cut_call(c, ops, ud, n) : false;   /* (a value cut short is not given) */
    const char *va = p, *vb = e;
    if (va < vb && *va == '\n') va++;
    if (vb > va && vb[-1] == '\n') vb--;
    char *val = srv_tool_param_json(va, vb);
    if (val) {
        args_key(c, ops, ud, c->keys.p + c->keys.len - 1 - c->key_len, c->key_len);
        args(c, ops, ud, val, strlen(val));
        free(val);
    }
    consume(c, (size_t)(e - p) + LEN(P_END));
    c->mode = T_PARAMS;
    return true;
}

static bool step_pskip(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const char *e = find(c, p, n, 0, P_END, LEN(P_END));
    if (e) {
        consume(c, (size_t)(e - p) + LEN(P_END));
        c->mode = T_PARAMS;
        return true;
    }
    return final ? cut_call(c, ops, ud, n) : false;
}

/* After </function>: whitespace and the block's </tool_call>. */
static bool step_after(srv_calls *c, const char *p, size_t n, bool final) {
    size_t k = 0;
    while (k < n && is_ws(p[k])) k++;
    const int t = starts(p + k, n - k, CLOSE_TAG, LEN(CLOSE_TAG));
    if (t == 0) {   /* what is left may still become </tool_call> (at the end it goes) */
        consume(c, final ? n : k);
        if (final) c->mode = T_TEXT;
        return false;
    }
    consume(c, k + (t > 0 ? LEN(CLOSE_TAG) : 0));
    c->mode = T_TEXT;
    return true;
}

/* The JSON form: whole at its </tool_call> (or at the end, where what came parses). */
static bool step_json(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    const size_t a = c->held + LEN(OPEN_TAG);
    const char *e = find(c, p, n, a, CLOSE_TAG, LEN(CLOSE_TAG));
    if (!e && !final) return false;
    srv_tool_call tc = {0};
    if (srv_tool_json_call(p + a, e ? e : p + n, &tc) != 0) return e ? not_a_call(c, p, ops, ud) : cut_short(c, n);
    c->n_calls++;
    if (shown(c)) {
        ops->open(ud, c->n_calls - 1, tc.name);
        ops->args(ud, c->n_calls - 1, tc.arguments, strlen(tc.arguments));
        ops->close(ud, c->n_calls - 1);
    }
    c->cut = false;
    free(tc.name);
    free(tc.arguments);
    consume(c, e ? (size_t)(e - p) + LEN(CLOSE_TAG) : n);
    c->mode = T_TEXT;
    return true;
}

static bool step(srv_calls *c, bool final, const srv_calls_ops *ops, void *ud) {
    const char *p = c->buf.p ? c->buf.p + c->at : "";
    const size_t n = c->buf.len - c->at;
    switch (c->mode) {
    case T_TEXT: return step_text(c, p, n, final, ops, ud);
    case T_OPEN: return step_open(c, p, n, final, ops, ud);
    case T_PARAMS: return step_params(c, p, n, final, ops, ud);
    case T_PNAME: return step_pname(c, p, n, final, ops, ud);
    case T_PSTR: return step_pstr(c, p, n, final, ops, ud);
    case T_PVAL: return step_pval(c, p, n, final, ops, ud);
    case T_PSKIP: return step_pskip(c, p, n, final, ops, ud);
    case T_AFTER: return step_after(c, p, n, final);
    default: return step_json(c, p, n, final, ops, ud);
    }
}

void srv_calls_feed(srv_calls *c, const char *p, size_t n, bool final, const srv_calls_ops *ops, void *ud) {
    if (n) srv_buf_add(&c->buf, p, n);
    while (step(c, final, ops, ud)) {}
    if (final) c->at = c->buf.len;
    /* what was read goes (the rest is kept for the next feed) */
    if (c->at) {
        memmove(c->buf.p, c->buf.p + c->at, c->buf.len - c->at);
        c->buf.len -= c->at;
        c->at = 0;
    }
}

bool srv_calls_finish(const srv_task *t, int n_calls, bool cut) {
    return n_calls > 0 && !(cut && t->finish == SRV_FINISH_LENGTH);
}

/* ---- a finished answer's calls: the reader fed the whole text ---- */

typedef struct collect {
    srv_buf rest, args;
    srv_tool_call *calls;
    int n;
} collect;

static void c_text(void *ud, const char *p, size_t n) { srv_buf_add(&((collect *)ud)->rest, p, n); }

static void c_open(void *ud, int index, const char *name) {
    collect *c = ud;
    (void)index;
    c->calls = bs_xrealloc(c->calls, (size_t)(c->n + 1) * sizeof *c->calls);
    c->calls[c->n++] = (srv_tool_call){.name = bs_xstrdup(name)};
    c->args.len = 0;
}

static void c_args(void *ud, int index, const char *p, size_t n) {
    (void)index;
    srv_buf_add(&((collect *)ud)->args, p, n);
}

static void c_close(void *ud, int index) {
    collect *c = ud;
    srv_buf_add(&c->args, "", 0);   /* (the reader gives every call its arguments, {} at least) */
    c->calls[index].arguments = bs_xstrdup(c->args.p);
}

int srv_parse_tool_calls(const char *content, size_t len, const char *str_params, bool one_call, srv_tool_call **calls,
                         srv_buf *rest, bool *cut) {
    static const srv_calls_ops ops = {c_text, c_open, c_args, c_close};
    collect c = {0};
    srv_calls rd;
    srv_calls_init(&rd, str_params, one_call);
    srv_calls_feed(&rd, content, len, true, &ops, &c);
    if (cut) *cut = rd.n_calls && rd.cut;
    srv_calls_free(&rd);
    srv_buf_free(&c.args);
    srv_buf_add(&c.rest, "", 0);
    *rest = c.rest;
    *calls = c.calls;
    return c.n;
}
