/* server_blocks.c: a chat task's output as blocks (server_dialect.h) for the answer shapes of
 * other APIs: thinking (the think block), text, tool calls (each as it is written: server_calls.c).
 * The same feed renders a stream and, fed the whole text at once, a finished answer, so both say
 * the same. */
#include "server/server_dialect.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void srv_blocks_init(srv_blocks *b, bool in_think, bool tools, const char *str_params, bool one_call) {
    memset(b, 0, sizeof *b);
    b->rs = bs_reasoning_new(in_think);
    b->tools = tools;
    b->open = -1;
    srv_calls_init(&b->calls, str_params, one_call);
}

void srv_blocks_free(srv_blocks *b) {
    bs_reasoning_free(b->rs);
    srv_calls_free(&b->calls);
}

/* the block ops and their caller's data, for the call reader's events */
typedef struct feed_ctx {
    srv_blocks *b;
    const srv_block_ops *ops;
    void *ud;
} feed_ctx;

static void close_open(srv_blocks *b, const srv_block_ops *ops, void *ud) {
    if (b->open >= 0) ops->close(ud, b->open);
    b->open = -1;
}

/* Text of kind (thinking or text) into its block, opening it (and closing another) first. */
static void give(srv_blocks *b, int kind, const char *p, size_t n, const srv_block_ops *ops, void *ud) {
    if (!n) return;
    if (b->open != kind) {
        close_open(b, ops, ud);
        ops->open(ud, kind, NULL);
        b->open = kind;
        b->any = true;
    }
    ops->delta(ud, kind, p, n);
}

static void f_text(void *ud, const char *p, size_t n) {
    feed_ctx *f = ud;
    give(f->b, SRV_BLOCK_TEXT, p, n, f->ops, f->ud);
}

static void f_open(void *ud, int index, const char *name) {
    feed_ctx *f = ud;
    (void)index;
    close_open(f->b, f->ops, f->ud);
    f->ops->open(f->ud, SRV_BLOCK_TOOL, &(srv_tool_call){.name = (char *)name});
    f->b->open = SRV_BLOCK_TOOL;
    f->b->any = true;
}

static void f_args(void *ud, int index, const char *p, size_t n) {
    feed_ctx *f = ud;
    (void)index;
    f->ops->delta(f->ud, SRV_BLOCK_TOOL, p, n);
}

static void f_close(void *ud, int index) {
    feed_ctx *f = ud;
    (void)index;
    close_open(f->b, f->ops, f->ud);
}

static const srv_calls_ops feed_ops = {f_text, f_open, f_args, f_close};

static void split(srv_blocks *b, const bs_reasoning_out *ro, bool final, const srv_block_ops *ops, void *ud) {
    give(b, SRV_BLOCK_THINKING, ro->reasoning, ro->reasoning_len, ops, ud);
    if (!b->tools) {
        give(b, SRV_BLOCK_TEXT, ro->content, ro->content_len, ops, ud);
        return;
    }
    feed_ctx f = {b, ops, ud};
    srv_calls_feed(&b->calls, ro->content, ro->content_len, final, &feed_ops, &f);
}

void srv_blocks_feed(srv_blocks *b, const char *text, size_t len, bool final, const srv_block_ops *ops, void *ud) {
    bs_reasoning_out ro = {0};
    if (len) {
        bs_reasoning_feed(b->rs, text, len, &ro);
        split(b, &ro, false, ops, ud);
    }
    if (final) {
        memset(&ro, 0, sizeof ro);
        bs_reasoning_finish(b->rs, &ro);
        split(b, &ro, true, ops, ud);
    }
    b->n_calls = b->calls.one_call ? BS_MIN(b->calls.n_calls, 1) : b->calls.n_calls;
    if (!final) return;
    if (!b->any) {   /* nothing at all: one empty text block, so the answer has content */
        ops->open(ud, SRV_BLOCK_TEXT, NULL);
        b->open = SRV_BLOCK_TEXT;
        b->any = true;
    }
    close_open(b, ops, ud);
}

/* ---- small shared helpers ---- */

/* The generated tokens' pieces in a row are the text before the stop string was cut off; the
 * stop string is what follows t->len there. */
const char *srv_stop_matched(const srv *s, const srv_task *t) {
    if (t->gen_stop != BS_GEN_STOP_STRING || !t->n_stop) return NULL;
    srv_buf all = {0};
    for (int i = 0; i < t->n_toks; i++) {
        const char *p = "";
        size_t n = 0;
        bs_token_to_piece(s->tok, t->toks[i].id, false, &p, &n);
        srv_buf_add(&all, p, n);
    }
    const char *hit = NULL;
    for (int k = 0; k < t->n_stop && !hit; k++) {
        size_t n = strlen(t->stop[k]);
        if (t->len + n <= all.len && !memcmp(all.p + t->len, t->stop[k], n)) hit = t->stop[k];
    }
    srv_buf_free(&all);
    return hit ? hit : t->stop[0];   /* the pieces did not show it (a rewind): the first one */
}

void srv_sse_event(srv_buf *out, const char *name, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    srv_buf_adds(out, "event: ");
    srv_buf_adds(out, name);
    srv_buf_adds(out, "\ndata: ");
    srv_buf_adds(out, s ? s : "{}");
    srv_buf_adds(out, "\n\n");
    free(s);
    json_decref(j);
}
