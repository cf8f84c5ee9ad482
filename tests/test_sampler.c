/* test_sampler.c: the sampler chain against brute-force references (full sorts, O(n^2) DRY, the
 * extra stages from their definitions), hand-computed penalties, empirical frequencies and
 * reproducibility. */
#include "sample/sampler.h"
#include "sample/sampler_dry.h"
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
#define CLOSE(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol))

static bs_sampler_params plain(void) {   /* every filter off, temperature 1 */
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 1; p.top_k = 0; p.top_p = 1; p.min_p = 0;
    return p;
}

static void random_logits(bs_rng *r, float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = scale * bs_rng_normal(r);
}

/* ---------- brute-force reference of the filters: full sort, double precision ---------- */
typedef struct { int id; double logit, p; } ref_tok;
static int ref_cmp(const void *a, const void *b) {
    const ref_tok *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}
static int ref_chain(const float *l, int n, const bs_sampler_params *p, ref_tok *out) {
    int m = 0;
    for (int i = 0; i < n; i++) if (l[i] != -INFINITY) out[m++] = (ref_tok){i, l[i], 0};
    qsort(out, (size_t)m, sizeof *out, ref_cmp);
    int keep = p->min_keep < 1 ? 1 : p->min_keep;
    if (p->top_k > 0) m = BS_MIN(m, p->top_k);   /* min_keep does not widen top-k (llama.cpp) */
    if (p->top_p < 1) {
        double z = 0, cum = 0;
        for (int i = 0; i < m; i++) z += exp(out[i].logit - out[0].logit);
        for (int i = 0; i < m; i++) {
            cum += exp(out[i].logit - out[0].logit) / z;
            if (cum >= p->top_p && i + 1 >= keep) { m = i + 1; break; }
        }
    }
    if (p->min_p > 0) {
        int i = 1;
        while (i < m && (out[i].logit >= out[0].logit + log(p->min_p) || i < keep)) i++;
        m = BS_MIN(m, i);
    }
    double z = 0;
    for (int i = 0; i < m; i++) z += exp((out[i].logit - out[0].logit) / p->temp);
    for (int i = 0; i < m; i++) out[i].p = exp((out[i].logit - out[0].logit) / p->temp) / z;
    return m;
}

