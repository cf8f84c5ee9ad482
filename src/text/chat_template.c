/* chat_template.c: see chat_template.h. The Qwen3.5 rules are re-expressed in C from the
 * template's behaviour; Python/Jinja details that change bytes (str.strip's whitespace set,
 * json.dumps separators and float repr, str() of True/None) are reproduced exactly. */
#include "text/chat_template.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a growable string ----------------------------------------------------------------- */

/* spans: the byte ranges that came from the request (message content, reasoning, tool names,
 * arguments and definitions), recorded for bs_chat_render_spans */
typedef struct { char *s; size_t n, cap; bs_chat_span *sp; size_t n_sp, cap_sp; } sbuf;

static void sb_addn(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->s = bs_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_add(sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

/* Mark b->s[begin, b->n) as request text (merged with a span that ends where it begins). */
static void sb_mark(sbuf *b, size_t begin) {
    if (begin >= b->n) return;
    if (b->n_sp && b->sp[b->n_sp - 1].end == begin) { b->sp[b->n_sp - 1].end = b->n; return; }
    if (b->n_sp == b->cap_sp) b->sp = bs_xrealloc(b->sp, (b->cap_sp = 2 * b->cap_sp + 8) * sizeof *b->sp);
    b->sp[b->n_sp++] = (bs_chat_span){begin, b->n};
}
/* Append request text (content and the like), marked. */
static void sb_text(sbuf *b, const char *s) {
    size_t at = b->n;
    sb_add(b, s);
    sb_mark(b, at);
}

/* ---- Python string helpers ------------------------------------------------------------- */

/* str.isspace() for one code point (what Jinja's trim filter strips). */
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python s.strip() on s[0..n): sets *b and *e to the kept byte range. Invalid UTF-8 stops it. */
static void py_strip(const char *s, size_t n, size_t *b, size_t *e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = bs_utf8_next(u + i, n - i, &cp);
        if (k <= 0 || !py_isspace(cp)) break;
        i += (size_t)k;
    }
    size_t j = n;
    while (j > i) {
        size_t st = j - 1;
        while (st > i && (u[st] & 0xC0) == 0x80) st--;
        uint32_t cp;
        int k = bs_utf8_next(u + st, j - st, &cp);
        if (k <= 0 || (size_t)k != j - st || !py_isspace(cp)) break;
        j = st;
    }
    *b = i;
    *e = j;
}

/* A malloc'd, stripped copy (NULL content counts as ""). */
static char *trimmed(const char *s) {
    if (!s) s = "";
    size_t b, e;
    py_strip(s, strlen(s), &b, &e);
    char *r = bs_xmalloc(e - b + 1);
    memcpy(r, s + b, e - b);
    r[e - b] = 0;
    return r;
}

static bool starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }
/* Last occurrence of needle in hay[0..n), or NULL. */
static const char *last_occurrence(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(hay + i, needle, k) == 0) return hay + i;
    return NULL;
}

/* ---- json.dumps(ensure_ascii=False) and str() ------------------------------------------ */

/* repr(float): the shortest digits that round-trip, fixed notation for exponents -4..15. */
static void py_float(sbuf *b, double v) {
    char buf[64], digits[32];
    if (isnan(v)) { sb_add(b, "NaN"); return; }
    if (isinf(v)) { sb_add(b, v < 0 ? "-Infinity" : "Infinity"); return; }
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof buf, "%.*e", p - 1, v);
    char *e = strchr(buf, 'e');
    int exp = atoi(e + 1), nd = 0;
    for (char *q = buf; q < e; q++) if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    if (signbit(v)) sb_add(b, "-");
    if (exp < -4 || exp >= 16) {
        sb_addn(b, digits, 1);
        if (nd > 1) { sb_add(b, "."); sb_addn(b, digits + 1, (size_t)nd - 1); }
        snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
        sb_add(b, buf);
    } else if (exp < 0) {
        sb_add(b, "0.");
        for (int i = -1; i > exp; i--) sb_add(b, "0");
        sb_add(b, digits);
    } else {
        for (int i = 0; i <= exp; i++) sb_addn(b, i < nd ? digits + i : "0", 1);
        sb_add(b, ".");
        sb_add(b, nd > exp + 1 ? digits + exp + 1 : "0");
    }
}

