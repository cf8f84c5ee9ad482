/* test_grammar.c: GBNF grammars and JSON schemas in constrained decoding.
 *   - the parser: every construct compiles; syntax errors, undefined rules and left recursion
 *     are refused with the line;
 *   - matching on text: accepted and rejected strings for repetitions, classes, escapes, groups;
 *   - JSON schema -> grammar: valid documents match, invalid ones do not (tuples included);
 *   - on the trained tiny model: the token mask equals allows() token by token, greedy output
 *     under a grammar matches it and ends at end-of-generation, schema output parses as JSON of
 *     that shape, and with the drafter the output is byte-identical (drafts are cut, not
 *     trusted);
 *   - hostile grammars: size limits refused before allocating (a 30 KB x{0,64} grammar, a
 *     2500-property schema, the same through tools) with an error naming the limit; compiling
 *     8000 rules in linear time; an ambiguous grammar fails within the step budget (or a cancel
 *     hook) instead of stalling; no alternative dropped past 4096 stacks or 64 optional
 *     properties; $ref chains and long enums exact; meaningless schemas and grammars refused;
 *   - keywords beside anyOf/oneOf, $ref, enum and const hold (merged into each branch, or
 *     filtering the values), annotations beside them change nothing, and what cannot be
 *     combined is refused naming the keyword. */
#include "gen_helper.h"
#include "grammar_test.h"
#include "sample/grammar.h"
#include "test.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_parser(const bs_grammar_vocab *v) {
    static const struct { const char *g, *text; int want; } cases[] = {
        {"root ::= \"yes\" | \"no\"", "yes", 1},
        {"root ::= \"yes\" | \"no\"", "no", 1},
        {"root ::= \"yes\" | \"no\"", "maybe", 0},
        {"root ::= \"yes\" | \"no\"", "ye", 0},
        {"root ::= [a-c]+ \"!\"", "abcab!", 1},
        {"root ::= [a-c]+ \"!\"", "!", 0},
        {"root ::= [^0-9]* [0-9]", "xyz7", 1},
        {"root ::= \"a\"{2,3}", "aaa", 1},
        {"root ::= \"a\"{2,3}", "aaaa", 0},
        {"root ::= \"a\"{2,3}", "a", 0},
        {"root ::= ( \"ab\" | \"c\" )* end\nend ::= \"\\n\"  # comment", "abcab\n", 1},
        {"root ::= x\nx ::=\n  \"1\"\n  | \"2\" x", "2221", 1},
        {"root ::= \"\\x41\\u00e9\\t\" [\\]\\-]", "A\xc3\xa9\t-", 1},
        {"root ::= . \"?\"?", "z", 1},
        {"root ::= ws ws\nws ::= \" \"?", "", 1},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++)
        CHECKF(matches(cases[i].g, cases[i].text, v) == cases[i].want, "grammar %zu (%s) on '%s': want %d", i,
               cases[i].g, cases[i].text, cases[i].want);
    static const char *bad[] = {"root ::= \"a", "root ::= foo", "root ::= [b-a]", "x ::= \"a\"",
                                "root ::= root \"a\" | \"b\"", "root ::= x\nx ::= y? root", "root ::= (\"a\"",
                                "root ::= \"a\"{99}", "root ::= \"a\"\nroot ::= \"b\""};
    for (size_t i = 0; i < BS_ARRAY_LEN(bad); i++) {
        bs_grammar *g = bs_grammar_parse(bad[i]);
        CHECKF(!g && strstr(bitspark_last_error(), "grammar"), "bad grammar %zu accepted: %s", i, bad[i]);
        bs_grammar_free(g);
    }
}

/* Keywords beside anyOf/oneOf, $ref, enum and const hold too: each alternative (a $ref's
 * target) is merged with them, enum and const values that fail them are dropped, and what cannot
 * be combined is refused naming the keyword; annotations beside them change nothing. */
