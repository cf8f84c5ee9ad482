/* test_api_misuse.c: the public API under the uses bitspark.h allows but a straight run never
 * makes (through bitspark.h alone, on the trained tiny model in models/):
 *   - a generator whose prompt was aborted part way, or whose session had a state loaded by the
 *     caller, answers the next request exactly as a fresh generator does (it does not trust the
 *     rows it did not record);
 *     and ids past the vocabulary are refused by bs_gen_begin;
 *   - a request that does not draft does not stop the next one from drafting (a gap in the
 *     drafter's context; plain decoding's output);
 *   - a rollback that recomputes rows does not ask the abort callback (it is bs_eval's), so it
 *     cannot stop half way;
 *   - sampling: +inf logits, huge biases and penalties never make NaN (no crash in greedy, no
 *     banned token drawn, ties of +inf drawn evenly); a negative DRY multiplier is refused; a
 *     logit bias cannot lift the ban on ids past the tokenizer;
 *   - grammars compiled on two threads at once, over two vocabularies (one sort context each);
 *   - refusals with an error, never a crash: LoRA on a vocabulary-only model, an image grid whose
 *     rows overflow an int, a 17th preserved token, tool calls counted but not given; a model
 *     freed with an adapter attached frees the adapter's references (the sanitizer build's leak
 *     check). */
#include "bitspark.h"
#include "test.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char model_path[1024], lora_path[1024], small_path[1024], drafter_path[1024];

/* ---- the generator's prompt cache after an abort or a foreign state load ------------------- */

static int abort_after;   /* batches to allow before the abort callback stops one; 0: never */
static int batches;
static bool on_abort(void *ud) { (void)ud; return abort_after && ++batches > abort_after; }

/* A greedy request's text (NULL when it failed) and, into ids, its tokens. */
static char *greedy(bs_gen *g, const int32_t *prompt, int n, int32_t *ids, int *n_ids) {
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = 8;
    r.ignore_eos = true;
    if (bs_gen_begin(g, &r, prompt, n) || bs_gen_run(g, NULL, NULL)) return NULL;
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    for (int i = 0; ids && i < o.n_toks; i++) ids[i] = o.toks[i].id;
    if (n_ids) *n_ids = o.n_toks;
    return strdup(o.text);
}

static void test_gen_cache(bs_model *m, const bs_tokenizer *tok) {
    bs_gen_params gp = bs_gen_default_params();
    gp.n_threads = 1;
    gp.n_ctx = 2048;
    bs_gen *g = bs_gen_new(m, tok, &gp), *fresh = bs_gen_new(m, tok, &gp);
    CHECKF(g && fresh, "%s", bitspark_last_error());
    if (!g || !fresh) return;
    bs_session_set_abort(bs_gen_session(g), on_abort, NULL);
    enum { N = 700 };
    int32_t p[N], out[16];
    int n_out = 0;
    for (int i = 0; i < N; i++) p[i] = 100 + (i * 7) % 900;
    free(greedy(g, p, 5, out, &n_out));   /* the session holds p[0..5) and what it generated */
    memcpy(p + 5, out, (size_t)n_out * sizeof *out);   /* the next request continues it */
    char *want = greedy(fresh, p, N, NULL, NULL);
    abort_after = 1;   /* its prompt stops after one batch: rows the generator did not record */
    batches = 0;
    char *aborted = greedy(g, p, N, NULL, NULL);
    CHECKF(!aborted, "the abort callback did not stop the prompt");
    abort_after = 0;
    char *got = greedy(g, p, N, NULL, NULL);
    CHECKF(want && got && !strcmp(want, got), "after an aborted prompt: '%s', a fresh generator '%s'", got ? got : "?",
           want ? want : "?");
    free(aborted), free(got), free(want);

    /* a state of another sequence loaded into the generator's session by the caller */
    bs_session_params sp = bs_session_default_params();
    sp.n_threads = 1;
    sp.n_ctx = 256;
    bs_session *other = bs_session_new(m, &sp);
    int32_t x[30];
    for (int i = 0; i < 30; i++) x[i] = 900 + i;
    CHECK(other && !bs_eval(other, x, 30, BS_LOGITS_NONE, NULL, NULL));
    const size_t sz = other ? bs_session_state_size(other) : 0;
    void *st = malloc(sz ? sz : 1);
    CHECK(other && !bs_session_state_save(other, st, sz));
    int32_t q[40];
    for (int i = 0; i < 40; i++) q[i] = 50 + i;
    free(greedy(g, q, 10, out, &n_out));
    memcpy(q + 10, out, (size_t)n_out * sizeof *out);
    CHECK(!bs_session_state_load(bs_gen_session(g), st, sz));
    got = greedy(g, q, 40, NULL, NULL);
    want = greedy(fresh, q, 40, NULL, NULL);
    CHECKF(want && got && !strcmp(want, got), "after a foreign state load: '%s', a fresh generator '%s'",
           got ? got : "?", want ? want : "?");
    free(got), free(want), free(st);
    /* an id past the vocabulary is refused by bs_gen_begin, as a negative one is */
    int32_t bad[2] = {5, bs_model_n_vocab(m)};
    bs_gen_request r;
    bs_gen_request_init(&r);
    CHECK(bs_gen_begin(g, &r, bad, 2) == -1 && strstr(bitspark_last_error(), "out of range"));
    bs_session_free(other);
    bs_gen_free(g);
    bs_gen_free(fresh);
}

