/* test_mirostat.c: Mirostat v1 and v2 against a double-precision reference written from
 * llama.cpp's definitions (each step's distribution and the bound mu it leaves), the bound
 * restored by truncation, the chain it replaces (penalties not applied, greedy still the argmax,
 * no device top-k list), parameter checks, and the point of it: the mean surprise of the tokens
 * drawn settles at the target tau. */
#include "sample/sampler.h"
#include "io/util.h"
#include "model/session.h"
#include "bitspark.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

enum { V = 500 };

static bs_sampler_params miro(int version, float tau, float eta) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0.9f;
    p.mirostat = version;
    p.mirostat_tau = tau;
    p.mirostat_eta = eta;
    p.seed = 11;
    return p;
}

typedef struct { int id; double l; } rtok;
static int by_logit(const void *a, const void *b) {
    const rtok *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

/* The reference step: the distribution Mirostat gives the logits at temperature t with bound mu
 * (dense, into out). */
static void ref_step(const float *x, int n_vocab, int version, double t, double mu, double *out) {
    rtok *c = malloc(sizeof *c * (size_t)n_vocab);
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (x[i] != -INFINITY) c[n++] = (rtok){i, x[i] / t};
    qsort(c, (size_t)n, sizeof *c, by_logit);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(c[i].l - c[0].l);
    int keep = 0;
    if (version == 2) {   /* the prefix whose surprise -log2 p is at most mu, at least one */
        while (keep < n && -log2(exp(c[keep].l - c[0].l) / z) <= mu) keep++;
        if (keep == 0) keep = 1;
    } else {              /* Zipf exponent of the best 100, then the k it implies */
        double tb = 0, tt = 0;
        for (int i = 0; i < 99 && i < n - 1; i++) {
            const double ti = log((i + 2.0) / (i + 1.0));
            tb += ti * (c[i].l - c[i + 1].l);
            tt += ti * ti;
        }
        const double s_hat = tb / tt, eps = s_hat - 1;
        const double k = pow(eps * pow(2, mu) / (1 - pow(n_vocab, -eps)), 1 / s_hat);
        keep = k < 1 ? 1 : k > n ? n : (int)k;
    }
    double zk = 0;
    for (int i = 0; i < keep; i++) zk += exp(c[i].l - c[0].l);
    memset(out, 0, sizeof *out * (size_t)n_vocab);
    for (int i = 0; i < keep; i++) out[c[i].id] = exp(c[i].l - c[0].l) / zk;
    free(c);
}

/* Sixty steps of random logits: each step's distribution and the bound after it follow the
 * reference; truncating the history brings back the bound of that length. */
static void test_steps(int version) {
    static float x[V], got[V];
    static double ref[V];
    float mu_at[61];
    bs_rng r;
    bs_rng_seed(&r, 5 + (uint64_t)version);
    const bs_sampler_params p = miro(version, 3.0f, 0.5f);
    bs_sampler *s = bs_sampler_new(&p, V);
    const int32_t prompt[4] = {1, 2, 3, 4};
    bs_sampler_accept_many(s, prompt, 4);   /* no apply before: the bound does not move */
    CHECK(bs_sampler_mirostat_mu(s) == 6.0f, "v%d: mu starts at 2 tau, %g after the prompt", version,
          (double)bs_sampler_mirostat_mu(s));
    double mu = 6.0, worst = 0;
    int moved = 0, sizes = 0;
    for (int step = 0; step < 60; step++) {
        const float scale = step % 3 == 0 ? 0.5f : step % 3 == 1 ? 2.0f : 5.0f;
        for (int i = 0; i < V; i++) x[i] = scale * bs_rng_normal(&r);
        if (step % 7 == 3) for (int i = 0; i < V; i += 5) x[i] = -INFINITY;
        mu_at[step] = bs_sampler_mirostat_mu(s);
        const int n = bs_sampler_apply(s, x);
        bs_sampler_probs_dense(s, got);
        ref_step(x, V, version, p.temp, mu, ref);
        for (int i = 0; i < V; i++) {   /* (no fmax reduction: gcc 12's aarch64 vectorizer fails on it) */
            const double d = fabs(got[i] - ref[i]);
            if (d > worst) worst = d;
        }
        sizes += n;
        const int32_t id = bs_sampler_pick(s);
        CHECK(id >= 0 && ref[id] > 0, "v%d step %d: drew %d outside the reference's support", version, step, id);
        if (id < 0) break;
        bs_sampler_accept(s, id);
        mu -= p.mirostat_eta * (-log2(ref[id]) - p.mirostat_tau);
        moved += fabsf(bs_sampler_mirostat_mu(s) - mu_at[step]) > 1e-3f;
        CHECK(fabs(bs_sampler_mirostat_mu(s) - mu) < 1e-3, "v%d step %d: mu %g, reference %g", version, step,
              (double)bs_sampler_mirostat_mu(s), mu);
    }
    mu_at[60] = bs_sampler_mirostat_mu(s);
    CHECK(worst < 2e-5, "v%d: probabilities off the reference by %g", version, worst);
    CHECK(moved > 50 && sizes > 60 && sizes < 60 * V / 2, "v%d: mu moved in %d of 60 steps, %d candidates in all",
          version, moved, sizes);
    const int cut[] = {59, 30, 1, 0};
    for (size_t k = 0; k < BS_ARRAY_LEN(cut); k++) {
        bs_sampler_truncate(s, 4 + (size_t)cut[k]);
        CHECK(bs_sampler_mirostat_mu(s) == mu_at[cut[k]], "v%d: truncated to %d generated tokens, mu %g, was %g",
              version, cut[k], (double)bs_sampler_mirostat_mu(s), (double)mu_at[cut[k]]);
    }
    bs_sampler_free(s);
    printf("mirostat v%d: 60 steps match the reference (largest difference %.2g), truncation restores mu\n", version,
           worst);
}

/* The chain Mirostat replaces: penalties and DRY are not applied (llama.cpp's Mirostat chain has
 * none), the logit bias is; greedy stays the argmax; no device top-k list is offered; bad
 * parameters are refused. */
static void test_chain(void) {
    static float x[V], a[V], b[V];
    bs_rng r;
    bs_rng_seed(&r, 3);
    for (int i = 0; i < V; i++) x[i] = 2.0f * bs_rng_normal(&r);
    int32_t best = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
    bs_sampler_params p = miro(2, 2.0f, 0.1f), q = p;
    q.repeat_penalty = 3.0f, q.presence_penalty = 2.0f, q.dry_multiplier = 1.0f, q.penalty_last_n = -1;
    bs_sampler *s1 = bs_sampler_new(&p, V), *s2 = bs_sampler_new(&q, V);
    const int32_t hist[6] = {best, best, 7, best, 9, best};
    bs_sampler_accept_many(s1, hist, 6);
    bs_sampler_accept_many(s2, hist, 6);
    bs_sampler_apply(s1, x);
    bs_sampler_apply(s2, x);
    bs_sampler_probs_dense(s1, a);
    bs_sampler_probs_dense(s2, b);
    CHECK(!memcmp(a, b, sizeof a) && a[best] > 0, "penalties changed Mirostat's distribution");
    CHECK(bs_sampler_top_k_only(s1, BS_TOP_MAX) == 0, "a device top-k list was offered with Mirostat");
    bs_sampler_set_logit_bias(s1, best, -INFINITY);
    bs_sampler_apply(s1, x);
    CHECK(bs_sampler_prob(s1, best) == 0, "the logit bias did not ban the token under Mirostat");
    bs_sampler_free(s1);
    bs_sampler_free(s2);
    for (int v = 1; v <= 2; v++) {
        bs_sampler_params g = miro(v, 5.0f, 0.1f);
        g.temp = 0;
        g.repeat_penalty = 5.0f;
        bs_sampler *s = bs_sampler_new(&g, V);
        bs_sampler_accept(s, best);
        CHECK(bs_sampler_sample(s, x) == best, "v%d greedy: not the argmax", v);
        bs_sampler_free(s);
    }
    bs_sampler_params bad = miro(3, 5.0f, 0.1f);
    CHECK(bs_sampler_new(&bad, V) == NULL, "mirostat 3 accepted");
    bad = miro(2, -1.0f, 0.1f);
    CHECK(bs_sampler_new(&bad, V) == NULL, "a negative tau accepted");
    bad = miro(1, 5.0f, NAN);
    CHECK(bs_sampler_new(&bad, V) == NULL, "a NaN eta accepted");
    printf("mirostat: penalties off, bias kept, greedy the argmax, no device list, bad parameters refused\n");
}

/* What Mirostat is for: on a Zipf-like distribution far more surprising than tau, the mean
 * surprise of the drawn tokens settles near tau. (mu integrates the error, so this holds when mu
 * moves against the surprise and stays bounded: a wrong sign or scale of the update fails it.) */
static void test_target(int version) {
    enum { N = 2000, STEPS = 3000 };
    static float x[N];
    for (int i = 0; i < N; i++) x[i] = -1.1f * logf((float)i + 1);
    const float tau = 4.0f;
    bs_sampler_params p = miro(version, tau, 0.1f);
    p.temp = 1.0f;
    bs_sampler *s = bs_sampler_new(&p, N), *plain;
    bs_sampler_params pp = bs_sampler_default_params();
    pp.temp = 1, pp.top_k = 0, pp.top_p = 1, pp.min_p = 0;
    plain = bs_sampler_new(&pp, N);
    bs_sampler_apply(plain, x);
    double h = 0;   /* the untruncated distribution's entropy, in bits */
    for (int i = 0; i < N; i++) {
        const double q = bs_sampler_prob(plain, i);
        if (q > 0) h -= q * log2(q);
    }
    double sum = 0;
    for (int step = 0; step < STEPS; step++) {
        bs_sampler_apply(s, x);
        const int32_t id = bs_sampler_pick(s);
        if (step >= STEPS / 3) sum += -log2(bs_sampler_prob(s, id));
        bs_sampler_accept(s, id);
    }
    const double mean = sum / (STEPS - STEPS / 3);
    CHECK(h > tau + 1 && fabs(mean - tau) < (version == 2 ? 0.25 : 0.5),
          "v%d: mean surprise %.3f bits, target %.1f (untruncated entropy %.2f)", version, mean, (double)tau, h);
    printf("mirostat v%d: mean surprise %.3f bits for a target of %.1f (the distribution's entropy: %.2f)\n", version,
           mean, (double)tau, h);
    bs_sampler_free(s);
    bs_sampler_free(plain);
}

/* Extremes: a tiny temperature or a logit of +inf (FLT_MAX once tamed) does not overflow the
 * tempered logits (the best token drawn at p 1, mu learning from it); an apply that no token
 * followed (an end-of-generation token drawn, never accepted) teaches nothing to the prompt token
 * accepted after a truncation, and neither to the first token after a reset. */
static void test_extremes(void) {
    const float x[8] = {0.5f, -1, 2, 0.1f, 3, 9, -4, 1}, y[8] = {0.5f, -1, 2, INFINITY, 3, 1, -4, 1};
    for (int v = 1; v <= 2; v++) {
        const struct { const float *l; float t; int32_t best; } cases[] = {{x, 1e-39f, 5}, {y, 0.5f, 3}};
        for (size_t k = 0; k < BS_ARRAY_LEN(cases); k++) {
            bs_sampler_params p = miro(v, 3.0f, 0.5f);
            p.temp = cases[k].t;
            bs_sampler *s = bs_sampler_new(&p, 8);
            const int32_t id = bs_sampler_sample(s, cases[k].l);
            const float pr = bs_sampler_prob(s, id);
            bs_sampler_accept(s, id);
            CHECK(id == cases[k].best && pr == 1.0f && bs_sampler_mirostat_mu(s) == 6.0f + 1.5f,
                  "v%d case %zu: drew %d at p %g, mu %g", v, k, id, (double)pr, (double)bs_sampler_mirostat_mu(s));
            bs_sampler_free(s);
        }
        bs_sampler_params p = miro(v, 3.0f, 0.5f);
        bs_sampler *s = bs_sampler_new(&p, 8);
        const int32_t prompt[3] = {1, 2, 3}, next = 1;
        bs_sampler_accept_many(s, prompt, 3);
        bs_sampler_apply(s, x);   /* drawn and not accepted (an end of generation) */
        bs_sampler_truncate(s, 3);
        bs_sampler_accept_many(s, &next, 1);
        CHECK(bs_sampler_mirostat_mu(s) == 6.0f, "v%d: a prompt token after a truncation moved mu to %g", v,
              (double)bs_sampler_mirostat_mu(s));
        bs_sampler_truncate(s, 0);
        bs_sampler_apply(s, x);
        bs_sampler_truncate(s, 0);   /* a reset of an empty history */
        bs_sampler_accept(s, next);
        CHECK(bs_sampler_mirostat_mu(s) == 6.0f, "v%d: the first token after a reset moved mu to %g", v,
              (double)bs_sampler_mirostat_mu(s));
        bs_sampler_free(s);
    }
    printf("mirostat: no overflow at a tiny temperature or an infinite logit; no learning from a stale apply\n");
}

int main(void) {
    test_steps(1);
    test_steps(2);
    test_chain();
    test_extremes();
    test_target(1);
    test_target(2);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all mirostat checks passed\n");
    return 0;
}
