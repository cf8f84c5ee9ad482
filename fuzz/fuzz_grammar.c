/* fuzz_grammar.c: libFuzzer target for the GBNF parser and matcher (grammar.c, grammar_match.c).
 * The input is grammar text: it compiles or is refused with one "grammar..." line, within the
 * size limits (no abort, no unbounded allocation), and a compiled grammar runs a few masks and
 * accepts (fuzz_vocab.h) within the step budget. */
#include "fuzz_vocab.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bs_grammar_vocab *v;
    static int n_vocab;
    if (!v) v = fuzz_vocab(&n_vocab);
    char *text = fuzz_text(data, size);
    fuzz_match(text, v, n_vocab);
    free(text);
    return 0;
}
