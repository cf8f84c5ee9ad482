/* grammar_test.h: matching a text against a grammar or a JSON schema, for test_grammar and
 * test_grammar_values. */
#ifndef BS_TEST_GRAMMAR_H
#define BS_TEST_GRAMMAR_H

#include "sample/grammar.h"

#include <stdlib.h>

/* 1 if a fresh state of g takes text whole and is complete there, else 0. */
static inline int text_matches(const bs_grammar *g, const bs_grammar_vocab *v, const char *text) {
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    const int r = s && bs_grammar_accept_text(s, text) == 0 && bs_grammar_complete(s);
    bs_grammar_state_free(s);
    return r;
}

/* The same for GBNF text: -1 if it does not compile. */
static inline int matches(const char *gbnf, const char *text, const bs_grammar_vocab *v) {
    bs_grammar *g = bs_grammar_parse(gbnf);
    if (!g) return -1;
    const int r = text_matches(g, v, text);
    bs_grammar_free(g);
    return r;
}

/* The same for the JSON text doc against a schema: -1 also where the schema is refused. */
static inline int schema_matches(const char *schema, const char *doc, const bs_grammar_vocab *v) {
    char *gbnf = bs_grammar_from_json_schema(schema);
    if (!gbnf) return -1;
    const int r = matches(gbnf, doc, v);
    free(gbnf);
    return r;
}

#endif
