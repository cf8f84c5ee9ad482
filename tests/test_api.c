/* test_api.c: the public API's newer functions, through bitspark.h alone, on the trained tiny
 * model in models/ (and its drafter and LoRA adapter):
 *   - logging: the log callback receives the `device:` line (nothing is printed then), levels;
 *     the load-progress callback (monotone, ends at 1, cancels); the abort callback (stops
 *     between batches, the evaluated part kept and continuable bit-exactly);
 *   - metadata and a vocab-only load (same tokens, no sessions);
 *   - *_default_params: the generator's defaults draft (a zeroed bs_gen_params does not);
 *   - bs_multi_eval: the logits of each sequence alone, and per-sequence rollback;
 *   - the sampler chain: a hand-written greedy loop under a grammar / JSON schema gives the
 *     engine's tokens for the same request; accept refuses what the grammar refuses; reset
 *     replays a seeded run;
 *   - token pieces and the streaming detokenizer (UTF-8 split across tokens);
 *   - embeddings (pooled = normalized mean of the per-token rows, last, unit norm);
 *   - LoRA at run time (changes the logits, scale 0 and detach give the base exactly). */
#include "bitspark.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The lowest id of the largest value among those not in skip[0..n_skip) (the test's own argmax
 * and, repeated, its k best in the sampler's order) */
static int32_t best_of(const float *w, int nv, const int32_t *skip, int n_skip) {
    int32_t best = -1;
    for (int32_t i = 0; i < nv; i++) {
        int skipped = 0;
        for (int j = 0; j < n_skip; j++) skipped |= skip[j] == i;
        if (!skipped && w[i] == w[i] && (best < 0 || w[i] > w[best])) best = i;
    }
    return best;
}

static char model_path[1024], drafter_path[1024], lora_path[1024];

/* ---- logging, progress, abort ---------------------------------------------------------------- */

typedef struct { char text[4096]; int n; int max_level; } log_capture;

static void on_log(int level, const char *text, void *ud) {
    log_capture *c = ud;
    c->n++;
    if (level > c->max_level) c->max_level = level;
    strncat(c->text, text, sizeof c->text - strlen(c->text) - 1);
}

typedef struct { int calls; float last; bool monotone; int cancel_at; } progress_seen;

static bool on_progress(float done, void *ud) {
    progress_seen *p = ud;
    if (done < p->last) p->monotone = false;
    p->last = done;
    return ++p->calls != p->cancel_at;
}

static void test_logging(void) {
    log_capture c = {{0}, 0, 0};
    bs_log_set(on_log, &c);
    progress_seen ps = {0, 0, true, -1};
    bs_model_params mp = bs_model_default_params();
    mp.progress = on_progress;
    mp.progress_ud = &ps;
    bs_model *m = bs_model_load(model_path, &mp);
    CHECKF(m, "%s", bitspark_last_error());
    CHECKF(strstr(c.text, "device: CPU") != NULL, "log callback got [%s]", c.text);
    CHECK(c.max_level == BS_LOG_INFO);
    CHECKF(ps.calls >= 2 && ps.monotone && ps.last == 1.0f, "%d calls, last %g", ps.calls, ps.last);
    bs_model_free(m);

    c.n = 0;
    bs_log_set_level(BS_LOG_QUIET);
    m = bs_model_load(model_path, NULL);
    CHECK(m && c.n == 0);
    bs_model_free(m);
    bs_log_set_level(BS_LOG_INFO);

    ps = (progress_seen){0, 0, true, 2};   /* cancel at the second report */
    m = bs_model_load(model_path, &mp);
    CHECKF(!m && strstr(bitspark_last_error(), "cancelled"), "%s", bitspark_last_error());
    bs_model_free(m);
    bs_log_set(NULL, NULL);
}

static int abort_after;
static bool on_abort(void *ud) {
    int *calls = ud;
    return ++*calls > abort_after;
}

