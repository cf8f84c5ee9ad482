/* grammar_schema.c: JSON schema -> GBNF (grammar.h), for response_format / json_schema.
 *
 * Each schema becomes a rule; objects list their properties in the schema's order, required
 * ones first and always present, optional ones each optional; numbers and whitespace have
 * bounded lengths so that a model cannot pad forever. Keywords that only narrow values without
 * changing the structure (description, title, format, minLength, ...) are ignored; those that
 * would change it and are not handled (allOf, not, patternProperties, if/then) are refused. */
#include "sample/grammar.h"
#include "io/util.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct sbuf { char *p; size_t len, cap; } sbuf;

static void put(sbuf *b, const char *s) {
    const size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        b->cap = BS_MAX(2 * b->cap, b->len + n + 256);
        b->p = bs_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

static void putf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp);
}

typedef struct conv {
    sbuf out;                  /* rule definitions */
    json_t *root;
    int n_rules, depth;
    json_t *refs;              /* "$ref" -> rule name, for recursive schemas */
    bool failed, has_char;
} conv;

static const char BASE[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,8} )?\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ( ws \",\" ws string ws \":\" ws value )* )? ws \"}\"\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n";

/* A GBNF string literal matching the JSON text of v exactly (e.g. a property name or an enum
 * value), appended to b. */
static void put_literal(sbuf *b, json_t *v) {
    char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    put(b, "\"");
    for (const char *c = j ? j : ""; *c; c++) {
        char e[8];
        if (*c == '"' || *c == '\\') snprintf(e, sizeof e, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) snprintf(e, sizeof e, "\\x%02x", (unsigned char)*c);
        else e[0] = *c, e[1] = 0;
        put(b, e);
    }
    put(b, "\"");
    free(j);
}

static int fail(conv *c, const char *fmt, const char *what) {
    if (!c->failed) bs_error(fmt, what);
    c->failed = true;
    return -1;
}

static int rule_for(conv *c, json_t *s, char *name, size_t cap);

/* Rule body for an object schema. */
static int object_body(conv *c, json_t *s, sbuf *body) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (!json_is_object(props) || !json_object_size(props)) {
        put(body, "object");
        return 0;
    }
    const size_t n = json_object_size(props);
    char (*kv)[48] = bs_xcalloc(n, sizeof *kv);
    bool *is_req = bs_xcalloc(n, sizeof *is_req);
    const char *key;
    json_t *ps;
    size_t i = 0, n_req = 0;
    json_object_foreach(props, key, ps) {
        size_t k;
        json_t *r;
        json_array_foreach(req, k, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) is_req[i] = true;
        char vr[48];
        if (rule_for(c, ps, vr, sizeof vr)) break;
        snprintf(kv[i], sizeof kv[i], "kv%d", c->n_rules++);
        sbuf line = {0};
        putf(&line, "%s ::= ", kv[i]);
        json_t *name = json_string(key);
        put_literal(&line, name);
        json_decref(name);
        putf(&line, " ws \":\" ws %s\n", vr);
        put(&c->out, line.p);
        free(line.p);
        n_req += is_req[i];
        i++;
    }
    if (c->failed) { free(kv); free(is_req); return -1; }
    put(body, "\"{\" ws ");
    bool first = true;
    for (i = 0; i < n; i++)
        if (is_req[i]) {
            putf(body, "%s%s ", first ? "" : "\",\" ws ", kv[i]);
            first = false;
        }
    if (n_req < n) {   /* optional ones: T_j ::= ( "," ws kv_j )? T_{j+1}, in order */
        char tails[64][48];
        int nt = 0;
        for (i = 0; i < n && nt < 64; i++) if (!is_req[i]) snprintf(tails[nt++], 48, "%s", kv[i]);
        const int t0 = c->n_rules;
        c->n_rules += nt + 1;
        for (int k = 0; k < nt; k++) putf(&c->out, "opt%d ::= ( \",\" ws %s )? opt%d\n", t0 + k, tails[k], t0 + k + 1);
        putf(&c->out, "opt%d ::= \"\"\n", t0 + nt);
        if (n_req) {
            putf(body, "opt%d ", t0);
        } else {   /* no required property: the first present one takes no comma */
            put(body, "( ");
            for (int k = 0; k < nt; k++) putf(body, "%s%s opt%d ", k ? "| " : "", tails[k], t0 + k + 1);
            put(body, ")? ");
        }
    }
    put(body, "ws \"}\"");
    free(kv);
    free(is_req);
    return 0;
}

