/* server_tools.c: tool calls in a Qwen3.5 model's output -> OpenAI tool_calls.
 *
 * The Qwen3.5 template teaches the XML form
 *   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * and Qwen3 models also write <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>.
 * Both are accepted. A parameter value that parses as JSON (numbers, booleans, objects, ...)
 * keeps its type and its text, anything else is a string, as the template's own rendering
 * distinguishes them. Arguments are passed on as the model wrote them (JSON text, not a
 * reprinted copy). A block that does not parse stays in the content. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static char *dup_range(const char *a, const char *b) {
    char *s = bs_xmalloc((size_t)(b - a) + 1);
    memcpy(s, a, (size_t)(b - a));
    s[b - a] = 0;
    return s;
}

/* Trim one newline on each side (the template puts the value on its own lines). */
static void trim_nl(const char **a, const char **b) {
    if (*a < *b && **a == '\n') (*a)++;
    if (*b > *a && (*b)[-1] == '\n') (*b)--;
}

/* JSON text [a, b) without the whitespace between its tokens (strings kept byte for byte): the
 * compact form, with numbers and escapes as the model wrote them. */
static char *compact(const char *a, const char *b) {
    char *o = bs_xmalloc((size_t)(b - a) + 1), *w = o;
    bool in_str = false;
    for (const char *p = a; p < b; p++) {
        if (in_str) {
            *w++ = *p;
            if (*p == '\\' && p + 1 < b) *w++ = *++p;
            else if (*p == '"') in_str = false;
        } else if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            *w++ = *p;
            in_str = *p == '"';
        }
    }
    *w = 0;
    return o;
}

/* A parameter's value as JSON text: the model's own text, compacted, where it parses as JSON (its
 * numbers as written: 9232.2 stays 9232.2, where a double printed back would read
 * 9232.2000000000007), else the text as a JSON string. NULL where it is not valid UTF-8. */
static char *param_json(const char *a, const char *b) {
    json_t *v = json_loadb(a, (size_t)(b - a), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (v) {
        json_decref(v);
        return compact(a, b);
    }
    json_t *str = json_stringn(a, (size_t)(b - a));
    char *t = str ? json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    return t;
}

/* One call's arguments in order, a key given twice keeping its first place and its last value
 * (as a JSON object read from it would). */
typedef struct { char **key, **val; int n; } arg_list;

static void args_set(arg_list *l, char *key, char *val) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->key[i], key)) {
            free(key);
            free(l->val[i]);
            l->val[i] = val;
            return;
        }
    l->key = bs_xrealloc(l->key, (size_t)(l->n + 1) * sizeof *l->key);
    l->val = bs_xrealloc(l->val, (size_t)(l->n + 1) * sizeof *l->val);
    l->key[l->n] = key;
    l->val[l->n++] = val;
}