static void test_abort(bs_model *m) {
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 100 + 37 * i;
    const int nv = bs_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * nv), *got = malloc(sizeof(float) * nv);
    bs_session_params sp = bs_session_default_params();
    sp.n_batch = 4;
    sp.n_threads = 1;
    bs_session *a = bs_session_new(m, &sp), *b = bs_session_new(m, &sp);
    CHECK(a && b && !bs_eval(a, ids, 12, BS_LOGITS_LAST, ref, NULL));
    int calls = 0;
    abort_after = 2;
    bs_session_set_abort(b, on_abort, &calls);
    CHECKF(bs_eval(b, ids, 12, BS_LOGITS_LAST, got, NULL) < 0 && strstr(bitspark_last_error(), "aborted"), "%s",
           bitspark_last_error());
    CHECK_EQ_INT(bs_session_n_past(b), 8);   /* two batches of 4 went through */
    bs_session_set_abort(b, NULL, NULL);
    CHECK(!bs_eval(b, ids + 8, 4, BS_LOGITS_LAST, got, NULL));
    CHECK(!memcmp(ref, got, sizeof(float) * nv));
    bs_session_free(a);
    bs_session_free(b);
    free(ref);
    free(got);
}

/* ---- metadata, vocab-only, defaults ------------------------------------------------------------ */

static void test_metadata(bs_model *m, const bs_tokenizer *tok) {
    CHECK_STR(bs_model_name(m), "bitspark-bonsai-tiny");
    CHECK_STR(bs_model_meta_str(m, "general.architecture"), "qwen35");
    CHECK(bs_model_meta_str(m, "no.such.key") == NULL);
    struct stat st;
    CHECK(!stat(model_path, &st) && bs_model_size(m) == (uint64_t)st.st_size);
    const uint64_t np = bs_model_n_params(m), emb = (uint64_t)bs_model_n_vocab(m) * bs_model_n_embd(m);
    /* at least the token embedding and the LM head; Q1_0 stores at least one bit per weight */
    CHECKF(np >= 2 * emb && np <= 8 * bs_model_size(m), "%llu params", (unsigned long long)np);
    CHECK_EQ_INT(bs_model_n_ctx_train(m), 8192);
    CHECKF(!strncmp(bs_model_device(m), "CPU", 3), "device %s", bs_model_device(m));
    const char *tmpl = bs_model_chat_template(m);
    CHECK(!tmpl || strlen(tmpl) > 0);
    CHECK(!bs_model_is_vocab_only(m));

    bs_model_params mp = bs_model_default_params();
    mp.vocab_only = true;
    bs_model *v = bs_model_load(model_path, &mp);
    CHECKF(v, "%s", bitspark_last_error());
    if (!v) return;
    CHECK(bs_model_is_vocab_only(v) && bs_model_n_vocab(v) == bs_model_n_vocab(m));
    CHECK_STR(bs_model_name(v), "bitspark-bonsai-tiny");
    bs_tokenizer *vt = bs_tokenizer_load(v);
    const char *text = "Vocab-only loads still tokenize: <|im_start|>user";
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(vt && !bs_tokenize(vt, text, strlen(text), true, &a, &na) && !bs_tokenize(tok, text, strlen(text), true, &b, &nb));
    CHECK(na == nb && na > 0 && !memcmp(a, b, na * sizeof *a));
    CHECKF(!bs_session_new(v, NULL) && strstr(bitspark_last_error(), "vocab-only"), "%s", bitspark_last_error());
    CHECK(!bs_drafter_load(drafter_path, v));
    CHECK(!bs_lora_adapter_load(v, lora_path));
    free(a);
    free(b);
    bs_tokenizer_free(vt);
    bs_model_free(v);
}

static const int32_t *prompt_ids(const bs_tokenizer *tok, const char *text, size_t *n) {
    int32_t *ids = NULL;
    CHECK(!bs_tokenize_prompt(tok, text, strlen(text), &ids, n));
    return ids;
}

