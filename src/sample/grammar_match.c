/* grammar_match.c: matching a grammar against generated tokens and the per-step token mask
 * (grammar.h).
 *
 * A configuration is a stack of element positions (the top is the next element to match; below
 * it, where each enclosing rule continues). Stacks are hash-consed nodes (position, parent), so a
 * stack is one node id, stacks share their tails, and the same stack reached twice is the same
 * id: a set of stacks is a list of ids, deduplicated with a stamp per node. The state is the set
 * of stacks whose top is a character class, plus the empty stack (node 0) when the text so far
 * can end here. Accepting a code point keeps the stacks whose class has it, steps past it and
 * expands rule references again (a rule reference in tail position pushes no continuation, so
 * repetitions do not grow the stack). Every operation counts its steps against
 * BS_GRAMMAR_MAX_STEPS and polls the cancel hook: an ambiguous grammar fails with an error
 * instead of holding the thread, and no alternative is ever dropped.
 *
 * The vocabulary trie is a preorder array: node i's subtree is [i, end[i]), its children follow
 * it one subtree after another; tokens with the same code points share their last node. */
#include "sample/grammar_impl.h"
#include "io/utf8.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- the vocabulary trie --------------------------------------------------------------------- */

struct bs_grammar_vocab {
    int n_vocab;
    uint32_t *cp;                /* code points of every usable token, back to back */
    int32_t *cp_off, *cp_len;    /* per id; cp_len -1: never allowed under a grammar */
    bool *eog;                   /* per id */
    int n_nodes;
    uint32_t *node_cp, *node_end, *node_tok0, *node_ntok;
    uint32_t *node_sub_lo, *node_sub_hi;   /* the subtree's tokens: tok[lo, hi) */
    uint64_t *node_bits;         /* [2 per node] which characters the subtree's tokens hold (cp_bit) */
    uint16_t *node_maxlen;       /* the subtree's longest token, in code points */
    int max_len;                 /* the longest token */
    int32_t *tok;                /* ids in trie order */
};

/* A character's bit in a 128-bit summary: ASCII 0..126 their own, everything from 0x7F one. */
static inline int cp_bit(uint32_t c) { return c < 127 ? (int)c : 127; }

/* (qsort_r's context: vocabularies are built on several threads at once, by different sampler
 * chains and server slots) */
static int cmp_tokens(const void *a, const void *b, void *ctx) {
    const bs_grammar_vocab *v = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t *p = v->cp + v->cp_off[x], *q = v->cp + v->cp_off[y];
    const int n = BS_MIN(v->cp_len[x], v->cp_len[y]);
    for (int i = 0; i < n; i++)
        if (p[i] != q[i]) return p[i] < q[i] ? -1 : 1;
    return v->cp_len[x] != v->cp_len[y] ? (v->cp_len[x] < v->cp_len[y] ? -1 : 1) : (x < y ? -1 : x > y);
}

/* Decode every usable token's text into code points (piece NULL: not usable). Returns how many
 * tokens are usable. */
#define MAX_TOKEN_CPS 1023   /* longer tokens are never allowed (the trie's depth) */

static int decode_tokens(bs_grammar_vocab *v, const char *const *piece, const size_t *len) {
    size_t cap = 1 << 16, used = 0;
    v->cp = bs_xmalloc(cap * sizeof *v->cp);
    int usable = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        v->cp_len[id] = -1;
        if (v->eog[id] || !piece[id] || !len[id]) continue;
        if (used + len[id] > cap) v->cp = bs_xrealloc(v->cp, (cap = 2 * (used + len[id])) * sizeof *v->cp);
        size_t off = 0, n = 0;
        while (off < len[id]) {
            uint32_t c;
            const int r = bs_utf8_next((const unsigned char *)piece[id] + off, len[id] - off, &c);
            if (r <= 0) break;
            v->cp[used + n++] = c;
            off += (size_t)r;
        }
        if (off < len[id] || n > MAX_TOKEN_CPS) continue;   /* not whole UTF-8 (a byte piece), or past the trie's depth */
        v->cp_off[id] = (int32_t)used;
        v->cp_len[id] = (int32_t)n;
        used += n;
        usable++;
    }
    return usable;
}

/* The node at path[depth] is complete: its subtree ends before node n and token i; its
 * characters go into its parent's summary. */
static void close_node(bs_grammar_vocab *v, const uint32_t *path, int depth, int n, int i) {
    const uint32_t x = path[depth], up = path[depth - 1];
    v->node_end[x] = (uint32_t)n;
    v->node_sub_hi[x] = (uint32_t)i;
    v->node_bits[2 * (size_t)up] |= v->node_bits[2 * (size_t)x];
    v->node_bits[2 * (size_t)up + 1] |= v->node_bits[2 * (size_t)x + 1];
    v->node_maxlen[up] = BS_MAX(v->node_maxlen[up], v->node_maxlen[x]);
}

