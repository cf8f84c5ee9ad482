/* test_grammar_values.c: the values a JSON schema narrows, as grammars: string patterns and
 * formats (grammar_pattern.c) and integer and number ranges (grammar_range.c).
 *   - strings that match and strings that do not, for anchors (and their absence: a match
 *     anywhere), classes, escapes, groups, alternation and every quantifier, with the
 *     characters JSON escapes (", \, controls) written as JSON writes them;
 *   - the formats of a fixed shape (date, time, date-time, uuid, ipv4; a date's days by its
 *     month, February's 29 in every year), a pattern beside minLength/maxLength (taken where
 *     all its strings' lengths are within them, one repeated character class counted by them,
 *     else refused),
 *     a pattern inside an object's property;
 *   - what it does not support is refused with an error naming it, never dropped;
 *   - counts past the 64 one GBNF repetition takes: minLength/maxLength up to 4096 (code points:
 *     a \u surrogate pair counts one, a lone surrogate is refused),
 *     minItems/maxItems up to 256, pattern quantifiers up to 1000, at and around their bounds;
 *   - the token mask equals allows() token by token on a 20000-token random vocabulary, along
 *     random walks through counted and looping strings (the mask's whole-subtree shortcuts);
 *   - integers with minimum/maximum (inclusive, exclusive as draft 4's booleans and as later
 *     drafts' numbers, fractional bounds): every integer near the bounds, across lengths and
 *     signs, and random ones, is accepted exactly when inside, written canonically (no "-0",
 *     no leading zeros); an empty range is refused; numbers likewise (integer parts near the
 *     bounds with fractions, both signs), their bounds rounded inward where not whole; bounds
 *     past 2^53 written as integers are exact, for integers and numbers, and written as reals
 *     move a double's step inward (never outward of the number written);
 *   - with a file argument: each line a JSON array [pattern, string], it prints 1 (the JSON
 *     text of the string matches the schema {"type": "string", "pattern": pattern}), 0 (not),
 *     or -1 (refused, or not compiling): test_grammar_pattern.py compares that with Python's
 *     re. */
#include "grammar_test.h"
#include "test.h"
#include "io/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bs_grammar_vocab *vocab(void) {
    static const char *const piece[] = {"\"", "a", "0"};
    static const size_t len[] = {1, 1, 1};
    static const bool eog[] = {false, false, false};
    return bs_grammar_vocab_from_pieces(piece, len, eog, 3);
}

/* The same for {"type": "string", "pattern": pattern} and the JSON text of str. */
static int pattern_matches(const char *pattern, const char *str, size_t str_len, const bs_grammar_vocab *v) {
    json_t *sch = json_pack("{s:s,s:s}", "type", "string", "pattern", pattern);
    json_t *s = json_stringn(str, str_len);
    char *schema = json_dumps(sch, JSON_COMPACT), *doc = json_dumps(s, JSON_ENCODE_ANY);
    const int r = schema && doc ? schema_matches(schema, doc, v) : -3;
    free(schema);
    free(doc);
    json_decref(sch);
    json_decref(s);
    return r;
}

