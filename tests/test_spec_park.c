/* test_spec_park: parking of `--draft-max auto` is nearly free, checked by counts, not timing.
 *   - the depth controller with drafts that are never accepted: it parks after its first
 *     observations, then probes ever more rarely (the interval doubles per failed probe), so a
 *     long generation drafts in only a handful of rounds; once probes succeed it drafts again;
 *   - the drafter context with a gap (bs_dspark_ctx_skip, what parking leaves): crop and append
 *     across it give bit-identical block outputs to building the same rows directly;
 *   - a drafter accepted now and then gets its learning rounds; p seeded from an earlier run
 *     (the cost cache keeps it, with the probe cost) parks or drafts deep from the first round;
 *   - end to end on the tiny fixture pair (random drafter): greedy output identical to plain
 *     decoding, with only a few drafted rounds; costs measured for depth 1 only are completed
 *     by the first round that wants more drafts. */
#include "test.h"
#include "dspark/dspark.h"
#include "model/qwen35.h"
#include "sample/sampler.h"
#include "model/session.h"
#include "dspark/spec_cost_cache.h"
#include "dspark/spec_depth.h"
#include "dspark/speculative.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_controller(void) {
    bs_spec_depth d;
    bs_depth_init(&d, 4, BS_DRAFT_AUTO);
    /* costs where drafting pays from p ~ 0.3 on */
    const double verify[] = {0, 1e-3, 1.1e-3, 1.2e-3, 1.3e-3, 1.4e-3};
    bs_depth_calibrate(&d, verify, 0.2e-3, 0.01e-3);
    long drafted = 0;
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        const int k = bs_depth_choose(&d, 4);
        if (k > 0) {
            drafted++;
            bs_depth_observe_accept(&d, k, 0, NULL);
        }
    }
    /* 3 missed rounds from the start are enough to park, then probes at intervals base, 2 base,
     * 4 base, ... up to 2048 */
    CHECK(d.parked);
    CHECKF(drafted <= 3 + 14, "%ld drafting rounds in %d", drafted, N);
    CHECKF(d.probe_every == 2048, "probe interval %d after failed probes", d.probe_every);
    /* the drafter turns good: the next probe succeeds, the interval drops back to its base,
     * and a few more successful probes bring drafting back, then deeper */
    int resumed = -1, deepest = 0;
    for (int i = 0; i < 2048 + 2000; i++) {
        const int k = bs_depth_choose(&d, 4);
        if (k > 0) bs_depth_observe_accept(&d, k, k, NULL);
        if (!d.parked && resumed < 0) resumed = i;
        if (resumed >= 0 && k > deepest) deepest = k;
    }
    CHECKF(resumed >= 0 && resumed <= 2048 + 1500, "drafting resumed after %d rounds", resumed);
    CHECKF(deepest >= 2, "deepest %d", deepest);

    /* a drafter as costly as the target (the trained tiny pair on a CPU: drafting pays from
     * p ~ 0.9 only) accepted a third of the time: probes that get a draft accepted still back
     * off, since p + 0.15 would not pay either; the same acceptance with cheap drafts keeps
     * probing at the base interval */
    const double costly_verify[] = {0, 1e-3, 1.4e-3, 1.8e-3, 2.0e-3, 2.3e-3};
    for (int cheap = 0; cheap < 2; cheap++) {
        bs_depth_init(&d, 4, BS_DRAFT_AUTO);
        bs_depth_calibrate(&d, cheap ? verify : costly_verify, cheap ? 0.2e-3 : 1.0e-3, 0.05e-3);
        bs_depth_seed_p(&d, cheap ? 0.05 : 0.34);
        long probes = 0;
        for (int i = 0; i < N; i++) {
            const int k = bs_depth_choose(&d, 4);
            if (k > 0) bs_depth_observe_accept(&d, k, (++probes % 3) == 1 ? 1 : 0, NULL);   /* 1 in 3 accepted */
        }
        if (cheap)   /* p rises towards 1/3 where drafting pays: probes keep coming, then drafting */
            CHECKF(probes > 100, "cheap drafts, a third accepted: %ld drafting rounds in %d", probes, N);
        else
            CHECKF(d.parked && probes <= 3 + 14, "costly drafts, a third accepted: %ld probes in %d (interval %d)", probes,
                   N, d.probe_every);
    }
}

/* A drafter that is accepted sometimes is given its 8 learning rounds at depth 1, not parked
 * after 3; p seeded from an earlier run skips learning both ways; the cost cache keeps p and
 * the probe cost for the next run of the pair. */
