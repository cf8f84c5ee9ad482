/* test_vulkan_session.c: sessions of a model on the Vulkan device (lavapipe in CI, named as
 * --device vulkan names it), validation layer on (any message fails). Bit for bit:
 *  - verifying w = 1..8 tokens in one evaluation gives each row the logits of one-token
 *    evaluations, and a prompt cut into batches of any size the same logits;
 *  - rollback inside the last batch (small and prompt-sized) leaves the session as if the
 *    rolled-back tokens had never been evaluated;
 *  - state save / load into a fresh session (and reset) round-trip;
 *  - undo off (one-token steps without the snapshot) changes nothing;
 *  - greedy steps (bs_eval_greedy: the argmax on the device) pick the argmax of the logits
 *    rows, lowest id on ties, reading back the token id only (<= 16 KB a step, not the row).
 * Exit 77 (skipped) without the backend, a loader or a device. */
#include "test.h"
#include "bitspark.h"
#include "io/util.h"
#include "vk_test.h"
#include "vulkan/backend.h"
#include "model/qwen35.h"

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
    static const char *const models[] = {"tiny-q1_0.gguf", "tiny-q2_0.gguf", "tiny-f32.gguf"};
    return vk_test_models("test_vulkan_session", models, (int)BS_ARRAY_LEN(models), check_model);
}
