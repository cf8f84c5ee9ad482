/* test_loop_guard: the doom-loop detector (against a brute-force scan, thresholds, UTF-8,
 * prefixes, token mapping), recurrent-state checkpoints (bit-exact replay), and the guard in the
 * generation loop on a model that loops (stop ends at the loop; rewind removes it and leaves
 * the session bit-identical to a straight run over the kept tokens). */
#include "test.h"
#include "loop_model.h"
#include "gen_helper.h"
#include "sample/loop_guard.h"
#include "model/session_ckpt.h"
#include "model/qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- detector ---------------------------------------------------------------------------------- */

/* Earliest end e at which some period qualifies (smallest p there); 0 if none. */
static int64_t brute_first(const char *s, int64_t n, const bs_loop_params *p, int *per, int64_t *start) {
    for (int64_t e = 1; e <= n; e++)
        for (int q = 1; q <= p->max_period && q <= e; q++) {
            int64_t k = e - 1;
            while (k - q >= 0 && s[k] == s[k - q]) k--;
            int64_t len = e - 1 - k + q;   /* periodic suffix: (e-1-k) matches + the first copy */
            if (len > e) len = e;
            int64_t copies = len / q;
            if (copies >= p->min_repeats && copies * q >= p->min_chars) {
                *per = q;
                *start = e - len;
                return e;
            }
        }
    return 0;
}

static void test_random_vs_brute(void) {
    bs_loop_params p = {.min_repeats = 3, .min_chars = 10, .max_period = 12};
    bs_rng r;
    bs_rng_seed(&r, 7);
    int hits = 0;
    for (int trial = 0; trial < 150; trial++) {
        char s[160];
        int n = 0;
        while (n < 150) {   /* random text with pasted repeats */
            if (bs_rng_uniform(&r) < 0.3 && n > 4) {
                int q = 1 + (int)(bs_rng_uniform(&r) * 8), c = 1 + (int)(bs_rng_uniform(&r) * 4);
                for (int k = 0; k < q * c && n < 150 && n >= q; k++, n++) s[n] = s[n - q];
            } else {
                s[n++] = "abc"[(int)(bs_rng_uniform(&r) * 3)];
            }
        }
        s[n] = 0;
        int bp = 0;
        int64_t bstart = 0, bend = brute_first(s, n, &p, &bp, &bstart);
        bs_loop_detector *d = bs_loop_detector_new(&p);
        bs_loop_info info = {0};
        int64_t got = 0;
        for (int off = 0, tok = 0; off < n && !got; tok++) {
            int len = BS_MIN(1 + (int)(bs_rng_uniform(&r) * 4), n - off);
            if (bs_loop_detector_push(d, s + off, (size_t)len, &info)) {
                got = info.end_char;
                CHECK(info.rejected_token >= 0 && info.rejected_token <= tok);
                CHECK(bs_loop_detector_token_char(d, info.rejected_token) <= info.repeat_start_char);
                CHECK(bs_loop_detector_token_char(d, info.rejected_token + 1) > info.repeat_start_char);
            }
            off += len;
        }
        CHECKF(got == bend, "trial %d: detector end %lld, brute force %lld", trial, (long long)got, (long long)bend);
        if (got && got == bend) {
            hits++;
            CHECK_EQ_INT(info.period, bp);
            CHECK_EQ_INT(info.start_char, bstart);
            CHECK_EQ_INT(info.repeat_start_char, bstart + bp);
        }
        bs_loop_detector_free(d);
    }
    CHECKF(hits > 20, "only %d of 150 random texts looped: the test is too weak", hits);
}

