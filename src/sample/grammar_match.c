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

/* Decode every usable token's text into code points (piece NULL: not usable). Returns how many
 * tokens are usable. */
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
        if (off < len[id]) continue;   /* not whole UTF-8: a byte piece */
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
    free(v->tok);
    free(v);
}

/* ---- stacks --------------------------------------------------------------------------------- */

typedef struct gnode { uint32_t pos, parent, next; } gnode;   /* next: the hash chain */

struct bs_grammar_state {
    const bs_grammar *g;
    const bs_grammar_vocab *v;
    gnode *nd;                  /* nd[0]: the empty stack */
    uint32_t n_nd, cap_nd, kept;   /* nodes [0, kept) belong to the current state's stacks */
    uint32_t *bucket, n_bucket;    /* chain heads (0: none); later nodes head their chains */
    uint32_t *mark, stamp;         /* mark[node] == stamp: already in the set being built */
    uint32_t *ids;                 /* sets of node ids: the current state [0, n_cur), scratch above */
    size_t n_ids, cap_ids, n_cur;
    uint32_t *work;                /* the expansion's to-do list */
    size_t cap_work;
    uint64_t steps;
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

static bool step(bs_grammar_state *S) {
    if (S->failed) return false;
    if (++S->steps > BS_GRAMMAR_MAX_STEPS) {
        char msg[160];
        snprintf(msg, sizeof msg, "matching one token needs more than %d steps (the limit; the grammar is too ambiguous)",
                 BS_GRAMMAR_MAX_STEPS);
        s_fail(S, msg);
        return false;
    }
    if (!(S->steps & 4095) && S->cancelled && S->cancelled(S->ud)) {
        s_fail(S, "cancelled");
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

/* The set ids[from, to) after code point c, appended to ids. */
static void advance(bs_grammar_state *S, size_t from, size_t to, uint32_t c) {
    const bs_grammar *g = S->g;
    new_stamp(S);
    for (size_t i = from; i < to && !S->failed; i++) {
        const uint32_t n = S->ids[i];
        if (!n || !step(S) || !g_class_has(g, &g->el[S->nd[n].pos], c)) continue;
        const uint32_t next = intern(S, S->nd[n].pos + 1, S->nd[n].parent);
        if (next) expand(S, next);
    }
}

static bool has_empty(const bs_grammar_state *S, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (!S->ids[i]) return true;
    return false;
}

/* Start of an operation: a fresh step count, the scratch emptied. */
static void begin(bs_grammar_state *S) {
    S->steps = 0;
    S->failed = false;
    S->n_ids = S->n_cur;
    truncate_nodes(S, S->kept);
}

/* Makes ids[from, to) the current state. The nodes are kept; when most of them are garbage,
 * the live ones are copied into a fresh table. */
static void commit(bs_grammar_state *S, size_t from, size_t to) {
    memmove(S->ids, S->ids + from, (to - from) * sizeof *S->ids);
    S->n_cur = S->n_ids = to - from;
    S->kept = S->n_nd;
    if (S->n_nd < 65536 || S->n_nd < 4 * (S->n_cur + 1024)) return;
    /* compaction: renumber the nodes reachable from the state, parents first */
    uint32_t *map = calloc(S->n_nd, sizeof *map);   /* old -> new id, 0: not yet */
    uint32_t *chain = malloc(S->n_nd * sizeof *chain);
    gnode *nd = malloc(S->cap_nd * sizeof *nd);
    if (!map || !chain || !nd) {
        free(map);
        free(chain);
        free(nd);
        return;   /* keeping the garbage is correct, only bigger */
    }
    uint32_t n = 1;
    nd[0] = S->nd[0];
    for (size_t i = 0; i < S->n_cur; i++) {
        /* the chain up to a mapped node, then mapped from the top down */
        size_t k = 0;
        for (uint32_t x = S->ids[i]; x && !map[x]; x = S->nd[x].parent) chain[k++] = x;
        while (k--) {
            const uint32_t x = chain[k], p = S->nd[x].parent;
            nd[n] = (gnode){S->nd[x].pos, p ? map[p] : 0, 0};
            map[x] = n++;
        }
        S->ids[i] = S->ids[i] ? map[S->ids[i]] : 0;
    }
    free(S->nd);
    free(map);
    free(chain);
    S->nd = nd;
    S->n_nd = S->kept = n;
    memset(S->mark, 0, S->cap_nd * sizeof *S->mark);
    S->stamp = 0;
    rehash(S, S->n_bucket);
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
    if (!S->nd || !S->mark || !S->bucket || !S->allowed || !S->work) {
        bs_grammar_state_free(S);
        return bs_error("grammar: out of memory"), NULL;
    }
    S->nd[0] = (gnode){UINT32_MAX, 0, 0};
    S->n_nd = S->kept = 1;
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
    S->n_cur = 0;
    S->kept = 1;
    begin(S);
    new_stamp(S);
    for (uint32_t k = 0; k < g->rule[g->root].n_alt && !S->failed; k++) {
        const uint32_t n = intern(S, g->alt[g->rule[g->root].alt0 + k], 0);
        if (n) expand(S, n);
    }
    if (S->failed) S->n_ids = 0;   /* an empty state: nothing is allowed; the error was recorded */
    commit(S, 0, S->n_ids);
}

void bs_grammar_state_free(bs_grammar_state *S) {
    if (!S) return;
    free(S->nd);
    free(S->mark);
    free(S->bucket);
    free(S->ids);
    free(S->work);
    free(S->allowed);
    free(S);
}

bool bs_grammar_complete(const bs_grammar_state *S) { return has_empty(S, 0, S->n_cur); }

/* Runs the code points cp[0..n) from the current state; true with the result at ids[*from, *to),
 * false when they do not match (or an error was recorded). */
static bool run_cps(bs_grammar_state *S, const uint32_t *cp, int n, size_t *from, size_t *to) {
    size_t a = 0, b = S->n_cur;
    for (int i = 0; i < n; i++) {
        const size_t c0 = S->n_ids;
        advance(S, a, b, cp[i]);
        if (S->failed || S->n_ids == c0) return false;
        a = c0;
        b = S->n_ids;
    }
    *from = a;
    *to = b;
    return true;
}

static bool run_token(bs_grammar_state *S, int32_t id, size_t *from, size_t *to) {
    const bs_grammar_vocab *v = S->v;
    if (id < 0 || id >= v->n_vocab || v->cp_len[id] < 0) return false;
    return run_cps(S, v->cp + v->cp_off[id], v->cp_len[id], from, to);
}

bool bs_grammar_allows(const bs_grammar_state *cs, int32_t id) {
    bs_grammar_state *S = (bs_grammar_state *)cs;   /* only the scratch changes */
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id]) return bs_grammar_complete(S);
    begin(S);
    size_t a, b;
    const bool ok = run_token(S, id, &a, &b);
    begin(S);
    return ok;
}

int bs_grammar_accept(bs_grammar_state *S, int32_t id) {
    if (id >= 0 && id < S->v->n_vocab && S->v->eog[id])
        return bs_grammar_complete(S) ? 0 : bs_error("grammar: the text is not complete at an end-of-generation token");
    begin(S);
    size_t a, b;
    if (!run_token(S, id, &a, &b)) {
        const bool failed = S->failed;
        begin(S);
        return failed ? -1 : bs_error("grammar: token %d does not continue the grammar", id);
    }
    commit(S, a, b);
    return 0;
}

int bs_grammar_accept_text(bs_grammar_state *S, const char *text) {
    const size_t len = strlen(text);
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    if (!cp) return bs_error("grammar: out of memory");
    int n = 0;
    for (size_t off = 0; off < len;) {
        const int r = bs_utf8_next((const unsigned char *)text + off, len - off, &cp[n]);
        if (r <= 0) {
            free(cp);
            return bs_error("grammar: invalid UTF-8");
        }
        off += (size_t)r;
        n++;
    }
    begin(S);
    size_t a, b;
    int rc = 0;
    if (run_cps(S, cp, n, &a, &b)) commit(S, a, b);
    else rc = S->failed ? -1 : bs_error("grammar: the text does not match");
    if (rc) begin(S);
    free(cp);
    return rc;
}

int bs_grammar_valid_prefix(bs_grammar_state *S, const int32_t *ids, int n) {
    /* the current state saved as its node ids; the nodes it uses stay below `kept` */
    uint32_t *save = malloc((S->n_cur + 1) * sizeof *save);
    if (!save) return 0;
    const size_t n_cur = S->n_cur;
    memcpy(save, S->ids, n_cur * sizeof *save);
    const uint32_t kept = S->kept;
    int k = 0;
    /* accepting without commit's compaction: the saved ids must stay valid */
    for (; k < n; k++) {
        if (ids[k] >= 0 && ids[k] < S->v->n_vocab && S->v->eog[ids[k]]) {
            if (!bs_grammar_complete(S)) break;
            continue;
        }
        begin(S);
        size_t a, b;
        if (!run_token(S, ids[k], &a, &b)) break;
        memmove(S->ids, S->ids + a, (b - a) * sizeof *S->ids);
        S->n_cur = S->n_ids = b - a;
        S->kept = S->n_nd;
    }
    S->kept = kept;
    S->n_cur = n_cur;
    begin(S);
    memcpy(S->ids, save, n_cur * sizeof *save);
    free(save);
    return k;
}

/* ---- the mask -------------------------------------------------------------------------------- */

/* The subtree of trie node `node`, entered with the set ids[from, to). */
static void walk(bs_grammar_state *S, uint32_t node, size_t from, size_t to) {
    const bs_grammar_vocab *v = S->v;
    for (uint32_t c = node + 1; c < v->node_end[node] && !S->failed; c = v->node_end[c]) {
        const size_t mark = S->n_ids;
        const uint32_t nodes = S->n_nd;
        advance(S, from, to, v->node_cp[c]);
        if (S->n_ids > mark) {
            for (uint32_t t = 0; t < v->node_ntok[c]; t++) S->allowed[v->tok[v->node_tok0[c] + t]] = 1;
            walk(S, c, mark, S->n_ids);
        }
        S->n_ids = mark;   /* this branch's stacks are done with */
        truncate_nodes(S, nodes);
    }
}

int bs_grammar_mask(bs_grammar_state *S, float *logits, int n_vocab) {
    const bs_grammar_vocab *v = S->v;
    memset(S->allowed, 0, (size_t)v->n_vocab);
    begin(S);
    walk(S, 0, 0, S->n_cur);
    const bool failed = S->failed, done = bs_grammar_complete(S);
    begin(S);
    int n_allowed = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (failed || i >= v->n_vocab || !(S->allowed[i] || (v->eog[i] && done))) logits[i] = -INFINITY;
        else n_allowed++;
    }
    if (failed) return -1;
    if (!n_allowed) return bs_error("grammar: no token of the vocabulary continues the text here");
    return 0;
}