/* A request that does not draft leaves the drafter behind the session: the next turn drafts
 * all the same (the positions it missed are a gap in its context), with the output of plain
 * decoding. */
static void test_no_draft_then_draft(bs_model *m, const bs_tokenizer *tok) {
    bs_drafter *d = bs_drafter_load(drafter_path, m);
    CHECKF(d, "%s", bitspark_last_error());
    if (!d) return;
    bs_gen_params gp = bs_gen_default_params();
    gp.n_threads = 1;
    gp.n_ctx = 512;
    gp.draft_max = 3;
    bs_gen_params pp = gp;
    pp.drafter = NULL;
    gp.drafter = d;
    bs_gen *g = bs_gen_new(m, tok, &gp), *plain = bs_gen_new(m, tok, &pp);
    int32_t p[48], out[16];
    int n_out = 0;
    for (int i = 0; i < 48; i++) p[i] = 200 + (i * 13) % 700;
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = 8;
    r.ignore_eos = true;
    r.no_draft = true;
    CHECK(g && plain && !bs_gen_begin(g, &r, p, 10) && !bs_gen_run(g, NULL, NULL));
    CHECK_EQ_INT(bs_gen_get_stats(g)->n_drafted, 0);
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    for (int i = 0; i < o.n_toks && i < 16; i++) out[n_out++] = o.toks[i].id;
    memcpy(p + 10, out, (size_t)n_out * sizeof *out);   /* the next turn continues it */
    char *got = greedy(g, p, 48, NULL, NULL), *want = greedy(plain, p, 48, NULL, NULL);
    CHECKF(bs_gen_get_stats(g)->n_drafted > 0, "the turn after a request without drafts drafted nothing");
    CHECKF(got && want && !strcmp(got, want), "drafted '%s', plain '%s'", got ? got : "?", want ? want : "?");
    free(got), free(want);
    bs_gen_free(g);
    bs_gen_free(plain);
    bs_drafter_free(d);
}

/* ---- rollback and the abort callback ------------------------------------------------------- */

static bool always(void *ud) { return *(bool *)ud; }

static void test_rollback_abort(bs_model *m) {
    bs_session_params sp = bs_session_default_params();
    sp.n_threads = 1;
    sp.n_ctx = 256;
    bs_session *s = bs_session_new(m, &sp), *ref = bs_session_new(m, &sp);
    bool stop = false;
    bs_session_set_abort(s, always, &stop);
    int32_t t[100];
    for (int i = 0; i < 100; i++) t[i] = 10 + i;
    const int nv = bs_model_n_vocab(m);
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    /* 90 rows in one batch: too many to record, so a rollback into them recomputes */
    CHECK(!bs_eval(s, t, 10, BS_LOGITS_NONE, NULL, NULL) && !bs_eval(s, t + 10, 90, BS_LOGITS_NONE, NULL, NULL));
    stop = true;
    CHECKF(!bs_session_rollback(s, 50), "rollback with the abort callback set: %s", bitspark_last_error());
    CHECK_EQ_INT(bs_session_n_past(s), 50);
    stop = false;
    CHECK(!bs_eval(s, t + 50, 1, BS_LOGITS_LAST, a, NULL));
    CHECK(!bs_eval(ref, t, 51, BS_LOGITS_LAST, b, NULL));
    CHECK(!memcmp(a, b, sizeof(float) * nv));
    free(a), free(b);
    bs_session_free(s);
    bs_session_free(ref);
}