static void build_trie(bs_grammar_vocab *v, int usable) {
    v->tok = bs_xmalloc((size_t)BS_MAX(usable, 1) * sizeof *v->tok);
    int k = 0;
    for (int32_t id = 0; id < v->n_vocab; id++)
        if (v->cp_len[id] >= 0) v->tok[k++] = id;
    qsort_r(v->tok, (size_t)usable, sizeof *v->tok, cmp_tokens, v);
    size_t total = 1;
    for (int i = 0; i < usable; i++) total += (size_t)v->cp_len[v->tok[i]];
    v->node_cp = bs_xmalloc(total * sizeof *v->node_cp);
    v->node_end = bs_xmalloc(total * sizeof *v->node_end);
    v->node_tok0 = bs_xmalloc(total * sizeof *v->node_tok0);
    v->node_ntok = bs_xcalloc(total, sizeof *v->node_ntok);
    v->node_sub_lo = bs_xcalloc(total, sizeof *v->node_sub_lo);
    v->node_sub_hi = bs_xcalloc(total, sizeof *v->node_sub_hi);
    v->node_bits = bs_xcalloc(2 * total, sizeof *v->node_bits);
    v->node_maxlen = bs_xcalloc(total, sizeof *v->node_maxlen);
    uint32_t path[1025];   /* node of each depth of the current token; path[0]: the root */
    path[0] = 0;
    int depth = 0, n = 1;
    v->node_cp[0] = 0;     /* the root */
    const int32_t *prev = NULL;
    int prev_len = 0;
    for (int i = 0; i < usable; i++) {
        const int32_t id = v->tok[i];
        const uint32_t *c = v->cp + v->cp_off[id];
        const int len = v->cp_len[id];
        int lcp = 0;
        while (prev && lcp < BS_MIN(len, prev_len) && (uint32_t)prev[lcp] == c[lcp]) lcp++;
        for (; depth > lcp; depth--) close_node(v, path, depth, n, i);   /* the branches left */
        for (; depth < len; depth++) {
            path[depth + 1] = (uint32_t)n;
            v->node_cp[n] = c[depth];
            v->node_ntok[n] = 0;
            v->node_sub_lo[n] = (uint32_t)i;
            const int b = cp_bit(c[depth]);
            v->node_bits[2 * (size_t)n + (b >> 6)] |= 1ull << (b & 63);
            n++;
        }
        const uint32_t at = depth ? path[depth] : 0;
        if (!v->node_ntok[at]) v->node_tok0[at] = (uint32_t)i;
        v->node_ntok[at]++;
        v->node_maxlen[at] = (uint16_t)len;   /* (the longest to end here: tokens come sorted) */
        v->max_len = BS_MAX(v->max_len, len);
        prev = (const int32_t *)c;
        prev_len = len;
    }
    for (; depth > 0; depth--) close_node(v, path, depth, n, usable);
    v->node_end[0] = (uint32_t)n;
    v->node_sub_lo[0] = 0;
    v->node_sub_hi[0] = (uint32_t)usable;
    v->n_nodes = n;
}

bs_grammar_vocab *bs_grammar_vocab_from_pieces(const char *const *piece, const size_t *len, const bool *eog, int n_vocab) {
    bs_grammar_vocab *v = bs_xcalloc(1, sizeof *v);
    v->n_vocab = n_vocab;
    v->cp_off = bs_xcalloc((size_t)BS_MAX(n_vocab, 1), sizeof *v->cp_off);
    v->cp_len = bs_xcalloc((size_t)BS_MAX(n_vocab, 1), sizeof *v->cp_len);
    v->eog = bs_xcalloc((size_t)BS_MAX(n_vocab, 1), sizeof *v->eog);
    memcpy(v->eog, eog, (size_t)n_vocab * sizeof *eog);
    build_trie(v, decode_tokens(v, piece, len));
    return v;
}

/* Usable pieces: normal and user-defined tokens (control tokens other than end-of-generation
 * are never allowed under a grammar). */
bs_grammar_vocab *bs_grammar_vocab_new(const bs_tokenizer *tok) {
    const int n = bs_tokenizer_n_vocab(tok);
    const char **piece = bs_xcalloc((size_t)BS_MAX(n, 1), sizeof *piece);
    size_t *len = bs_xcalloc((size_t)BS_MAX(n, 1), sizeof *len);
    bool *eog = bs_xcalloc((size_t)BS_MAX(n, 1), sizeof *eog);
    for (int32_t id = 0; id < n; id++) {
        eog[id] = bs_token_is_eog(tok, id);
        const enum bs_token_type ty = bs_token_type(tok, id);
        if (eog[id] || (ty != BS_TOKEN_NORMAL && ty != BS_TOKEN_USER_DEFINED)) continue;
        if (bs_token_to_piece(tok, id, false, &piece[id], &len[id]) < 0) piece[id] = NULL;
    }
    bs_grammar_vocab *v = bs_grammar_vocab_from_pieces(piece, len, eog, n);
    free(piece);
    free(len);
    free(eog);
    return v;
}

