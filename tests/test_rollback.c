/* test_rollback.c: exact rollback and state save/load of qwen35 sessions, on the tiny-f32 and
 * tiny-q1_0 fixtures ($BS_FIXTURES), which have Gated DeltaNet and attention layers.
 *
 * For every j < t: evaluate a prompt, then a block of t tokens as one batch, roll back to
 * prompt + j, evaluate block[j..t) again: the logits and the whole saved state (recurrent state,
 * conv windows, KV rows) must be bit-identical to a straight run. Checked with the cheap
 * replay path (block recorded) and the recompute path (block longer than n_rollback), both KV
 * types, and for repeated rollbacks. Then save/load round trips and the error cases. */
#include "bitspark.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPT = 6, T_BLOCK = 7 };
static const int32_t prompt[N_PROMPT] = {957, 117, 851, 10, 87, 114};
static const int32_t block[T_BLOCK] = {276, 101, 258, 445, 719, 346, 101};

typedef struct blob { uint8_t *p; size_t n; } blob;

static blob save(bs_session *s) {
    blob b = {NULL, bs_session_state_size(s)};
    b.p = malloc(b.n);
    if (bs_session_state_save(s, b.p, b.n)) { free(b.p); b.p = NULL; }
    return b;
}

static bool same(blob a, blob b) { return a.p && b.p && a.n == b.n && !memcmp(a.p, b.p, a.n); }

static bs_session *session(bs_model *m, int kv, int n_rollback) {
    bs_session_params p = {.n_ctx = 64, .kv_type = kv, .n_rollback = n_rollback};
    bs_session *s = bs_session_new(m, &p);
    if (!s) fprintf(stderr, "session: %s\n", bitspark_last_error());
    return s;
}

/* Straight runs: state after prompt + block[0..j) for every j <= t, and the block's logits. */
static void straight(bs_model *m, int kv, blob states[T_BLOCK + 1], float *logits) {
    for (int j = 0; j <= T_BLOCK; j++) {
        bs_session *s = session(m, kv, 0);
        CHECK(s && !bs_eval(s, prompt, N_PROMPT, BS_LOGITS_NONE, NULL, NULL));
        if (s && j > 0)
            CHECK(!bs_eval(s, block, j, j == T_BLOCK ? BS_LOGITS_ALL : BS_LOGITS_NONE,
                           j == T_BLOCK ? logits : NULL, NULL));
        states[j] = s ? save(s) : (blob){0};
        bs_session_free(s);
    }
}

static void check_rollbacks(bs_model *m, const char *name, int kv, int n_rollback) {
    const int nv = bs_model_n_vocab(m);
    blob ref[T_BLOCK + 1];
    float *ref_logits = calloc((size_t)T_BLOCK * nv, sizeof(float));
    float *logits = calloc((size_t)T_BLOCK * nv, sizeof(float));
    straight(m, kv, ref, ref_logits);

    for (int j = 0; j < T_BLOCK; j++) {
        bs_session *s = session(m, kv, n_rollback);
        if (!s) { CHECK(s); break; }
        CHECK(!bs_eval(s, prompt, N_PROMPT, BS_LOGITS_NONE, NULL, NULL));
        CHECK(!bs_eval(s, block, T_BLOCK, BS_LOGITS_ALL, logits, NULL));
        CHECKF(!memcmp(logits, ref_logits, (size_t)T_BLOCK * nv * sizeof(float)), "%s: block logits", name);
        blob b = save(s);
        CHECKF(same(b, ref[T_BLOCK]), "%s: state after the block differs from the straight run", name);
        free(b.p);
        CHECK(!bs_session_rollback(s, N_PROMPT + j));
        CHECK_EQ_INT(bs_session_n_past(s), N_PROMPT + j);
        b = save(s);
        CHECKF(same(b, ref[j]), "%s kv=%d n_rollback=%d: state after rollback to j=%d differs", name, kv, n_rollback, j);
        free(b.p);
        /* a second, deeper rollback inside the same batch, then forward again */
        if (j > 0) {
            CHECK(!bs_session_rollback(s, N_PROMPT + j - 1));
            b = save(s);
            CHECKF(same(b, ref[j - 1]), "%s: second rollback to j=%d differs", name, j - 1);
            free(b.p);
            CHECK(!bs_eval(s, block + j - 1, 1, BS_LOGITS_NONE, NULL, NULL));
        }
        memset(logits, 0, (size_t)T_BLOCK * nv * sizeof(float));
        CHECK(!bs_eval(s, block + j, T_BLOCK - j, BS_LOGITS_ALL, logits, NULL));
        CHECKF(!memcmp(logits, ref_logits + (size_t)j * nv, (size_t)(T_BLOCK - j) * nv * sizeof(float)),
               "%s kv=%d n_rollback=%d: logits after rollback to j=%d differ", name, kv, n_rollback, j);
        b = save(s);
        CHECKF(same(b, ref[T_BLOCK]), "%s kv=%d n_rollback=%d: final state after rollback to j=%d differs",
               name, kv, n_rollback, j);
        free(b.p);
        /* rolling back before the start of the last batch is refused and changes nothing */
        CHECK(bs_session_rollback(s, N_PROMPT + j - 1) != 0);
        b = save(s);
        CHECK(same(b, ref[T_BLOCK]));
        free(b.p);
        bs_session_free(s);
    }
    for (int j = 0; j <= T_BLOCK; j++) free(ref[j].p);
    free(ref_logits);
    free(logits);
}