static void test_cases(const bs_grammar_vocab *v) {
    static const struct { const char *p, *s; int want; } cases[] = {
        {"^abc$", "abc", 1}, {"^abc$", "abcd", 0}, {"^abc$", "", 0},
        {"abc", "xxabcxx", 1}, {"abc", "ab", 0}, {"^abc", "abcxx", 1}, {"^abc", "xabc", 0},
        {"abc$", "xxabc", 1}, {"abc$", "abcx", 0}, {"", "anything", 1}, {"^$", "", 1}, {"^$", "a", 0},
        {"^a|b$", "ax", 1}, {"^a|b$", "xb", 1}, {"^a|b$", "xa", 0},
        {"^[a-c]+$", "abcab", 1}, {"^[a-c]+$", "abd", 0}, {"^[^a-c]+$", "xyz", 1}, {"^[^a-c]+$", "xaz", 0},
        {"^\\d{3}-\\d{4}$", "555-1234", 1}, {"^\\d{3}-\\d{4}$", "55-1234", 0}, {"^\\d{3}-\\d{4}$", "555-12345", 0},
        {"^\\w+$", "ab_9Z", 1}, {"^\\w+$", "a-b", 0}, {"^\\W$", "-", 1}, {"^\\W$", "a", 0},
        {"^a\\sb$", "a b", 1}, {"^a\\sb$", "a\tb", 1}, {"^a\\sb$", "a\nb", 1}, {"^a\\Sb$", "a b", 0},
        {"^\\D+$", "ab", 1}, {"^\\D+$", "a1", 0},
        {"^a.c$", "abc", 1}, {"^a.c$", "a\"c", 1}, {"^a.c$", "a\nc", 0}, {"^a.c$", "a\rc", 0},
        {"^a.c$", "a\xc3\xa9" "c", 1}, {"^a.c$", "a\xe2\x80\xa8" "c", 0}, {"^a.c$", "a\x01" "c", 1},
        {"^\"\\\\$", "\"\\", 1}, {"^[\"\\\\]+$", "\\\"\\", 1}, {"^[\"\\\\]+$", "a", 0},
        {"^\\t\\n$", "\t\n", 1}, {"^[\\x00-\\x1f]$", "\x1f", 1}, {"^[\\x00-\\x1f]$", " ", 0},
        {"^\\x41\\u00e9$", "A\xc3\xa9", 1}, {"^\\cJ$", "\n", 1}, {"^[\\b]$", "\b", 1}, {"^\\0$", "", 0},
        {"^(ab|cd)+$", "abcdab", 1}, {"^(ab|cd)+$", "abc", 0}, {"^(?:ab)?c$", "c", 1}, {"^(?:ab)?c$", "abc", 1},
        {"^(?<y>\\d{4})-x$", "2024-x", 1}, {"^a{2,3}$", "aaa", 1}, {"^a{2,3}$", "aaaa", 0}, {"^a{2,}$", "aaaaa", 1},
        {"^a{2,}$", "a", 0}, {"^a{0}b$", "b", 1}, {"^a*?b+?$", "aabb", 1}, {"^a{,2}$", "a{,2}", 1},
        {"^x{$", "x{", 1}, {"^[a-]+$", "a-a", 1}, {"^[-a]$", "-", 1}, {"^[\\-\\]]+$", "-]", 1},
        {"^\\.\\*\\+\\?\\(\\)\\[\\{\\|\\^\\$\\/$", ".*+?()[{|^$/", 1}, {"^[^]$", "\n", 1},
        {"^[\\d.]+$", "1.5", 1}, {"^[\\d.]+$", "1,5", 0}, {"^[^\\d\\s]+$", "ab", 1}, {"^[^\\d\\s]+$", "a b", 0},
        {"^(a|b|)c$", "c", 1}, {"^((a|b)c){2}$", "acbc", 1}, {"^((a|b)c){2}$", "acb", 0},
        {"^\xc3\xa9+$", "\xc3\xa9\xc3\xa9", 1}, {"^[\xc3\xa0-\xc3\xbf]$", "\xc3\xa9", 1}, {"^[\xc3\xa0-\xc3\xbf]$", "e", 0},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const int got = pattern_matches(cases[i].p, cases[i].s, strlen(cases[i].s), v);
        CHECKF(got == cases[i].want, "pattern %zu /%s/ on \"%s\": %d, want %d (%s)", i, cases[i].p, cases[i].s, got,
               cases[i].want, got < 0 ? bitspark_last_error() : "");
    }
    /* a class that lists 400 characters one by one (neighbours: merged as they come) */
    char cls[2600] = "^[";
    for (int c = 0; c < 400; c++) {
        char u[8];
        snprintf(u, sizeof u, "\\u%04x", 0x100 + c);
        strcat(cls, u);
    }
    strcat(cls, "]$");
    CHECK_EQ_INT(pattern_matches(cls, "\xc4\x80", 2, v), 1);
    CHECK_EQ_INT(pattern_matches(cls, "a", 1, v), 0);
    /* a NUL inside the string is the JSON escape \u0000 */
    CHECK_EQ_INT(pattern_matches("^a\\0b$", "a\0b", 3, v), 1);
    CHECK_EQ_INT(pattern_matches("^a[\\0]b$", "a\0c", 3, v), 0);
}