int bs_grammar_vocab_size(const bs_grammar_vocab *v) { return v->n_vocab; }

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
    free(v->node_sub_lo);
    free(v->node_sub_hi);
    free(v->node_bits);
    free(v->node_maxlen);
    free(v->tok);
    free(v);
}

/* ---- stacks --------------------------------------------------------------------------------- */

typedef struct gnode { uint32_t pos, parent, next; } gnode;   /* next: the hash chain */

/* A set of stacks, interned: its node ids are sid[off, off + len), in the order made. */
typedef struct gset {
    uint32_t off, len, hash;
    uint8_t sum_done;           /* loop[] and dead[] computed */
    uint64_t loop[2];           /* cp_bit b set: every character of bit b leads back to this set */
    uint64_t dead[2];           /* cp_bit b set: no character of bit b continues any stack */
    uint64_t run[2];            /* cp_bit b set: every character of bit b leads to run_next */
    uint32_t run_next;          /* the successor most characters lead to (0: none) */
    uint16_t run_len;           /* run[]'s characters keep a chain of successors alive this long */
    uint8_t run_done;           /* run_len computed */
} gset;
/* A cached step: set `from` after code point cp is set `to` (0: no stack takes it). */
typedef struct gtrans { uint32_t from, cp, to; } gtrans;

#define MASK_CACHE 4            /* masks kept per state (a long string repeats the same set) */
#define MAX_NODES (1u << 19)    /* past these, the caches are rebuilt from the current state */
#define MAX_SIDS (1u << 21)
#define MAX_TRANS (1u << 19)

struct bs_grammar_state {
    const bs_grammar *g;
    const bs_grammar_vocab *v;
    gnode *nd;                  /* nd[0]: the empty stack */
    uint32_t n_nd, cap_nd;
    uint32_t *bucket, n_bucket;    /* chain heads (0: none); later nodes head their chains */
    uint32_t *mark, stamp;         /* mark[node] == stamp: already in the set being built */
    uint32_t *ids;                 /* the set being built */
    size_t n_ids, cap_ids;
    uint32_t *work;                /* the expansion's to-do list */
    size_t cap_work;
    uint32_t *sid;                 /* interned sets; set 0 is the empty set */
    size_t n_sid, cap_sid;
    gset *set;
    size_t n_set, cap_set;
    uint32_t *set_tab, cap_set_tab;   /* open addressing: set id, 0 free */
    gtrans *tr;                       /* open addressing: from == 0 free (the empty set goes nowhere) */
    uint32_t n_tr, cap_tr;
    uint32_t cur;                     /* the current state's set */
    struct { uint32_t set; uint8_t *allowed; } mc[MASK_CACHE];
    int mc_next;
    uint64_t steps;
    double t0;                     /* the operation's start, ms of thread CPU time */
    bool failed;
    bool (*cancelled)(void *);
    void *ud;
    uint8_t *allowed;              /* [n_vocab] */
};

