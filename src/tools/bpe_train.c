/* bpe_train.c: see bpe_train.h. Plain count-and-merge BPE over the distinct pre-tokenized words:
 * each round recounts every adjacent pair (weighted by word frequency), merges the most frequent
 * one everywhere, and records it. With a corpus of tens of KB this takes well under a second,
 * so the simple O(rounds * symbols) loop is the clear choice over incremental pair updates. */
#include "tools/bpe_train.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* --- GPT-2 byte <-> unicode ------------------------------------------------------------------ */
static bool byte_is_printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t bs_gpt2_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;   /* non-printable bytes take 256, 257, ... in byte order */
    for (unsigned i = 0; i < b; i++) n += !byte_is_printable(i);
    return 256 + n;
}

int bs_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = 256;
    for (unsigned i = 0; i < 256; i++)
        if (!byte_is_printable(i) && n++ == cp) return (int)i;
    return -1;
}

int bs_gpt2_byte_utf8(uint8_t b, char *out) {
    uint32_t cp = bs_gpt2_byte_to_cp(b);   /* always < 0x800 */
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* --- pre-tokenizer --------------------------------------------------------------------------- */
static bool is_letter(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
static bool is_newline(unsigned char c) { return c == '\n' || c == '\r'; }

/* Length of a contraction ('s 't 're 've 'm 'll 'd, any case) at p, or 0. */
static size_t contraction(const unsigned char *p, size_t n) {
    if (n < 2 || p[0] != '\'') return 0;
    unsigned char a = (unsigned char)(p[1] | 0x20), b = n > 2 ? (unsigned char)(p[2] | 0x20) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

size_t bs_bpe_split(const char *str, size_t len, size_t pos) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = pos, n = len - pos, c;
    if ((c = contraction(s + i, n))) return i + c;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t j = i;
    if (!is_letter(s[j]) && !is_digit(s[j]) && !is_newline(s[j]) && j + 1 < len) j++;
    if (is_letter(s[j])) {
        while (j < len && is_letter(s[j])) j++;
        return j;
    }
    if (is_digit(s[i])) return i + 1;
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    j = i + (s[i] == ' ');
    if (j < len && !is_space(s[j]) && !is_letter(s[j]) && !is_digit(s[j])) {
        while (j < len && !is_space(s[j]) && !is_letter(s[j]) && !is_digit(s[j])) j++;
        while (j < len && is_newline(s[j])) j++;
        return j;
    }
    /* whitespace: "\s*[\r\n]+" (up to the last newline of the run), else "\s+(?!\S)", else "\s+" */
    size_t e = i;
    while (e < len && is_space(s[e])) e++;
    for (size_t k = e; k > i; k--)
        if (is_newline(s[k - 1])) return k;
    if (e == len || e - i == 1) return e;
    return e - 1;
}

/* --- small hash tables ----------------------------------------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}
static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}
static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

typedef struct word { uint32_t *sym; uint32_t n; uint64_t freq; const char *text; uint32_t len; } word;

typedef struct trainer {
    word *words; size_t n_words, cap_words;
    uint32_t *word_slots; size_t word_cap;        /* hash: word text -> index + 1 */
    uint32_t *tok_slots; size_t tok_cap;          /* hash: token string -> id + 1 */
    char **tokens; uint32_t n_tokens;
    char **merges; uint32_t n_merges;
    uint64_t *pair_key, *pair_cnt; size_t *pair_used, pair_cap;
} trainer;

static void add_word(trainer *t, const char *s, uint32_t n) {
    size_t mask = t->word_cap - 1, h = hash_bytes(s, n) & mask;
    for (;; h = (h + 1) & mask) {
        uint32_t slot = t->word_slots[h];
        if (!slot) break;
        word *w = &t->words[slot - 1];
        if (w->len == n && memcmp(w->text, s, n) == 0) { w->freq++; return; }
    }
    if (t->n_words == t->cap_words) {
        t->cap_words = t->cap_words ? 2 * t->cap_words : 1024;
        t->words = bs_xrealloc(t->words, t->cap_words * sizeof *t->words);
    }
    word *w = &t->words[t->n_words];
    w->text = s; w->len = n; w->n = n; w->freq = 1;
    w->sym = bs_xmalloc(n * sizeof *w->sym);
    for (uint32_t i = 0; i < n; i++) w->sym[i] = (unsigned char)s[i];
    t->word_slots[h] = (uint32_t)++t->n_words;
}

/* Returns the id of token string s, or -1. */
static int64_t find_token(const trainer *t, const char *s) {
    size_t mask = t->tok_cap - 1, h = hash_bytes(s, strlen(s)) & mask;
    for (; t->tok_slots[h]; h = (h + 1) & mask)
        if (strcmp(t->tokens[t->tok_slots[h] - 1], s) == 0) return t->tok_slots[h] - 1;
    return -1;
}
static uint32_t add_token(trainer *t, char *s) {
    size_t mask = t->tok_cap - 1, h = hash_bytes(s, strlen(s)) & mask;
    while (t->tok_slots[h]) h = (h + 1) & mask;
    t->tokens[t->n_tokens] = s;
    t->tok_slots[h] = ++t->n_tokens;
    return t->n_tokens - 1;
}

/* Counts every adjacent pair; returns false if no pair occurs at least twice. Only the slots
 * used this round are scanned and cleared, which keeps a round proportional to the text. */
static bool best_pair(trainer *t, uint32_t *left, uint32_t *right) {
    size_t mask = t->pair_cap - 1, n_used = 0;
    for (size_t wi = 0; wi < t->n_words; wi++) {
        const word *w = &t->words[wi];
        for (uint32_t i = 0; i + 1 < w->n; i++) {
            uint64_t key = (uint64_t)w->sym[i] << 32 | w->sym[i + 1];
            size_t h = hash_u64(key) & mask;
            while (t->pair_cnt[h] && t->pair_key[h] != key) h = (h + 1) & mask;
            if (!t->pair_cnt[h]) t->pair_used[n_used++] = h;
            t->pair_key[h] = key;
            t->pair_cnt[h] += w->freq;
        }
    }
    uint64_t best = 0, best_key = 0;
    for (size_t u = 0; u < n_used; u++) {
        size_t h = t->pair_used[u];
        uint64_t c = t->pair_cnt[h];
        if (c > best || (c == best && t->pair_key[h] < best_key)) { best = c; best_key = t->pair_key[h]; }
        t->pair_cnt[h] = 0;
    }
    *left = (uint32_t)(best_key >> 32);
    *right = (uint32_t)best_key;
    return best >= 2;
}

static void apply_merge(trainer *t, uint32_t a, uint32_t b, uint32_t id) {
    for (size_t wi = 0; wi < t->n_words; wi++) {
        word *w = &t->words[wi];
        uint32_t o = 0;
        for (uint32_t i = 0; i < w->n; i++) {
            if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) { w->sym[o++] = id; i++; }
            else w->sym[o++] = w->sym[i];
        }
        w->n = o;
    }
}

