/* test_batch_eval.c: bs_eval_multi (several sessions in one pass through the weights) gives each
 * session exactly what bs_eval gives it alone: bit-identical logits and saved state, on the
 * tiny fixtures (f32 and q1_0, DeltaNet + attention layers), for one-token decode steps of 3
 * sessions at different positions, a mixed step (one session verifying 4 tokens with ALL logits,
 * one decoding, one with no logits), rollback after a batched step, and the error cases. */
#include "model/batch_eval.h"
#include "bitspark.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NS = 3 };
static const int32_t prompts[NS][6] = {{957, 117, 851, 10, 87, 114}, {276, 101}, {445, 719, 346, 101, 12}};
static const int plen[NS] = {6, 2, 5};
static const int32_t steps[4][NS] = {{258, 33, 90}, {101, 7, 400}, {12, 13, 14}, {500, 501, 502}};

static bs_session *session(bs_model *m) {
    bs_session_params p = {.n_ctx = 64};
    return bs_session_new(m, &p);
}

static bool same_state(bs_session *a, bs_session *b) {
    size_t na = bs_session_state_size(a), nb = bs_session_state_size(b);
    if (na != nb) return false;
    uint8_t *pa = malloc(na), *pb = malloc(nb);
    bool ok = !bs_session_state_save(a, pa, na) && !bs_session_state_save(b, pb, nb) && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return ok;
}

static void check_model(const char *path) {
    bs_model *m = bs_model_load(path, NULL);
    CHECKF(m, "%s: %s", path, bitspark_last_error());
    if (!m) return;
    const int nv = bs_model_n_vocab(m);
    bs_session *alone[NS], *bat[NS];
    float *la = malloc(sizeof(float) * nv * 4), *lb = malloc(sizeof(float) * nv * NS * 4);
    bs_batch *b = bs_batch_new(m, 16, 8, NULL);
    CHECK(b);
    for (int i = 0; i < NS; i++) {
        alone[i] = session(m);
        bat[i] = session(m);
        CHECK(!bs_eval(alone[i], prompts[i], plen[i], BS_LOGITS_NONE, NULL, NULL));
        CHECK(!bs_eval(bat[i], prompts[i], plen[i], BS_LOGITS_NONE, NULL, NULL));
    }
    bs_session_set_undo(bat[1], 0);   /* its one-token steps update the state in place: same bits */
    /* plain decode steps: every session one token */
    for (int k = 0; k < 4; k++) {
        bs_batch_seq q[NS];
        for (int i = 0; i < NS; i++)
            q[i] = (bs_batch_seq){.s = bat[i], .tokens = &steps[k][i], .n = 1,
                                  .logits_mode = BS_LOGITS_LAST, .logits = lb + (size_t)i * nv};
        CHECK(!bs_eval_multi(b, q, NS));
        for (int i = 0; i < NS; i++) {
            CHECK(!bs_eval(alone[i], &steps[k][i], 1, BS_LOGITS_LAST, la, NULL));
            CHECKF(!memcmp(la, lb + (size_t)i * nv, sizeof(float) * nv), "%s step %d seq %d logits", path, k, i);
            CHECKF(same_state(alone[i], bat[i]), "%s step %d seq %d state", path, k, i);
        }
    }
    /* mixed widths: 4 tokens with all logits, 1 with last, 2 with none */
    static const int32_t v4[4] = {300, 301, 302, 303}, v1[1] = {40}, v2[2] = {41, 42};
    bs_batch_seq q[NS] = {
        {.s = bat[0], .tokens = v4, .n = 4, .logits_mode = BS_LOGITS_ALL, .logits = lb},
        {.s = bat[1], .tokens = v1, .n = 1, .logits_mode = BS_LOGITS_LAST, .logits = lb + (size_t)4 * nv},
        {.s = bat[2], .tokens = v2, .n = 2, .logits_mode = BS_LOGITS_NONE},
    };
    CHECK(!bs_eval_multi(b, q, NS));
    CHECK(!bs_eval(alone[0], v4, 4, BS_LOGITS_ALL, la, NULL));
    CHECKF(!memcmp(la, lb, sizeof(float) * nv * 4), "%s: 4-token verify logits", path);
    CHECK(!bs_eval(alone[1], v1, 1, BS_LOGITS_LAST, la, NULL));
    CHECKF(!memcmp(la, lb + (size_t)4 * nv, sizeof(float) * nv), "%s: decode beside a verify", path);
    CHECK(!bs_eval(alone[2], v2, 2, BS_LOGITS_NONE, NULL, NULL));
    for (int i = 0; i < NS; i++) CHECKF(same_state(alone[i], bat[i]), "%s mixed seq %d state", path, i);
    /* rollback inside the batched step is exact */
    CHECK(!bs_session_rollback(bat[0], bs_session_n_past(bat[0]) - 2));
    CHECK(!bs_session_rollback(alone[0], bs_session_n_past(alone[0]) - 2));
    CHECK(same_state(alone[0], bat[0]));

    /* errors change nothing */
    int32_t bad = nv;
    int past = bs_session_n_past(bat[1]);
    bs_batch_seq e1[2] = {{.s = bat[1], .tokens = v1, .n = 1}, {.s = bat[2], .tokens = &bad, .n = 1}};
    CHECK(bs_eval_multi(b, e1, 2) == -1 && bs_session_n_past(bat[1]) == past);
    bs_batch_seq e2[2] = {{.s = bat[1], .tokens = v1, .n = 1}, {.s = bat[1], .tokens = v1, .n = 1}};
    CHECK(bs_eval_multi(b, e2, 2) == -1);
    int32_t many[20] = {0};
    bs_batch_seq e3[1] = {{.s = bat[1], .tokens = many, .n = 20}};
    CHECK(bs_eval_multi(b, e3, 1) == -1);   /* 20 rows > 16 */
    bs_batch_seq e4[1] = {{.s = bat[1], .tokens = v1, .n = 1, .logits_mode = BS_LOGITS_LAST}};
    CHECK(bs_eval_multi(b, e4, 1) == -1);   /* logits without a buffer */
    CHECK(bs_session_n_past(bat[1]) == past);

    for (int i = 0; i < NS; i++) {
        bs_session_free(alone[i]);
        bs_session_free(bat[i]);
    }
    bs_batch_free(b);
    free(la);
    free(lb);
    bs_model_free(m);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES");
    if (!fx) fx = "tests/fixtures";
    char path[1024];
    static const char *models[] = {"tiny-f32.gguf", "tiny-q1_0.gguf", "tiny-q2_0.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        snprintf(path, sizeof path, "%s/%s", fx, models[i]);
        check_model(path);
    }
    return test_summary("test_batch_eval");
}