static void test_defaults(bs_model *m, const bs_tokenizer *tok) {
    bs_gen_params gp = bs_gen_default_params();
    CHECK(gp.draft_max == BS_DRAFT_AUTO && gp.n_threads >= 1 && gp.draft_window == 0);
    bs_session_params sp = bs_session_default_params();
    CHECK(sp.n_batch == 512 && sp.kv_type == BS_KV_F16 && sp.n_threads >= 1 && sp.n_rollback == 16);
    bs_gen_request r = bs_gen_request_default_params();
    CHECK(r.n_predict == -1 && r.loop.mode == BS_LOOP_GUARD_OFF && r.sp.seed != 0);

    /* the generator's defaults draft; a zeroed struct with the same drafter does not. Auto depth
     * starts from the measured costs of earlier runs (the cost cache): an empty cache of its own,
     * so what other runs on this machine measured cannot decide it */
    char cache[1024];
    snprintf(cache, sizeof cache, "%s/test_api_cache.XXXXXX", getenv("BS_TMP") ? getenv("BS_TMP") : "/tmp");
    mkdir(getenv("BS_TMP") ? getenv("BS_TMP") : "/tmp", 0755);
    CHECK(mkdtemp(cache) != NULL && setenv("XDG_CACHE_HOME", cache, 1) == 0);
    bs_drafter *d = bs_drafter_load(drafter_path, m);
    CHECKF(d, "%s", bitspark_last_error());
    if (!d) return;
    size_t n;
    const int32_t *ids = prompt_ids(tok, "The quick brown fox", &n);
    long drafted[2];
    for (int k = 0; k < 2; k++) {
        bs_gen_params p = k ? (bs_gen_params){.n_threads = 1} : bs_gen_default_params();
        p.drafter = d;
        p.n_threads = 1;
        bs_gen *g = bs_gen_new(m, tok, &p);
        bs_gen_request rq = bs_gen_request_default_params();
        rq.sp.temp = 0;
        rq.n_predict = 24;
        CHECK(g && !bs_gen_begin(g, &rq, ids, (int)n) && !bs_gen_run(g, NULL, NULL));
        drafted[k] = g ? bs_gen_get_stats(g)->n_drafted : -1;
        bs_gen_free(g);
    }
    CHECKF(drafted[0] > 0 && drafted[1] == 0, "drafted %ld with the defaults, %ld zeroed", drafted[0], drafted[1]);
    free((void *)ids);
    bs_drafter_free(d);
}

/* ---- several sequences in one pass --------------------------------------------------------------- */