/* ---- sampling ------------------------------------------------------------------------------ */

static void test_sampling(const bs_tokenizer *tok) {
    enum { NV = 10 };
    /* +inf logit, a FLT_MAX bias and a FLT_MAX frequency penalty on it: greedy stays in bounds */
    float lg[NV] = {INFINITY, 2, 3, 4, 5, 0, -1, -2, 0.5f, 2.5f};
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    p.frequency_penalty = FLT_MAX;
    bs_sampler_chain *c = bs_sampler_chain_new(&p, NULL, NV);
    CHECK(c && !bs_sampler_chain_set_logit_bias(c, 0, FLT_MAX));
    bs_sampler_chain_accept(c, 0);
    bs_sampler_chain_accept(c, 0);
    const int32_t id = bs_sampler_chain_sample(c, lg);
    CHECKF(id >= 0 && id < NV, "greedy over +inf, a FLT_MAX bias and penalty: %d", id);
    bs_sampler_chain_free(c);
    /* a banned token with an extreme negative frequency penalty stays banned */
    float lg1[NV] = {1, 2, 3, 4, 5, 0, -1, -2, 0.5f, 2.5f};
    p = bs_sampler_default_params();
    p.frequency_penalty = -FLT_MAX;
    c = bs_sampler_chain_new(&p, NULL, NV);
    CHECK(c && !bs_sampler_chain_set_logit_bias(c, 5, -INFINITY));
    bs_sampler_chain_accept(c, 5);
    bs_sampler_chain_accept(c, 5);
    int banned = 0;
    for (int i = 0; i < 200; i++) banned += bs_sampler_chain_sample(c, lg1) == 5;
    CHECK_EQ_INT(banned, 0);
    bs_sampler_chain_free(c);
    /* two +inf logits under a repeat penalty: an even draw between them, never the last id */
    float lg2[NV] = {INFINITY, INFINITY, 3, 4, 5, 0, -1, -2, 0.5f, 2.5f};
    p = bs_sampler_default_params();
    p.repeat_penalty = 0.9f;
    p.seed = 3;
    c = bs_sampler_chain_new(&p, NULL, NV);
    bs_sampler_chain_accept(c, 0);
    bs_sampler_chain_accept(c, 1);
    int cnt[NV] = {0};
    for (int i = 0; i < 1000; i++) cnt[bs_sampler_chain_sample(c, lg2)]++;
    CHECKF(cnt[0] > 400 && cnt[1] > 400 && cnt[0] + cnt[1] == 1000, "two +inf: %d / %d", cnt[0], cnt[1]);
    bs_sampler_chain_free(c);
    p = bs_sampler_default_params();
    p.dry_multiplier = -1;
    CHECK(!bs_sampler_chain_new(&p, NULL, NV) && strstr(bitspark_last_error(), "DRY multiplier"));
    /* ids past the tokenizer (a padded vocabulary): a bias is refused, the id never drawn */
    const int nt = bs_tokenizer_n_vocab(tok), nvp = nt + 16;
    float *pad = calloc((size_t)nvp, sizeof *pad);
    pad[nt + 3] = 100;
    p = bs_sampler_default_params();
    p.temp = 0;
    c = bs_sampler_chain_new(&p, tok, nvp);
    CHECK(c && bs_sampler_chain_set_logit_bias(c, nt + 3, 0) == -1);
    CHECK(c && bs_sampler_chain_set_logit_bias(c, nt + 3, -INFINITY) == 0);
    CHECK(c && bs_sampler_chain_sample(c, pad) < nt);
    bs_sampler_chain_free(c);
    free(pad);
}

/* ---- grammars on two threads ---------------------------------------------------------------- */

static const bs_tokenizer *thread_tok[2];

static void *grammar_loop(void *arg) {
    const bs_tokenizer *tok = thread_tok[(long)arg];
    long fails = 0;
    for (int i = 0; i < (TEST_SANITIZED ? 4 : 12); i++) {
        bs_sampler_chain *c = bs_sampler_chain_new(NULL, tok, 0);
        fails += !c || bs_sampler_chain_set_grammar(c, "root ::= [a-z]+ \" \" [0-9]");
        bs_sampler_chain_free(c);
    }
    return (void *)fails;
}