/* The first error of an operation (later ones are consequences). */
static void s_fail(bs_grammar_state *S, const char *what) {
    if (!S->failed) bs_error("grammar: %s", what);
    S->failed = true;
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* One unit of matching work: false (and an error) past the step or time budget or when the
 * cancel hook says so (both polled every 1024 steps). */
static bool step(bs_grammar_state *S) {
    if (S->failed) return false;
    if (++S->steps > BS_GRAMMAR_MAX_STEPS) {
        char msg[160];
        snprintf(msg, sizeof msg, "matching one token needs more than %d steps (the limit; the grammar is too ambiguous)",
                 BS_GRAMMAR_MAX_STEPS);
        s_fail(S, msg);
        return false;
    }
    if (S->steps & 1023) return true;
    if (S->cancelled && S->cancelled(S->ud)) {
        s_fail(S, "cancelled");
        return false;
    }
    if (cpu_ms() - S->t0 > BS_GRAMMAR_MAX_MS) {
        char msg[160];
        snprintf(msg, sizeof msg, "matching one token takes more than %d ms of CPU (the limit; the grammar is too ambiguous)",
                 BS_GRAMMAR_MAX_MS);
        s_fail(S, msg);
        return false;
    }
    return true;
}

static void *s_grow(bs_grammar_state *S, void *p, size_t *cap, size_t need, size_t each) {
    if (need <= *cap) return p;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(p, nc * each);
    if (!q) return s_fail(S, "out of memory"), NULL;
    *cap = nc;
    return q;
}

static uint32_t node_hash(uint32_t pos, uint32_t parent) {
    uint32_t h = pos * 0x9E3779B1u ^ parent * 0x85EBCA77u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    return h ^ h >> 12;
}

static bool rehash(bs_grammar_state *S, uint32_t n) {
    uint32_t *b = calloc(n, sizeof *b);
    if (!b) return s_fail(S, "out of memory"), false;
    for (uint32_t i = 1; i < S->n_nd; i++) {   /* in id order: later nodes head their chains */
        const uint32_t h = node_hash(S->nd[i].pos, S->nd[i].parent) & (n - 1);
        S->nd[i].next = b[h];
        b[h] = i;
    }
    free(S->bucket);
    S->bucket = b;
    S->n_bucket = n;
    return true;
}

/* The node of stack `parent` with pos pushed on it (made on first use); 0 after a failure. */
static uint32_t intern(bs_grammar_state *S, uint32_t pos, uint32_t parent) {
    uint32_t h = node_hash(pos, parent) & (S->n_bucket - 1);
    for (uint32_t i = S->bucket[h]; i; i = S->nd[i].next)
        if (S->nd[i].pos == pos && S->nd[i].parent == parent) return i;
    if (S->n_nd == S->cap_nd) {
        size_t cap = S->cap_nd, cap2 = S->cap_nd;
        gnode *nd = s_grow(S, S->nd, &cap, (size_t)S->n_nd + 1, sizeof *nd);
        if (!nd) return 0;
        S->nd = nd;
        uint32_t *mk = s_grow(S, S->mark, &cap2, (size_t)S->n_nd + 1, sizeof *mk);
        if (!mk) return 0;
        memset(mk + S->cap_nd, 0, (cap2 - S->cap_nd) * sizeof *mk);
        S->mark = mk;
        S->cap_nd = (uint32_t)cap;
    }
    if (S->n_nd >= S->n_bucket) {
        if (!rehash(S, 2 * S->n_bucket)) return 0;
        h = node_hash(pos, parent) & (S->n_bucket - 1);
    }
    const uint32_t i = S->n_nd++;
    S->nd[i] = (gnode){pos, parent, S->bucket[h]};
    S->bucket[h] = i;
    return i;
}

/* Forget the nodes made after the first n (they head their chains, the last made first). */
static void truncate_nodes(bs_grammar_state *S, uint32_t n) {
    for (; S->n_nd > n; S->n_nd--) {
        const gnode *d = &S->nd[S->n_nd - 1];
        S->bucket[node_hash(d->pos, d->parent) & (S->n_bucket - 1)] = d->next;
    }
}

static void new_stamp(bs_grammar_state *S) {
    if (!++S->stamp) {
        memset(S->mark, 0, S->cap_nd * sizeof *S->mark);
        S->stamp = 1;
    }
}

static bool push_id(bs_grammar_state *S, uint32_t id) {
    uint32_t *p = s_grow(S, S->ids, &S->cap_ids, S->n_ids + 1, sizeof *p);
    if (!p) return false;
    S->ids = p;
    S->ids[S->n_ids++] = id;
    return true;
}

/* Adds the stacks stack `seed` expands to (every top a class, or the empty stack) to the set
 * being built at the end of ids, skipping those already in it (same stamp). */
static void expand(bs_grammar_state *S, uint32_t seed) {
    const bs_grammar *g = S->g;
    size_t n_work = 0;
    S->work[n_work++] = seed;
    while (n_work && !S->failed) {
        uint32_t n = S->work[--n_work];
        if (!step(S) || S->mark[n] == S->stamp) continue;
        S->mark[n] = S->stamp;
        const g_elem *e = n ? &g->el[S->nd[n].pos] : NULL;
        if (!n || e->type == GE_CHARS) {
            push_id(S, n);
            continue;
        }
        if (e->type == GE_END) {
            S->work[n_work++] = S->nd[n].parent;
            continue;
        }
        const g_rule *r = &g->rule[e->a];
        const uint32_t cont = e[1].type == GE_END ? S->nd[n].parent : intern(S, S->nd[n].pos + 1, S->nd[n].parent);
        uint32_t *w = s_grow(S, S->work, &S->cap_work, n_work + r->n_alt, sizeof *w);
        if (!w) return;
        S->work = w;
        for (uint32_t k = 0; k < r->n_alt && !S->failed; k++) {
            const uint32_t c = intern(S, g->alt[r->alt0 + k], cont);
            if (c) S->work[n_work++] = c;
        }
    }
}

/* The stacks of in[0, n) after code point c, appended to ids. */
static void advance(bs_grammar_state *S, const uint32_t *in, size_t n_in, uint32_t c) {
    const bs_grammar *g = S->g;
    new_stamp(S);
    for (size_t i = 0; i < n_in && !S->failed; i++) {
        const uint32_t n = in[i];
        if (!n || !step(S) || !g_class_has(g, &g->el[S->nd[n].pos], c)) continue;
        const uint32_t next = intern(S, S->nd[n].pos + 1, S->nd[n].parent);
        if (next) expand(S, next);
    }
}

/* ---- interned sets and cached steps ------------------------------------------------------- */

static uint32_t ids_hash(const uint32_t *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

static bool set_tab_grow(bs_grammar_state *S) {
    const uint32_t cap = S->cap_set_tab ? 2 * S->cap_set_tab : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return s_fail(S, "out of memory"), false;
    for (size_t k = 1; k < S->n_set; k++) {
        uint32_t h = S->set[k].hash & (cap - 1);
        while (t[h]) h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)k;
    }
    free(S->set_tab);
    S->set_tab = t;
    S->cap_set_tab = cap;
    return true;
}

/* The id of the set p[0, n) (interned on first sight); 0 for the empty set or after a failure. */
static uint32_t set_of(bs_grammar_state *S, const uint32_t *p, size_t n) {
    if (!n || S->failed) return 0;
    if (2 * (S->n_set + 1) > S->cap_set_tab && !set_tab_grow(S)) return 0;
    const uint32_t hash = ids_hash(p, n);
    uint32_t h = hash & (S->cap_set_tab - 1);
    for (uint32_t k; (k = S->set_tab[h]); h = (h + 1) & (S->cap_set_tab - 1))
        if (S->set[k].hash == hash && S->set[k].len == n && !memcmp(S->sid + S->set[k].off, p, n * sizeof *p)) return k;
    uint32_t *sid = s_grow(S, S->sid, &S->cap_sid, S->n_sid + n, sizeof *sid);
    if (!sid) return 0;
    S->sid = sid;
    gset *set = s_grow(S, S->set, &S->cap_set, S->n_set + 1, sizeof *set);
    if (!set) return 0;
    S->set = set;
    memcpy(S->sid + S->n_sid, p, n * sizeof *p);
    S->set[S->n_set] = (gset){.off = (uint32_t)S->n_sid, .len = (uint32_t)n, .hash = hash};
    S->n_sid += n;
    S->set_tab[h] = (uint32_t)S->n_set;
    return (uint32_t)S->n_set++;
}

static uint32_t trans_hash(uint32_t from, uint32_t cp) { return node_hash(cp, from); }

static bool trans_grow(bs_grammar_state *S) {
    const uint32_t cap = S->cap_tr ? 2 * S->cap_tr : 4096;
    gtrans *t = calloc(cap, sizeof *t);
    if (!t) return s_fail(S, "out of memory"), false;
    for (uint32_t i = 0; i < S->cap_tr; i++)
        if (S->tr[i].from) {
            uint32_t h = trans_hash(S->tr[i].from, S->tr[i].cp) & (cap - 1);
            while (t[h].from) h = (h + 1) & (cap - 1);
            t[h] = S->tr[i];
        }
    free(S->tr);
    S->tr = t;
    S->cap_tr = cap;
    return true;
}

/* Set `from` after code point cp (0: no stack takes it, or a failure was recorded), cached. */
static uint32_t step_set(bs_grammar_state *S, uint32_t from, uint32_t cp) {
    if (!from || !step(S)) return 0;
    if (2 * (S->n_tr + 1) > S->cap_tr && !trans_grow(S)) return 0;
    uint32_t h = trans_hash(from, cp) & (S->cap_tr - 1);
    for (; S->tr[h].from; h = (h + 1) & (S->cap_tr - 1))
        if (S->tr[h].from == from && S->tr[h].cp == cp) return S->tr[h].to;
    S->n_ids = 0;
    advance(S, S->sid + S->set[from].off, S->set[from].len, cp);
    const uint32_t to = set_of(S, S->ids, S->n_ids);
    if (S->failed) return 0;   /* a cut-short result is never cached */
    if (2 * (S->n_tr + 1) > S->cap_tr && !trans_grow(S)) return 0;
    h = trans_hash(from, cp) & (S->cap_tr - 1);   /* set_of may have grown nothing here, but look again */
    while (S->tr[h].from) h = (h + 1) & (S->cap_tr - 1);
    S->tr[h] = (gtrans){from, cp, to};
    S->n_tr++;
    return to;
}

static bool set_has_empty(const bs_grammar_state *S, uint32_t k) {
    for (uint32_t i = 0; k && i < S->set[k].len; i++)
        if (!S->sid[S->set[k].off + i]) return true;
    return false;
}

/* Forget every cached set, step and mask (node ids are about to change). */
static void clear_caches(bs_grammar_state *S) {
    S->n_sid = 0;
    S->n_set = 1;   /* set 0: the empty set */
    S->set[0] = (gset){0};
    if (S->set_tab) memset(S->set_tab, 0, S->cap_set_tab * sizeof *S->set_tab);
    if (S->tr) memset(S->tr, 0, S->cap_tr * sizeof *S->tr);
    S->n_tr = 0;
    for (int i = 0; i < MASK_CACHE; i++) S->mc[i].set = 0;
}

/* Start of an operation: a fresh step count. */
static void begin(bs_grammar_state *S) {
    S->steps = 0;
    S->t0 = cpu_ms();
    S->failed = false;
}

/* When the caches have grown past their bounds: keep only the nodes of the current state's
 * stacks (parents first, renumbered) and start the caches over. */
static void compact(bs_grammar_state *S) {
    if (S->n_nd < MAX_NODES && S->n_sid < MAX_SIDS && S->n_tr < MAX_TRANS) return;
    const uint32_t n_cur = S->set[S->cur].len;
    uint32_t *cur = malloc((n_cur + 1) * sizeof *cur);
    uint32_t *map = calloc(S->n_nd, sizeof *map);   /* old -> new id, 0: not yet */
    uint32_t *chain = malloc(S->n_nd * sizeof *chain);
    gnode *nd = malloc(S->cap_nd * sizeof *nd);
    if (!cur || !map || !chain || !nd) {
        free(cur);
        free(map);
        free(chain);
        free(nd);
        return;   /* keeping the garbage is correct, only bigger */
    }
    memcpy(cur, S->sid + S->set[S->cur].off, n_cur * sizeof *cur);
    uint32_t n = 1;
    nd[0] = S->nd[0];
    for (uint32_t i = 0; i < n_cur; i++) {
        size_t k = 0;   /* the chain up to a mapped node, then mapped from the top down */
        for (uint32_t x = cur[i]; x && !map[x]; x = S->nd[x].parent) chain[k++] = x;
        while (k--) {
            const uint32_t x = chain[k], p = S->nd[x].parent;
            nd[n] = (gnode){S->nd[x].pos, p ? map[p] : 0, 0};
            map[x] = n++;
        }
        cur[i] = cur[i] ? map[cur[i]] : 0;
    }
    free(S->nd);
    free(map);
    free(chain);
    S->nd = nd;
    S->n_nd = n;
    memset(S->mark, 0, S->cap_nd * sizeof *S->mark);
    S->stamp = 0;
    rehash(S, S->n_bucket);
    clear_caches(S);
    S->cur = set_of(S, cur, n_cur);
    free(cur);
}

bs_grammar_state *bs_grammar_state_new(const bs_grammar *g, const bs_grammar_vocab *v) {
    bs_grammar_state *S = calloc(1, sizeof *S);
    if (!S) return bs_error("grammar: out of memory"), NULL;
    S->g = g;
    S->v = v;
    S->cap_nd = 1024;
    S->nd = malloc(S->cap_nd * sizeof *S->nd);
    S->mark = calloc(S->cap_nd, sizeof *S->mark);
    S->bucket = calloc(S->n_bucket = 1024, sizeof *S->bucket);
    S->allowed = malloc((size_t)BS_MAX(v->n_vocab, 1));
    S->cap_work = 1024;
    S->work = malloc(S->cap_work * sizeof *S->work);
    S->cap_set = 1024;
    S->set = malloc(S->cap_set * sizeof *S->set);
    bool ok = S->nd && S->mark && S->bucket && S->allowed && S->work && S->set;
    for (int i = 0; i < MASK_CACHE && ok; i++) ok = (S->mc[i].allowed = malloc((size_t)BS_MAX(v->n_vocab, 1))) != NULL;
    if (!ok) {
        bs_grammar_state_free(S);
        return bs_error("grammar: out of memory"), NULL;
    }
    S->nd[0] = (gnode){UINT32_MAX, 0, 0};
    S->n_nd = 1;
    bs_grammar_state_reset(S);
    if (S->failed) {
        bs_grammar_state_free(S);
        return NULL;
    }
    return S;
}

void bs_grammar_state_set_cancel(bs_grammar_state *S, bool (*cancelled)(void *), void *ud) {
    S->cancelled = cancelled;
    S->ud = ud;
}

void bs_grammar_state_reset(bs_grammar_state *S) {
    const bs_grammar *g = S->g;
    begin(S);
    truncate_nodes(S, 1);
    clear_caches(S);
    S->n_ids = 0;
    new_stamp(S);
    for (uint32_t k = 0; k < g->rule[g->root].n_alt && !S->failed; k++) {
        const uint32_t n = intern(S, g->alt[g->rule[g->root].alt0 + k], 0);
        if (n) expand(S, n);
    }
    S->cur = set_of(S, S->ids, S->n_ids);   /* after a failure: the empty set, nothing allowed */
}

void bs_grammar_state_free(bs_grammar_state *S) {
    if (!S) return;
    free(S->nd);
    free(S->mark);
    free(S->bucket);
    free(S->ids);
    free(S->work);
    free(S->sid);
    free(S->set);
    free(S->set_tab);
    free(S->tr);
    for (int i = 0; i < MASK_CACHE; i++) free(S->mc[i].allowed);
    free(S->allowed);
    free(S);
}

bool bs_grammar_complete(const bs_grammar_state *S) { return set_has_empty(S, S->cur); }

/* The set after the code points cp[0..n) from set k: 0 when they do not match (or an error was
 * recorded). */
static uint32_t run_cps(bs_grammar_state *S, uint32_t k, const uint32_t *cp, int n) {
    for (int i = 0; i < n && k; i++) k = step_set(S, k, cp[i]);
    return k;
}

static uint32_t run_token(bs_grammar_state *S, uint32_t k, int32_t id) {
    const bs_grammar_vocab *v = S->v;
    if (id < 0 || id >= v->n_vocab || v->cp_len[id] < 0) return 0;
    return run_cps(S, k, v->cp + v->cp_off[id], v->cp_len[id]);
}

bool bs_grammar_allows(const bs_grammar_state *cs, int32_t id) {
    bs_grammar_state *S = (bs_grammar_state *)cs;   /* only the caches change */
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id]) return bs_grammar_complete(S);
    begin(S);
    return run_token(S, S->cur, id) != 0;
}

