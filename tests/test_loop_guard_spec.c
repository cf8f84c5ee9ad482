/* test_loop_guard_spec: the doom-loop guard together with DSpark speculative decoding (-md). On a
 * model that loops (loop_model.h), at temperature 0, every guard mode gives with a drafter
 * exactly what it gives without one: the same tokens, stop reason and guard result. Two
 * drafters: the fixture's random one (drafts nearly never accepted: one-token rounds, parking)
 * and an oracle hook that drafts the model's own continuation (whole blocks accepted, so the loop
 * completes in the middle of a round and the rest of that round must be dropped). After a
 * rewind the target state is exact (its logits for one more token equal a straight run's) and
 * the drafter context follows the session (drafting stays on and resumes). */
#include "test.h"
#include "loop_model.h"
#include "gen_helper.h"
#include "dspark/dspark.h"
#include "sample/loop_guard.h"
#include "model/qwen35.h"
#include "dspark/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PREDICT 60

static const loop_model *g_lm;

/* The token the loop model produces after `prev` (greedy), or the cycle's first on anything else. */
static int32_t next_of(const loop_model *lm, int32_t prev) {
    for (int i = 0; i < LOOP_K; i++)
        if (prev == lm->cycle[i]) return lm->cycle[(i + 1) % LOOP_K];
    for (int i = 0; i + 1 < LOOP_M; i++)
        if (prev == lm->escape[i]) return lm->escape[i + 1];
    return lm->cycle[0];
}

static int oracle(void *ud, int32_t anchor, int pos, int k, bs_sampler *smp, int32_t *drafts, float *q) {
    (void)ud, (void)pos, (void)smp, (void)q;
    int32_t prev = anchor;
    for (int i = 0; i < k; i++) drafts[i] = prev = next_of(g_lm, prev);
    return k;
}

typedef struct {
    gen_result st;
    float *extra;            /* logits of one more token evaluated on the final session */
    long n_draft_rounds, n_accepted;
    int gap;                 /* bs_spec_sync at the end: 0 when the drafter context follows the session */
} result;

static result gen(const char *model, const char *drafter, bool use_oracle, int mode, int every) {
    result res;
    memset(&res, 0, sizeof res);
    bs_engine_opts o = greedy_opts(model, drafter, 4, 0);
    o.loop.mode = mode;
    o.loop.ckpt_every = every;
    o.loop.ckpt_count = 4;
    bs_engine g;
    if (bs_engine_open(&g, &o)) {
        fprintf(stderr, "open: %s\n", bs_last_error());
        CHECK(0);
        return res;
    }
    if (use_oracle) bs_spec_set_draft_hook(bs_gen_spec(g.gen), oracle, NULL);
    CHECK_EQ_INT(gen_generate(&g, &g_lm->cycle[0], 1, N_PREDICT, NULL, NULL, &res.st), 0);
    CHECK_EQ_INT(bs_session_n_past(bs_gen_session(g.gen)), 1 + res.st.n_gen - (res.st.stop == BS_GEN_EOG ? 0 : 1));
    if (g.drafter) {
        const bs_spec_stats *ss = bs_spec_get_stats(bs_gen_spec(g.gen));
        res.n_draft_rounds = ss->n_draft_rounds;
        res.n_accepted = ss->n_accepted;
        res.gap = bs_spec_sync(bs_gen_spec(g.gen));
    }
    /* the session's state: logits of one more token (the last generated one when it is not yet
     * evaluated, else the first cycle word) */
    int32_t more = res.st.stop == BS_GEN_EOG ? g_lm->cycle[0] : res.st.tokens[res.st.n_gen - 1];
    res.extra = malloc((size_t)g.n_vocab * sizeof *res.extra);
    CHECK_EQ_INT(bs_eval(bs_gen_session(g.gen), &more, 1, BS_LOGITS_LAST, res.extra, NULL), 0);
    bs_engine_close(&g);
    return res;
}

