/* grammar_allof.c: see grammar_allof.h. grammar_schema.c writes one keyword's grammar at a time,
 * so the keywords beside anyOf/oneOf or $ref are folded into each alternative (into the target):
 * two schemas that must both hold become one where every keyword the two share combines soundly
 * (types intersected, properties merged one by one under each other's additionalProperties,
 * required united, the tighter of each bound, enums intersected, equal patterns); a keyword of
 * both that does not is refused, naming it. An enum's or const's values are checked against the
 * keywords beside them, so that those that fail can be dropped. */
#include "sample/grammar_allof.h"
#include "sample/grammar.h"
#include "io/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

/* The keywords that constrain values; any other (annotations, $defs, unknown) does not. */
static const char *const CONSTRAINING[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties", "maxProperties",
    "anyOf", "oneOf", "$ref", "allOf", "not", "if", "then", "else", "patternProperties", "dependentSchemas",
};

static bool constraining(const char *k) {
    for (size_t i = 0; i < BS_ARRAY_LEN(CONSTRAINING); i++)
        if (!strcmp(k, CONSTRAINING[i])) return true;
    return false;
}

bool ga_constrained(json_t *s, const char *except) {
    const char *k;
    json_t *x;
    json_object_foreach(s, k, x) if (strcmp(k, except) && constraining(k)) return true;
    return false;
}

json_t *ga_without(json_t *s, const char *key) {
    json_t *o = json_copy(s);
    json_object_del(o, key);
    return o;
}

/* --- merging ---------------------------------------------------------------------------- */

static json_t *refuse(const char *key) {
    bs_error("json schema: '%s' in both a schema and the %s beside it, which cannot be combined", key, "anyOf/oneOf/$ref");
    return NULL;
}

static bool type_has(json_t *t, const char *name) {
    if (json_is_string(t)) return !strcmp(json_string_value(t), name);
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), name)) return true;
    return false;
}

/* The types both allow (integer where one says number); NULL where none. */
static json_t *merge_type(json_t *a, json_t *b) {
    static const char *const all[] = {"object", "array", "string", "integer", "number", "boolean", "null"};
    json_t *out = json_array();
    for (size_t i = 0; i < BS_ARRAY_LEN(all); i++) {
        const char *t = all[i];
        const bool in_a = type_has(a, t) || (!strcmp(t, "integer") && type_has(a, "number"));
        const bool in_b = type_has(b, t) || (!strcmp(t, "integer") && type_has(b, "number"));
        if (in_a && in_b) json_array_append_new(out, json_string(t));
    }
    if (type_has(out, "number"))   /* number holds integer: one name */
        for (size_t i = json_array_size(out); i-- > 0;)
            if (!strcmp(json_string_value(json_array_get(out, i)), "integer")) json_array_remove(out, i);
    if (!json_array_size(out)) return json_decref(out), NULL;
    return out;
}

/* -1, 0, 1 as x < y, ==, >: exact where both are integers. */
static int num_cmp(json_t *x, json_t *y) {
    if (json_is_integer(x) && json_is_integer(y))
        return (json_integer_value(x) > json_integer_value(y)) - (json_integer_value(x) < json_integer_value(y));
    return (json_number_value(x) > json_number_value(y)) - (json_number_value(x) < json_number_value(y));
}

/* The tighter bound; draft 4's boolean exclusive forms: exclusive if either is (only tighter). */
static json_t *merge_bound(const char *k, json_t *a, json_t *b) {
    const bool lower = !strncmp(k, "min", 3) || !strcmp(k, "exclusiveMinimum");
    if (!json_is_number(a) || !json_is_number(b)) return refuse(k);
    const int c = num_cmp(a, b);
    return json_incref(lower ? (c >= 0 ? a : b) : (c <= 0 ? a : b));
}

/* The values in both; NULL with *none where there are none. */
static json_t *merge_enum(json_t *a, json_t *b, bool *none) {
    if (!json_is_array(a) || !json_is_array(b)) return refuse("enum");
    json_t *out = json_array(), *x, *y;
    size_t i, j;
    json_array_foreach(a, i, x) {
        bool in = false;
        json_array_foreach(b, j, y) in = in || json_equal(x, y);
        if (in) json_array_append(out, x);
    }
    if (!json_array_size(out)) return json_decref(out), *none = true, NULL;
    return out;
}

static json_t *merge_format(json_t *a, json_t *b) {
    if (json_equal(a, b)) return json_incref(a);
    const bool fa = json_is_string(a) && bs_grammar_format_pattern(json_string_value(a));
    const bool fb = json_is_string(b) && bs_grammar_format_pattern(json_string_value(b));
    if (fa && fb) return refuse("format");
    return json_incref(fa ? a : b);   /* the other is an annotation */
}