static void test_multi(bs_model *m) {
    const int nv = bs_model_n_vocab(m);
    static const int32_t pa[] = {957, 117, 851, 10, 87}, pb[] = {276, 101, 33};
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *alone[2] = {bs_session_new(m, &sp), bs_session_new(m, &sp)};
    bs_session *bat[2] = {bs_session_new(m, &sp), bs_session_new(m, &sp)};
    float *la = malloc(sizeof(float) * nv * 5), *lb = malloc(sizeof(float) * nv), *ra = malloc(sizeof(float) * nv * 5),
          *rb = malloc(sizeof(float) * nv);
    bs_multi *mb = bs_multi_new(m, 16, 8, 2);
    CHECKF(mb, "%s", bitspark_last_error());
    CHECK(!bs_multi_new(m, 4, 8, 1));   /* more logit rows than rows */
    CHECK(!bs_eval(alone[0], pa, 5, BS_LOGITS_ALL, ra, NULL) && !bs_eval(alone[1], pb, 3, BS_LOGITS_LAST, rb, NULL));
    bs_batch_seq seqs[2] = {{.s = bat[0], .tokens = pa, .n = 5, .logits_mode = BS_LOGITS_ALL, .logits = la},
                            {.s = bat[1], .tokens = pb, .n = 3, .logits_mode = BS_LOGITS_LAST, .logits = lb}};
    CHECKF(!bs_multi_eval(mb, seqs, 2), "%s", bitspark_last_error());
    CHECK(!memcmp(la, ra, sizeof(float) * nv * 5) && !memcmp(lb, rb, sizeof(float) * nv));
    CHECK(bs_session_n_past(bat[0]) == 5 && bs_session_n_past(bat[1]) == 3);

    /* a decode step for both, then sequence 0 alone rolls back and takes another token */
    const int32_t step[2] = {258, 33}, other = 400;
    seqs[0] = (bs_batch_seq){.s = bat[0], .tokens = &step[0], .n = 1, .logits_mode = BS_LOGITS_LAST, .logits = la};
    seqs[1] = (bs_batch_seq){.s = bat[1], .tokens = &step[1], .n = 1, .logits_mode = BS_LOGITS_LAST, .logits = lb};
    CHECK(!bs_multi_eval(mb, seqs, 2));
    CHECK(!bs_eval(alone[1], &step[1], 1, BS_LOGITS_LAST, rb, NULL) && !memcmp(lb, rb, sizeof(float) * nv));
    CHECK(!bs_session_rollback(bat[0], 5) && bs_session_n_past(bat[1]) == 4);
    seqs[0].tokens = &other;
    CHECK(!bs_multi_eval(mb, seqs, 1));
    CHECK(!bs_eval(alone[0], &other, 1, BS_LOGITS_LAST, ra, NULL) && !memcmp(la, ra, sizeof(float) * nv));

    /* the k best instead of (beside) the rows: bs_eval_top's list, in the sampler's order */
    int32_t ti[2][BS_TOP_MAX], ri[BS_TOP_MAX];
    float tv[2][BS_TOP_MAX], rv[BS_TOP_MAX];
    int nt[2] = {-1, -1};
    const int32_t more[2] = {5, 6};
    for (int k = 0; k < 2; k++) {
        seqs[k] = (bs_batch_seq){.s = bat[k], .tokens = &more[k], .n = 1, .logits_mode = BS_LOGITS_LAST,
                                 .logits = k ? lb : la, .top_k = k ? BS_TOP_MAX : 7, .top_ids = ti[k], .top_logits = tv[k],
                                 .n_top = &nt[k]};
    }
    CHECKF(!bs_multi_eval(mb, seqs, 2), "%s", bitspark_last_error());
    for (int k = 0; k < 2; k++) {
        const int want = k ? BS_TOP_MAX : 7;
        const int got = bs_eval_top(alone[k], &more[k], 1, want, ri, rv);
        CHECKF(got == want && nt[k] == want && !memcmp(ti[k], ri, sizeof *ri * (size_t)want) &&
               !memcmp(tv[k], rv, sizeof *rv * (size_t)want), "top-%d of sequence %d: %d / %d", want, k, nt[k], got);
        for (int i = 1; i < want; i++) CHECK(rv[i - 1] > rv[i] || (rv[i - 1] == rv[i] && ri[i - 1] < ri[i]));
    }
    CHECK(bs_eval_top(alone[0], &more[0], 1, BS_TOP_MAX + 1, ri, rv) < 0 && bs_session_n_past(alone[0]) == 7);
    seqs[0].top_k = BS_TOP_MAX + 1;   /* too many, or both an argmax and a top-k: refused */
    CHECK(bs_multi_eval(mb, seqs, 2) < 0 && bs_session_n_past(bat[0]) == 7);
    int32_t nx;
    seqs[0].top_k = 3, seqs[0].next = &nx;
    CHECK(bs_multi_eval(mb, seqs, 2) < 0 && bs_session_n_past(bat[0]) == 7);
    seqs[0].next = NULL;

    /* every row's greedy token and k best (speculative verification): those of its row */
    {
        const int32_t four[4] = {7, 8, 9, 10}, two[2] = {11, 12};
        float *rows4 = malloc(sizeof(float) * nv * 4), *rows2 = malloc(sizeof(float) * nv * 2);
        int32_t nx4[4] = {-1, -1, -1, -1}, li[2][5], ri2[5];
        float lv[2][5], rv2[5];
        int nt2[2] = {-1, -1};
        seqs[0] = (bs_batch_seq){.s = bat[0], .tokens = four, .n = 4, .logits_mode = BS_LOGITS_ALL, .logits = rows4, .next = nx4};
        seqs[1] = (bs_batch_seq){.s = bat[1], .tokens = two, .n = 2, .logits_mode = BS_LOGITS_ALL, .logits = rows2,
                                 .top_k = 5, .top_ids = &li[0][0], .top_logits = &lv[0][0], .n_top = nt2};
        CHECKF(!bs_multi_eval(mb, seqs, 2), "%s", bitspark_last_error());
        int ok = 1;
        for (int r = 0; r < 4; r++) ok &= nx4[r] == best_of(rows4 + (size_t)r * nv, nv, NULL, 0);
        CHECKF(ok, "ALL rows with next: each row's argmax");
        for (int r = 0; r < 2; r++) {
            int c = 0;
            for (; c < 5; c++) rv2[c] = rows2[(size_t)r * nv + (ri2[c] = best_of(rows2 + (size_t)r * nv, nv, ri2, c))];
            CHECKF(nt2[r] == c && c == 5 && !memcmp(li[r], ri2, sizeof ri2) && !memcmp(lv[r], rv2, sizeof rv2),
                   "ALL rows with top-k: row %d's list", r);
        }
        CHECK(!bs_session_rollback(bat[0], 7) && !bs_session_rollback(bat[1], 5));
        free(rows4);
        free(rows2);
    }

    /* bad input changes nothing */
    const int32_t bad = nv + 5;
    seqs[0].tokens = &bad;
    CHECK(bs_multi_eval(mb, seqs, 2) < 0 && bs_session_n_past(bat[0]) == 7 && bs_session_n_past(bat[1]) == 5);
    bs_multi_free(mb);
    for (int k = 0; k < 2; k++) {
        bs_session_free(alone[k]);
        bs_session_free(bat[k]);
    }
    free(la);
    free(lb);
    free(ra);
    free(rb);
}