static void same(const result *a, const result *b, int V, const char *what) {
    CHECKF(a->st.n_gen == b->st.n_gen && !memcmp(a->st.tokens, b->st.tokens, (size_t)a->st.n_gen * sizeof(int32_t)),
           "%s: tokens (%d vs %d)", what, a->st.n_gen, b->st.n_gen);
    CHECKF(a->st.stop == b->st.stop, "%s: stop %d vs %d", what, a->st.stop, b->st.stop);
    const bs_loop_guard_result *x = &a->st.loop, *y = &b->st.loop;
    CHECKF(x->n_detected == y->n_detected && x->n_rewinds == y->n_rewinds && x->n_discarded == y->n_discarded &&
           x->stopped == y->stopped && x->last_rejected_id == y->last_rejected_id &&
           x->last.rejected_token == y->last.rejected_token, "%s: guard results differ", what);
    CHECKF(!memcmp(a->extra, b->extra, (size_t)V * sizeof(float)), "%s: final state differs", what);
}

static void free_result(result *r) {
    free(r->st.tokens);
    free(r->extra);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    char src[1024], model[1024], drafter[1024];
    snprintf(src, sizeof src, "%s/tiny-f32.gguf", fx);
    snprintf(drafter, sizeof drafter, "%s/tiny-dspark-f32.gguf", fx);
    snprintf(model, sizeof model, "%s/loop_guard_spec_model.gguf", tmp);
    setenv("BITSPARK_NO_COST_CACHE", "1", 1);
    static loop_model lm;
    CHECK_EQ_INT(loop_model_write(src, model, &lm), 0);
    g_lm = &lm;
    bs_model *m = bs_model_load(model, NULL);
    if (!m) return test_summary("test_loop_guard_spec");
    const int V = bs_model_n_vocab(m);
    bs_model_free(m);

    const int modes[] = {BS_LOOP_GUARD_OFF, BS_LOOP_GUARD_STOP, BS_LOOP_GUARD_REWIND};
    const int everys[] = {3, 64};   /* rewinds from a ring checkpoint, and from the prompt's */
    for (size_t mi = 0; mi < BS_ARRAY_LEN(modes); mi++)
        for (size_t ei = 0; ei < BS_ARRAY_LEN(everys); ei++) {
            if (modes[mi] != BS_LOOP_GUARD_REWIND && ei) continue;
            result plain = gen(model, NULL, false, modes[mi], everys[ei]);
            for (int which = 0; which < 2; which++) {
                result spec = gen(model, drafter, which == 1, modes[mi], everys[ei]);
                char what[96];
                snprintf(what, sizeof what, "guard %s, ckpt every %d, %s drafter", bs_loop_guard_mode_name(modes[mi]),
                         everys[ei], which ? "oracle" : "random");
                same(&plain, &spec, V, what);
                CHECKF(spec.gap == 0, "%s: the drafter context lost step with the session (a gap of %d)", what, spec.gap);
                CHECKF(spec.n_draft_rounds > 0, "%s: no drafting round", what);
                if (which == 1)   /* the oracle's drafts are the model's own: most are accepted */
                    CHECKF(spec.n_accepted >= spec.st.n_gen / 2, "%s: only %ld accepted", what, spec.n_accepted);
                free_result(&spec);
            }
            /* what the guard itself must have done (as test_loop_guard checks without a drafter) */
            if (modes[mi] == BS_LOOP_GUARD_STOP) {
                CHECK_EQ_INT(plain.st.stop, BS_GEN_LOOP);
                CHECK_EQ_INT(plain.st.n_gen, 4 * LOOP_K);
            } else if (modes[mi] == BS_LOOP_GUARD_REWIND) {
                CHECK_EQ_INT(plain.st.stop, BS_GEN_EOG);
                CHECK_EQ_INT(plain.st.loop.n_rewinds, 1);
                CHECK_EQ_INT(plain.st.n_gen, LOOP_K + LOOP_M);
            } else {
                CHECK_EQ_INT(plain.st.n_gen, N_PREDICT);
            }
            free_result(&plain);
        }
    return test_summary("test_loop_guard_spec");
}
