/* test_image_rows.c: image embeddings in the context (bs_eval_image) on tiny-f32 with the vision
 * fixture's 4x3 image and chat prompt (tests/fixtures/vision):
 * 1. any split of the image into row chunks gives the same logits and taps as one batch;
 * 2. rollback into, before and after the image (recorded and recomputed batches) leaves the
 *    session byte-identical (state save) to one that evaluated the kept rows straight, and the
 *    logits that follow bit-identical;
 * 3. a state saved after the image loads into a fresh session and continues bit-identically;
 * 4. greedy decoding with the DSpark drafter (fixture drafter) equals plain greedy decoding,
 *    token for token, with the image in the prompt;
 * 5. bad image arguments fail without changing the session. */
#include "dspark/dspark.h"
#include "dspark/speculative.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "io/util.h"
#include "test.h"
#include "image_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 4
#define NY 3
#define NI (NX * NY)
#define N_GEN 48

static bs_model *model;
static float *img;
static int V, E;

static bs_session *new_session(int n_rollback) {
    bs_session_params p = {.n_ctx = 256, .n_threads = 1, .n_rollback = n_rollback, .kv_type = BS_KV_F32};
    bs_session *s = bs_session_new(model, &p);
    CHECKF(s != NULL, "%s", bs_last_error());
    return s;
}

static uint8_t *state_of(const bs_session *s, size_t *len) {
    *len = bs_session_state_size(s);
    uint8_t *b = bs_xmalloc(*len);
    CHECK(bs_session_state_save(s, b, *len) == 0);
    return b;
}

static void check_same_state(const bs_session *a, const bs_session *b, const char *what) {
    size_t la, lb;
    uint8_t *sa = state_of(a, &la), *sb = state_of(b, &lb);
    CHECKF(la == lb && !memcmp(sa, sb, la), "%s: session states differ", what);
    free(sa);
    free(sb);
}