static int array_body(conv *c, json_t *s, sbuf *body) {
    json_t *items = json_object_get(s, "items");
    char ir[48] = "value";
    if (items && rule_for(c, items, ir, sizeof ir)) return -1;
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    const long lo = json_is_integer(mn) ? (long)json_integer_value(mn) : 0;
    const long hi = json_is_integer(mx) ? (long)json_integer_value(mx) : -1;
    if (lo < 0 || lo > 32 || (hi >= 0 && (hi < lo || hi > 32))) return fail(c, "json schema: %s out of the supported range 0..32", "minItems/maxItems");
    put(body, "\"[\" ws ");
    if (hi == 0) {
        put(body, "ws \"]\"");
        return 0;
    }
    char more[48];
    if (hi < 0) snprintf(more, sizeof more, "( ws \",\" ws %s )*", ir);
    else snprintf(more, sizeof more, "( ws \",\" ws %s ){%ld,%ld}", ir, lo ? lo - 1 : 0, hi - 1);
    if (hi < 0 && lo > 1) snprintf(more, sizeof more, "( ws \",\" ws %s ){%ld,}", ir, lo - 1);
    putf(body, lo ? "%s %s" : "( %s %s )?", ir, more);
    put(body, " ws \"]\"");
    return 0;
}

static int type_body(conv *c, json_t *s, const char *type, sbuf *body) {
    if (!strcmp(type, "object")) return object_body(c, s, body);
    if (!strcmp(type, "array")) return array_body(c, s, body);
    json_t *mx = json_object_get(s, "maxLength"), *mn = json_object_get(s, "minLength");
    if (!strcmp(type, "string") && (json_is_integer(mx) || json_is_integer(mn))) {   /* bounded length */
        const long lo = json_is_integer(mn) ? (long)json_integer_value(mn) : 0;
        const long hi = json_is_integer(mx) ? (long)json_integer_value(mx) : -1;
        if (lo < 0 || lo > 64 || hi > 64 || (hi >= 0 && hi < lo))
            return fail(c, "json schema: %s out of the supported range 0..64", "minLength/maxLength");
        if (!c->has_char) {
            put(&c->out, "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n");
            c->has_char = true;
        }
        if (hi < 0) putf(body, "\"\\\"\" char{%ld,} \"\\\"\"", lo);
        else putf(body, "\"\\\"\" char{%ld,%ld} \"\\\"\"", lo, hi);
        return 0;
    }
    if (!strcmp(type, "string") || !strcmp(type, "number") || !strcmp(type, "integer") ||
        !strcmp(type, "boolean") || !strcmp(type, "null")) {
        put(body, type);
        return 0;
    }
    return fail(c, "json schema: unknown type '%s'", type);
}

static int alternatives(conv *c, json_t *list, sbuf *body) {
    size_t k;
    json_t *v;
    if (!json_is_array(list) || !json_array_size(list)) return fail(c, "json schema: %s must be a non-empty array", "anyOf/oneOf");
    json_array_foreach(list, k, v) {
        char r[48];
        if (rule_for(c, v, r, sizeof r)) return -1;
        putf(body, "%s%s", k ? " | " : "", r);
    }
    return 0;
}

static int schema_body(conv *c, json_t *s, sbuf *body) {
    static const char *refused[] = {"allOf", "not", "patternProperties", "if", "then", "else", "dependentSchemas"};
    for (size_t i = 0; i < BS_ARRAY_LEN(refused); i++)
        if (json_object_get(s, refused[i])) return fail(c, "json schema: '%s' is not supported", refused[i]);
    json_t *v;
    if ((v = json_object_get(s, "const"))) { put_literal(body, v); return 0; }
    if ((v = json_object_get(s, "enum"))) {
        size_t k;
        json_t *e;
        if (!json_is_array(v) || !json_array_size(v)) return fail(c, "json schema: %s must be a non-empty array", "enum");
        json_array_foreach(v, k, e) {
            if (k) put(body, " | ");
            put_literal(body, e);
        }
        return 0;
    }
    if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf"))) return alternatives(c, v, body);
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return type_body(c, s, json_string_value(t), body);
    if (json_is_array(t)) {
        size_t k;
        json_t *e;
        json_array_foreach(t, k, e) {
            if (!json_is_string(e)) return fail(c, "json schema: %s must hold strings", "type");
            put(body, k ? " | ( " : "( ");
            if (type_body(c, s, json_string_value(e), body)) return -1;
            put(body, " )");
        }
        return 0;
    }
    if (json_object_get(s, "properties")) return object_body(c, s, body);
    if (json_object_get(s, "items")) return array_body(c, s, body);
    put(body, "value");   /* {} or only annotations: any JSON value */
    return 0;
}