/* One keyword both a and b have (not an object's: merge_object); NULL with *none where they
 * contradict, NULL + bs_error where they cannot be combined. */
static json_t *merge_key(const char *k, json_t *a, json_t *b, bool *none) {
    static const char *const bounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                                         "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"};
    for (size_t i = 0; i < BS_ARRAY_LEN(bounds); i++)
        if (!strcmp(k, bounds[i])) return merge_bound(k, a, b);
    if (!strcmp(k, "type")) {
        json_t *t = merge_type(a, b);
        *none = !t;
        return t;
    }
    if (!strcmp(k, "enum")) return merge_enum(a, b, none);
    if (!strcmp(k, "const")) return json_equal(a, b) ? json_incref(a) : (*none = true, NULL);
    if (!strcmp(k, "format")) return merge_format(a, b);
    if (!strcmp(k, "items") && !json_is_array(a) && !json_is_array(b)) return ga_merge(a, b);
    if (!strcmp(k, "uniqueItems")) return json_boolean(json_is_true(a) || json_is_true(b));
    if (json_equal(a, b) || !constraining(k)) return json_incref(a);   /* the same, or an annotation */
    return refuse(k);
}

static json_t *or_true(json_t *s) { return s ? s : json_true(); }

static bool listed(json_t *names, const char *k) {
    size_t i;
    json_t *x;
    json_array_foreach(names, i, x) if (json_is_string(x) && !strcmp(json_string_value(x), k)) return true;
    return false;
}

/* properties, required and additionalProperties of both into m: each property's schema is both
 * sides' (a side without it: its additionalProperties); one that no value fits is left out (the
 * grammar writes only listed names), or makes the whole schema none where it is required.
 * -1 error, 1 none, 0 done. */
static int merge_object(json_t *a, json_t *b, json_t *m) {
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    json_t *ea = json_object_get(a, "additionalProperties"), *eb = json_object_get(b, "additionalProperties");
    json_t *req = json_array(), *props = json_object(), *x, *both[2] = {pa, pb};
    const char *k;
    size_t i;
    json_array_foreach(json_object_get(a, "required"), i, x) json_array_append(req, x);
    json_array_foreach(json_object_get(b, "required"), i, x) json_array_append(req, x);
    int rc = 0;
    for (int side = 0; side < 2 && !rc; side++)
        json_object_foreach(both[side], k, x) {
            if (side && json_object_get(pa, k)) continue;
            json_t *sa = json_object_get(pa, k), *sb = json_object_get(pb, k);
            json_t *p = ga_merge(sa ? sa : or_true(ea), sb ? sb : or_true(eb));
            if (!p) rc = -1;
            else if (json_is_false(p)) rc = listed(req, k);   /* no value: the name must not appear */
            else json_object_set(props, k, p);
            json_decref(p);
            if (rc) break;
        }
    if (!rc && (ea || eb)) {
        json_t *e = ga_merge(or_true(ea), or_true(eb));
        if (!e) rc = -1;
        else json_object_set_new(m, "additionalProperties", e);
    }
    if (!rc && (pa || pb)) json_object_set(m, "properties", props);
    if (!rc && json_array_size(req)) json_object_set(m, "required", req);
    json_decref(props);
    json_decref(req);
    return rc;
}

/* A tuple's items would have to meet the other side's items too: not written, refused. */
static bool tuple_clash(json_t *a, json_t *b) {
    const bool ta = json_object_get(a, "prefixItems") || json_is_array(json_object_get(a, "items"));
    const bool tb = json_object_get(b, "prefixItems") || json_is_array(json_object_get(b, "items"));
    const bool ia = json_object_get(a, "items") || json_object_get(a, "prefixItems");
    const bool ib = json_object_get(b, "items") || json_object_get(b, "prefixItems");
    return ((ta && ib) || (tb && ia)) && !(json_equal(json_object_get(a, "prefixItems"), json_object_get(b, "prefixItems")) &&
                                          json_equal(json_object_get(a, "items"), json_object_get(b, "items")));
}

static bool object_kw(const char *k) {
    return !strcmp(k, "properties") || !strcmp(k, "required") || !strcmp(k, "additionalProperties");
}

/* Draft 4's boolean exclusiveMinimum / exclusiveMaximum as draft 6's numbers: a flag belongs to
 * its own side's bound, which the merge may not keep (minimum 5 exclusive beside minimum 10
 * is minimum 10, inclusive), so each bound merges on its own. A new reference. */
static json_t *numeric_exclusive(json_t *s) {
    static const char *const pair[2][2] = {{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}};
    json_t *c = NULL;
    for (int i = 0; i < 2; i++) {
        json_t *flag = json_object_get(s, pair[i][1]), *bound = json_object_get(s, pair[i][0]);
        if (!json_is_boolean(flag)) continue;
        if (!c) c = json_copy(s);
        if (json_is_true(flag) && bound) {
            json_object_set(c, pair[i][1], bound);
            json_object_del(c, pair[i][0]);
        } else {
            json_object_del(c, pair[i][1]);
        }
    }
    return c ? c : json_incref(s);
}