static int cand_cmp(const void *a, const void *b) {
    const bs_token_prob *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

static void test_greedy(void) {
    enum { V = 1000 };
    float x[V];
    bs_rng r;
    bs_rng_seed(&r, 1);
    random_logits(&r, x, V, 3);
    x[417] = 50; x[733] = 50;   /* a tie: the lower id wins */
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    bs_sampler *s = bs_sampler_new(&p, V);
    CHECK(bs_sampler_sample(s, x) == 417, "greedy picks the lowest id of a tie");
    int n;
    const bs_token_prob *c = bs_sampler_candidates(s, &n);
    CHECK(n == 1 && c[0].id == 417 && c[0].p == 1.0f, "greedy distribution is one token");
    CHECK(bs_sampler_prob(s, 417) == 1.0f && bs_sampler_prob(s, 733) == 0.0f, "greedy prob");
    bs_sampler_ban_once(s, 417);
    CHECK(bs_sampler_sample(s, x) == 733, "ban_once removes the argmax");
    CHECK(bs_sampler_sample(s, x) == 417, "ban_once lasts one step");
    bs_sampler_set_logit_bias(s, 5, 100);
    CHECK(bs_sampler_sample(s, x) == 5, "positive bias wins");
    bs_sampler_set_logit_bias(s, 5, -INFINITY);
    bs_sampler_set_logit_bias(s, 417, -INFINITY);
    CHECK(bs_sampler_sample(s, x) == 733, "bias replaced; -inf bans");
    /* argmax against a linear scan on many random vectors */
    bs_sampler_clear_logit_bias(s);
    for (int t = 0; t < 50; t++) {
        random_logits(&r, x, V, 1 + t);
        int best = 0;
        for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
        CHECK(bs_sampler_sample(s, x) == best, "argmax trial %d", t);
    }
    bs_sampler_free(s);
}

static void test_filters_vs_reference(void) {
    enum { V = 5000 };
    static float x[V];
    static ref_tok ref[V];
    bs_rng r;
    bs_rng_seed(&r, 2);
    const int ks[] = {0, 1, 7, 40, 300};
    const float ps[] = {1.0f, 0.0f, 0.5f, 0.9f, 0.95f, 0.999f};
    const float mps[] = {0.0f, 0.05f, 0.2f, 0.9f};
    const float temps[] = {0.3f, 1.0f, 1.7f};
    const int keeps[] = {1, 3, 60};
    const float scales[] = {0.2f, 1.0f, 4.0f};
    int trials = 0;
    for (size_t a = 0; a < BS_ARRAY_LEN(ks); a++)
    for (size_t b = 0; b < BS_ARRAY_LEN(ps); b++)
    for (size_t c = 0; c < BS_ARRAY_LEN(mps); c++) {
        bs_sampler_params p = plain();
        p.top_k = ks[a]; p.top_p = ps[b]; p.min_p = mps[c];
        p.temp = temps[(a + b + c) % 3];
        p.min_keep = keeps[(a * 7 + b * 3 + c) % 3];
        random_logits(&r, x, V, scales[(a + 2 * b + c) % 3]);
        if ((a + b + c) % 4 == 0)   /* some banned tokens and exact ties */
            for (int i = 0; i < V; i += 97) x[i] = (i % 2) ? -INFINITY : x[0];
        if ((a + b + c) % 5 == 1)   /* flat: everything ties, ids decide */
            for (int i = 0; i < V; i++) x[i] = 0.25f;
        if ((a + b + c) % 5 == 3)   /* two levels */
            for (int i = 0; i < V; i++) x[i] = (i * 7919 % 13) ? -1.0f : 2.0f;
        bs_sampler *s = bs_sampler_new(&p, V);
        int n = bs_sampler_apply(s, x);
        int m = ref_chain(x, V, &p, ref);
        int nc;
        const bs_token_prob *cc = bs_sampler_candidates(s, &nc);
        bs_token_prob *got = malloc((size_t)nc * sizeof *got);
        memcpy(got, cc, (size_t)nc * sizeof *got);
        qsort(got, (size_t)nc, sizeof *got, cand_cmp);
        CHECK(n == m && nc == n, "k=%d p=%g min_p=%g keep=%d: %d candidates, reference %d",
              p.top_k, (double)p.top_p, (double)p.min_p, p.min_keep, n, m);
        double sum = 0, err = 0;
        for (int i = 0; i < BS_MIN(n, m); i++) {
            sum += got[i].p;
            err = fmax(err, fabs(got[i].p - ref[i].p));
            if (got[i].id != ref[i].id && fabs(ref[i].p - got[i].p) > 1e-7) {
                CHECK(0, "k=%d p=%g min_p=%g: candidate %d is %d, reference %d", p.top_k,
                      (double)p.top_p, (double)p.min_p, i, got[i].id, ref[i].id);
                break;
            }
        }
        CHECK(err <= 1e-6, "probabilities off by %g (tolerance 1e-6)", err);
        CHECK(CLOSE(sum, 1, 1e-4), "probabilities sum to %g", sum);
        free(got);
        bs_sampler_free(s);
        trials++;
    }
    printf("filters: %d configurations match the full-sort reference\n", trials);
}

/* Chi-square of empirical frequencies against the sampler's own distribution, which is itself
 * checked against the reference above and against hand values here. */
static void test_frequencies(void) {
    enum { V = 8, N = 200000 };
    const float x[V] = {1.0f, 2.0f, 0.5f, -1.0f, 2.0f, 0.0f, -3.0f, 1.5f};
    bs_sampler_params p = plain();
    p.temp = 0.7f; p.top_k = 6; p.seed = 1234;
    bs_sampler *s = bs_sampler_new(&p, V);
    bs_sampler_apply(s, x);
    float prob[V];
    bs_sampler_probs_dense(s, prob);
    /* by hand: top-6 drops ids 3 (-1) and 6 (-3); softmax of the rest at T = 0.7 */
    double z = 0, hand[V] = {0};
    for (int i = 0; i < V; i++) if (i != 3 && i != 6) z += exp(x[i] / 0.7);
    for (int i = 0; i < V; i++) if (i != 3 && i != 6) hand[i] = exp(x[i] / 0.7) / z;
    for (int i = 0; i < V; i++) CHECK(CLOSE(prob[i], hand[i], 1e-6), "p[%d] %g vs %g", i, prob[i], hand[i]);
    long cnt[V] = {0};
    for (int t = 0; t < N; t++) {
        int32_t id = bs_sampler_sample(s, x);
        CHECK(id >= 0 && id < V, "id %d", id);
        if (id >= 0 && id < V) cnt[id]++;
    }
    double chi2 = 0;
    for (int i = 0; i < V; i++) {
        if (hand[i] == 0) { CHECK(cnt[i] == 0, "filtered token %d drawn %ld times", i, cnt[i]); continue; }
        double e = N * hand[i];
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    /* 5 degrees of freedom: P(chi2 > 35) < 2e-6 for a correct sampler */
    CHECK(chi2 < 35, "chi-square %g over 6 categories", chi2);
    printf("frequencies: chi-square %.2f (5 dof, bound 35)\n", chi2);
    /* the speculative-sampling draw helper, same test */
    const float w[4] = {0.1f, 0.0f, 0.6f, 0.3f};
    long c4[4] = {0};
    for (int t = 0; t < N; t++) c4[bs_sampler_draw(s, NULL, w, 4)]++;
    chi2 = 0;
    for (int i = 0; i < 4; i++) if (w[i] > 0) chi2 += (c4[i] - N * w[i]) * (c4[i] - N * w[i]) / (N * w[i]);
    CHECK(c4[1] == 0 && chi2 < 30, "draw: chi-square %g, zero-weight drawn %ld", chi2, c4[1]);
    bs_sampler_free(s);
}

static void test_reproducible(void) {
    enum { V = 3000, T = 300 };
    float *x = malloc(V * sizeof *x);
    bs_rng r;
    bs_rng_seed(&r, 3);
    random_logits(&r, x, V, 2);
    bs_sampler_params p = bs_sampler_default_params();
    p.seed = 42; p.repeat_penalty = 1.1f; p.dry_multiplier = 0.8f; p.top_k = 0;
    int32_t a[T], b[T], c[T];
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 43 : 42;
        bs_sampler *s = bs_sampler_new(&p, V);
        int32_t *out = run == 0 ? a : run == 1 ? b : c;
        for (int t = 0; t < T; t++) {
            out[t] = bs_sampler_sample(s, x);
            bs_sampler_accept(s, out[t]);
        }
        bs_sampler_free(s);
    }
    CHECK(!memcmp(a, b, sizeof a), "same seed, same tokens");
    CHECK(memcmp(a, c, sizeof a), "another seed, other tokens");
    /* set_seed restarts the stream */
    p.seed = 42;
    bs_sampler *s = bs_sampler_new(&p, V);
    for (int t = 0; t < 10; t++) bs_sampler_sample(s, x);
    bs_sampler_set_seed(s, 42);
    for (int t = 0; t < T; t++) {
        int32_t id = bs_sampler_sample(s, x);
        bs_sampler_accept(s, id);
        if (id != a[t]) { CHECK(0, "reseeded stream differs at %d", t); break; }
    }
    bs_sampler_free(s);
    free(x);
}

static void test_penalties(void) {
    enum { V = 10 };
    float x[V] = {0.5f, 1, 1, 2.0f, 1, -1.0f, 1, 0.0f, 1, 1};
    bs_sampler_params p = plain();
    p.repeat_penalty = 2; p.frequency_penalty = 0.5f; p.presence_penalty = 0.25f;
    p.penalty_last_n = 3;
    bs_sampler *s = bs_sampler_new(&p, V);
    const int32_t h[] = {5, 5, 3, 7, 5};
    bs_sampler_accept_many(s, h, 5);
    float got[V];
    int n;
    bs_sampler_apply(s, x);
    const bs_token_prob *c = bs_sampler_candidates(s, &n);
    for (int i = 0; i < n; i++) got[c[i].id] = c[i].logit;
    /* window {3, 7, 5}, each once: 2/2 - 0.75; 0*2 - 0.75 (0 counts as <= 0); -1*2 - 0.75 */
    CHECK(CLOSE(got[3], 0.25, 1e-6) && CLOSE(got[7], -0.75, 1e-6) && CLOSE(got[5], -2.75, 1e-6),
          "window 3: %g %g %g", got[3], got[7], got[5]);
    CHECK(got[0] == 0.5f && got[9] == 1.0f, "unseen tokens untouched");
    bs_sampler_free(s);
    p.penalty_last_n = -1;   /* whole history: 5 three times */
    s = bs_sampler_new(&p, V);
    bs_sampler_accept_many(s, h, 5);
    bs_sampler_apply(s, x);
    c = bs_sampler_candidates(s, &n);
    for (int i = 0; i < n; i++) got[c[i].id] = c[i].logit;
    CHECK(CLOSE(got[5], -1.0 * 2 - (3 * 0.5 + 0.25), 1e-6), "count 3: %g", got[5]);
    /* truncate rolls the history back: only {5, 5} remain */
    bs_sampler_truncate(s, 2);
    bs_sampler_apply(s, x);
    c = bs_sampler_candidates(s, &n);
    for (int i = 0; i < n; i++) got[c[i].id] = c[i].logit;
    CHECK(CLOSE(got[5], -2 - 1.25, 1e-6) && got[3] == 2.0f, "after truncate: %g %g", got[5], got[3]);
    bs_sampler_free(s);
    p.penalty_last_n = 0;   /* off */
    s = bs_sampler_new(&p, V);
    bs_sampler_accept_many(s, h, 5);
    bs_sampler_apply(s, x);
    CHECK(CLOSE(bs_sampler_candidates(s, &n)[5].logit, -1, 0), "window 0 is off");
    bs_sampler_free(s);
}

/* ---------- DRY ---------- */
static float dry_logit(bs_sampler *s, const float *x, int32_t id) {
    int n;
    bs_sampler_apply(s, x);
    const bs_token_prob *c = bs_sampler_candidates(s, &n);
    for (int i = 0; i < n; i++) if (c[i].id == id) return c[i].logit;
    return NAN;
}

static void test_dry_worked(void) {
    enum { V = 8, a = 1, b = 2, c = 3, y = 4 };
    float x[V] = {0};
    bs_sampler_params p = plain();
    p.dry_multiplier = 0.8f; p.dry_base = 1.75f; p.dry_allowed_length = 2;
    /* llama.cpp's worked example: a b c c b c y a b c. The suffix "a b c" occurs at 0..2
     * (next: c, repeat 3), "b c" at 4..5 (next: y, repeat 2), "c" at 3 (next: b, repeat 1). */
    const int32_t h[] = {a, b, c, c, b, c, y, a, b, c};
    bs_sampler *s = bs_sampler_new(&p, V);
    bs_sampler_accept_many(s, h, 10);
    CHECK(CLOSE(dry_logit(s, x, c), -0.8 * 1.75, 1e-6), "c: %g", dry_logit(s, x, c));
    CHECK(CLOSE(dry_logit(s, x, y), -0.8, 1e-6), "y: %g", dry_logit(s, x, y));
    CHECK(dry_logit(s, x, b) == 0 && dry_logit(s, x, a) == 0, "a, b free");
    /* single-token breaker 'a' 2 tokens back: repeats clamp to 2, c pays 0.8 */
    bs_sampler_add_dry_breaker(s, a, NULL, 0);
    CHECK(CLOSE(dry_logit(s, x, c), -0.8, 1e-6), "clamped c: %g", dry_logit(s, x, c));
    /* y as a single-token breaker is never penalised itself */
    bs_sampler_clear_dry_breakers(s);
    bs_sampler_add_dry_breaker(s, y, NULL, 0);
    CHECK(dry_logit(s, x, y) == 0, "breaker y free");
    CHECK(CLOSE(dry_logit(s, x, c), -0.8 * 1.75, 1e-6), "y 3 back leaves c's 3: %g", dry_logit(s, x, c));
    /* two-token breaker "b c" ending the text: limit 0 < allowed, nothing penalised */
    bs_sampler_clear_dry_breakers(s);
    const int32_t tail[] = {c};
    bs_sampler_add_dry_breaker(s, b, tail, 1);
    CHECK(dry_logit(s, x, c) == 0 && dry_logit(s, x, y) == 0, "sequence breaker b,c");
    bs_sampler_free(s);
    /* window of 4 (y a b c): no repeat */
    p.dry_penalty_last_n = 4;
    s = bs_sampler_new(&p, V);
    bs_sampler_accept_many(s, h, 10);
    CHECK(dry_logit(s, x, c) == 0, "window 4");
    bs_sampler_free(s);
    /* exponent clamp: 150 copies of one token, base 2: len 149, exponent 147 clamped to
     * (int)(88.7228391 / ln 2) (127 or 128 depending on float rounding) */
    p = plain();
    p.dry_multiplier = 0.5f; p.dry_base = 2.0f; p.dry_allowed_length = 2;
    s = bs_sampler_new(&p, V);
    for (int i = 0; i < 150; i++) bs_sampler_accept(s, 5);
    float v = dry_logit(s, x, 5);
    int maxe = (int)(88.7228391f / logf(2.0f));
    CHECK(maxe >= 127 && maxe <= 128 && isfinite(v) && CLOSE(v / -ldexp(0.5, maxe), 1, 1e-6),
          "clamped penalty %g", v);
    bs_sampler_free(s);
    /* base 1: flat multiplier */
    p.dry_base = 1.0f;
    s = bs_sampler_new(&p, V);
    for (int i = 0; i < 150; i++) bs_sampler_accept(s, 5);
    CHECK(CLOSE(dry_logit(s, x, 5), -0.5, 1e-6), "base 1");
    bs_sampler_free(s);
}

/* O(n^2) DRY straight from the definition. */
typedef struct { int32_t head, tail[3]; int len; } ref_br;
static void ref_dry(const int32_t *t, int n, float mult, float base, int allowed,
                    const ref_br *br, int nbr, double *pen, int V) {
    for (int i = 0; i < V; i++) pen[i] = 0;
    if (n <= allowed || n < 2) return;
    int lim = n;
    for (int i = 0; i < n && lim == n; i++) {
        int longest = -1;
        for (int j = 0; j < nbr; j++) {
            if (br[j].head != t[n - 1 - i] || br[j].len > i || br[j].len <= longest) continue;
            int ok = 1;
            for (int o = 0; o < br[j].len; o++) ok &= br[j].tail[o] == t[n - i + o];
            if (ok) longest = br[j].len;
        }
        if (longest >= 0) lim = i - longest;
    }
    if (lim < allowed) return;
    int *best = malloc(V * sizeof *best);
    for (int i = 0; i < V; i++) best[i] = -1;
    for (int q = 0; q + 1 < n; q++) {
        int len = 0;
        while (len <= q && t[q - len] == t[n - 1 - len]) len++;
        len = BS_MIN(len, lim);
        if (len >= allowed && len > best[t[q + 1]]) best[t[q + 1]] = len;
    }
    int maxe = base > 1.000001f ? (int)(88.7228391f / logf(base)) : 0;
    for (int v = 0; v < V; v++) {
        if (best[v] < 0) continue;
        int single = 0;
        for (int j = 0; j < nbr; j++) single |= br[j].head == v && br[j].len == 0;
        if (single) continue;
        int e = best[v] - allowed;
        if (maxe > 0 && e > maxe) e = maxe;
        pen[v] = mult * pow(base, e);
    }
    free(best);
}

static void test_dry_random(void) {
    enum { V = 6 };
    bs_rng r;
    bs_rng_seed(&r, 4);
    float x[V] = {0};
    double pen[V];
    int trials = 0;
    for (int t = 0; t < 400; t++) {
        int n = 1 + (int)(bs_rng_next(&r) % 120);
        int32_t h[120];
        int alpha = 2 + (int)(bs_rng_next(&r) % 4);   /* small alphabets repeat a lot */
        for (int i = 0; i < n; i++) h[i] = (int32_t)(bs_rng_next(&r) % alpha);
        ref_br br[4];
        int nbr = (int)(bs_rng_next(&r) % 4);
        bs_sampler_params p = plain();
        p.dry_multiplier = 0.3f + (float)(t % 5) * 0.2f;
        p.dry_base = 1.0f + (float)(t % 7) * 0.25f;
        p.dry_allowed_length = (int)(t % 4);
        bs_sampler *s = bs_sampler_new(&p, V);
        for (int j = 0; j < nbr; j++) {
            br[j].head = (int32_t)(bs_rng_next(&r) % V);
            br[j].len = (int)(bs_rng_next(&r) % 3);
            for (int o = 0; o < br[j].len; o++) br[j].tail[o] = (int32_t)(bs_rng_next(&r) % alpha);
            bs_sampler_add_dry_breaker(s, br[j].head, br[j].tail, br[j].len);
        }
        bs_sampler_accept_many(s, h, (size_t)n);
        ref_dry(h, n, p.dry_multiplier, p.dry_base, p.dry_allowed_length, br, nbr, pen, V);
        bs_sampler_apply(s, x);
        int nc;
        const bs_token_prob *c = bs_sampler_candidates(s, &nc);
        for (int i = 0; i < nc; i++)
            if (!CLOSE(-c[i].logit, pen[c[i].id], 1e-5 * (1 + pen[c[i].id]))) {
                CHECK(0, "trial %d token %d: penalty %g, reference %g", t, c[i].id,
                      -c[i].logit, pen[c[i].id]);
                break;
            }
        bs_sampler_free(s);
        trials++;
    }
    printf("dry: %d random histories match the O(n^2) reference\n", trials);
}

/* A toy vocabulary for breaker strings: token texts and a greedy longest-match tokenizer. */
static const char *toy[] = {"a", "b", "\n", "x\ny", "ab:", "foo", "<", "|", "<|", "im", "i", "m",
                            "_start", "o<", "fo"};
static const char *toy_text(void *ud, int32_t id, size_t *len) {
    (void)ud;
    *len = strlen(toy[id]);
    return toy[id];
}
static int toy_tokenize(void *ud, const char *s, size_t len, int32_t *out, int max) {
    (void)ud;
    int n = 0;
    size_t i = 0;
    while (i < len && n < max) {
        int best = -1;
        size_t bl = 0;
        for (int t = 0; t < (int)BS_ARRAY_LEN(toy); t++) {
            size_t l = strlen(toy[t]);
            if (l > bl && l <= len - i && !memcmp(s + i, toy[t], l)) { best = t; bl = l; }
        }
        if (best < 0) return -1;
        out[n++] = best;
        i += bl;
    }
    return n;
}

static void test_dry_strings(void) {
    const int V = (int)BS_ARRAY_LEN(toy);
    bs_dry d;
    bs_dry_init(&d, V);
    bs_sampler_vocab v = {NULL, toy_text, toy_tokenize};
    const char *strs[] = {"\n", "<|im", ""};
    CHECK(bs_dry_set_strings(&d, strs, 3, &v) == 0, "%s", bs_last_error());
    /* expected: "\n" in tokens 2 and 3 (single); "<|im" is in no token; tokens ending with a
     * proper prefix of it: "<" (6) -> tail "|im" = [7, 9]; "<|" (8) -> [9]; "o<" (13) -> [7, 9] */
    struct { int32_t head; int len; int32_t t0, t1; } want[] = {
        {2, 0, 0, 0}, {3, 0, 0, 0}, {6, 2, 7, 9}, {8, 1, 9, 0}, {13, 2, 7, 9}};
    CHECK(d.n_br == (int)BS_ARRAY_LEN(want), "%d breakers", d.n_br);
    for (size_t i = 0; i < BS_ARRAY_LEN(want); i++) {
        int found = 0;
        for (int j = 0; j < d.n_br; j++) {
            const bs_dry_breaker *b = &d.br[j];
            if (b->head == want[i].head && b->len == want[i].len &&
                (b->len < 1 || d.pool[b->off] == want[i].t0) &&
                (b->len < 2 || d.pool[b->off + 1] == want[i].t1)) found = 1;
        }
        CHECK(found, "breaker with head %d", want[i].head);
    }
    bs_dry_free(&d);
    /* through the sampler: "a b a b <|im" -> the restart limit is 0, nothing is penalised; the
     * same text with "i m" instead of "im" is not a breaker (tail mismatch): "a b" repeats */
    bs_sampler_params p = plain();
    p.dry_multiplier = 1; p.dry_allowed_length = 1;
    bs_sampler *s = bs_sampler_new(&p, V);
    CHECK(bs_sampler_set_dry_breakers(s, strs, 2, &v) == 0, "%s", bs_last_error());
    float x[64] = {0};
    /* a b <| im a b <| im a b: the complete breaker "<| im" 3 tokens back limits repeats to 2,
     * so the repeat "a b <| im a b" (6) counts as 2 and the next '<|' pays 1.75^(2-1) */
    const int32_t h1[] = {0, 1, 8, 9, 0, 1, 8, 9, 0, 1};
    bs_sampler_accept_many(s, h1, 10);
    CHECK(CLOSE(dry_logit(s, x, 8), -1.75, 1e-6), "limited: '<|' pays %g", dry_logit(s, x, 8));
    const int32_t h2[] = {0, 1, 0, 1, 8, 9};
    bs_sampler_truncate(s, 0);
    bs_sampler_accept_many(s, h2, 6);
    CHECK(dry_logit(s, x, 0) == 0 && dry_logit(s, x, 1) == 0, "ends in a breaker: free");
    /* "<| i m" is not the breaker (the tail must be the tokenization "im"): the whole repeat
     * "a b <| i m a b" (7) counts: 1.75^(7-1) */
    const int32_t h3[] = {0, 1, 8, 10, 11, 0, 1, 8, 10, 11, 0, 1};
    bs_sampler_truncate(s, 0);
    bs_sampler_accept_many(s, h3, 12);
    CHECK(CLOSE(dry_logit(s, x, 8), -pow(1.75, 6), 1e-5), "no breaker: %g", dry_logit(s, x, 8));
    bs_sampler_free(s);
}

static void test_edges(void) {
    enum { V = 16 };
    float x[V];
    for (int i = 0; i < V; i++) x[i] = (float)i;
    bs_sampler_params p = bs_sampler_default_params();
    p.repeat_penalty = 0;
    CHECK(bs_sampler_new(&p, V) == NULL, "repeat penalty 0 rejected");
    p = bs_sampler_default_params();
    p.top_p = NAN;
    CHECK(bs_sampler_new(&p, V) == NULL, "NaN rejected");
    p = bs_sampler_default_params();
    p.typical_p = NAN;
    CHECK(bs_sampler_new(&p, V) == NULL, "typical-p NaN rejected");
    p = bs_sampler_default_params();
    p.xtc_probability = 1.5f;
    CHECK(bs_sampler_new(&p, V) == NULL, "XTC probability 1.5 rejected");
    CHECK(bs_sampler_new(NULL, 0) == NULL, "empty vocab rejected");
    bs_sampler *s = bs_sampler_new(NULL, V);
    CHECK(bs_sampler_set_logit_bias(s, V, 1) < 0 && bs_sampler_set_logit_bias(s, 0, NAN) < 0, "bad bias");
    for (int i = 0; i < V; i++) bs_sampler_set_logit_bias(s, i, -INFINITY);
    CHECK(bs_sampler_sample(s, x) == -1, "every token banned -> error");
    bs_sampler_clear_logit_bias(s);
    x[3] = NAN; x[15] = INFINITY;
    int32_t id = bs_sampler_sample(s, x);
    CHECK(id == 15 || id == 14, "NaN and inf logits handled (%d)", id);
    CHECK(bs_sampler_prob(s, 3) == 0, "NaN logit has no mass");
    bs_sampler_free(s);
}

/* Extreme parameter values: a valid token and a distribution summing to 1, never NaN. */
static void test_extremes(void) {
    enum { V = 500 };
    float x[V];
    bs_rng r;
    bs_rng_seed(&r, 7);
    const float temps[] = {1e-30f, 1e-6f, 1.0f, 1e6f, 1e30f};
    const float ps[] = {0.0f, 1e-9f, 0.5f, 1.0f, 2.0f};
    const float mps[] = {0.0f, 1e-30f, 0.5f, 1.0f, 5.0f};
    const int ks[] = {0, 1, V - 1, V, 10 * V};
    const int keeps[] = {0, 1, V, 10 * V};
    int trials = 0;
    for (int t = 0; t < 400; t++) {
        bs_sampler_params p = bs_sampler_default_params();
        p.temp = temps[t % 5]; p.top_p = ps[(t / 5) % 5]; p.min_p = mps[(t / 25) % 5];
        p.top_k = ks[(t / 7) % 5]; p.min_keep = keeps[(t / 3) % 4];
        p.repeat_penalty = (t % 2) ? 1e-3f : 1e3f; p.frequency_penalty = 1e6f;
        p.dry_multiplier = 1e6f; p.dry_base = (t % 3) ? 1.0f : 100.0f; p.dry_allowed_length = t % 3;
        random_logits(&r, x, V, (t % 4) ? 3.0f : 1e30f);
        bs_sampler *s = bs_sampler_new(&p, V);
        for (int i = 0; i < 50; i++) bs_sampler_accept(s, (int32_t)(i % 3));
        int32_t id = bs_sampler_sample(s, x);
        int n;
        const bs_token_prob *c = bs_sampler_candidates(s, &n);
        double sum = 0;
        int nan = 0;
        for (int i = 0; i < n; i++) { sum += c[i].p; nan |= isnan(c[i].p); }
        CHECK(id >= 0 && id < V && n >= 1 && !nan && CLOSE(sum, 1, 1e-4),
              "trial %d: id %d, %d candidates, sum %g", t, id, n, sum);
        bs_sampler_free(s);
        trials++;
    }
    printf("extremes: %d parameter sets, valid draws\n", trials);
}

static void test_logprobs(void) {
    enum { V = 2000 };
    float x[V];
    bs_rng r;
    bs_rng_seed(&r, 5);
    random_logits(&r, x, V, 2);
    int32_t ids[10];
    float lp[10], lp7;
    int n = bs_top_logprobs(x, V, 10, ids, lp, 7, &lp7);
    static ref_tok ref[V];
    for (int i = 0; i < V; i++) ref[i] = (ref_tok){i, x[i], 0};
    qsort(ref, V, sizeof *ref, ref_cmp);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(x[i] - ref[0].logit);
    double lz = ref[0].logit + log(z);
    CHECK(n == 10, "n %d", n);
    for (int i = 0; i < 10; i++)
        CHECK(ids[i] == ref[i].id && CLOSE(lp[i], ref[i].logit - lz, 1e-5), "rank %d", i);
    CHECK(CLOSE(lp7, x[7] - lz, 1e-5), "logprob of 7");
}

static void test_speed(void) {
    enum { V = 248320, T = 20 };
    float *x = malloc(V * sizeof *x);
    bs_rng r;
    bs_rng_seed(&r, 6);
    random_logits(&r, x, V, 3);
    struct { const char *name; int k; float p, mp; } cfg[] = {
        {"default (k40 p.95 minp.05)", 40, 0.95f, 0.05f}, {"top-p 0.95 only", 0, 0.95f, 0},
        {"min-p 0.05 only", 0, 1, 0.05f}, {"no filter", 0, 1, 0}};
    for (size_t c = 0; c < BS_ARRAY_LEN(cfg); c++) {
        bs_sampler_params p = bs_sampler_default_params();
        p.top_k = cfg[c].k; p.top_p = cfg[c].p; p.min_p = cfg[c].mp;
        p.repeat_penalty = 1.1f; p.dry_multiplier = 0.8f;
        bs_sampler *s = bs_sampler_new(&p, V);
        double t0 = bs_time();
        for (int t = 0; t < T; t++) {
            int32_t id = bs_sampler_sample(s, x);
            CHECK(id >= 0 && id < V, "id %d", id);
            bs_sampler_accept(s, id);
        }
        int n;
        bs_sampler_candidates(s, &n);
        printf("speed, 248k vocab, %s: %.2f ms/token (%d candidates)\n", cfg[c].name,
               1e3 * (bs_time() - t0) / T, n);
        bs_sampler_free(s);
    }
    free(x);
}

/* Sampling from the k best of a row (bs_top_lowest's list: what bs_eval_top gives, on the CPU or
 * found on a device) draws what sampling from the whole row draws whenever bs_sampler_top_k_only
 * says k: the same token at every step (so the same RNG use), on rows with ties, +-0, NaN and
 * infinities; and the chains that read more than the k best are never told k. */
static void test_top_only(void) {
    enum { V = 3000, STEPS = 150 };
    static const struct { float temp, top_p, min_p; int top_k, min_keep; } cfg[] = {
        {0.8f, 0.95f, 0.05f, 40, 1}, {1.5f, 1.0f, 0.0f, 1, 1}, {0.3f, 0.5f, 0.0f, 64, 1},
        {1.0f, 0.9f, 0.2f, 10, 20}, {0.7f, 1.0f, 0.0f, 63, 64}, {2.0f, 0.99f, 0.01f, 40, 1}};
    bs_rng r;
    bs_rng_seed(&r, 99);
    float *x = malloc(sizeof *x * V), vals[BS_TOP_MAX];
    int32_t ids[BS_TOP_MAX];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        bs_sampler_params p = bs_sampler_default_params();
        p.temp = cfg[c].temp, p.top_p = cfg[c].top_p, p.min_p = cfg[c].min_p, p.top_k = cfg[c].top_k;
        p.min_keep = cfg[c].min_keep, p.seed = 1234 + c;
        bs_sampler *a = bs_sampler_new(&p, V), *b = bs_sampler_new(&p, V);
        const int k = bs_sampler_top_k_only(a, BS_TOP_MAX);
        CHECK(k == cfg[c].top_k, "config %zu: top_k_only %d", c, k);
        int same = 0;
        for (int step = 0; step < STEPS; step++) {
            random_logits(&r, x, V, 3.0f);
            for (int i = 0; i < V; i++) {
                const uint64_t u = bs_rng_next(&r) % 1000;
                if (step % 4 == 1) x[i] = (float)(int)(x[i] * 2) * (i % 2 ? 1.0f : -1.0f);   /* ties, +0 and -0 */
                if (step % 4 == 2 && u < 50) x[i] = u % 2 ? NAN : -INFINITY;
                if (step % 4 == 3 && u < 2) x[i] = INFINITY;
            }
            if (step == STEPS - 1) for (int i = 0; i < V; i++) x[i] = i < 3 ? 1.0f : NAN;   /* fewer than k */
            const int32_t ta = bs_sampler_sample(a, x);
            const int n = bs_top_lowest(x, V, k, ids, vals);
            const int32_t tb = bs_sampler_sample_top(b, ids, vals, n);
            same += ta == tb;
            if (ta >= 0) bs_sampler_accept(a, ta);
            if (tb >= 0) bs_sampler_accept(b, tb);
        }
        CHECK(same == STEPS, "config %zu: sampling from the top %d differs at %d of %d steps", c, k, STEPS - same, STEPS);
        bs_sampler_free(a);
        bs_sampler_free(b);
    }
    /* chains that read more than the k best: greedy, no top-k, k past the list, penalties, bias */
    for (int t = 0; t < 5; t++) {
        bs_sampler_params p = bs_sampler_default_params();
        if (t == 0) p.temp = 0;
        if (t == 1) p.top_k = 0;
        if (t == 2) p.top_k = 100;
        if (t == 3) p.repeat_penalty = 1.1f;
        bs_sampler *s = bs_sampler_new(&p, V);
        if (t == 4) bs_sampler_set_logit_bias(s, 5, 2.0f);
        CHECK(bs_sampler_top_k_only(s, BS_TOP_MAX) == 0, "chain %d (greedy, no top-k, 100, penalties, bias) said k", t);
        bs_sampler_free(s);
    }
    free(x);
}

