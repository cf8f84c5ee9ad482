/* test_grammar.c: GBNF grammars and JSON schemas in constrained decoding.
 *   - the parser: every construct compiles; syntax errors, undefined rules and left recursion
 *     are refused with the line;
 *   - matching on text: accepted and rejected strings for repetitions, classes, escapes, groups;
 *   - JSON schema -> grammar: valid documents match, invalid ones do not;
 *   - on the trained tiny model: the token mask equals allows() token by token, greedy output
 *     under a grammar matches it and ends at end-of-generation, schema output parses as JSON of
 *     that shape, and with the drafter the output is byte-identical (drafts are cut, not
 *     trusted). */
#include "gen_helper.h"
#include "sample/grammar.h"
#include "test.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 if text matches grammar completely, 0 if not, -1 if it does not compile. */
static int matches(const char *gbnf, const char *text, const bs_grammar_vocab *v) {
    bs_grammar *g = bs_grammar_parse(gbnf);
    if (!g) return -1;
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    const int r = bs_grammar_accept_text(s, text) == 0 && bs_grammar_complete(s);
    bs_grammar_state_free(s);
    bs_grammar_free(g);
    return r;
}

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

static int schema_matches(const char *schema, const char *doc, const bs_grammar_vocab *v) {
    char *gbnf = bs_grammar_from_json_schema(schema);
    if (!gbnf) return -1;
    const int r = matches(gbnf, doc, v);
    free(gbnf);
    return r;
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
    CHECK_EQ_INT(schema_matches("{\"allOf\": []}", "{}", v), -1);
    CHECK_EQ_INT(schema_matches("{\"$ref\": \"#/$defs/none\"}", "{}", v), -1);
}

/* The mask is exactly allows() over the whole vocabulary (at a few states). */
static void test_mask(const bs_grammar_vocab *v, int n_vocab) {
    bs_grammar *g = bs_grammar_parse("root ::= \"The\" ( \" \" [a-z]+ )+ \".\"");
    CHECK(g != NULL);
    if (!g) return;
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    float *l = malloc((size_t)n_vocab * sizeof *l);
    const char *steps[] = {"", "Th", "e", " ca", "t"};
    for (size_t k = 0; k < BS_ARRAY_LEN(steps); k++) {
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
    test_mask(v, bs_tokenizer_n_vocab(tok));
    test_model(model, drafter, v);
    bs_grammar_vocab_free(v);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return test_summary("test_grammar");
}
