/* test_server_loop_guard: the doom-loop guard in `bitspark serve`. Builds the looping model of
 * loop_model.h, works out what a guarded generation from its first cycle word must give (stop:
 * four copies of the cycle; rewind: one copy, then the escape chain to end-of-generation; checked
 * here with the detector), then runs tests/server_loop_guard.sh, which starts servers on that
 * model and checks their answers over raw HTTP and through the openai npm client. */
#include "test.h"
#include "loop_model.h"
#include "sample/loop_guard.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *text_of(const bs_tokenizer *tk, const int32_t *ids, int n) {
    char *txt;
    size_t len;
    if (bs_detokenize(tk, ids, (size_t)n, false, &txt, &len)) return NULL;
    return txt;
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP"), *src = getenv("BS_SRC");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    if (!src) src = ".";
    char base[1024], model[1024], expect[1024], drafter[1024];
    snprintf(base, sizeof base, "%s/tiny-f32.gguf", fx);
    snprintf(drafter, sizeof drafter, "%s/tiny-dspark-f32.gguf", fx);
    snprintf(model, sizeof model, "%s/srv_loop_model.gguf", tmp);
    snprintf(expect, sizeof expect, "%s/srv_loop_expect.json", tmp);
    loop_model lm;
    CHECK_EQ_INT(loop_model_write(base, model, &lm), 0);
    gguf_file *f = gguf_open(model, 0);
    bs_tokenizer *tk = f ? bs_tokenizer_from_gguf(f) : NULL;
    CHECK(tk != NULL);
    if (!tk) return test_summary("test_server_loop_guard");

    /* greedy from cycle[0]: cycle[1], ..., cycle[K-1], cycle[0], cycle[1], ... */
    int32_t ids[64];
    for (int i = 0; i < 40; i++) ids[i] = lm.cycle[(i + 1) % LOOP_K];
    char *stop_text = text_of(tk, ids, 4 * LOOP_K);             /* ends as the 4th copy completes */
    char *stop6_text = text_of(tk, ids, 6 * LOOP_K);            /* min_repeats 6 */
    char *off_text = text_of(tk, ids, 30);                      /* unguarded, 30 tokens */
    char *copy = text_of(tk, ids, LOOP_K);
    for (int i = 0; i < LOOP_M; i++) ids[LOOP_K + i] = lm.escape[i];
    char *rewind_text = text_of(tk, ids, LOOP_K + LOOP_M);      /* one copy, then the escape */
    CHECK(stop_text && stop6_text && off_text && rewind_text && copy);
    bs_loop_params dp = bs_loop_default_params();
    bs_loop_info info;
    CHECK_EQ_INT(bs_loop_find(stop_text, strlen(stop_text), &dp, &info), 1);
    CHECK_EQ_INT(bs_loop_find(rewind_text, strlen(rewind_text), &dp, &info), 0);
    CHECK(strlen(copy) * 4 >= (size_t)dp.min_chars);             /* 4 copies qualify */

    json_t *j = json_pack("{s:[i],s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:s}", "prompt", lm.cycle[0], "stop_text", stop_text,
                          "stop6_text", stop6_text, "off_text", off_text, "rewind_text", rewind_text, "period",
                          (int)strlen(copy), "cycle_len", LOOP_K, "escape_len", LOOP_M, "rejected_id", lm.cycle[1],
                          "drafter", drafter);
    CHECK_EQ_INT(json_dump_file(j, expect, JSON_COMPACT), 0);
    json_decref(j);
    free(stop_text);
    free(stop6_text);
    free(off_text);
    free(rewind_text);
    free(copy);
    bs_tokenizer_free(tk);
    gguf_close(f);

    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/server_loop_guard.sh' '%s' '%s'", src, model, expect);
    int rc = system(cmd);
    CHECKF(rc == 0, "server_loop_guard.sh failed (status %d)", rc);
    return test_summary("test_server_loop_guard");
}
