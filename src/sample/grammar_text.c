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

int gt_check(const gt_buf *b, const char *what) {
    if (b->oom) return bs_error("%s: out of memory", what);
    if (b->over) return bs_error("%s: the grammar it makes is longer than %d bytes (the limit)", what, BS_GRAMMAR_MAX_BYTES);
    return 0;
}
