/* grammar_schema.c: JSON schema -> GBNF (grammar.h), for response_format / json_schema.
 *
 * Each schema becomes a rule; objects list their properties in the schema's order, required
 * ones first and always present, optional ones each optional; numbers and whitespace have
 * bounded lengths so that a model cannot pad forever. A string's pattern, or its format where
 * that has a fixed shape (date, uuid, ...), becomes the grammar of its text (grammar_pattern.c),
 * refused beside minLength/maxLength unless all its strings' lengths are within them; a
 * number's or an integer's minimum/maximum the grammar of its range (grammar_range.c).
 * Keywords that constrain beside anyOf/oneOf or $ref are merged into each branch or the target
 * (grammar_allof.c), and an enum's or const's values that fail them are dropped; what cannot be
 * merged or checked is refused naming the keyword. oneOf is written as anyOf (a value that
 * matches two branches passes). Annotations (description, title, other formats) are ignored,
 * and so are multipleOf, uniqueItems and minProperties/maxProperties, which it does not write;
 * keywords that would change the structure and are not handled (allOf, not,
 * patternProperties, if/then) are refused. */
#include "sample/grammar.h"
#include "sample/grammar_text.h"
#include "sample/grammar_allof.h"
#include "io/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_ITEMS 256     /* minItems/maxItems */
#define MAX_LENGTH 4096   /* minLength/maxLength */

#define NAME_LEN 32   /* rule names are a prefix and a number */

typedef struct conv {
    gt_buf out;                  /* rule definitions */
    json_t *root;
    int n_rules, depth;
    json_t *refs;              /* "$ref" -> rule name, for recursive schemas */
    bool failed, has_char;
} conv;