static char *join(const char *a, const char *sep, const char *b) {
    size_t na = strlen(a), ns = strlen(sep), nb = strlen(b);
    char *s = bs_xmalloc(na + ns + nb + 1);
    memcpy(s, a, na); memcpy(s + na, sep, ns); memcpy(s + na + ns, b, nb + 1);
    return s;
}

static void trainer_free(trainer *t) {
    for (size_t i = 0; i < t->n_words; i++) free(t->words[i].sym);
    free(t->words); free(t->word_slots); free(t->tok_slots);
    free(t->pair_key); free(t->pair_cnt); free(t->pair_used);
}

int bs_bpe_train(const char *text, size_t len, uint32_t max_merges, bs_bpe_vocab *out) {
    memset(out, 0, sizeof *out);
    if (!text || max_merges > (1u << 24)) return bs_error("bpe_train: bad arguments");
    trainer t = {0};
    size_t n_pieces = 0, total = 0;
    for (size_t p = 0; p < len; p = bs_bpe_split(text, len, p)) n_pieces++;
    t.word_cap = pow2_at_least(2 * n_pieces + 1);
    t.word_slots = bs_xcalloc(t.word_cap, sizeof *t.word_slots);
    for (size_t p = 0, e; p < len; p = e) {
        e = bs_bpe_split(text, len, p);
        if (e - p > UINT32_MAX / 2) { trainer_free(&t); return bs_error("bpe_train: piece too long"); }
        add_word(&t, text + p, (uint32_t)(e - p));
    }
    for (size_t i = 0; i < t.n_words; i++) total += t.words[i].len;
    t.pair_cap = pow2_at_least(2 * total + 1);
    t.pair_key = bs_xmalloc(t.pair_cap * sizeof *t.pair_key);
    t.pair_cnt = bs_xcalloc(t.pair_cap, sizeof *t.pair_cnt);
    t.pair_used = bs_xmalloc(t.pair_cap * sizeof *t.pair_used);
    t.tok_cap = pow2_at_least(2 * (256 + (size_t)max_merges) + 1);
    t.tok_slots = bs_xcalloc(t.tok_cap, sizeof *t.tok_slots);
    t.tokens = bs_xmalloc((256 + (size_t)max_merges) * sizeof *t.tokens);
    t.merges = bs_xmalloc((max_merges ? max_merges : 1) * sizeof *t.merges);
    for (unsigned b = 0; b < 256; b++) {
        char *s = bs_xmalloc(3);
        s[bs_gpt2_byte_utf8((uint8_t)b, s)] = 0;
        add_token(&t, s);
    }
    uint32_t a, b;
    while (t.n_merges < max_merges && best_pair(&t, &a, &b)) {
        char *s = join(t.tokens[a], "", t.tokens[b]);
        int64_t id = find_token(&t, s);   /* two different splits can spell the same string */
        if (id < 0) id = add_token(&t, s);
        else free(s);
        t.merges[t.n_merges++] = join(t.tokens[a], " ", t.tokens[b]);
        apply_merge(&t, a, b, (uint32_t)id);
    }
    out->n_tokens = t.n_tokens; out->tokens = t.tokens;
    out->n_merges = t.n_merges; out->merges = t.merges;
    trainer_free(&t);
    return 0;
}

void bs_bpe_vocab_free(bs_bpe_vocab *v) {
    if (!v) return;
    for (uint32_t i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (uint32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens); free(v->merges);
    memset(v, 0, sizeof *v);
}