static void test_grammar_threads(const bs_tokenizer *tok) {
    bs_model_params mp = bs_model_default_params();
    mp.vocab_only = true;
    bs_model *small = bs_model_load(small_path, &mp);
    bs_tokenizer *t2 = small ? bs_tokenizer_load(small) : NULL;
    CHECKF(t2 && bs_tokenizer_n_vocab(t2) != bs_tokenizer_n_vocab(tok), "%s", bitspark_last_error());
    thread_tok[0] = tok;
    thread_tok[1] = t2 ? t2 : tok;
    pthread_t th[2];
    void *r[2];
    for (long i = 0; i < 2; i++) pthread_create(&th[i], NULL, grammar_loop, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(th[i], &r[i]);
    CHECK(r[0] == NULL && r[1] == NULL);
    bs_tokenizer_free(t2);
    bs_model_free(small);
}

/* ---- refusals --------------------------------------------------------------------------------- */

static void test_refusals(bs_model *m, const bs_tokenizer *tok) {
    bs_lora *l = bs_lora_adapter_load(m, lora_path);
    CHECKF(l, "%s", bitspark_last_error());
    bs_model_params mp = bs_model_default_params();
    mp.vocab_only = true;
    bs_model *v = bs_model_load(model_path, &mp);
    CHECK(v && l && bs_lora_attach(v, l, 1.0f) == -1 && strstr(bitspark_last_error(), "vocabulary-only"));
    bs_lora_detach(v);   /* nothing attached: a no-op */
    bs_model_free(v);
    /* a model freed with the adapter still attached (the leak check of the sanitizer build) */
    bs_model *m2 = bs_model_load(model_path, NULL);
    CHECK(m2 && l && !bs_lora_attach(m2, l, 0.5f));
    bs_model_free(m2);
    bs_lora_free(l);
    /* an image grid whose row count overflows an int, in a context whose sides it fits */
    bs_session_params sp = bs_session_default_params();
    sp.n_threads = 1;
    sp.n_ctx = 70000;
    bs_session *s = bs_session_new(m, &sp);
    float *embd = calloc(16, sizeof *embd);
    CHECK(s && bs_eval_image(s, embd, 65536, 65536, BS_LOGITS_NONE, NULL, NULL) == -1);
    CHECK(s && bs_eval_image(s, embd, 65536, 65537, BS_LOGITS_NONE, NULL, NULL) == -1);
    CHECK(s && bs_session_n_past(s) == 0);
    free(embd);
    bs_session_free(s);
    /* preserved tokens: 16 at most, a 17th is an error */
    bs_detok *d = bs_detok_new(tok, false);
    int ok = 0, refused = 0;
    for (int32_t id = 0; id < 17; id++) {   /* any 17 distinct tokens */
        const char *text = bs_token_text(tok, id);
        if (text && bs_detok_preserve(d, text) == 0) ok++;
        else refused++;
    }
    CHECK(bs_detok_preserve(d, bs_token_text(tok, 3)) == 0);   /* one preserved already: fine */
    CHECKF(ok == 16 && refused == 1, "preserved %d, refused %d", ok, refused);
    bs_detok_free(d);
    /* tool calls counted but not given */
    bs_chat_msg msgs[2] = {{.role = "user", .content = "hi"}, {.role = "assistant", .content = "", .n_tool_calls = 3}};
    char *text = bs_chat_apply(m, msgs, 2, true, -1);
    CHECK(!text && strstr(bitspark_last_error(), "tool calls"));
    free(text);
}

int main(void) {
    const char *src = getenv("BS_SRC"), *fx = getenv("BS_FIXTURES");
    if (!src || !fx) {
        fprintf(stderr, "test_api_misuse: BS_SRC or BS_FIXTURES is not set: skipped\n");
        return 77;
    }
    snprintf(model_path, sizeof model_path, "%s/models/bonsai-tiny-q1_0.gguf", src);
    snprintf(lora_path, sizeof lora_path, "%s/models/bonsai-tiny-antidoom-lora.gguf", src);
    snprintf(small_path, sizeof small_path, "%s/tiny-q1_0.gguf", fx);
    snprintf(drafter_path, sizeof drafter_path, "%s/models/bonsai-tiny-dspark.gguf", src);
    bs_log_set_level(BS_LOG_QUIET);
    bs_model *m = bs_model_load(model_path, NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    CHECKF(tok, "%s", bitspark_last_error());
    if (!tok) return test_summary("test_api_misuse");
    test_gen_cache(m, tok);
    test_no_draft_then_draft(m, tok);
    test_rollback_abort(m);
    test_sampling(tok);
    test_grammar_threads(tok);
    test_refusals(m, tok);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return test_summary("test_api_misuse");
}