static void check_save_load(bs_model *m, const char *name) {
    const int nv = bs_model_n_vocab(m);
    float *a = calloc((size_t)nv, sizeof(float)), *b = calloc((size_t)nv, sizeof(float));
    bs_session *s = session(m, BS_KV_F16, 0), *t = session(m, BS_KV_F16, 0), *u = session(m, BS_KV_F32, 0);
    if (!s || !t || !u) { CHECK(false); goto done; }
    CHECK(!bs_eval(s, prompt, N_PROMPT, BS_LOGITS_NONE, NULL, NULL));
    blob st = save(s);
    CHECK(st.p != NULL);
    CHECK(!bs_eval(t, block, 3, BS_LOGITS_NONE, NULL, NULL));   /* t has other contents first */
    CHECK(!bs_session_state_load(t, st.p, st.n));
    CHECK_EQ_INT(bs_session_n_past(t), N_PROMPT);
    CHECK(!bs_eval(s, block, T_BLOCK, BS_LOGITS_LAST, a, NULL));
    CHECK(!bs_eval(t, block, T_BLOCK, BS_LOGITS_LAST, b, NULL));
    CHECKF(!memcmp(a, b, (size_t)nv * sizeof(float)), "%s: logits after load differ", name);
    blob s2 = save(s), t2 = save(t);
    CHECKF(same(s2, t2), "%s: state after load + eval differs", name);
    /* errors: another KV type, truncated, corrupted, too small a buffer */
    CHECK(bs_session_state_load(u, st.p, st.n) != 0);
    CHECK(bs_session_state_load(t, st.p, st.n - 1) != 0);
    st.p[0] ^= 1;
    CHECK(bs_session_state_load(t, st.p, st.n) != 0);
    CHECK(bs_session_state_save(s, s2.p, 10) != 0);
    CHECK_EQ_INT(bs_session_n_past(t), N_PROMPT + T_BLOCK);   /* failed loads change nothing */
    free(st.p); free(s2.p); free(t2.p);
done:
    bs_session_free(s); bs_session_free(t); bs_session_free(u);
    free(a); free(b);
}

