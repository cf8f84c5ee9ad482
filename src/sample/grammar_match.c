/* grammar_match.c: matching a grammar against generated tokens and the per-step token mask
 * (grammar.h).
 *
 * A configuration is a stack of element positions (the top is the next element to match; below
 * it, where each enclosing rule continues). The state is the set of configurations whose top is
 * a character class, plus the empty stack when the text so far can end here. Accepting a code
 * point keeps the configurations whose class has it, steps past it and expands rule references
 * again (a rule reference in tail position pushes no continuation, so repetitions do not grow
 * the stack). Temporary stacks live in an arena that is emptied after each operation.
 *
 * The vocabulary trie is a preorder array: node i's subtree is [i, end[i]), its children follow
 * it one subtree after another; tokens with the same code points share their last node. */
#include "sample/grammar_impl.h"
#include "io/utf8.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_START (1u << 16)
#define MAX_STACKS 4096          /* configurations kept at once: an ambiguous grammar beyond this is cut */

/* ---- the vocabulary trie --------------------------------------------------------------------- */

struct bs_grammar_vocab {
    int n_vocab;
    uint32_t *cp;                /* code points of every usable token, back to back */
    int32_t *cp_off, *cp_len;    /* per id; cp_len -1: never allowed under a grammar */
    bool *eog;                   /* per id */
    int n_nodes;
    uint32_t *node_cp, *node_end, *node_tok0, *node_ntok;
    int32_t *tok;                /* ids in trie order */
};

static const bs_grammar_vocab *g_sort_vocab;   /* qsort has no context argument */

static int cmp_tokens(const void *a, const void *b) {
    const bs_grammar_vocab *v = g_sort_vocab;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t *p = v->cp + v->cp_off[x], *q = v->cp + v->cp_off[y];
    const int n = BS_MIN(v->cp_len[x], v->cp_len[y]);
    for (int i = 0; i < n; i++)
        if (p[i] != q[i]) return p[i] < q[i] ? -1 : 1;
    return v->cp_len[x] != v->cp_len[y] ? (v->cp_len[x] < v->cp_len[y] ? -1 : 1) : (x < y ? -1 : x > y);
}

/* Decode every usable token's text into code points. Returns how many tokens are usable. */
static int decode_tokens(bs_grammar_vocab *v, const bs_tokenizer *tok) {
    size_t cap = 1 << 16, used = 0;
    v->cp = bs_xmalloc(cap * sizeof *v->cp);
    int usable = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        v->cp_len[id] = -1;
        v->eog[id] = bs_token_is_eog(tok, id);
        const enum bs_token_type ty = bs_token_type(tok, id);
        const char *piece;
        size_t len;
        if (v->eog[id] || (ty != BS_TOKEN_NORMAL && ty != BS_TOKEN_USER_DEFINED)) continue;
        if (bs_token_to_piece(tok, id, false, &piece, &len) < 0 || len == 0) continue;
        if (used + len > cap) v->cp = bs_xrealloc(v->cp, (cap = 2 * (used + len)) * sizeof *v->cp);
        size_t off = 0, n = 0;
        while (off < len) {
            uint32_t c;
            const int r = bs_utf8_next((const unsigned char *)piece + off, len - off, &c);
            if (r <= 0) break;
            v->cp[used + n++] = c;
            off += (size_t)r;
        }
        if (off < len) continue;   /* not whole UTF-8: a byte piece */
        v->cp_off[id] = (int32_t)used;
        v->cp_len[id] = (int32_t)n;
        used += n;
        usable++;
    }
    return usable;
}