static void test_siblings(const bs_grammar_vocab *v) {
    static const struct { const char *schema, *doc; int want; } cases[] = {
        /* the reviewer's: each was accepted */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"oneOf\":[{\"type\":\"object\"}]}", "{}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"oneOf\":[{\"type\":\"object\"}]}", "{\"a\": 1}", 1},
        {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}", "\"abcdef\"", 0},
        {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":2}", "\"ab\"", 1},
        {"{\"enum\":[\"abc\",\"x\"],\"maxLength\":2}", "\"abc\"", 0},
        {"{\"enum\":[\"abc\",\"x\"],\"maxLength\":2}", "\"x\"", 1},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", "1", 0},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", "\"a\"", 1},
        {"{\"type\":\"string\",\"maxLength\":2,\"anyOf\":[{\"pattern\":\"^a+$\"}]}", "\"aaaaa\"", 0},   /* a+ counted 1..2 */
        {"{\"type\":\"string\",\"maxLength\":2,\"anyOf\":[{\"pattern\":\"^a+$\"}]}", "\"aa\"", 1},
        {"{\"type\":\"string\",\"maxLength\":2,\"anyOf\":[{\"pattern\":\"^(ab)+$\"}]}", "\"ab\"", -1},
        /* draft 4's boolean exclusiveMinimum stays with its own minimum: 10 meets both */
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":10,\"anyOf\":[{\"minimum\":5,\"exclusiveMinimum\":true}]}", "10", 1},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true,\"maximum\":9,\"anyOf\":[{\"minimum\":3}]}", "5", 0},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true,\"maximum\":9,\"anyOf\":[{\"minimum\":3}]}", "6", 1},
        /* enum values are checked against multipleOf and uniqueItems beside them */
        {"{\"enum\":[3,4],\"multipleOf\":2}", "3", 0},
        {"{\"enum\":[3,4],\"multipleOf\":2}", "4", 1},
        {"{\"enum\":[0.75,0.7],\"multipleOf\":0.25}", "0.7", 0},
        {"{\"enum\":[0.75,0.7],\"multipleOf\":0.25}", "0.75", 1},
        {"{\"type\":\"array\",\"enum\":[[1,1],[1,2]],\"uniqueItems\":true}", "[1,1]", 0},
        {"{\"type\":\"array\",\"enum\":[[1,1],[1,2]],\"uniqueItems\":true}", "[1,2]", 1},
        /* the common shapes: type beside anyOf, required per branch, nullable by type list */
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", "{\"b\": 2}", 1},
        {"{\"type\":[\"string\",\"null\"],\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"null\"}]}", "null", 1},
        {"{\"type\":[\"string\",\"null\"],\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"null\"}]}", "\"ab\"", 0},
        {"{\"type\":[\"string\",\"null\"],\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"integer\"}]}", "3", 0},
        {"{\"type\":\"integer\",\"anyOf\":[{\"minimum\":10},{\"maximum\":-10}]}", "0", 0},
        {"{\"type\":\"integer\",\"anyOf\":[{\"minimum\":10},{\"maximum\":-10}]}", "-11", 1},
        {"{\"type\":\"number\",\"anyOf\":[{\"type\":\"integer\"}]}", "1.5", 0},
        {"{\"minimum\":5,\"anyOf\":[{\"type\":\"integer\",\"minimum\":1}]}", "3", 0},
        {"{\"minimum\":5,\"anyOf\":[{\"type\":\"integer\",\"minimum\":1}]}", "5", 1},
        /* a property in both sides: both schemas; additionalProperties false on one side */
        {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"anyOf\":[{\"properties\":{\"a\":{\"maxLength\":1}},\"required\":[\"a\"]}]}", "{\"a\": \"xy\"}", 0},
        {"{\"properties\":{\"a\":{\"type\":\"string\"}},\"anyOf\":[{\"properties\":{\"a\":{\"maxLength\":1}},\"required\":[\"a\"]}]}", "{\"a\": \"x\"}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false,\"anyOf\":[{\"properties\":{\"b\":{}}}]}", "{\"b\": 1}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false,\"anyOf\":[{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}", "{}", -1},
        /* a $ref beside constraints, and through a chain; enum beside $ref, const beside type */
        {"{\"$defs\":{\"o\":{\"$ref\":\"#/$defs/p\"},\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}},\"$ref\":\"#/$defs/o\",\"required\":[\"x\"]}", "{}", 0},
        {"{\"$defs\":{\"o\":{\"$ref\":\"#/$defs/p\"},\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}},\"$ref\":\"#/$defs/o\",\"required\":[\"x\"]}", "{\"x\": 2}", 1},
        {"{\"$defs\":{\"c\":{\"type\":\"string\",\"maxLength\":1}},\"$ref\":\"#/$defs/c\",\"enum\":[\"r\",\"gb\"]}", "\"gb\"", 0},
        {"{\"$defs\":{\"c\":{\"type\":\"string\",\"maxLength\":1}},\"$ref\":\"#/$defs/c\",\"enum\":[\"r\",\"gb\"]}", "\"r\"", 1},
        {"{\"type\":\"integer\",\"const\":2.5}", "2.5", -1},
        {"{\"enum\":[1,5,9],\"minimum\":2,\"exclusiveMaximum\":9}", "5", 1},
        {"{\"enum\":[1,5,9],\"minimum\":2,\"exclusiveMaximum\":9}", "9", 0},
        {"{\"enum\":[\"ab\",\"b\"],\"pattern\":\"^a\"}", "\"b\"", 0},
        {"{\"enum\":[{\"k\":1},{\"k\":\"s\"}],\"properties\":{\"k\":{\"type\":\"string\"}}}", "{\"k\":1}", 0},
        {"{\"enum\":[{\"k\":1},{\"k\":\"s\"}],\"properties\":{\"k\":{\"type\":\"string\"}}}", "{\"k\":\"s\"}", 1},
        /* annotations beside $ref and anyOf (pydantic, OpenAI tools) change nothing */
        {"{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"description\":\"d\",\"title\":\"T\",\"default\":\"x\"}", "\"abc\"", 1},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"default\":null,\"title\":\"N\",\"$comment\":\"c\",\"examples\":[1]}", "null", 1},
        /* what cannot be combined is refused, naming it */
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"anyOf\":[{\"pattern\":\"^b$\"}]}", "\"a\"", -1},
        {"{\"prefixItems\":[{}],\"anyOf\":[{\"items\":{\"type\":\"integer\"}}]}", "[1]", -1},
        {"{\"enum\":[[1]],\"prefixItems\":[{\"type\":\"integer\"}]}", "[1]", -1},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const int got = schema_matches(cases[i].schema, cases[i].doc, v);
        CHECKF(got == cases[i].want, "%s on %s: %d, want %d (%s)", cases[i].schema, cases[i].doc, got, cases[i].want,
               got < 0 ? bitspark_last_error() : "");
    }
    CHECK_EQ_INT(schema_matches("{\"type\":\"string\",\"pattern\":\"^a$\",\"anyOf\":[{\"pattern\":\"^b$\"}]}", "\"a\"", v), -1);
    CHECKF(strstr(bitspark_last_error(), "'pattern'") != NULL, "%s", bitspark_last_error());
    CHECK_EQ_INT(schema_matches("{\"type\":\"string\",\"anyOf\":[{\"type\":\"integer\"}]}", "1", v), -1);
    CHECKF(strstr(bitspark_last_error(), "anyOf") != NULL, "%s", bitspark_last_error());
}