static void test_refused(const bs_grammar_vocab *v) {
    static const struct { const char *p, *why; } bad[] = {
        {"^(a)\\1$", "backreferences"}, {"^(?<n>a)\\k<n>$", "backreferences"}, {"a(?=b)", "lookaround"},
        {"(?!a)b", "lookaround"}, {"(?<=a)b", "lookaround"}, {"\\bword\\b", "word boundaries"},
        {"a^b", "anchor"}, {"a$b", "anchor"}, {"(^a)", "anchor"}, {"*a", "nothing to repeat"},
        {"a{2}{3}", "nothing to repeat"}, {"(a", "')'"}, {"a)", "'('"}, {"[a-", "']'"}, {"[z-a]", "out of order"},
        {"[]", "matches nothing"}, {"(a*)*", "can match nothing"}, {"(a|)+", "can match nothing"},
        {"(a?){2,}", "can match nothing"}, {"a{1001}", "past 1000"}, {"a{3,2}", "m < n"}, {"\\q", "unknown escape"},
        {"\\x4", "hex digits"}, {"\\07", "octal"}, {"[a-\\d]", "class escape"}, {"\\", "backslash at the end"},
        {"[\\uD800-\\uDFFF]", "surrogates"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(bad); i++) {
        const int got = pattern_matches(bad[i].p, "x", 1, v);
        CHECKF(got == -1 && strstr(bitspark_last_error(), "pattern") && strstr(bitspark_last_error(), bad[i].why),
               "pattern /%s/: %d, error '%s', want a refusal naming '%s'", bad[i].p, got, bitspark_last_error(), bad[i].why);
    }
    CHECK_EQ_INT(schema_matches("{\"type\": \"string\", \"pattern\": 5}", "\"5\"", v), -1);
    /* nested counts share their rules (no blow-up); a pattern or its grammar past the limits is
       refused, naming the limit */
    CHECK_EQ_INT(pattern_matches("^((.{64}){64}){64}$", "a", 1, v), 0);
    char big[5000];
    for (int n = 3000, k = 0; k < 2; k++, n = 4097) {
        memset(big, '.', (size_t)n);
        big[n] = 0;
        CHECK_EQ_INT(pattern_matches(big, "a", 1, v), -1);
        CHECKF(strstr(bitspark_last_error(), k ? "longer than 4096" : "(the limit)") != NULL, "%s", bitspark_last_error());
    }
}

static void test_formats(const bs_grammar_vocab *v) {
    static const struct { const char *fmt, *doc; int want; } cases[] = {
        {"date", "\"2024-02-29\"", 1}, {"date", "\"2024-13-01\"", 0}, {"date", "\"24-01-01\"", 0},
        {"date", "\"2024-01-31\"", 1}, {"date", "\"2024-04-30\"", 1}, {"date", "\"2024-04-31\"", 0},
        {"date", "\"2024-06-31\"", 0}, {"date", "\"2024-09-31\"", 0}, {"date", "\"2024-11-31\"", 0},
        {"date", "\"2024-12-31\"", 1}, {"date", "\"2023-02-28\"", 1}, {"date", "\"2023-02-29\"", 1},
        {"date", "\"2024-02-30\"", 0}, {"date", "\"2024-02-31\"", 0}, {"date", "\"2024-02-00\"", 0},
        {"date-time", "\"2024-02-30T08:30:00Z\"", 0}, {"date-time", "\"2024-11-31T08:30:00Z\"", 0},
        {"date-time", "\"2024-08-31T08:30:00Z\"", 1},
        {"time", "\"23:59:60Z\"", 1}, {"time", "\"12:00:00.123+05:30\"", 1}, {"time", "\"12:00:00\"", 0},
        {"date-time", "\"2024-01-31T08:30:00Z\"", 1}, {"date-time", "\"2024-01-31 08:30:00Z\"", 0},
        {"uuid", "\"123e4567-e89b-12d3-a456-426614174000\"", 1}, {"uuid", "\"123e4567e89b12d3a456426614174000\"", 0},
        {"ipv4", "\"192.168.0.255\"", 1}, {"ipv4", "\"192.168.0.256\"", 0}, {"ipv4", "\"01.2.3.4\"", 0},
        {"email", "\"not constrained\"", 1},   /* an annotation: any string */
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        char schema[128];
        snprintf(schema, sizeof schema, "{\"type\": \"string\", \"format\": \"%s\"}", cases[i].fmt);
        const int got = schema_matches(schema, cases[i].doc, v);
        CHECKF(got == cases[i].want, "format %s on %s: %d, want %d", cases[i].fmt, cases[i].doc, got, cases[i].want);
    }
    /* the pattern decides where both are given; without "type" the pattern makes it a string;
       inside an object's property; beside minLength/maxLength */
    static const char both[] = "{\"type\": \"string\", \"format\": \"date\", \"pattern\": \"^x+$\"}";
    CHECK_EQ_INT(schema_matches(both, "\"xx\"", v), 1);
    CHECK_EQ_INT(schema_matches(both, "\"2024-01-01\"", v), 0);
    CHECK_EQ_INT(schema_matches("{\"pattern\": \"^[0-9]+$\"}", "\"42\"", v), 1);
    CHECK_EQ_INT(schema_matches("{\"pattern\": \"^[0-9]+$\"}", "42", v), 0);
    static const char obj[] = "{\"type\": \"object\", \"properties\": {\"zip\": {\"type\": \"string\", "
                              "\"pattern\": \"^\\\\d{5}$\"}}, \"required\": [\"zip\"]}";
    CHECK_EQ_INT(schema_matches(obj, "{\"zip\": \"12345\"}", v), 1);
    CHECK_EQ_INT(schema_matches(obj, "{\"zip\": \"1234\"}", v), 0);
    /* beside minLength/maxLength, a pattern whose strings all have lengths within them; one
       whose strings may not is refused (dropping either bound would let wrong strings through) */
    static const char len[] = "{\"type\": \"string\", \"pattern\": \"^a{1,2}(b|cd)?$\", \"minLength\": 1, \"maxLength\": 4}";
    CHECK_EQ_INT(schema_matches(len, "\"aacd\"", v), 1);
    CHECK_EQ_INT(schema_matches(len, "\"aaa\"", v), 0);
    /* one character class repeated (pydantic's constr(pattern=..., max_length=...)): the lengths
       become its count */
    static const char cls[] = "{\"type\": \"string\", \"pattern\": \"^[a-z0-9_-]+$\", \"minLength\": 2, \"maxLength\": 5}";
    CHECK_EQ_INT(schema_matches(cls, "\"ab-1\"", v), 1);
    CHECK_EQ_INT(schema_matches(cls, "\"a\"", v), 0);
    CHECK_EQ_INT(schema_matches(cls, "\"abcdef\"", v), 0);
    CHECK_EQ_INT(schema_matches(cls, "\"aB\"", v), 0);
    static const char digits[] = "{\"type\": \"string\", \"pattern\": \"^\\\\d*$\", \"maxLength\": 3}";
    CHECK_EQ_INT(schema_matches(digits, "\"\"", v), 1);
    CHECK_EQ_INT(schema_matches(digits, "\"123\"", v), 1);
    CHECK_EQ_INT(schema_matches(digits, "\"1234\"", v), 0);
    static const char atleast[] = "{\"type\": \"string\", \"pattern\": \"^x{3,}$\", \"maxLength\": 4}";
    CHECK_EQ_INT(schema_matches(atleast, "\"xx\"", v), 0);
    CHECK_EQ_INT(schema_matches(atleast, "\"xxxx\"", v), 1);
    CHECK_EQ_INT(schema_matches(atleast, "\"xxxxx\"", v), 0);
    CHECK_EQ_INT(schema_matches("{\"type\": \"string\", \"pattern\": \"^a+$\", \"maxLength\": 2}", "\"aaa\"", v), 0);
    static const char *const too_long[] = {
        "{\"type\": \"string\", \"pattern\": \"^(ab)+$\", \"maxLength\": 2}", "{\"type\": \"string\", \"pattern\": \"a\", \"maxLength\": 9}",
        "{\"type\": \"string\", \"pattern\": \"^a?$\", \"minLength\": 1}", "{\"type\": \"string\", \"format\": \"date\", \"maxLength\": 9}",
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(too_long); i++) {
        CHECK_EQ_INT(schema_matches(too_long[i], "\"a\"", v), -1);
        CHECKF(strstr(bitspark_last_error(), "minLength/maxLength") != NULL, "%s", bitspark_last_error());
    }
    CHECK_EQ_INT(schema_matches("{\"type\": \"string\", \"format\": \"date\", \"maxLength\": 10}", "\"2024-01-01\"", v), 1);
}

/* The compiled grammar of a schema (a failed check where it is refused). */
static bs_grammar *schema_grammar(const char *schema) {
    char *gbnf = bs_grammar_from_json_schema(schema);
    bs_grammar *g = gbnf ? bs_grammar_parse(gbnf) : NULL;
    free(gbnf);
    CHECKF(g != NULL, "%s: %s", schema, bitspark_last_error());
    return g;
}

static bool in_range(long long v, bool has_lo, long long lo, bool has_hi, long long hi) {
    return (!has_lo || v >= lo) && (!has_hi || v <= hi);
}

/* The integers of [lo, hi] (a side absent: unbounded) from the schema's keywords, checked on
 * every integer near the bounds and zero, the powers of ten around them, and random ones. */
static void check_range(const char *schema, bool has_lo, long long lo, bool has_hi, long long hi, bs_rng *r,
                        const bs_grammar_vocab *v) {
    bs_grammar *g = schema_grammar(schema);
    if (!g) return;
    long long probe[400];
    int n = 0;
    const long long centre[] = {lo, hi, 0};
    for (int k = 0; k < 3; k++)
        for (long long d = -12; d <= 12; d++) probe[n++] = centre[k] + d;
    for (long long p = 1; p <= 1000000000000000LL; p *= 10) probe[n++] = p, probe[n++] = -p, probe[n++] = p - 1, probe[n++] = 1 - p;
    while (n < 400) probe[n++] = (long long)(bs_rng_next(r) % 2000001) - 1000000;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char doc[32];
        snprintf(doc, sizeof doc, "%lld", probe[i]);
        const bool got = text_matches(g, v, doc);
        if (got != in_range(probe[i], has_lo, lo, has_hi, hi) && bad++ < 3)
            CHECKF(false, "%s: %s %s", schema, doc, got ? "accepted" : "refused");
    }
    CHECKF(bad == 0, "%s: %d integers wrong", schema, bad);
    static const char *const never[] = {"-0", "007", "+5", "1.0", "1e2", " 1", ""};
    for (size_t i = 0; i < BS_ARRAY_LEN(never); i++) {
        CHECKF(!text_matches(g, v, never[i]), "%s: '%s' accepted", schema, never[i]);
    }
    bs_grammar_free(g);
}

