/* fuzz_schema.c: libFuzzer target for JSON schema -> GBNF (grammar_schema.c) and what follows:
 * the input is a schema; it converts or is refused with one "json schema..." line, the GBNF it
 * makes compiles or is refused with one "grammar..." line (a limit), and a few matching steps
 * run on it (fuzz_vocab.h). The same schema as the parameters of a tool goes through
 * bs_grammar_for_tools, and the input itself as a string pattern (a regular expression)
 * through bs_grammar_from_pattern. */
#include "fuzz_vocab.h"

#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bs_grammar_vocab *v;
    static int n_vocab;
    if (!v) v = fuzz_vocab(&n_vocab);
    char *text = fuzz_text(data, size);
    char *gbnf = bs_grammar_from_json_schema(text);
    if (gbnf) fuzz_match(gbnf, v, n_vocab);
    else fuzz_check_error("json schema");
    free(gbnf);
    char *tools = malloc(size + 96);
    snprintf(tools, size + 96, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":%s}}]", text);
    gbnf = bs_grammar_for_tools(tools, NULL);
    if (gbnf) fuzz_match(gbnf, v, n_vocab);
    free(gbnf);
    free(tools);
    gbnf = bs_grammar_from_pattern(text);   /* its expression, as the root of a grammar */
    if (gbnf) {
        char *root = malloc(strlen(gbnf) + 16);
        sprintf(root, "root ::= %s\n", gbnf);
        bs_grammar *g = bs_grammar_parse(root);   /* a converted pattern compiles, or passes a limit */
        if (!g && !strstr(bs_last_error(), "limit")) abort();
        bs_grammar_free(g);
        fuzz_match(root, v, n_vocab);
        free(root);
    } else {
        fuzz_check_error("json schema: pattern");
    }
    free(gbnf);
    free(text);
    return 0;
}
