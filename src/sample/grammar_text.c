/* grammar_text.c: the bounded GBNF text buffer (grammar_text.h). */
#include "sample/grammar_text.h"
#include "sample/grammar.h"
#include "io/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gt_put_n(gt_buf *b, const char *s, size_t n) {
    if (b->over) return;
    if (b->len + n > BS_GRAMMAR_MAX_BYTES) {
        b->over = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        const size_t cap = BS_MAX(2 * b->cap, b->len + n + 256);
        char *p = realloc(b->p, cap);
        if (!p) {
            b->over = b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->p[b->len += n] = 0;
}

void gt_put(gt_buf *b, const char *s) { gt_put_n(b, s, strlen(s)); }

void gt_putf(gt_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *tmp = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!tmp) {
        b->over = b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(tmp, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gt_put_n(b, tmp, (size_t)n);
    free(tmp);
}

void gt_put_repeat(gt_buf *b, const char *x, long lo, long hi) {
    const long R = BS_GRAMMAR_MAX_REPEAT;
    if (lo == 0 && hi < 0) { gt_putf(b, "( %s )*", x); return; }
    if (lo == 1 && hi < 0) { gt_putf(b, "( %s )+", x); return; }
    if (lo == 0 && hi == 1) { gt_putf(b, "( %s )?", x); return; }
    if (lo <= R && hi < 0) { gt_putf(b, "( %s ){%ld,}", x, lo); return; }
    if (hi >= 0 && hi <= R) { gt_putf(b, "( %s ){%ld,%ld}", x, lo, hi); return; }
    gt_put(b, "( \"\"");
    for (long n = lo; n > 0; n -= BS_MIN(n, R)) gt_putf(b, " ( %s ){%ld}", x, BS_MIN(n, R));
    if (hi < 0) {
        gt_putf(b, " ( %s )*", x);
    } else {
        long m = hi - lo, open = 0;
        for (; m > R; m -= R, open++) gt_putf(b, " ( ( %s ){%ld}", x, R);
        if (m) gt_putf(b, " ( %s ){0,%ld}", x, m);
        while (open--) gt_putf(b, " | ( %s ){0,%ld} )", x, R - 1);
    }
    gt_put(b, " )");
}

int gt_check(const gt_buf *b, const char *what) {
    if (b->oom) return bs_error("%s: out of memory", what);
    if (b->over) return bs_error("%s: the grammar it makes is longer than %d bytes (the limit)", what, BS_GRAMMAR_MAX_BYTES);
    return 0;
}
