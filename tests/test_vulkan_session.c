/* test_vulkan_session.c: sessions of a model on the Vulkan device (lavapipe in CI, named as
 * --device vulkan names it), validation layer on (any message fails). Bit for bit:
 *  - verifying w = 1..8 tokens in one evaluation gives each row the logits of one-token
 *    evaluations, and a prompt cut into batches of any size the same logits;
 *  - rollback inside the last batch (small and prompt-sized) leaves the session as if the
 *    rolled-back tokens had never been evaluated; up to 17 rows by replaying their recurrence
 *    (no weights read, one submission), longer steps by evaluating the kept rows again;
 *  - state save / load into a fresh session (and reset) round-trip;
 *  - undo off (one-token steps without the snapshot) changes nothing;
 *  - greedy steps (bs_eval_greedy: the argmax on the device) pick the argmax of the logits
 *    rows, lowest id on ties, reading back the token id only (<= 16 KB a step, not the row);
 *  - every row's greedy id and k best (a verification pass, bs_eval_seq) over more rows than
 *    one device submission takes: those of each row read back.
 * Exit 77 (skipped) without the backend, a loader or a device. */
#include "test.h"
#include "bitspark.h"
#include "io/util.h"
#include "vk_test.h"
#include "vulkan/backend.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "model/batch_eval.h"
#include "sample/sampler.h"

#include <stdlib.h>
#include <string.h>

static int V;

