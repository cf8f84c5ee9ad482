/* test_vulkan_batch.c: several sessions of a model on the Vulkan device in one bs_eval_multi
 * (lavapipe in CI, validation layer on: any message fails), against each session evaluated
 * alone with bs_eval, bit for bit: logits (last row and every row), taps to the host and taps
 * kept on the device (as a drafter reads them), the saved state (recurrent state and KV cache),
 * a session with undo off (its one-token steps take no snapshot),
 * over several rounds with rollbacks in between. The sequences have different lengths and
 * positions: a prompt longer than a device submission's rows (two pieces in two passes),
 * verification-sized steps, one-token steps; 10 sequences: more than one pass takes where
 * BITSPARK_VK_BATCH_SEQS caps it (test_vulkan_batch: 4, so the passes split), else all in one
 * pass (test_vulkan_batch_together: more than the 8 sequences a recurrence dispatch takes and
 * the 4 an attention dispatch takes); then decode steps of alternating sets of sessions
 * with the same shape (a recorded pass resubmitted). Exit 77 (skipped) without a Vulkan device. */
#include "test.h"
#include "bitspark.h"
#include "io/util.h"
#include "model/batch_eval.h"
#include "model/session.h"
#include "vk_test.h"
#include "vulkan/backend.h"

#include <stdlib.h>
#include <string.h>

enum { NS = 10, MAXN = 80, ROUNDS = 4 };

static int V, E;
static int32_t toks[NS][ROUNDS][MAXN];

static bs_session *sess(bs_model *m) {
    bs_session_params sp = {.n_ctx = 256, .n_batch = MAXN, .n_rollback = 8};
    bs_session *s = bs_session_new(m, &sp);
    CHECKF(s != NULL, "%s", bitspark_last_error());
    return s;
}

static bool same_state(bs_session *a, bs_session *b) {
    const size_t na = bs_session_state_size(a), nb = bs_session_state_size(b);
    if (na != nb) return false;
    uint8_t *pa = malloc(na), *pb = malloc(nb);
    const bool ok = !bs_session_state_save(a, pa, na) && !bs_session_state_save(b, pb, nb) && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return ok;
}

/* What sequence i evaluates in round r: its rows and logits mode. Round 0 is the prompts:
 * 70 rows (two device pieces), 5, 1, 33, then short ones; later rounds 1..4 rows. */
static void plan(int i, int r, int *n, int *mode) {
    static const int first[4] = {70, 5, 1, 33};
    *n = r == 0 ? (i < 4 ? first[i] : 1 + i % 3) : 1 + (i + r) % 4;
    *mode = (i + r) % 3 == 0 ? BS_LOGITS_ALL : (i + r) % 3 == 1 ? BS_LOGITS_LAST : BS_LOGITS_NONE;
    if (i == 0 && r == 0) *mode = BS_LOGITS_LAST;
}

static bool has_taps(int i) { return i % 3 == 1; }