int bs_grammar_accept(bs_grammar_state *S, int32_t id) {
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id])
        return bs_grammar_complete(S) ? 0 : bs_error("grammar: the text is not complete at an end-of-generation token");
    begin(S);
    const uint32_t k = run_token(S, S->cur, id);
    if (!k) return S->failed ? -1 : bs_error("grammar: token %d does not continue the grammar", id);
    S->cur = k;
    compact(S);
    return 0;
}

int bs_grammar_accept_text(bs_grammar_state *S, const char *text) {
    const size_t len = strlen(text);
    uint32_t k = S->cur;
    for (size_t off = 0; off < len && k;) {
        uint32_t c;
        const int r = bs_utf8_next((const unsigned char *)text + off, len - off, &c);
        if (r <= 0) return bs_error("grammar: invalid UTF-8");
        off += (size_t)r;
        begin(S);   /* a step budget per code point */
        k = step_set(S, k, c);
    }
    if (!k) return S->failed ? -1 : bs_error("grammar: the text does not match");
    S->cur = k;
    compact(S);
    return 0;
}

int bs_grammar_valid_prefix(bs_grammar_state *S, const int32_t *ids, int n) {
    uint32_t k = S->cur;
    int i = 0;
    for (; i < n && k; i++) {
        if (ids[i] >= 0 && ids[i] < S->v->n_vocab && S->v->eog[ids[i]]) {
            if (!set_has_empty(S, k)) break;
            continue;
        }
        begin(S);
        const uint32_t next = run_token(S, k, ids[i]);
        if (!next) break;
        k = next;
    }
    return i;
}

