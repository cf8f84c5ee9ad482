/* test_dspark_sampling.c: speculative sampling gives exact samples of the target.
 *
 * Target tiny-q1_0 (fixture), sampler temp 1 with top-k 3, so three tokens after a fixed anchor
 * have at most 27 continuations whose exact probabilities we enumerate with plain evals through
 * the same sampler chain. Many seeded runs of speculative rounds must match that distribution
 * (chi-square, p = 0.001; cells with small expectation pooled), with drafters that are
 *   - perfect: the target itself (q = p; acceptance must be ~100%),
 *   - mediocre: the target at temperature 2 with top-k 6 (q != p, partial acceptance),
 *   - bad: uniform over 8 tokens outside the target's support (every draft rejected),
 *   - the real DSpark fixture drafter (random weights: its Markov-corrected logits through the
 *     target's sampler chain, top-k 3 at temperature 1).
 * The test's power is shown too: the mediocre drafter's own distribution must be rejected by the
 * same criterion at the same sample size. The perfect and mediocre drafters again with the
 * target's chain holding typical-p, XTC (its coin part of the distribution) and a dynamic
 * temperature: still exact. And the mediocre drafter with a grammar on the target that forbids a
 * letter the drafter's choices use (the drafter's q does not know it): drafts the grammar forbids
 * are verified and rejected, not cut from the block, or the sample would be biased. Mirostat's
 * state through rounds with rejections equals a plain replay's.
 * BS_SAMPLING_VULKAN=1 (ctest's test_vulkan_dspark_sampling): target and drafter on the Vulkan
 * device instead, the trained tiny pair (models/: a drafter that gets drafts accepted, its
 * token_embd / output borrowed from the target), the DSpark drafter alone on fewer runs (lavapipe
 * is slow); skipped (77) without a device. */
#include "dspark/dspark.h"
#include "model/device.h"
#include "model/qwen35.h"
#include "sample/grammar.h"
#include "sample/sampler.h"
#include "model/session.h"
#include "dspark/speculative.h"
#include "test.h"
#include "vk_test.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPK 3
#define NCELL (TOPK * TOPK * TOPK)
/* Under sanitizers (TEST_SANITIZED) the same checks run on fewer samples; the release build
 * runs the full sizes. */
#define RUNS_CPU (TEST_SANITIZED ? 150 : 700)
#define RUNS_VULKAN 300
static int RUNS = RUNS_CPU;
static bool on_vulkan;

static bs_model *M;
static int V;
static int32_t prompt[8] = {17, 300, 41, 512, 77, 9, 640, 128};
static const int NP = 8;
static int32_t anchor;
static uint8_t *state0;          /* the session after the prompt (the anchor not evaluated) */
static size_t state0_len;

static bool g_stages;   /* the target's chain with typical-p, XTC and a dynamic temperature too */
static const char *g_order = "";   /* ... in this order of stages (bs_sampler_params.order) */
/* A grammar on the target's chain (NULL: none): the enumeration's and the runs' samplers get a
 * state of it, advanced by the tokens after the anchor. */
static bs_grammar *g_grammar;
static bs_grammar_vocab *g_gvocab;

static bs_sampler *make_sampler(float temp, int top_k, uint64_t seed) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = temp;
    p.top_k = top_k;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    if (g_stages && temp == 1.0f && top_k == TOPK) {
        p.typical_p = 0.97f;
        p.xtc_probability = 0.5f;
        p.xtc_threshold = 0.2f;
        p.dynatemp_range = 0.5f;
        snprintf(p.order, sizeof p.order, "%s", g_order);
    }
    return bs_sampler_new(&p, V);
}

static bs_session *new_session(void) {
    bs_session_params p = {.n_ctx = 256, .n_threads = 1};
    return bs_session_new(M, &p);
}

/* --- the exact distribution: cells indexed by the rank of each token in its top-3 -------------- */
typedef struct { int32_t ids[NCELL][3]; double p[NCELL], q[NCELL]; } exact;

static void probs(const float *logits, float temp, int top_k, float *out) {
    bs_sampler *s = make_sampler(temp, top_k, 1);
    bs_sampler_apply(s, logits);
    bs_sampler_probs_dense(s, out);
    bs_sampler_free(s);
}

/* The target's distribution after the anchor and the tokens after[0..n) (g_grammar: advanced
 * by them), and its support's best 3 into ids (by probability, then the lower id). */
