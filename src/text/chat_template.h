/* chat_template.h: native renderer for the chat formats of the models bitspark runs, chosen by
 * fingerprinting the GGUF's `tokenizer.chat_template` (there is no Jinja engine in C).
 *
 *  - QWEN35: the Qwen3.5/3.6 template family. ChatML turns, thinking (`<think>` blocks;
 *    reasoning of assistant turns kept only after the last real user query, or always with
 *    preserve_thinking on Qwen3.6), tool definitions in the system turn, `<tool_call>` XML
 *    blocks, tool results as `<tool_response>` in a user turn; the generation prompt opens
 *    `<think>\n` (or `<think>\n\n</think>\n\n` when thinking is off). Output is byte-identical
 *    to the Jinja template rendered the way transformers does (trim_blocks, lstrip_blocks,
 *    tojson = json.dumps(ensure_ascii=False)). The shipped copies differ in small ways (whether
 *    an empty reasoning still gets a think block, how scalar tool arguments are printed,
 *    preserve_thinking); detection records each difference as a flag.
 *  - CHATML: plain `<|im_start|>role\ncontent<|im_end|>\n`, the fallback for any other
 *    template (or none). */
#ifndef BS_CHAT_TEMPLATE_H
#define BS_CHAT_TEMPLATE_H

#include "bitspark.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { BS_CHAT_CHATML, BS_CHAT_QWEN35 } bs_chat_kind;

typedef struct bs_chat_template {
    bs_chat_kind kind;
    bool think_default;      /* thinking on unless the request turns it off */
    bool has_preserve;       /* the template honours preserve_thinking (Qwen3.6) */
    bool think_needs_reasoning; /* a kept assistant turn gets a <think> block only when its
                                   reasoning is non-empty (Qwen3.5-4B); otherwise always */
    bool args_json_scalars;  /* non-string tool arguments always tojson (Qwen3.6); Qwen3.5
                                writes scalars with Python str(): True, None, 1.5 */
} bs_chat_template;

/* Recognise the template text (NULL or "" gives the CHATML fallback). */
void bs_chat_template_detect(const char *tmpl, bs_chat_template *out);
const char *bs_chat_kind_name(bs_chat_kind k);


typedef struct bs_chat_opts {
    const char *tools;       /* JSON array of tool definitions as text; NULL or "[]": none */
    bool add_generation_prompt;
    int enable_thinking;     /* -1: template default, 0: off, 1: on */
    bool preserve_thinking;  /* keep reasoning of every assistant turn (if the template has it) */
} bs_chat_opts;

/* Render the conversation. Returns a malloc'd string, or NULL with bs_error carrying the
 * template's own message ("No user query found in messages.", "System message must be at the
 * beginning.", "Unexpected message role.", ...) or a JSON error. */
char *bs_chat_render(const bs_chat_template *t, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *o);

/* A byte range [begin, end) of a rendered prompt. */
typedef struct bs_chat_span { size_t begin, end; } bs_chat_span;
/* bs_chat_render, plus *spans (malloc'd, *n_spans of them, in order, disjoint): the ranges of the
 * output that came from the request - message content, reasoning, tool call names, argument
 * names and values, tool definitions. The rest is the template's own structure. A typed
 * "<|im_start|>" inside a span is text to tokenize as plain bytes, never as a control token. */
char *bs_chat_render_spans(const bs_chat_template *t, const bs_chat_msg *msgs, size_t n, const bs_chat_opts *o,
                           bs_chat_span **spans, size_t *n_spans);

#endif
