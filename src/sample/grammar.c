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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256      /* nested groups */

/* ---- building -------------------------------------------------------------------------------- */

/* Elements are built as g_elem already: a class's ranges go once into the parser's range pool
 * (copies made by repetitions share them). */
typedef struct b_alt { g_elem *el; int n, cap; } b_alt;

typedef struct b_rule {
    char *name;                /* NULL for the rules groups and repetitions make */
    b_alt *alt;
    int n_alt, cap_alt;
    bool defined;
    int line;                  /* where it was first named */
} b_rule;

typedef struct parser {
    const char *s, *p, *end;   /* end: the terminating NUL */
    int line;
    b_rule *rules;
    int n_rules, cap_rules;
    g_range *rg;
    int n_rg, cap_rg;
    int *names, cap_names;     /* open-addressed table of named rules: index + 1, 0 free */
    int n_named;
    size_t size;               /* elements + alternatives made so far */
    int depth;
    bool failed;
} parser;

static int fail(parser *ps, const char *what) {
    if (!ps->failed) bs_error("grammar, line %d: %s", ps->line, what);
    ps->failed = true;
    return -1;
}

/* arr grown to hold need items (cap doubling from first): the new pointer, or NULL (arr is
 * still valid) after recording the failure. */
static void *grow(parser *ps, void *arr, int *cap, int need, size_t each, int first) {
    if (need <= *cap) return arr;
    int nc = *cap ? *cap : first;
    while (nc < need) nc *= 2;
    void *q = realloc(arr, (size_t)nc * each);
    if (!q) return fail(ps, "out of memory"), NULL;
    *cap = nc;
    return q;
}

/* Counts n more elements or alternatives against BS_GRAMMAR_MAX_SIZE, before they are made. */
static int spend(parser *ps, size_t n) {
    ps->size += n;
    if (ps->size <= BS_GRAMMAR_MAX_SIZE) return 0;
    char msg[128];
    snprintf(msg, sizeof msg, "more than %d elements after expanding repetitions (the limit)", BS_GRAMMAR_MAX_SIZE);
    return fail(ps, msg);
}

static int too_many_rules(parser *ps) {
    char msg[128];
    snprintf(msg, sizeof msg, "more than %d rules, counting those groups and repetitions make (the limit)",
             BS_GRAMMAR_MAX_RULES);
    return fail(ps, msg);
}

static int new_rule(parser *ps, const char *name, size_t len) {
    if (ps->failed) return -1;
    if (ps->n_rules >= BS_GRAMMAR_MAX_RULES) return too_many_rules(ps);
    b_rule *rs = grow(ps, ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules, 32);
    if (!rs) return -1;
    ps->rules = rs;
    b_rule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        if (!(r->name = malloc(len + 1))) return fail(ps, "out of memory");
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    r->line = ps->line;
    r->defined = name == NULL;   /* the rules groups and repetitions make are defined where made */
    return ps->n_rules++;
}