static void test_schema(const bs_grammar_vocab *v) {
    const char *person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                         "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
                         "\"maxItems\":2}},\"required\":[\"name\",\"age\"]}";
    CHECK_EQ_INT(schema_matches(person, "{\"name\": \"Ann\", \"age\": 31}", v), 1);
    CHECK_EQ_INT(schema_matches(person, "{\"name\":\"Ann\",\"age\":-2,\"tags\":[\"a\",\"b\"]}", v), 1);
    CHECK_EQ_INT(schema_matches(person, "{\"name\": \"Ann\"}", v), 0);                      /* age required */
    CHECK_EQ_INT(schema_matches(person, "{\"name\": \"Ann\", \"age\": 3.5}", v), 0);         /* integer */
    CHECK_EQ_INT(schema_matches(person, "{\"name\":\"A\",\"age\":1,\"tags\":[\"c\"]}", v), 0);  /* enum */
    CHECK_EQ_INT(schema_matches(person, "{\"name\":\"A\",\"age\":1,\"tags\":[\"a\",\"a\",\"a\"]}", v), 0);
    const char *opt = "{\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"type\":\"null\"}}}";
    CHECK_EQ_INT(schema_matches(opt, "{}", v), 1);
    CHECK_EQ_INT(schema_matches(opt, "{\"y\": null}", v), 1);
    CHECK_EQ_INT(schema_matches(opt, "{\"x\": true, \"y\": null}", v), 1);
    CHECK_EQ_INT(schema_matches(opt, "{\"y\": null, \"x\": true}", v), 0);                   /* schema order */
    const char *rec = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
                      "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
                      "\"$ref\":\"#/$defs/node\"}";
    CHECK_EQ_INT(schema_matches(rec, "{\"v\": 1e3, \"next\": {\"v\": -0.5, \"next\": null}}", v), 1);
    CHECK_EQ_INT(schema_matches(rec, "{\"v\": 1, \"next\": {\"v\": 2}}", v), 0);
    CHECK_EQ_INT(schema_matches(NULL, "{\"any\": [1, {\"b\": \"c\\n\"}], \"k\": false}", v), 1);
    CHECK_EQ_INT(schema_matches(NULL, "[1, 2]", v), 0);                                      /* an object */
    const char *len = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    CHECK_EQ_INT(schema_matches(len, "\"ab\"", v), 1);
    CHECK_EQ_INT(schema_matches(len, "\"a\\\"c\"", v), 1);
    CHECK_EQ_INT(schema_matches(len, "\"abcd\"", v), 0);
    CHECK_EQ_INT(schema_matches(len, "\"a\"", v), 0);
    /* tuples: prefixItems (and draft 4's items as an array), the prefix whole, past it what
       minItems asks of the rest; items false: the empty array */
    static const char tup[] = "{\"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}]}";
    CHECK_EQ_INT(schema_matches(tup, "[1, \"a\"]", v), 1);
    CHECK_EQ_INT(schema_matches(tup, "[\"a\", 1]", v), 0);
    CHECK_EQ_INT(schema_matches(tup, "[1, \"a\", 2]", v), 0);
    static const char tup1[] = "{\"prefixItems\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], \"maxItems\": 1}";
    CHECK_EQ_INT(schema_matches(tup1, "[7]", v), 1);
    CHECK_EQ_INT(schema_matches(tup1, "[7, \"a\"]", v), 0);
    static const char tup3[] = "{\"prefixItems\": [{\"type\": \"integer\"}], \"items\": {\"type\": \"boolean\"}, \"minItems\": 3}";
    CHECK_EQ_INT(schema_matches(tup3, "[1, true, false]", v), 1);
    CHECK_EQ_INT(schema_matches(tup3, "[1, true]", v), 0);
    CHECK_EQ_INT(schema_matches("{\"prefixItems\": [{\"type\": \"integer\"}], \"items\": false, \"minItems\": 2}", "[1]", v), -1);
    static const char d4[] = "{\"items\": [{\"type\": \"integer\"}], \"additionalItems\": {\"type\": \"null\"}, \"minItems\": 2}";
    CHECK_EQ_INT(schema_matches(d4, "[1, null]", v), 1);
    CHECK_EQ_INT(schema_matches(d4, "[1, 2]", v), 0);
    CHECK_EQ_INT(schema_matches("{\"type\": \"array\", \"items\": false}", "[]", v), 1);
    CHECK_EQ_INT(schema_matches("{\"type\": \"array\", \"items\": false}", "[1]", v), 0);
    /* required names that properties lacks: additionalProperties' schema (any value without it) */
    CHECK_EQ_INT(schema_matches("{\"type\": \"object\", \"required\": [\"a\"]}", "{\"a\": [1]}", v), 1);
    CHECK_EQ_INT(schema_matches("{\"type\": \"object\", \"required\": [\"a\"]}", "{}", v), 0);
    static const char more[] = "{\"properties\": {\"x\": {\"type\": \"integer\"}}, \"required\": [\"x\", \"y\"], "
                               "\"additionalProperties\": {\"type\": \"string\"}}";
    CHECK_EQ_INT(schema_matches(more, "{\"x\": 1, \"y\": \"s\"}", v), 1);
    CHECK_EQ_INT(schema_matches(more, "{\"x\": 1}", v), 0);
    CHECK_EQ_INT(schema_matches(more, "{\"x\": 1, \"y\": 2}", v), 0);
    CHECK_EQ_INT(schema_matches("{\"required\": [\"y\"], \"additionalProperties\": false}", "{\"y\": 1}", v), -1);
    CHECK_EQ_INT(schema_matches("{\"allOf\": []}", "{}", v), -1);
    CHECK_EQ_INT(schema_matches("{\"$ref\": \"#/$defs/none\"}", "{}", v), -1);
    /* numbers fit a double: at most 2 exponent digits (1e971 would not parse back) */
    CHECK_EQ_INT(schema_matches("{\"type\": \"number\"}", "923292300E94", v), 1);
    CHECK_EQ_INT(schema_matches("{\"type\": \"number\"}", "923292300E494", v), 0);
    /* a tool's arguments are an object whatever its parameters say: {} and properties without a
     * type are object schemas, another type gives the plain object rule */
    static const char *const params[] = {"{}", "{\"properties\": {\"x\": {\"type\": \"number\"}}}", "{\"type\": \"string\"}"};
    for (size_t i = 0; i < BS_ARRAY_LEN(params); i++) {
        char tools[256], call[128];
        snprintf(tools, sizeof tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":%s}}]", params[i]);
        char *gbnf = bs_grammar_for_tools(tools, NULL);
        CHECKF(gbnf != NULL, "tools with parameters %s: %s", params[i], bitspark_last_error());
        static const char *const args[][2] = {{"{\"x\": 1}", "1"}, {"true", "0"}, {"1e971", "0"}, {"\"s\"", "0"}};
        for (size_t k = 0; gbnf && k < BS_ARRAY_LEN(args); k++) {
            snprintf(call, sizeof call, "<tool_call>\n{\"name\": \"f\", \"arguments\": %s}\n</tool_call>", args[k][0]);
            CHECKF(matches(gbnf, call, v) == atoi(args[k][1]), "parameters %s, arguments %s", params[i], args[k][0]);
        }
        free(gbnf);
    }
    /* what an error quotes from the request stays on one line (found by fuzz_schema) */
    CHECK(bs_grammar_from_json_schema("{\"type\": \"i\\nteger\", \"$ref\": \"#\\r\"}") == NULL);
    CHECK(strchr(bs_last_error(), '\n') == NULL && strchr(bs_last_error(), '\r') == NULL);
    CHECK(strstr(bs_last_error(), "json schema") != NULL);
    /* an error re-raised with the last one as its argument keeps the message */
    char was[256];
    snprintf(was, sizeof was, "%s", bs_last_error());
    bs_error("%s", bs_last_error());
    CHECK(strcmp(bs_last_error(), was) == 0);
}