static void build_trie(bs_grammar_vocab *v, int usable) {
    v->tok = bs_xmalloc((size_t)BS_MAX(usable, 1) * sizeof *v->tok);
    int k = 0;
    for (int32_t id = 0; id < v->n_vocab; id++)
        if (v->cp_len[id] >= 0) v->tok[k++] = id;
    g_sort_vocab = v;
    qsort(v->tok, (size_t)usable, sizeof *v->tok, cmp_tokens);
    size_t total = 1;
    for (int i = 0; i < usable; i++) total += (size_t)v->cp_len[v->tok[i]];
    v->node_cp = bs_xmalloc(total * sizeof *v->node_cp);
    v->node_end = bs_xmalloc(total * sizeof *v->node_end);
    v->node_tok0 = bs_xmalloc(total * sizeof *v->node_tok0);
    v->node_ntok = bs_xcalloc(total, sizeof *v->node_ntok);
    uint32_t path[1024];   /* node of each depth of the current token */
    int depth = 0, n = 1;
    v->node_cp[0] = 0;     /* the root */
    const int32_t *prev = NULL;
    int prev_len = 0;
    for (int i = 0; i < usable; i++) {
        const int32_t id = v->tok[i];
        const uint32_t *c = v->cp + v->cp_off[id];
        int len = BS_MIN(v->cp_len[id], 1023), lcp = 0;
        while (prev && lcp < BS_MIN(len, prev_len) && (uint32_t)prev[lcp] == c[lcp]) lcp++;
        for (; depth > lcp; depth--) v->node_end[path[depth]] = (uint32_t)n;   /* close the branches left */
        for (; depth < len; depth++) {
            path[depth + 1] = (uint32_t)n;
            v->node_cp[n] = c[depth];
            v->node_ntok[n] = 0;
            n++;
        }
        const uint32_t at = depth ? path[depth] : 0;
        if (!v->node_ntok[at]) v->node_tok0[at] = (uint32_t)i;
        v->node_ntok[at]++;
        prev = (const int32_t *)c;
        prev_len = len;
    }
    for (; depth > 0; depth--) v->node_end[path[depth]] = (uint32_t)n;
    v->node_end[0] = (uint32_t)n;
    v->n_nodes = n;
}

bs_grammar_vocab *bs_grammar_vocab_new(const bs_tokenizer *tok) {
    bs_grammar_vocab *v = bs_xcalloc(1, sizeof *v);
    v->n_vocab = bs_tokenizer_n_vocab(tok);
    v->cp_off = bs_xcalloc((size_t)v->n_vocab, sizeof *v->cp_off);
    v->cp_len = bs_xcalloc((size_t)v->n_vocab, sizeof *v->cp_len);
    v->eog = bs_xcalloc((size_t)v->n_vocab, sizeof *v->eog);
    build_trie(v, decode_tokens(v, tok));
    return v;
}

void bs_grammar_vocab_free(bs_grammar_vocab *v) {
    if (!v) return;
    free(v->cp);
    free(v->cp_off);
    free(v->cp_len);
    free(v->eog);
    free(v->node_cp);
    free(v->node_end);
    free(v->node_tok0);
    free(v->node_ntok);
    free(v->tok);
    free(v);
}

/* ---- configurations -------------------------------------------------------------------------- */

/* A set of stacks in an arena: stack i is pos[off[i] .. off[i] + len[i]). */
typedef struct sset {
    uint32_t off[MAX_STACKS], len[MAX_STACKS];
    int n;
} sset;

typedef struct arena { uint32_t *p; size_t used, cap; bool full; } arena;

static uint32_t *arena_get(arena *a, size_t n) {
    if (a->used + n > a->cap) { a->full = true; return NULL; }
    uint32_t *r = a->p + a->used;
    a->used += n;
    return r;
}

struct bs_grammar_state {
    const bs_grammar *g;
    const bs_grammar_vocab *v;
    arena ar;                   /* the state's stacks, then scratch */
    size_t base;                /* arena entries the current state uses */
    sset cur;
    sset *lvl;                  /* per trie depth during a mask */
    int n_lvl;
    uint8_t *allowed;           /* [n_vocab] */
    uint32_t *tmp;              /* one stack being built */
    size_t cap_tmp;
};

static bool same_stack(const arena *a, const sset *s, int i, const uint32_t *st, uint32_t n) {
    return s->len[i] == n && !memcmp(a->p + s->off[i], st, n * sizeof *st);
}

static void sset_add(arena *a, sset *s, const uint32_t *st, uint32_t n) {
    for (int i = 0; i < s->n; i++)
        if (same_stack(a, s, i, st, n)) return;
    if (s->n == MAX_STACKS) return;
    uint32_t *dst = arena_get(a, n ? n : 1);
    if (!dst) return;
    memcpy(dst, st, n * sizeof *st);
    s->off[s->n] = (uint32_t)(dst - a->p);
    s->len[s->n++] = n;
}

/* Expand stack st[0..n) (the caller's copy may be changed) until every top is a class or the
 * stack is empty, adding the results to out. */
