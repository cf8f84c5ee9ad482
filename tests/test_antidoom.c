/* test_antidoom: `bitspark antidoom mine` on a model that loops (valid pairs in antidoom's
 * format, the expected rejected/chosen tokens, primed contexts), `eval --pairs` against
 * chosen-win computed by hand from the API's logits, and `eval --loop-rate`;
 * `run --loop-guard stop/rewind/off` end to end. */
#include "test.h"
#include "loop_model.h"
#include "gen_helper.h"
#include "model/qwen35.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *bin, *tmp;

/* Run a command, return its stdout (malloc'd) or NULL on a nonzero exit. */
static char *run(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - 1 - n, p)) > 0)
        if ((n += got) + 1 == cap) buf = realloc(buf, cap *= 2);
    buf[n] = 0;
    int st = pclose(p);
    if (st != 0) {
        fprintf(stderr, "command failed (%d): %s\n", st, cmd);
        free(buf);
        return NULL;
    }
    return buf;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static char *piece(const bs_tokenizer *t, int32_t id) {
    const char *p;
    size_t len;
    bs_token_to_piece(t, id, false, &p, &len);
    char *s = malloc(len + 1);
    memcpy(s, p, len);
    s[len] = 0;
    return s;
}

static json_t *read_jsonl(const char *path, int *n) {
    json_t *rows = json_array();
    FILE *f = fopen(path, "r");
    char line[1 << 16];
    while (f && fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        CHECKF(j != NULL, "%s: %s", path, err.text);
        if (j) json_array_append_new(rows, j);
    }
    if (f) fclose(f);
    *n = (int)json_array_size(rows);
    return rows;
}

static void test_mine(const char *model, const loop_model *lm, const bs_tokenizer *t) {
    char prompts[1024], pairs[1024], primes[1024], cmd[8192];
    snprintf(prompts, sizeof prompts, "%s/ad_prompts.jsonl", tmp);
    snprintf(pairs, sizeof pairs, "%s/ad_pairs.jsonl", tmp);
    snprintf(primes, sizeof primes, "%s/ad_primes.jsonl", tmp);
    /* one prompt that loops (c0), one that ends (the escape chain's start) */
    char *c0 = piece(t, lm->cycle[0]), *e0 = piece(t, lm->escape[0]);
    json_t *p1 = json_pack("{s:s}", "prompt", c0), *p2 = json_string(e0);
    char *l1 = json_dumps(p1, JSON_COMPACT), *l2 = json_dumps(p2, JSON_COMPACT | JSON_ENCODE_ANY);
    char text[1024];
    snprintf(text, sizeof text, "%s\n\n%s\n", l1, l2);
    write_file(prompts, text);
    free(l1), free(l2), json_decref(p1), json_decref(p2);

    snprintf(cmd, sizeof cmd, "'%s' antidoom mine -m '%s' --prompts '%s' -o '%s' -n 100 -t 1", bin, model, prompts, pairs);
    char *out = run(cmd);
    CHECK(out != NULL);
    free(out);
    int n;
    json_t *rows = read_jsonl(pairs, &n);
    CHECK_EQ_INT(n, 1);   /* only the looping prompt gives a pair */
    json_t *p = json_array_get(rows, 0);
    if (p) {
        /* the prompt (c0) is scanned too, so the loop's first copy is c0 .. c4 and the second
         * copy starts with the generated c0: the context is the first copy */
        char ctxbuf[1024];
        const char *ctx = ctxbuf;
        ctxbuf[0] = 0;
        for (int i = 0; i < LOOP_K; i++) {
            char *w = piece(t, lm->cycle[i]);
            strcat(ctxbuf, w);
            free(w);
        }
        CHECK_STR(json_string_value(json_object_get(p, "context_before")), ctx);
        CHECK_STR(json_string_value(json_object_get(p, "rejected_token")), bs_token_text(t, lm->cycle[0]));
        char *r = piece(t, lm->cycle[0]);
        CHECK_STR(json_string_value(json_object_get(p, "rejected_decoded")), r);
        free(r);
        json_t *ch = json_object_get(p, "multi_chosen_tokens"), *cd = json_object_get(p, "multi_chosen_decoded");
        CHECK(json_array_size(ch) >= 1 && json_array_size(ch) == json_array_size(cd));
        bool has_escape = false;
        size_t i;
        json_t *v;
        json_array_foreach(ch, i, v) {
            const char *s = json_string_value(v);
            CHECK(s && bs_token_lookup(t, s) >= 0 && bs_token_lookup(t, s) != lm->cycle[0]);
            has_escape = has_escape || (s && !strcmp(s, bs_token_text(t, lm->escape[0])));
        }
        CHECK(has_escape);   /* the model's second choice there */
        json_t *rep = json_object_get(p, "repetition");
        CHECK_EQ_INT(json_integer_value(json_object_get(rep, "rejected_token_index")), LOOP_K - 1);
        CHECK_EQ_INT(json_integer_value(json_object_get(rep, "repeats")), 4);
        CHECK_EQ_INT(json_integer_value(json_object_get(rep, "period")), strlen(ctx));
        CHECK_EQ_INT(json_integer_value(json_object_get(rep, "start_char")), -(long long)strlen(c0));
        CHECK(json_is_string(json_object_get(p, "source_prompt")) && json_is_string(json_object_get(rep, "snippet")));
        json_t *ids = json_object_get(p, "context_ids");
        CHECK_EQ_INT(json_array_size(ids), LOOP_K);
        for (int k = 0; k < LOOP_K; k++)
            CHECK_EQ_INT(json_integer_value(json_array_get(ids, (size_t)k)), lm->cycle[k]);
    }
    json_decref(rows);

    /* primed: prompt + 3 copies of its own continuation; the first generated token continues
     * the loop and is the rejected one */
    snprintf(cmd, sizeof cmd, "'%s' antidoom mine -m '%s' --prompts '%s' -o '%s' --generate-primes --prime-tokens %d "
             "--primes-out '%s' -n 50 -t 1", bin, model, prompts, pairs, LOOP_K, primes);
    out = run(cmd);
    CHECK(out != NULL);
    free(out);
    rows = read_jsonl(primes, &n);
    CHECK_EQ_INT(n, 2);
    json_decref(rows);
    rows = read_jsonl(pairs, &n);
    CHECK_EQ_INT(n, 1);
    p = json_array_get(rows, 0);
    if (p) {
        json_t *rep = json_object_get(p, "repetition");
        CHECK_EQ_INT(json_integer_value(json_object_get(rep, "rejected_token_index")), 0);
        CHECK(json_integer_value(json_object_get(rep, "start_char")) < 0);   /* began in the prompt */
        CHECK_STR(json_string_value(json_object_get(p, "rejected_token")), bs_token_text(t, lm->cycle[1]));
    }
    json_decref(rows);
    free(c0);
    free(e0);
}