/* ---------- the stages beyond the default chain, against a double-precision reference ---------- */

typedef struct { int id; double l, key; } st_tok;

static int st_by_logit(const void *a, const void *b) {
    const st_tok *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static int st_by_key(const void *a, const void *b) {
    const st_tok *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return st_by_logit(a, b);
}

/* softmax of t[from..n) at temperature T into out (dense, added with weight w) */
static void st_softmax_add(const st_tok *t, int from, int n, double T, double w, double *out) {
    double mx = -INFINITY, z = 0;
    for (int i = from; i < n; i++) mx = fmax(mx, t[i].l);
    for (int i = from; i < n; i++) z += exp((t[i].l - mx) / T);
    for (int i = from; i < n; i++) out[t[i].id] += w * exp((t[i].l - mx) / T) / z;
}

static double st_entropy(const st_tok *t, int from, int n) {
    double mx = -INFINITY, z = 0, h = 0;
    for (int i = from; i < n; i++) mx = fmax(mx, t[i].l);
    for (int i = from; i < n; i++) z += exp(t[i].l - mx);
    for (int i = from; i < n; i++) {
        const double q = exp(t[i].l - mx) / z;
        if (q > 0) h -= q * log(q);
    }
    return h;
}

static double st_temp(const st_tok *t, int from, int n, const bs_sampler_params *p) {
    if (!(p->dynatemp_range > 0) || n - from < 2) return p->temp;
    const double lo = fmax(0, p->temp - p->dynatemp_range), hi = p->temp + p->dynatemp_range;
    return lo + (hi - lo) * pow(st_entropy(t, from, n) / log((double)(n - from)), p->dynatemp_exponent);
}

/* The chain with top-k, top-p and min-p off: top-n-sigma, typical-p, XTC (as the mixture) and the
 * (dynamic) temperature, straight from their definitions; dense probabilities into out. */
static void ref_stages(const float *x, int V, const bs_sampler_params *p, double *out) {
    st_tok *t = malloc(sizeof *t * (size_t)V);
    int n = 0;
    double mx = -INFINITY, sum = 0, sq = 0;
    for (int i = 0; i < V; i++) if (isfinite(x[i])) { mx = fmax(mx, x[i]); sum += x[i]; n++; }
    const double mean = sum / n;
    for (int i = 0; i < V; i++) if (isfinite(x[i])) sq += (x[i] - mean) * (x[i] - mean);
    const double lim = p->top_n_sigma > 0 ? mx - p->top_n_sigma * sqrt(sq / n) : -INFINITY;
    n = 0;
    for (int i = 0; i < V; i++) if (isfinite(x[i]) && x[i] >= lim) t[n++] = (st_tok){i, x[i], 0};
    if (p->typical_p > 0 && p->typical_p < 1) {
        const double h = st_entropy(t, 0, n);
        double lmx = -INFINITY, z = 0;
        for (int i = 0; i < n; i++) lmx = fmax(lmx, t[i].l);
        for (int i = 0; i < n; i++) z += exp(t[i].l - lmx);
        for (int i = 0; i < n; i++) t[i].key = fabs(-log(exp(t[i].l - lmx) / z) - h);
        qsort(t, (size_t)n, sizeof *t, st_by_key);
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp(t[i].l - lmx) / z;
            if (cum > p->typical_p) { n = i + 1; break; }
        }
    }
    qsort(t, (size_t)n, sizeof *t, st_by_logit);
    int cut = 0;
    if (p->xtc_probability > 0 && p->xtc_threshold <= 0.5f && n >= 2) {
        double z = 0;
        for (int i = 0; i < n; i++) z += exp(t[i].l - t[0].l);
        for (int i = 0; i < n && exp(t[i].l - t[0].l) / z >= p->xtc_threshold; i++) cut = i;
    }
    memset(out, 0, sizeof *out * (size_t)V);
    const double P = cut ? p->xtc_probability : 0;
    st_softmax_add(t, 0, n, st_temp(t, 0, n, p), 1 - P, out);
    if (cut) st_softmax_add(t, cut, n, st_temp(t, cut, n, p), P, out);
    free(t);
}

