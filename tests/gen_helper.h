/* gen_helper.h: one whole generation through the engine (generate/engine.h) with what the tests
 * look at collected: the generated ids, why it stopped, what the loop guard did. */
#ifndef BS_TEST_GEN_HELPER_H
#define BS_TEST_GEN_HELPER_H

#include "generate/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The trained tiny Bonsai and its drafter in models/ (BS_SRC: the source tree); auto depth
 * measures afresh (no cost cache shared between tests). */
static inline void trained_pair(char *model, char *drafter, size_t cap) {
    const char *src = getenv("BS_SRC");
    snprintf(model, cap, "%s/models/bonsai-tiny-q1_0.gguf", src ? src : ".");
    snprintf(drafter, cap, "%s/models/bonsai-tiny-dspark.gguf", src ? src : ".");
    setenv("BITSPARK_NO_COST_CACHE", "1", 1);
}

/* Greedy decoding of a target (with a drafter at depth draft_max, BS_DRAFT_AUTO for auto, when
 * drafter is not NULL) on one thread; n_ctx 0: the model's. */
static inline bs_engine_opts greedy_opts(const char *model, const char *drafter, int draft_max, int n_ctx) {
    bs_engine_opts o;
    bs_engine_opts_init(&o);
    o.model = model;
    o.drafter = drafter;
    o.draft_max = draft_max;
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    o.sp.temp = 0;
    o.seed_set = true;
    return o;
}

typedef struct {
    int n_gen, n_decode, stop;
    int32_t *tokens;           /* malloc'd, n_gen */
    bs_loop_guard_result loop;
} gen_result;

/* The engine's request from its options, n_predict tokens, text streamed to emit (may be NULL). */
static inline int gen_generate(bs_engine *e, const int32_t *prompt, int n, int n_predict,
                               void (*emit)(void *ud, const char *text, size_t len), void *ud, gen_result *res) {
    bs_gen_request r;
    bs_engine_request(e, &r);
    r.n_predict = n_predict;
    int rc = bs_engine_generate(e, &r, prompt, n, emit, ud);
    const bs_gen_stats *st = bs_gen_get_stats(e->gen);
    bs_gen_output out;
    bs_gen_output_get(e->gen, &out);
    memset(res, 0, sizeof *res);
    res->n_gen = out.n_toks;
    res->n_decode = st->n_decode;
    res->stop = st->stop;
    res->loop = st->loop;
    res->tokens = malloc((size_t)(out.n_toks ? out.n_toks : 1) * sizeof *res->tokens);
    for (int i = 0; i < out.n_toks; i++) res->tokens[i] = out.toks[i].id;
    return rc;
}

#endif