static const char BASE[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,8} )?\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ( ws \",\" ws string ws \":\" ws value )* )? ws \"}\"\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n";

/* A GBNF string literal matching the JSON text of v exactly (e.g. a property name or an enum
 * value), appended to b. */
static void put_literal(gt_buf *b, json_t *v) {
    char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    gt_put(b, "\"");
    for (const char *c = j ? j : ""; *c; c++) {
        char e[8];
        if (*c == '"' || *c == '\\') snprintf(e, sizeof e, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) snprintf(e, sizeof e, "\\x%02x", (unsigned char)*c);
        else e[0] = *c, e[1] = 0;
        gt_put(b, e);
    }
    gt_put(b, "\"");
    free(j);
}

static int fail(conv *c, const char *fmt, const char *what) {
    if (!c->failed) bs_error(fmt, what);
    c->failed = true;
    return -1;
}

static int rule_for(conv *c, json_t *s, char *name, size_t cap);

/* Rule body for an object schema: required properties in order, then the optional ones, each
 * optional, in order (T_j ::= ( "," ws kv_j )? T_{j+1}: linear in their number, all reachable). */
static int object_props(conv *c, json_t *props, json_t *req, gt_buf *body) {
    if (!json_is_object(props) || !json_object_size(props)) {
        gt_put(body, "object");
        return 0;
    }
    const size_t n = json_object_size(props);
    char (*kv)[NAME_LEN] = calloc(n, sizeof *kv);
    bool *is_req = calloc(n, sizeof *is_req);
    if (!kv || !is_req) {
        free(kv);
        free(is_req);
        return fail(c, "json schema: %s", "out of memory");
    }
    const char *key;
    json_t *ps, *r;
    size_t i = 0, n_req = 0, k;
    json_t *req_set = json_object();   /* the required names, looked up per property in O(1) */
    json_array_foreach(req, k, r) if (json_is_string(r)) json_object_set(req_set, json_string_value(r), json_true());
    json_object_foreach(props, key, ps) {
        if (c->out.over) break;   /* past the size limit: the conversion fails anyway */
        is_req[i] = json_object_get(req_set, key) != NULL;
        char vr[NAME_LEN];
        if (rule_for(c, ps, vr, sizeof vr)) break;
        snprintf(kv[i], sizeof kv[i], "kv%d", c->n_rules++);
        gt_putf(&c->out, "%s ::= ", kv[i]);
        json_t *name = json_string(key);
        put_literal(&c->out, name);
        json_decref(name);
        gt_putf(&c->out, " ws \":\" ws %s\n", vr);
        n_req += is_req[i];
        i++;
    }
    json_decref(req_set);
    if (c->failed || c->out.over) {
        free(kv);
        free(is_req);
        return c->failed ? -1 : fail(c, "json schema: the grammar it makes is longer than %s (the limit)", "256 KiB");
    }
    gt_put(body, "\"{\" ws ");
    bool first = true;
    for (i = 0; i < n; i++)
        if (is_req[i]) {
            gt_putf(body, "%s%s ", first ? "" : "\",\" ws ", kv[i]);
            first = false;
        }
    if (n_req < n) {
        const int t0 = c->n_rules;
        int nt = 0;
        for (i = 0; i < n; i++)
            if (!is_req[i]) {
                gt_putf(&c->out, "opt%d ::= ( \",\" ws %s )? opt%d\n", t0 + nt, kv[i], t0 + nt + 1);
                nt++;
            }
        gt_putf(&c->out, "opt%d ::= \"\"\n", t0 + nt);
        c->n_rules += nt + 1;
        if (n_req) {
            gt_putf(body, "opt%d ", t0);
        } else {   /* no required property: the first present one takes no comma */
            gt_put(body, "( ");
            int k = 0;
            for (i = 0; i < n; i++)
                if (!is_req[i]) {
                    gt_putf(body, "%s%s opt%d ", k ? "| " : "", kv[i], t0 + k + 1);
                    k++;
                }
            gt_put(body, ")? ");
        }
    }
    gt_put(body, "ws \"}\"");
    free(kv);
    free(is_req);
    return 0;
}

/* A tuple (prefixItems, or draft 4's items as an array): its items in order, as many as
 * maxItems allows, then as many more as minItems asks for from the schema of the rest (items, or
 * draft 4's additionalItems). An array shorter than the prefix is as valid as the whole of it,
 * so the prefix written whole gives only arrays the schema accepts. */
static int tuple_body(conv *c, json_t *prefix, json_t *rest, long lo, long hi, gt_buf *body) {
    if (!json_is_array(prefix)) return fail(c, "json schema: %s must be an array", "prefixItems");
    const long n = (long)json_array_size(prefix), k = hi >= 0 ? BS_MIN(n, hi) : n, more = BS_MAX(0, lo - k);
    if (more && json_is_false(rest)) return fail(c, "json schema: %s", "minItems past the items the tuple allows");
    char rr[NAME_LEN] = "value";
    if (more && rest && rule_for(c, rest, rr, sizeof rr)) return -1;
    gt_put(body, "\"[\" ws ");
    for (long i = 0; i < k + more; i++) {
        char r[NAME_LEN];
        if (i < k && rule_for(c, json_array_get(prefix, (size_t)i), r, sizeof r)) return -1;
        gt_putf(body, "%s%s ", i ? "ws \",\" ws " : "", i < k ? r : rr);
    }
    gt_put(body, "ws \"]\"");
    return 0;
}

/* An object: its properties, and the required names properties lacks after them, with the
 * schema of additionalProperties (any value where it is absent; none where it is false, so
 * such a schema allows no object). */
static int object_body(conv *c, json_t *s, gt_buf *body) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *more = json_object_get(s, "additionalProperties"), *all = NULL, *r;
    size_t k;
    json_array_foreach(req, k, r) {
        const char *name = json_string_value(r);
        if (!name || json_object_get(props, name)) continue;
        if (json_is_false(more)) {
            json_decref(all);
            return fail(c, "json schema: the required '%s' is not in properties, and additionalProperties is false", name);
        }
        if (!all) all = json_is_object(props) ? json_copy(props) : json_object();
        json_object_set(all, name, more ? more : json_true());
    }
    const int rc = object_props(c, all ? all : props, req, body);
    json_decref(all);
    return rc;
}