static bs_session *sess(bs_model *m, int n_batch) {
    bs_session_params sp = {.n_ctx = 256, .n_batch = n_batch, .n_rollback = 8};
    bs_session *s = bs_session_new(m, &sp);
    CHECKF(s != NULL, "%s", bitspark_last_error());
    return s;
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static int32_t argmax_first(const float *w, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (w[i] > w[best]) best = i;
    return best;
}

/* Greedy steps on a fresh session: the prompt then the draft tokens one by one, each step's
 * token the argmax of the reference logits (plast, then ref's rows), and a step's read-back
 * the token id, not the row. */
static void check_greedy(bs_model *m, const char *path, const int32_t *prompt, int np, const int32_t *draft, int nd,
                         const float *plast, const float *ref) {
    bs_session *g = sess(m, 512);
    int32_t next = -1;
    CHECK(bs_eval_greedy(g, prompt, np, &next, NULL) == 0);
    CHECKF(next == argmax_first(plast, V), "%s: greedy prompt token %d, logits say %d", path, next, argmax_first(plast, V));
    bs_vk_stats st0, st1;
    bs_vk_stats_get(m->vk, &st0);
    for (int i = 0; i < nd; i++) {
        CHECK(bs_eval_greedy(g, draft + i, 1, &next, NULL) == 0);
        const int32_t want = argmax_first(ref + (size_t)i * V, V);
        CHECKF(next == want, "%s: greedy step %d gave %d, the logits' argmax is %d", path, i, next, want);
    }
    bs_vk_stats_get(m->vk, &st1);
    const double per_step = (double)(st1.read_bytes - st0.read_bytes) / nd;
    CHECKF(per_step <= 16384 && per_step < 4.0 * V, "%s: a greedy step read back %.0f bytes", path, per_step);
    bs_session_free(g);
}

static int32_t ahead_stat(bs_model *m, bool undone) {
    bs_vk_stats st;
    bs_vk_stats_get(m->vk, &st);
    return (int32_t)(undone ? st.discarded : st.ahead);
}

/* Greedy decoding with undo off, each step's token the one before's (as `run` decodes): the
 * device runs the next step before the host asks (bs_vk_sess_decode_ahead). The tokens are
 * those of steps waited for one by one; leaving that path (another token, a state save, a
 * reset, the end of the context) undoes the step ahead exactly. */
static void check_ahead(bs_model *m, const char *path, const int32_t *prompt, int np, int32_t other) {
    enum { NG = 12 };
    bs_session *r = sess(m, 512), *g = sess(m, 512);
    bs_session_set_undo(g, 0);
    int32_t want[NG + 1], cur = -1, got = -1;
    CHECK(bs_eval_greedy(r, prompt, np, &want[0], NULL) == 0);   /* undo on: each step waited for */
    for (int i = 0; i < NG; i++) CHECK(bs_eval_greedy(r, &want[i], 1, &want[i + 1], NULL) == 0);
    const int32_t a0 = ahead_stat(m, false), d0 = ahead_stat(m, true);
    CHECK(bs_eval_greedy(g, prompt, np, &cur, NULL) == 0);
    CHECKF(cur == want[0], "%s: ahead: prompt token %d, want %d", path, cur, want[0]);
    for (int i = 0; i < NG; i++, cur = got) {
        CHECK(bs_eval_greedy(g, &cur, 1, &got, NULL) == 0);
        CHECKF(got == want[i + 1], "%s: ahead: step %d gave %d, waited steps %d", path, i, got, want[i + 1]);
    }
    CHECKF(ahead_stat(m, false) - a0 == NG && ahead_stat(m, true) == d0,
           "%s: %d steps went ahead (%d undone), want %d (0)", path, ahead_stat(m, false) - a0, ahead_stat(m, true) - d0, NG);
    /* a step the caller says is its last (bs_session_ahead_limit): the one under way is taken,
       none goes ahead after it, nothing is undone */
    bs_session_ahead_limit(g, bs_session_n_past(g) + 1);
    int32_t w_last = -1, g_last = -1;
    CHECK(bs_eval_greedy(r, &want[NG], 1, &w_last, NULL) == 0 && bs_eval_greedy(g, &cur, 1, &g_last, NULL) == 0);
    CHECKF(g_last == w_last && ahead_stat(m, false) - a0 == NG && ahead_stat(m, true) == d0,
           "%s: a last step gave %d (want %d), %d went ahead, %d undone", path, g_last, w_last, ahead_stat(m, false) - a0,
           ahead_stat(m, true) - d0);
    bs_session_ahead_limit(g, 0);
    int32_t w_more = -1;   /* one more step each: again one under way in g */
    CHECK(bs_eval_greedy(r, &w_last, 1, &w_more, NULL) == 0 && bs_eval_greedy(g, &g_last, 1, &got, NULL) == 0);
    CHECKF(got == w_more, "%s: after a last step, ahead again gave %d, want %d", path, got, w_more);
    /* another token than the argmax: the step ahead undone, the logits those of the reference */
    float *lg = malloc(sizeof(float) * (size_t)V), *lr = malloc(sizeof(float) * (size_t)V);
    CHECK(bs_eval(g, &other, 1, BS_LOGITS_LAST, lg, NULL) == 0 && bs_eval(r, &other, 1, BS_LOGITS_LAST, lr, NULL) == 0);
    CHECKF(same(lg, lr, (size_t)V), "%s: after decoding ahead, another token's logits differ", path);
    CHECKF(ahead_stat(m, true) - d0 == 1, "%s: the step ahead was not undone once", path);
    /* ahead again, then the state saved while a step is under way: the reference's bytes */
    cur = bs_argmax_lowest(lg, V);
    for (int i = 0; i < 3; i++, cur = got) {
        int32_t w = -1;
        CHECK(bs_eval_greedy(g, &cur, 1, &got, NULL) == 0 && bs_eval_greedy(r, &cur, 1, &w, NULL) == 0);
        CHECKF(got == w, "%s: ahead after a detour: step %d gave %d, want %d", path, i, got, w);
    }
    const size_t sz = bs_session_state_size(g);
    CHECK(sz == bs_session_state_size(r));
    uint8_t *sg = malloc(sz), *sr = malloc(sz);
    CHECK(bs_session_state_save(g, sg, sz) == 0 && bs_session_state_save(r, sr, sz) == 0);
    CHECKF(!memcmp(sg, sr, sz), "%s: the state saved with a step ahead under way differs", path);
    /* a reset with a step under way; then the context's end: the last step has none ahead */
    bs_session_params sp = {.n_ctx = np + 3, .n_batch = 512, .n_rollback = 8};
    bs_session *e = bs_session_new(m, &sp);
    CHECK(e != NULL);
    bs_session_set_undo(e, 0);
    bs_session_reset(g);
    CHECK(bs_eval_greedy(g, prompt, np, &cur, NULL) == 0 && bs_eval_greedy(e, prompt, np, &got, NULL) == 0);
    CHECKF(cur == want[0] && got == want[0], "%s: after a reset the prompt gave %d and %d, want %d", path, cur, got, want[0]);
    for (int i = 0; i < 3; i++) {
        int32_t ge = -1, gg = -2;
        CHECK(bs_eval_greedy(e, &got, 1, &ge, NULL) == 0 && bs_eval_greedy(g, &cur, 1, &gg, NULL) == 0);
        CHECKF(ge == gg, "%s: near the context's end step %d gave %d, want %d", path, i, ge, gg);
        got = ge;
        cur = gg;
    }
    CHECKF(bs_eval_greedy(e, &got, 1, &cur, NULL) != 0, "%s: a step past the context's end was evaluated", path);
    free(lg); free(lr); free(sg); free(sr);
    bs_session_free(r); bs_session_free(g); bs_session_free(e);
}

/* Sampling from the k best found on the device (bs_eval_top: topk.comp) against the whole row
 * read back: the same list (ids and bits, bs_top_lowest of the row), and with the default chain
 * (temperature 0.8, top-k 40) the same tokens from twin samplers; 8 bytes a candidate come back. */
static void check_top(bs_model *m, const char *path, const int32_t *prompt, int np) {
    bs_session *a = sess(m, 512), *b = sess(m, 512);
    float *row = malloc(sizeof(float) * (size_t)V), va[BS_TOP_MAX], vb[BS_TOP_MAX];
    int32_t ia[BS_TOP_MAX], ib[BS_TOP_MAX];
    bs_sampler_params p = bs_sampler_default_params();
    p.seed = 77;
    bs_sampler *sa = bs_sampler_new(&p, V), *sb = bs_sampler_new(&p, V);
    const int k = bs_sampler_top_k_only(sb, BS_TOP_MAX);
    CHECKF(k == 40, "%s: the default chain reads the top %d", path, k);
    CHECK(bs_eval(a, prompt, np, BS_LOGITS_LAST, row, NULL) == 0);
    int nb = bs_eval_top(b, prompt, np, k, ib, vb);
    bs_vk_stats st0, st1;
    for (int step = 0; step < 12; step++) {
        const int na = bs_top_lowest(row, V, k, ia, va);
        CHECKF(na == nb && !memcmp(ia, ib, sizeof *ia * (size_t)na) && !memcmp(va, vb, sizeof *va * (size_t)na),
               "%s: step %d: the device's top %d differ from the row's (%d / %d candidates)", path, step, k, nb, na);
        const int32_t ta = bs_sampler_sample(sa, row), tb = bs_sampler_sample_top(sb, ib, vb, nb);
        CHECKF(ta == tb && ta >= 0, "%s: step %d: sampled %d from the top, %d from the row", path, step, tb, ta);
        bs_sampler_accept(sa, ta);
        bs_sampler_accept(sb, tb);
        CHECK(bs_eval(a, &ta, 1, BS_LOGITS_LAST, row, NULL) == 0);
        bs_vk_stats_get(m->vk, &st0);
        nb = bs_eval_top(b, &tb, 1, step % 3 == 2 ? BS_TOP_MAX : k, ib, vb);   /* and the longest list */
        bs_vk_stats_get(m->vk, &st1);
        CHECKF(st1.read_bytes - st0.read_bytes <= 4 + 8 * BS_TOP_MAX, "%s: a top-k step read back %llu bytes", path,
               (unsigned long long)(st1.read_bytes - st0.read_bytes));
        if (step % 3 == 2) nb = BS_MIN(nb, k);
    }
    bs_sampler_free(sa);
    bs_sampler_free(sb);
    free(row);
    bs_session_free(a);
    bs_session_free(b);
}

/* Every row's greedy id, then every row's 9 best, of 150 rows (submissions of at most the
 * device's rows each) against the rows of another session. */
/* Rollback by replay (bs_vk_sess_replay): the kept rows' recurrence from the step's record, in
 * one submission that reads no weights; again inside the rows kept; and a step longer than the
 * record (REPLAY_ROWS) re-evaluated instead. Each continues with the bits of a session that
 * never saw the rolled-back rows. */
static void check_replay(bs_model *m, const char *path, const int32_t *prompt, int np, const int32_t *draft, int nd,
                         const float *ref) {
    float *tmp = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
    bs_vk_stats s0, s1;
    bs_session *s = sess(m, 512);
    CHECK(bs_eval(s, prompt, np, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval(s, draft, nd, BS_LOGITS_NONE, NULL, NULL) == 0);
    bs_vk_stats_get(m->vk, &s0);
    CHECK(bs_session_rollback(s, np + 5) == 0);
    bs_vk_stats_get(m->vk, &s1);
    CHECKF(s1.weight_bytes == s0.weight_bytes && s1.submits - s0.submits == 1,
           "%s: rollback of %d rows to 5 read %llu weight bytes in %llu submissions (a replay reads none, in one)", path, nd,
           (unsigned long long)(s1.weight_bytes - s0.weight_bytes), (unsigned long long)(s1.submits - s0.submits));
    CHECK(bs_session_rollback(s, np + 2) == 0);   /* inside the rows kept: replayed again */
    CHECK(bs_eval(s, draft + 2, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, ref + (size_t)2 * V, (size_t)V), "%s: rollback by replay (twice) is not exact", path);
    /* 30 rows: more than the record holds, so re-evaluated */
    const int p0 = np - 30;
    bs_session_reset(s);
    CHECK(bs_eval(s, prompt, p0, BS_LOGITS_NONE, NULL, NULL) == 0 && bs_eval(s, prompt + p0, 30, BS_LOGITS_NONE, NULL, NULL) == 0);
    bs_vk_stats_get(m->vk, &s0);
    CHECK(bs_session_rollback(s, p0 + 7) == 0);
    bs_vk_stats_get(m->vk, &s1);
    CHECKF(s1.weight_bytes > s0.weight_bytes, "%s: a 30-row step was not re-evaluated on rollback", path);
    CHECK(bs_eval(s, prompt + p0 + 7, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    bs_session *r = sess(m, 512);
    CHECK(bs_eval(r, prompt, p0 + 8, BS_LOGITS_LAST, want, NULL) == 0);
    CHECKF(same(tmp, want, (size_t)V), "%s: rollback of a step longer than the record is not exact", path);
    /* one evaluation of more rows than a submission takes (its later steps run on the held
     * state): a rollback into it is exact, though the last step's rows fit the record */
    const int big = bs_vk_sess_rows(s->vk) + 6;
    CHECKF(big <= np + nd, "%s: %d rows for a two-step evaluation, %d at hand", path, big, np + nd);
    if (big <= np + nd) {
        int32_t *all = malloc(sizeof(int32_t) * (size_t)(np + nd));
        memcpy(all, prompt, sizeof(int32_t) * (size_t)np);
        memcpy(all + np, draft, sizeof(int32_t) * (size_t)nd);
        bs_session_reset(s);
        CHECK(bs_eval(s, all, big, BS_LOGITS_NONE, NULL, NULL) == 0);
        CHECK(bs_session_rollback(s, 5) == 0);
        CHECK(bs_eval(s, all + 5, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
        bs_session_reset(r);
        CHECK(bs_eval(r, all, 6, BS_LOGITS_LAST, want, NULL) == 0);
        CHECKF(same(tmp, want, (size_t)V), "%s: rollback into a %d-row evaluation (two steps) is not exact", path, big);
        free(all);
    }
    printf("%s: rollback by replay: no weights read, one submission; exact, twice; a 30-row step re-evaluated; "
           "a two-step evaluation rolled back exactly\n", path);
    bs_session_free(r);
    bs_session_free(s);
    free(tmp);
    free(want);
}

static void check_all_rows(bs_model *m, const char *path) {
    enum { N = 150, K = 9 };
    bs_session *a = sess(m, 512), *b = sess(m, 512);
    int32_t tok[N], next[N], ids[N * K], nt[N], ri[K];
    float *rows = malloc(sizeof(float) * (size_t)V * N), *rb = malloc(sizeof(float) * (size_t)V * N), vals[N * K], rv[K];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 37 + 5) % V);
    CHECK(bs_eval(b, tok, N, BS_LOGITS_ALL, rb, NULL) == 0 && N > bs_vk_sess_rows(a->vk));
    bs_batch_seq q = {.s = a, .tokens = tok, .n = N, .logits_mode = BS_LOGITS_ALL, .logits = rows, .next = next};
    CHECK(bs_eval_seq(&q) == 0);
    int bad = 0;
    for (int r = 0; r < N; r++) bad += next[r] != bs_argmax_lowest(rb + (size_t)r * V, V);
    CHECKF(!bad, "%s: %d of %d rows' greedy ids differ from their rows'", path, bad, N);
    bs_session_reset(a);
    q = (bs_batch_seq){.s = a, .tokens = tok, .n = N, .logits_mode = BS_LOGITS_ALL, .logits = rows, .top_k = K,
                       .top_ids = ids, .top_logits = vals, .n_top = nt};
    CHECK(bs_eval_seq(&q) == 0);
    bad = 0;
    for (int r = 0; r < N; r++)
        bad += bs_top_lowest(rb + (size_t)r * V, V, K, ri, rv) != nt[r] || memcmp(ri, ids + r * K, sizeof ri) ||
               memcmp(rv, vals + r * K, sizeof rv);
    CHECKF(!bad, "%s: %d of %d rows' %d best differ from their rows'", path, bad, N, K);
    free(rows);
    free(rb);
    bs_session_free(a);
    bs_session_free(b);
}

static void check_model(const char *path) {
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(path, &mp);
    CHECKF(m != NULL, "%s: %s", path, bitspark_last_error());
    if (!m) return;
    V = bs_model_n_vocab(m);
    enum { NP = 70, ND = 8 };
    int32_t toks[NP + ND + 1];
    bs_rng r;
    bs_rng_seed(&r, 7);
    for (int i = 0; i < NP + ND + 1; i++) toks[i] = (int32_t)(bs_rng_next(&r) % (uint64_t)V);
    const int32_t *prompt = toks, *draft = toks + NP, x = toks[NP + ND];
    float *ref = malloc(sizeof(float) * (size_t)V * (ND + 1)), *got = malloc(sizeof(float) * (size_t)V * (ND + 1));
    float *plast = malloc(sizeof(float) * (size_t)V), *tmp = malloc(sizeof(float) * (size_t)V);

    /* reference: the prompt in one batch, then one token at a time */
    bs_session *a = sess(m, 512);
    CHECK(bs_eval(a, prompt, NP, BS_LOGITS_LAST, plast, NULL) == 0);
    for (int i = 0; i < ND; i++) CHECK(bs_eval(a, draft + i, 1, BS_LOGITS_LAST, ref + (size_t)i * V, NULL) == 0);

    /* prompt cut into batches of 9 (n_batch), then verify w tokens at once */
    bs_session *b = sess(m, 9);
    CHECK(bs_eval(b, prompt, NP, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, plast, (size_t)V), "%s: prompt logits depend on the batch size", path);
    for (int w = 1; w <= ND; w++) {
        CHECK(bs_eval(b, draft, w, BS_LOGITS_ALL, got, NULL) == 0);
        CHECKF(same(got, ref, (size_t)w * V), "%s: verifying %d tokens differs from one at a time", path, w);
        CHECK(bs_session_rollback(b, NP) == 0);   /* exact rollback: the next w starts clean */
    }
    /* rollback keeping 3 of 8, then one token: as if only those 3 had been evaluated */
    CHECK(bs_eval(b, draft, ND, BS_LOGITS_ALL, got, NULL) == 0);
    CHECK(bs_session_rollback(b, NP + 3) == 0);
    CHECK(bs_eval(b, draft + 3, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, ref + (size_t)3 * V, (size_t)V), "%s: rollback is not exact", path);

    check_greedy(m, path, prompt, NP, draft, ND, plast, ref);
    check_ahead(m, path, prompt, NP, x);
    check_top(m, path, prompt, NP);
    check_all_rows(m, path);
    check_replay(m, path, prompt, NP, draft, ND, ref);

    /* rollback inside a prompt-sized batch (larger than n_rollback) */
    bs_session *c = sess(m, 512);
    CHECK(bs_eval(c, prompt, NP, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval(c, draft, ND, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_session_rollback(c, NP + 5) == 0);
    CHECK(bs_eval(c, draft + 5, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, ref + (size_t)5 * V, (size_t)V), "%s: rollback of a large batch is not exact", path);

    /* state save / load: a fresh session continues with the same bits */
    bs_session *d = sess(m, 512);
    CHECK(bs_eval(d, prompt, NP, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval(d, draft, 4, BS_LOGITS_NONE, NULL, NULL) == 0);
    const size_t sz = bs_session_state_size(d);
    void *st = malloc(sz);
    CHECK(bs_session_state_save(d, st, sz) == 0);
    bs_session *e = sess(m, 512);
    CHECK(bs_session_state_load(e, st, sz) == 0);
    CHECK(bs_session_n_past(e) == NP + 4);
    CHECK(bs_eval(e, draft + 4, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, ref + (size_t)4 * V, (size_t)V), "%s: state save/load does not round-trip", path);
    /* reset, then the prompt again; and one-token steps with undo off */
    bs_session_reset(e);
    bs_session_set_undo(e, 0);
    CHECK(bs_eval(e, prompt, NP, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, plast, (size_t)V), "%s: reset does not give a fresh session", path);
    CHECK(bs_eval(e, draft, 1, BS_LOGITS_LAST, tmp, NULL) == 0);
    CHECKF(same(tmp, ref, (size_t)V), "%s: a one-token step without undo differs", path);
    free(st);
    bs_session_free(a); bs_session_free(b); bs_session_free(c); bs_session_free(d); bs_session_free(e);
    bs_model_free(m);
    free(ref); free(got); free(plast); free(tmp);
    (void)x;
}

int main(void) {
    /* (a sanitizer build leaves out tiny-q2_0: its products differ from tiny-q1_0's in the shaders
       alone, which test_vulkan_kernels and test_vulkan_ops check on every format) */
    static const char *const models[] = {"tiny-q1_0.gguf", "tiny-f32.gguf", "tiny-q2_0.gguf"};
    return vk_test_models("test_vulkan_session", models, TEST_SANITIZED ? 2 : 3, check_model);
}
