/* test_vulkan_draw.c: draft_draw.comp, the sampled token predicted on the device from a list,
 * against the host's sampler on the same list with the same uniform: a draft (vk_dspark.c's
 * sampled chain: bs_sampler_apply_top, bs_sampler_probs_dense, bs_sampler_draw_u, the scan in
 * id order) and a decode step (vk_ahead.c: bs_sampler_sample_top with the uniform drawn ahead,
 * bs_sampler_lookahead, the scan in the list's order): lists of 1..64
 * candidates in topk.comp's layout and order (the larger logit first, then the lower id) with
 * ties, a wide and a narrow spread, top-k cuts shorter than the list, top-p, min-p, min_keep and
 * temperatures from 0.1 to 2, uniforms at 0, near 1 and across. The prediction is float and the
 * host's sums double, so a uniform within rounding of a boundary may draw apart: at most 1 in
 * 200 may, and none where the uniform is at least 1e-4 from every boundary. An empty list gives
 * no draft (-1) and a Markov token still in range.
 * Then a session on tiny-q1_0 mixing greedy steps ahead, plain top-k steps, sampled steps ahead
 * (fed their predicted draws, or another token: undone) and top-k steps again, in every order of
 * the two sets of per-step buffers: each step's list equal to a session's plain steps' at the
 * same tokens. */
#include "test.h"
#include "vk_test.h"
#include "sample/sampler.h"
#include "model/batch_eval.h"
#include "vulkan/backend.h"
#include "io/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = 5000, ROW = 129, TRIALS = 3000 };

static bs_rng rng;
static bs_vk_ctx *C;

typedef struct { uint32_t slot, top_k, min_keep; float top_p, min_p, temp; uint32_t by_id; } draw_push;
typedef struct { int32_t id; float v; } cand;