static int array_body(conv *c, json_t *s, gt_buf *body) {
    json_t *items = json_object_get(s, "items");
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)))
        return fail(c, "json schema: %s must be integers", "minItems/maxItems");
    const long lo = json_is_integer(mn) ? (long)json_integer_value(mn) : 0;
    const long hi = json_is_integer(mx) ? (long)json_integer_value(mx) : -1;
    if (lo < 0 || lo > MAX_ITEMS || (hi >= 0 && (hi < lo || hi > MAX_ITEMS)))
        return fail(c, "json schema: %s out of the supported range 0..256", "minItems/maxItems");
    json_t *prefix = json_object_get(s, "prefixItems");
    if (prefix) return tuple_body(c, prefix, items, lo, hi, body);
    if (json_is_array(items)) return tuple_body(c, items, json_object_get(s, "additionalItems"), lo, hi, body);
    if (json_is_false(items)) {   /* no item is allowed: the empty array */
        if (lo) return fail(c, "json schema: %s", "minItems with items false");
        gt_put(body, "\"[\" ws \"]\"");
        return 0;
    }
    char ir[NAME_LEN] = "value";
    if (items && rule_for(c, items, ir, sizeof ir)) return -1;
    gt_put(body, "\"[\" ws ");
    if (hi == 0) {
        gt_put(body, "ws \"]\"");
        return 0;
    }
    char more[NAME_LEN + 16];
    snprintf(more, sizeof more, "ws \",\" ws %s", ir);
    gt_putf(body, "%s%s ", lo ? "" : "( ", ir);
    gt_put_repeat(body, more, lo ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    gt_put(body, lo ? "" : " )?");
    gt_put(body, " ws \"]\"");
    return 0;
}

/* A converter's expression (grammar_pattern.c, grammar_range.c) into body; NULL: its error
 * stands. */
static int put_expr(conv *c, gt_buf *body, char *e) {
    if (!e) {
        c->failed = true;
        return -1;
    }
    gt_put(body, e);
    free(e);
    return 0;
}

/* The most common pattern beside minLength/maxLength, one character class repeated and anchored
 * (`^[a-z0-9_-]+$`, `^\\d*$`, `^x{2,}$`: what pydantic's constr(pattern=..., max_length=...)
 * sends), with the lengths as its count: `^[a-z0-9_-]{lo,hi}$`. NULL for any other pattern. */
static char *counted_class(const char *rx, long lo, long hi) {
    const size_t n = strlen(rx);
    if (n < 4 || rx[0] != '^' || rx[n - 1] != '$' || (n >= 2 && rx[n - 2] == '\\')) return NULL;
    size_t a = 1, e;   /* the atom: [class] (no nesting), \x, or one plain character */
    if (rx[a] == '[') {
        e = a + 1 + (rx[a + 1] == '^') + (rx[a + 1 + (rx[a + 1] == '^')] == ']');
        while (e < n && rx[e] != ']') e += rx[e] == '\\' ? 2 : 1;
        if (e >= n) return NULL;
        e++;
    } else if (rx[a] == '\\') {
        e = a + 2;
    } else {
        if (strchr("()|?*+{}.$", rx[a])) return NULL;
        e = a + 1;
    }
    long m = 0;   /* the quantifier: *, + or {m,} */
    const char *q = rx + e, *end = rx + n - 1;
    if (q + 1 == end && (*q == '*' || *q == '+')) m = *q == '+';
    else if (*q == '{' && end - q >= 3 && end[-1] == '}' && end[-2] == ',') {
        char *stop;
        m = strtol(q + 1, &stop, 10);
        if (stop != end - 2 || m < 0 || m > 4096) return NULL;
    } else {
        return NULL;
    }
    char *out = bs_xmalloc(e - a + 48);
    int k = snprintf(out, e - a + 48, "^%.*s{%ld,", (int)(e - a), rx + a, BS_MAX(lo, m));
    snprintf(out + k, e - a + 48 - (size_t)k, hi >= 0 ? "%ld}$" : "}$", hi);
    return out;
}

/* A string's pattern, else its format where that has a fixed shape, as its body; 1 where it has
 * neither. With minLength/maxLength (lo, hi; hi < 0: none) too, the pattern's strings must all
 * be of a length between them: a grammar cannot in general write both at once, and dropping
 * either would let strings the schema refuses through. A repeated character class takes the
 * lengths as its count (counted_class); other patterns whose strings do not all fit are refused. */
