/* server_tools.c: the parts of a tool call (server_calls.c reads the calls as they come) and the
 * tools' string parameters from their schemas.
 *
 * Arguments are passed on as the model wrote them (JSON text compacted, not a reprinted copy:
 * 9232.2 stays 9232.2, where a double printed back would read 9232.2000000000007). */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

/* A parameter's value as JSON text: the model's own text, compacted, where it parses as JSON,
 * else the text as a JSON string (bad UTF-8 as U+FFFD). */
char *srv_tool_param_json(const char *a, const char *b) {
    json_t *v = json_loadb(a, (size_t)(b - a), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (v) {
        json_decref(v);
        return compact(a, b);
    }
    json_t *str = srv_text_json(a, (size_t)(b - a));
    char *t = str ? json_dumps(str, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    return t;
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

/* The JSON form {"name": ..., "arguments": {...}} in [a, b): an object's arguments as the model
 * wrote them, a string's as its text. */
int srv_tool_json_call(const char *a, const char *b, srv_tool_call *out) {
    if (memchr(a, 0, (size_t)(b - a))) return -1;   /* (jansson would read up to it; the text is C strings) */
    json_t *j = json_loadb(a, (size_t)(b - a), 0, NULL);
    json_t *name = j ? json_object_get(j, "name") : NULL, *args = j ? json_object_get(j, "arguments") : NULL;
    const char *va = a, *vb = a;
    /* arguments written as a string must hold an object's text (arguments are always an object) */
    const char *as = json_string_value(args);
    json_t *inner = as && !memchr(as, 0, json_string_length(args)) ? json_loads(as, 0, NULL) : NULL;
    const bool ok = json_is_string(name) && json_string_length(name) && !memchr(json_string_value(name), 0, json_string_length(name)) &&
                    (!args || json_is_object(args) || json_is_object(inner)) &&
                    (!json_is_object(args) || raw_arguments(a, b, &va, &vb));
    if (ok) {
        out->name = bs_xstrdup(json_string_value(name));
        out->arguments = json_is_object(inner) ? compact(as, as + strlen(as)) : args ? compact(va, vb) : bs_xstrdup("{}");
    }
    json_decref(inner);
    json_decref(j);
    return ok ? 0 : -1;
}

/* Whether a type (a name or a list of names) is "string", maybe with "null": 1, 0 not, -1 none. */
static int string_type(json_t *type) {
    if (json_is_string(type)) return !strcmp(json_string_value(type), "string");
    if (!json_is_array(type) || !json_array_size(type)) return -1;
    int strs = 0;
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) {
        const char *n = json_string_value(t);
        if (!n || (strcmp(n, "string") && strcmp(n, "null"))) return 0;
        strs += !strcmp(n, "string");
    }
    return strs > 0;
}

/* A schema whose values are strings (or null): "type": "string" or ["string", "null"], or an
 * anyOf / oneOf of such branches and {"type": "null"} with a string among them (OpenAI's strict
 * mode writes optional fields so). */
static bool string_schema(json_t *sch) {
    const int t = string_type(json_object_get(sch, "type"));
    if (t >= 0) return t == 1;
    json_t *alts = json_object_get(sch, "anyOf");
    if (!alts) alts = json_object_get(sch, "oneOf");
    bool any_str = false;
    size_t i;
    json_t *alt;
    json_array_foreach(alts, i, alt) {
        json_t *at = json_object_get(alt, "type");
        const bool is_null = json_is_string(at) && !strcmp(json_string_value(at), "null");
        if (!is_null && string_type(at) != 1) return false;
        any_str |= !is_null;
    }
    return any_str;
}

/* Each tool's parameters whose schema types them as strings only: "\nNAME\x1fKEY\n" entries, for
 * server_calls.c (a value of such a parameter is a string even where it reads as JSON: "42"), or
 * NULL. tools: the request's array. */
char *srv_tool_string_params(json_t *tools) {
    srv_buf b = {0};
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        const char *key;
        json_t *sch;
        if (!name || strchr(name, '\n') || strchr(name, '\x1f')) continue;
        json_object_foreach(props, key, sch) {
            if (!string_schema(sch) || strchr(key, '\n')) continue;
            srv_buf_adds(&b, "\n");
            srv_buf_adds(&b, name);
            srv_buf_adds(&b, "\x1f");
            srv_buf_adds(&b, key);
            srv_buf_adds(&b, "\n");
        }
    }
    return b.p;
}

void srv_free_tool_calls(srv_tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