/* The mask is exactly allows() over the whole vocabulary (at a few states; the second grammar's
 * string body and free text are where whole trie subtrees are allowed at once). */
static void mask_at(const bs_grammar_vocab *v, int n_vocab, const char *gbnf, const char **steps);

static void test_mask(const bs_grammar_vocab *v, int n_vocab) {
    mask_at(v, n_vocab, "root ::= \"The\" ( \" \" [a-z]+ )+ \".\"", (const char *[]){"", "Th", "e", " ca", "t", NULL});
    mask_at(v, n_vocab, "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]* \"\\\"\" [^0-9]* \"0\"",
            (const char *[]){"", "\"", "ab c", "\"", "x y", NULL});
}

static void mask_at(const bs_grammar_vocab *v, int n_vocab, const char *gbnf, const char **steps) {
    bs_grammar *g = bs_grammar_parse(gbnf);
    CHECKF(g != NULL, "%s: %s", gbnf, bitspark_last_error());
    if (!g) return;
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    float *l = malloc((size_t)n_vocab * sizeof *l);
    for (size_t k = 0; steps[k]; k++) {
        CHECK_EQ_INT(bs_grammar_accept_text(s, steps[k]), 0);
        for (int i = 0; i < n_vocab; i++) l[i] = 0.0f;
        bs_grammar_mask(s, l, n_vocab);
        int bad = 0, allowed = 0;
        for (int i = 0; i < n_vocab; i++) {
            allowed += l[i] == 0.0f;
            bad += (l[i] == 0.0f) != bs_grammar_allows(s, i);
        }
        CHECKF(bad == 0 && allowed > 0, "mask after '%s': %d tokens differ from allows(), %d allowed", steps[k], bad, allowed);
    }
    free(l);
    bs_grammar_state_free(s);
    bs_grammar_free(g);
}