static void py_json_string(sbuf *b, const char *s, size_t n) {
    sb_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\r': sb_add(b, "\\r"); break;
        case '\t': sb_add(b, "\\t"); break;
        case '\b': sb_add(b, "\\b"); break;
        case '\f': sb_add(b, "\\f"); break;
        default:
            if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); sb_add(b, esc); }
            else sb_addn(b, (const char *)&c, 1);
        }
    }
    sb_add(b, "\"");
}

static void py_tojson(sbuf *b, const json_t *v) {
    char buf[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        sb_add(b, "{");
        json_object_foreach((json_t *)v, key, val) {
            if (!first) sb_add(b, ", ");
            first = false;
            py_json_string(b, key, strlen(key));
            sb_add(b, ": ");
            py_tojson(b, val);
        }
        sb_add(b, "}");
        break;
    }
    case JSON_ARRAY:
        sb_add(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) sb_add(b, ", ");
            py_tojson(b, json_array_get(v, i));
        }
        sb_add(b, "]");
        break;
    case JSON_STRING: py_json_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_add(b, buf);
        break;
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: sb_add(b, "true"); break;
    case JSON_FALSE: sb_add(b, "false"); break;
    case JSON_NULL: sb_add(b, "null"); break;
    }
}

/* A tool-call argument value: strings raw; containers tojson; scalars tojson (Qwen3.6) or
 * Python str() (Qwen3.5: True / False / None, float repr). */
static void render_arg_raw(sbuf *b, const json_t *v, bool json_scalars) {
    if (json_is_string(v)) { sb_addn(b, json_string_value(v), json_string_length(v)); return; }
    if (json_is_object(v) || json_is_array(v) || json_scalars) { py_tojson(b, v); return; }
    if (json_is_true(v)) sb_add(b, "True");
    else if (json_is_false(v)) sb_add(b, "False");
    else if (json_is_null(v)) sb_add(b, "None");
    else py_tojson(b, v);   /* numbers print the same both ways */
}
static void render_arg(sbuf *b, const json_t *v, bool json_scalars) {
    size_t at = b->n;
    render_arg_raw(b, v, json_scalars);
    sb_mark(b, at);
}

/* ---- detection ------------------------------------------------------------------------- */

void bs_chat_template_detect(const char *tmpl, bs_chat_template *out) {
    memset(out, 0, sizeof *out);
    out->kind = BS_CHAT_CHATML;
    out->think_default = true;
    if (!tmpl) return;
    if (strstr(tmpl, "<function=") && strstr(tmpl, "<think>") && strstr(tmpl, "<tool_response>"))
        out->kind = BS_CHAT_QWEN35;
    out->has_preserve = strstr(tmpl, "preserve_thinking") != NULL;
    out->think_needs_reasoning = strstr(tmpl, "and reasoning_content") != NULL;
    out->args_json_scalars = strstr(tmpl, "args_value | string if args_value is string") != NULL;
    /* the official template closes the think block only when enable_thinking is false;
     * re-distributed copies that open it only when it is true default to thinking off */
    if (strstr(tmpl, "enable_thinking is true") && !strstr(tmpl, "enable_thinking is false"))
        out->think_default = false;
}

const char *bs_chat_kind_name(bs_chat_kind k) { return k == BS_CHAT_QWEN35 ? "qwen3.5" : "chatml"; }

/* ---- rendering ------------------------------------------------------------------------- */