static void test_thresholds(void) {
    bs_loop_params p = bs_loop_default_params();
    bs_loop_info info;
    char buf[512] = "";
    for (int i = 0; i < 4; i++) strcat(buf, "hello, world! _");   /* 15 chars x 4 = 60 */
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 1);
    CHECK_EQ_INT(info.period, 15);
    CHECK_EQ_INT(info.repeats, 4);
    CHECK_EQ_INT(info.start_char, 0);
    buf[strlen(buf) - 1] = 0;   /* 59 chars */
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 0);
    buf[0] = 0;
    for (int i = 0; i < 3; i++) strcat(buf, "a longer phrase that repeats, ");   /* 3 x 30 */
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 0);
    strcpy(buf, "intro: ");
    for (int i = 0; i < 5; i++) strcat(buf, "0123456789abcd");   /* 14 x 5 = 70 >= 60 */
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 1);
    CHECK_EQ_INT(info.period, 14);
    CHECK_EQ_INT(info.start_char, 7);
    CHECK_EQ_INT(info.end_char, 7 + 70);
    buf[strlen(buf) - 1] = 0;   /* 69: 4 copies of 14 = 56 < 60 */
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 0);
    /* the smallest period is reported, onset refined to the character */
    strcpy(buf, "xyzb");
    for (int i = 0; i < 40; i++) strcat(buf, "ab");
    CHECK_EQ_INT(bs_loop_find(buf, strlen(buf), &p, &info), 1);
    CHECK_EQ_INT(info.period, 2);
    CHECK_EQ_INT(info.start_char, 3);   /* "b" before the first "ab" starts the periodic run */
    /* characters are code points: 59 x U+00E9 (118 bytes) is no loop, 60 is */
    char e[256] = "";
    for (int i = 0; i < 59; i++) strcat(e, "\xc3\xa9");
    CHECK_EQ_INT(bs_loop_find(e, strlen(e), &p, &info), 0);
    strcat(e, "\xc3\xa9");
    CHECK_EQ_INT(bs_loop_find(e, strlen(e), &p, &info), 1);
    CHECK_EQ_INT(info.end_char, 60);
    bs_loop_params q = {.min_repeats = 2, .min_chars = 4, .max_period = 3};
    CHECK_EQ_INT(bs_loop_find("abcdabcd", 8, &q, &info), 0);   /* period 4 > max_period */
    q.max_period = 4;
    CHECK_EQ_INT(bs_loop_find("abcdabcd", 8, &q, &info), 1);
    q.min_repeats = 1;
    CHECK(bs_loop_detector_new(&q) == NULL);
}

static void test_tokens_prefix(void) {
    bs_loop_params p = {.min_repeats = 4, .min_chars = 20, .max_period = 64};
    bs_loop_detector *d = bs_loop_detector_new(&p);
    /* tokens: "So " | "we go" | " round," | " we go" | " round," ... */
    const char *toks[] = {"So", " we go", " round,", " we go", " round,", " we go", " round,", " we go", " round,"};
    bs_loop_info info;
    int hit = -1;
    for (int i = 0; i < 9 && hit < 0; i++)
        if (bs_loop_detector_push(d, toks[i], strlen(toks[i]), &info)) hit = i;
    CHECK_EQ_INT(hit, 8);
    CHECK_EQ_INT(info.period, 13);
    CHECK_EQ_INT(info.start_char, 2);
    CHECK_EQ_INT(info.rejected_token, 3);   /* the second " we go" */
    /* truncating keeps the runs consistent: pushing the same tokens again fires again */
    bs_loop_detector_truncate(d, 3);
    CHECK_EQ_INT(bs_loop_detector_n_chars(d), 15);
    hit = -1;
    for (int i = 3; i < 9 && hit < 0; i++)
        if (bs_loop_detector_push(d, toks[i], strlen(toks[i]), &info)) hit = i;
    CHECK_EQ_INT(hit, 8);
    CHECK_EQ_INT(info.rejected_token, 3);
    bs_loop_detector_free(d);

    /* a primed prefix that already loops: the first generated copy boundary is rejected */
    d = bs_loop_detector_new(&p);
    const char *prefix = "Q: the cat sat. the cat sat. the cat sat. the cat sat. the";
    int r = bs_loop_detector_set_prefix(d, prefix, strlen(prefix));
    CHECK_EQ_INT(r, 0);
    r = bs_loop_detector_push(d, " cat", 4, &info);
    CHECK_EQ_INT(r, 1);                                             /* continues the loop */
    CHECK_EQ_INT(info.period, 13);
    CHECK_EQ_INT(info.rejected_token, 0);                           /* no boundary yet: first token */
    bs_loop_detector_truncate(d, 0);
    r = bs_loop_detector_push(d, " dog", 4, &info);
    CHECK_EQ_INT(r, 0);                                             /* escapes */
    bs_loop_detector_free(d);
    d = bs_loop_detector_new(&p);
    const char *prefix2 = "Q: the cat sat. the cat sat. the cat sat. the cat";
    bs_loop_detector_set_prefix(d, prefix2, strlen(prefix2));
    r = bs_loop_detector_push(d, " sat.", 5, &info);
    CHECK_EQ_INT(r, 1);
    r = bs_loop_detector_push(d, " the", 4, &info);
    CHECK_EQ_INT(r, 1);
    CHECK_EQ_INT(info.rejected_token, 1);                           /* " the" starts copy 5 */
    CHECK_EQ_INT(info.rejected_char, (int64_t)strlen(prefix2) + 5);
    bs_loop_detector_free(d);
}

