/* grammar_impl.h: the compiled form of a grammar, shared by grammar.c (the parser) and
 * grammar_match.c (matching and masks). Internal to src/sample/. */
#ifndef BS_GRAMMAR_IMPL_H
#define BS_GRAMMAR_IMPL_H

#include "sample/grammar.h"

#include <stdint.h>

enum { GE_END, GE_CHARS, GE_RULE };

/* One element: a character class (ranges rg[a, a + n), complemented when neg) or a reference to
 * rule a. Every alternative is a run of elements closed by a GE_END. */
typedef struct g_elem {
    uint8_t type, neg;
    uint32_t a, n;
} g_elem;

typedef struct g_range { uint32_t lo, hi; } g_range;   /* code points lo..hi, inclusive */

typedef struct g_rule {
    uint32_t alt0, n_alt;      /* alternatives alt[alt0 .. alt0 + n_alt): their first elements */
} g_rule;

struct bs_grammar {
    g_elem *el;
    g_range *rg;
    uint32_t *alt;
    g_rule *rule;
    int n_el, n_rg, n_alt, n_rule;
    int root;
};

static inline bool g_class_has(const bs_grammar *g, const g_elem *e, uint32_t c) {
    bool in = false;
    for (uint32_t i = 0; i < e->n && !in; i++) in = c >= g->rg[e->a + i].lo && c <= g->rg[e->a + i].hi;
    return in != (e->neg != 0);
}

#endif