static void target_probs(const float *logits, const int32_t *after, int n, float *out, int32_t *ids) {
    bs_sampler *s = make_sampler(1.0f, TOPK, 1);
    bs_grammar_state *gs = g_grammar ? bs_grammar_state_new(g_grammar, g_gvocab) : NULL;
    if (gs) bs_sampler_set_grammar(s, gs);
    bs_sampler_accept_many(s, after, (size_t)n);
    bs_sampler_apply(s, logits);
    bs_sampler_probs_dense(s, out);
    bs_sampler_free(s);
    bs_grammar_state_free(gs);
    for (int k = 0; k < TOPK; k++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= ids[j] == v;
            if (!used && out[v] > 0 && (best < 0 || out[v] > out[best])) best = v;
        }
        ids[k] = best < 0 ? -1 : best;
    }
}

/* The top-3 ids of logits (descending, ties to the lower id). */
static void top3(const float *l, int32_t *ids) {
    for (int k = 0; k < TOPK; k++) {
        int best = -1;
        for (int v = 0; v < V; v++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= ids[j] == v;
            if (!used && (best < 0 || l[v] > l[best])) best = v;
        }
        ids[k] = best;
    }
}

static void enumerate(exact *e) {
    bs_session *s = new_session();
    float *l = bs_xmalloc((size_t)V * sizeof(float)), *p = bs_xmalloc((size_t)V * sizeof(float)),
          *q = bs_xmalloc((size_t)V * sizeof(float));
    int32_t t1[TOPK];
    double p1[TOPK], q1[TOPK];
    bs_session_state_load(s, state0, state0_len);
    bs_eval(s, &anchor, 1, BS_LOGITS_LAST, l, NULL);
    top3(l, t1);
    if (g_grammar) target_probs(l, NULL, 0, p, t1);
    else probs(l, 1.0f, TOPK, p);
    probs(l, 2.0f, 6, q);
    for (int a = 0; a < TOPK; a++) { p1[a] = p[t1[a]]; q1[a] = q[t1[a]]; }
    /* states after the anchor and after t1 (rollback only undoes the last batch) */
    const size_t cap = bs_session_state_size(s) + (1u << 20);
    uint8_t *s1 = bs_xmalloc(cap), *s2 = bs_xmalloc(cap);
    bs_session_state_save(s, s1, cap);
    const size_t n1 = bs_session_state_size(s);
    for (int a = 0; a < TOPK; a++) {
        bs_session_state_load(s, s1, n1);
        bs_eval(s, &t1[a], 1, BS_LOGITS_LAST, l, NULL);
        bs_session_state_save(s, s2, cap);
        const size_t n2 = bs_session_state_size(s);
        int32_t t2[TOPK];
        top3(l, t2);
        if (g_grammar) target_probs(l, &t1[a], 1, p, t2);
        else probs(l, 1.0f, TOPK, p);
        probs(l, 2.0f, 6, q);
        double p2[TOPK], q2[TOPK];
        for (int b = 0; b < TOPK; b++) { p2[b] = p[t2[b]]; q2[b] = q[t2[b]]; }
        for (int b = 0; b < TOPK; b++) {
            bs_session_state_load(s, s2, n2);
            bs_eval(s, &t2[b], 1, BS_LOGITS_LAST, l, NULL);
            int32_t t3[TOPK];
            top3(l, t3);
            if (g_grammar) target_probs(l, (const int32_t[]){t1[a], t2[b]}, 2, p, t3);
            else probs(l, 1.0f, TOPK, p);
            probs(l, 2.0f, 6, q);
            for (int c = 0; c < TOPK; c++) {
                const int cell = (a * TOPK + b) * TOPK + c;
                e->ids[cell][0] = t1[a];
                e->ids[cell][1] = t2[b];
                e->ids[cell][2] = t3[c];
                e->p[cell] = p1[a] * p2[b] * p[t3[c]];
                e->q[cell] = q1[a] * q2[b] * q[t3[c]];
            }
        }
    }
    free(l); free(p); free(q); free(s1); free(s2);
    bs_session_free(s);
}

static int cell_of(const exact *e, const int32_t *t) {
    for (int c = 0; c < NCELL; c++)
        if (!memcmp(e->ids[c], t, sizeof e->ids[c])) return c;
    return -1;
}

/* Pearson chi-square of counts vs probabilities (cells expecting < 5 pooled), and its 0.001
 * critical value (Wilson-Hilferty). */
