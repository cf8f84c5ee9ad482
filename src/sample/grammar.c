/* grammar.c: the GBNF parser (grammar.h). It reads
 *   name ::= alternatives      (a rule; the next `name ::=` or the end closes it)
 *   "text"  [a-z0-9_] [^"\\]  .  name  ( group )      primaries
 *   x*  x+  x?  x{m}  x{m,}  x{m,n}                    repetition of the primary before
 *   # comment to the end of the line
 * with escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH, and builds the compiled rules of
 * grammar_impl.h: groups and repetitions become rules of their own (x* is R ::= x R | empty). */
#include "sample/grammar_impl.h"
#include "io/utf8.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REPEAT 64      /* x{m,n}: n at most this (each copy is an element) */
#define MAX_DEPTH 256      /* nested groups */

/* ---- building -------------------------------------------------------------------------------- */

typedef struct b_elem {
    uint8_t type, neg;
    uint32_t rule;
    g_range *rg;
    int n_rg;
} b_elem;

typedef struct b_alt { b_elem *el; int n, cap; } b_alt;

typedef struct b_rule {
    char *name;                /* NULL for the rules groups and repetitions make */
    b_alt *alt;
    int n_alt, cap_alt;
    bool defined;
    int line;                  /* where it was first named */
} b_rule;

typedef struct parser {
    const char *s, *p;
    int line;
    b_rule *rules;
    int n_rules, cap_rules;
    int depth;
    bool failed;
} parser;

static int fail(parser *ps, const char *what) {
    if (!ps->failed) bs_error("grammar, line %d: %s", ps->line, what);
    ps->failed = true;
    return -1;
}

static int new_rule(parser *ps, const char *name, size_t len) {
    if (ps->n_rules == ps->cap_rules) {
        ps->cap_rules = ps->cap_rules ? 2 * ps->cap_rules : 32;
        ps->rules = bs_xrealloc(ps->rules, (size_t)ps->cap_rules * sizeof *ps->rules);
    }
    b_rule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        r->name = bs_xmalloc(len + 1);
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    r->line = ps->line;
    r->defined = name == NULL;   /* the rules groups and repetitions make are defined where made */
    return ps->n_rules++;
}

static int rule_named(parser *ps, const char *name, size_t len) {
    for (int i = 0; i < ps->n_rules; i++)
        if (ps->rules[i].name && strlen(ps->rules[i].name) == len && !memcmp(ps->rules[i].name, name, len)) return i;
    return new_rule(ps, name, len);
}

static b_alt *add_alt(b_rule *r) {
    if (r->n_alt == r->cap_alt) {
        r->cap_alt = r->cap_alt ? 2 * r->cap_alt : 4;
        r->alt = bs_xrealloc(r->alt, (size_t)r->cap_alt * sizeof *r->alt);
    }
    b_alt *a = &r->alt[r->n_alt++];
    memset(a, 0, sizeof *a);
    return a;
}

static void push_elem(b_alt *a, b_elem e) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->el = bs_xrealloc(a->el, (size_t)a->cap * sizeof *a->el);
    }
    a->el[a->n++] = e;
}

static b_elem copy_elem(const b_elem *e) {
    b_elem c = *e;
    if (e->n_rg) {
        c.rg = bs_xmalloc((size_t)e->n_rg * sizeof *c.rg);
        memcpy(c.rg, e->rg, (size_t)e->n_rg * sizeof *c.rg);
    }
    return c;
}

static b_elem char_elem(uint32_t lo, uint32_t hi) {
    b_elem e = {.type = GE_CHARS, .n_rg = 1};
    e.rg = bs_xmalloc(sizeof *e.rg);
    e.rg[0] = (g_range){lo, hi};
    return e;
}

static b_elem rule_elem(int rule) { return (b_elem){.type = GE_RULE, .rule = (uint32_t)rule}; }

/* ---- lexing ---------------------------------------------------------------------------------- */