static int pattern_body(conv *c, json_t *s, long lo, long hi, gt_buf *body) {
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return fail(c, "json schema: %s must be a string", "pattern");
    const char *rx = pat ? json_string_value(pat) : json_is_string(fmt) ? bs_grammar_format_pattern(json_string_value(fmt)) : NULL;
    if (!rx) return 1;
    long pl, ph;
    char *counted = pat && (lo > 0 || hi >= 0) ? counted_class(rx, lo, hi) : NULL;
    char *e = bs_grammar_from_pattern_len(counted ? counted : rx, &pl, &ph);
    free(counted);
    if (e && (pl < lo || (hi >= 0 && (ph < 0 || ph > hi)))) {
        free(e);
        return fail(c, "json schema: a %s with minLength/maxLength that its strings do not all meet is not supported "
                       "(anchor it with ^...$ and bound its counts within them)", pat ? "pattern" : "format");
    }
    return put_expr(c, body, e);
}

/* minLength/maxLength into *lo, *hi (hi -1: none). */
static int length_bounds(conv *c, json_t *s, long *lo, long *hi) {
    json_t *mx = json_object_get(s, "maxLength"), *mn = json_object_get(s, "minLength");
    if ((mx && !json_is_integer(mx)) || (mn && !json_is_integer(mn)))
        return fail(c, "json schema: %s must be integers", "minLength/maxLength");
    *lo = json_is_integer(mn) ? (long)json_integer_value(mn) : 0;
    *hi = json_is_integer(mx) ? (long)json_integer_value(mx) : -1;
    if (*lo < 0 || *lo > MAX_LENGTH || *hi > MAX_LENGTH || (mx && *hi < 0) || (*hi >= 0 && *hi < *lo))
        return fail(c, "json schema: %s out of the supported range 0..4096", "minLength/maxLength");
    return 0;
}

/* A string: its pattern or format, else its bounded length, else any string. */
static int string_body(conv *c, json_t *s, gt_buf *body) {
    long lo, hi;
    if (length_bounds(c, s, &lo, &hi)) return -1;
    const int rc = pattern_body(c, s, lo, hi, body);
    if (rc <= 0) return rc;
    if (!lo && hi < 0) {
        gt_put(body, "string");
        return 0;
    }
    if (!c->has_char) {   /* a character is a code point: a \u surrogate pair is one, a lone half none */
        gt_put(&c->out, "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
                        "[dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2} ) )\n");
        c->has_char = true;
    }
    gt_put(body, "\"\\\"\" ");
    gt_put_repeat(body, "char", lo, hi);
    gt_put(body, " \"\\\"\"");
    return 0;
}

/* A schema's number as a bound: exact where it is an integer. */
static bs_grammar_bound bound_of(json_t *x, bool incl) {
    return (bs_grammar_bound){.has = true, .incl = incl, .is_int = json_is_integer(x),
                              .i = json_is_integer(x) ? (int64_t)json_integer_value(x) : 0, .v = json_number_value(x)};
}

/* Whether x lies beyond y on the bounded side (a larger minimum, a smaller maximum), or equals
 * it; exact when both are integers. */
static bool tighter_or_equal(bs_grammar_bound x, bs_grammar_bound y, bool upper) {
    if (x.is_int && y.is_int) return upper ? x.i <= y.i : x.i >= y.i;
    return upper ? x.v <= y.v : x.v >= y.v;
}

/* One bound of a number's range: minimum (exclusive where exclusiveMinimum is true, as in
 * draft 4) and exclusiveMinimum as a number (draft 6 on), the tighter; b->has false where
 * neither is given. */
static int num_bound(conv *c, json_t *s, bool upper, bs_grammar_bound *b) {
    json_t *in = json_object_get(s, upper ? "maximum" : "minimum");
    json_t *ex = json_object_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
    if ((in && !json_is_number(in)) || (ex && !json_is_number(ex) && !json_is_boolean(ex)))
        return fail(c, "json schema: %s must be numbers", "minimum/maximum");
    *b = (bs_grammar_bound){.has = false};
    if (in) *b = bound_of(in, !json_is_true(ex));
    if (json_is_number(ex) && (!b->has || tighter_or_equal(bound_of(ex, false), *b, upper))) *b = bound_of(ex, false);
    return 0;
}

/* A number or an integer with minimum/maximum: the numbers or integers in its range
 * (grammar_range.c); 1 where it has neither bound. */