static const char tools_instructions[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE "
    "the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your "
    "current knowledge and do not tell the user about function calls\n</IMPORTANT>";

static int render_tools_system(sbuf *b, const json_t *tools, const bs_chat_msg *msgs) {
    sb_add(b, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        sb_add(b, "\n");
        size_t at = b->n;
        py_tojson(b, json_array_get(tools, i));
        sb_mark(b, at);
    }
    sb_add(b, "\n</tools>");
    sb_add(b, tools_instructions);
    if (!strcmp(msgs[0].role, "system")) {
        char *c = trimmed(msgs[0].content);
        if (*c) { sb_add(b, "\n\n"); sb_text(b, c); }
        free(c);
    }
    sb_add(b, "<|im_end|>\n");
    return 0;
}

/* Index of the last user message that is a real query (not wrapped tool output), or -1. */
static long last_query_index(const bs_chat_msg *msgs, size_t n) {
    for (size_t i = n; i-- > 0;) {
        if (strcmp(msgs[i].role, "user")) continue;
        char *c = trimmed(msgs[i].content);
        bool tool_output = starts_with(c, "<tool_response>") && bs_ends_with(c, "</tool_response>");
        free(c);
        if (!tool_output) return (long)i;
    }
    return -1;
}

/* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') and
 * content.split('</think>')[-1].lstrip('\n'), as the template writes it. */
static void split_think(const char *c, char **reasoning, const char **rest) {
    const char *close = strstr(c, "</think>");
    size_t n = (size_t)(close - c);
    while (n > 0 && c[n - 1] == '\n') n--;
    const char *open = last_occurrence(c, n, "<think>");
    const char *r = open ? open + 7 : c;
    while (r < c + n && *r == '\n') r++;
    *reasoning = bs_xmalloc((size_t)(c + n - r) + 1);
    memcpy(*reasoning, r, (size_t)(c + n - r));
    (*reasoning)[c + n - r] = 0;
    const char *after = last_occurrence(c, strlen(c), "</think>") + 8;
    while (*after == '\n') after++;
    *rest = after;
}

static int render_tool_calls(sbuf *b, const bs_chat_msg *m, const char *content, bool json_scalars) {
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const bs_chat_tool_call *tc = &m->tool_calls[j];
        if (!tc->name) return bs_error("tool call %zu has no function name", j);
        if (j == 0) {
            char *c = trimmed(content);
            if (*c) sb_add(b, "\n\n");
            free(c);
        } else {
            sb_add(b, "\n");
        }
        sb_add(b, "<tool_call>\n<function=");
        sb_text(b, tc->name);
        sb_add(b, ">\n");
        if (tc->arguments) {
            json_error_t err;
            json_t *args = json_loads(tc->arguments, JSON_DECODE_ANY, &err);
            if (!args || !json_is_object(args)) {
                json_decref(args);
                return bs_error("arguments of tool call '%s' are not a JSON object", tc->name);
            }
            const char *key;
            json_t *val;
            json_object_foreach(args, key, val) {
                sb_add(b, "<parameter=");
                sb_text(b, key);
                sb_add(b, ">\n");
                render_arg(b, val, json_scalars);
                sb_add(b, "\n</parameter>\n");
            }
            json_decref(args);
        }
        sb_add(b, "</function>\n</tool_call>");
    }
    return 0;
}

static int render_assistant(sbuf *b, const bs_chat_template *t, const bs_chat_msg *m, const char *content,
                            bool keep_reasoning) {
    char *reasoning = NULL;
    const char *body = content;
    if (m->reasoning) reasoning = bs_xstrdup(m->reasoning);
    else if (strstr(content, "</think>")) split_think(content, &reasoning, &body);
    char *r = trimmed(reasoning);
    free(reasoning);
    sb_add(b, "<|im_start|>assistant\n");
    if (keep_reasoning && (*r || !t->think_needs_reasoning)) {
        sb_add(b, "<think>\n");
        sb_text(b, r);
        sb_add(b, "\n</think>\n\n");
    }
    sb_text(b, body);
    free(r);
    if (render_tool_calls(b, m, body, t->args_json_scalars)) return -1;
    sb_add(b, "<|im_end|>\n");
    return 0;
}