/* --- checkpoints ------------------------------------------------------------------------------- */

static void test_ckpt(const char *fixtures) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny-q1_0.gguf", fixtures);
    bs_model *m = bs_model_load(path, NULL);
    CHECK(m != NULL);
    if (!m) return;
    const int V = bs_model_n_vocab(m);
    bs_session_params sp = {.n_ctx = 128};
    bs_session *a = bs_session_new(m, &sp), *b = bs_session_new(m, &sp);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (i * 37 + 11) % V;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    bs_eval(a, toks, 8, BS_LOGITS_LAST, la, NULL);
    bs_session_ckpt *c = bs_session_ckpt_new(a);
    for (int i = 8; i < 30; i++) {
        bs_eval(a, &toks[i], 1, BS_LOGITS_LAST, la, NULL);
        if (i == 14) bs_session_ckpt_save(c, a, la);
    }
    CHECK_EQ_INT(bs_session_ckpt_pos(c), 15);
    CHECK_EQ_INT(bs_session_ckpt_restore(c, a), 0);
    CHECK_EQ_INT(bs_session_n_past(a), 15);
    CHECK(bs_session_rollback(a, 14) != 0);   /* nothing older can be undone now */
    int32_t other[10];
    for (int i = 0; i < 10; i++) other[i] = (i * 101 + 5) % V;
    for (int i = 0; i < 10; i++) bs_eval(a, &other[i], 1, BS_LOGITS_LAST, la, NULL);
    /* straight run over the same tokens */
    bs_eval(b, toks, 8, BS_LOGITS_LAST, lb, NULL);
    for (int i = 8; i < 15; i++) bs_eval(b, &toks[i], 1, BS_LOGITS_LAST, lb, NULL);
    for (int i = 0; i < 10; i++) bs_eval(b, &other[i], 1, BS_LOGITS_LAST, lb, NULL);
    CHECK(memcmp(la, lb, (size_t)V * sizeof *la) == 0);
    bs_session_ckpt_free(c);
    bs_session_free(a);
    bs_session_free(b);
    bs_model_free(m);
    free(la);
    free(lb);
}

/* --- the guard on a looping model -------------------------------------------------------------- */

typedef struct { char text[8192]; size_t len; } sink;
static void collect(void *ud, const char *text, size_t len) {
    sink *s = ud;
    if (s->len + len < sizeof s->text) memcpy(s->text + s->len, text, len), s->len += len;
    s->text[s->len] = 0;
}

static gen_result gen(const char *model, const loop_model *lm, int mode, int every, int count,
                         sink *out, float *final_logits) {
    bs_engine_opts o = greedy_opts(model, NULL, BS_DRAFT_AUTO, 0);
    o.loop.mode = mode;
    o.loop.ckpt_every = every;
    o.loop.ckpt_count = count;
    bs_engine g;
    gen_result st;
    memset(&st, 0, sizeof st);
    memset(out, 0, sizeof *out);
    if (bs_engine_open(&g, &o)) {
        fprintf(stderr, "open: %s\n", bs_last_error());
        CHECK(0);
        return st;
    }
    CHECK_EQ_INT(gen_generate(&g, &lm->cycle[0], 1, 60, collect, out, &st), 0);
    if (final_logits) memcpy(final_logits, bs_gen_logits(g.gen), (size_t)g.n_vocab * sizeof *final_logits);
    bs_engine_close(&g);
    return st;
}