static uint32_t name_hash(const char *s, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The named rule's index, made on first use (a hash table: names are looked up per reference). */
static int rule_named(parser *ps, const char *name, size_t len) {
    if (2 * (ps->n_named + 1) > ps->cap_names) {   /* rehash at half full */
        const int nc = ps->cap_names ? 2 * ps->cap_names : 64;
        int *t = calloc((size_t)nc, sizeof *t);
        if (!t) return fail(ps, "out of memory");
        for (int i = 0; i < ps->cap_names; i++)
            if (ps->names[i]) {
                const char *n = ps->rules[ps->names[i] - 1].name;
                uint32_t h = name_hash(n, strlen(n)) & (uint32_t)(nc - 1);
                while (t[h]) h = (h + 1) & (uint32_t)(nc - 1);
                t[h] = ps->names[i];
            }
        free(ps->names);
        ps->names = t;
        ps->cap_names = nc;
    }
    uint32_t h = name_hash(name, len) & (uint32_t)(ps->cap_names - 1);
    for (; ps->names[h]; h = (h + 1) & (uint32_t)(ps->cap_names - 1)) {
        const char *n = ps->rules[ps->names[h] - 1].name;
        if (strlen(n) == len && !memcmp(n, name, len)) return ps->names[h] - 1;
    }
    const int r = new_rule(ps, name, len);
    if (r >= 0) {
        ps->names[h] = r + 1;
        ps->n_named++;
    }
    return r;
}

static b_alt *add_alt(parser *ps, int rule) {
    if (rule < 0 || ps->failed || spend(ps, 1)) return NULL;
    b_rule *r = &ps->rules[rule];
    b_alt *a = grow(ps, r->alt, &r->cap_alt, r->n_alt + 1, sizeof *r->alt, 4);
    if (!a) return NULL;
    r->alt = a;
    a = &r->alt[r->n_alt++];
    memset(a, 0, sizeof *a);
    return a;
}

static int push_elem(parser *ps, b_alt *a, g_elem e) {
    if (!a || ps->failed || spend(ps, 1)) return -1;
    g_elem *el = grow(ps, a->el, &a->cap, a->n + 1, sizeof *a->el, 8);
    if (!el) return -1;
    a->el = el;
    a->el[a->n++] = e;
    return 0;
}

/* A new range in the pool (the index), for the class being read. */
static int push_range(parser *ps, uint32_t lo, uint32_t hi) {
    if (ps->failed || spend(ps, 1)) return -1;
    g_range *rg = grow(ps, ps->rg, &ps->cap_rg, ps->n_rg + 1, sizeof *ps->rg, 64);
    if (!rg) return -1;
    ps->rg = rg;
    ps->rg[ps->n_rg] = (g_range){lo, hi};
    return ps->n_rg++;
}

static int char_elem(parser *ps, uint32_t lo, uint32_t hi, g_elem *e) {
    const int at = push_range(ps, lo, hi);
    *e = (g_elem){.type = GE_CHARS, .a = (uint32_t)at, .n = 1};
    return at < 0 ? -1 : 0;
}

static g_elem rule_elem(int rule) { return (g_elem){.type = GE_RULE, .a = (uint32_t)rule}; }

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
        const char c = *ps->p;
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "bad hexadecimal escape");
        ps->p++;
        v = v * 16 + (uint32_t)d;
    }
    if (v > 0x10FFFF) return fail(ps, "a code point past U+10FFFF");
    *out = v;
    return 0;
}

