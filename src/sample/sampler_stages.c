/* sampler_stages.c: see sampler_stages.h. */
#include "sample/sampler_stages.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>

void bs_stage_top_n_sigma(float *w, int32_t n_vocab, float n_sigma) {
    double sum = 0, sq = 0;
    float mx = -INFINITY;
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (w[i] == -INFINITY) continue;
        mx = w[i] > mx ? w[i] : mx;
        sum += w[i];
        n++;
    }
    if (n < 2) return;
    const double mean = sum / n;
    for (int32_t i = 0; i < n_vocab; i++)
        if (w[i] != -INFINITY) sq += (w[i] - mean) * (w[i] - mean);
    const float lim = mx - n_sigma * (float)sqrt(sq / n);
    for (int32_t i = 0; i < n_vocab; i++)
        if (w[i] < lim) w[i] = -INFINITY;
}

/* Probabilities of c[0..n) (softmax of the logits) into p; returns their entropy. */
static double softmax_entropy(const bs_token_prob *c, int n, double *p) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    double z = 0, h = 0;
    for (int i = 0; i < n; i++) z += p[i] = exp((double)c[i].logit - mx);
    for (int i = 0; i < n; i++) {
        p[i] /= z;
        if (p[i] > 0) h -= p[i] * log(p[i]);
    }
    return h;
}

typedef struct { double key; bs_token_prob t; double p; } typical_ent;

/* Nearest the entropy first; ties by the better logit, then the lower id (a fixed order). */
static int cmp_typical(const void *a, const void *b) {
    const typical_ent *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->t.logit != y->t.logit) return x->t.logit > y->t.logit ? -1 : 1;
    return (x->t.id > y->t.id) - (x->t.id < y->t.id);
}

int bs_stage_typical(bs_token_prob *c, int n, float p, int min_keep) {
    if (n < 2) return n;
    typical_ent *e = bs_xmalloc((size_t)n * sizeof *e);
    double *pr = bs_xmalloc((size_t)n * sizeof *pr);
    const double h = softmax_entropy(c, n, pr);
    for (int i = 0; i < n; i++) e[i] = (typical_ent){fabs(-log(pr[i]) - h), c[i], pr[i]};
    qsort(e, (size_t)n, sizeof *e, cmp_typical);
    int keep = n;
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += e[i].p;
        if (cum > p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    for (int i = 0; i < n; i++) c[i] = e[i].t;
    free(e);
    free(pr);
    return keep;
}

float bs_stage_dynatemp(const bs_token_prob *c, int n, float temp, float range, float exponent) {
    if (n < 2) return temp;
    double *pr = bs_xmalloc((size_t)n * sizeof *pr);
    const double h = softmax_entropy(c, n, pr);
    free(pr);
    const float lo = temp - range > 0 ? temp - range : 0.0f, hi = temp + range;
    return lo + (hi - lo) * powf((float)(h / log((double)n)), exponent);
}

int bs_stage_xtc_cut(const bs_token_prob *c, int n, float threshold, int min_keep) {
    if (n < 2) return 0;
    double *pr = bs_xmalloc((size_t)n * sizeof *pr);
    softmax_entropy(c, n, pr);
    int last = 0;
    for (int i = 0; i < n && pr[i] >= threshold; i++) last = i;
    free(pr);
    return last > 0 && n - last >= min_keep ? last : 0;
}

void bs_stage_softmax(const bs_token_prob *c, int from, int n, float t, float *out) {
    int best = from;
    for (int i = from + 1; i < n; i++)
        if (c[i].logit > c[best].logit) best = i;
    if (!(t > 0)) {
        for (int i = from; i < n; i++) out[i] = i == best ? 1.0f : 0.0f;
        return;
    }
    double z = 0;
    for (int i = from; i < n; i++) z += out[i] = expf((c[i].logit - c[best].logit) / t);
    for (int i = from; i < n; i++) out[i] = (float)(out[i] / z);
}
