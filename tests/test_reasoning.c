/* test_reasoning.c: splitting generated text into reasoning and content, whole and streamed in
 * every chunking (single bytes included): a stream must give exactly the whole-text result and
 * never show part of a tag. Random texts of tags, pieces of tags and whitespace, streamed in
 * random chunks, against a plain reference splitter; the bytes the splitter examines stay
 * linear in the bytes fed (whitespace held inside the think block is not scanned again). */
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

static bool ws(char c) { return c && strchr(" \n\r\t\f\v", c); }

/* The split's rules written plainly for a whole text: (whitespace and <think> unless
 * in_think) reasoning up to the first </think>, trimmed; the rest, without leading whitespace,
 * is content. Without the opening tag it is all content. Appends to rs / cs. */
static void reference(const char *t, bool in_think, char *rs, char *cs) {
    const char *p = t;
    rs[0] = 0;
    if (!in_think) {
        while (ws(*p)) p++;
        if (strncmp(p, "<think>", 7)) {
            strcpy(cs, t);
            return;
        }
        p += 7;
    }
    const char *close = strstr(p, "</think>"), *end = close ? close : p + strlen(p);
    while (p < end && ws(*p)) p++;
    while (end > p && ws(end[-1])) end--;
    memcpy(rs, p, (size_t)(end - p));
    rs[end - p] = 0;
    for (p = close ? close + 8 : "", cs[0] = 0; ws(*p); p++) {}
    strcpy(cs, p);
}

/* Random texts streamed in random chunks equal the reference; the work stays within two
 * looks at each byte and two tags' lengths a call. */
static void test_random(void) {
    static const char *const piece[] = {"<think>", "</think>", "</th", "<", "/", " ", "\n", "\n\n", "a", "xy", "\t "};
    bs_rng rng;
    bs_rng_seed(&rng, 77);
    char text[4096], want_r[4096], want_c[4096], got_r[4096], got_c[4096];
    for (int trial = 0; trial < 3000; trial++) {
        text[0] = 0;
        const int n = 1 + (int)(bs_rng_next(&rng) % 60);
        for (int k = 0; k < n; k++) strcat(text, piece[bs_rng_next(&rng) % BS_ARRAY_LEN(piece)]);
        const bool in_think = bs_rng_next(&rng) % 2;
        reference(text, in_think, want_r, want_c);
        bs_reasoning *r = bs_reasoning_new(in_think);
        bs_reasoning_out o;
        size_t len = strlen(text), pos = 0, rn = 0, cn = 0, calls = 0;
        for (; pos < len; calls++) {
            const size_t want = 1 + bs_rng_next(&rng) % 12, step = BS_MIN(len - pos, want);
            bs_reasoning_feed(r, text + pos, step, &o);
            pos += step;
            memcpy(got_r + rn, o.reasoning, o.reasoning_len), rn += o.reasoning_len;
            memcpy(got_c + cn, o.content, o.content_len), cn += o.content_len;
        }
        bs_reasoning_finish(r, &o);
        memcpy(got_r + rn, o.reasoning, o.reasoning_len), rn += o.reasoning_len;
        memcpy(got_c + cn, o.content, o.content_len), cn += o.content_len;
        got_r[rn] = got_c[cn] = 0;
        CHECKF(!strcmp(got_r, want_r) && !strcmp(got_c, want_c), "'%s' (in_think %d): reasoning '%s' content '%s'",
               text, in_think, got_r, got_c);
        CHECKF(bs_reasoning_work(r) <= 2 * len + 16 * (calls + 1), "'%s': %zu bytes examined for %zu", text,
               bs_reasoning_work(r), len);
        bs_reasoning_free(r);
    }
    /* the reviewer's case: whitespace held inside the think block, 4 bytes a call */
    bs_reasoning *r = bs_reasoning_new(true);
    bs_reasoning_out o;
    bs_reasoning_feed(r, "x", 1, &o);
    size_t emitted = 0;
    for (int i = 0; i < 64000; i++) bs_reasoning_feed(r, "\n\n\n\n", 4, &o), emitted += o.reasoning_len;
    bs_reasoning_feed(r, "y", 1, &o);
    CHECK(emitted == 0 && o.reasoning_len == 256001 && o.reasoning[256000] == 'y');
    CHECKF(bs_reasoning_work(r) <= 2 * 256002 + 16 * 64002, "%zu bytes examined", bs_reasoning_work(r));
    bs_reasoning_free(r);
}

int main(void) {
    test_random();
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