static void test_stages(void) {
    enum { V = 300 };
    static float x[V];
    static double ref[V];
    static float got[V];
    bs_rng r;
    bs_rng_seed(&r, 31);
    static const struct { float sigma, typ, xp, xt, dr, de, temp; } cfg[] = {
        {1.0f, 1, 0, 0.1f, 0, 1, 1}, {2.5f, 1, 0, 0.1f, 0, 1, 0.7f},                 /* top-n-sigma */
        {-1, 0.5f, 0, 0.1f, 0, 1, 1}, {-1, 0.9f, 0, 0.1f, 0, 1, 1.3f},               /* typical-p */
        {-1, 1, 0.5f, 0.05f, 0, 1, 1}, {-1, 1, 1.0f, 0.02f, 0, 1, 0.8f},              /* XTC */
        {-1, 1, 0, 0.1f, 0.5f, 1, 1}, {-1, 1, 0, 0.1f, 0.9f, 2.0f, 0.6f},             /* dynamic temperature */
        {1.5f, 0.8f, 0.6f, 0.03f, 0.4f, 1.5f, 0.9f},                                    /* all of them */
    };
    for (size_t c = 0; c < BS_ARRAY_LEN(cfg); c++) {
        for (int trial = 0; trial < 4; trial++) {
            bs_sampler_params p = plain();
            p.temp = cfg[c].temp, p.top_n_sigma = cfg[c].sigma, p.typical_p = cfg[c].typ;
            p.xtc_probability = cfg[c].xp, p.xtc_threshold = cfg[c].xt, p.dynatemp_range = cfg[c].dr;
            p.dynatemp_exponent = cfg[c].de;
            random_logits(&r, x, V, trial % 2 ? 3.0f : 1.0f);
            if (trial == 3) for (int i = 0; i < V; i += 7) x[i] = -INFINITY;
            bs_sampler *s = bs_sampler_new(&p, V);
            CHECK(bs_sampler_apply(s, x) > 0, "config %zu: apply failed", c);
            bs_sampler_probs_dense(s, got);
            ref_stages(x, V, &p, ref);
            double err = 0, sum = 0;
            for (int i = 0; i < V; i++) err = fmax(err, fabs(got[i] - ref[i])), sum += got[i];
            CHECK(err < 2e-5 && CLOSE(sum, 1, 1e-4), "config %zu trial %d: probabilities off by %g (sum %g)", c, trial, err, sum);
            CHECK(bs_sampler_top_k_only(s, BS_TOP_MAX) == 0, "config %zu: a device's top-k list was offered", c);
            bs_sampler_free(s);
        }
    }
    /* draws follow the mixture: XTC at 0.5 over 12 tokens, 40000 draws, each frequency within 5 sigma */
    {
        enum { N = 12, DRAWS = 40000 };
        float y[N];
        double q[N];
        long count[N] = {0};
        for (int i = 0; i < N; i++) y[i] = 2.0f - 0.35f * i;
        bs_sampler_params p = plain();
        p.xtc_probability = 0.5f, p.xtc_threshold = 0.08f, p.seed = 5;
        ref_stages(y, N, &p, q);
        bs_sampler *s = bs_sampler_new(&p, N);
        for (int d = 0; d < DRAWS; d++) count[bs_sampler_sample(s, y)]++;
        int bad = 0;
        for (int i = 0; i < N; i++) {
            const double e = q[i] * DRAWS, sd = sqrt(e * (1 - q[i])) + 1;
            bad += fabs(count[i] - e) > 5 * sd;
        }
        double plain_q[N];
        bs_sampler_params off = p;
        off.xtc_probability = 0;
        ref_stages(y, N, &off, plain_q);
        CHECK(!bad && q[0] < 0.75 * plain_q[0], "XTC draws: %d of %d frequencies off (top token %g, %g without XTC)", bad,
              N, q[0], plain_q[0]);
        bs_sampler_free(s);
    }
    /* temperature 0 stays the argmax whatever the stages say */
    {
        bs_sampler_params p = plain();
        p.temp = 0, p.typical_p = 0.2f, p.xtc_probability = 1, p.xtc_threshold = 0.01f, p.top_n_sigma = 0.5f;
        random_logits(&r, x, V, 2.0f);
        bs_sampler *s = bs_sampler_new(&p, V);
        int32_t best = 0;
        for (int i = 1; i < V; i++) if (x[i] > x[best]) best = i;
        CHECK(bs_sampler_sample(s, x) == best, "greedy with the stages set: not the argmax");
        bs_sampler_free(s);
    }
    printf("stages: top-n-sigma, typical-p, XTC and dynamic temperature match their definitions\n");
}

