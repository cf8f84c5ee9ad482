/* stop_match.c: see stop_match.h. */
#include "text/stop_match.h"

#include "io/util.h"

#include <stdlib.h>
#include <string.h>

int bs_stops_init(bs_stops *m, const char *const *strings, int n) {
    memset(m, 0, sizeof *m);
    if (n < 0 || n > BS_STOP_MAX) return bs_error("at most %d stop strings", BS_STOP_MAX);
    for (int i = 0; i < n; i++) {
        const size_t len = strings[i] ? strlen(strings[i]) : 0;
        if (!len) continue;
        if (len >= UINT32_MAX) { bs_stops_free(m); return bs_error("a stop string of %zu bytes", len); }
        bs_stop_str *e = &m->e[m->n++];
        e->s = bs_xstrdup(strings[i]);
        e->len = len;
        e->fail = bs_xmalloc(len * sizeof *e->fail);
        e->fail[0] = 0;
        for (size_t j = 1, k = 0; j < len; j++) {
            while (k && e->s[j] != e->s[k]) k = e->fail[k - 1];
            if (e->s[j] == e->s[k]) k++;
            e->fail[j] = (uint32_t)k;
        }
    }
    return 0;
}

void bs_stops_free(bs_stops *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->e[i].s);
        free(m->e[i].fail);
    }
    memset(m, 0, sizeof *m);
}

void bs_stops_reset(bs_stops *m) {
    for (int i = 0; i < m->n; i++) m->e[i].state = 0;
}

/* One string over the bytes: the offset in s where it first completes, or SIZE_MAX. */
static size_t feed_one(bs_stop_str *e, const char *s, size_t n) {
    size_t q = e->state, hit = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        while (q && s[i] != e->s[q]) q = e->fail[q - 1];
        if (s[i] == e->s[q]) q++;
        if (q == e->len) {
            if (hit == SIZE_MAX) hit = i;
            q = e->fail[q - 1];   /* the state stays "a proper prefix" for the bytes after */
        }
    }
    e->state = q;
    return hit;
}

size_t bs_stops_feed(bs_stops *m, const char *s, size_t n, size_t at) {
    size_t best = SIZE_MAX;
    for (int i = 0; i < m->n; i++) {
        const size_t end = feed_one(&m->e[i], s, n);   /* the completing byte's offset in s */
        if (end == SIZE_MAX) continue;
        const size_t start = at + end + 1 - m->e[i].len;
        if (start < best) best = start;
    }
    return best;
}

size_t bs_stops_partial(const bs_stops *m) {
    size_t best = 0;
    for (int i = 0; i < m->n; i++)
        if (m->e[i].state > best) best = m->e[i].state;
    return best;
}