static int render_qwen35(sbuf *b, const bs_chat_template *t, const bs_chat_msg *msgs, size_t n,
                         const bs_chat_opts *o, const json_t *tools) {
    if (n == 0) return bs_error("No messages provided.");
    if (tools && json_array_size(tools) > 0) {
        render_tools_system(b, tools, msgs);
    } else if (!strcmp(msgs[0].role, "system")) {
        char *c = trimmed(msgs[0].content);
        sb_add(b, "<|im_start|>system\n");
        sb_text(b, c);
        sb_add(b, "<|im_end|>\n");
        free(c);
    }
    long lq = last_query_index(msgs, n);
    if (lq < 0) return bs_error("No user query found in messages.");
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        char *c = trimmed(msgs[i].content);
        int rc = 0;
        if (!strcmp(role, "system")) {
            if (i != 0) rc = bs_error("System message must be at the beginning.");
        } else if (!strcmp(role, "user")) {
            sb_add(b, "<|im_start|>user\n");
            sb_text(b, c);
            sb_add(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            bool keep = (t->has_preserve && o->preserve_thinking) || (long)i > lq;
            rc = render_assistant(b, t, &msgs[i], c, keep);
        } else if (!strcmp(role, "tool")) {
            if (i > 0 && strcmp(msgs[i - 1].role, "tool")) sb_add(b, "<|im_start|>user");
            sb_add(b, "\n<tool_response>\n");
            sb_text(b, c);
            sb_add(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(msgs[i + 1].role, "tool")) sb_add(b, "<|im_end|>\n");
        } else {
            rc = bs_error("Unexpected message role.");
        }
        free(c);
        if (rc) return -1;
    }
    if (o->add_generation_prompt) {
        bool think = o->enable_thinking < 0 ? t->think_default : o->enable_thinking > 0;
        sb_add(b, think ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    }
    return 0;
}

static int render_chatml(sbuf *b, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *o) {
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<|im_start|>");
        sb_add(b, msgs[i].role);
        sb_add(b, "\n");
        sb_text(b, msgs[i].content ? msgs[i].content : "");
        sb_add(b, "<|im_end|>\n");
    }
    if (o->add_generation_prompt) sb_add(b, "<|im_start|>assistant\n");
    return 0;
}

char *bs_chat_render(const bs_chat_template *t, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *o) {
    return bs_chat_render_spans(t, msgs, n, o, NULL, NULL);
}

char *bs_chat_render_spans(const bs_chat_template *t, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *o,
                           bs_chat_span **spans, size_t *n_spans) {
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (n && !msgs) { bs_error("%zu messages but no array of them", n); return NULL; }
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) { bs_error("message %zu has no role", i); return NULL; }
        if (msgs[i].n_tool_calls && !msgs[i].tool_calls) {
            bs_error("message %zu: %zu tool calls but no array of them", i, msgs[i].n_tool_calls);
            return NULL;
        }
    }
    json_t *tools = NULL;
    if (o->tools) {
        json_error_t err;
        tools = json_loads(o->tools, 0, &err);
        if (!tools || !json_is_array(tools)) {
            bs_error("tools must be a JSON array (%s)", tools ? "got another JSON value" : err.text);
            json_decref(tools);
            return NULL;
        }
    }
    sbuf b = {0};
    sb_add(&b, "");
    int rc = t->kind == BS_CHAT_QWEN35 ? render_qwen35(&b, t, msgs, n, o, tools) : render_chatml(&b, msgs, n, o);
    json_decref(tools);
    if (rc) { free(b.s); free(b.sp); return NULL; }
    if (spans) *spans = b.sp, *n_spans = b.n_sp;
    else free(b.sp);
    return b.s;
}