/* Text, image, text; logits of the last row into lg. */
static void prompt(bs_session *s, float *lg) {
    CHECK(bs_eval(s, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval_image(s, img, NX, NY, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval(s, chunk2, N2, BS_LOGITS_LAST, lg, NULL) == 0);
}

static void chunked_image(void) {
    const int taps[] = {1, 4, 6};
    bs_session *a = new_session(0), *b = new_session(0);
    bs_session_set_taps(a, taps, 3);
    bs_session_set_taps(b, taps, 3);
    float *la = bs_xmalloc((size_t)NI * V * 4), *lb = bs_xmalloc((size_t)NI * V * 4);
    float *ta = bs_xmalloc((size_t)NI * 3 * E * 4), *tb = bs_xmalloc((size_t)NI * 3 * E * 4);
    CHECK(bs_eval(a, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval(b, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval_image(a, img, NX, NY, BS_LOGITS_ALL, la, ta) == 0);
    const int cuts[] = {0, 1, 6, 7, 12};
    for (int i = 0; i + 1 < (int)BS_ARRAY_LEN(cuts); i++) {
        const int i0 = cuts[i], n = cuts[i + 1] - i0;
        CHECK(bs_eval_image_rows(b, img + (size_t)i0 * E, NX, NY, i0, n, BS_LOGITS_ALL, lb + (size_t)i0 * V,
                                 tb + (size_t)i0 * 3 * E) == 0);
    }
    CHECKF(!memcmp(la, lb, (size_t)NI * V * 4), "image rows in chunks: other logits");
    CHECKF(!memcmp(ta, tb, (size_t)NI * 3 * E * 4), "image rows in chunks: other taps");
    CHECK_EQ_INT(bs_session_n_past(a), N1 + NI);
    CHECK_EQ_INT(sess_pos(a), N1 + BS_MAX(NX, NY));
    check_same_state(a, b, "chunked image");
    free(la); free(lb); free(ta); free(tb);
    bs_session_free(a);
    bs_session_free(b);
}

/* Evaluate the prompt's rows [0, keep) straight (with a fresh session). */
static bs_session *straight(int keep, int n_rollback) {
    bs_session *s = new_session(n_rollback);
    CHECK(bs_eval(s, chunk1, BS_MIN(keep, N1), BS_LOGITS_NONE, NULL, NULL) == 0);
    if (keep > N1)
        CHECK(bs_eval_image_rows(s, img, NX, NY, 0, BS_MIN(keep - N1, NI), BS_LOGITS_NONE, NULL, NULL) == 0);
    if (keep > N1 + NI) CHECK(bs_eval(s, chunk2, keep - N1 - NI, BS_LOGITS_NONE, NULL, NULL) == 0);
    return s;
}

/* Continue from `keep` rows to the end of the prompt; logits of the last row. */
static void finish(bs_session *s, int keep, float *lg) {
    if (keep < N1) CHECK(bs_eval(s, chunk1 + keep, N1 - keep, BS_LOGITS_NONE, NULL, NULL) == 0);
    if (keep < N1 + NI) {
        const int i0 = BS_MAX(0, keep - N1);
        CHECK(bs_eval_image_rows(s, img + (size_t)i0 * E, NX, NY, i0, NI - i0, BS_LOGITS_NONE, NULL, NULL) == 0);
    }
    const int j0 = BS_MAX(0, keep - N1 - NI);
    CHECK(bs_eval(s, chunk2 + j0, N2 - j0, BS_LOGITS_LAST, lg, NULL) == 0);
}

static void rollbacks(void) {
    float *ref = bs_xmalloc((size_t)V * 4), *lg = bs_xmalloc((size_t)V * 4);
    bs_session *r = new_session(0);
    prompt(r, ref);
    bs_session_free(r);
    /* n_rollback 16 records the 12-row image batch; 4 makes rollback recompute it */
    const int nrb[] = {16, 4};
    for (int k = 0; k < 2; k++) {
        /* into the image (and to its start) right after it */
        const int into[] = {N1, N1 + 1, N1 + 5, N1 + NI - 1, N1 + NI};
        for (int i = 0; i < (int)BS_ARRAY_LEN(into); i++) {
            bs_session *s = new_session(nrb[k]);
            CHECK(bs_eval(s, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
            CHECK(bs_eval_image(s, img, NX, NY, BS_LOGITS_NONE, NULL, NULL) == 0);
            CHECKF(bs_session_rollback(s, into[i]) == 0, "%s", bs_last_error());
            bs_session *t = straight(into[i], nrb[k]);
            check_same_state(s, t, "rollback into the image");
            finish(s, into[i], lg);
            CHECKF(!memcmp(lg, ref, (size_t)V * 4), "n_rollback %d, rollback to %d: other logits", nrb[k], into[i]);
            bs_session_free(s);
            bs_session_free(t);
        }
        /* the text after the image, one token at a time, then back into it */
        bs_session *s = new_session(nrb[k]);
        CHECK(bs_eval(s, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
        CHECK(bs_eval_image(s, img, NX, NY, BS_LOGITS_NONE, NULL, NULL) == 0);
        CHECK(bs_eval(s, chunk2, 3, BS_LOGITS_NONE, NULL, NULL) == 0);
        CHECK(bs_session_rollback(s, N1 + NI + 1) == 0);
        CHECK_EQ_INT(sess_pos(s), N1 + BS_MAX(NX, NY) + 1);
        finish(s, N1 + NI + 1, lg);
        CHECKF(!memcmp(lg, ref, (size_t)V * 4), "n_rollback %d, rollback after the image: other logits", nrb[k]);
        bs_session_free(s);
    }
    free(ref);
    free(lg);
}

static void save_load(void) {
    float *la = bs_xmalloc((size_t)V * 4), *lb = bs_xmalloc((size_t)V * 4);
    bs_session *a = new_session(0), *b = new_session(0);
    CHECK(bs_eval(a, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval_image(a, img, NX, NY, BS_LOGITS_NONE, NULL, NULL) == 0);
    size_t len;
    uint8_t *st = state_of(a, &len);
    CHECKF(bs_session_state_load(b, st, len) == 0, "%s", bs_last_error());
    CHECK_EQ_INT(sess_pos(b), sess_pos(a));
    CHECK(bs_eval(a, chunk2, N2, BS_LOGITS_LAST, la, NULL) == 0);
    CHECK(bs_eval(b, chunk2, N2, BS_LOGITS_LAST, lb, NULL) == 0);
    CHECKF(!memcmp(la, lb, (size_t)V * 4), "after state load: other logits");
    /* rollback to the loaded point works too */
    CHECK(bs_session_rollback(b, N1 + NI) == 0);
    CHECK_EQ_INT(sess_pos(b), N1 + BS_MAX(NX, NY));
    free(st);
    free(la);
    free(lb);
    bs_session_free(a);
    bs_session_free(b);
}

static bs_sampler *greedy(void) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    return bs_sampler_new(&p, V);
}

static void speculation(const char *drafter_path) {
    bs_dspark *d = bs_dspark_load(drafter_path, NULL);
    CHECKF(d != NULL, "%s", bs_last_error());
    if (!d) return;
    float *lg = bs_xmalloc((size_t)V * 4);
    int32_t ref[N_GEN], got[N_GEN];
    /* plain */
    bs_session *s = new_session(0);
    bs_sampler *smp = greedy();
    prompt(s, lg);
    for (int i = 0; i < N_GEN; i++) {
        ref[i] = bs_sampler_sample(smp, lg);
        bs_sampler_accept(smp, ref[i]);
        if (i + 1 < N_GEN) CHECK(bs_eval(s, &ref[i], 1, BS_LOGITS_LAST, lg, NULL) == 0);
    }
    bs_sampler_free(smp);
    bs_session_free(s);
    for (int depth = 1; depth <= 4; depth++) {
        s = new_session(0);
        smp = greedy();
        bs_spec_params sp = {.draft_max = depth, .conf_cut = 1};
        bs_spec *spec = bs_spec_new(s, d, &sp);
        CHECKF(spec != NULL, "%s", bs_last_error());
        int rc = spec ? bs_spec_prompt(spec, chunk1, N1, NULL) : -1;
        if (!rc) rc = bs_spec_prompt_image(spec, img, NX, NY, NULL);
        if (!rc) rc = bs_spec_prompt(spec, chunk2, N2, lg);
        int n = 0;
        if (!rc) { got[n] = bs_sampler_sample(smp, lg); bs_sampler_accept(smp, got[n++]); }
        int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
        while (!rc && n < N_GEN) {
            const int r = bs_spec_round(spec, smp, got[n - 1], N_GEN - n, NULL, NULL, buf);
            if (r < 1) { rc = -1; break; }
            memcpy(got + n, buf, (size_t)r * sizeof *buf);
            n += r;
        }
        CHECKF(rc == 0, "%s", bs_last_error());
        CHECKF(rc == 0 && !memcmp(ref, got, sizeof ref), "draft-max %d: speculative greedy differs", depth);
        if (spec) {
            const bs_spec_stats *st = bs_spec_get_stats(spec);
            printf("  draft-max %d with the image: drafted %ld accepted %ld\n", depth, st->n_drafted, st->n_accepted);
            CHECKF(st->n_drafted > 0, "draft-max %d: the drafter never drafted", depth);
        }
        bs_spec_free(spec);
        bs_sampler_free(smp);
        bs_session_free(s);
    }
    free(lg);
    bs_dspark_free(d);
}

static void bad_args(void) {
    bs_session *s = new_session(0);
    float lg[1];
    CHECK(bs_eval(s, chunk1, N1, BS_LOGITS_NONE, NULL, NULL) == 0);
    CHECK(bs_eval_image(s, img, 0, 3, BS_LOGITS_NONE, NULL, NULL) != 0);
    CHECK(bs_eval_image(s, NULL, 4, 3, BS_LOGITS_NONE, NULL, NULL) != 0);
    CHECK(bs_eval_image(s, img, 1 << 20, 1 << 20, BS_LOGITS_NONE, NULL, NULL) != 0);
    CHECK(bs_eval_image(s, img, 4, 3, BS_LOGITS_LAST, NULL, NULL) != 0);
    CHECK(bs_eval_image(s, img, 200, 2, BS_LOGITS_NONE, NULL, NULL) != 0);   /* past n_ctx */
    CHECK(bs_eval_image_rows(s, img, 4, 3, 10, 3, BS_LOGITS_NONE, lg, NULL) != 0);
    CHECK_EQ_INT(bs_session_n_past(s), N1);
    bs_session_free(s);
}

int main(void) {
    char fix[1024], path[1100];
    if (!image_fixture_load(&model, &img, NI, fix, sizeof fix)) return test_summary("test_image_rows");
    V = model->hp.n_vocab;
    E = model->hp.n_embd;
    chunked_image();
    rollbacks();
    save_load();
    snprintf(path, sizeof path, "%s/tiny-dspark-f32.gguf", fix);
    speculation(path);
    bad_args();
    free(img);
    bs_model_free(model);
    return test_summary("test_image_rows");
}