static void skip_space(parser *ps, bool newlines) {
    for (;;) {
        const char c = *ps->p;
        if (c == '#') {
            while (*ps->p && *ps->p != '\n') ps->p++;
        } else if (c == '\n' && newlines) {
            ps->line++;
            ps->p++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else {
            return;
        }
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* At `name ::=`? Sets *len to the name's length. */
static bool at_rule_start(const char *p, size_t *len) {
    size_t n = 0;
    while (is_name_char(p[n])) n++;
    if (!n) return false;
    const char *q = p + n;
    while (*q == ' ' || *q == '\t') q++;
    *len = n;
    return q[0] == ':' && q[1] == ':' && q[2] == '=';
}

static int hex_value(parser *ps, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        const char c = *ps->p++;
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "bad hexadecimal escape");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* One character of a string or class (escapes decoded) into *c. */
static int read_char(parser *ps, uint32_t *c) {
    if (!*ps->p) return fail(ps, "unexpected end of the grammar");
    if (*ps->p == '\\') {
        ps->p++;
        switch (*ps->p++) {
        case 'n': *c = '\n'; return 0;
        case 'r': *c = '\r'; return 0;
        case 't': *c = '\t'; return 0;
        case '\\': *c = '\\'; return 0;
        case '"': *c = '"'; return 0;
        case '[': *c = '['; return 0;
        case ']': *c = ']'; return 0;
        case '-': *c = '-'; return 0;
        case 'x': return hex_value(ps, 2, c);
        case 'u': return hex_value(ps, 4, c);
        case 'U': return hex_value(ps, 8, c);
        default: return fail(ps, "unknown escape");
        }
    }
    const int n = bs_utf8_next((const unsigned char *)ps->p, strlen(ps->p), c);
    if (n <= 0) return fail(ps, "invalid UTF-8");
    if (*c == '\n') ps->line++;
    ps->p += n;
    return 0;
}

/* ---- expressions ----------------------------------------------------------------------------- */

static int parse_alts(parser *ps, int rule);

static int parse_string(parser *ps, b_alt *a) {
    ps->p++;   /* the opening quote */
    while (*ps->p != '"') {
        uint32_t c;
        if (!*ps->p || *ps->p == '\n') return fail(ps, "unterminated string");
        if (read_char(ps, &c)) return -1;
        push_elem(a, char_elem(c, c));
    }
    ps->p++;
    return 0;
}

static int parse_class(parser *ps, b_elem *e) {
    ps->p++;   /* [ */
    *e = (b_elem){.type = GE_CHARS};
    if (*ps->p == '^') {
        e->neg = 1;
        ps->p++;
    }
    int cap = 0;
    while (*ps->p != ']') {
        uint32_t lo, hi;
        if (!*ps->p) return fail(ps, "unterminated character class");
        if (read_char(ps, &lo)) return -1;
        hi = lo;
        if (ps->p[0] == '-' && ps->p[1] != ']' && ps->p[1]) {
            ps->p++;
            if (read_char(ps, &hi)) return -1;
            if (hi < lo) return fail(ps, "character range out of order");
        }
        if (e->n_rg == cap) e->rg = bs_xrealloc(e->rg, (size_t)(cap = cap ? 2 * cap : 4) * sizeof *e->rg);
        e->rg[e->n_rg++] = (g_range){lo, hi};
    }
    ps->p++;
    return 0;
}

/* x repeated min..max times (max < 0: unbounded), as elements appended to a. */
static void repeat(parser *ps, b_alt *a, const b_elem *x, int min, int max) {
    for (int i = 0; i < min; i++) push_elem(a, copy_elem(x));
    if (max == min) return;
    /* the rest: R ::= x R | empty (unbounded), or nested optionals x (x (x)?)? */
    const int r = new_rule(ps, NULL, 0);
    if (max < 0) {
        b_alt *one = add_alt(&ps->rules[r]);
        push_elem(one, copy_elem(x));
        push_elem(one, rule_elem(r));
        add_alt(&ps->rules[r]);
    } else {
        int cur = r;
        for (int k = min; k < max; k++) {
            b_alt *one = add_alt(&ps->rules[cur]);
            push_elem(one, copy_elem(x));
            add_alt(&ps->rules[cur]);
            if (k + 1 < max) {
                const int next = new_rule(ps, NULL, 0);
                push_elem(&ps->rules[cur].alt[0], rule_elem(next));
                cur = next;
            }
        }
    }
    push_elem(a, rule_elem(r));
}

static int parse_count(parser *ps, int *min, int *max) {
    ps->p++;   /* { */
    char *end;
    long lo = strtol(ps->p, &end, 10), hi = lo;
    if (end == ps->p || lo < 0 || lo > MAX_REPEAT) return fail(ps, "bad repetition count");
    ps->p = end;
    if (*ps->p == ',') {
        ps->p++;
        if (*ps->p == '}') hi = -1;
        else if ((hi = strtol(ps->p, &end, 10)) < lo || hi > MAX_REPEAT || end == ps->p) return fail(ps, "bad repetition count");
        else ps->p = end;
    }
    if (*ps->p != '}') return fail(ps, "expected } after a repetition count");
    ps->p++;
    *min = (int)lo;
    *max = (int)hi;
    return 0;
}

/* One primary with its repetition operators, appended to a. */
static int parse_item(parser *ps, b_alt *a) {
    b_elem x;
    const char c = *ps->p;
    size_t len;
    if (c == '"') {
        /* a string: its characters; a repetition applies to the whole string as a group */
        const int r = new_rule(ps, NULL, 0);
        if (parse_string(ps, add_alt(&ps->rules[r]))) return -1;
        b_alt *only = &ps->rules[r].alt[0];
        if (!strchr("*+?{", *ps->p)) {   /* no operator: inline the characters */
            for (int i = 0; i < only->n; i++) push_elem(a, only->el[i]);
            free(only->el);
            only->el = NULL;
            only->n = only->cap = 0;
            ps->rules[r].n_alt = 0;
            ps->rules[r].defined = true;
            return 0;
        }
        x = rule_elem(r);
        ps->rules[r].defined = true;
    } else if (c == '[') {
        if (parse_class(ps, &x)) return -1;
    } else if (c == '.') {
        ps->p++;
        x = char_elem('\n', '\n');
        x.neg = 1;   /* any character but a newline, as llama.cpp */
    } else if (c == '(') {
        if (++ps->depth > MAX_DEPTH) return fail(ps, "groups nested too deep");
        ps->p++;
        const int r = new_rule(ps, NULL, 0);
        if (parse_alts(ps, r)) return -1;
        skip_space(ps, true);
        if (*ps->p != ')') return fail(ps, "expected )");
        ps->p++;
        ps->depth--;
        ps->rules[r].defined = true;
        x = rule_elem(r);
    } else if (is_name_char(c) && !at_rule_start(ps->p, &len)) {
        const char *name = ps->p;
        while (is_name_char(*ps->p)) ps->p++;
        x = rule_elem(rule_named(ps, name, (size_t)(ps->p - name)));
    } else {
        return fail(ps, "expected a string, a class, a rule name or a group");
    }
    for (;;) {   /* repetition operators apply to what came before, innermost first */
        int min, max;
        if (*ps->p == '*') min = 0, max = -1, ps->p++;
        else if (*ps->p == '+') min = 1, max = -1, ps->p++;
        else if (*ps->p == '?') min = 0, max = 1, ps->p++;
        else if (*ps->p == '{') { if (parse_count(ps, &min, &max)) return -1; }
        else break;
        const int r = new_rule(ps, NULL, 0);
        repeat(ps, add_alt(&ps->rules[r]), &x, min, max);
        ps->rules[r].defined = true;
        free(x.rg);   /* repeat() placed copies */
        x = rule_elem(r);
    }
    push_elem(a, x);
    return 0;
}

/* seq ('|' seq)* into the alternatives of rule, up to ')' or the next rule. */
static int parse_alts(parser *ps, int rule) {
    b_alt *a = add_alt(&ps->rules[rule]);
    for (;;) {
        skip_space(ps, true);
        size_t len;
        const char c = *ps->p;
        if (!c || c == ')' || at_rule_start(ps->p, &len)) return 0;
        if (c == '|') {
            ps->p++;
            a = add_alt(&ps->rules[rule]);
            continue;
        }
        const int idx = (int)(a - ps->rules[rule].alt);
        if (parse_item(ps, a)) return -1;
        a = &ps->rules[rule].alt[idx];   /* parse_item may have grown the rule table */
    }
}

/* ---- compiling ------------------------------------------------------------------------------- */

static void free_builder(parser *ps) {
    for (int i = 0; i < ps->n_rules; i++) {
        b_rule *r = &ps->rules[i];
        for (int k = 0; k < r->n_alt; k++) {
            for (int j = 0; j < r->alt[k].n; j++) free(r->alt[k].el[j].rg);
            free(r->alt[k].el);
        }
        free(r->alt);
        free(r->name);
    }
    free(ps->rules);
}

static bs_grammar *compile(parser *ps) {
    bs_grammar *g = bs_xcalloc(1, sizeof *g);
    int n_el = 0, n_rg = 0, n_alt = 0;
    for (int i = 0; i < ps->n_rules; i++)
        for (int k = 0; k < ps->rules[i].n_alt; k++) {
            n_alt++;
            n_el += ps->rules[i].alt[k].n + 1;
            for (int j = 0; j < ps->rules[i].alt[k].n; j++) n_rg += ps->rules[i].alt[k].el[j].n_rg;
        }
    g->el = bs_xmalloc((size_t)BS_MAX(n_el, 1) * sizeof *g->el);
    g->rg = bs_xmalloc((size_t)BS_MAX(n_rg, 1) * sizeof *g->rg);
    g->alt = bs_xmalloc((size_t)BS_MAX(n_alt, 1) * sizeof *g->alt);
    g->rule = bs_xmalloc((size_t)ps->n_rules * sizeof *g->rule);
    g->n_rule = ps->n_rules;
    for (int i = 0; i < ps->n_rules; i++) {
        const b_rule *r = &ps->rules[i];
        g->rule[i] = (g_rule){(uint32_t)g->n_alt, (uint32_t)r->n_alt};
        for (int k = 0; k < r->n_alt; k++) {
            g->alt[g->n_alt++] = (uint32_t)g->n_el;
            for (int j = 0; j < r->alt[k].n; j++) {
                const b_elem *e = &r->alt[k].el[j];
                g_elem *o = &g->el[g->n_el++];
                *o = (g_elem){.type = e->type, .neg = e->neg, .a = e->type == GE_RULE ? e->rule : (uint32_t)g->n_rg,
                              .n = (uint32_t)e->n_rg};
                for (int q = 0; q < e->n_rg; q++) g->rg[g->n_rg++] = e->rg[q];
            }
            g->el[g->n_el++] = (g_elem){.type = GE_END};
        }
    }
    return g;
}

/* Rules that can match the empty text (fixed point), then left recursion: a rule reachable from
 * itself through leading elements that can all be empty would make matching loop. */
static int check_left_recursion(const bs_grammar *g) {
    bool *nullable = bs_xcalloc((size_t)g->n_rule, sizeof *nullable);
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rule; r++) {
            if (nullable[r]) continue;
            for (uint32_t k = 0; k < g->rule[r].n_alt && !nullable[r]; k++) {
                const g_elem *e = &g->el[g->alt[g->rule[r].alt0 + k]];
                while (e->type == GE_RULE && nullable[e->a]) e++;
                if (e->type == GE_END) nullable[r] = changed = true;
            }
        }
    }
    int rc = 0;
    uint8_t *mark = bs_xcalloc((size_t)g->n_rule * g->n_rule, 1);   /* mark[a * n + b]: b leads a */
    for (int r = 0; r < g->n_rule; r++)
        for (uint32_t k = 0; k < g->rule[r].n_alt; k++)
            for (const g_elem *e = &g->el[g->alt[g->rule[r].alt0 + k]]; e->type == GE_RULE; e++) {
                mark[(size_t)r * g->n_rule + e->a] = 1;
                if (!nullable[e->a]) break;
            }
    for (int m = 0; m < g->n_rule && !rc; m++)   /* transitive closure (grammars are small) */
        for (int a = 0; a < g->n_rule; a++)
            if (mark[(size_t)a * g->n_rule + m])
                for (int b = 0; b < g->n_rule; b++)
                    if (mark[(size_t)m * g->n_rule + b]) mark[(size_t)a * g->n_rule + b] = 1;
    for (int r = 0; r < g->n_rule && !rc; r++)
        if (mark[(size_t)r * g->n_rule + r]) rc = -1;
    free(mark);
    free(nullable);
    return rc;
}

bs_grammar *bs_grammar_parse(const char *gbnf) {
    if (!gbnf) return bs_error("grammar: none given"), NULL;
    parser ps = {.s = gbnf, .p = gbnf, .line = 1};
    for (;;) {
        skip_space(&ps, true);
        if (!*ps.p) break;
        size_t len;
        if (!at_rule_start(ps.p, &len)) { fail(&ps, "expected `name ::=`"); break; }
        const int r = rule_named(&ps, ps.p, len);
        if (ps.rules[r].defined) { fail(&ps, "a rule is defined twice"); break; }
        ps.rules[r].defined = true;
        ps.rules[r].line = ps.line;
        ps.p = strstr(ps.p, "::=") + 3;
        if (parse_alts(&ps, r)) break;
        if (*ps.p == ')') { fail(&ps, "unbalanced )"); break; }
    }
    int root = -1;
    for (int i = 0; i < ps.n_rules && !ps.failed; i++) {
        if (!ps.rules[i].defined) {
            ps.line = ps.rules[i].line;
            fail(&ps, "a rule is used but not defined");
            bs_error_prefix("grammar: '%s': ", ps.rules[i].name ? ps.rules[i].name : "?");
        }
        if (ps.rules[i].name && !strcmp(ps.rules[i].name, "root")) root = i;
    }
    if (!ps.failed && root < 0) fail(&ps, "no `root` rule");
    bs_grammar *g = ps.failed ? NULL : compile(&ps);
    free_builder(&ps);
    if (g && check_left_recursion(g)) {
        bs_grammar_free(g);
        return bs_error("grammar: left recursion (a rule that can begin with itself)"), NULL;
    }
    if (g) g->root = root;
    return g;
}

void bs_grammar_free(bs_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->rg);
    free(g->alt);
    free(g->rule);
    free(g);
}