static double chi2(const long *count, const double *prob, long n, int extra_cell, double *crit) {
    double stat = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int c = 0; c <= NCELL; c++) {
        const double e = c < NCELL ? prob[c] * n : 0;
        const double o = c < NCELL ? (double)count[c] : (double)extra_cell;
        if (e < 5) { pool_e += e; pool_o += o; continue; }
        stat += (o - e) * (o - e) / e;
        cells++;
    }
    if (pool_e > 0) { stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e; cells++; }
    else if (pool_o > 0) stat = INFINITY;   /* outcomes the target never produces */
    const double k = cells - 1, z = 3.09;
    *crit = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    return stat;
}

/* --- drafter hooks ----------------------------------------------------------------------------- */
enum { D_SELF, D_TEMPERED, D_BAD, D_DSPARK };
typedef struct {
    int mode;
    bs_session *main, *scratch;
    uint8_t *buf;
    size_t cap;
    float *logits;
} hook_ctx;

static int hook(void *ud, int32_t anc, int pos, int k, bs_sampler *smp, int32_t *drafts, float *q) {
    hook_ctx *h = ud;
    (void)pos;
    if (!q) return 0;
    if (h->mode == D_BAD) {
        for (int i = 0; i < k; i++) {
            float *row = q + (size_t)i * V;
            memset(row, 0, (size_t)V * sizeof(float));
            for (int j = 0; j < 8; j++) row[1000 + j] = 0.125f;
            drafts[i] = bs_sampler_draw(smp, NULL, row, V);
        }
        return k;
    }
    const size_t n = bs_session_state_size(h->main);
    if (n > h->cap || bs_session_state_save(h->main, h->buf, h->cap) || bs_session_state_load(h->scratch, h->buf, n))
        return 0;
    bs_sampler *ds = h->mode == D_SELF ? make_sampler(1.0f, TOPK, 1) : make_sampler(2.0f, 6, 1);
    int32_t prev = anc;
    for (int i = 0; i < k; i++) {
        float *row = q + (size_t)i * V;
        bs_eval(h->scratch, &prev, 1, BS_LOGITS_LAST, h->logits, NULL);
        bs_sampler_apply(ds, h->logits);
        bs_sampler_probs_dense(ds, row);
        drafts[i] = prev = bs_sampler_draw(smp, NULL, row, V);
    }
    bs_sampler_free(ds);
    return k;
}

static void run_variant(const exact *e, int mode, const char *name, int draft_max, bs_dspark *d) {
    bs_session *s = new_session(), *scratch = new_session();
    float *logits = bs_xmalloc((size_t)V * sizeof(float));
    hook_ctx h = {.mode = mode, .main = s, .scratch = scratch, .cap = state0_len + (1u << 20), .logits = logits};
    h.buf = bs_xmalloc(h.cap);
    bs_spec_params sp = {.draft_max = draft_max};
    bs_spec *spec = bs_spec_new(s, mode == D_DSPARK ? d : NULL, &sp);
    CHECKF(spec != NULL, "%s", bs_last_error());
    if (!spec) return;
    if (mode != D_DSPARK) bs_spec_set_draft_hook(spec, hook, &h);
    else CHECK(bs_spec_prompt(spec, prompt, NP, logits) == 0);   /* feeds the drafter the prompt taps */
    const int n_after_prompt = NP;
    long count[NCELL] = {0}, other = 0;
    for (int run = 0; run < RUNS; run++) {
        bs_session_state_load(s, state0, state0_len);
        CHECK(bs_session_n_past(s) == n_after_prompt);
        bs_spec_sync(spec);
        bs_sampler *smp = make_sampler(1.0f, TOPK, 1000 + (uint64_t)run);
        bs_sampler_accept_many(smp, prompt, NP);
        bs_sampler_accept(smp, anchor);
        bs_grammar_state *gs = g_grammar ? bs_grammar_state_new(g_grammar, g_gvocab) : NULL;
        if (gs) bs_sampler_set_grammar(smp, gs);
        int32_t got[8], buf[BS_DSPARK_MAX_BLOCK + 1];
        int n = 0;
        int32_t a = anchor;
        while (n < 3) {
            const int m = bs_spec_round(spec, smp, a, 3 - n, NULL, NULL, buf);
            if (m < 1) { CHECKF(false, "%s: round failed: %s", name, bs_last_error()); break; }
            memcpy(got + n, buf, (size_t)m * sizeof *buf);
            n += m;
            a = buf[m - 1];
        }
        bs_sampler_free(smp);
        bs_grammar_state_free(gs);
        const int c = n == 3 ? cell_of(e, got) : -1;
        if (c >= 0) count[c]++;
        else other++;
    }
    double crit;
    const double stat = chi2(count, e->p, RUNS, (int)other, &crit);
    const bs_spec_stats *st = bs_spec_get_stats(spec);
    const double acc = st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0;
    CHECKF(stat < crit, "%s: chi-square %.1f >= %.1f", name, stat, crit);
    if (getenv("BS_DEBUG"))
        for (int c = 0; c < NCELL; c++) printf("    cell %2d %4d %4d %4d: %4ld expected %7.1f\n", c, e->ids[c][0], e->ids[c][1], e->ids[c][2], count[c], e->p[c] * RUNS);
    printf("  %-26s draft-max %d: chi2 %6.1f (0.001 critical %.1f), acceptance %.3f over %ld drafts\n", name,
           draft_max, stat, crit, acc, st->n_drafted);
    if (mode == D_SELF) CHECKF(acc > 0.99, "perfect drafter acceptance %.3f", acc);
    if (mode == D_DSPARK && on_vulkan) CHECKF(acc > 0.05, "trained drafter acceptance %.3f", acc);
    if (mode == D_BAD) CHECKF(st->n_accepted == 0, "bad drafter: %ld accepted", st->n_accepted);
    if (mode == D_TEMPERED) CHECKF(acc > 0.2 && acc < 0.98, "mediocre drafter acceptance %.3f", acc);
    bs_spec_free(spec);
    free(h.buf);
    free(logits);
    bs_session_free(s);
    bs_session_free(scratch);
}

