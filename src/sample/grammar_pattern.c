/* grammar_pattern.c: a JSON schema's string "pattern" (an ECMAScript regular expression) as GBNF
 * for the JSON text of the strings it allows, and the string "format"s of a fixed shape.
 *
 * A pattern matches anywhere in the string unless ^ and $ anchor it (JSON Schema's meaning), so
 * an unanchored side takes any characters. A character of the pattern stands for a character of
 * the decoded string: the grammar writes it as JSON does (plain, or \" \\ \b \f \n \r \t \u00XX
 * for those JSON escapes), so the output is valid JSON whose value matches.
 *
 * Supported: literal characters and escapes (\d \w \s and their negations, \t \n \r \f \v \0,
 * \cX, \xHH, \uHHHH, escaped punctuation), `.` (any character but a line terminator), classes
 * with ranges and negation, groups (capturing, (?:...), (?<name>...)), alternation, the greedy
 * and lazy quantifiers * + ? {n} {n,} {n,m}, and ^ / $ at the ends of a top-level alternative.
 * Anything else is refused with an error naming it, never dropped: backreferences, lookaround,
 * word boundaries, anchors inside, and an unbounded repetition of what can match nothing
 * (`(a*)*`, which no grammar without left recursion can write). */
#include "sample/grammar.h"
#include "sample/grammar_text.h"
#include "io/utf8.h"
#include "io/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATTERN 4096   /* bytes of a pattern */
#define MAX_NEST 32        /* groups inside groups */
#define MAX_COUNT 1000     /* a {n,m} bound (written in the grammar's counts: gt_put_repeat) */
#define MAX_RANGES 256     /* a class's ranges of code points, after merging */
#define INF (-1)
#define TRY(x) do { if (x) return -1; } while (0)

typedef struct cp_range { uint32_t lo, hi; } cp_range;
typedef struct cset { cp_range r[MAX_RANGES]; int n; bool over; } cset;

/* The lengths in code points a piece of a pattern matches: lo to hi (INF: unbounded). */
typedef struct span { long lo, hi; } span;

#define SPAN_CAP 100000000L   /* past any minLength/maxLength: counted as unbounded */

static long span_mul(long a, long n) { return a == INF || n == INF ? (a && n ? INF : 0) : a * n > SPAN_CAP ? INF : a * n; }
static long span_add(long a, long b) { return a == INF || b == INF || a + b > SPAN_CAP ? INF : a + b; }

typedef struct rx {
    const char *s, *p, *end;
    int depth;
    bool failed;
    char any[1024];   /* GBNF for one character of any kind (an unanchored side's unit) */
} rx;

static int rx_fail(rx *x, const char *what) {
    if (!x->failed) bs_error("json schema: pattern: %s (at byte %d)", what, (int)(x->p - x->s));
    x->failed = true;
    return -1;
}

/* --- sets of code points ------------------------------------------------------------------ */

static void set_norm(cset *s);

static void set_add(cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == MAX_RANGES) set_norm(s);   /* [abc...]: neighbours merge */
    if (s->n == MAX_RANGES) { s->over = true; return; }
    s->r[s->n++] = (cp_range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, overlapping and touching ranges merged. */
static void set_norm(cset *s) {
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
            if (s->r[i].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[i].hi;
        } else {
            s->r[m++] = s->r[i];
        }
    }
    s->n = m;
}

static void set_complement(cset *s) {
    set_norm(s);
    cset c = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) set_add(&c, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF) set_add(&c, next, 0x10FFFF);
    c.over |= s->over;
    *s = c;
}

static bool set_has(const cset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi) return true;
    return false;
}

/* \d \w \s (lower case) or their complements (upper case) into s; false for another letter. */
static bool class_escape(char e, cset *s) {
    cset t = {.n = 0};
    switch (e | 0x20) {
    case 'd': set_add(&t, '0', '9'); break;
    case 'w': set_add(&t, '0', '9'); set_add(&t, 'A', 'Z'); set_add(&t, '_', '_'); set_add(&t, 'a', 'z'); break;
    case 's': {   /* ECMAScript's white space and line terminators */
        static const cp_range ws[] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                      {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                      {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < BS_ARRAY_LEN(ws); i++) set_add(&t, ws[i].lo, ws[i].hi);
        break;
    }
    default: return false;
    }
    if (e >= 'A' && e <= 'Z') set_complement(&t);
    for (int i = 0; i < t.n; i++) set_add(s, t.r[i].lo, t.r[i].hi);
    return true;
}

/* --- GBNF for a set, as JSON writes its characters ---------------------------------------- */

static void put_cp(gt_buf *b, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) gt_putf(b, "%c", (char)cp);
    else if (cp <= 0xFFFF) gt_putf(b, "\\u%04X", (unsigned)cp);
    else gt_putf(b, "\\U%08X", (unsigned)cp);
}