/* One character of a string or class (escapes decoded) into *c. */
static int read_char(parser *ps, uint32_t *c) {
    if (!*ps->p) return fail(ps, "unexpected end of the grammar");
    if (*ps->p == '\\') {
        ps->p++;
        const char e = *ps->p;
        if (!e) return fail(ps, "unexpected end of the grammar");
        ps->p++;
        switch (e) {
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
    const int n = bs_utf8_next((const unsigned char *)ps->p, (size_t)(ps->end - ps->p), c);
    if (n <= 0) return fail(ps, "invalid UTF-8");
    if (*c == '\n') ps->line++;
    ps->p += n;
    return 0;
}

/* ---- expressions ----------------------------------------------------------------------------- */

static int parse_alts(parser *ps, int rule);

static int parse_string(parser *ps, int rule, int alt) {
    ps->p++;   /* the opening quote */
    while (*ps->p != '"') {
        uint32_t c;
        g_elem e;
        if (!*ps->p || *ps->p == '\n') return fail(ps, "unterminated string");
        if (read_char(ps, &c) || char_elem(ps, c, c, &e) || push_elem(ps, &ps->rules[rule].alt[alt], e)) return -1;
    }
    ps->p++;
    return 0;
}

static int parse_class(parser *ps, g_elem *e) {
    ps->p++;   /* [ */
    *e = (g_elem){.type = GE_CHARS, .a = (uint32_t)ps->n_rg};
    if (*ps->p == '^') {
        e->neg = 1;
        ps->p++;
    }
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
        if (push_range(ps, lo, hi) < 0) return -1;
        e->n++;
    }
    ps->p++;
    return 0;
}

/* x repeated min..max times (max < 0: unbounded), as elements appended to alternative alt of
 * rule. The expansion's size is checked before it is made. */
static int repeat(parser *ps, int rule, int alt, g_elem x, int min, int max) {
    const size_t cost = (size_t)min + (max < 0 ? 5 : 4 * (size_t)(max - min)) + 1;
    if (ps->size + cost > BS_GRAMMAR_MAX_SIZE) return spend(ps, cost);
    if ((max > min ? max - min : 1) > BS_GRAMMAR_MAX_RULES - ps->n_rules) return too_many_rules(ps);
    for (int i = 0; i < min; i++)
        if (push_elem(ps, &ps->rules[rule].alt[alt], x)) return -1;
    if (max == min) return 0;
    /* the rest: R ::= x R | empty (unbounded), or nested optionals x (x (x)?)? */
    const int r = new_rule(ps, NULL, 0);
    if (r < 0) return -1;
    if (max < 0) {
        if (!add_alt(ps, r) || push_elem(ps, &ps->rules[r].alt[0], x) || push_elem(ps, &ps->rules[r].alt[0], rule_elem(r)) ||
            !add_alt(ps, r))
            return -1;
    } else {
        int cur = r;
        for (int k = min; k < max; k++) {
            if (!add_alt(ps, cur) || push_elem(ps, &ps->rules[cur].alt[0], x) || !add_alt(ps, cur)) return -1;
            if (k + 1 < max) {
                const int next = new_rule(ps, NULL, 0);
                if (next < 0 || push_elem(ps, &ps->rules[cur].alt[0], rule_elem(next))) return -1;
                cur = next;
            }
        }
    }
    return push_elem(ps, &ps->rules[rule].alt[alt], rule_elem(r));
}

static int parse_count(parser *ps, int *min, int *max) {
    ps->p++;   /* { */
    char *end;
    long lo = strtol(ps->p, &end, 10), hi = lo;
    if (end == ps->p || lo < 0 || lo > BS_GRAMMAR_MAX_REPEAT) return fail(ps, "bad repetition count");
    ps->p = end;
    if (*ps->p == ',') {
        ps->p++;
        if (*ps->p == '}') hi = -1;
        else if ((hi = strtol(ps->p, &end, 10)) < lo || hi > BS_GRAMMAR_MAX_REPEAT || end == ps->p) return fail(ps, "bad repetition count");
        else ps->p = end;
    }
    if (*ps->p != '}') return fail(ps, "expected } after a repetition count");
    ps->p++;
    *min = (int)lo;
    *max = (int)hi;
    return 0;
}

/* One primary into *x (a string with no operator after it goes straight into the alternative:
 * *inlined). */
static int parse_primary(parser *ps, int rule, int alt, g_elem *x, bool *inlined) {
    const char c = *ps->p;
    size_t len;
    *inlined = false;
    if (c == '"') {
        /* with an operator after it, a string is a group of its own */
        const char *q = ps->p + 1;
        while (*q && *q != '"' && *q != '\n') q += *q == '\\' && q[1] ? 2 : 1;
        const bool op = *q == '"' && q[1] && strchr("*+?{", q[1]);
        if (!op) {
            *inlined = true;
            return parse_string(ps, rule, alt);
        }
        const int r = new_rule(ps, NULL, 0);
        if (r < 0 || !add_alt(ps, r) || parse_string(ps, r, 0)) return -1;
        *x = rule_elem(r);
    } else if (c == '[') {
        if (parse_class(ps, x)) return -1;
    } else if (c == '.') {
        ps->p++;
        if (char_elem(ps, '\n', '\n', x)) return -1;
        x->neg = 1;   /* any character but a newline, as llama.cpp */
    } else if (c == '(') {
        if (++ps->depth > MAX_DEPTH) return fail(ps, "groups nested too deep");
        ps->p++;
        const int r = new_rule(ps, NULL, 0);
        if (r < 0 || parse_alts(ps, r)) return -1;
        skip_space(ps, true);
        if (*ps->p != ')') return fail(ps, "expected )");
        ps->p++;
        ps->depth--;
        *x = rule_elem(r);
    } else if (is_name_char(c) && !at_rule_start(ps->p, &len)) {
        const char *name = ps->p;
        while (is_name_char(*ps->p)) ps->p++;
        const int r = rule_named(ps, name, (size_t)(ps->p - name));
        if (r < 0) return -1;
        *x = rule_elem(r);
    } else {
        return fail(ps, "expected a string, a class, a rule name or a group");
    }
    return 0;
}

/* One primary with its repetition operators, appended to alternative alt of rule. */
static int parse_item(parser *ps, int rule, int alt) {
    g_elem x;
    bool inlined;
    if (parse_primary(ps, rule, alt, &x, &inlined)) return -1;
    if (inlined) return 0;
    for (;;) {   /* repetition operators apply to what came before, innermost first */
        int min, max;
        if (*ps->p == '*') min = 0, max = -1, ps->p++;
        else if (*ps->p == '+') min = 1, max = -1, ps->p++;
        else if (*ps->p == '?') min = 0, max = 1, ps->p++;
        else if (*ps->p == '{') { if (parse_count(ps, &min, &max)) return -1; }
        else break;
        const int r = new_rule(ps, NULL, 0);
        if (r < 0 || !add_alt(ps, r) || repeat(ps, r, 0, x, min, max)) return -1;
        x = rule_elem(r);
    }
    return push_elem(ps, &ps->rules[rule].alt[alt], x);
}

/* seq ('|' seq)* into the alternatives of rule, up to ')' or the next rule. */
static int parse_alts(parser *ps, int rule) {
    if (!add_alt(ps, rule)) return -1;
    for (;;) {
        skip_space(ps, true);
        size_t len;
        const char c = *ps->p;
        if (!c || c == ')' || at_rule_start(ps->p, &len)) return 0;
        if (c == '|') {
            ps->p++;
            if (!add_alt(ps, rule)) return -1;
            continue;
        }
        if (parse_item(ps, rule, ps->rules[rule].n_alt - 1)) return -1;
    }
}

/* ---- compiling ------------------------------------------------------------------------------- */

static void free_builder(parser *ps) {
    for (int i = 0; i < ps->n_rules; i++) {
        b_rule *r = &ps->rules[i];
        for (int k = 0; k < r->n_alt; k++) free(r->alt[k].el);
        free(r->alt);
        free(r->name);
    }
    free(ps->rules);
    free(ps->rg);
    free(ps->names);
}

static bs_grammar *compile(parser *ps) {
    bs_grammar *g = calloc(1, sizeof *g);
    if (!g) return bs_error("grammar: out of memory"), NULL;
    int n_el = 0, n_alt = 0;
    for (int i = 0; i < ps->n_rules; i++)
        for (int k = 0; k < ps->rules[i].n_alt; k++) {
            n_alt++;
            n_el += ps->rules[i].alt[k].n + 1;
        }
    g->el = malloc((size_t)BS_MAX(n_el, 1) * sizeof *g->el);
    g->alt = malloc((size_t)BS_MAX(n_alt, 1) * sizeof *g->alt);
    g->rule = malloc((size_t)BS_MAX(ps->n_rules, 1) * sizeof *g->rule);
    g->rg = ps->rg;   /* the pool, taken over */
    g->n_rg = ps->n_rg;
    ps->rg = NULL;
    if (!g->el || !g->alt || !g->rule) {
        bs_grammar_free(g);
        return bs_error("grammar: out of memory"), NULL;
    }
    g->n_rule = ps->n_rules;
    for (int i = 0; i < ps->n_rules; i++) {
        const b_rule *r = &ps->rules[i];
        g->rule[i] = (g_rule){(uint32_t)g->n_alt, (uint32_t)r->n_alt};
        for (int k = 0; k < r->n_alt; k++) {
            g->alt[g->n_alt++] = (uint32_t)g->n_el;
            if (r->alt[k].n) memcpy(g->el + g->n_el, r->alt[k].el, (size_t)r->alt[k].n * sizeof *g->el);
            g->n_el += r->alt[k].n;
            g->el[g->n_el++] = (g_elem){.type = GE_END};
        }
    }
    return g;
}

/* A fixed point over rules in linear time: rule r gets the property when one of its
 * alternatives has it through all of its elements, where a class element has it when
 * class_ok and a rule element when that rule has it. Each alternative is scanned once from
 * where it stopped; an alternative stopped at rule x waits on x's list. */
static bool class_nonempty(const bs_grammar *g, const g_elem *e) {
    if (!e->neg) return e->n > 0;
    return !(e->n == 1 && g->rg[e->a].lo == 0 && g->rg[e->a].hi >= 0x10FFFF);
}

/* Scans alternative a on from at[a] past elements that have the property: it finishes (its rule
 * gets the property, queued on todo) or waits on the rule element it stopped at. */
typedef struct fixpoint {
    const bs_grammar *g;
    bool class_ok, *has;
    uint32_t *at, *alt_rule, *todo;
    int32_t *wait, *next;
    int n_todo;
} fixpoint;

static void scan_alt(fixpoint *f, int a) {
    const bs_grammar *g = f->g;
    const g_elem *e = &g->el[f->at[a]];
    while (e->type != GE_END && (e->type == GE_CHARS ? f->class_ok && class_nonempty(g, e) : f->has[e->a])) e++;
    f->at[a] = (uint32_t)(e - g->el);
    if (e->type == GE_RULE) {
        f->next[a] = f->wait[e->a];
        f->wait[e->a] = a;
    } else if (e->type == GE_END && !f->has[f->alt_rule[a]]) {
        f->has[f->alt_rule[a]] = true;
        f->todo[f->n_todo++] = f->alt_rule[a];
    }
}

/* A fixed point over rules in linear time: a rule has the property when one of its
 * alternatives has it through all of its elements (a class: when class_ok and it is not empty;
 * a rule: when that rule has it). class_ok false: the rules that can match the empty text;
 * true: the rules that match some text. NULL when out of memory. */
static bool *rule_fixpoint(const bs_grammar *g, bool class_ok) {
    fixpoint f = {.g = g, .class_ok = class_ok};
    f.has = calloc((size_t)g->n_rule, sizeof *f.has);
    f.at = malloc((size_t)BS_MAX(g->n_alt, 1) * sizeof *f.at);
    f.alt_rule = malloc((size_t)BS_MAX(g->n_alt, 1) * sizeof *f.alt_rule);
    f.next = malloc((size_t)BS_MAX(g->n_alt, 1) * sizeof *f.next);
    f.wait = malloc((size_t)g->n_rule * sizeof *f.wait);
    f.todo = malloc((size_t)g->n_rule * sizeof *f.todo);
    if (f.has && f.at && f.alt_rule && f.next && f.wait && f.todo) {
        for (int r = 0; r < g->n_rule; r++) {
            f.wait[r] = -1;
            for (uint32_t k = 0; k < g->rule[r].n_alt; k++) f.alt_rule[g->rule[r].alt0 + k] = (uint32_t)r;
        }
        for (int a = 0; a < g->n_alt; a++) {
            f.at[a] = g->alt[a];
            scan_alt(&f, a);
        }
        while (f.n_todo) {   /* a rule got it: the alternatives waiting on it go on past it */
            const uint32_t r = f.todo[--f.n_todo];
            int32_t w = f.wait[r], nx;
            f.wait[r] = -1;
            for (; w >= 0; w = nx) {
                nx = f.next[w];
                f.at[w]++;
                scan_alt(&f, w);
            }
        }
    } else {
        free(f.has);
        f.has = NULL;
    }
    free(f.at);
    free(f.alt_rule);
    free(f.next);
    free(f.wait);
    free(f.todo);
    return f.has;
}

/* Left recursion: a rule reachable from itself through leading elements that can all be empty
 * would make matching loop. An iterative depth-first search over the "can begin with" edges
 * finds a cycle in time linear in the grammar. 0, -1 (recursion) or -2 (out of memory). */
static int check_left_recursion(const bs_grammar *g, const bool *nullable) {
    uint8_t *color = calloc((size_t)g->n_rule, 1);   /* 0 new, 1 on the path, 2 done */
    struct frame { uint32_t rule, alt, el; } *st = malloc((size_t)(g->n_rule + 1) * sizeof *st);
    if (!color || !st) {
        free(color);
        free(st);
        return -2;
    }
    int rc = 0;
    for (int r0 = 0; r0 < g->n_rule && !rc; r0++) {
        if (color[r0]) continue;
        int n = 0;
        st[n++] = (struct frame){(uint32_t)r0, 0, g->alt[g->rule[r0].alt0]};
        color[r0] = 1;
        while (n && !rc) {
            struct frame *f = &st[n - 1];
            const g_rule *R = &g->rule[f->rule];
            if (f->alt >= R->n_alt) {   /* every leading edge seen */
                color[f->rule] = 2;
                n--;
                continue;
            }
            const g_elem *e = &g->el[f->el];
            /* the element at f->el leads; the next one does too while this one can be empty */
            if (e->type != GE_RULE || (f->el != g->alt[R->alt0 + f->alt] && !nullable[(e - 1)->a])) {
                if (++f->alt < R->n_alt) f->el = g->alt[R->alt0 + f->alt];
                continue;
            }
            f->el++;
            if (color[e->a] == 1) rc = -1;
            else if (!color[e->a]) {
                color[e->a] = 1;
                st[n++] = (struct frame){e->a, 0, g->alt[g->rule[e->a].alt0]};
            }
        }
    }
    free(color);
    free(st);
    return rc;
}

/* Structural checks after compiling: left recursion, and a root that matches no text at all
 * (a request whose every token would be banned). */
static int check(const bs_grammar *g) {
    bool *nullable = rule_fixpoint(g, false), *productive = rule_fixpoint(g, true);
    int rc = !nullable || !productive ? -2 : check_left_recursion(g, nullable);
    if (!rc && !productive[g->root]) rc = -3;
    free(nullable);
    free(productive);
    if (rc == -1) return bs_error("grammar: left recursion (a rule that can begin with itself)");
    if (rc == -2) return bs_error("grammar: out of memory");
    if (rc == -3) return bs_error("grammar: `root` matches no text at all (every path recurses forever)");
    return 0;
}

bs_grammar *bs_grammar_parse(const char *gbnf) {
    if (!gbnf) return bs_error("grammar: none given"), NULL;
    const size_t len = strlen(gbnf);
    if (len > BS_GRAMMAR_MAX_BYTES) return bs_error("grammar: longer than %d bytes (the limit)", BS_GRAMMAR_MAX_BYTES), NULL;
    parser ps = {.s = gbnf, .p = gbnf, .end = gbnf + len, .line = 1};
    for (;;) {
        skip_space(&ps, true);
        if (!*ps.p) break;
        size_t len;
        if (!at_rule_start(ps.p, &len)) { fail(&ps, "expected `name ::=`"); break; }
        const int r = rule_named(&ps, ps.p, len);
        if (r < 0) break;
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
    if (g) g->root = root;
    if (g && check(g)) {
        bs_grammar_free(g);
        return NULL;
    }
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