static void check_model(const char *path) {
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(path, &mp);
    CHECKF(m != NULL, "%s: %s", path, bitspark_last_error());
    if (!m) return;
    V = bs_model_n_vocab(m);
    E = bs_model_n_embd(m);
    const int taps[2] = {0, bs_model_n_layer(m) - 1};
    bs_rng rng;
    bs_rng_seed(&rng, 11);
    for (int i = 0; i < NS; i++)
        for (int r = 0; r < ROUNDS; r++)
            for (int t = 0; t < MAXN; t++) toks[i][r][t] = (int32_t)(bs_rng_next(&rng) % (uint64_t)V);
    bs_session *alone[NS], *bat[NS];
    const size_t lsz = (size_t)MAXN * V, tsz = (size_t)MAXN * 2 * E;
    float *la = malloc(sizeof(float) * lsz), *ta = malloc(sizeof(float) * tsz), *tdev = malloc(sizeof(float) * tsz);
    float *lb = malloc(sizeof(float) * lsz * NS), *tb = malloc(sizeof(float) * tsz * NS);
    bs_batch *b = bs_batch_new(m, NS * MAXN, NS * MAXN, NULL);
    CHECKF(b != NULL, "%s", bitspark_last_error());
    for (int i = 0; i < NS; i++) {
        alone[i] = sess(m);
        bat[i] = sess(m);
        if (has_taps(i)) {
            CHECK(!bs_session_set_taps(alone[i], taps, 2));
            CHECK(!bs_session_set_taps(bat[i], taps, 2));
        }
    }
    bat[4]->taps_on_device = true;   /* as with a drafter on the device: the taps stay there */
    bs_session_set_undo(alone[2], 0);   /* as a plain server slot: one-token steps take no snapshot */
    bs_session_set_undo(bat[2], 0);
    for (int r = 0; r < ROUNDS && b; r++) {
        bs_batch_seq q[NS];
        for (int i = 0; i < NS; i++) {
            int n, mode;
            plan(i, r, &n, &mode);
            q[i] = (bs_batch_seq){.s = bat[i], .tokens = toks[i][r], .n = n, .logits_mode = mode, .logits = lb + (size_t)i * lsz,
                                  .taps = has_taps(i) ? tb + (size_t)i * tsz : NULL};
        }
        CHECKF(!bs_eval_multi(b, q, NS), "%s round %d: %s", path, r, bitspark_last_error());
        for (int i = 0; i < NS; i++) {
            const int n = q[i].n, mode = q[i].logits_mode;
            CHECK(!bs_eval(alone[i], toks[i][r], n, mode, la, has_taps(i) ? ta : NULL));
            const size_t rows = mode == BS_LOGITS_ALL ? (size_t)n : mode == BS_LOGITS_LAST;
            CHECKF(!memcmp(la, q[i].logits, rows * V * sizeof(float)), "%s round %d seq %d (%d rows): logits differ", path, r,
                   i, n);
            if (has_taps(i) && i != 4)
                CHECKF(!memcmp(ta, q[i].taps, (size_t)n * 2 * E * sizeof(float)), "%s round %d seq %d: taps differ", path, r, i);
            if (i == 4) {   /* n <= the rows of one submission: all of them stay on the device */
                CHECK(!bs_vk_sess_taps_read(bat[i]->vk, tdev, n));
                CHECKF(!memcmp(ta, tdev, (size_t)n * 2 * E * sizeof(float)), "%s round %d: device taps differ", path, r);
            }
            CHECKF(bs_session_n_past(alone[i]) == bs_session_n_past(bat[i]), "%s round %d seq %d: positions", path, r, i);
            /* rollback of part of the step, both ways: the next round starts from it */
            const int keep = bs_session_n_past(bat[i]) - (n > 1 ? (i + r) % n : 0);
            CHECK(!bs_session_rollback(bat[i], keep));
            CHECK(!bs_session_rollback(alone[i], keep));
            CHECKF(same_state(alone[i], bat[i]), "%s round %d seq %d: state after rollback to %d differs", path, r, i, keep);
        }
    }
    /* decode steps of one token: sessions 0-2 and 3-5 in turn, each set with the same shape (so
     * the recorded pass of a set is resubmitted, with new tokens and positions) */
    for (int step = 0; step < 4 && b; step++) {
        bs_batch_seq q[3];
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            q[j] = (bs_batch_seq){.s = bat[i], .tokens = &toks[i][step][MAXN - 1], .n = 1, .logits_mode = BS_LOGITS_LAST,
                                  .logits = lb + (size_t)j * lsz, .taps = has_taps(i) ? tb + (size_t)j * tsz : NULL};
        }
        CHECKF(!bs_eval_multi(b, q, 3), "%s decode step %d: %s", path, step, bitspark_last_error());
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            CHECK(!bs_eval(alone[i], q[j].tokens, 1, BS_LOGITS_LAST, la, has_taps(i) ? ta : NULL));
            CHECKF(!memcmp(la, q[j].logits, (size_t)V * sizeof(float)), "%s decode step %d seq %d: logits differ", path, step, i);
            if (has_taps(i) && i != 4)
                CHECKF(!memcmp(ta, q[j].taps, 2 * (size_t)E * sizeof(float)), "%s decode step %d seq %d: taps differ", path, step, i);
            CHECKF(same_state(alone[i], bat[i]), "%s decode step %d seq %d: state differs", path, step, i);
        }
    }
    /* greedy decode steps (.next): every sequence greedy (only the ids come back), then one of
     * three (the rows come back, the id from its row): the alone row's lowest argmax */
    for (int step = 0; step < 4 && b; step++) {
        bs_batch_seq q[3];
        int32_t next[3] = {-1, -1, -1};
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            q[j] = (bs_batch_seq){.s = bat[i], .tokens = &toks[i][step][MAXN - 2], .n = 1, .logits_mode = BS_LOGITS_LAST,
                                  .logits = lb + (size_t)j * lsz, .taps = has_taps(i) ? tb + (size_t)j * tsz : NULL,
                                  .next = step < 2 || j == 1 ? &next[j] : NULL};
        }
        CHECKF(!bs_eval_multi(b, q, 3), "%s greedy step %d: %s", path, step, bitspark_last_error());
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            CHECK(!bs_eval(alone[i], q[j].tokens, 1, BS_LOGITS_LAST, la, has_taps(i) ? ta : NULL));
            int32_t best = 0;
            for (int k = 1; k < V; k++) best = la[k] > la[best] ? k : best;
            if (q[j].next) CHECKF(next[j] == best, "%s greedy step %d seq %d: id %d, the row's argmax %d", path, step, i, next[j], best);
            else CHECKF(!memcmp(la, q[j].logits, (size_t)V * sizeof(float)), "%s greedy step %d seq %d: logits differ", path, step, i);
            CHECKF(same_state(alone[i], bat[i]), "%s greedy step %d seq %d: state differs", path, step, i);
        }
    }
    /* top-k steps (.top_k): every sequence's k best found on the device (k 5, 40, 64), then with a
     * greedy one beside them, then with one that wants its row (the rows come back, the k best
     * taken on the host): the alone row's list (bs_top_lowest), ids and bits */
    for (int step = 0; step < 3 && b; step++) {
        bs_batch_seq q[3];
        int32_t next = -1, ids[3][BS_TOP_MAX], ri[BS_TOP_MAX];
        float vals[3][BS_TOP_MAX], rv[BS_TOP_MAX];
        int nt[3] = {-1, -1, -1};
        static const int ks[3] = {5, 40, BS_TOP_MAX};
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            q[j] = (bs_batch_seq){.s = bat[i], .tokens = &toks[i][step][MAXN - 3], .n = 1, .logits_mode = BS_LOGITS_LAST,
                                  .logits = lb + (size_t)j * lsz, .taps = has_taps(i) ? tb + (size_t)j * tsz : NULL};
            if (step == 0 || j > 0) q[j].top_k = ks[j], q[j].top_ids = ids[j], q[j].top_logits = vals[j], q[j].n_top = &nt[j];
            else if (step == 1) q[j].next = &next;
        }
        CHECKF(!bs_eval_multi(b, q, 3), "%s top-k step %d: %s", path, step, bitspark_last_error());
        for (int j = 0; j < 3; j++) {
            const int i = 3 * (step % 2) + j;
            CHECK(!bs_eval(alone[i], q[j].tokens, 1, BS_LOGITS_LAST, la, has_taps(i) ? ta : NULL));
            if (q[j].top_k) {
                const int want = bs_top_lowest(la, V, ks[j], ri, rv);
                CHECKF(nt[j] == want && !memcmp(ids[j], ri, sizeof *ri * (size_t)want) && !memcmp(vals[j], rv, sizeof *rv * (size_t)want),
                       "%s top-k step %d seq %d: the %d best differ from the row's (%d / %d)", path, step, i, ks[j], nt[j], want);
            } else if (q[j].next) {
                CHECKF(next == bs_argmax_lowest(la, V), "%s top-k step %d seq %d: greedy id %d", path, step, i, next);
            } else {
                CHECKF(!memcmp(la, q[j].logits, (size_t)V * sizeof(float)), "%s top-k step %d seq %d: logits differ", path, step, i);
            }
            CHECKF(same_state(alone[i], bat[i]), "%s top-k step %d seq %d: state differs", path, step, i);
        }
    }
    /* verify passes (BS_LOGITS_ALL, the server's batched speculation): every row's greedy id or
     * k best found on the device, only they back; each the alone row's */
    for (int step = 0; step < 2 && b; step++) {
        enum { R = 4, K = 7 };
        bs_batch_seq q[3];
        int32_t next[3][R], ids[R * K], ri[K];
        float vals[R * K], rv[K];
        int nt[R];
        for (int j = 0; j < 3; j++) {
            const int i = 3 * step + j;
            q[j] = (bs_batch_seq){.s = bat[i], .tokens = &toks[i][3][0], .n = R, .logits_mode = BS_LOGITS_ALL,
                                  .logits = lb + (size_t)j * lsz, .taps = has_taps(i) ? tb + (size_t)j * tsz : NULL};
            if (j == 1) q[j].top_k = K, q[j].top_ids = ids, q[j].top_logits = vals, q[j].n_top = nt;
            else q[j].next = next[j];
        }
        CHECKF(!bs_eval_multi(b, q, 3), "%s verify pass %d: %s", path, step, bitspark_last_error());
        for (int j = 0; j < 3; j++) {
            const int i = 3 * step + j;
            CHECK(!bs_eval(alone[i], q[j].tokens, R, BS_LOGITS_ALL, la, has_taps(i) ? ta : NULL));
            for (int r = 0; r < R; r++) {
                const float *row = la + (size_t)r * V;
                if (q[j].next) {
                    CHECKF(next[j][r] == bs_argmax_lowest(row, V), "%s verify pass %d seq %d row %d: id %d", path, step, i, r, next[j][r]);
                } else {
                    const int want = bs_top_lowest(row, V, K, ri, rv);
                    CHECKF(nt[r] == want && !memcmp(ids + r * K, ri, sizeof *ri * (size_t)want) &&
                           !memcmp(vals + r * K, rv, sizeof *rv * (size_t)want), "%s verify pass %d seq %d row %d: list", path, step, i, r);
                }
            }
            CHECKF(same_state(alone[i], bat[i]), "%s verify pass %d seq %d: state differs", path, step, i);
        }
    }
    bs_batch_free(b);
    for (int i = 0; i < NS; i++) {
        bs_session_free(alone[i]);
        bs_session_free(bat[i]);
    }
    bs_model_free(m);
    free(la); free(ta); free(tdev); free(lb); free(tb);
}

int main(void) {
    static const char *const models[] = {"tiny-q1_0.gguf", "tiny-f32.gguf"};
    /* BS_VK_BATCH_MODEL: that model of BS_FIXTURES alone (a folded one: tests/CMakeLists.txt) */
    const char *one = getenv("BS_VK_BATCH_MODEL");
    if (one) return vk_test_models("test_vulkan_batch", &one, 1, check_model);
    return vk_test_models("test_vulkan_batch", models, (int)BS_ARRAY_LEN(models), check_model);
}
