/* server_blocks.c: a chat task's output as blocks (server_dialect.h) for the answer shapes of
 * other APIs: thinking (the think block), text, tool calls. The same feed renders a stream and,
 * fed the whole text at once, a finished answer, so both say the same. */
#include "server/server_dialect.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char TOOL_OPEN[] = "<tool_call>";

void srv_blocks_init(srv_blocks *b, bool in_think, bool tools) {
    memset(b, 0, sizeof *b);
    b->rs = bs_reasoning_new(in_think);
    b->tools = tools;
    b->open = -1;
}

void srv_blocks_free(srv_blocks *b) {
    bs_reasoning_free(b->rs);
    srv_buf_free(&b->content);
}

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

/* Content that may be given now: all of it without tools; with tools, up to a <tool_call> (or
 * an end that could become one). */
static size_t content_ready(const srv_blocks *b, bool final) {
    const srv_buf *c = &b->content;
    if (!b->tools) return c->len;
    const char *open = c->p ? strstr(c->p, TOOL_OPEN) : NULL;
    if (open) return (size_t)(open - c->p);
    if (final) return c->len;
    for (size_t k = BS_MIN(sizeof TOOL_OPEN - 2, c->len); k > 0; k--)
        if (!memcmp(c->p + c->len - k, TOOL_OPEN, k)) return c->len - k;
    return c->len;
}

static void split(srv_blocks *b, const bs_reasoning_out *ro, const srv_block_ops *ops, void *ud) {
    give(b, SRV_BLOCK_THINKING, ro->reasoning, ro->reasoning_len, ops, ud);
    if (ro->content_len) srv_buf_add(&b->content, ro->content, ro->content_len);
}

/* The end with tools: the held-back text parsed into calls; text around them stays text. */
static void final_calls(srv_blocks *b, const srv_block_ops *ops, void *ud) {
    srv_tool_call *tc = NULL;
    char *rest = NULL;
    const char *c = b->content.p ? b->content.p + b->content_sent : "";
    int n = srv_parse_tool_calls(c, &tc, &rest);
    give(b, SRV_BLOCK_TEXT, rest, strlen(rest), ops, ud);
    for (int i = 0; i < n; i++) {
        close_open(b, ops, ud);
        ops->open(ud, SRV_BLOCK_TOOL, &tc[i]);
        b->any = true;
        ops->delta(ud, SRV_BLOCK_TOOL, tc[i].arguments, strlen(tc[i].arguments));
        ops->close(ud, SRV_BLOCK_TOOL);
    }
    b->n_calls = n;
    b->content_sent = b->content.len;
    srv_free_tool_calls(tc, n);
    free(rest);
}

void srv_blocks_feed(srv_blocks *b, const char *text, size_t len, bool final, const srv_block_ops *ops, void *ud) {
    bs_reasoning_out ro = {0};
    if (len) {
        bs_reasoning_feed(b->rs, text, len, &ro);
        split(b, &ro, ops, ud);
    }
    if (final) {
        memset(&ro, 0, sizeof ro);
        bs_reasoning_finish(b->rs, &ro);
        split(b, &ro, ops, ud);
    }
    size_t ready = content_ready(b, final);
    if (ready > b->content_sent && !(final && b->tools)) {
        give(b, SRV_BLOCK_TEXT, b->content.p + b->content_sent, ready - b->content_sent, ops, ud);
        b->content_sent = ready;
    }
    if (!final) return;
    if (b->tools) final_calls(b, ops, ud);
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
