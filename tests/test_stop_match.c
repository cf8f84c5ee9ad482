/* test_stop_match: the stop-string automata (text/stop_match.c) against a plain search of the
 * text: random texts over a 2- or 3-letter alphabet (so prefixes repeat and overlap, where
 * KMP's failure links matter) fed in random pieces, with 1..8 stop strings of 1..12 bytes. After
 * every piece the earliest stop string that starts in the text (the position a search from the
 * left finds) and the longest end of the text that is a proper prefix of one must agree. Also:
 * empty strings are skipped, more than BS_STOP_MAX refused, and a reset starts a new text. */
#include "test.h"
#include "text/stop_match.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* The earliest start of a stop string in text[0..len), or SIZE_MAX. */
static size_t naive_find(char **stop, int n, const char *text, size_t len) {
    size_t best = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        const size_t sl = strlen(stop[i]);
        for (size_t p = 0; sl && p + sl <= len && p < best; p++)
            if (!memcmp(text + p, stop[i], sl)) { best = p; break; }
    }
    return best;
}

static size_t naive_partial(char **stop, int n, const char *text, size_t len) {
    size_t best = 0;
    for (int i = 0; i < n; i++) {
        const size_t sl = strlen(stop[i]);
        for (size_t k = sl ? BS_MIN(sl - 1, len) : 0; k > best; k--)
            if (!memcmp(text + len - k, stop[i], k)) { best = k; break; }
    }
    return best;
}

static void rand_str(bs_rng *r, char *out, size_t len, int letters) {
    for (size_t i = 0; i < len; i++) out[i] = (char)('a' + bs_rng_next(r) % (uint64_t)letters);
    out[len] = 0;
}

static void one_case(bs_rng *r) {
    const int letters = 2 + (int)(bs_rng_next(r) % 2), n = 1 + (int)(bs_rng_next(r) % BS_STOP_MAX);
    char buf[BS_STOP_MAX][16], *stop[BS_STOP_MAX];
    for (int i = 0; i < n; i++) {
        rand_str(r, buf[i], 1 + bs_rng_next(r) % 12, letters);
        stop[i] = buf[i];
    }
    bs_stops m;
    CHECK(bs_stops_init(&m, (const char *const *)stop, n) == 0);
    char text[400];
    const size_t total = 1 + bs_rng_next(r) % 300;
    rand_str(r, text, total, letters);
    for (size_t len = 0; len < total;) {
        const size_t piece = BS_MIN(total - len, 1 + bs_rng_next(r) % 9);
        const size_t got = bs_stops_feed(&m, text + len, piece, len);
        len += piece;
        const size_t want = naive_find(stop, n, text, len);
        CHECKF(got == want, "find: %zu != %zu", got, want);
        if (want != SIZE_MAX) break;   /* a generation ends at its first stop string */
        const size_t gp = bs_stops_partial(&m), wp = naive_partial(stop, n, text, len);
        CHECKF(gp == wp, "partial: %zu != %zu", gp, wp);
        if (gp != wp || got != want) break;
    }
    bs_stops_free(&m);
}

int main(void) {
    bs_rng r;
    bs_rng_seed(&r, 7);
    for (int i = 0; i < (TEST_SANITIZED ? 3000 : 20000); i++) one_case(&r);
    /* empty strings are not stop strings; too many are refused */
    const char *with_empty[] = {"", "ab", ""};
    bs_stops m;
    CHECK(bs_stops_init(&m, with_empty, 3) == 0 && m.n == 1);
    CHECK(bs_stops_feed(&m, "xxa", 3, 0) == SIZE_MAX);
    CHECK_EQ_INT(bs_stops_partial(&m), 1);
    bs_stops_reset(&m);   /* a new text: the "a" before is gone */
    CHECK(bs_stops_feed(&m, "b", 1, 0) == SIZE_MAX && bs_stops_partial(&m) == 0);
    CHECK(bs_stops_feed(&m, "ab", 2, 1) == 1);
    bs_stops_free(&m);
    const char *many[BS_STOP_MAX + 1] = {0};
    CHECK(bs_stops_init(&m, many, BS_STOP_MAX + 1) == -1);
    /* a long stop string fed a byte at a time costs O(1) a byte, and still matches */
    enum { L = 1 << 16 };
    char *lng = bs_xmalloc(L + 1);
    memset(lng, ' ', L);
    lng[L / 2] = 'x';
    lng[L] = 0;
    const char *one[] = {lng};
    CHECK(bs_stops_init(&m, one, 1) == 0);
    size_t hit = SIZE_MAX;
    for (size_t i = 0; i < 3 * (size_t)L && hit == SIZE_MAX; i++)   /* spaces, then the string */
        hit = bs_stops_feed(&m, i < 2 * (size_t)L ? " " : lng + (i - 2 * L), 1, i);
    CHECKF(hit == 2 * (size_t)L, "long string at %zu", hit);   /* its own spaces lead it */
    bs_stops_free(&m);
    free(lng);
    return test_summary("test_stop_match");
}
