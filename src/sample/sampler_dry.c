/* sampler_dry.c: DRY penalty, llama.cpp semantics.
 *
 * Per step, over the window t[0..n) (t[n-1] is the newest token):
 *  1. Restart limit: walk back from the newest token to the nearest complete sequence breaker;
 *     no repeat may reach past it (rep_limit = its distance from the end minus its tail).
 *  2. For every earlier position p, len(p) = how many tokens ending at p equal the tokens ending
 *     at the newest one, clamped to rep_limit: the Z-function of the reversed window, O(n).
 *  3. The token after p would extend that repeat: record the longest len per such token.
 *  4. logit -= multiplier * base^(len - allowed_length) for len >= allowed_length, the exponent
 *     clamped so the power stays finite; single-token breakers are never penalised. */
#include "sample/sampler_dry.h"
#include "io/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DRY_MAX_CHARS = 40, DRY_MAX_TAIL = 20 };

void bs_dry_init(bs_dry *d, int32_t n_vocab) {
    memset(d, 0, sizeof *d);
    d->n_vocab = n_vocab;
    d->sorted = true;
    d->maxrep = bs_xcalloc((size_t)n_vocab, sizeof *d->maxrep);
    d->touched = bs_xmalloc((size_t)n_vocab * sizeof *d->touched);
}

void bs_dry_free(bs_dry *d) {
    free(d->br);
    free(d->pool);
    free(d->z);
    free(d->maxrep);
    free(d->touched);
    memset(d, 0, sizeof *d);
}

void bs_dry_clear(bs_dry *d) {
    d->n_br = 0;
    d->n_pool = 0;
    d->sorted = true;
}

int bs_dry_add(bs_dry *d, int32_t head, const int32_t *tail, int n_tail) {
    if (head < 0 || head >= d->n_vocab) return bs_error("DRY breaker token %d out of range", head);
    if (n_tail < 0 || (n_tail > 0 && !tail)) return bs_error("DRY breaker: bad tail");
    for (int i = 0; i < n_tail; i++)
        if (tail[i] < 0 || tail[i] >= d->n_vocab)
            return bs_error("DRY breaker token %d out of range", tail[i]);
    if (n_tail > DRY_MAX_TAIL) n_tail = DRY_MAX_TAIL;
    if (d->n_br == d->cap_br) {
        d->cap_br = d->cap_br ? 2 * d->cap_br : 64;
        d->br = bs_xrealloc(d->br, (size_t)d->cap_br * sizeof *d->br);
    }
    if (d->n_pool + n_tail > d->cap_pool) {
        while (d->n_pool + n_tail > d->cap_pool) d->cap_pool = d->cap_pool ? 2 * d->cap_pool : 256;
        d->pool = bs_xrealloc(d->pool, (size_t)d->cap_pool * sizeof *d->pool);
    }
    if (n_tail) memcpy(d->pool + d->n_pool, tail, (size_t)n_tail * sizeof *tail);
    d->br[d->n_br++] = (bs_dry_breaker){head, d->n_pool, n_tail};
    d->n_pool += n_tail;
    d->sorted = false;
    return 0;
}

static bool has_breaker(const bs_dry *d, int32_t head, const int32_t *tail, int n_tail) {
    for (int i = 0; i < d->n_br; i++) {
        const bs_dry_breaker *b = &d->br[i];
        if (b->head == head && b->len == n_tail &&
            !memcmp(d->pool + b->off, tail, (size_t)n_tail * sizeof *tail))
            return true;
    }
    return false;
}

/* One breaker string against one token text: a token containing the string is a single-token
 * breaker; a token ending with a proper prefix of it heads a sequence whose tail is the
 * tokenization of the rest of the string. */
static int scan_token(bs_dry *d, int32_t id, const char *w, size_t wlen, const char *s,
                      size_t slen, const bs_sampler_vocab *v) {
    if (wlen >= slen && memmem(w, wlen, s, slen)) return bs_dry_add(d, id, NULL, 0);
    for (size_t pos = 0; pos < wlen; pos++) {
        if (w[pos] != s[0]) continue;
        size_t i = 1;
        while (i < slen && pos + i < wlen && w[pos + i] == s[i]) i++;
        if (pos + i < wlen) continue;   /* mismatch before the token's end */
        int32_t tail[64];
        int nt = v->tokenize(v->ud, s + i, slen - i, tail, (int)BS_ARRAY_LEN(tail));
        if (nt < 0) return bs_error_prefix("DRY breaker tail: ");
        if (nt == 0) continue;
        if (nt > DRY_MAX_TAIL) nt = DRY_MAX_TAIL;
        if (!has_breaker(d, id, tail, nt) && bs_dry_add(d, id, tail, nt) < 0) return -1;
    }
    return 0;
}