/* {"KEY": VALUE, ...} as text; frees l. */
static char *args_text(arg_list *l) {
    srv_buf b = {0};
    srv_buf_adds(&b, "{");
    for (int i = 0; i < l->n; i++) {
        json_t *k = json_string(l->key[i]);
        char *kt = k ? json_dumps(k, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (kt) {
            if (b.len > 1) srv_buf_adds(&b, ",");
            srv_buf_adds(&b, kt);
            srv_buf_adds(&b, ":");
            srv_buf_adds(&b, l->val[i]);
        }
        free(kt);
        json_decref(k);
        free(l->key[i]);
        free(l->val[i]);
    }
    srv_buf_adds(&b, "}");
    free(l->key);
    free(l->val);
    return b.p;
}

/* The XML form between <tool_call> and </tool_call>. */
static int parse_xml(const char *a, const char *b, srv_tool_call *out) {
    const char *f = strstr(a, "<function=");
    if (!f || f >= b) return -1;
    f += strlen("<function=");
    const char *fe = memchr(f, '>', (size_t)(b - f));
    const char *end = strstr(f, "</function>");
    if (!fe || fe == f || !end || end > b) return -1;
    arg_list args = {0};
    const char *p = fe + 1;
    for (;;) {
        const char *k = strstr(p, "<parameter=");
        if (!k || k >= end) break;
        k += strlen("<parameter=");
        const char *ke = memchr(k, '>', (size_t)(end - k));
        const char *ve = ke ? strstr(ke, "</parameter>") : NULL;
        if (!ke || !ve || ve > end) { free(args_text(&args)); return -1; }
        const char *va = ke + 1, *vb = ve;
        trim_nl(&va, &vb);
        char *val = param_json(va, vb);
        if (val) args_set(&args, dup_range(k, ke), val);
        p = ve + strlen("</parameter>");
    }
    out->name = dup_range(f, fe);
    out->arguments = args_text(&args);
    return 0;
}

/* ---- the raw text of a JSON value (in text jansson has already accepted) ---- */

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *skip_string(const char *p, const char *e) {   /* p at the opening quote */
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < e ? p + 1 : e;
}

static const char *skip_value(const char *p, const char *e) {
    if (p < e && *p == '"') return skip_string(p, e);
    if (p < e && (*p == '{' || *p == '[')) {
        int depth = 0;
        while (p < e) {
            if (*p == '"') { p = skip_string(p, e); continue; }
            if (*p == '{' || *p == '[') depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
            p++;
        }
        return e;
    }
    while (p < e && !strchr(",}] \t\r\n", *p)) p++;   /* a number or a literal */
    return p;
}

/* The text of the top-level member "arguments" of the object in [a, b) (its last one, as the
 * parsed object holds); false when it has none. */
static bool raw_arguments(const char *a, const char *b, const char **va, const char **vb) {
    const char *p = skip_ws(a, b);
    bool found = false;
    if (p == b || *p != '{') return false;
    for (p = skip_ws(p + 1, b); p < b && *p == '"';) {
        const char *k0 = p, *k1 = skip_string(p, b);
        json_t *key = json_loadb(k0, (size_t)(k1 - k0), JSON_DECODE_ANY, NULL);
        const bool is_args = json_is_string(key) && !strcmp(json_string_value(key), "arguments");
        json_decref(key);
        p = skip_ws(k1, b);
        if (p == b || *p != ':') return false;
        const char *v0 = skip_ws(p + 1, b), *v1 = skip_value(v0, b);
        if (is_args) *va = v0, *vb = v1, found = true;
        p = skip_ws(v1, b);
        if (p < b && *p == ',') p = skip_ws(p + 1, b);
    }
    return found;
}

/* The JSON form {"name": ..., "arguments": {...}}: an object's arguments as the model wrote
 * them, a string's as its text. */
static int parse_json(const char *a, const char *b, srv_tool_call *out) {
    json_t *j = json_loadb(a, (size_t)(b - a), 0, NULL);
    json_t *name = j ? json_object_get(j, "name") : NULL, *args = j ? json_object_get(j, "arguments") : NULL;
    const char *va = a, *vb = a;
    if (!json_is_string(name) || (args && !json_is_object(args) && !json_is_string(args)) ||
        (json_is_object(args) && !raw_arguments(a, b, &va, &vb))) {
        json_decref(j);
        return -1;
    }
    out->name = bs_xstrdup(json_string_value(name));
    out->arguments = json_is_string(args) ? bs_xstrdup(json_string_value(args)) : args ? compact(va, vb) : bs_xstrdup("{}");
    json_decref(j);
    return 0;
}

int srv_parse_tool_calls(const char *content, srv_tool_call **calls, char **rest) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    srv_buf kept = {0};
    srv_tool_call *out = NULL;
    int n = 0;
    const char *p = content;
    srv_buf_adds(&kept, "");
    for (;;) {
        const char *s = strstr(p, open);
        const char *e = s ? strstr(s, close) : NULL;
        if (!s || !e) break;
        const char *a = s + strlen(open), *b = e;
        while (a < b && (*a == '\n' || *a == ' ')) a++;
        srv_tool_call tc = {0};
        int ok = *a == '{' ? parse_json(a, b, &tc) : parse_xml(a, b, &tc);
        srv_buf_add(&kept, p, (size_t)(s - p));
        if (ok == 0) {
            out = bs_xrealloc(out, (size_t)(n + 1) * sizeof *out);
            out[n++] = tc;
        } else {
            srv_buf_add(&kept, s, (size_t)(e + strlen(close) - s));
        }
        p = e + strlen(close);
    }
    srv_buf_adds(&kept, p);
    /* the content around the calls: trim the whitespace the calls were separated by */
    size_t len = kept.len;
    while (len && (kept.p[len - 1] == '\n' || kept.p[len - 1] == ' ')) len--;
    kept.p[len] = 0;
    *rest = kept.p;
    *calls = out;
    return n;
}

void srv_free_tool_calls(srv_tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
