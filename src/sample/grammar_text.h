/* grammar_text.h: the growing GBNF text that grammar_schema.c and grammar_pattern.c write,
 * bounded by BS_GRAMMAR_MAX_BYTES: past it (or when an allocation fails) what follows is
 * dropped and the buffer marked, so a conversion checks once at its end. Internal to
 * src/sample/. */
#ifndef BS_GRAMMAR_TEXT_H
#define BS_GRAMMAR_TEXT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gt_buf { char *p; size_t len, cap; bool over, oom; } gt_buf;

void gt_put_n(gt_buf *b, const char *s, size_t n);
void gt_put(gt_buf *b, const char *s);
void gt_putf(gt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ( x ){lo,hi} (hi < 0: unbounded) in counts of at most BS_GRAMMAR_MAX_REPEAT, the most one
 * GBNF repetition takes (grammar.h): lo as runs of that many and a rest, then up to hi - lo more as "that
 * many and again, or fewer", which a text matches in one way only (no ambiguity to explode). */
void gt_put_repeat(gt_buf *b, const char *x, long lo, long hi);
/* The error for a buffer that went over (0 if it did not), naming what was converted. */
int gt_check(const gt_buf *b, const char *what);

#endif