static int range_body(conv *c, json_t *s, bool integer, gt_buf *body) {
    bs_grammar_bound lo, hi;
    if (num_bound(c, s, false, &lo) || num_bound(c, s, true, &hi)) return -1;
    if (!lo.has && !hi.has) return 1;
    return put_expr(c, body, (integer ? bs_grammar_int_range : bs_grammar_num_range)(lo, hi));
}

static int type_body(conv *c, json_t *s, const char *type, gt_buf *body) {
    if (!strcmp(type, "object")) return object_body(c, s, body);
    if (!strcmp(type, "array")) return array_body(c, s, body);
    if (!strcmp(type, "string")) return string_body(c, s, body);
    if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        const int rc = range_body(c, s, type[0] == 'i', body);
        if (rc <= 0) return rc;
    }
    if (!strcmp(type, "number") || !strcmp(type, "integer") || !strcmp(type, "boolean") || !strcmp(type, "null")) {
        gt_put(body, type);
        return 0;
    }
    return fail(c, "json schema: unknown type '%s'", type);
}

static int alternatives(conv *c, json_t *list, gt_buf *body) {
    size_t k;
    json_t *v;
    if (!json_is_array(list) || !json_array_size(list)) return fail(c, "json schema: %s must be a non-empty array", "anyOf/oneOf");
    json_array_foreach(list, k, v) {
        char r[NAME_LEN];
        if (rule_for(c, v, r, sizeof r)) return -1;
        gt_putf(body, "%s%s", k ? " | " : "", r);
    }
    return 0;
}

/* The rule of a merged schema (ga_merge) into body: false (no value fits) is an error. */
static int merged_rule(conv *c, json_t *m, const char *key, gt_buf *body) {
    if (!m) return fail(c, "%s", bs_last_error());
    char r[NAME_LEN];
    const int rc = json_is_false(m) ? fail(c, "json schema: no value meets both %s and the keywords beside it", key)
                                    : rule_for(c, m, r, sizeof r);
    if (!rc) gt_put(body, r);
    json_decref(m);
    return rc;
}

/* anyOf/oneOf with keywords beside it that constrain: each branch merged with them (the
 * branches no value of which meets them left out). oneOf is written as anyOf. */
static int merged_alternatives(conv *c, json_t *s, const char *key, gt_buf *body) {
    json_t *list = json_object_get(s, key), *rest = ga_without(s, key), *v;
    size_t k;
    int n = 0, rc = 0;
    if (!json_is_array(list) || !json_array_size(list)) rc = fail(c, "json schema: %s must be a non-empty array", "anyOf/oneOf");
    json_array_foreach(list, k, v) {
        json_t *m = rc ? NULL : ga_merge(rest, v);
        if (rc || json_is_false(m)) {
            json_decref(m);
            continue;
        }
        gt_put(body, n++ ? " | " : "");
        rc = merged_rule(c, m, key, body);
    }
    json_decref(rest);
    if (!rc && !n) rc = fail(c, "json schema: no branch of %s meets the keywords beside it", key);
    return rc;
}

/* $ref with keywords beside it that constrain: its target merged with them. */
static int merged_ref(conv *c, json_t *s, gt_buf *body) {
    const char *r = json_string_value(json_object_get(s, "$ref"));
    json_t *target = ga_resolve(c->root, r);
    if (!target) return fail(c, "json schema: cannot resolve $ref '%s'", r);
    json_t *rest = ga_without(s, "$ref"), *m = ga_merge(rest, target);
    json_decref(rest);
    return merged_rule(c, m, "$ref", body);
}

/* enum or const: the values that meet the keywords beside them (type, lengths, pattern, bounds,
 * properties, ...); a keyword that is not checked on values refuses the schema. */
static int values_body(conv *c, json_t *s, gt_buf *body) {
    json_t *v = json_object_get(s, "const"), *list = v ? json_pack("[O]", v) : json_incref(json_object_get(s, "enum")), *e;
    size_t k;
    int n = 0, rc = 0;
    if (!json_is_array(list) || !json_array_size(list)) rc = fail(c, "json schema: %s must be a non-empty array", "enum");
    json_array_foreach(list, k, e) {
        const int fits = rc ? 0 : ga_value_fits(s, e, c->root);
        if (fits < 0) rc = fail(c, "%s", bs_last_error());
        if (fits <= 0) continue;
        gt_put(body, n++ ? " | " : "");
        put_literal(body, e);
    }
    json_decref(list);
    if (!rc && !n) rc = fail(c, "json schema: no value of %s meets the keywords beside it", v ? "const" : "enum");
    return rc;
}