static void check_errors(bs_model *m) {
    bs_session_params p = {.n_ctx = 8};
    bs_session *s = bs_session_new(m, &p);
    if (!s) { CHECK(s); return; }
    int32_t bad[2] = {1, bs_model_n_vocab(m)};
    CHECK(bs_eval(s, bad, 2, BS_LOGITS_NONE, NULL, NULL) != 0);
    CHECK(strstr(bitspark_last_error(), "out of range") != NULL);
    bad[1] = -1;
    CHECK(bs_eval(s, bad, 2, BS_LOGITS_NONE, NULL, NULL) != 0);
    CHECK(bs_eval(s, block, T_BLOCK, BS_LOGITS_LAST, NULL, NULL) != 0);   /* no buffer */
    CHECK_EQ_INT(bs_session_n_past(s), 0);
    CHECK(!bs_eval(s, block, T_BLOCK, BS_LOGITS_NONE, NULL, NULL));
    CHECK(bs_eval(s, block, 2, BS_LOGITS_NONE, NULL, NULL) != 0);         /* past n_ctx */
    CHECK(strstr(bitspark_last_error(), "context") != NULL);
    CHECK(bs_session_rollback(s, 9) != 0);
    CHECK(bs_session_rollback(s, -1) != 0);
    int taps[1] = {99};
    CHECK(bs_session_set_taps(s, taps, 1) != 0);
    CHECK(!bs_session_rollback(s, 0));
    CHECK_EQ_INT(bs_session_n_past(s), 0);
    bs_session_free(s);
    bs_session_params q = {.kv_type = 7};
    CHECK(bs_session_new(m, &q) == NULL);
}

/* bs_session_set_undo(s, 0): one-token steps updating the state in place give the very bits
 * of the double-buffered steps (logits and saved state after each), then cannot be undone. */
static void check_in_place(bs_model *m, const char *name) {
    bs_session *a = session(m, BS_KV_F16, 16), *b = session(m, BS_KV_F16, 16);
    if (!a || !b) { CHECK(false); bs_session_free(a); bs_session_free(b); return; }
    bs_session_set_undo(b, 0);
    const int V = bs_model_n_vocab(m);
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    CHECK(!bs_eval(a, prompt, N_PROMPT, BS_LOGITS_NONE, NULL, NULL) && !bs_eval(b, prompt, N_PROMPT, BS_LOGITS_NONE, NULL, NULL));
    for (int t = 0; t < T_BLOCK; t++) {
        CHECK(!bs_eval(a, block + t, 1, BS_LOGITS_LAST, la, NULL) && !bs_eval(b, block + t, 1, BS_LOGITS_LAST, lb, NULL));
        CHECKF(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: in-place step %d logits differ", name, t);
        blob sa = save(a), sb = save(b);
        CHECKF(same(sa, sb), "%s: in-place step %d state differs", name, t);
        free(sa.p), free(sb.p);
    }
    CHECK(bs_session_rollback(a, N_PROMPT + T_BLOCK - 1) == 0);
    CHECKF(bs_session_rollback(b, N_PROMPT + T_BLOCK - 1) != 0, "%s: an in-place step was undone", name);
    CHECK(bs_session_rollback(b, N_PROMPT + T_BLOCK) == 0);   /* keeping everything is no undo */
    CHECK(!bs_eval(b, block, 2, BS_LOGITS_NONE, NULL, NULL) && bs_session_rollback(b, N_PROMPT + T_BLOCK + 1) == 0);
    free(la), free(lb);
    bs_session_free(a);
    bs_session_free(b);
}

int main(void) {
    const char *fix = getenv("BS_FIXTURES");
    if (!fix) { fprintf(stderr, "BS_FIXTURES is not set\n"); return 1; }
    const char *models[] = {"tiny-f32", "tiny-q1_0"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.gguf", fix, models[i]);
        bs_model *m = bs_model_load(path, NULL);
        if (!m) { fprintf(stderr, "%s\n", bitspark_last_error()); CHECK(m); continue; }
        check_rollbacks(m, models[i], BS_KV_F32, 16);   /* replay from the record */
        check_rollbacks(m, models[i], BS_KV_F16, 16);
        check_rollbacks(m, models[i], BS_KV_F16, 2);    /* recompute: block > n_rollback */
        check_save_load(m, models[i]);
        check_in_place(m, models[i]);
        check_errors(m);
        bs_model_free(m);
    }
    return test_summary("test_rollback");
}