/* ---------- chains in another order (p.order), against a double-precision reference ---------- */

static int st_count_finite(const float *x, int V, st_tok *t) {
    int n = 0;
    for (int i = 0; i < V; i++) if (isfinite(x[i])) t[n++] = (st_tok){i, x[i], 0};
    return n;
}

/* One stage of llama.cpp's chain on t[0..n) (XTC aside); the candidates left. */
static int ref_stage(st_tok *t, int n, char o, const bs_sampler_params *p) {
    if (o == 's' && p->top_n_sigma > 0 && n >= 2) {
        double mx = -INFINITY, sum = 0, sq = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, t[i].l), sum += t[i].l;
        for (int i = 0; i < n; i++) sq += (t[i].l - sum / n) * (t[i].l - sum / n);
        const double lim = mx - p->top_n_sigma * sqrt(sq / n);
        int m = 0;
        for (int i = 0; i < n; i++) if (t[i].l >= lim) t[m++] = t[i];
        return m;
    }
    if (o == 'k' && p->top_k > 0 && p->top_k < n) {
        qsort(t, (size_t)n, sizeof *t, st_by_logit);
        return p->top_k;
    }
    if (o == 'y' && p->typical_p > 0 && p->typical_p < 1 && n >= 2) {
        const double h = st_entropy(t, 0, n);
        double lmx = -INFINITY, z = 0, cum = 0;
        for (int i = 0; i < n; i++) lmx = fmax(lmx, t[i].l);
        for (int i = 0; i < n; i++) z += exp(t[i].l - lmx);
        for (int i = 0; i < n; i++) t[i].key = fabs(-log(exp(t[i].l - lmx) / z) - h);
        qsort(t, (size_t)n, sizeof *t, st_by_key);
        for (int i = 0; i < n; i++) {
            cum += exp(t[i].l - lmx) / z;
            if (cum > p->typical_p) return i + 1;
        }
        return n;
    }
    if (o == 'p' && p->top_p < 1) {
        qsort(t, (size_t)n, sizeof *t, st_by_logit);
        double z = 0, cum = 0;
        for (int i = 0; i < n; i++) z += exp(t[i].l - t[0].l);
        for (int i = 0; i < n; i++) {
            cum += exp(t[i].l - t[0].l) / z;
            if (cum >= p->top_p) return i + 1;
        }
        return n;
    }
    if (o == 'm' && p->min_p > 0) {
        double mx = -INFINITY;
        for (int i = 0; i < n; i++) mx = fmax(mx, t[i].l);
        int m = 0;
        for (int i = 0; i < n; i++) if (t[i].l >= mx + log(p->min_p)) t[m++] = t[i];
        return m;
    }
    if (o == 't') {
        const double T = st_temp(t, 0, n, p);
        if (!(T > 0)) {   /* a dynamic temperature of 0: the best alone */
            qsort(t, (size_t)n, sizeof *t, st_by_logit);
            return 1;
        }
        for (int i = 0; i < n; i++) t[i].l /= T;
    }
    return n;
}

