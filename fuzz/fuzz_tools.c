/* fuzz_tools.c: libFuzzer target for the tool-call reader (server_calls.c), which reads model
 * output. The first byte picks how the rest is fed: whole, in pieces of 1..7 bytes, or split once
 * at the second byte. Whatever the text: nothing crashes, every feed says exactly what the whole
 * text says (a stream and the answer without streaming agree), and every call's arguments are a
 * JSON object. */
#include "server/server.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char STR_PARAMS[] = "\nf\x1fs\n\nget_weather\x1f" "city\n";

typedef struct fz_log {
    srv_buf s, args;           /* the events; the open call's arguments */
    int last;
} fz_log;

static void mark(fz_log *l, int kind, const char *tag) {
    if (l->last != kind) srv_buf_adds(&l->s, tag);
    l->last = kind;
}

static void f_text(void *ud, const char *p, size_t n) {
    mark(ud, 1, "\x01T");
    srv_buf_add(&((fz_log *)ud)->s, p, n);
}

static void f_open(void *ud, int i, const char *name) {
    fz_log *l = ud;
    (void)i;
    mark(l, 2, "\x01O");
    srv_buf_adds(&l->s, name);
    l->args.len = 0;
    srv_buf_add(&l->args, "", 0);
}

static void f_args(void *ud, int i, const char *p, size_t n) {
    fz_log *l = ud;
    (void)i;
    mark(l, 3, "\x01A");
    srv_buf_add(&l->s, p, n);
    srv_buf_add(&l->args, p, n);
}

static void f_close(void *ud, int i) {
    fz_log *l = ud;
    (void)i;
    mark(l, 4, "\x01C");
    json_t *j = json_loadb(l->args.p, l->args.len, JSON_ALLOW_NUL, NULL);   /* (\u0000 is JSON) */
    if (!json_is_object(j)) abort();   /* arguments are always a JSON object */
    json_decref(j);
}

static const srv_calls_ops ops = {f_text, f_open, f_args, f_close};

/* how: 0 whole, 1..7 pieces of that size, 8 split once at `at` */
static srv_buf feed(const char *p, size_t n, int how, size_t at, int *n_calls) {
    fz_log l = {{0}, {0}, 0};
    srv_calls c;
    srv_calls_init(&c, STR_PARAMS, false);
    if (how == 0) {
        srv_calls_feed(&c, p, n, true, &ops, &l);
    } else if (how == 8) {
        at = at > n ? n : at;
        srv_calls_feed(&c, p, at, false, &ops, &l);
        srv_calls_feed(&c, p + at, n - at, true, &ops, &l);
    } else {
        for (size_t i = 0; i < n; i += (size_t)how) srv_calls_feed(&c, p + i, n - i < (size_t)how ? n - i : (size_t)how, false, &ops, &l);
        srv_calls_feed(&c, NULL, 0, true, &ops, &l);
    }
    *n_calls = c.n_calls * 2 + (c.n_calls && c.cut);
    srv_calls_free(&c);
    srv_buf_free(&l.args);
    srv_buf_add(&l.s, "", 0);
    return l.s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const int how = data[0] % 9;
    const size_t at = data[1];
    const char *p = (const char *)data + 2;
    const size_t n = size - 2;
    int c0, c1;
    srv_buf whole = feed(p, n, 0, 0, &c0), parts = feed(p, n, how, at, &c1);
    if (whole.len != parts.len || memcmp(whole.p, parts.p, whole.len) || c0 != c1) abort();
    srv_buf_free(&whole);
    srv_buf_free(&parts);
    srv_tool_call *calls = NULL;
    srv_buf rest = {0};
    bool cut;
    const int nc = srv_parse_tool_calls(p, n, STR_PARAMS, false, &calls, &rest, &cut);
    if (nc != c0 / 2) abort();
    srv_free_tool_calls(calls, nc);
    srv_buf_free(&rest);
    return 0;
}
