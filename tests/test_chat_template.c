/* test_chat_template.c: the native Qwen3.5/3.6 chat renderer against golden renderings made
 * with Jinja2 from the real templates (tests/data/chat_golden.json, see its generator), template
 * detection on real template lines, and the plain ChatML fallback. */
#include "text/chat_template.h"
#include "formats/gguf.h"
#include "test.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *opt_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Render one golden case with template t; compare with the expected text or error. */
static void check_case(const bs_chat_template *t, const char *variant, json_t *c) {
    json_t *jm = json_object_get(c, "messages");
    size_t n = json_array_size(jm);
    bs_chat_msg *msgs = bs_xcalloc(n + 1, sizeof *msgs);
    bs_chat_tool_call *calls[64] = {0};
    for (size_t i = 0; i < n && i < 64; i++) {
        json_t *m = json_array_get(jm, i);
        msgs[i].role = opt_str(m, "role");
        msgs[i].content = opt_str(m, "content");
        msgs[i].reasoning = opt_str(m, "reasoning");
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc) {
            calls[i] = bs_xcalloc(json_array_size(tc) + 1, sizeof(bs_chat_tool_call));
            for (size_t j = 0; j < json_array_size(tc); j++) {
                calls[i][j].name = opt_str(json_array_get(tc, j), "name");
                calls[i][j].arguments = opt_str(json_array_get(tc, j), "arguments");
            }
            msgs[i].tool_calls = calls[i];
            msgs[i].n_tool_calls = json_array_size(tc);
        }
    }
    bs_chat_opts o = {
        .tools = opt_str(c, "tools"),
        .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
        .enable_thinking = (int)json_integer_value(json_object_get(c, "enable_thinking")),
        .preserve_thinking = json_is_true(json_object_get(c, "preserve_thinking")),
    };
    json_t *exp = json_object_get(json_object_get(c, "expected"), variant);
    const char *want = opt_str(exp, "text"), *want_err = opt_str(exp, "error");
    const char *name = opt_str(c, "name");
    char *got = bs_chat_render(t, msgs, n, &o);
    if (want) {
        CHECKF(got && !strcmp(got, want), "%s / %s: rendering differs%s%s\n--- want\n%s\n--- got\n%s", variant,
               name, got ? "" : ": ", got ? "" : bs_last_error(), want, got ? got : "(null)");
    } else {
        CHECKF(!got && want_err && !strcmp(bs_last_error(), want_err), "%s / %s: want error '%s', got '%s'",
               variant, name, want_err ? want_err : "?", got ? got : bs_last_error());
    }
    free(got);
    for (size_t i = 0; i < n && i < 64; i++) free(calls[i]);
    free(msgs);
}

static void test_golden(void) {
    const char *src = getenv("BS_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/chat_golden.json", src ? src : ".");
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CHECKF(root != NULL, "%s: %s", path, err.text);
    if (!root) return;
    const char *variant;
    json_t *fp;
    int n_variants = 0;
    json_object_foreach(json_object_get(root, "variants"), variant, fp) {
        bs_chat_template t;
        bs_chat_template_detect(json_string_value(fp), &t);
        CHECKF(t.kind == BS_CHAT_QWEN35 && t.think_default, "%s not detected as qwen3.5", variant);
        bool v36 = strstr(variant, "3.6") != NULL, v4b = strstr(variant, "4b") != NULL;
        CHECK(t.has_preserve == v36 && t.args_json_scalars == v36 && t.think_needs_reasoning == v4b);
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(root, "cases"), i, c) check_case(&t, variant, c);
        n_variants++;
    }
    CHECK_EQ_INT(n_variants, 3);
    json_decref(root);
}

static void test_chatml(void) {
    const char *dir = getenv("BS_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny-f32.gguf", dir ? dir : "tests/fixtures");
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    CHECKF(f != NULL, "%s", bs_last_error());
    bs_chat_template t;
    bs_chat_template_detect(f ? gguf_get_str(f, "tokenizer.chat_template") : NULL, &t);
    CHECK(t.kind == BS_CHAT_CHATML);
    gguf_close(f);
    bs_chat_msg msgs[] = {{.role = "system", .content = " sys "}, {.role = "user", .content = "hi"},
                          {.role = "assistant", .content = NULL}};
    bs_chat_opts o = {.add_generation_prompt = true, .enable_thinking = -1};
    char *s = bs_chat_render(&t, msgs, 3, &o);
    CHECK_STR(s, "<|im_start|>system\n sys <|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                 "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    bs_chat_template_detect(NULL, &t);
    CHECK(t.kind == BS_CHAT_CHATML);
    /* malformed requests: clear errors, no crash */
    bs_chat_template q;
    bs_chat_template_detect("<function= <think> <tool_response>", &q);
    CHECK(q.kind == BS_CHAT_QWEN35);
    o.tools = "{\"not\": \"a list\"}";
    CHECK(bs_chat_render(&q, msgs + 1, 1, &o) == NULL && strstr(bs_last_error(), "tools"));
    o.tools = "[";
    CHECK(bs_chat_render(&q, msgs + 1, 1, &o) == NULL);
    o.tools = NULL;
    bs_chat_tool_call bad = {.name = "f", .arguments = "[1, 2]"};
    bs_chat_msg m2[] = {{.role = "user", .content = "x"}, {.role = "assistant", .tool_calls = &bad, .n_tool_calls = 1}};
    CHECK(bs_chat_render(&q, m2, 2, &o) == NULL && strstr(bs_last_error(), "not a JSON object"));
    bad.name = NULL;
    CHECK(bs_chat_render(&q, m2, 2, &o) == NULL && strstr(bs_last_error(), "no function name"));
    bs_chat_msg noroles[] = {{.role = NULL, .content = "x"}};
    CHECK(bs_chat_render(&q, noroles, 1, &o) == NULL && strstr(bs_last_error(), "no role"));
    /* an inverted default (thinking only when asked) */
    bs_chat_template_detect("<function= <think> <tool_response> {%- if enable_thinking is defined and enable_thinking is true %}", &q);
    CHECK(!q.think_default);
}

int main(void) {
    test_golden();
    test_chatml();
    return test_summary("test_chat_template");
}