/* llama.cpp's chain in the order given on t[0..n), each stage on the candidates left by the one
 * before; XTC's coin splits it (the candidates as they are with weight 1 - P, without its cut
 * with weight P, each through the stages after it); the final softmax (at 1: the temperature is
 * a stage, none without t) added into out with weight w. */
static void ref_ordered_chain(st_tok *t, int n, const char *o, const bs_sampler_params *p, double w, double *out) {
    for (; *o; o++) {
        if (*o != 'x') {
            n = ref_stage(t, n, *o, p);
            continue;
        }
        if (!(p->xtc_probability > 0 && p->xtc_threshold <= 0.5f) || n < 2) continue;
        qsort(t, (size_t)n, sizeof *t, st_by_logit);
        double z = 0;
        int cut = 0;
        for (int i = 0; i < n; i++) z += exp(t[i].l - t[0].l);
        for (int i = 0; i < n && exp(t[i].l - t[0].l) / z >= p->xtc_threshold; i++) cut = i;
        if (!cut) continue;
        st_tok *u = malloc(sizeof *u * (size_t)(n - cut));
        memcpy(u, t + cut, sizeof *u * (size_t)(n - cut));
        ref_ordered_chain(t, n, o + 1, p, w * (1 - p->xtc_probability), out);
        ref_ordered_chain(u, n - cut, o + 1, p, w * p->xtc_probability, out);
        free(u);
        return;
    }
    st_softmax_add(t, 0, n, 1.0, w, out);
}