/* A GBNF literal of JSON text (an escape such as \n), its \ and " escaped for GBNF. */
static void put_json_text(gt_buf *b, const char *text) {
    gt_put(b, "\"");
    for (const char *c = text; *c; c++) gt_putf(b, "%s%c", *c == '\\' || *c == '"' ? "\\" : "", *c);
    gt_put(b, "\"");
}

/* The alternatives that write one character of s in JSON: a class of those written plainly
 * (surrogates are no characters), then the escaped ones. 0 if there are none. */
static int put_set(gt_buf *b, const cset *s) {
    static const cp_range plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, 0x10FFFF}};
    int n = 0;
    gt_put(b, "( ");
    bool open = false;
    for (int i = 0; i < s->n; i++)
        for (size_t k = 0; k < BS_ARRAY_LEN(plain); k++) {
            const uint32_t lo = BS_MAX(s->r[i].lo, plain[k].lo), hi = BS_MIN(s->r[i].hi, plain[k].hi);
            if (lo > hi) continue;
            if (!open) gt_put(b, "["), open = true;
            put_cp(b, lo);
            if (hi > lo) gt_put(b, "-"), put_cp(b, hi);
        }
    if (open) gt_put(b, "]"), n++;
    if (set_has(s, '"')) gt_put(b, n++ ? " | " : ""), put_json_text(b, "\\\"");
    if (set_has(s, '\\')) gt_put(b, n++ ? " | " : ""), put_json_text(b, "\\\\");
    bool all_ctl = true;
    for (uint32_t c = 0; c < 0x20 && all_ctl; c++) all_ctl = set_has(s, c);
    if (all_ctl) {
        gt_put(b, n++ ? " | " : "");
        gt_put(b, "\"\\\\\" ( [bfnrt] | \"u00\" [01] [0-9a-fA-F] )");
    } else {
        for (uint32_t c = 0; c < 0x20; c++) {
            if (!set_has(s, c)) continue;
            static const char *const short_esc[0x20] = {[8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r"};
            gt_put(b, n++ ? " | " : "");
            if (short_esc[c]) {
                put_json_text(b, short_esc[c]);
                continue;
            }
            char e[8];   /* \u00XX, its last digit in either case */
            snprintf(e, sizeof e, "\\u00%x", (unsigned)c >> 4);
            put_json_text(b, e);
            if ((c & 15) < 10) gt_putf(b, " \"%x\"", (unsigned)c & 15);
            else gt_putf(b, " [%x%X]", (unsigned)c & 15, (unsigned)c & 15);
        }
    }
    gt_put(b, " )");
    return n;
}

/* --- the pattern ---------------------------------------------------------------------------- */

static int next_cp(rx *x, uint32_t *cp) {
    const int n = bs_utf8_next((const unsigned char *)x->p, (size_t)(x->end - x->p), cp);
    if (n <= 0) return rx_fail(x, "not valid UTF-8");
    x->p += n;
    return 0;
}

static int hex_digits(rx *x, int n, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < n; i++, x->p++) {
        const char c = x->p < x->end ? *x->p : 0;
        const int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return rx_fail(x, "\\x takes 2 hex digits, \\u 4");
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* The escape after a backslash: a character (*cp) or, where classes may be, a class into s.
 * in_class: \b is a backspace there, a word boundary outside. */
static int escape(rx *x, bool in_class, uint32_t *cp, cset *s, bool *is_set) {
    *is_set = false;
    if (x->p >= x->end) return rx_fail(x, "a backslash at the end");
    const char e = *x->p++;
    if (class_escape(e, s)) return *is_set = true, 0;
    switch (e) {
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'x': return hex_digits(x, 2, cp);
    case 'u': return hex_digits(x, 4, cp);
    case 'c':
        if (x->p < x->end && ((*x->p | 0x20) >= 'a' && (*x->p | 0x20) <= 'z')) return *cp = (uint32_t)(*x->p++ % 32), 0;
        return rx_fail(x, "\\c takes a letter");
    case '0':
        if (x->p < x->end && *x->p >= '0' && *x->p <= '9') return rx_fail(x, "octal escapes are not supported");
        return *cp = 0, 0;
    case 'b':
        if (in_class) return *cp = '\b', 0;
        return rx_fail(x, "word boundaries (\\b) are not supported");
    case 'B': return rx_fail(x, "word boundaries (\\B) are not supported");
    case 'k': return rx_fail(x, "backreferences are not supported");
    default: break;
    }
    if (e >= '1' && e <= '9') return rx_fail(x, "backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return rx_fail(x, "an unknown escape");
    x->p--;   /* escaped punctuation, or any other character: itself */
    return next_cp(x, cp);
}

/* One item of a class: a character (*cp) or a class escape into s. */
static int class_item(rx *x, uint32_t *cp, cset *s, bool *is_set) {
    if (*x->p == '\\') {
        x->p++;
        return escape(x, true, cp, s, is_set);
    }
    *is_set = false;
    return next_cp(x, cp);
}

/* [...] after its '[', into s. */
static int char_class(rx *x, cset *s) {
    const bool neg = x->p < x->end && *x->p == '^';
    x->p += neg;
    while (x->p < x->end && *x->p != ']') {
        uint32_t lo, hi;
        bool lo_set, hi_set;
        TRY(class_item(x, &lo, s, &lo_set));
        if (lo_set) continue;
        if (x->p + 1 < x->end && *x->p == '-' && x->p[1] != ']') {
            x->p++;
            TRY(class_item(x, &hi, s, &hi_set));
            if (hi_set) return rx_fail(x, "a range ending in a class escape");
            if (hi < lo) return rx_fail(x, "a range out of order");
            set_add(s, lo, hi);
        } else {
            set_add(s, lo, lo);
        }
    }
    if (x->p >= x->end) return rx_fail(x, "a class without its ']'");
    x->p++;
    if (neg) set_complement(s);
    set_norm(s);
    if (s->over) return rx_fail(x, "a class of too many ranges");
    if (!s->n) return rx_fail(x, "a class that matches nothing");
    return 0;
}

/* A quantifier at x->p: {min, max} (max INF: unbounded), lazy '?' skipped; false if none (a
 * '{' that does not open n, n, or n,m is a literal '{'). */
static bool quantifier(rx *x, long *mn, long *mx) {
    if (x->p >= x->end) return false;
    const char c = *x->p;
    if (c == '*' || c == '+' || c == '?') {
        *mn = c == '+', *mx = c == '?' ? 1 : INF;
        x->p++;
    } else if (c == '{') {
        const char *q = x->p + 1;
        char *e;
        if (q >= x->end || *q < '0' || *q > '9') return false;
        *mn = strtol(q, &e, 10);
        *mx = *mn;
        if (*e == ',') {
            q = e + 1;
            *mx = *q >= '0' && *q <= '9' ? strtol(q, &e, 10) : INF;
            if (*mx == INF) e = (char *)q;
        }
        if (*e != '}') return false;
        x->p = e + 1;
    } else {
        return false;
    }
    if (x->p < x->end && *x->p == '?') x->p++;   /* lazy: the same strings */
    return true;
}

static int alternation(rx *x, gt_buf *b, bool top, span *len);

/* One atom into b; *len: the lengths it matches (lo 0: it can match the empty string). */
static int atom(rx *x, gt_buf *b, span *len) {
    cset s = {.n = 0};
    uint32_t cp;
    bool is_set = false;
    *len = (span){1, 1};
    const char c = *x->p;
    if (c == '(') {
        x->p++;
        if (x->end - x->p >= 2 && x->p[0] == '?') {
            if (x->p[1] == ':') x->p += 2;
            else if (x->p[1] == '<' && x->end - x->p >= 3 && x->p[2] != '=' && x->p[2] != '!') {
                const char *gt = memchr(x->p, '>', (size_t)(x->end - x->p));
                if (!gt) return rx_fail(x, "a group name without its '>'");
                x->p = gt + 1;
            } else {
                return rx_fail(x, "lookaround and other (? groups are not supported");
            }
        }
        if (++x->depth > MAX_NEST) return rx_fail(x, "groups nested too deep");
        TRY(alternation(x, b, false, len));
        x->depth--;
        if (x->p >= x->end || *x->p != ')') return rx_fail(x, "a group without its ')'");
        x->p++;
        return 0;
    }
    x->p++;
    switch (c) {
    case '[': TRY(char_class(x, &s)); is_set = true; break;
    case '.':   /* anything but the line terminators */
        set_add(&s, '\n', '\n'), set_add(&s, '\r', '\r'), set_add(&s, 0x2028, 0x2029);
        set_complement(&s);
        is_set = true;
        break;
    case '\\': TRY(escape(x, false, &cp, &s, &is_set)); break;
    case '^': case '$': return rx_fail(x, "an anchor inside the pattern (^ and $ only at its ends)");
    case '*': case '+': case '?': return rx_fail(x, "a quantifier with nothing to repeat");
    case ')': return rx_fail(x, "a ')' without its '('");
    default:
        x->p--;
        if (c == '{') {
            long mn, mx;
            if (quantifier(x, &mn, &mx)) return rx_fail(x, "a quantifier with nothing to repeat");
            x->p++;
            cp = '{';
        } else {
            TRY(next_cp(x, &cp));
        }
    }
    if (!is_set) set_add(&s, cp, cp);
    set_norm(&s);
    if (put_set(b, &s) == 0) return rx_fail(x, "a class of characters JSON cannot hold (surrogates)");
    return 0;
}

/* Items up to '|', ')' or the end; at the top level a leading ^ and a trailing $ anchor it,
 * and a side without one takes any characters. */
static int sequence(rx *x, gt_buf *b, bool top, span *len) {
    const bool start = top && x->p < x->end && *x->p == '^';
    x->p += start;
    bool end = false;
    *len = (span){0, 0};
    if (top && !start) gt_putf(b, "( %s )* ", x->any);
    gt_put(b, "\"\"");   /* the empty sequence, and a separator */
    while (x->p < x->end && *x->p != '|' && *x->p != ')') {
        if (top && *x->p == '$' && (x->p + 1 == x->end || x->p[1] == '|')) {
            x->p++;
            end = true;
            break;
        }
        gt_buf a = {0};
        span al;
        long mn, mx;
        int rc = atom(x, &a, &al);
        const bool nul = al.lo == 0;
        if (!rc && (a.over || !a.p)) rc = a.over ? gt_check(&a, "json schema: pattern") : rx_fail(x, "an empty atom");
        if (!rc && quantifier(x, &mn, &mx)) {
            if (mn > MAX_COUNT || mx > MAX_COUNT) rc = rx_fail(x, "a repetition count past 1000");
            else if (mx != INF && mx < mn) rc = rx_fail(x, "a repetition {n,m} with m < n");
            else if (mx == INF && nul) rc = rx_fail(x, "an unbounded repetition of what can match nothing");
            else gt_put(b, " "), gt_put_repeat(b, a.p, mn, mx);
            al = (span){span_mul(al.lo, mn), span_mul(al.hi, mx)};
        } else if (!rc) {
            gt_putf(b, " %s", a.p);
        }
        free(a.p);
        if (rc) return -1;
        *len = (span){span_add(len->lo, al.lo), span_add(len->hi, al.hi)};
    }
    if (top && !end) gt_putf(b, " ( %s )*", x->any);
    if (top && (!start || !end)) len->hi = INF;   /* an unanchored side takes any characters */
    return 0;
}

static int alternation(rx *x, gt_buf *b, bool top, span *len) {
    gt_put(b, "( ");
    for (bool first = true;; first = false) {
        span sl;
        TRY(sequence(x, b, top, &sl));
        if (first) *len = sl;
        len->lo = BS_MIN(len->lo, sl.lo);
        len->hi = len->hi == INF || sl.hi == INF ? INF : BS_MAX(len->hi, sl.hi);
        if (x->p >= x->end || *x->p != '|') break;
        x->p++;
        gt_put(b, " | ");
    }
    gt_put(b, " )");
    return 0;
}

char *bs_grammar_from_pattern_len(const char *pattern, long *min_len, long *max_len) {
    const size_t n = strlen(pattern);
    if (n > MAX_PATTERN) return bs_error("json schema: pattern: longer than %d bytes", MAX_PATTERN), NULL;
    rx x = {.s = pattern, .p = pattern, .end = pattern + n};
    cset all = {.n = 0};
    set_add(&all, 0, 0x10FFFF);
    gt_buf any = {0};
    put_set(&any, &all);
    snprintf(x.any, sizeof x.any, "%s", any.p ? any.p : "");
    free(any.p);
    gt_buf b = {0};
    span len;
    gt_put(&b, "\"\\\"\" ");
    int rc = alternation(&x, &b, true, &len);
    if (!rc && x.p < x.end) rc = rx_fail(&x, "a ')' without its '('");
    gt_put(&b, " \"\\\"\"");
    if (!rc) rc = gt_check(&b, "json schema: pattern");
    if (rc) {
        free(b.p);
        return NULL;
    }
    if (min_len) *min_len = len.lo;
    if (max_len) *max_len = len.hi;
    return b.p;
}

char *bs_grammar_from_pattern(const char *pattern) { return bs_grammar_from_pattern_len(pattern, NULL, NULL); }

/* An RFC 3339 full-date: each month with its own days. February has 29 in every year (a
 * grammar would need the year's value mod 4, 100 and 400 to tell): 2023-02-29 passes. */
#define DATE "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-9]))"

/* The string formats with a fixed shape (RFC 3339 date and time, UUID, IPv4), as patterns;
 * NULL for the others, which JSON Schema makes annotations (email, uri, ...: not constrained). */
const char *bs_grammar_format_pattern(const char *format) {
    static const char *const fmt[][2] = {
        {"date", "^" DATE "$"},
        {"time", "^([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
        {"date-time", "^" DATE "T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
                      "(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        {"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(fmt); i++)
        if (!strcmp(format, fmt[i][0])) return fmt[i][1];
    return NULL;
}