/* ---- the sampler chain --------------------------------------------------------------------------- */

/* Greedy tokens of the engine for prompt under gbnf (may be NULL). */
static int engine_tokens(bs_model *m, const bs_tokenizer *tok, const int32_t *ids, size_t n, const char *gbnf,
                         int32_t *out, int max) {
    bs_gen_params p = {.n_threads = 1};
    bs_gen *g = bs_gen_new(m, tok, &p);
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = max;
    r.grammar = gbnf;
    int k = 0;
    if (g && !bs_gen_begin(g, &r, ids, (int)n) && !bs_gen_run(g, NULL, NULL)) {
        bs_gen_output o;
        bs_gen_output_get(g, &o);
        for (; k < o.n_toks && k < max; k++) out[k] = o.toks[k].id;
    } else {
        fprintf(stderr, "engine: %s\n", bitspark_last_error());
    }
    bs_gen_free(g);
    return k;
}

/* The same by hand: bs_eval, the chain, accept; stops at end of generation (not kept). */
static int loop_tokens(bs_model *m, const bs_tokenizer *tok, bs_sampler_chain *c, const int32_t *ids, size_t n,
                       int32_t *out, int max) {
    const int nv = bs_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * nv);
    bs_session_params sp = {.n_ctx = 256, .n_threads = 1};
    bs_session *s = bs_session_new(m, &sp);
    int k = 0;
    if (s && !bs_eval(s, ids, (int)n, BS_LOGITS_LAST, logits, NULL)) {
        for (; k < max; k++) {
            const int32_t id = bs_sampler_chain_sample(c, logits);
            if (id < 0 || bs_token_is_eog(tok, id)) break;
            CHECK(!bs_sampler_chain_accept(c, id));
            out[k] = id;
            if (bs_eval(s, &id, 1, BS_LOGITS_LAST, logits, NULL)) break;
        }
    }
    bs_session_free(s);
    free(logits);
    return k;
}

