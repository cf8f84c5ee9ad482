/* grammar_range.c: the integers and numbers of a JSON schema's minimum/maximum as GBNF.
 *
 * Integers are written as the schema's integer rule writes them (no leading zeros, no "-0", at
 * most 16 digits). A range is split by sign and then by the number of digits; the numbers of
 * one length from x to y are "x's first digit, then from x's rest up", the first digits between
 * with any rest, and "y's first digit, then up to y's rest", recursively: at most two branches a
 * digit, so the grammar grows with the digits, not with the range.
 *
 * Numbers are an integer part and an optional fraction, without an exponent (which would hide
 * their size). With whole bounds that is exact: p.f >= L is p >= L with any fraction, and
 * p.f > L is p > L with any fraction or p = L with a fraction not all zeros; p.f <= H is
 * p < H with any or p = H with zeros only; negative numbers are the same on magnitudes. Bounds
 * that are not whole are rounded inward (a subset of the numbers they allow). */
#include "sample/grammar.h"
#include "sample/grammar_text.h"
#include "io/util.h"

#include <stdbool.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIGITS 16
static const int64_t MAX_INT = 9999999999999999;   /* 10^16 - 1: 16 digits */

static bool all_of(const char *s, char c) {
    for (; *s; s++)
        if (*s != c) return false;
    return true;
}

/* The L-digit strings from x to y (x <= y, both L digits) into b. */
static void same_length(gt_buf *b, const char *x, const char *y, int L) {
    if (L == 0) {
        gt_put(b, "\"\"");
        return;
    }
    if (x[0] == y[0]) {
        gt_putf(b, "\"%c\" ( ", x[0]);
        same_length(b, x + 1, y + 1, L - 1);
        gt_put(b, " )");
        return;
    }
    const bool from_0 = all_of(x + 1, '0'), to_9 = all_of(y + 1, '9');
    char zeros[MAX_DIGITS + 1], nines[MAX_DIGITS + 1];
    memset(zeros, '0', (size_t)L - 1), zeros[L - 1] = 0;
    memset(nines, '9', (size_t)L - 1), nines[L - 1] = 0;
    const char lo = from_0 ? x[0] : (char)(x[0] + 1), hi = to_9 ? y[0] : (char)(y[0] - 1);
    int n = 0;
    gt_put(b, "( ");
    if (!from_0) {
        gt_putf(b, "\"%c\" ( ", x[0]);
        same_length(b, x + 1, nines, L - 1);
        gt_put(b, " )");
        n++;
    }
    if (lo <= hi) {
        gt_putf(b, "%s[%c-%c]", n++ ? " | " : "", lo, hi);
        if (L > 1) gt_putf(b, " [0-9]{%d}", L - 1);
    }
    if (!to_9) {
        gt_putf(b, "%s\"%c\" ( ", n++ ? " | " : "", y[0]);
        same_length(b, zeros, y + 1, L - 1);
        gt_put(b, " )");
    }
    gt_put(b, " )");
}

static int digits(int64_t v) {
    int n = 1;
    while (v >= 10) v /= 10, n++;
    return n;
}

/* The integers from a to z (0 <= a <= z <= MAX_INT) into b, alternatives by length. */
static void non_negative(gt_buf *b, int64_t a, int64_t z) {
    int64_t p10 = 1;   /* 10^(L-1) */
    for (int L = 1; L < digits(a); L++) p10 *= 10;
    gt_put(b, "( ");
    for (int L = digits(a); L <= digits(z); L++, p10 *= 10) {
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", (long long)(L == digits(a) ? a : p10));
        snprintf(y, sizeof y, "%lld", (long long)(L == digits(z) ? z : p10 * 10 - 1));
        if (L > digits(a)) gt_put(b, " | ");
        same_length(b, x, y, L);
    }
    gt_put(b, " )");
}

#define FRAC "( \".\" [0-9]{1,16} )?"
#define ZEROS "( \".\" \"0\"{1,16} )?"
#define NONZERO "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"

/* One bound of a number range on magnitudes: whole, inclusive or not, or absent. */
typedef struct mbound { bool has; int64_t v; bool incl; } mbound;

/* Numbers p.f >= 0 between lo and hi (lo.v >= 0) into b as alternatives (each after " | " but
 * the first); how many. */
static int magnitudes(gt_buf *b, mbound lo, mbound hi) {
    const int64_t a = !lo.has ? 0 : lo.incl ? lo.v : lo.v + 1;   /* any fraction from here */
    const int64_t z = !hi.has ? MAX_INT : hi.v - 1;              /* ... to here */
    int n = 0;
    if (lo.has && !lo.incl && (!hi.has || lo.v < hi.v)) {   /* p = lo, a fraction not all zeros */
        gt_putf(b, "\"%lld\" " NONZERO, (long long)lo.v);
        n++;
    }
    if (a <= z && z >= 0) {
        gt_put(b, n++ ? " | " : "");
        non_negative(b, BS_MAX(a, 0), z);
        gt_put(b, " " FRAC);
    }
    if (hi.has && hi.incl && hi.v >= a) {   /* p = hi, zeros only */
        gt_putf(b, "%s\"%lld\" " ZEROS, n++ ? " | " : "", (long long)hi.v);
    }
    return n;
}