static void test_learning_and_seed(const char *fx) {
    const double verify[] = {0, 1e-3, 1.1e-3, 1.2e-3, 1.3e-3, 1.4e-3};
    bs_spec_depth d;
    bs_depth_init(&d, 4, BS_DRAFT_AUTO);
    bs_depth_calibrate(&d, verify, 0.2e-3, 0.01e-3);
    int k = 0;
    for (int i = 0; i < 7; i++) {   /* accepted once, then missed */
        k = bs_depth_choose(&d, 4);
        CHECK_EQ_INT(k, 1);
        bs_depth_observe_accept(&d, k, i == 0, NULL);
    }
    CHECK(!d.parked);

    bs_depth_init(&d, 4, BS_DRAFT_AUTO);
    bs_depth_calibrate(&d, verify, 0.2e-3, 0.01e-3);
    bs_depth_seed_p(&d, 0.02);
    CHECK_EQ_INT(bs_depth_choose(&d, 4), 0);   /* parked from the first round */
    CHECK(d.parked);
    bs_depth_init(&d, 4, BS_DRAFT_AUTO);
    bs_depth_calibrate(&d, verify, 0.2e-3, 0.01e-3);
    bs_depth_seed_p(&d, 0.9);
    CHECKF(bs_depth_choose(&d, 4) >= 2, "seeded p = 0.9 drafts deep at once (depth %d)", d.last);

    /* the cache: a run that parked leaves its p and probe cost to the next one */
    const char *tmp = getenv("BS_TMP");
    char dir[1024], tpath[1024], dpath[1024];
    snprintf(dir, sizeof dir, "%s/spec_park_cache", tmp ? tmp : "/tmp");
    snprintf(tpath, sizeof tpath, "%s/tiny-q1_0.gguf", fx);
    snprintf(dpath, sizeof dpath, "%s/tiny-dspark-f32.gguf", fx);
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("BITSPARK_NO_COST_CACHE");
    char file[1100];   /* a fresh cache: entries of an earlier run must not answer */
    snprintf(file, sizeof file, "%s/bitspark/dspark-costs", dir);
    unlink(file);
    bs_spec_depth a, b;
    bs_depth_init(&a, 4, BS_DRAFT_AUTO);
    bs_depth_calibrate(&a, verify, 0.2e-3, 0.01e-3);
    for (int i = 0; i < 3; i++) bs_depth_observe_accept(&a, bs_depth_choose(&a, 4), 0, NULL);
    bs_depth_observe_probe(&a, 30e-3);
    bs_cost_cache_store(&a, tpath, dpath, 3, NULL);
    bs_depth_init(&b, 4, BS_DRAFT_AUTO);
    CHECK_EQ_INT(bs_cost_cache_load(&b, tpath, dpath, 3, "cpu"), 1);
    CHECKF(b.p_known && fabs(b.p - a.p) < 1e-3, "cached p %.4f (run ended at %.4f)", b.p, a.p);
    CHECKF(fabs(b.probe_r - a.probe_r) < 1e-3 * a.probe_r, "cached probe cost %g (measured %g)", b.probe_r, a.probe_r);
    CHECK_EQ_INT(bs_depth_choose(&b, 4), 0);
    CHECKF(b.probe_every == 1024, "probe interval %d from the cached probe cost", b.probe_every);
    bs_depth_init(&b, 4, BS_DRAFT_AUTO);
    CHECK_EQ_INT(bs_cost_cache_load(&b, tpath, dpath, 2, NULL), 0);   /* another thread count: not this entry */
    bs_depth_init(&b, 4, BS_DRAFT_AUTO);
    CHECK_EQ_INT(bs_cost_cache_load(&b, tpath, dpath, 3, "Vulkan llvmpipe"), 0);   /* another device: its own */
    bs_cost_cache_store(&a, tpath, dpath, 3, "Vulkan llvmpipe");
    bs_depth_init(&b, 4, BS_DRAFT_AUTO);
    CHECK_EQ_INT(bs_cost_cache_load(&b, tpath, dpath, 3, "Vulkan llvmpipe"), 1);
    bs_depth_init(&b, 4, BS_DRAFT_AUTO);
    CHECK_EQ_INT(bs_cost_cache_load(&b, tpath, dpath, 3, NULL), 1);   /* the CPU's entry is kept beside it */
}

static float *random_rows(int n, size_t row, uint64_t seed) {
    bs_rng r;
    bs_rng_seed(&r, seed);
    float *x = bs_xmalloc((size_t)n * row * sizeof(float));
    for (size_t i = 0; i < (size_t)n * row; i++) x[i] = (float)(bs_rng_uniform(&r) * 2.0 - 1.0);
    return x;
}