static int schema_body(conv *c, json_t *s, gt_buf *body) {
    static const char *refused[] = {"allOf", "not", "patternProperties", "if", "then", "else", "dependentSchemas"};
    for (size_t i = 0; i < BS_ARRAY_LEN(refused); i++)
        if (json_object_get(s, refused[i])) return fail(c, "json schema: '%s' is not supported", refused[i]);
    json_t *v;
    if (json_is_string(json_object_get(s, "$ref"))) {
        if (ga_constrained(s, "$ref")) return merged_ref(c, s, body);
        char r[NAME_LEN];   /* a $ref as a $defs target: its own rule */
        if (rule_for(c, s, r, sizeof r)) return -1;
        gt_put(body, r);
        return 0;
    }
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int i = 0; i < 2; i++)
        if ((v = json_object_get(s, alts[i])))
            return ga_constrained(s, alts[i]) ? merged_alternatives(c, s, alts[i], body) : alternatives(c, v, body);
    if (json_object_get(s, "const") || json_object_get(s, "enum")) return values_body(c, s, body);
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return type_body(c, s, json_string_value(t), body);
    if (t && !json_is_string(t) && !(json_is_array(t) && json_array_size(t)))
        return fail(c, "json schema: %s must be a type name or a non-empty array of them", "type");
    if (json_is_array(t)) {
        size_t k;
        json_t *e;
        json_array_foreach(t, k, e) {
            if (!json_is_string(e)) return fail(c, "json schema: %s must hold strings", "type");
            gt_put(body, k ? " | ( " : "( ");
            if (type_body(c, s, json_string_value(e), body)) return -1;
            gt_put(body, " )");
        }
        return 0;
    }
    /* no "type": the keywords that apply to one type only say which (JSON Schema lets them
     * constrain just that type; a generator writes that type) */
    static const char *const by_kw[][2] = {
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"minProperties", "object"}, {"maxProperties", "object"}, {"items", "array"}, {"prefixItems", "array"},
        {"minItems", "array"}, {"maxItems", "array"}, {"uniqueItems", "array"}, {"minLength", "string"},
        {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"}, {"minimum", "number"},
        {"maximum", "number"}, {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
        {"multipleOf", "number"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(by_kw); i++)
        if (json_object_get(s, by_kw[i][0])) return type_body(c, s, by_kw[i][1], body);
    gt_put(body, "value");   /* {} or only annotations: any JSON value */
    return 0;
}

/* The rule name for schema s (defined in c->out), into name. */
static int rule_for(conv *c, json_t *s, char *name, size_t cap) {
    if (json_is_true(s)) { snprintf(name, cap, "value"); return 0; }   /* true: any JSON value */
    if (json_is_false(s)) return fail(c, "json schema: %s", "false (a schema no value matches)");
    if (!json_is_object(s)) return fail(c, "json schema: %s", "a schema must be an object");
    if (++c->depth > MAX_DEPTH) return fail(c, "json schema: %s", "nested too deep");
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref) && !ga_constrained(s, "$ref")) {   /* one rule per target (recursion) */
        json_t *known = json_object_get(c->refs, json_string_value(ref));
        if (known) {
            snprintf(name, cap, "%s", json_string_value(known));
            c->depth--;
            return 0;
        }
        const char *r = json_string_value(ref);
        json_t *target = ga_resolve(c->root, r);
        if (!target) return fail(c, "json schema: cannot resolve $ref '%s'", r);
        snprintf(name, cap, "ref%d", c->n_rules++);
        json_object_set_new(c->refs, r, json_string(name));   /* before the body: recursion */
        gt_buf body = {0};
        char tmp[NAME_LEN];
        snprintf(tmp, sizeof tmp, "%s", name);
        int rc = 0;
        if (json_is_boolean(target)) {   /* true / false as a $defs target */
            char r[NAME_LEN];
            if (!(rc = rule_for(c, target, r, sizeof r))) gt_put(&body, r);
        } else if (!json_is_object(target)) {
            rc = fail(c, "json schema: %s", "a schema must be an object");
        } else {
            rc = schema_body(c, target, &body);
        }
        if (!rc && body.over) rc = fail(c, "json schema: %s", "a rule longer than the grammar limit");
        if (!rc) gt_putf(&c->out, "%s ::= %s\n", tmp, body.p ? body.p : "");
        free(body.p);
        c->depth--;
        return rc;
    }
    gt_buf body = {0};
    char own[NAME_LEN];
    snprintf(own, sizeof own, "s%d", c->n_rules++);
    int rc = schema_body(c, s, &body);
    if (!rc && body.over) rc = fail(c, "json schema: %s", "a rule longer than the grammar limit");
    if (!rc) {
        gt_putf(&c->out, "%s ::= %s\n", own, body.p ? body.p : "");
        snprintf(name, cap, "%s", own);
    }
    free(body.p);
    c->depth--;
    return rc;
}