static void expand(bs_grammar_state *S, uint32_t *st, uint32_t n, sset *out, int guard) {
    const bs_grammar *g = S->g;
    while (n > 0 && g->el[st[n - 1]].type == GE_END) n--;
    if (n == 0 || g->el[st[n - 1]].type == GE_CHARS || guard > 4096) {
        if (guard <= 4096) sset_add(&S->ar, out, st, n);
        return;
    }
    const uint32_t pos = st[n - 1];
    const g_rule *r = &g->rule[g->el[pos].a];
    uint32_t m = n - 1;
    if (g->el[pos + 1].type != GE_END) st[m++] = pos + 1;   /* where this rule's caller goes on */
    uint32_t *copy = arena_get(&S->ar, m + 1);
    if (!copy) return;
    for (uint32_t k = 0; k < r->n_alt; k++) {
        memcpy(copy, st, m * sizeof *st);
        copy[m] = g->alt[r->alt0 + k];
        expand(S, copy, m + 1, out, guard + 1);
    }
}

/* out = the configurations of in after code point c. */
static void advance(bs_grammar_state *S, const sset *in, uint32_t c, sset *out) {
    out->n = 0;
    const bs_grammar *g = S->g;
    for (int i = 0; i < in->n; i++) {
        const uint32_t n = in->len[i];
        if (!n) continue;
        const uint32_t *st = S->ar.p + in->off[i];
        if (!g_class_has(g, &g->el[st[n - 1]], c)) continue;
        uint32_t *copy = arena_get(&S->ar, n);
        if (!copy) return;
        memcpy(copy, st, n * sizeof *st);
        copy[n - 1]++;
        expand(S, copy, n, out, 0);
    }
}

static bool has_empty(const sset *s) {
    for (int i = 0; i < s->n; i++)
        if (!s->len[i]) return true;
    return false;
}

/* Make the scratch after the current state room enough for the next operation. */
static void arena_prepare(bs_grammar_state *S) {
    if (S->ar.full || S->ar.cap - S->base < S->ar.cap / 2) {
        S->ar.cap *= 2;
        S->ar.p = bs_xrealloc(S->ar.p, S->ar.cap * sizeof *S->ar.p);
    }
    S->ar.full = false;
    S->ar.used = S->base;
}

/* Make `next` (built in the scratch) the current state, compacted to the arena's start. */
static void commit(bs_grammar_state *S, const sset *next) {
    size_t total = 1;
    for (int i = 0; i < next->n; i++) total += next->len[i];
    uint32_t *tmp = bs_xmalloc(total * sizeof *tmp);
    size_t k = 0;
    sset *c = &S->cur;
    c->n = 0;
    uint32_t offs[MAX_STACKS];
    for (int i = 0; i < next->n; i++) {
        offs[i] = (uint32_t)k;
        memcpy(tmp + k, S->ar.p + next->off[i], next->len[i] * sizeof *tmp);
        k += next->len[i];
    }
    memcpy(S->ar.p, tmp, k * sizeof *tmp);
    for (int i = 0; i < next->n; i++) {
        c->off[i] = offs[i];
        c->len[i] = next->len[i];
    }
    c->n = next->n;
    S->base = S->ar.used = k;
    free(tmp);
}

bs_grammar_state *bs_grammar_state_new(const bs_grammar *g, const bs_grammar_vocab *v) {
    bs_grammar_state *S = bs_xcalloc(1, sizeof *S);
    S->g = g;
    S->v = v;
    S->ar.cap = ARENA_START;
    S->ar.p = bs_xmalloc(S->ar.cap * sizeof *S->ar.p);
    S->allowed = bs_xmalloc((size_t)v->n_vocab);
    bs_grammar_state_reset(S);
    return S;
}

void bs_grammar_state_reset(bs_grammar_state *S) {
    const bs_grammar *g = S->g;
    S->base = 0;
    arena_prepare(S);
    sset *next = bs_xmalloc(sizeof *next);
    next->n = 0;
    uint32_t st[1];
    for (uint32_t k = 0; k < g->rule[g->root].n_alt; k++) {
        st[0] = g->alt[g->rule[g->root].alt0 + k];
        uint32_t *copy = arena_get(&S->ar, 1);
        if (!copy) break;
        copy[0] = st[0];
        expand(S, copy, 1, next, 0);
    }
    commit(S, next);
    free(next);
}

void bs_grammar_state_free(bs_grammar_state *S) {
    if (!S) return;
    free(S->ar.p);
    free(S->lvl);
    free(S->allowed);
    free(S);
}

bool bs_grammar_complete(const bs_grammar_state *S) { return has_empty(&S->cur); }

/* The configurations after token id, into *out (in the scratch). False if it is not allowed. */
static bool run_token(bs_grammar_state *S, int32_t id, sset *a, sset *b, sset **out) {
    const bs_grammar_vocab *v = S->v;
    if (id < 0 || id >= v->n_vocab || v->cp_len[id] < 0) return false;
    arena_prepare(S);
    *a = S->cur;
    sset *from = a, *to = b;
    for (int i = 0; i < v->cp_len[id]; i++) {
        advance(S, from, v->cp[v->cp_off[id] + i], to);
        if (!to->n || S->ar.full) return false;
        sset *t = from;
        from = to;
        to = t;
    }
    *out = from;
    return true;
}