/* ---- the mask -------------------------------------------------------------------------------- */

/* Which characters lead set k back to itself (a JSON string's body, say), which lead nowhere,
 * and which lead to the successor most of them share (a counted string's next length), as
 * cp_bit summaries. Bit 127 (every code point from 0x7F) only when each stack's class treats
 * them all alike, so that one of them stands for all. NULL after a failure. */
static const gset *summary(bs_grammar_state *S, uint32_t k) {
    if (S->set[k].sum_done) return &S->set[k];
    uint64_t loop[2] = {0, 0}, dead[2] = {0, 0}, run[2] = {0, 0};
    uint32_t to_of[128] = {0};   /* (to_of[127] stays 0 unless bit 127 stands for all) */
    for (uint32_t c = 0; c < 127 && !S->failed; c++) {
        const uint32_t to = to_of[c] = step_set(S, k, c);
        if (to == k) loop[c >> 6] |= 1ull << (c & 63);
        if (!to) dead[c >> 6] |= 1ull << (c & 63);
    }
    bool alike = true;
    const bs_grammar *g = S->g;
    for (uint32_t i = 0; i < S->set[k].len && alike; i++) {
        const uint32_t n = S->sid[S->set[k].off + i];
        if (!n) continue;
        const g_elem *e = &g->el[S->nd[n].pos];
        for (uint32_t r = 0; r < e->n && alike; r++) {
            const g_range *q = &g->rg[e->a + r];
            alike = q->hi < 0x7F || (q->lo <= 0x7F && q->hi >= 0x10FFFF);
        }
    }
    if (alike) {
        const uint32_t to = to_of[127] = step_set(S, k, 0x7F);
        if (to == k) loop[1] |= 1ull << 63;
        if (!to) dead[1] |= 1ull << 63;
    }
    if (S->failed) return NULL;
    uint32_t next = 0;   /* the most common successor (not k: that is loop[]) */
    for (int c = 0, best = 0; c < 128; c++) {
        if (!to_of[c] || to_of[c] == k) continue;
        int n = 0;
        for (int d = c; d < 128; d++) n += to_of[d] == to_of[c];
        if (n > best) best = n, next = to_of[c];
    }
    for (int c = 0; c < 128 && next; c++)
        if (to_of[c] == next) run[c >> 6] |= 1ull << (c & 63);
    gset *st = &S->set[k];   /* step_set may have moved the table */
    memcpy(st->loop, loop, sizeof loop);
    memcpy(st->dead, dead, sizeof dead);
    memcpy(st->run, run, sizeof run);
    st->run_next = next;
    st->sum_done = 1;
    return st;
}