/* chosen-win by hand: logits of the context from the API, ranks chosen around the rejected. */
static void test_eval(const char *fixtures) {
    char model[1024], pairs[1024], cmd[8192];
    snprintf(model, sizeof model, "%s/tiny-f32.gguf", fixtures);
    snprintf(pairs, sizeof pairs, "%s/ad_eval_pairs.jsonl", tmp);
    bs_engine_opts o;
    bs_engine_opts_init(&o);
    o.model = model;
    o.n_threads = 1;
    o.seed_set = true;
    bs_engine g;
    CHECK_EQ_INT(bs_engine_open(&g, &o), 0);
    const char *contexts[] = {"The quick brown fox", "Hello world, this is", "1 2 3 4"};
    const int nctx = 3;
    double want[3], mean = 0;
    FILE *f = fopen(pairs, "w");
    float *z = malloc((size_t)g.n_vocab * sizeof *z);
    for (int c = 0; c < nctx; c++) {
        int32_t *ids;
        size_t n;
        bs_engine_tokenize(&g, contexts[c], strlen(contexts[c]), &ids, &n);
        bs_session_reset(bs_gen_session(g.gen));
        bs_eval(bs_gen_session(g.gen), ids, (int)n, BS_LOGITS_LAST, z, NULL);
        free(ids);
        /* rank tokens by logit (normal tokens only, so their raw strings look up uniquely) */
        int32_t order[64];
        int k = 0;
        for (int32_t id = 0; id < g.n_vocab && k < 64; id++)
            if (bs_token_type(g.tok, id) == BS_TOKEN_NORMAL && bs_token_lookup(g.tok, bs_token_text(g.tok, id)) == id)
                order[k++] = id;
        /* rejected: a token; chosen: c+1 tokens above it, 3 below, by direct comparison */
        int32_t rej = order[10 + c];
        json_t *chosen = json_array();
        int wins = 0, total = 0;
        for (int i = 0; i < 40 && total < 4 + c; i++) {
            int32_t id = order[i];
            if (id == rej) continue;
            bool win = z[id] > z[rej];
            if (win ? wins >= c + 1 : total - wins >= 3) continue;
            json_array_append_new(chosen, json_string(bs_token_text(g.tok, id)));
            wins += win;
            total++;
        }
        want[c] = (double)wins / total;
        mean += want[c] / nctx;
        json_t *p = json_pack("{s:s, s:s, s:o}", "context_before", contexts[c], "rejected_token",
                              bs_token_text(g.tok, rej), "multi_chosen_tokens", chosen);
        json_dumpf(p, f, JSON_COMPACT);
        fputc('\n', f);
        json_decref(p);
    }
    fclose(f);
    free(z);
    bs_engine_close(&g);
    snprintf(cmd, sizeof cmd, "'%s' antidoom eval -m '%s' --pairs '%s' --json -t 1", bin, model, pairs);
    char *out = run(cmd);
    CHECK(out != NULL);
    json_error_t err;
    json_t *j = out ? json_loads(out, 0, &err) : NULL;
    CHECK(j != NULL);
    if (j) {
        json_t *ps = json_object_get(j, "pairs");
        CHECK_EQ_INT(json_array_size(ps), nctx);
        for (int c = 0; c < nctx && c < (int)json_array_size(ps); c++) {
            double got = json_number_value(json_object_get(json_array_get(ps, (size_t)c), "chosen_win"));
            CHECKF(fabs(got - want[c]) < 1e-12, "pair %d: chosen_win %g, by hand %g", c, got, want[c]);
        }
        double gm = json_number_value(json_object_get(j, "chosen_win"));
        CHECKF(fabs(gm - mean) < 1e-12, "mean chosen_win %g, by hand %g", gm, mean);
        CHECK(want[0] > 0 && want[0] < 1);
    }
    json_decref(j);
    free(out);
}