static void test_gap(const char *fx) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny-dspark-f32.gguf", fx);
    bs_dspark *d = bs_dspark_load(path, NULL);
    CHECK(d != NULL);
    if (!d) return;
    const size_t row = (size_t)d->hp.n_taps * d->hp.n_embd;
    const size_t E = (size_t)d->hp.n_embd, B = (size_t)d->hp.block_size;
    float *x = random_rows(40, row, 7);
    bs_dspark_ctx *a = bs_dspark_ctx_new(d, 256, NULL), *b = bs_dspark_ctx_new(d, 256, NULL);
    /* a: rows 0..9, gap 10..14, rows 15..19; crop to 12 (into the gap) and add rows 12..19 */
    CHECK_EQ_INT(bs_dspark_ctx_append(a, x, 10), 0);
    CHECK_EQ_INT(bs_dspark_ctx_skip(a, 5), 0);
    CHECK_EQ_INT(bs_dspark_ctx_append(a, x + 15 * row, 5), 0);
    CHECK_EQ_INT(bs_dspark_ctx_len(a), 20);
    CHECK_EQ_INT(bs_dspark_ctx_rows(a), 15);
    bs_dspark_ctx_crop(a, 12);
    CHECK_EQ_INT(bs_dspark_ctx_len(a), 12);
    CHECK_EQ_INT(bs_dspark_ctx_rows(a), 10);
    CHECK_EQ_INT(bs_dspark_ctx_append(a, x + 20 * row, 8), 0);
    /* b: the same rows at the same positions, built directly */
    CHECK_EQ_INT(bs_dspark_ctx_append(b, x, 10), 0);
    CHECK_EQ_INT(bs_dspark_ctx_skip(b, 2), 0);
    CHECK_EQ_INT(bs_dspark_ctx_append(b, x + 20 * row, 8), 0);
    CHECK_EQ_INT(bs_dspark_block(a, 3, 20), 0);
    CHECK_EQ_INT(bs_dspark_block(b, 3, 20), 0);
    int diff = 0;
    for (size_t t = 0; t < B; t++)
        diff |= memcmp(bs_dspark_hidden(a, (int)t), bs_dspark_hidden(b, (int)t), E * sizeof(float));
    CHECKF(!diff, "a context built across a gap differs from the same rows appended directly");
    /* a block may not overlap the positions covered, gap included */
    CHECK(bs_dspark_block(a, 3, 19) != 0);
    bs_dspark_ctx_free(a);
    bs_dspark_ctx_free(b);
    free(x);
    bs_dspark_free(d);
}

/* How a speculative run is set up: drafts measured at the start (0: all), a seeded acceptance
 * (< 0: none); the controller's state at the end is copied to *depth when given. */
typedef struct { int calib_k; double seed_p; bool cheap; bs_spec_depth *depth; } run_opts;

/* Cost ratios where deeper drafts pay from p ~ 0.3 on, whatever this machine's timing says. */
static void cheap_costs(bs_spec_depth *d) {
    const double verify[] = {0, 1e-3, 1.1e-3, 1.2e-3, 1.3e-3, 1.4e-3};
    const int mk = d->measured_k;
    bs_depth_calibrate(d, verify, 0.2e-3, 0.01e-3);
    d->measured_k = mk;
}