/* How many characters of k's run[] in a row the sets from k keep alive: k's run_next, its
 * run_next, ... for as long as each one's run[] holds k's (up to the longest token, which is
 * all a mask needs). 0 after a failure. */
static int run_length(bs_grammar_state *S, uint32_t k) {
    if (S->set[k].run_done) return S->set[k].run_len;
    const uint64_t m0 = S->set[k].run[0], m1 = S->set[k].run[1];
    int n = 0;
    for (uint32_t at = k; at && n < S->v->max_len;) {
        const gset *s = summary(S, at);
        if (!s || (m0 & ~s->run[0]) || (m1 & ~s->run[1])) break;
        n++;
        at = s->run_next;
    }
    if (S->failed) return 0;
    S->set[k].run_len = (uint16_t)n;
    S->set[k].run_done = 1;
    return n;
}

#define LOOP_MIN_SUBTREE 256   /* trie nodes below which a subtree is walked without a summary */

/* Whether every token below trie node c holds only characters of bits m. */
static bool only_of(const bs_grammar_vocab *v, uint32_t c, const uint64_t m[2]) {
    return !(v->node_bits[2 * (size_t)c] & ~m[0]) && !(v->node_bits[2 * (size_t)c + 1] & ~m[1]);
}

/* The subtree of trie node `node` (depth code points from the root), entered with set k. A
 * child whose tokens hold only characters that lead k back to k, or only characters of k's run
 * and none longer than the run keeps alive (a counted string), has every token allowed,
 * without walking it. */