/* CPU time: the machine may be loaded; the work is what is bounded */
static double cpu_s(void) { return (double)clock() / CLOCKS_PER_SEC; }

/* GBNF text of n copies of unit after "root ::= " (malloc'd). */
static char *repeated(const char *head, const char *unit, int n, const char *tail) {
    const size_t len = strlen(head) + (size_t)n * strlen(unit) + strlen(tail) + 1;
    char *s = malloc(len), *p = s;
    p += sprintf(p, "%s", head);
    for (int i = 0; i < n; i++) p += sprintf(p, "%s", unit);
    sprintf(p, "%s", tail);
    return s;
}

/* true if the error text says a limit was passed */
static bool limit_error(void) { return strstr(bitspark_last_error(), "limit") != NULL; }

/* A schema of n string properties with maxLength 64 (malloc'd JSON). */
static char *wide_schema(int n) {
    char *s = repeated("{\"type\":\"object\",\"properties\":{", "\"p%05d\":{\"type\":\"string\",\"maxLength\":64},", n, "");
    char *out = malloc(strlen(s) + (size_t)n + 64), *o = out;   /* %05d: one more character each */
    /* number the properties: the %05d placeholders become 00000, 00001, ... */
    int k = 0;
    for (const char *q = s; *q; q++) {
        if (q[0] == '%' && !strncmp(q, "%05d", 4)) {
            o += sprintf(o, "%05d", k++);
            q += 3;
        } else {
            *o++ = *q;
        }
    }
    o[-1] = '}';   /* the last comma */
    sprintf(o, "}");
    free(s);
    return out;
}

