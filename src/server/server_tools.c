/* server_tools.c: tool calls in a Qwen3.5 model's output -> OpenAI tool_calls.
 *
 * The Qwen3.5 template teaches the XML form
 *   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * and Qwen3 models also write <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>.
 * Both are accepted. A parameter value that parses as JSON (numbers, booleans, objects, ...)
 * keeps its type, anything else is a string, as the template's own rendering distinguishes
 * them. A block that does not parse stays in the content. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
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

static json_t *param_value(const char *a, const char *b) {
    char *s = dup_range(a, b);
    json_t *v = json_loads(s, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!v) v = json_string(s);
    free(s);
    return v;
}

/* The XML form between <tool_call> and </tool_call>. */
static int parse_xml(const char *a, const char *b, srv_tool_call *out) {
    const char *f = strstr(a, "<function=");
    if (!f || f >= b) return -1;
    f += strlen("<function=");
    const char *fe = memchr(f, '>', (size_t)(b - f));
    const char *end = strstr(f, "</function>");
    if (!fe || fe == f || !end || end > b) return -1;
    json_t *args = json_object();
    const char *p = fe + 1;
    for (;;) {
        const char *k = strstr(p, "<parameter=");
        if (!k || k >= end) break;
        k += strlen("<parameter=");
        const char *ke = memchr(k, '>', (size_t)(end - k));
        const char *ve = ke ? strstr(ke, "</parameter>") : NULL;
        if (!ke || !ve || ve > end) { json_decref(args); return -1; }
        const char *va = ke + 1, *vb = ve;
        trim_nl(&va, &vb);
        char *key = dup_range(k, ke);
        json_object_set_new(args, key, param_value(va, vb));
        free(key);
        p = ve + strlen("</parameter>");
    }
    out->name = dup_range(f, fe);
    out->arguments = json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(args);
    return 0;
}

/* The JSON form {"name": ..., "arguments": {...}}. */
static int parse_json(const char *a, const char *b, srv_tool_call *out) {
    json_t *j = json_loadb(a, (size_t)(b - a), 0, NULL);
    json_t *name = j ? json_object_get(j, "name") : NULL, *args = j ? json_object_get(j, "arguments") : NULL;
    if (!json_is_string(name) || (args && !json_is_object(args) && !json_is_string(args))) {
        json_decref(j);
        return -1;
    }
    out->name = bs_xstrdup(json_string_value(name));
    out->arguments = json_is_string(args) ? bs_xstrdup(json_string_value(args))
                     : args ? json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII) : bs_xstrdup("{}");
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
