/* reasoning.c: see reasoning.h. A three-state scanner over a pending buffer that only ever
 * holds undecided text: a possible partial tag, and whitespace that would be dropped if the
 * tag follows. Each feed looks only at the new bytes (plus a tag's length of overlap): the held
 * whitespace is not scanned again, so a stream costs time linear in its length. */
#include "text/reasoning.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

enum { ST_START, ST_THINK, ST_CONTENT };

typedef struct { char *s; size_t n, cap; } buf;

struct bs_reasoning {
    int state;
    bool think_fresh;    /* nothing of the reasoning emitted yet: drop leading whitespace */
    bool content_fresh;  /* just after </think>: drop leading whitespace */
    buf pend, rout, cout;
    size_t searched;     /* ST_THINK: no </think> starts in pend before this */
    size_t ws_lead;      /* ST_THINK: pend's first ws_lead bytes are whitespace */
    size_t work;         /* bytes examined while in ST_THINK (bs_reasoning_work) */
};

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static void buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->s = bs_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void buf_drop_front(buf *b, size_t k) {
    memmove(b->s, b->s + k, b->n - k);
    b->n -= k;
    if (b->s) b->s[b->n] = 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v'; }

static size_t leading_ws(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    return i;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = BS_MIN(n, tl - 1); k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t i = 0; i + tl <= n; i++)
        if (s[i] == tag[0] && memcmp(s + i, tag, tl) == 0) return s + i;
    return NULL;
}

static void emit_reasoning(bs_reasoning *r, const char *s, size_t n, bool trim_end);

static size_t sub0(size_t a, size_t b) { return a > b ? a - b : 0; }

/* Drop k bytes off the front of pend, keeping what is known about the rest. */
static void pend_drop(bs_reasoning *r, size_t k) {
    if (!k) return;
    buf_drop_front(&r->pend, k);
    r->searched = sub0(r->searched, k);
    r->ws_lead = sub0(r->ws_lead, k);
}

/* ST_THINK without a closing tag in pend: emit all but what must wait (a partial tag, and the
 * whitespace before it, which is dropped if the tag follows). The whitespace run at pend's
 * front was held before: it is not scanned again. */
static void think_hold(bs_reasoning *r) {
    buf *p = &r->pend;
    const size_t tag = partial_tag(p->s, p->n, CLOSE);
    size_t i = p->n - tag;
    while (i > r->ws_lead && is_ws(p->s[i - 1])) i--;
    r->work += tag + (p->n - tag - i);
    if (i <= r->ws_lead) i = 0;   /* whitespace all the way back */
    emit_reasoning(r, p->s, i, false);
    pend_drop(r, i);
    r->ws_lead = p->n - tag;
    r->searched = sub0(p->n + 1, sizeof CLOSE - 1);   /* every start before n - len + 1 failed */
}

bs_reasoning *bs_reasoning_new(bool in_think) {
    bs_reasoning *r = bs_xcalloc(1, sizeof *r);
    r->state = in_think ? ST_THINK : ST_START;
    r->think_fresh = true;
    return r;
}

void bs_reasoning_free(bs_reasoning *r) {
    if (!r) return;
    free(r->pend.s); free(r->rout.s); free(r->cout.s);
    free(r);
}

bool bs_reasoning_in_content(const bs_reasoning *r) { return r->state == ST_CONTENT; }

size_t bs_reasoning_work(const bs_reasoning *r) { return r->work; }

/* Emit reasoning text s[0..n), minus trailing whitespace when `trim_end`. */
static void emit_reasoning(bs_reasoning *r, const char *s, size_t n, bool trim_end) {
    while (trim_end && n > 0 && is_ws(s[n - 1])) n--;
    if (n) { buf_add(&r->rout, s, n); r->think_fresh = false; }
}

/* Decide as much of the pending text as possible; `final` means no more text will come. */
static void process(bs_reasoning *r, bool final) {
    buf *p = &r->pend;
    for (;;) {
        if (r->state == ST_START) {
            size_t i = leading_ws(p->s, p->n);
            if (p->n - i >= sizeof OPEN - 1 && memcmp(p->s + i, OPEN, sizeof OPEN - 1) == 0) {
                buf_drop_front(p, i + sizeof OPEN - 1);
                r->state = ST_THINK;
                r->searched = r->ws_lead = 0;
                continue;
            }
            bool maybe = p->n - i < sizeof OPEN - 1 && memcmp(p->s + i, OPEN, p->n - i) == 0;
            if (maybe && !final) return;
            r->state = ST_CONTENT;
            continue;
        }
        if (r->state == ST_THINK) {
            if (r->think_fresh) pend_drop(r, leading_ws(p->s, p->n));
            const size_t from = BS_MIN(r->searched, p->n);
            const char *c = find(p->s + from, p->n - from, CLOSE);
            r->work += p->n - from;
            if (c) {
                emit_reasoning(r, p->s, (size_t)(c - p->s), true);
                buf_drop_front(p, (size_t)(c - p->s) + sizeof CLOSE - 1);
                r->state = ST_CONTENT;
                r->content_fresh = true;
                continue;
            }
            if (final) { emit_reasoning(r, p->s, p->n, true); p->n = 0; return; }
            think_hold(r);
            return;
        }
        if (r->content_fresh) {
            buf_drop_front(p, leading_ws(p->s, p->n));
            if (p->n == 0) return;
            r->content_fresh = false;
        }
        if (p->n) buf_add(&r->cout, p->s, p->n);
        p->n = 0;
        return;
    }
}

static void deliver(bs_reasoning *r, bs_reasoning_out *out, const char *text, size_t len, bool final) {
    r->rout.n = r->cout.n = 0;
    buf_add(&r->rout, "", 0);
    buf_add(&r->cout, "", 0);
    buf_add(&r->pend, text, len);
    process(r, final);
    out->reasoning = r->rout.s;
    out->reasoning_len = r->rout.n;
    out->content = r->cout.s;
    out->content_len = r->cout.n;
}

void bs_reasoning_feed(bs_reasoning *r, const char *text, size_t len, bs_reasoning_out *out) {
    deliver(r, out, text, len, false);
}

void bs_reasoning_finish(bs_reasoning *r, bs_reasoning_out *out) { deliver(r, out, "", 0, true); }

void bs_reasoning_split(const char *text, size_t len, bool in_think, char **reasoning, size_t *reasoning_len,
                        char **content, size_t *content_len) {
    bs_reasoning *r = bs_reasoning_new(in_think);
    bs_reasoning_out o;
    bs_reasoning_feed(r, text, len, &o);
    buf rb = {0}, cb = {0};
    buf_add(&rb, o.reasoning, o.reasoning_len);
    buf_add(&cb, o.content, o.content_len);
    bs_reasoning_finish(r, &o);
    buf_add(&rb, o.reasoning, o.reasoning_len);
    buf_add(&cb, o.content, o.content_len);
    bs_reasoning_free(r);
    *reasoning = rb.s;
    *content = cb.s;
    if (reasoning_len) *reasoning_len = rb.n;
    if (content_len) *content_len = cb.n;
}

size_t bs_reasoning_end(const char *text, size_t len, bool in_think) {
    size_t from = 0;
    if (!in_think) {   /* ST_START's rule: whitespace, then the open tag, or no think block */
        from = leading_ws(text, len);
        if (len - from < sizeof OPEN - 1 || memcmp(text + from, OPEN, sizeof OPEN - 1)) return 0;
        from += sizeof OPEN - 1;
    }
    const char *c = find(text + from, len - from, CLOSE);
    return c ? (size_t)(c - text) + sizeof CLOSE - 1 : len;
}