static void test_loop_rate(const char *model, const loop_model *lm, const bs_tokenizer *t) {
    char prompts[1024], cmd[8192];
    snprintf(prompts, sizeof prompts, "%s/ad_rate_prompts.txt", tmp);
    char *c0 = piece(t, lm->cycle[0]), *e0 = piece(t, lm->escape[0]);
    char text[256];
    snprintf(text, sizeof text, "%s\n%s\n", c0, e0);
    write_file(prompts, text);
    free(c0);
    free(e0);
    snprintf(cmd, sizeof cmd, "'%s' antidoom eval -m '%s' --loop-rate --prompts '%s' --temps 0,0.3,0.7 -n 40 --json -t 1",
             bin, model, prompts);
    char *out = run(cmd);
    CHECK(out != NULL);
    json_error_t err;
    json_t *j = out ? json_loads(out, 0, &err) : NULL;
    json_t *lr = json_object_get(j, "loop_rate");
    CHECK_EQ_INT(json_array_size(lr), 3);
    for (size_t i = 0; i < json_array_size(lr); i++) {
        json_t *r = json_array_get(lr, i);
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "n")), 2);
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "looped")), 1);   /* c0 loops, e0 ends */
        CHECK(fabs(json_number_value(json_object_get(r, "rate")) - 0.5) < 1e-12);
    }
    json_decref(j);
    free(out);
}

/* `run --loop-guard`: stop ends at the loop (stats line on stderr), rewind prints no loop. */
static void test_run_cli(const char *model, const loop_model *lm, const bs_tokenizer *t) {
    char cmd[8192], *c0 = piece(t, lm->cycle[0]);
    bs_loop_params dp = bs_loop_default_params();
    bs_loop_info info;
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p '%s' -n 80 --temp 0 -t 1 --loop-guard stop 2>&1", bin, model, c0);
    char *out = run(cmd);
    CHECK(out && strstr(out, "stopped by a loop") && strstr(out, "loop guard: stop, 1 loop detected"));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p '%s' -n 80 --temp 0 -t 1 --loop-guard rewind 2>/dev/null", bin, model, c0);
    out = run(cmd);
    CHECK(out && strlen(out) > 0);
    if (out) CHECK_EQ_INT(bs_loop_find(out, strlen(out), &dp, &info), 0);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p '%s' -n 80 --temp 0 -t 1 --loop-guard off 2>/dev/null", bin, model, c0);
    out = run(cmd);
    if (out) CHECK_EQ_INT(bs_loop_find(out, strlen(out), &dp, &info), 1);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p x --loop-guard sometimes 2>/dev/null", bin, model);
    CHECK(system(cmd) != 0);
    free(c0);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES");
    bin = getenv("BITSPARK");
    tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    if (!bin) {
        fprintf(stderr, "BITSPARK is not set\n");
        return 1;
    }
    char src[1024], model[1024];
    snprintf(src, sizeof src, "%s/tiny-f32.gguf", fx);
    snprintf(model, sizeof model, "%s/antidoom_loop_model.gguf", tmp);
    loop_model lm;
    CHECK_EQ_INT(loop_model_write(src, model, &lm), 0);
    gguf_file *f = gguf_open(model, 0);
    bs_tokenizer *t = f ? bs_tokenizer_from_gguf(f) : NULL;
    CHECK(t != NULL);
    if (t) {
        test_mine(model, &lm, t);
        test_loop_rate(model, &lm, t);
        test_run_cli(model, &lm, t);
    }
    bs_tokenizer_free(t);
    gguf_close(f);
    test_eval(fx);
    return test_summary("test_antidoom");
}