static json_t *merge_objects(json_t *a, json_t *b);

json_t *ga_merge(json_t *a, json_t *b) {
    if (json_is_true(a) || json_is_false(b)) return json_incref(b);
    if (json_is_true(b) || json_is_false(a)) return json_incref(a);
    if (!json_is_object(a) || !json_is_object(b)) return bs_error("json schema: %s", "a schema must be an object"), NULL;
    json_t *na = numeric_exclusive(a), *nb = numeric_exclusive(b), *m = merge_objects(na, nb);
    json_decref(na);
    json_decref(nb);
    return m;
}

/* Two schema objects merged (ga_merge). */
static json_t *merge_objects(json_t *a, json_t *b) {
    if (tuple_clash(a, b)) return refuse("prefixItems/items");
    json_t *m = json_object(), *x;
    const char *k;
    bool none = false;
    json_object_foreach(a, k, x) {
        if (object_kw(k)) continue;
        json_t *y = json_object_get(b, k), *v = y ? merge_key(k, x, y, &none) : json_incref(x);
        if (!v) {
            json_decref(m);
            return none ? json_false() : NULL;
        }
        json_object_set_new(m, k, v);
    }
    json_object_foreach(b, k, x) if (!object_kw(k) && !json_object_get(a, k)) json_object_set(m, k, x);
    const int rc = merge_object(a, b, m);
    if (rc) {
        json_decref(m);
        return rc > 0 ? json_false() : NULL;
    }
    return m;
}

/* --- values ----------------------------------------------------------------------------- */

json_t *ga_resolve(json_t *root, const char *r) {
    if (!strncmp(r, "#/$defs/", 8)) return json_object_get(json_object_get(root, "$defs"), r + 8);
    if (!strncmp(r, "#/definitions/", 14)) return json_object_get(json_object_get(root, "definitions"), r + 14);
    return strcmp(r, "#") ? NULL : root;
}

static bool type_fits(json_t *t, json_t *v) {
    const bool whole = json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return (type_has(t, "object") && json_is_object(v)) || (type_has(t, "array") && json_is_array(v)) ||
           (type_has(t, "string") && json_is_string(v)) || (type_has(t, "number") && json_is_number(v)) ||
           (type_has(t, "integer") && json_is_number(v) && whole) || (type_has(t, "boolean") && json_is_boolean(v)) ||
           (type_has(t, "null") && json_is_null(v));
}

/* Whether the string v matches a pattern, by the pattern's own grammar (the language the
 * grammar writes). */
static int pattern_fits(const char *rx, json_t *v) {
    char *e = bs_grammar_from_pattern(rx);
    if (!e) return -1;
    const size_t n = strlen(e) + 16;
    char *gbnf = malloc(n), *doc = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (gbnf) snprintf(gbnf, n, "root ::= %s\n", e);
    bs_grammar *g = gbnf && doc ? bs_grammar_parse(gbnf) : NULL;
    static const char *const piece[] = {"x"};
    static const size_t len[] = {1};
    static const bool eog[] = {false};
    bs_grammar_vocab *voc = g ? bs_grammar_vocab_from_pieces(piece, len, eog, 1) : NULL;
    bs_grammar_state *st = voc ? bs_grammar_state_new(g, voc) : NULL;
    const int r = !st ? -1 : bs_grammar_accept_text(st, doc) == 0 && bs_grammar_complete(st);
    bs_grammar_state_free(st);
    bs_grammar_vocab_free(voc);
    bs_grammar_free(g);
    free(gbnf);
    free(doc);
    free(e);
    return r;
}

static int string_fits(json_t *s, json_t *v) {
    long n = 0;
    for (const char *c = json_string_value(v); *c; c++) n += ((unsigned char)*c & 0xC0) != 0x80;   /* code points */
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if ((json_is_integer(mn) && n < json_integer_value(mn)) || (json_is_integer(mx) && n > json_integer_value(mx))) return 0;
    const char *rx = json_is_string(pat) ? json_string_value(pat) : json_is_string(fmt) ? bs_grammar_format_pattern(json_string_value(fmt)) : NULL;
    return rx ? pattern_fits(rx, v) : 1;
}