bool bs_grammar_allows(const bs_grammar_state *cs, int32_t id) {
    bs_grammar_state *S = (bs_grammar_state *)cs;   /* only the scratch changes */
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id]) return has_empty(&S->cur);
    sset *a = bs_xmalloc(sizeof *a), *b = bs_xmalloc(sizeof *b), *out;
    const bool ok = run_token(S, id, a, b, &out);
    free(a);
    free(b);
    return ok;
}

int bs_grammar_accept(bs_grammar_state *S, int32_t id) {
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id])
        return has_empty(&S->cur) ? 0 : bs_error("grammar: the text is not complete at an end-of-generation token");
    sset *a = bs_xmalloc(sizeof *a), *b = bs_xmalloc(sizeof *b), *out;
    int rc = run_token(S, id, a, b, &out) ? 0 : bs_error("grammar: token %d does not continue the grammar", id);
    if (!rc) commit(S, out);
    free(a);
    free(b);
    return rc;
}

int bs_grammar_accept_text(bs_grammar_state *S, const char *text) {
    sset *a = bs_xmalloc(sizeof *a), *b = bs_xmalloc(sizeof *b);
    arena_prepare(S);
    *a = S->cur;
    sset *from = a, *to = b;
    const size_t len = strlen(text);
    int rc = 0;
    for (size_t off = 0; off < len && !rc;) {
        uint32_t c;
        const int r = bs_utf8_next((const unsigned char *)text + off, len - off, &c);
        if (r <= 0) { rc = bs_error("grammar: invalid UTF-8"); break; }
        off += (size_t)r;
        advance(S, from, c, to);
        if (!to->n || S->ar.full) rc = bs_error("grammar: the text does not match at byte %zu", off - (size_t)r);
        sset *t = from;
        from = to;
        to = t;
    }
    if (!rc) commit(S, from);
    free(a);
    free(b);
    return rc;
}

int bs_grammar_valid_prefix(bs_grammar_state *S, const int32_t *ids, int n) {
    const size_t base = S->base;
    uint32_t *save = bs_xmalloc((base + 1) * sizeof *save);
    memcpy(save, S->ar.p, base * sizeof *save);
    sset *cs = bs_xmalloc(sizeof *cs);
    *cs = S->cur;
    int k = 0;
    while (k < n && bs_grammar_accept(S, ids[k]) == 0) k++;
    memcpy(S->ar.p, save, base * sizeof *save);   /* the arena never shrinks: room for it */
    S->cur = *cs;
    S->base = S->ar.used = base;
    free(save);
    free(cs);
    return k;
}

/* ---- the mask -------------------------------------------------------------------------------- */

static void walk(bs_grammar_state *S, uint32_t node, int depth) {
    const bs_grammar_vocab *v = S->v;
    if (depth + 1 >= S->n_lvl) return;
    const sset *in = &S->lvl[depth];
    sset *out = &S->lvl[depth + 1];
    for (uint32_t c = node + 1; c < v->node_end[node]; c = v->node_end[c]) {
        const size_t mark = S->ar.used;
        advance(S, in, v->node_cp[c], out);
        if (out->n) {
            for (uint32_t t = 0; t < v->node_ntok[c]; t++) S->allowed[v->tok[v->node_tok0[c] + t]] = 1;
            walk(S, c, depth + 1);
        }
        S->ar.used = mark;   /* this branch's stacks are done with */
        S->ar.full = false;
    }
}

void bs_grammar_mask(bs_grammar_state *S, float *logits, int n_vocab) {
    const bs_grammar_vocab *v = S->v;
    if (!S->lvl) {
        S->n_lvl = 1;
        for (int32_t id = 0; id < v->n_vocab; id++) S->n_lvl = BS_MAX(S->n_lvl, v->cp_len[id] + 2);
        S->lvl = bs_xmalloc((size_t)S->n_lvl * sizeof *S->lvl);
    }
    memset(S->allowed, 0, (size_t)v->n_vocab);
    arena_prepare(S);
    S->lvl[0] = S->cur;
    walk(S, 0, 0);
    const bool done = has_empty(&S->cur);
    for (int i = 0; i < n_vocab; i++)
        if (i >= v->n_vocab || !(S->allowed[i] || (v->eog[i] && done))) logits[i] = -INFINITY;
}