static void test_limits(void) {
    /* issue 34, item 1: 3000 x [a]{0,64} (30 KB) asked for 38 GB and aborted */
    char *big = repeated("root ::= ", "[a]{0,64} ", 3000, "\n");
    double t0 = cpu_s();
    bs_grammar *g = bs_grammar_parse(big);
    CHECKF(!g && limit_error(), "30 KB repetition grammar: %s", g ? "compiled" : bitspark_last_error());
    CHECKF(cpu_s() - t0 < 1.0, "refusing it took %.2f s of CPU", cpu_s() - t0);
    bs_grammar_free(g);
    free(big);
    char *schema = wide_schema(2500);
    char *gbnf = bs_grammar_from_json_schema(schema);
    g = gbnf ? bs_grammar_parse(gbnf) : NULL;
    CHECKF(!g && limit_error(), "2500 maxLength-64 properties: %s", g ? "compiled" : bitspark_last_error());
    bs_grammar_free(g);
    free(gbnf);
    char *tools = malloc(strlen(schema) + 128);
    sprintf(tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":%s}}]", schema);
    gbnf = bs_grammar_for_tools(tools, NULL);
    g = gbnf ? bs_grammar_parse(gbnf) : NULL;
    CHECKF(!g && limit_error(), "the same as tool parameters: %s", g ? "compiled" : bitspark_last_error());
    bs_grammar_free(g);
    free(gbnf);
    free(tools);
    free(schema);
    char *long_text = repeated("root ::= \"a\"", " ", BS_GRAMMAR_MAX_BYTES, "");
    CHECKF(!bs_grammar_parse(long_text) && limit_error(), "GBNF over %d bytes: %s", BS_GRAMMAR_MAX_BYTES, bitspark_last_error());
    free(long_text);
    /* item 2: 8000 chained rules compile in linear time (the n^2 matrix and cubic closure took
     * minutes), left recursion through a long nullable chain is still found */
    size_t cap = 8000 * 48 + 64, len = 0;
    char *chain = malloc(cap);
    len += (size_t)sprintf(chain, "root ::= r0\n");
    for (int i = 0; i < 7999; i++) len += (size_t)sprintf(chain + len, "r%d ::= r%d \"x\" | \"y\"\n", i, i + 1);
    sprintf(chain + len, "r7999 ::= \"z\"\n");
    t0 = cpu_s();
    g = bs_grammar_parse(chain);
    const double dt = cpu_s() - t0;
    CHECKF(g && dt < 1.0, "8000 chained rules: %s in %.2f s", g ? "compiled" : bitspark_last_error(), dt);
    bs_grammar_free(g);
    char *p = strstr(chain, "r7999 ::= \"z\"");
    sprintf(p, "r7999 ::= r0 | \"z\"\n");
    g = bs_grammar_parse(chain);
    CHECKF(!g && strstr(bitspark_last_error(), "left recursion"), "left recursion over 8000 rules: %s",
           g ? "compiled" : bitspark_last_error());
    bs_grammar_free(g);
    free(chain);
}

static bool cancel_now(void *ud) { return *(bool *)ud; }

/* item 3: an ambiguous grammar either masks fast or fails within the step budget; a cancel hook
 * stops it; the state still works after a failed step. */