static int number_fits(json_t *s, json_t *v) {
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
    if (json_is_number(mn) && num_cmp(v, mn) < (json_is_true(emn) ? 1 : 0)) return 0;
    if (json_is_number(mx) && num_cmp(v, mx) > (json_is_true(emx) ? -1 : 0)) return 0;
    if (json_is_number(emn) && num_cmp(v, emn) <= 0) return 0;
    if (json_is_number(emx) && num_cmp(v, emx) >= 0) return 0;
    json_t *m = json_object_get(s, "multipleOf");
    if (json_is_integer(m) && json_integer_value(m) > 0 && json_is_integer(v))
        return json_integer_value(v) % json_integer_value(m) == 0;
    if (json_is_number(m) && json_number_value(m) > 0) {   /* v / m a whole number, to a double's precision */
        const double q = json_number_value(v) / json_number_value(m);
        return fabs(q - nearbyint(q)) <= 1e-9 * fmax(1.0, fabs(q));
    }
    return 1;
}

static int fits(json_t *s, json_t *v, json_t *root, int depth);

static int object_fits(json_t *s, json_t *v, json_t *root, int depth) {
    json_t *props = json_object_get(s, "properties"), *more = json_object_get(s, "additionalProperties"), *x;
    json_t *mn = json_object_get(s, "minProperties"), *mx = json_object_get(s, "maxProperties");
    const long n = (long)json_object_size(v);
    if ((json_is_integer(mn) && n < json_integer_value(mn)) || (json_is_integer(mx) && n > json_integer_value(mx))) return 0;
    size_t i;
    json_array_foreach(json_object_get(s, "required"), i, x) if (json_is_string(x) && !json_object_get(v, json_string_value(x))) return 0;
    const char *k;
    json_object_foreach(v, k, x) {
        json_t *ps = json_object_get(props, k);
        const int r = fits(ps ? ps : or_true(more), x, root, depth + 1);
        if (r <= 0) return r;
    }
    return 1;
}

static int array_fits(json_t *s, json_t *v, json_t *root, int depth) {
    json_t *items = json_object_get(s, "items"), *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems"), *x;
    if (json_object_get(s, "prefixItems") || json_is_array(items))
        return bs_error("json schema: %s beside enum/const is not checked on its values", "prefixItems"), -1;
    const long n = (long)json_array_size(v);
    if ((json_is_integer(mn) && n < json_integer_value(mn)) || (json_is_integer(mx) && n > json_integer_value(mx))) return 0;
    size_t i;
    json_array_foreach(v, i, x) {
        const int r = fits(or_true(items), x, root, depth + 1);
        if (r <= 0) return r;
        for (size_t j = 0; json_is_true(json_object_get(s, "uniqueItems")) && j < i; j++)
            if (json_equal(json_array_get(v, j), x)) return 0;
    }
    return 1;
}

/* anyOf (at least one branch) or oneOf (exactly one). */
static int branches_fit(json_t *list, bool one, json_t *v, json_t *root, int depth) {
    size_t i;
    json_t *b;
    int n = 0;
    json_array_foreach(list, i, b) {
        const int r = fits(b, v, root, depth + 1);
        if (r < 0) return r;
        n += r;
    }
    return one ? n == 1 : n > 0;
}

static int fits(json_t *s, json_t *v, json_t *root, int depth) {
    static const char *const unchecked[] = {"allOf", "not", "if", "then", "else", "patternProperties", "dependentSchemas"};
    if (json_is_boolean(s)) return json_is_true(s);
    if (!json_is_object(s) || depth > MAX_DEPTH) return bs_error("json schema: %s", "a schema must be an object (nested at most 64 deep)"), -1;
    for (size_t i = 0; i < BS_ARRAY_LEN(unchecked); i++)
        if (json_object_get(s, unchecked[i])) return bs_error("json schema: '%s' is not supported", unchecked[i]), -1;
    json_t *t = json_object_get(s, "type"), *e = json_object_get(s, "enum"), *c = json_object_get(s, "const"), *x;
    if (t && !type_fits(t, v)) return 0;
    if (c && !json_equal(c, v)) return 0;
    if (json_is_array(e)) {
        size_t i;
        bool in = false;
        json_array_foreach(e, i, x) in = in || json_equal(x, v);
        if (!in) return 0;
    }
    int r = json_is_string(v) ? string_fits(s, v) : json_is_number(v) ? number_fits(s, v)
          : json_is_object(v) ? object_fits(s, v, root, depth) : json_is_array(v) ? array_fits(s, v, root, depth) : 1;
    if (r > 0 && (x = json_object_get(s, "anyOf"))) r = branches_fit(x, false, v, root, depth);
    if (r > 0 && (x = json_object_get(s, "oneOf"))) r = branches_fit(x, true, v, root, depth);
    if (r > 0 && json_is_string(x = json_object_get(s, "$ref"))) {
        json_t *target = ga_resolve(root, json_string_value(x));
        r = target ? fits(target, v, root, depth + 1) : (bs_error("json schema: cannot resolve $ref '%s'", json_string_value(x)), -1);
    }
    return r;
}

int ga_value_fits(json_t *s, json_t *v, json_t *root) { return fits(s, v, root, 0); }