int bs_dry_set_strings(bs_dry *d, const char *const *strings, int n, const bs_sampler_vocab *v) {
    if (n > 0 && (!strings || !v || !v->token_text || !v->tokenize))
        return bs_error("DRY breakers: strings need a vocabulary");
    bs_dry_clear(d);
    for (int k = 0; k < n; k++) {
        const char *s = strings[k];
        size_t slen = s ? strlen(s) : 0;
        if (slen == 0) continue;
        if (slen > DRY_MAX_CHARS) slen = DRY_MAX_CHARS;
        for (int32_t id = 0; id < d->n_vocab; id++) {
            size_t wlen = 0;
            const char *w = v->token_text(v->ud, id, &wlen);
            if (!w || wlen == 0) continue;
            if (scan_token(d, id, w, wlen, s, slen, v) < 0) return -1;
        }
    }
    return 0;
}

static int cmp_breaker(const void *a, const void *b) {
    const bs_dry_breaker *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

/* Index of the first breaker with this head, or n_br. */
static int first_with_head(const bs_dry *d, int32_t head) {
    int lo = 0, hi = d->n_br;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (d->br[mid].head < head) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* Distance limit from the newest token to the nearest complete breaker (n if none). */
static size_t restart_limit(const bs_dry *d, const int32_t *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t tok = t[n - 1 - i];
        long longest = -1;
        for (int j = first_with_head(d, tok); j < d->n_br && d->br[j].head == tok; j++) {
            const bs_dry_breaker *b = &d->br[j];
            if (b->len <= longest || (size_t)b->len > i) continue;
            /* the tail follows the head: tail[o] is t[n - i + o] */
            bool match = true;
            for (int o = 0; o < b->len && match; o++) match = d->pool[b->off + o] == t[n - i + o];
            if (match) longest = b->len;
        }
        if (longest >= 0) return i - (size_t)longest;
    }
    return n;
}

static bool is_single_breaker(const bs_dry *d, int32_t tok) {
    for (int j = first_with_head(d, tok); j < d->n_br && d->br[j].head == tok; j++)
        if (d->br[j].len == 0) return true;
    return false;
}

/* z[k] = length of the common prefix of r and r[k..], where r is t reversed (r[j] = t[n-1-j]):
 * how many tokens ending at position n-1-k match the tokens ending at the newest one. */
static void reversed_z(const int32_t *t, size_t n, int32_t *z) {
#define R(j) t[n - 1 - (j)]
    size_t l = 0, r = 0;
    z[0] = (int32_t)n;
    for (size_t k = 1; k < n; k++) {
        size_t zk = 0;
        if (k < r) zk = BS_MIN(r - k, (size_t)z[k - l]);
        while (k + zk < n && R(zk) == R(k + zk)) zk++;
        if (k + zk > r) { l = k; r = k + zk; }
        z[k] = (int32_t)zk;
    }
#undef R
}

void bs_dry_apply(bs_dry *d, const int32_t *t, size_t n, float multiplier, float base,
                  int32_t allowed_length, float *logits) {
    if (allowed_length < 0) allowed_length = 0;
    if (n <= (size_t)allowed_length || n < 2) return;
    if (!d->sorted) {
        qsort(d->br, (size_t)d->n_br, sizeof *d->br, cmp_breaker);
        d->sorted = true;
    }
    size_t rep_limit = restart_limit(d, t, n);
    if (rep_limit < (size_t)allowed_length) return;
    if (n > d->cap_z) {
        d->cap_z = n;
        free(d->z);
        d->z = bs_xmalloc(n * sizeof *d->z);
    }
    reversed_z(t, n, d->z);
    int n_touched = 0;
    for (size_t p = 0; p + 1 < n; p++) {
        size_t len = BS_MIN((size_t)d->z[n - 1 - p], rep_limit);
        int32_t next = t[p + 1];
        if (len < (size_t)allowed_length || next < 0 || next >= d->n_vocab) continue;
        /* maxrep holds len + 1 so that 0 means "not seen" even when allowed_length is 0 */
        if (d->maxrep[next] == 0) d->touched[n_touched++] = next;
        if ((int32_t)len + 1 > d->maxrep[next]) d->maxrep[next] = (int32_t)len + 1;
    }
    int max_exp = 0;
    if (base > 1.000001f) max_exp = (int)(88.7228391f / logf(base));
    for (int i = 0; i < n_touched; i++) {
        int32_t tok = d->touched[i];
        int exp = d->maxrep[tok] - 1 - allowed_length;
        d->maxrep[tok] = 0;
        if (is_single_breaker(d, tok)) continue;
        if (max_exp > 0 && exp > max_exp) exp = max_exp;
        /* in double like llama.cpp's std::pow(float, int); only the result is rounded */
        double pen = (double)multiplier * pow((double)base, exp);
        logits[tok] -= pen > FLT_MAX ? INFINITY : (float)pen;
    }
}