/* The rule name for schema s (defined in c->out), into name. */
static int rule_for(conv *c, json_t *s, char *name, size_t cap) {
    if (json_is_true(s)) { snprintf(name, cap, "value"); return 0; }
    if (!json_is_object(s)) return fail(c, "json schema: %s", "a schema must be an object");
    if (++c->depth > MAX_DEPTH) return fail(c, "json schema: %s", "nested too deep");
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        json_t *known = json_object_get(c->refs, json_string_value(ref));
        if (known) {
            snprintf(name, cap, "%s", json_string_value(known));
            c->depth--;
            return 0;
        }
        const char *r = json_string_value(ref), *key = NULL;
        json_t *target = NULL;
        if (!strncmp(r, "#/$defs/", 8)) key = r + 8, target = json_object_get(json_object_get(c->root, "$defs"), key);
        else if (!strncmp(r, "#/definitions/", 14)) key = r + 14, target = json_object_get(json_object_get(c->root, "definitions"), key);
        else if (!strcmp(r, "#")) target = c->root;
        if (!target) return fail(c, "json schema: cannot resolve $ref '%s'", r);
        snprintf(name, cap, "ref%d", c->n_rules++);
        json_object_set_new(c->refs, r, json_string(name));   /* before the body: recursion */
        sbuf body = {0};
        char tmp[48];
        snprintf(tmp, sizeof tmp, "%s", name);
        int rc = schema_body(c, target, &body);
        if (!rc) putf(&c->out, "%s ::= %s\n", tmp, body.p ? body.p : "");
        free(body.p);
        c->depth--;
        return rc;
    }
    sbuf body = {0};
    char own[48];
    snprintf(own, sizeof own, "s%d", c->n_rules++);
    int rc = schema_body(c, s, &body);
    if (!rc) {
        sbuf line = {0};
        putf(&line, "%s ::= ", own);
        put(&line, body.p ? body.p : "");
        put(&line, "\n");
        put(&c->out, line.p);
        free(line.p);
        snprintf(name, cap, "%s", own);
    }
    free(body.p);
    c->depth--;
    return rc;
}

char *bs_grammar_from_json_schema(const char *schema) {
    conv c = {.refs = json_object()};
    put(&c.out, BASE);
    if (!schema) {
        put(&c.out, "root ::= object\n");
        json_decref(c.refs);
        return c.out.p;
    }
    json_error_t err;
    c.root = json_loads(schema, 0, &err);
    if (!c.root) {
        json_decref(c.refs);
        free(c.out.p);
        return bs_error("json schema: not JSON: %s", err.text), NULL;
    }
    char top[48];
    int rc = rule_for(&c, c.root, top, sizeof top);
    if (!rc) putf(&c.out, "root ::= %s\n", top);
    json_decref(c.root);
    json_decref(c.refs);
    if (rc) {
        free(c.out.p);
        return NULL;
    }
    return c.out.p;
}

char *bs_grammar_for_tools(const char *tools, const char *only) {
    json_error_t err;
    json_t *list = tools ? json_loads(tools, 0, &err) : NULL;
    if (!json_is_array(list) || !json_array_size(list)) {
        json_decref(list);
        return bs_error("tool_choice: no tools were offered"), NULL;
    }
    conv c = {.refs = json_object()};
    put(&c.out, BASE);
    sbuf calls = {0};
    size_t i;
    json_t *tool;
    int n = 0;
    json_array_foreach(list, i, tool) {
        json_t *fn = json_object_get(tool, "function"), *name = json_object_get(fn, "name");
        if (!json_is_string(name) || (only && strcmp(json_string_value(name), only))) continue;
        json_t *params = json_object_get(fn, "parameters");
        c.root = params;
        char args[48] = "object";
        if (json_is_object(params) && rule_for(&c, params, args, sizeof args)) break;
        putf(&c.out, "call%d ::= ", n);
        put_literal(&c.out, name);
        putf(&c.out, " \", \\\"arguments\\\": \" %s\n", args);
        putf(&calls, "%scall%d", n ? " | " : "", n);
        n++;
    }
    json_decref(list);
    json_decref(c.refs);
    if (!c.failed && n == 0) bs_error(only ? "tool_choice: no offered tool is named '%s'" : "tool_choice: %s", only ? only : "no named tools");
    if (c.failed || n == 0) {
        free(c.out.p);
        free(calls.p);
        return NULL;
    }
    /* the JSON form of a call, which server_tools.c reads back as tool_calls */
    put(&c.out, "root ::= \"<tool_call>\\n{\\\"name\\\": \" ( ");
    put(&c.out, calls.p);
    put(&c.out, " ) \"}\\n</tool_call>\"\n");
    free(calls.p);
    return c.out.p;
}