static void test_ambiguous(const bs_grammar_vocab *v, int n_vocab) {
    bs_grammar *g = bs_grammar_parse("root ::= s\ns ::= [^\\n] s \"1\" | [^\\n] s \"2\" | [^\\n]");
    CHECK(g != NULL);
    if (!g) return;
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    float *l = malloc((size_t)n_vocab * sizeof *l);
    double worst_cpu = 0;
    int failed_at = -1;
    for (int k = 0; k < 40 && failed_at < 0; k++) {
        const double c0 = cpu_s();
        if (bs_grammar_mask(s, l, n_vocab)) failed_at = k;
        worst_cpu = BS_MAX(worst_cpu, cpu_s() - c0);
        if (failed_at < 0 && bs_grammar_accept_text(s, "a")) failed_at = k;
    }
    CHECKF(worst_cpu < 0.25, "ambiguous grammar: a mask took %.3f s of CPU", worst_cpu);
    CHECKF(failed_at < 0 || (strstr(bitspark_last_error(), "grammar") && limit_error()),
           "ambiguous grammar failed at %d with '%s'", failed_at, bitspark_last_error());
    fprintf(stderr, "ambiguous grammar: worst mask %.3f s of CPU, %s\n", worst_cpu,
            failed_at < 0 ? "40 characters matched" : bitspark_last_error());
    bool stop = true;
    bs_grammar_state_reset(s);
    for (int k = 0; k < 12; k++) bs_grammar_accept_text(s, "a");
    bs_grammar_state_set_cancel(s, cancel_now, &stop);
    const int rc = bs_grammar_mask(s, l, n_vocab);
    CHECKF(rc < 0 && strstr(bitspark_last_error(), "cancelled"), "cancel hook: mask %d, '%s'", rc, bitspark_last_error());
    free(l);
    bs_grammar_state_free(s);
    bs_grammar_free(g);
}

/* items 9 to 11: exact or refused, never a silently changed language */
static void test_exact(const bs_grammar_vocab *v, int n_vocab) {
    /* 5000 alternatives: the last one still matches (stacks past 4096 were dropped) */
    char *alts = repeated("root ::= \"k\" ( ", "[0-9] [0-9] [0-9] [0-9] | ", 4999, "\"x\" ) \"!\"");
    CHECK_EQ_INT(matches(alts, "k1234!", v), 1);
    CHECK_EQ_INT(matches(alts, "kx!", v), 1);
    free(alts);
    /* 70 optional properties: the 70th alone, and the first with the 70th */
    char *props = repeated("{\"type\":\"object\",\"properties\":{", "\"pNN\":{\"type\":\"integer\"},", 70, "");
    for (int i = 0; i < 70; i++) {
        char *q = strstr(props, "pNN");
        q[1] = (char)('0' + i / 10);
        q[2] = (char)('0' + i % 10);
    }
    props[strlen(props) - 1] = 0;
    char *obj = malloc(strlen(props) + 8);
    sprintf(obj, "%s}}", props);
    CHECK_EQ_INT(schema_matches(obj, "{\"p69\": 7}", v), 1);
    CHECK_EQ_INT(schema_matches(obj, "{\"p00\": 1, \"p69\": 7}", v), 1);
    CHECK_EQ_INT(schema_matches(obj, "{\"p69\": 7, \"p00\": 1}", v), 0);
    free(obj);
    free(props);
    /* $ref inside a $defs target */
    const char *chain = "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/a\"}";
    CHECK_EQ_INT(schema_matches(chain, "42", v), 1);
    CHECK_EQ_INT(schema_matches(chain, "\"42\"", v), 0);
    /* 40- and 48-value enums behind a $ref: every value, nothing else */
    for (int n = 40; n <= 48; n += 8) {
        char en[2048] = "{\"$defs\":{\"e\":{\"enum\":[";
        for (int i = 0; i < n; i++) sprintf(en + strlen(en), "%s\"value-%02d\"", i ? "," : "", i);
        strcat(en, "]}},\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/e\"}},\"required\":[\"k\"]}");
        char doc[64];
        sprintf(doc, "{\"k\": \"value-%02d\"}", n - 1);
        CHECKF(schema_matches(en, doc, v) == 1, "%d-value enum: the last value (%s)", n, bitspark_last_error());
        CHECK_EQ_INT(schema_matches(en, "{\"k\": \"value-00\"}", v), 1);
        CHECK_EQ_INT(schema_matches(en, "{\"k\": \"value-99\"}", v), 0);
    }
    /* true is any JSON value; false, non-schemas and meaningless keywords are refused */
    CHECK_EQ_INT(schema_matches("true", "[1, {\"a\": null}]", v), 1);
    static const char *refused[] = {"false", "5", "\"x\"", "{\"type\": []}", "{\"type\": 7}",
                                    "{\"type\": \"string\", \"maxLength\": -1}", "{\"type\": \"string\", \"maxLength\": \"3\"}",
                                    "{\"$defs\": {\"a\": false}, \"$ref\": \"#/$defs/a\"}",
                                    "{\"$defs\": {\"a\": {\"$ref\": \"#/$defs/a\"}}, \"$ref\": \"#/$defs/a\"}"};
    for (size_t i = 0; i < BS_ARRAY_LEN(refused); i++)
        CHECKF(schema_matches(refused[i], "1", v) == -1, "schema %s accepted", refused[i]);
    /* GBNF: code points past U+10FFFF, a root that matches nothing */
    static const char *bad[] = {"root ::= \"\\U00110000\"", "root ::= [\\U00110000-\\U00120000]", "root ::= \"a\" root",
                                "root ::= x\nx ::= \"(\" x \")\"", "root ::= []"};
    for (size_t i = 0; i < BS_ARRAY_LEN(bad); i++) {
        bs_grammar *g = bs_grammar_parse(bad[i]);
        CHECKF(!g && strstr(bitspark_last_error(), "grammar"), "bad grammar accepted: %s", bad[i]);
        bs_grammar_free(g);
    }
    /* a grammar no vocabulary token can start: the mask is an error, not a silent all -inf */
    bs_grammar *g = bs_grammar_parse("root ::= \"\\U0010FFFD\" \"x\"");
    bs_grammar_state *s = g ? bs_grammar_state_new(g, v) : NULL;
    float *l = malloc((size_t)n_vocab * sizeof *l);
    const int rc = s ? bs_grammar_mask(s, l, n_vocab) : 0;
    CHECKF(rc < 0 && strstr(bitspark_last_error(), "no token"), "no token allowed: mask %d, '%s'", rc, bitspark_last_error());
    free(l);
    bs_grammar_state_free(s);
    bs_grammar_free(g);
}