static int by_order(const void *a, const void *b) {   /* topk.comp's: larger value, then lower id */
    const cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A list of n distinct ids in the kernel's order: values from a spread (ties where coarse). */
static void make_list(cand *c, int n, float spread, bool coarse) {
    for (int i = 0; i < n; i++) {
        int32_t id;
        bool dup;
        do {
            id = (int32_t)(bs_rng_next(&rng) % V);
            dup = false;
            for (int j = 0; j < i; j++) dup |= c[j].id == id;
        } while (dup);
        float v = bs_rng_normal(&rng) * spread;
        if (coarse) v = roundf(v);
        c[i] = (cand){id, v};
    }
    qsort(c, (size_t)n, sizeof *c, by_order);
}

/* The host's draw from the list with uniform u, and how near u is to its boundaries (the
 * cumulative probabilities in id order, over their total). */
static int32_t host_draw(bs_sampler *s, const cand *c, int n, double u, float *q, double *margin) {
    int32_t ids[64];
    float vals[64];
    for (int i = 0; i < n; i++) ids[i] = c[i].id, vals[i] = c[i].v;
    if (bs_sampler_apply_top(s, ids, vals, n) < 0) return -1;
    bs_sampler_probs_dense(s, q);
    double total = 0, cum = 0;
    for (int v = 0; v < V; v++) total += q[v] > 0 ? q[v] : 0;
    *margin = 1.0;
    for (int v = 0; v < V; v++) {
        if (!(q[v] > 0)) continue;
        cum += q[v];
        *margin = fmin(*margin, fabs(cum / total - u));
    }
    return bs_sampler_draw_u(NULL, q, V, u);
}

static void check_draws(void) {
    float *q = malloc(sizeof *q * V);
    uint32_t lst[ROW];
    int apart = 0, apart_far = 0, runs = 0, pick_apart = 0;
    for (int t = 0; t < TRIALS; t++) {
        const int n = 1 + (int)(bs_rng_next(&rng) % 64);
        cand c[64];
        make_list(c, n, t % 3 == 0 ? 0.3f : t % 3 == 1 ? 3.0f : 8.0f, t % 5 == 0);
        bs_sampler_params p = bs_sampler_default_params();
        p.top_k = t % 4 == 0 ? 1 + (int)(bs_rng_next(&rng) % 64) : 64;
        p.top_p = t % 3 == 0 ? 1.0f : 0.5f + 0.5f * (float)bs_rng_uniform(&rng);
        p.min_p = t % 2 == 0 ? 0.0f : 0.2f * (float)bs_rng_uniform(&rng);
        p.min_keep = t % 7 == 0 ? 3 : 1;
        p.temp = 0.1f + 1.9f * (float)bs_rng_uniform(&rng);
        const double u = t % 11 == 0 ? 0.0 : t % 13 == 0 ? 1.0 - 1e-9 : bs_rng_uniform(&rng);
        bs_sampler *s = bs_sampler_new(&p, V);
        const int k = BS_MIN(BS_MAX(p.top_k, p.min_keep), V);   /* the chain's list length (top_k_of) */
        /* the list as topk.comp leaves it: the k best of the candidates */
        const int m = BS_MIN(n, k);
        memset(lst, 0, sizeof lst);
        lst[0] = (uint32_t)m;
        for (int i = 0; i < m; i++) {
            lst[1 + i] = (uint32_t)c[i].id;
            memcpy(&lst[65 + i], &c[i].v, 4);
        }
        double margin = 1.0;
        const int32_t want = host_draw(s, c, m, u, q, &margin);
        float uf[2] = {0.0f, (float)u};
        int32_t prev = 7, drafts[2] = {-2, -2};
        const draw_push dp = {1, (uint32_t)k, (uint32_t)p.min_keep, p.top_p, p.min_p, p.temp, 1};
        void *data[4] = {lst, uf, &prev, drafts};
        size_t bytes[4] = {sizeof lst, sizeof uf, sizeof prev, sizeof drafts};
        CHECK(bs_vk_kernel_run(C, "draft_draw", data, bytes, 4, &dp, sizeof dp, 1, 1, 1) == 0);
        runs++;
        if (drafts[1] != want) {
            apart++;
            apart_far += margin >= 1e-4;
            if (margin >= 1e-4)
                fprintf(stderr, "trial %d: %d candidates, top-k %d, top-p %.3f, min-p %.3f, temp %.2f, u %.6f: device %d, host %d\n",
                        t, m, k, p.top_p, p.min_p, p.temp, u, drafts[1], want);
        }
        CHECKF(prev == drafts[1] && drafts[0] == -2, "trial %d: the draft %d, the Markov token %d, slot 0 %d", t, drafts[1], prev,
               drafts[0]);
        /* a decode step's draw: bs_sampler_pick's scan in the list's order, with the uniform the
           sampler's next draw takes (drawn ahead) */
        double ua;
        bs_sampler_set_seed(s, (uint64_t)t + 1);
        bs_sampler_lookahead(s, 1, &ua);
        int32_t ids[64];
        float vals[64];
        for (int i = 0; i < m; i++) ids[i] = c[i].id, vals[i] = c[i].v;
        const int32_t picked = bs_sampler_sample_top(s, ids, vals, m);
        const draw_push pp = {1, (uint32_t)k, (uint32_t)p.min_keep, p.top_p, p.min_p, p.temp, 0};
        uf[1] = (float)ua;
        CHECK(bs_vk_kernel_run(C, "draft_draw", data, bytes, 4, &pp, sizeof pp, 1, 1, 1) == 0);
        runs++;
        if (drafts[1] != picked) apart++, pick_apart++;
        bs_sampler_free(s);
    }
    CHECKF(apart_far == 0 && apart * 200 <= runs, "%d of %d draws apart (%d away from a boundary, %d decode steps')", apart, runs,
           apart_far, pick_apart);
    printf("draft_draw.comp: %d of %d lists drew the host's token (%d apart, %d of them away from a boundary)\n", runs - apart,
           runs, apart, apart_far);
    /* an empty list: no draft, and a Markov token the next slot can still read a row of */
    memset(lst, 0, sizeof lst);
    float uf[1] = {0.5f};
    int32_t prev = 7, drafts[1] = {-2};
    const draw_push dp = {0, 40, 1, 0.9f, 0.05f, 0.8f, 1};
    void *data[4] = {lst, uf, &prev, drafts};
    size_t bytes[4] = {sizeof lst, sizeof uf, sizeof prev, sizeof drafts};
    CHECK(bs_vk_kernel_run(C, "draft_draw", data, bytes, 4, &dp, sizeof dp, 1, 1, 1) == 0);
    CHECKF(drafts[0] == -1 && prev >= 0 && prev < V, "an empty list: draft %d, Markov token %d", drafts[0], prev);
    free(q);
}

/* One step of tok by kind: 0 plain top-k (undo on), 1 greedy ahead (*next its token), 2 sampled
 * ahead (u: this draw's uniform and the next's); its list's length (0 for greedy). */
static int step(bs_session *s, int kind, int32_t tok, const double *u, int32_t *ids, float *vals, int32_t *next) {
    static const bs_draw d = {40, 1, 0.95f, 0.05f, 0.8f};
    bs_session_set_undo(s, kind == 0);
    if (kind == 2) return bs_eval_top_drawn(s, tok, &d, u, ids, vals);
    if (kind == 1) return bs_eval_greedy(s, &tok, 1, next, NULL);
    return bs_eval_top(s, &tok, 1, 40, ids, vals);
}

static void check_mixed(const char *fixtures) {
    char path[600];
    snprintf(path, sizeof path, "%s/tiny-q1_0.gguf", fixtures);
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(path, &mp);
    CHECKF(m != NULL, "%s", bitspark_last_error());
    if (!m) return;
    bs_session_params sp = {.n_ctx = 128, .n_batch = 8, .n_rollback = 8};
    bs_session *a = bs_session_new(m, &sp), *ref = bs_session_new(m, &sp);
    bs_sampler_params pp = bs_sampler_default_params();
    pp.seed = 3;
    bs_sampler *smp = bs_sampler_new(&pp, bs_model_n_vocab(m));
    /* kinds at random; the next token the one the step fed ahead (its argmax or its predicted
       draw: the step ahead taken, the sets flipping once) or another (undone: twice), so that
       plain lists are recorded in either set before and after the sampled steps' second lists */
    bs_rng r;
    bs_rng_seed(&r, 77);
    int bad = 0, lists = 0;
    int32_t tok = 17;
    /* first a script: a plain list in the second set, the sampled steps' lists made in the first,
       then a plain list in the second set again (its recording from before binds the first set's
       list), each once with the state pair either way; then kinds at random */
    static const int script[] = {1, 1, 0, 1, 1, 2, 2, 0, 0, 1, 1, 0, 1, 1, 2, 2, 0};
    const int n_script = (int)BS_ARRAY_LEN(script);
    for (int i = 0; i < n_script + 48 && a && ref; i++) {
        const int kind = i < n_script ? script[i] : (int)(bs_rng_next(&r) % 3);
        int32_t ia[64], ib[64], next = -1;
        float va[64], vb[64];
        double u[2] = {0.5, 0.5};
        if (kind == 2) bs_sampler_lookahead(smp, 2, u);
        const int na = step(a, kind, tok, u, ia, va, &next), nb = step(ref, 0, tok, u, ib, vb, NULL);
        if (na < 0 || nb < 0) { CHECKF(false, "step %d: %s", i, bitspark_last_error()); break; }
        int32_t fed = kind == 1 ? next : kind == 2 ? bs_sampler_sample_top(smp, ia, va, na) : -1;
        if (kind != 1) {
            lists++;
            bad += na != nb || memcmp(ia, ib, sizeof *ia * (size_t)nb) || memcmp(va, vb, sizeof *va * (size_t)nb);
        }
        /* (the script takes what was fed, after its first step) */
        tok = fed >= 0 && (i < n_script ? i > 0 : bs_rng_next(&r) % 4 != 0) ? fed : (int32_t)(bs_rng_next(&r) % 1000);
    }
    CHECKF(bad == 0, "%d of %d lists differ from plain steps' after steps ahead", bad, lists);
    printf("greedy and sampled steps ahead mixed with plain ones: %d lists, each the plain steps'\n", lists);
    bs_sampler_free(smp);
    bs_session_free(a);
    bs_session_free(ref);
    bs_model_free(m);
}

int main(void) {
    const int rc = vk_test_open("test_vulkan_draw", &C);
    if (rc || !C) return rc;
    bs_rng_seed(&rng, 4242);
    check_draws();
    const char *fx = getenv("BS_FIXTURES");
    check_mixed(fx ? fx : "tests/fixtures");
    bs_vk_close(C);
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary("test_vulkan_draw");
}
