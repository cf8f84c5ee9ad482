/* stop_match.h: a request's stop strings found as its text grows. Each string keeps a
 * Knuth-Morris-Pratt automaton whose state is the longest suffix of the text so far that is a
 * prefix of it, so every byte costs O(1) amortized however long the strings are (a search of
 * the text's tail on every token costs the strings' lengths squared, which one request with long
 * stop strings could make stall a server's every slot). */
#ifndef BS_STOP_MATCH_H
#define BS_STOP_MATCH_H

#include <stddef.h>
#include <stdint.h>

enum { BS_STOP_MAX = 64 };

typedef struct bs_stop_str {
    char *s;
    size_t len;
    uint32_t *fail;   /* fail[i]: the longest proper prefix of s[0..i] that is also its suffix */
    size_t state;     /* bytes of s matched at the end of the text fed */
} bs_stop_str;

typedef struct bs_stops {
    int n;
    bs_stop_str e[BS_STOP_MAX];
} bs_stops;

/* Copy n (<= BS_STOP_MAX) strings, each shorter than 4 GiB; empty ones are skipped. 0, or -1 +
 * bs_error. The text is empty. */
int bs_stops_init(bs_stops *m, const char *const *strings, int n);
void bs_stops_free(bs_stops *m);
/* The text is empty again. */
void bs_stops_reset(bs_stops *m);
/* Feed n more bytes, which follow `at` bytes fed before. Where stop strings complete in them,
 * the text offset where the earliest-starting one begins (as a search from the left finds it);
 * else SIZE_MAX. Every byte is fed either way. */
size_t bs_stops_feed(bs_stops *m, const char *s, size_t n, size_t at);
/* The longest end of the text that is a proper prefix of a stop string (it may yet become one:
 * not safe to show). */
size_t bs_stops_partial(const bs_stops *m);

#endif