static int greedy(bs_model *m, bs_dspark *d, const int32_t *prompt, int np, int n, int32_t *out, bs_spec_stats *st,
                  const run_opts *o) {
    bs_session_params spp = {.n_threads = 1, .n_ctx = 4096};
    bs_session *s = bs_session_new(m, &spp);
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    bs_sampler *smp = bs_sampler_new(&p, m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    int rc = 0, got = 0;
    bs_spec *sp = NULL;
    if (d) {
        bs_spec_params sparams = {.draft_max = BS_DRAFT_AUTO, .conf_cut = 1};
        sp = bs_spec_new(s, d, &sparams);
        rc = sp ? bs_spec_prompt(sp, prompt, np, logits) : -1;
    } else {
        rc = bs_eval(s, prompt, np, BS_LOGITS_LAST, logits, NULL);
    }
    bs_sampler_accept_many(smp, prompt, (size_t)np);
    if (!rc) {
        out[got] = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, out[got++]);
        if (sp) rc = o && o->calib_k ? bs_spec_calibrate_upto(sp, out[0], o->calib_k) : bs_spec_calibrate(sp, out[0]);
        if (sp && o && o->cheap) cheap_costs(bs_spec_depth_mut(sp));   /* timing-independent choices */
        if (sp && o && o->seed_p >= 0) bs_depth_seed_p(bs_spec_depth_mut(sp), o->seed_p);
    }
    int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
    while (!rc && got < n) {
        if (sp) {
            const int r = bs_spec_round(sp, smp, out[got - 1], n - got, NULL, NULL, buf);
            if (r < 1) { rc = -1; break; }
            memcpy(out + got, buf, (size_t)r * sizeof *buf);
            got += r;
        } else {
            if ((rc = bs_eval(s, &out[got - 1], 1, BS_LOGITS_LAST, logits, NULL))) break;
            out[got] = bs_sampler_sample(smp, logits);
            bs_sampler_accept(smp, out[got++]);
        }
    }
    if (sp && st) *st = *bs_spec_get_stats(sp);
    if (sp && o && o->depth) *o->depth = *bs_spec_get_depth(sp);
    bs_spec_free(sp);
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

static void test_end_to_end(const char *fx, bool asan) {
    char tpath[1024], dpath[1024];
    snprintf(tpath, sizeof tpath, "%s/tiny-q1_0.gguf", fx);
    snprintf(dpath, sizeof dpath, "%s/tiny-dspark-f32.gguf", fx);
    bs_model *m = bs_model_load(tpath, NULL);
    bs_dspark *d = bs_dspark_load(dpath, NULL);
    CHECK(m && d);
    if (!m || !d) { bs_model_free(m); bs_dspark_free(d); return; }
    const int n = asan ? 300 : 1500;
    int32_t prompt[8] = {9, 100, 42, 7, 300, 12, 5, 77};
    int32_t *a = bs_xmalloc((size_t)n * sizeof *a), *b = bs_xmalloc((size_t)n * sizeof *b);
    bs_spec_stats st;
    memset(&st, 0, sizeof st);
    CHECK_EQ_INT(greedy(m, NULL, prompt, 8, n, a, NULL, NULL), 0);
    CHECK_EQ_INT(greedy(m, d, prompt, 8, n, b, &st, NULL), 0);
    CHECKF(!memcmp(a, b, (size_t)n * sizeof *a), "speculative greedy with parking differs from plain");
    /* 3 rounds to see nothing is accepted, then probes, the interval doubling per failed one.
     * The base interval comes from measured costs (timing: 4 probes in 1500 tokens on an idle
     * machine, 5 once under CI load), so the bound is what any costs allow: an interval of at
     * least 8 rounds (PROBE_MIN), doubled each time */
    const int max_probes = (int)ceil(log2((double)n / 8 + 1));
    CHECKF(st.n_draft_rounds <= 3 + max_probes, "%ld drafting rounds in %d tokens (at most %d)", st.n_draft_rounds,
           n, 3 + max_probes);
    CHECKF(st.n_rounds >= n - 40, "%ld rounds for %d tokens", st.n_rounds, n);

    /* measured for depth 1 only, then told drafts are nearly always accepted: the first round
     * that wants more drafts measures the deeper costs; the output is still plain greedy's */
    bs_spec_depth dep;
    run_opts lazy = {.calib_k = 1, .seed_p = 0.97, .cheap = true, .depth = &dep};
    memset(b, 0, (size_t)n * sizeof *b);
    CHECK_EQ_INT(greedy(m, d, prompt, 8, 200, b, &st, &lazy), 0);
    CHECKF(!memcmp(a, b, 200 * sizeof *a), "greedy with lazily measured costs differs from plain");
    CHECKF(dep.measured_k == d->hp.block_size, "costs measured up to %d drafts", dep.measured_k);
    run_opts lazy_low = {.calib_k = 1, .seed_p = 0.01, .cheap = true, .depth = &dep};
    CHECK_EQ_INT(greedy(m, d, prompt, 8, 200, b, &st, &lazy_low), 0);
    CHECKF(!memcmp(a, b, 200 * sizeof *a), "greedy after a seeded low acceptance differs from plain");
    /* parked from the start: no deeper costs measured, and only probes drafted. How often they
     * come depends on what the first probe is measured to cost (under load it can look cheap),
     * so the bound is the one above, for 200 tokens */
    const int low_probes = (int)ceil(log2(200.0 / 8 + 1));
    CHECKF(dep.measured_k == 1 && st.n_draft_rounds <= low_probes,
           "parked from the start: %d measured, %ld drafted rounds (at most %d)", dep.measured_k, st.n_draft_rounds,
           low_probes);
    free(a);
    free(b);
    bs_model_free(m);
    bs_dspark_free(d);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES");
    if (!fx) fx = "tests/fixtures";
    const char *san = getenv("BS_SANITIZED");
    bool asan = san && *san == '1';
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
    asan = true;
#endif
#endif
    test_controller();
    test_learning_and_seed(fx);
    test_gap(fx);
    test_end_to_end(fx, asan);
    return test_summary("test_spec_park");
}
