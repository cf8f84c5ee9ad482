/* test_reasoning.c: splitting generated text into reasoning and content, whole and streamed in
 * every chunking (single bytes included): a stream must give exactly the whole-text result and
 * never show part of a tag. */
#include "text/reasoning.h"
#include "test.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const char *text; bool in_think; const char *reasoning, *content; } rcase;

static const rcase cases[] = {
    {"I think.\n</think>\n\nHello!", true, "I think.", "Hello!"},
    {"\nplan: a < b </thinking> no\n</think>\n\nanswer <think> stays", true, "plan: a < b </thinking> no", "answer <think> stays"},
    {"step one</think>answer", true, "step one", "answer"},   /* no newline before </think> */
    {"</think>\n\nonly content", true, "", "only content"},
    {"never closed, cut off  \n", true, "never closed, cut off", ""},
    {"ends with a partial </thi", true, "ends with a partial </thi", ""},
    {"", true, "", ""},
    {"<think>\nx\n</think>\n\ny", false, "x", "y"},
    {"  \n<think>r</think>c", false, "r", "c"},
    {"Hello <think>", false, "", "Hello <think>"},
    {"<thin", false, "", "<thin"},
    {"  plain answer", false, "", "  plain answer"},
    {"r\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>", true, "r",
     "<tool_call>\n<function=f>\n</function>\n</tool_call>"},
    {"a </think> b </think> c", true, "a", "b </think> c"},
    {"multi\n\nline  reasoning\n\n</think>\n\n\ncontent\n\n", true, "multi\n\nline  reasoning", "content\n\n"},
};

/* Feed text in chunks of the given sizes (cycled); returns malloc'd concatenations. */
static void stream(const rcase *c, const size_t *sizes, size_t ns, char **rs, char **cs, bool *partial_seen) {
    bs_reasoning *r = bs_reasoning_new(c->in_think);
    size_t len = strlen(c->text), pos = 0, k = 0, rn = 0, cn = 0;
    *rs = bs_xcalloc(len + 1, 1);
    *cs = bs_xcalloc(len + 1, 1);
    bs_reasoning_out o;
    while (pos <= len) {
        size_t want = sizes[k++ % ns], step = BS_MIN(want, len - pos);
        if (pos == len) bs_reasoning_finish(r, &o);
        else bs_reasoning_feed(r, c->text + pos, step, &o);
        memcpy(*rs + rn, o.reasoning, o.reasoning_len);
        memcpy(*cs + cn, o.content, o.content_len);
        rn += o.reasoning_len;
        cn += o.content_len;
        /* before the end, reasoning never shows a piece of the closing tag at its edge */
        if (pos < len && o.reasoning_len && strchr("</", o.reasoning[o.reasoning_len - 1]) &&
            strstr(c->text, "</think>"))
            *partial_seen = true;
        if (pos == len) break;
        pos += step;
    }
    bs_reasoning_free(r);
}

int main(void) {
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const rcase *c = &cases[i];
        char *rs, *cs;
        bs_reasoning_split(c->text, strlen(c->text), c->in_think, &rs, NULL, &cs, NULL);
        CHECKF(!strcmp(rs, c->reasoning) && !strcmp(cs, c->content), "case %zu: reasoning '%s' content '%s'", i, rs, cs);
        free(rs);
        free(cs);
        bs_rng rng;
        bs_rng_seed(&rng, i);
        for (int trial = 0; trial < 200; trial++) {
            size_t sizes[8];
            for (int j = 0; j < 8; j++) sizes[j] = trial == 0 ? 1 : 1 + bs_rng_next(&rng) % 9;
            bool partial = false;
            stream(c, sizes, 8, &rs, &cs, &partial);
            CHECKF(!strcmp(rs, c->reasoning) && !strcmp(cs, c->content),
                   "case %zu trial %d streamed: reasoning '%s' content '%s'", i, trial, rs, cs);
            CHECKF(!partial || i == 1, "case %zu: a partial closing tag reached the stream", i);
            free(rs);
            free(cs);
        }
    }
    bs_reasoning *r = bs_reasoning_new(true);
    bs_reasoning_out o;
    CHECK(!bs_reasoning_in_content(r));
    bs_reasoning_feed(r, "x</think>", 9, &o);
    CHECK(bs_reasoning_in_content(r) && o.reasoning_len == 1 && o.content_len == 0);
    bs_reasoning_free(r);
    /* where the think block ends, by the split's rules (leading whitespace, then <think>) */
    static const struct { const char *text; bool in_think; size_t want; } ends[] = {
        {"\n <think>ab</think>cd", false, 19}, {"ab</think>cd", true, 10}, {"<think>still open", false, 17},
        {"plain </think> text", false, 0},      {"x<think>a</think>", false, 0}, {"open", true, 4}, {"", true, 0},
    };
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        const size_t got = bs_reasoning_end(ends[i].text, strlen(ends[i].text), ends[i].in_think);
        CHECKF(got == ends[i].want, "end of '%s': %zu, want %zu", ends[i].text, got, ends[i].want);
    }
    return test_summary("test_reasoning");
}