static void test_sampler(bs_model *m, const bs_tokenizer *tok) {
    size_t n;
    const int32_t *ids = prompt_ids(tok, "The answer as JSON:", &n);
    enum { MAX = 40 };
    int32_t a[MAX], b[MAX];
    const char *gbnf = "root ::= \"{\\\"a\\\": \" [0-9] [0-9]? \"}\"";
    bs_sampler_params greedy = bs_sampler_default_params();
    greedy.temp = 0;
    for (int with = 0; with < 2; with++) {
        bs_sampler_chain *c = bs_sampler_chain_new(&greedy, tok, bs_model_n_vocab(m));
        CHECKF(c, "%s", bitspark_last_error());
        if (!c) return;
        CHECK(!with || !bs_sampler_chain_set_grammar(c, gbnf));
        const int na = engine_tokens(m, tok, ids, n, with ? gbnf : NULL, a, MAX);
        const int nb = loop_tokens(m, tok, c, ids, n, b, MAX);
        CHECKF(na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * na), "grammar %d: %d vs %d tokens", with, na, nb);
        if (with) {
            char *text = NULL;
            size_t len;
            CHECK(!bs_detokenize(tok, b, (size_t)nb, false, &text, &len));
            CHECKF(text && text[0] == '{' && strstr(text, "\"a\": ") && text[len - 1] == '}', "[%s]", text);
            CHECK(bs_sampler_chain_grammar_complete(c));
            free(text);
            /* what the grammar refuses is refused: the first token again after the close */
            CHECKF(bs_sampler_chain_accept(c, b[0]) < 0, "accepted %d", b[0]);
        }
        bs_sampler_chain_free(c);
    }
    /* a JSON schema; candidates only what it allows */
    bs_sampler_chain *c = bs_sampler_chain_new(NULL, tok, 0);
    CHECK(c && !bs_sampler_chain_set_json_schema(c, "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}},"
                                                    " \"required\": [\"n\"]}"));
    CHECK(bs_sampler_chain_set_json_schema(c, "{\"type\": \"no-such-type\"}") < 0);
    CHECK(bs_sampler_chain_set_grammar(c, "root ::= undefined-rule") < 0);
    const int nv = bs_model_n_vocab(m);
    float *flat = calloc((size_t)nv, sizeof(float));
    int32_t cid[8];
    float cp[8];
    CHECK(bs_sampler_chain_apply(c, flat) > 0);
    const int nc = bs_sampler_chain_candidates(c, cid, cp, 8);
    for (int i = 0; i < nc; i++) {
        const char *piece;
        size_t len;
        CHECK(!bs_token_to_piece(tok, cid[i], false, &piece, &len));
        CHECKF(len > 0 && (piece[0] == '{' || piece[0] == ' ' || piece[0] == '\n' || piece[0] == '\t'),
               "candidate %d [%.*s]", cid[i], (int)len, piece);
    }
    bs_sampler_chain_free(c);

    /* seeded sampling, reset: the same draws again */
    bs_sampler_params hot = bs_sampler_default_params();
    hot.temp = 1.5f;
    hot.top_k = 0;
    hot.seed = 1234;
    c = bs_sampler_chain_new(&hot, tok, nv);
    for (int i = 0; i < nv; i++) flat[i] = (float)((i * 7919) % 101) / 25.0f;
    int32_t first[16];
    for (int i = 0; i < 16; i++) CHECK(!bs_sampler_chain_accept(c, first[i] = bs_sampler_chain_sample(c, flat)));
    bool varied = false;
    for (int i = 1; i < 16; i++) varied |= first[i] != first[0];
    CHECK(varied);
    bs_sampler_chain_reset(c);
    int same = 0;
    for (int i = 0; i < 16; i++) same += bs_sampler_chain_sample(c, flat) == first[i];
    CHECK_EQ_INT(same, 16);
    CHECK(bs_sampler_chain_accept(c, nv) < 0 && bs_sampler_chain_set_logit_bias(c, -1, 0) < 0);
    bs_sampler_chain_free(c);
    free(flat);
    free((void *)ids);
}

