/* fuzz_vocab.h: a small fixed vocabulary for the grammar fuzzers (fuzz_grammar.c, fuzz_schema.c):
 * printable ASCII one by one, JSON and code pieces, words, multi-byte characters, a byte piece
 * (never allowed) and end-of-generation last, and a few matching steps over it: mask, take the
 * first allowed token, accept it. Any error must be a one-line "grammar..." message. */
#ifndef FUZZ_VOCAB_H
#define FUZZ_VOCAB_H

#include "sample/grammar.h"
#include "io/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const fuzz_pieces[] = {
    "\"", "\":", "\",", "{\"", "\"}", "[", "]", "{", "}", ":", ",", " ", "\n", "  ", "\\", "\\\"", "\\n", "\\u00",
    "true", "false", "null", "0", "1", "12", "-", ".", "e", "+", "abc", " the", "name", "x", "\xc3\xa9", "\xe4\xb8\xad",
    "\xf0\x9f\x98\x80", "\xff", "a\"b", "ab", "\t", "1\"", "}\n", "\"a\"", "<tool_call>", "</tool_call>"};

/* The input as a C string (malloc'd): a NUL inside ends it, as it ends a string of a request. */
static char *fuzz_text(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    return text;
}

static bs_grammar_vocab *fuzz_vocab(int *n_vocab) {
    enum { N_ONE = 95, N_PIECES = sizeof fuzz_pieces / sizeof *fuzz_pieces };
    static char one[N_ONE][2];
    const char *piece[N_ONE + N_PIECES + 1];
    size_t len[N_ONE + N_PIECES + 1];
    bool eog[N_ONE + N_PIECES + 1] = {0};
    for (int i = 0; i < N_ONE; i++) {
        one[i][0] = (char)(32 + i);
        piece[i] = one[i];
        len[i] = 1;
    }
    for (int i = 0; i < N_PIECES; i++) {
        piece[N_ONE + i] = fuzz_pieces[i];
        len[N_ONE + i] = strlen(fuzz_pieces[i]);
    }
    piece[N_ONE + N_PIECES] = NULL;
    len[N_ONE + N_PIECES] = 0;
    eog[N_ONE + N_PIECES] = true;
    *n_vocab = N_ONE + N_PIECES + 1;
    return bs_grammar_vocab_from_pieces(piece, len, eog, *n_vocab);
}

static void fuzz_check_error(const char *what) {
    const char *e = bs_last_error();
    if (strncmp(e, what, strlen(what)) || strchr(e, '\n')) abort();
}

/* Compiles gbnf and runs a few steps: mask, the first allowed token, accept (which must take
 * what the mask allowed). */
static void fuzz_match(const char *gbnf, const bs_grammar_vocab *v, int n_vocab) {
    bs_grammar *g = bs_grammar_parse(gbnf);
    if (!g) {
        fuzz_check_error("grammar");
        return;
    }
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    for (int k = 0; s && k < 6; k++) {
        for (int i = 0; i < n_vocab; i++) logits[i] = 0.0f;
        if (bs_grammar_mask(s, logits, n_vocab)) {
            fuzz_check_error("grammar");
            break;
        }
        int pick = -1;
        for (int i = 0; i < n_vocab && pick < 0; i++)
            if (logits[i] == 0.0f) pick = i;
        if (pick < 0) abort();            /* the mask said some token is allowed */
        if (pick == n_vocab - 1) break;   /* end-of-generation */
        if (bs_grammar_accept(s, pick)) {   /* an allowed token is accepted, unless a budget ran out */
            fuzz_check_error("grammar");
            if (!strstr(bs_last_error(), "limit")) abort();
            break;
        }
    }
    free(logits);
    bs_grammar_state_free(s);
    bs_grammar_free(g);
}

#endif