char *bs_grammar_from_json_schema(const char *schema) {
    conv c = {.refs = json_object()};
    gt_put(&c.out, BASE);
    if (!schema) {
        gt_put(&c.out, "root ::= object\n");
        json_decref(c.refs);
        return c.out.p;
    }
    json_error_t err;
    c.root = json_loads(schema, JSON_DECODE_ANY, &err);
    if (!c.root) {
        json_decref(c.refs);
        free(c.out.p);
        return bs_error("json schema: not JSON: %s", err.text), NULL;
    }
    char top[NAME_LEN];
    int rc = rule_for(&c, c.root, top, sizeof top);
    if (!rc) gt_putf(&c.out, "root ::= %s\n", top);
    if (!rc) rc = gt_check(&c.out, "json schema");
    json_decref(c.root);
    json_decref(c.refs);
    if (rc) {
        free(c.out.p);
        return NULL;
    }
    return c.out.p;
}

/* A tool's "parameters" as a schema that only objects match (a call's arguments are an object,
 * which the server parses back): an object schema as it is, one that names no type ({}, or only
 * properties) with "type": "object" added; NULL for anything else (another type, $ref, anyOf,
 * enum: the plain object rule then). A new reference. */
static json_t *object_schema(json_t *params) {
    if (!json_is_object(params)) return NULL;
    json_t *t = json_object_get(params, "type");
    if (json_is_string(t) && !strcmp(json_string_value(t), "object")) return json_incref(params);
    static const char *const other[] = {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "not"};
    for (size_t i = 0; i < BS_ARRAY_LEN(other); i++)
        if (json_object_get(params, other[i])) return NULL;
    json_t *o = json_copy(params);
    json_object_set_new(o, "type", json_string("object"));
    return o;
}

char *bs_grammar_for_tools(const char *tools, const char *only) {
    json_error_t err;
    json_t *list = tools ? json_loads(tools, 0, &err) : NULL;
    if (!json_is_array(list) || !json_array_size(list)) {
        json_decref(list);
        return bs_error("tool_choice: no tools were offered"), NULL;
    }
    conv c = {.refs = json_object()};
    gt_put(&c.out, BASE);
    gt_buf calls = {0};
    size_t i;
    json_t *tool;
    int n = 0;
    json_array_foreach(list, i, tool) {
        json_t *fn = json_object_get(tool, "function"), *name = json_object_get(fn, "name");
        if (!json_is_string(name) || (only && strcmp(json_string_value(name), only))) continue;
        json_t *params = object_schema(json_object_get(fn, "parameters"));
        c.root = params;
        char args[NAME_LEN] = "object";
        const int rc = params ? rule_for(&c, params, args, sizeof args) : 0;
        json_decref(params);
        if (rc) break;
        gt_putf(&c.out, "call%d ::= ", n);
        put_literal(&c.out, name);
        gt_putf(&c.out, " \", \\\"arguments\\\": \" %s\n", args);
        gt_putf(&calls, "%scall%d", n ? " | " : "", n);
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
    gt_put(&c.out, "root ::= \"<tool_call>\\n{\\\"name\\\": \" ( ");
    gt_put(&c.out, calls.p);
    gt_put(&c.out, " ) \"}\\n</tool_call>\"\n");
    const int over = gt_check(&calls, "tool_choice") || gt_check(&c.out, "tool_choice");
    free(calls.p);
    if (over) {
        free(c.out.p);
        return NULL;
    }
    return c.out.p;
}