static void walk(bs_grammar_state *S, uint32_t node, int depth, uint32_t k) {
    const bs_grammar_vocab *v = S->v;
    const gset *sum = v->node_end[node] - node > LOOP_MIN_SUBTREE ? summary(S, k) : NULL;
    uint64_t loop[2] = {0, 0}, dead[2] = {0, 0}, run[2] = {0, 0};
    int run_len = -1;   /* not yet known */
    if (sum) {   /* copies: the set table may move during the walk */
        memcpy(loop, sum->loop, sizeof loop);
        memcpy(dead, sum->dead, sizeof dead);
        memcpy(run, sum->run, sizeof run);
    }
    for (uint32_t c = node + 1; c < v->node_end[node] && !S->failed; c = v->node_end[c]) {
        const int b = cp_bit(v->node_cp[c]);
        if (dead[b >> 6] >> (b & 63) & 1) {
            if (b == 127) break;   /* children are in code point order: the rest are dead too */
            continue;
        }
        bool whole = sum && only_of(v, c, loop);
        if (sum && !whole && only_of(v, c, run)) {
            if (run_len < 0) run_len = run_length(S, k);
            whole = v->node_maxlen[c] - depth <= run_len;
        }
        if (whole) {
            for (uint32_t t = v->node_sub_lo[c]; t < v->node_sub_hi[c]; t++) S->allowed[v->tok[t]] = 1;
            step(S);
            continue;
        }
        const uint32_t next = step_set(S, k, v->node_cp[c]);
        if (!next) continue;
        for (uint32_t t = 0; t < v->node_ntok[c]; t++) S->allowed[v->tok[v->node_tok0[c] + t]] = 1;
        walk(S, c, depth + 1, next);
    }
}

int bs_grammar_mask(bs_grammar_state *S, float *logits, int n_vocab) {
    const bs_grammar_vocab *v = S->v;
    begin(S);
    const uint8_t *allowed = NULL;
    for (int i = 0; i < MASK_CACHE && !allowed; i++)
        if (S->mc[i].set && S->mc[i].set == S->cur) allowed = S->mc[i].allowed;
    if (!allowed) {
        memset(S->allowed, 0, (size_t)v->n_vocab);
        walk(S, 0, 0, S->cur);
        allowed = S->allowed;
        if (!S->failed && S->cur) {   /* kept for the next mask from the same set */
            memcpy(S->mc[S->mc_next].allowed, S->allowed, (size_t)v->n_vocab);
            S->mc[S->mc_next].set = S->cur;
            S->mc_next = (S->mc_next + 1) % MASK_CACHE;
        }
    }
    const bool failed = S->failed, done = bs_grammar_complete(S);
    int n_allowed = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (failed || i >= v->n_vocab || !(allowed[i] || (v->eog[i] && done))) logits[i] = -INFINITY;
        else n_allowed++;
    }
    if (failed) return -1;
    if (!n_allowed) return bs_error("grammar: no token of the vocabulary continues the text here");
    return 0;
}