/* Mirostat's bound through speculative rounds (drafts rejected, rows rolled back) equals a plain
 * replay's, bit for bit: each accepted token moved it by its surprise in the target's distribution
 * at its own position, so every round verified its drafts against the distribution plain decoding
 * has there (speculative sampling is then exact, as for any chain). */
static void mirostat_replay(void) {
    enum { N = 32 };
    bs_session *s = new_session(), *scratch = new_session();
    float *l = bs_xmalloc((size_t)V * sizeof(float));
    hook_ctx h = {.mode = D_TEMPERED, .main = s, .scratch = scratch, .cap = state0_len + (1u << 20), .logits = l};
    h.buf = bs_xmalloc(h.cap);
    bs_spec_params sp = {.draft_max = 3};
    bs_spec *spec = bs_spec_new(s, NULL, &sp);
    bs_spec_set_draft_hook(spec, hook, &h);
    bs_session_state_load(s, state0, state0_len);
    bs_spec_sync(spec);
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 1.0f, p.mirostat = 2, p.mirostat_tau = 2.0f, p.mirostat_eta = 0.5f, p.seed = 7;
    bs_sampler *smp = bs_sampler_new(&p, V), *rs = bs_sampler_new(&p, V);
    int32_t got[N + BS_DSPARK_MAX_BLOCK + 1], a = anchor;
    int n = 0;
    for (bs_sampler *x = smp; x; x = x == smp ? rs : NULL) {
        bs_sampler_accept_many(x, prompt, NP);
        bs_sampler_accept(x, anchor);
    }
    while (n < N) {
        const int m = bs_spec_round(spec, smp, a, N - n, NULL, NULL, got + n);
        if (m < 1) { CHECKF(false, "mirostat round failed: %s", bs_last_error()); break; }
        n += m;
        a = got[n - 1];
    }
    bs_session_state_load(scratch, state0, state0_len);   /* the replay: one plain step per token */
    int32_t t = anchor;
    int outside = 0;
    for (int i = 0; i < n; i++) {
        bs_eval(scratch, &t, 1, BS_LOGITS_LAST, l, NULL);
        bs_sampler_apply(rs, l);
        outside += bs_sampler_prob(rs, got[i]) == 0;
        bs_sampler_accept(rs, t = got[i]);
    }
    const bs_spec_stats *st = bs_spec_get_stats(spec);
    const float mu = bs_sampler_mirostat_mu(smp), mu_plain = bs_sampler_mirostat_mu(rs);
    CHECKF(n == N && !outside && mu == mu_plain && mu != 2 * p.mirostat_tau,
           "mirostat: %d tokens, %d outside the plain distribution, mu %.9g after the rounds, %.9g replayed", n,
           outside, (double)mu, (double)mu_plain);
    CHECKF(st->n_accepted > 0 && st->n_accepted < st->n_drafted, "mirostat: %ld of %ld drafts accepted",
           st->n_accepted, st->n_drafted);
    printf("  mirostat 2 through %ld rounds (%ld of %ld drafts accepted): mu %.6f, the plain replay's %.6f\n",
           st->n_rounds, st->n_accepted, st->n_drafted, (double)mu, (double)mu_plain);
    bs_sampler_free(smp);
    bs_sampler_free(rs);
    bs_spec_free(spec);
    free(h.buf);
    free(l);
    bs_session_free(s);
    bs_session_free(scratch);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *src = getenv("BS_SRC");
    char path[600], dpath[600];
    on_vulkan = getenv("BS_SAMPLING_VULKAN") && atoi(getenv("BS_SAMPLING_VULKAN"));
    if (on_vulkan) {
        bs_vk_device_info info[8];
        const int nd = vk_test_devices(info, 8);
        if (nd < 0) return -nd;
        RUNS = RUNS_VULKAN;
        snprintf(path, sizeof path, "%s/models/bonsai-tiny-q1_0.gguf", src ? src : ".");
        snprintf(dpath, sizeof dpath, "%s/models/bonsai-tiny-dspark.gguf", src ? src : ".");
    } else {
        snprintf(path, sizeof path, "%s/tiny-q1_0.gguf", fx ? fx : "tests/fixtures");
        snprintf(dpath, sizeof dpath, "%s/tiny-dspark-f32.gguf", fx ? fx : "tests/fixtures");
    }
    bs_model_params mp = {.device = on_vulkan ? "vulkan" : NULL};
    M = bs_model_load(path, &mp);
    bs_dspark *d = bs_dspark_load(dpath, NULL);
    CHECKF(M && d, "%s", bs_last_error());
    if (!M || !d) return test_summary("test_dspark_sampling");
    V = M->hp.n_vocab;
    if (on_vulkan) {
        CHECK(bs_dspark_share_embeddings(d, M, false) == 2);
        printf("device: %s\n", bs_model_device(M));
    }

    /* the state after the prompt, and the anchor = the prompt's greedy token */
    bs_session *s = new_session();
    float *l = bs_xmalloc((size_t)V * sizeof(float));
    bs_session_set_taps(s, d->hp.taps, d->hp.n_taps);   /* taps do not change the state; keeps sizes equal */
    bs_eval(s, prompt, NP, BS_LOGITS_LAST, l, NULL);
    int32_t t[TOPK];
    top3(l, t);
    anchor = t[0];
    state0_len = bs_session_state_size(s);
    state0 = bs_xmalloc(state0_len);
    bs_session_state_save(s, state0, state0_len);
    bs_session_free(s);
    free(l);

    exact e;
    enumerate(&e);
    double sum = 0;
    for (int c = 0; c < NCELL; c++) sum += e.p[c];
    CHECKF(fabs(sum - 1) < 1e-4, "exact distribution sums to %g", sum);

    printf("speculative sampling vs the target's own distribution (%d runs each):\n", RUNS);
    if (on_vulkan) {
        run_variant(&e, D_DSPARK, "DSpark drafter on Vulkan", 3, d);
        CHECKF(bs_dspark_on_device(d), "the drafter did not go to the device");
    } else {
        run_variant(&e, D_SELF, "perfect drafter (q = p)", 2, d);
        run_variant(&e, D_TEMPERED, "mediocre drafter (T 2, k 6)", 3, d);
    }
    if (!TEST_SANITIZED && !on_vulkan) {
        run_variant(&e, D_BAD, "bad drafter (off-support)", 2, d);
        run_variant(&e, D_DSPARK, "DSpark fixture drafter", 2, d);
    }

    /* the stages beyond the default chain (XTC's coin as a mixture): still exact */
    if (!on_vulkan) {
        g_stages = true;
        exact e2;
        enumerate(&e2);
        double sum2 = 0, moved = 0;
        for (int c = 0; c < NCELL; c++) sum2 += e2.p[c], moved += fabs(e2.p[c] - e.p[c]);
        CHECKF(fabs(sum2 - 1) < 1e-4 && moved > 0.1, "with the stages: sums to %g, %g of the mass moved", sum2, moved);
        run_variant(&e2, D_SELF, "perfect, typical+XTC+dyntemp", 2, d);
        run_variant(&e2, D_TEMPERED, "mediocre, typical+XTC+dyntemp", 3, d);
        /* the same stages in another order (the temperature first): another distribution, exact */
        g_order = "tkxy";   /* (XTC before typical-p: its two sets each go through it; top-k first keeps
                               the support in the top 3 the cells count) */
        exact e3;
        enumerate(&e3);
        moved = 0;
        for (int c = 0; c < NCELL; c++) moved += fabs(e3.p[c] - e2.p[c]);
        CHECKF(moved > 0.01, "the order moved %g of the mass", moved);
        run_variant(&e3, D_TEMPERED, "mediocre, temperature first", 3, d);
        g_order = "";
        g_stages = false;
    }

    /* a grammar on the target that forbids letters the drafter's choices use: sampled drafts it
       forbids are verified (and rejected), never cut, so the sample stays exact */
    if (!on_vulkan) {
        bs_tokenizer *tok = bs_tokenizer_load(M);
        float *lg = bs_xmalloc((size_t)V * sizeof(float));
        bs_session *g0 = new_session();
        bs_session_state_load(g0, state0, state0_len);
        bs_eval(g0, &anchor, 1, BS_LOGITS_LAST, lg, NULL);
        bs_session_free(g0);
        int32_t six[6];
        char letters[8] = {0};
        int nl = 0;
        for (int k = 0; k < 6; k++) {   /* the raw best 6 (the mediocre drafter's support) */
            six[k] = -1;
            for (int v = 0; v < V; v++) {
                bool used = false;
                for (int j = 0; j < k; j++) used |= six[j] == v;
                if (!used && (six[k] < 0 || lg[v] > lg[six[k]])) six[k] = v;
            }
        }
        for (int k = 0; k < 6 && nl < 4; k++) {   /* a letter of each (at most 4) */
            const char *piece = NULL;
            size_t len = 0;
            bs_token_to_piece(tok, six[k], true, &piece, &len);
            for (size_t i = 0; i < len; i++)
                if (piece[i] >= 'a' && piece[i] <= 'z') {
                    if (!strchr(letters, piece[i])) letters[nl++] = piece[i];
                    break;
                }
        }
        free(lg);
        char gbnf[64];
        snprintf(gbnf, sizeof gbnf, "root ::= [^%s]*", nl ? letters : "e");
        g_grammar = bs_grammar_parse(gbnf);
        g_gvocab = bs_grammar_vocab_new(tok);
        CHECKF(g_grammar && g_gvocab, "grammar %s: %s", gbnf, bs_last_error());
        if (g_grammar && g_gvocab) {
            exact e3;
            enumerate(&e3);
            double sum3 = 0;
            bool whole = true;
            for (int c = 0; c < NCELL; c++) sum3 += e3.p[c], whole &= e3.ids[c][0] >= 0 && e3.ids[c][1] >= 0 && e3.ids[c][2] >= 0;
            CHECKF(whole && fabs(sum3 - 1) < 1e-4, "with %s: sums to %g", gbnf, sum3);
            printf("  (grammar %s)\n", gbnf);
            /* three times the runs: the bias a cut gives here (the drafter's mass on the letters
               times how far the residual is from p) is small beside 700 runs' noise */
            const int runs = RUNS;
            RUNS = TEST_SANITIZED ? RUNS : 3 * RUNS;
            if (whole) run_variant(&e3, D_TEMPERED, "mediocre, under a grammar", 3, d);
            RUNS = runs;
        }
        bs_grammar_free(g_grammar);
        bs_grammar_vocab_free(g_gvocab);
        g_grammar = NULL;
        g_gvocab = NULL;
        bs_tokenizer_free(tok);
    }

    if (!on_vulkan) mirostat_replay();

    /* power: sampling the mediocre drafter's own distribution must fail the same test */
    double crit, stat = 0;
    {
        long count[NCELL];
        double qsum = 0;
        for (int c = 0; c < NCELL; c++) qsum += e.q[c];
        for (int c = 0; c < NCELL; c++) count[c] = lround(e.q[c] / qsum * RUNS);
        stat = chi2(count, e.p, RUNS, 0, &crit);
    }
    CHECKF(stat > (TEST_SANITIZED ? 1 : 2) * crit, "power: the drafter's own distribution gives chi2 %.1f (critical %.1f)", stat, crit);
    printf("  power check: the mediocre drafter's own distribution scores chi2 %.1f (critical %.1f)\n", stat, crit);
    free(state0);
    bs_dspark_free(d);
    bs_model_free(M);
    return test_summary("test_dspark_sampling");
}
