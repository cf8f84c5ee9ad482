/* server_dialect.h: other client APIs over the chat path. Anthropic's Messages API
 * (server_anthropic.c) and OpenAI's Responses API (server_responses.c) translate their request
 * into an OpenAI chat request, which server_api.c runs as /v1/chat/completions, so generation,
 * scheduling, limits, tools, grammar and images stay one code path; only the answer's shape
 * differs. A shape (srv_shape, in srv_gen) renders a finished task and a stream in that API's
 * format.
 *
 * Both render the output as blocks (server_blocks.c): the think block (reasoning), the text,
 * then each tool call, in that order, the same way whether streamed or not. */
#ifndef BS_SERVER_DIALECT_H
#define BS_SERVER_DIALECT_H

#include "server/server.h"
#include "text/reasoning.h"

struct json_t;

typedef struct srv_shape {
    /* a finished task that did not fail -> *r */
    void (*done)(srv *s, srv_task *t, const srv_gen *g, srv_reply *r);
    /* an OpenAI-shaped error in *r (status >= 400) -> this API's error shape */
    void (*error)(srv_reply *r);
    /* a stream: its state, the opening events, then (t->mu held) each piece of new text
     * (done: the last; a failed task ends with an error event) */
    void *(*stream_new)(srv *s, srv_task *t, const srv_gen *g);
    void (*stream_begin)(void *st, srv_buf *out);
    void (*stream_step)(void *st, const char *text, size_t len, bool done, srv_buf *out);
    void (*stream_free)(void *st);
    /* set: answer the prompt's size in tokens instead of generating (count_tokens) */
    void (*count)(srv *s, srv_task *t, srv_reply *r);
    /* set: an event per prompt chunk evaluated (Anthropic: a ping, so a long prompt keeps the
     * connection alive); NULL: none */
    void (*progress)(void *st, srv_buf *out);
} srv_shape;

/* server_anthropic.c: a /v1/messages body (count: /v1/messages/count_tokens, no max_tokens)
 * -> an OpenAI chat request (new), or NULL with a 400 in r. Its answers: srv_anthropic_shape
 * (srv_anthropic_count_shape: the prompt's size instead). */
struct json_t *srv_anthropic_request(struct json_t *b, bool count, srv_reply *r);
extern const srv_shape srv_anthropic_shape, srv_anthropic_count_shape;
/* Whether a path is Anthropic's (/v1/messages and below), whose errors take Anthropic's shape;
 * srv_anthropic_error turns an OpenAI-shaped error reply into it (an Anthropic one stays). */
bool srv_anthropic_path(const char *url);
void srv_anthropic_error(srv_reply *r);
/* server_responses.c: a /v1/responses body -> a chat request, or NULL with a 400 in r. */
struct json_t *srv_responses_request(struct json_t *b, srv_reply *r);
extern const srv_shape srv_responses_shape;

/* ---- blocks (server_blocks.c) ---- */
enum srv_block_kind { SRV_BLOCK_THINKING, SRV_BLOCK_TEXT, SRV_BLOCK_TOOL };

typedef struct srv_block_ops {
    /* a block opens (call: the tool call of a SRV_BLOCK_TOOL, else NULL) */
    void (*open)(void *ud, int kind, const srv_tool_call *call);
    void (*delta)(void *ud, int kind, const char *p, size_t n);
    void (*close)(void *ud, int kind);
} srv_block_ops;

/* Generated text -> blocks, fed as it comes. With tools, each call is a block as the model
 * writes it (server_calls.c); text around the calls is text. */
typedef struct srv_blocks {
    bs_reasoning *rs;
    bool tools;
    int open;                  /* the open block's kind, -1: none */
    int n_calls;               /* tool calls given (after the last feed; one_call: at most 1) */
    bool any;                  /* some block was opened */
    srv_calls calls;           /* the call reader (with tools) */
} srv_blocks;

/* str_params: the tools' string parameters (srv_gen.str_params), or NULL; one_call: give the
 * first call only (srv_gen.one_call) */
void srv_blocks_init(srv_blocks *b, bool in_think, bool tools, const char *str_params, bool one_call);
/* final: the end (held back text is decided, an open call closes, the open block closes;
 * when nothing at all came, an empty text block is given). */
void srv_blocks_feed(srv_blocks *b, const char *text, size_t len, bool final, const srv_block_ops *ops, void *ud);
void srv_blocks_free(srv_blocks *b);

/* An SSE event "event: NAME\ndata: JSON\n\n" (steals j). */
void srv_sse_event(srv_buf *out, const char *name, struct json_t *j);
#endif