static void ref_ordered(const float *x, int V, const bs_sampler_params *p, const char *order, double *out) {
    st_tok *t = malloc(sizeof *t * (size_t)V);
    const int n = st_count_finite(x, V, t);
    memset(out, 0, sizeof *out * (size_t)V);
    bs_sampler_params q = *p;
    if (!strchr(order, 't')) q.temp = 1, q.dynatemp_range = 0;
    ref_ordered_chain(t, n, order, &q, 1.0, out);
    free(t);
}

static void test_orders(void) {
    enum { V = 300 };
    static float x[V], got[V], dflt[V];
    static double ref[V];
    bs_rng r;
    bs_rng_seed(&r, 77);
    static const char *const orders[] = {"tkpm", "kmpt", "pkt", "mpk", "tyk", "skpt", "kts", "tpxm", "ptxk",
                                         "yspmkxt", "e", "dtk", "kpmtx", "xtm", "kxmpt", "xyt"};
    for (size_t o = 0; o < BS_ARRAY_LEN(orders); o++) {
        for (int trial = 0; trial < 6; trial++) {
            bs_sampler_params p = plain();
            p.temp = trial % 3 == 0 ? 0.5f : trial % 3 == 1 ? 1.6f : 1.0f;
            p.top_k = 20 + 40 * (trial % 2);
            p.top_p = trial < 3 ? 0.8f : 0.95f;
            p.min_p = trial % 2 ? 0.05f : 0.2f;
            p.typical_p = 0.85f;
            p.top_n_sigma = trial % 3 == 2 ? 1.5f : -1;
            p.xtc_probability = 0.5f, p.xtc_threshold = 0.05f;
            p.dynatemp_range = trial == 5 ? 0.4f : trial == 3 ? 2.0f : 0;   /* (2: down to 0, the best alone) */
            snprintf(p.order, sizeof p.order, "%s", orders[o]);
            random_logits(&r, x, V, trial % 2 ? 3.0f : 1.5f);
            if (trial == 4) for (int i = 0; i < V; i += 5) x[i] = -INFINITY;
            bs_sampler *s = bs_sampler_new(&p, V);
            CHECK(s && bs_sampler_apply(s, x) > 0, "order %s: apply failed", orders[o]);
            if (!s) continue;
            bs_sampler_probs_dense(s, got);
            ref_ordered(x, V, &p, orders[o], ref);
            double err = 0, sum = 0;
            for (int i = 0; i < V; i++) err = fmax(err, fabs(got[i] - ref[i])), sum += got[i];
            CHECK(err < 2e-5 && CLOSE(sum, 1, 1e-4), "order %s trial %d: probabilities off by %g (sum %g)", orders[o], trial,
                  err, sum);
            CHECK(bs_sampler_top_k_only(s, BS_TOP_MAX) == 0, "order %s: a device's top-k list was offered", orders[o]);
            bs_sampler_free(s);
        }
    }
    /* the default's own order (what it runs, in its order) is the default chain, the same bits,
     * and the device's top-k lists serve it */
    for (int trial = 0; trial < 4; trial++) {
        bs_sampler_params p = plain();
        p.temp = 0.7f, p.top_k = 40, p.top_p = 0.9f, p.min_p = 0.03f;
        random_logits(&r, x, V, 2.0f);
        bs_sampler *a = bs_sampler_new(&p, V);
        snprintf(p.order, sizeof p.order, "%s", trial % 2 ? "edskypmxt" : "kpmt");
        bs_sampler *b = bs_sampler_new(&p, V);
        CHECK(bs_sampler_apply(a, x) > 0 && bs_sampler_apply(b, x) > 0, "apply failed");
        bs_sampler_probs_dense(a, dflt);
        bs_sampler_probs_dense(b, got);
        CHECK(!memcmp(dflt, got, sizeof got), "trial %d: the default's order gave other bits", trial);
        CHECK(bs_sampler_top_k_only(b, BS_TOP_MAX) == 40, "trial %d: the device's top-k list was refused", trial);
        bs_sampler_free(a);
        bs_sampler_free(b);
    }
    /* a dynamic temperature that falls to 0 in the temperature stage keeps the best alone (as
     * the default chain does), not a flat distribution; no t: temperature 1, not greedy */
    {
        float y[10] = {1000};
        bs_sampler_params p = plain();
        p.temp = 0.5f, p.dynatemp_range = 1, p.top_k = 3;
        snprintf(p.order, sizeof p.order, "tk");
        bs_sampler *s = bs_sampler_new(&p, 10);
        CHECK(bs_sampler_apply(s, y) == 1 && bs_sampler_pick(s) == 0, "order tk, dynamic temperature 0: not the best alone");
        bs_sampler_free(s);
        p = plain();
        p.temp = 0;
        snprintf(p.order, sizeof p.order, "k");
        p.top_k = 5;
        s = bs_sampler_new(&p, 10);
        CHECK(bs_sampler_apply(s, y) == 5, "order k at temperature 0: greedy, where no temperature stage means 1");
        bs_sampler_free(s);
    }
    /* unknown letters are refused */
    bs_sampler_params bad = plain();
    snprintf(bad.order, sizeof bad.order, "kqt");
    CHECK(bs_sampler_new(&bad, V) == NULL, "an unknown stage letter was taken");
    printf("orders: %zu stage orders match the reference\n", BS_ARRAY_LEN(orders));
}

int main(void) {
    test_greedy();
    test_top_only();
    test_filters_vs_reference();
    test_stages();
    test_orders();
    test_frequencies();
    test_reproducible();
    test_penalties();
    test_dry_worked();
    test_dry_random();
    test_dry_strings();
    test_edges();
    test_extremes();
    test_logprobs();
    test_speed();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all sampler checks passed\n");
    return 0;
}