/* ---- text ---------------------------------------------------------------------------------------- */

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        const size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] >> 6) != 2) return false;
        i += k;
    }
    return true;
}

static void test_detok(const bs_tokenizer *tok) {
    const char *text = "Grüße, 世界! 🙂 naïve café";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(!bs_tokenize(tok, text, strlen(text), false, &ids, &n));
    char joined[256] = "", pieces[256] = "";
    size_t jl = 0, pl = 0;
    bool split = false;
    bs_detok *d = bs_detok_new(tok, false);
    CHECK(d != NULL);
    for (size_t i = 0; d && i < n; i++) {
        const char *t, *p;
        size_t len, plen;
        CHECK(!bs_detok_push(d, ids[i], &t, &len) && valid_utf8(t, len));
        CHECK(!bs_token_to_piece(tok, ids[i], false, &p, &plen));
        split |= !valid_utf8(p, plen);   /* some token holds part of a character */
        if (jl + len < sizeof joined) memcpy(joined + jl, t, len), jl += len;
        if (pl + plen < sizeof pieces) memcpy(pieces + pl, p, plen), pl += plen;
    }
    const char *t;
    size_t len;
    bs_detok_flush(d, &t, &len);
    CHECK(len == 0);
    CHECKF(jl == strlen(text) && !memcmp(joined, text, jl), "[%.*s]", (int)jl, joined);
    CHECK(pl == strlen(text) && !memcmp(pieces, text, pl));
    CHECKF(split, "no token split a character: the streaming test proves nothing");
    CHECK(bs_token_to_piece(tok, -1, false, &t, &len) < 0);
    /* a character's first byte alone (byte-level BPE has a token for it) is held back, and the
     * flush makes it U+FFFD */
    int32_t lead = -1;
    for (int32_t id = 0; lead < 0 && id < bs_tokenizer_n_vocab(tok); id++) {
        const char *p;
        size_t plen;
        if (!bs_token_to_piece(tok, id, false, &p, &plen) && plen == 1 && (unsigned char)p[0] >= 0xC2) lead = id;
    }
    CHECK(lead >= 0);
    if (lead >= 0) {
        CHECK(!bs_detok_push(d, lead, &t, &len) && len == 0);
        bs_detok_flush(d, &t, &len);
        CHECKF(len == 3 && !memcmp(t, "\xEF\xBF\xBD", 3), "flush gave %zu bytes", len);
    }
    bs_detok_free(d);
    free(ids);
}

/* ---- embeddings ---------------------------------------------------------------------------------- */

static void test_embed(bs_model *m, const bs_tokenizer *tok) {
    const int E = bs_model_n_embd(m);
    size_t n;
    const int32_t *ids = prompt_ids(tok, "Embeddings of a sentence", &n);
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *s = bs_session_new(m, &sp);
    float *rows = malloc(sizeof(float) * E * n), *mean = malloc(sizeof(float) * E), *last = malloc(sizeof(float) * E);
    CHECK(!bs_embed(s, ids, (int)n, BS_POOL_NONE, rows));
    CHECK(!bs_embed(s, ids, (int)n, BS_POOL_MEAN, mean) && !bs_embed(s, ids, (int)n, BS_POOL_LAST, last));
    CHECK(bs_session_n_past(s) == (int)n && bs_session_n_taps(s) == 0);
    double nm = 0, nl = 0, nr = 0, err_mean = 0, err_last = 0, diff = 0;
    for (int k = 0; k < E; k++) {
        double acc = 0;
        for (size_t i = 0; i < n; i++) acc += rows[i * E + k];
        nr += acc * acc;
        nm += (double)mean[k] * mean[k];
        nl += (double)last[k] * last[k];
    }
    double nlast = 0;
    for (int k = 0; k < E; k++) nlast += (double)rows[(n - 1) * E + k] * rows[(n - 1) * E + k];
    for (int k = 0; k < E; k++) {
        double acc = 0;
        for (size_t i = 0; i < n; i++) acc += rows[i * E + k];
        err_mean = fmax(err_mean, fabs(acc / sqrt(nr) - mean[k]));
        err_last = fmax(err_last, fabs(rows[(n - 1) * E + k] / sqrt(nlast) - last[k]));
        diff += fabs(mean[k] - last[k]);
    }
    CHECKF(fabs(nm - 1) < 1e-4 && fabs(nl - 1) < 1e-4, "norms %g %g", nm, nl);
    CHECKF(err_mean < 1e-5 && err_last < 1e-5, "mean %g, last %g", err_mean, err_last);
    CHECK(diff > 1e-3);
    CHECK(bs_embed(s, ids, (int)n, 7, mean) < 0);
    bs_session_free(s);
    free(rows);
    free(mean);
    free(last);
    free((void *)ids);
}