static void test_ranges(const bs_grammar_vocab *v) {
    bs_rng r;
    bs_rng_seed(&r, 5);
    static const struct { long long lo, hi; } spans[] = {
        {0, 120}, {1, 10}, {-5, 5}, {-273, -1}, {7, 7}, {0, 0}, {-1, 0}, {10, 99}, {9, 100}, {123, 45678},
        {-98765, -1234}, {-100000, 2500}, {1000, 1000000000000LL}, {-9999999999999999LL, 9999999999999999LL},
    };
    char schema[256];
    for (size_t i = 0; i < BS_ARRAY_LEN(spans); i++) {
        snprintf(schema, sizeof schema, "{\"type\": \"integer\", \"minimum\": %lld, \"maximum\": %lld}", spans[i].lo, spans[i].hi);
        check_range(schema, true, spans[i].lo, true, spans[i].hi, &r, v);
    }
    for (int i = 0; i < 40; i++) {   /* random spans, bounds of different lengths and signs */
        const long long a = (long long)(bs_rng_next(&r) % 200001) - 100000, w = (long long)(bs_rng_next(&r) % 50000);
        snprintf(schema, sizeof schema, "{\"type\": \"integer\", \"minimum\": %lld, \"maximum\": %lld}", a, a + w);
        check_range(schema, true, a, true, a + w, &r, v);
    }
    check_range("{\"type\": \"integer\", \"minimum\": 18}", true, 18, false, 0, &r, v);
    check_range("{\"type\": \"integer\", \"maximum\": -3}", false, 0, true, -3, &r, v);
    check_range("{\"type\": \"integer\", \"minimum\": 0, \"exclusiveMaximum\": 100}", true, 0, true, 99, &r, v);
    check_range("{\"type\": \"integer\", \"exclusiveMinimum\": -1, \"maximum\": 9.5}", true, 0, true, 9, &r, v);
    check_range("{\"type\": \"integer\", \"minimum\": 1, \"exclusiveMinimum\": true, \"maximum\": 5, "
                "\"exclusiveMaximum\": true}", true, 2, true, 4, &r, v);   /* draft 4 */
    check_range("{\"type\": \"integer\", \"minimum\": 0.5, \"maximum\": 3.5}", true, 1, true, 3, &r, v);
    check_range("{\"type\": [\"integer\", \"null\"], \"minimum\": 1, \"maximum\": 3}", true, 1, true, 3, &r, v);
    check_range("{\"type\": \"integer\", \"minimum\": -1e300}", false, 0, false, 0, &r, v);
    /* bounds past 2^53, where a double would round them: exact where written as integers */
    check_range("{\"type\": \"integer\", \"minimum\": 9007199254740993}", true, 9007199254740993LL, false, 0, &r, v);
    check_range("{\"type\": \"integer\", \"maximum\": 9007199254740995}", false, 0, true, 9007199254740995LL, &r, v);
    check_range("{\"type\": \"integer\", \"minimum\": -9007199254740995, \"maximum\": -9007199254740993}", true,
                -9007199254740995LL, true, -9007199254740993LL, &r, v);
    check_range("{\"type\": \"integer\", \"minimum\": 9007199254740992, \"exclusiveMinimum\": 9007199254740993, "
                "\"exclusiveMaximum\": 9999999999999999}", true, 9007199254740994LL, true, 9999999999999998LL, &r, v);
    check_range("{\"type\": \"integer\", \"maximum\": 9999999999999999}", false, 0, true, 9999999999999999LL, &r, v);
    CHECK_EQ_INT(schema_matches("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "5", v), -1);
    CHECK(strstr(bitspark_last_error(), "no integer") != NULL);
    CHECK_EQ_INT(schema_matches("{\"type\": \"integer\", \"minimum\": 1e20}", "5", v), -1);
    CHECK_EQ_INT(schema_matches("{\"type\": \"integer\", \"minimum\": \"0\"}", "5", v), -1);
    CHECK_EQ_INT(schema_matches("{\"type\": [\"integer\", \"null\"], \"minimum\": 1}", "null", v), 1);
}

/* Numbers with minimum/maximum (whole bounds here, inclusive or not): every integer part near
 * the bounds and zero with the fractions .0 .5 .001 .999 .000 and none, both signs; accepted
 * exactly when inside (an exponent never: the grammar writes none). */
static void check_num(const char *schema, bool has_lo, double lo, bool lo_in, bool has_hi, double hi, bool hi_in,
                      const bs_grammar_vocab *v) {
    bs_grammar *g = schema_grammar(schema);
    if (!g) return;
    static const char *const frac[] = {"", ".0", ".5", ".001", ".999", ".000"};
    const long long centre[] = {(long long)lo, (long long)hi, 0};
    int bad = 0, n_in = 0;
    for (int k = 0; k < 3; k++)
        for (long long i = centre[k] - 3; i <= centre[k] + 3; i++)
            for (int neg = 0; neg < 2; neg++)
                for (size_t f = 0; f < BS_ARRAY_LEN(frac); f++) {
                    if (neg && i == 0 && (f == 0 || f == 1 || f == 5)) continue;   /* -0: not written */
                    const long long m = i < 0 ? -i : i;
                    char doc[48];
                    snprintf(doc, sizeof doc, "%s%lld%s", (i < 0) != neg ? "-" : "", m, frac[f]);
                    const double x = strtod(doc, NULL);
                    const bool in = (!has_lo || (lo_in ? x >= lo : x > lo)) && (!has_hi || (hi_in ? x <= hi : x < hi));
                    const bool got = text_matches(g, v, doc);
                    n_in += in;
                    if (got != in && bad++ < 3) CHECKF(false, "%s: %s %s", schema, doc, got ? "accepted" : "refused");
                }
    CHECKF(bad == 0 && n_in > 0, "%s: %d numbers wrong (%d inside)", schema, bad, n_in);
    CHECKF(!text_matches(g, v, "1e0"), "%s: an exponent accepted", schema);
    bs_grammar_free(g);
}

static void test_num_ranges(const bs_grammar_vocab *v) {
    check_num("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}", true, 0, true, true, 1, true, v);
    check_num("{\"type\": \"number\", \"minimum\": 0}", true, 0, true, false, 0, false, v);
    check_num("{\"type\": \"number\", \"exclusiveMinimum\": 0}", true, 0, false, false, 0, false, v);
    check_num("{\"type\": \"number\", \"exclusiveMaximum\": 0}", false, 0, false, true, 0, false, v);
    check_num("{\"type\": \"number\", \"maximum\": 0}", false, 0, false, true, 0, true, v);
    check_num("{\"type\": \"number\", \"minimum\": -90, \"maximum\": 90}", true, -90, true, true, 90, true, v);
    check_num("{\"type\": \"number\", \"exclusiveMinimum\": -5, \"exclusiveMaximum\": -2}", true, -5, false, true, -2, false, v);
    check_num("{\"type\": \"number\", \"minimum\": 2, \"exclusiveMinimum\": true, \"maximum\": 3}", true, 2, false, true, 3, true, v);
    check_num("{\"type\": \"number\", \"minimum\": 7, \"maximum\": 7}", true, 7, true, true, 7, true, v);
    check_num("{\"type\": \"number\", \"minimum\": 100, \"exclusiveMaximum\": 1000}", true, 100, true, true, 1000, false, v);
    check_num("{\"type\": \"number\", \"minimum\": -3, \"exclusiveMaximum\": 0}", true, -3, true, true, 0, false, v);
    check_num("{\"type\": \"number\", \"maximum\": -1}", false, 0, false, true, -1, true, v);
    /* bounds that are not whole: rounded inward (what is written is inside) */
    check_num("{\"type\": \"number\", \"minimum\": 0.5, \"maximum\": 2.5}", true, 1, true, true, 2, true, v);
    CHECK_EQ_INT(schema_matches("{\"type\": \"number\", \"minimum\": 0.1, \"maximum\": 0.9}", "0.5", v), -1);
    CHECK(strstr(bitspark_last_error(), "rounded inward") != NULL);
    CHECK_EQ_INT(schema_matches("{\"type\": \"number\", \"exclusiveMinimum\": 1, \"maximum\": 1}", "1", v), -1);
    CHECK_EQ_INT(schema_matches("{\"type\": \"number\", \"minimum\": 1e20}", "1", v), -1);
    /* bounds past 2^53 written as integers are exact; 10^16 - 1 bounds numbers of 16 digits */
    static const struct { const char *schema, *doc; int want; } big[] = {
        {"{\"type\": \"number\", \"maximum\": 9999999999999999}", "9999999999999999.5", 0},
        {"{\"type\": \"number\", \"maximum\": 9999999999999999}", "9999999999999999", 1},
        {"{\"type\": \"number\", \"maximum\": 9999999999999999}", "9999999999999998.5", 1},
        {"{\"type\": \"number\", \"exclusiveMaximum\": 9999999999999999}", "9999999999999998.5", 1},
        {"{\"type\": \"number\", \"exclusiveMaximum\": 9999999999999999}", "9999999999999999", 0},
        {"{\"type\": \"number\", \"minimum\": 9007199254740993}", "9007199254740992.5", 0},
        {"{\"type\": \"number\", \"minimum\": 9007199254740993}", "9007199254740993", 1},
        {"{\"type\": \"number\", \"minimum\": -9007199254740993}", "-9007199254740993.5", 0},
        {"{\"type\": \"number\", \"minimum\": -9007199254740993}", "-9007199254740993", 1},
        /* written as reals, their doubles may lie outward of them: a step inward */
        {"{\"type\": \"number\", \"maximum\": 9999999999999999.0}", "9999999999999999.5", 0},
        {"{\"type\": \"number\", \"maximum\": 9999999999999999.5}", "9999999999999999.7", 0},
        {"{\"type\": \"number\", \"maximum\": 9999999999999999.0}", "9999999999999998", 1},
        {"{\"type\": \"number\", \"minimum\": -9999999999999999.0}", "-9999999999999999.5", 0},
        {"{\"type\": \"number\", \"minimum\": 9007199254740993.0}", "9007199254740992", 0},
        {"{\"type\": \"integer\", \"minimum\": 9007199254740993.0}", "9007199254740992", 0},
        {"{\"type\": \"integer\", \"maximum\": 9007199254740995.0}", "9007199254740996", 0},
        {"{\"type\": \"integer\", \"maximum\": 9007199254740995.0}", "9007199254740994", 1},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(big); i++) {
        const int got = schema_matches(big[i].schema, big[i].doc, v);
        CHECKF(got == big[i].want, "%s on %s: %d, want %d", big[i].schema, big[i].doc, got, big[i].want);
    }
}

/* The JSON text of n copies of unit between open and close (sep between them), malloc'd. */
static char *repeat_doc(const char *open, const char *unit, const char *sep, int n, const char *close) {
    size_t cap = strlen(open) + strlen(close) + (size_t)n * (strlen(unit) + strlen(sep)) + 1;
    char *d = malloc(cap);
    strcpy(d, open);
    for (int i = 0; i < n; i++) strcat(strcat(d, i ? sep : ""), unit);
    return strcat(d, close);
}

/* Counts past the 64 one GBNF repetition takes (written as runs of 64 and nested rests): string
 * lengths, array lengths and pattern quantifiers, each at and around its bounds. */
static void test_long_counts(const bs_grammar_vocab *v) {
    static const struct { const char *schema, *open, *unit, *sep, *close; int lo, hi; } cases[] = {
        {"{\"type\": \"string\", \"minLength\": 100, \"maxLength\": 200}", "\"", "x", "", "\"", 100, 200},
        {"{\"type\": \"string\", \"minLength\": 130}", "\"", "\\n", "", "\"", 130, -1},
        {"{\"type\": \"string\", \"maxLength\": 4096}", "\"", "y", "", "\"", 0, 4096},
        {"{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 70, \"maxItems\": 140}", "[", "7", ", ", "]", 70, 140},
        {"{\"type\": \"string\", \"pattern\": \"^a{100,300}$\"}", "\"", "a", "", "\"", 100, 300},
        {"{\"type\": \"string\", \"pattern\": \"^(ab){65}$\"}", "\"", "ab", "", "\"", 65, 65},
        {"{\"type\": \"string\", \"pattern\": \"^b{70,}$\"}", "\"", "b", "", "\"", 70, -1},
        {"{\"type\": \"string\", \"pattern\": \"^c{0,129}$\"}", "\"", "c", "", "\"", 0, 129},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const int lo = cases[i].lo, hi = cases[i].hi;
        const int ns[] = {0, 1, lo - 1, lo, lo + 1, 63, 64, 65, 127, 128, 129, hi - 1, hi, hi + 1, lo + 300};
        for (size_t k = 0; k < BS_ARRAY_LEN(ns); k++) {
            if (ns[k] < 0) continue;
            char *doc = repeat_doc(cases[i].open, cases[i].unit, cases[i].sep, ns[k], cases[i].close);
            const int want = ns[k] >= lo && (hi < 0 || ns[k] <= hi);
            const int got = schema_matches(cases[i].schema, doc, v);
            CHECKF(got == want, "%s with %d: %d, want %d", cases[i].schema, ns[k], got, want);
            free(doc);
        }
    }
    CHECK_EQ_INT(schema_matches("{\"type\": \"string\", \"maxLength\": 4097}", "\"a\"", v), -1);
    /* lengths count code points, as JSON Schema does: a \u surrogate pair is one, a lone half
       is not a character at all */
    static const struct { const char *doc; int n; } units[] = {
        {"\"\\ud83d\\ude00\"", 1}, {"\"\\uD83D\\uDE00x\"", 2}, {"\"\\u00e9\\uffff\\uE000\\u1234\"", 4},
        {"\"\xf0\x9f\x98\x80\"", 1}, {"\"\\ud83d\"", -1}, {"\"\\ude00\"", -1}, {"\"\\ud83dx\"", -1},
        {"\"\\ude00\\ud83d\"", -1}, {"\"\\ud83d\\u0041\"", -1},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(units); i++)
        for (int lo = 0; lo <= 5; lo++) {
            char schema[96];
            snprintf(schema, sizeof schema, "{\"type\": \"string\", \"minLength\": %d, \"maxLength\": %d}", lo, lo);
            const int got = schema_matches(schema, units[i].doc, v);
            CHECKF(got == (units[i].n == lo), "%s with length %d: %d, want %d", units[i].doc, lo, got, units[i].n == lo);
        }
    CHECK_EQ_INT(schema_matches("{\"type\": \"array\", \"maxItems\": 257}", "[]", v), -1);
}

/* A vocabulary of n random tokens of 1..24 characters from a small alphabet (so that its trie
 * has subtrees deep and wide enough for the mask's whole-subtree shortcuts). */
static bs_grammar_vocab *random_vocab(int n, bs_rng *r) {
    static const char *const al[] = {"a", "b", "c", " ", "x", "0", "7", "\"", "\\", "n", "-", "\xc3\xa9", "\xe2\x82\xac", "[", "]", ","};
    char **piece = calloc((size_t)n, sizeof *piece);
    size_t *len = calloc((size_t)n, sizeof *len);
    bool *eog = calloc((size_t)n, sizeof *eog);
    for (int i = 0; i < n; i++) {
        const int k = 1 + (int)(bs_rng_next(r) % (i % 7 ? 6 : 24));
        piece[i] = calloc((size_t)k * 3 + 1, 1);
        for (int j = 0; j < k; j++) strcat(piece[i], al[bs_rng_next(r) % (i % 3 ? 6 : BS_ARRAY_LEN(al))]);
        len[i] = strlen(piece[i]);
    }
    eog[n - 1] = true;
    bs_grammar_vocab *v = bs_grammar_vocab_from_pieces((const char *const *)piece, len, eog, n);
    for (int i = 0; i < n; i++) free(piece[i]);
    free(piece);
    free(len);
    free(eog);
    return v;
}

/* The mask equals allows() token by token along random walks, for the schemas whose strings
 * are counted (whole subtrees allowed where a run of counted characters keeps them alive) or
 * loop, on a vocabulary whose tokens run past the counts. */
static void test_mask_exact(void) {
    bs_rng r;
    bs_rng_seed(&r, 9);
    const int n = 20000;
    bs_grammar_vocab *v = random_vocab(n, &r);
    static const char *const schemas[] = {
        "{\"type\": \"string\", \"maxLength\": 10}", "{\"type\": \"string\", \"minLength\": 3, \"maxLength\": 64}",
        "{\"type\": \"string\", \"maxLength\": 300}", "{\"type\": \"string\"}",
        "{\"type\": \"string\", \"pattern\": \"^[a-c ]{0,30}$\"}", "{\"type\": \"string\", \"pattern\": \"^(ab){0,40}x?$\"}",
        "{\"type\": \"string\", \"pattern\": \"^[0-9]{5,8}-[^x]{2,90}$\"}", "{\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 5}}",
    };
    float *l = malloc((size_t)n * sizeof *l);
    for (size_t i = 0; i < BS_ARRAY_LEN(schemas); i++) {
        bs_grammar *g = schema_grammar(schemas[i]);
        bs_grammar_state *s = g ? bs_grammar_state_new(g, v) : NULL;
        CHECKF(s != NULL, "%s: %s", schemas[i], bitspark_last_error());
        int bad = 0, masks = 0;
        for (int step = 0; s && step < 24 && !bad; step++, masks++) {
            for (int t = 0; t < n; t++) l[t] = 0.0f;
            if (bs_grammar_mask(s, l, n)) {   /* a text the vocabulary cannot go on from: start over */
                CHECKF(strstr(bitspark_last_error(), "no token"), "%s: mask: %s", schemas[i], bitspark_last_error());
                bs_grammar_state_reset(s);
                continue;
            }
            int ok[64], n_ok = 0;
            for (int t = 0; t < n - 1; t++) {
                const bool a = l[t] == 0.0f;
                bad += a != bs_grammar_allows(s, t);
                if (a && n_ok < 64) ok[n_ok++] = t;
                else if (a && bs_rng_next(&r) % 8 == 0) ok[bs_rng_next(&r) % 64] = t;
            }
            if (!n_ok) bs_grammar_state_reset(s);
            else bs_grammar_accept(s, ok[bs_rng_next(&r) % (uint64_t)n_ok]);
        }
        CHECKF(bad == 0, "%s: %d tokens of the mask differ from allows() (%d masks)", schemas[i], bad, masks);
        bs_grammar_state_free(s);
        bs_grammar_free(g);
    }
    free(l);
    bs_grammar_vocab_free(v);
}

/* Oracle mode for test_grammar_pattern.py. */
static int oracle(const char *path, const bs_grammar_vocab *v) {
    FILE *f = fopen(path, "r");
    if (!f) return fprintf(stderr, "cannot open %s\n", path), 1;
    char line[65536];
    while (fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *a = json_loads(line, JSON_ALLOW_NUL, &err);
        const char *p = json_string_value(json_array_get(a, 0));
        json_t *s = json_array_get(a, 1);
        if (!p || !json_is_string(s)) {
            fprintf(stderr, "bad line: %s", line);
            json_decref(a);
            fclose(f);
            return 1;
        }
        printf("%d\n", pattern_matches(p, json_string_value(s), json_string_length(s), v));
        json_decref(a);
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    bs_grammar_vocab *v = vocab();
    if (argc > 1) {
        const int rc = oracle(argv[1], v);
        bs_grammar_vocab_free(v);
        return rc;
    }
    test_cases(v);
    test_refused(v);
    test_formats(v);
    test_ranges(v);
    test_num_ranges(v);
    test_long_counts(v);
    test_mask_exact();
    bs_grammar_vocab_free(v);
    return test_summary("test_grammar_values");
}