static void test_guard(const char *fixtures, const char *tmp) {
    char src[1024], model[1024];
    snprintf(src, sizeof src, "%s/tiny-f32.gguf", fixtures);
    snprintf(model, sizeof model, "%s/loop_guard_model.gguf", tmp);
    loop_model lm;
    CHECK_EQ_INT(loop_model_write(src, model, &lm), 0);
    bs_loop_params dp = bs_loop_default_params();
    bs_loop_info info;
    sink out;

    gen_result st = gen(model, &lm, BS_LOOP_GUARD_OFF, 32, 16, &out, NULL);
    CHECK_EQ_INT(st.n_gen, 60);                       /* the model loops for ever */
    CHECK_EQ_INT(bs_loop_find(out.text, out.len, &dp, &info), 1);
    CHECK_EQ_INT(st.tokens[0], lm.cycle[1]);
    free(st.tokens);

    st = gen(model, &lm, BS_LOOP_GUARD_STOP, 32, 16, &out, NULL);
    CHECK_EQ_INT(st.stop, BS_GEN_LOOP);
    CHECK_EQ_INT(st.n_gen, 4 * LOOP_K);               /* ends as the 4th copy completes */
    for (int i = 0; i < st.n_gen; i++) CHECK_EQ_INT(st.tokens[i], lm.cycle[(i + 1) % LOOP_K]);
    CHECK(st.loop.stopped && st.loop.n_detected == 1 && st.loop.n_rewinds == 0);
    CHECK_EQ_INT(st.loop.last.rejected_token, LOOP_K);
    CHECK_EQ_INT(st.loop.last.repeats, 4);
    CHECK_EQ_INT(bs_loop_find(out.text, out.len, &dp, &info), 1);
    free(st.tokens);

    /* rewind, with the target reached from a ring checkpoint + replay, from the prompt's
     * checkpoint + replay, and exactly at a checkpoint */
    const int ckpts[][2] = {{3, 16}, {32, 0}, {5, 4}};
    float *ref = NULL, *got = NULL;
    for (size_t c = 0; c < BS_ARRAY_LEN(ckpts); c++) {
        bs_model *m = bs_model_load(model, NULL);
        const int V = bs_model_n_vocab(m);
        if (!ref) ref = malloc((size_t)V * sizeof *ref), got = malloc((size_t)V * sizeof *got);
        st = gen(model, &lm, BS_LOOP_GUARD_REWIND, ckpts[c][0], ckpts[c][1], &out, got);
        CHECK_EQ_INT(st.stop, BS_GEN_EOG);
        CHECK_EQ_INT(st.loop.n_rewinds, 1);
        CHECK_EQ_INT(st.loop.n_discarded, 4 * LOOP_K - LOOP_K);
        CHECK(!st.loop.stopped);
        CHECK_EQ_INT(st.n_gen, LOOP_K + LOOP_M);
        for (int i = 0; i < LOOP_K && i < st.n_gen; i++) CHECK_EQ_INT(st.tokens[i], lm.cycle[(i + 1) % LOOP_K]);
        for (int i = 0; i < LOOP_M && LOOP_K + i < st.n_gen; i++) CHECK_EQ_INT(st.tokens[LOOP_K + i], lm.escape[i]);
        CHECK_EQ_INT(bs_loop_find(out.text, out.len, &dp, &info), 0);   /* streamed text: no loop */
        /* the streamed text is exactly the kept tokens */
        bs_tokenizer *tk = bs_tokenizer_from_gguf(m->file);
        char *txt;
        size_t tl;
        bs_detokenize(tk, st.tokens, (size_t)st.n_gen, false, &txt, &tl);
        CHECK(tl == out.len && !memcmp(txt, out.text, tl));
        free(txt);
        bs_tokenizer_free(tk);
        /* a straight run over the prompt and the kept tokens gives bit-identical logits */
        bs_session_params sp = {.n_threads = 1};
        bs_session *s = bs_session_new(m, &sp);
        bs_eval(s, &lm.cycle[0], 1, BS_LOGITS_LAST, ref, NULL);
        for (int i = 0; i < st.n_gen; i++) bs_eval(s, &st.tokens[i], 1, BS_LOGITS_LAST, ref, NULL);
        CHECKF(memcmp(ref, got, (size_t)V * sizeof *ref) == 0, "checkpoint setting %zu", c);
        bs_session_free(s);
        bs_model_free(m);
        free(st.tokens);
    }
    free(ref);
    free(got);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    test_random_vs_brute();
    test_thresholds();
    test_tokens_prefix();
    test_ckpt(fx);
    test_guard(fx, tmp);
    return test_summary("test_loop_guard");
}