/* A bound made whole within the 16 digits, into *w: an integer the schema wrote is exact; a
 * real one that is not whole is rounded inward (inclusive), and so is one at or past 2^53: its
 * double may be the number written rounded by up to half a step, outward too (9999999999999999.5
 * reads as 10^16), so it moves one step inward. Past the 16 digits on its own side
 * (a minimum of -10^16 or less) it bounds nothing and is dropped; past them on the far side it
 * leaves nothing (an error naming what: "integer" or "number"). */
static int whole_bound(bs_grammar_bound *b, bool upper, int64_t *w, const char *what) {
    const int64_t past = MAX_INT + 1;
    double v = b->v;
    if (!b->has) return 0;
    if (!b->is_int && fabs(v) >= 0x1p53) v = nextafter(v, upper ? -INFINITY : INFINITY), b->incl = true;
    if (!b->is_int && v != floor(v)) v = upper ? floor(v) : ceil(v), b->incl = true;
    /* a double past +-10^16 compares as it is; one inside converts exactly (it is whole) */
    const bool own = b->is_int ? (upper ? b->i >= past : b->i <= -past) : (upper ? v >= past : v <= -past);
    const bool far = b->is_int ? (upper ? b->i <= -past : b->i >= past) : (upper ? v <= -past : v >= past);
    if (far) return bs_error("json schema: %s %s bound past the 16 digits %ss have here", what[0] == 'i' ? "an" : "a", what, what);
    if (own) b->has = false;
    else *w = b->is_int ? b->i : (int64_t)v;
    return 0;
}

char *bs_grammar_num_range(bs_grammar_bound lo, bs_grammar_bound hi) {
    int64_t L = 0, H = 0;
    if (whole_bound(&lo, false, &L, "number") || whole_bound(&hi, true, &H, "number")) return NULL;
    const bool has_lo = lo.has, has_hi = hi.has, lo_incl = lo.incl, hi_incl = hi.incl;
    if (!has_lo) L = 0;
    if (!has_hi) H = 0;
    gt_buf b = {0};
    gt_put(&b, "( ");
    int n = 0;
    if (!has_hi || H > 0 || (H == 0 && hi_incl)) {   /* x >= 0 */
        const mbound ml = has_lo && L >= 0 ? (mbound){true, L, lo_incl} : (mbound){true, 0, true};
        n += magnitudes(&b, ml, (mbound){has_hi, H, hi_incl});
    }
    if (!has_lo || L < 0) {   /* x < 0: -m, m > 0 */
        const mbound ml = has_hi && H < 0 ? (mbound){true, -H, hi_incl} : (mbound){true, 0, false};
        gt_buf m = {0};
        if (magnitudes(&m, ml, (mbound){has_lo, -L, lo_incl}) && m.p) {
            gt_putf(&b, "%s\"-\" ( %s )", n ? " | " : "", m.p);
            n++;
        }
        b.over |= m.over, b.oom |= m.oom;
        free(m.p);
    }
    gt_put(&b, " )");
    if (!n) bs_error("json schema: no number between minimum and maximum (bounds that are not whole are rounded inward)");
    if (!n || gt_check(&b, "json schema: number range")) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *bs_grammar_int_range(bs_grammar_bound lo_b, bs_grammar_bound hi_b) {
    int64_t L = 0, H = 0;
    if (whole_bound(&lo_b, false, &L, "integer") || whole_bound(&hi_b, true, &H, "integer")) return NULL;
    /* the integers inside, inclusive bounds */
    const int64_t lo = lo_b.has ? L + !lo_b.incl : -MAX_INT, hi = hi_b.has ? H - !hi_b.incl : MAX_INT;
    if (lo > MAX_INT || hi < -MAX_INT)
        return bs_error("json schema: an integer bound past the 16 digits integers have here"), NULL;
    if (lo > hi) return bs_error("json schema: no integer between minimum and maximum"), NULL;
    gt_buf b = {0};
    gt_put(&b, "( ");
    if (lo < 0) {   /* -m for m from max(1, -hi) to -lo */
        gt_put(&b, "\"-\" ");
        non_negative(&b, hi < 0 ? -hi : 1, -lo);
    }
    if (hi >= 0) {
        if (lo < 0) gt_put(&b, " | ");
        non_negative(&b, BS_MAX(lo, 0), hi);
    }
    gt_put(&b, " )");
    if (gt_check(&b, "json schema: integer range")) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