/* ---- LoRA ---------------------------------------------------------------------------------------- */

/* max |a - b| (a plain compare: gcc 12's aarch64 vectorizer crashes on an fmax reduction here) */
static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) {
        const double x = fabs((double)a[i] - b[i]);
        if (x > d) d = x;
    }
    return d;
}

static void test_lora(bs_model *m) {
    const int nv = bs_model_n_vocab(m);
    static const int32_t ids[] = {957, 117, 851, 10, 87, 114, 276};
    float *base = malloc(sizeof(float) * nv), *got = malloc(sizeof(float) * nv);
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *s = bs_session_new(m, &sp);
    CHECK(s && !bs_eval(s, ids, 7, BS_LOGITS_LAST, base, NULL));
    bs_lora *l = bs_lora_adapter_load(m, lora_path);
    CHECKF(l, "%s", bitspark_last_error());
    CHECK(!bs_lora_adapter_load(m, model_path));   /* a model is not an adapter */
    if (l) {
        CHECKF(!bs_lora_attach(m, l, 1.0f), "%s", bitspark_last_error());
        bs_session_reset(s);
        CHECK(!bs_eval(s, ids, 7, BS_LOGITS_LAST, got, NULL));
        double d = max_diff(got, base, nv);
        CHECKF(d > 1e-3, "the adapter changed the logits by %g only", d);
        bs_lora_detach(m);
        bs_session_reset(s);
        CHECK(!bs_eval(s, ids, 7, BS_LOGITS_LAST, got, NULL) && !memcmp(got, base, sizeof(float) * nv));
        CHECK(!bs_lora_attach(m, l, 0.0f));
        bs_session_reset(s);
        CHECK(!bs_eval(s, ids, 7, BS_LOGITS_LAST, got, NULL));
        d = max_diff(got, base, nv);
        CHECKF(d < 1e-5, "scale 0 moved the logits by %g", d);
        bs_lora_detach(m);
        bs_lora_free(l);
    }
    bs_session_free(s);
    free(base);
    free(got);
}

int main(void) {
    const char *src = getenv("BS_SRC");
    if (!src) {
        fprintf(stderr, "test_api: BS_SRC is not set: skipped\n");
        return 77;
    }
    snprintf(model_path, sizeof model_path, "%s/models/bonsai-tiny-q1_0.gguf", src);
    snprintf(drafter_path, sizeof drafter_path, "%s/models/bonsai-tiny-dspark.gguf", src);
    snprintf(lora_path, sizeof lora_path, "%s/models/bonsai-tiny-antidoom-lora.gguf", src);
    test_logging();
    bs_log_set_level(BS_LOG_QUIET);
    bs_model *m = bs_model_load(model_path, NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    CHECKF(tok, "%s", bitspark_last_error());
    if (!tok) return test_summary("test_api");
    test_abort(m);
    test_metadata(m, tok);
    test_defaults(m, tok);
    test_multi(m);
    test_sampler(m, tok);
    test_detok(tok);
    test_embed(m, tok);
    test_lora(m);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return test_summary("test_api");
}
