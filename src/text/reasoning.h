/* reasoning.h: split a thinking model's output into reasoning (inside <think>...</think>) and
 * content (after it), incrementally, for streaming.
 *
 * Qwen3.5's generation prompt already opens the think block (`<|im_start|>assistant\n<think>\n`),
 * so the model's text starts inside it: create the splitter with in_think = true. With
 * in_think = false an opening <think> (after optional whitespace) at the very start is
 * recognised; any other start is content. Whitespace around the reasoning and at the start of
 * the content is dropped (the template's own parse trims both). Text that might be the start
 * of a tag is held back until it is decided, so a stream never shows a raw "</thi". Text after
 * </think> is content verbatim (tool-call blocks included; parsing those is the caller's). */
#ifndef BS_REASONING_H
#define BS_REASONING_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bs_reasoning bs_reasoning;

/* What one call decided; the pointers stay valid until the next call on the splitter. */
typedef struct bs_reasoning_out {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
} bs_reasoning_out;

bs_reasoning *bs_reasoning_new(bool in_think);
void bs_reasoning_feed(bs_reasoning *r, const char *text, size_t len, bs_reasoning_out *out);
/* End of generation: releases everything held back (an unclosed think block is reasoning). */
void bs_reasoning_finish(bs_reasoning *r, bs_reasoning_out *out);
/* True once </think> has been seen (or the output turned out not to start with <think>). */
bool bs_reasoning_in_content(const bs_reasoning *r);
void bs_reasoning_free(bs_reasoning *r);
/* Bytes the splitter has examined inside the think block so far (for tests: linear in the
 * bytes fed, however they are chunked). */
size_t bs_reasoning_work(const bs_reasoning *r);

/* Whole text at once: *reasoning and *content are malloc'd and NUL-terminated; their lengths
 * (which count any NUL the model wrote) into *reasoning_len and *content_len unless NULL. */
void bs_reasoning_split(const char *text, size_t len, bool in_think, char **reasoning, size_t *reasoning_len,
                        char **content, size_t *content_len);
/* Where the think block the whole text starts in ends: the offset just past its </think>, len
 * while it is still open, 0 when the text does not start with one (the split's rules). */
size_t bs_reasoning_end(const char *text, size_t len, bool in_think);

#endif