static char *generate(const char *model, const char *drafter, const char *gbnf, const char *prompt) {
    bs_engine_opts o = greedy_opts(model, drafter, 3, 0);
    bs_engine e;
    if (bs_engine_open(&e, &o)) return NULL;
    int32_t *ids;
    size_t n;
    bs_gen_request r;
    bs_engine_request(&e, &r);
    r.n_predict = 96;
    r.grammar = gbnf;
    char *out = NULL;
    if (!bs_engine_tokenize(&e, prompt, strlen(prompt), &ids, &n) && !bs_engine_generate(&e, &r, ids, (int)n, NULL, NULL)) {
        bs_gen_output go;
        bs_gen_output_get(e.gen, &go);
        CHECKF(bs_gen_get_stats(e.gen)->stop == BS_GEN_EOG, "grammar output did not end (stop %d): %s",
               bs_gen_get_stats(e.gen)->stop, go.text);
        out = strdup(go.text);
    }
    free(ids);
    bs_engine_close(&e);
    return out;
}

static void test_model(const char *model, const char *drafter, const bs_grammar_vocab *v) {
    const char *yn = "root ::= \"yes\" | \"no\"";
    char *a = generate(model, NULL, yn, "Is the sky blue? Answer:");
    CHECKF(a && (!strcmp(a, "yes") || !strcmp(a, "no")), "yes/no grammar gave '%s'", a ? a : "(null)");
    free(a);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"count\":"
                         "{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"count\",\"ok\"]}";
    char *gbnf = bs_grammar_from_json_schema(schema);
    CHECK(gbnf != NULL);
    char *j = gbnf ? generate(model, NULL, gbnf, "Once upon a time") : NULL;
    json_error_t err;
    json_t *doc = j ? json_loads(j, 0, &err) : NULL;
    CHECKF(doc && json_is_string(json_object_get(doc, "name")) && json_is_integer(json_object_get(doc, "count")) &&
           json_is_boolean(json_object_get(doc, "ok")) && json_object_size(doc) == 3,
           "schema output is not the object: %s", j ? j : "(null)");
    CHECK_EQ_INT(j ? schema_matches(schema, j, v) : 0, 1);
    char *js = gbnf ? generate(model, drafter, gbnf, "Once upon a time") : NULL;
    CHECKF(j && js && !strcmp(j, js), "with the drafter: '%s' vs '%s'", js ? js : "(null)", j ? j : "(null)");
    json_decref(doc);
    free(j);
    free(js);
    free(gbnf);
}

int main(void) {
    char model[1024], drafter[1024];
    trained_pair(model, drafter, sizeof model);
    bs_model *m = bs_model_load(model, NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    CHECK(tok != NULL);
    if (!tok) return test_summary("test_grammar");
    bs_grammar_vocab *v = bs_grammar_vocab_new(tok);
    test_parser(v);
    test_schema(v);
    test_siblings(v);
    test_mask(v, bs_tokenizer_n_vocab(tok));
    test_limits();
    test_ambiguous(v, bs_tokenizer_n_vocab(tok));
    test_exact(v, bs_tokenizer_n_vocab(tok));
    test_model(model, drafter, v);
    bs_grammar_vocab_free(v);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return test_summary("test_grammar");
}
