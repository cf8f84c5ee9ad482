/* spec_depth.c: the draft-depth controller (see spec_depth.h). */
#include "dspark/spec_depth.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PRIOR_P 0.6          /* acceptance before any observation, weighted as PRIOR_N samples */
#define PRIOR_N 2.0
#define MEAN_OBS 64          /* running mean for the first observations, then an EWMA */
#define EWMA_P 0.03
#define EWMA_T 0.2
#define MIN_OBS_TO_PARK 8    /* also: depth 1 until then (the cheapest way to learn p)... */
#define MIN_OBS_ALL_MISSED 3 /* ...unless this many drafts in a row, from the start, all missed */
#define PROBE_BUDGET 0.01    /* probes may cost this fraction of plain decoding */
#define PROBE_MIN 8
#define PROBE_MAX 1024       /* the interval set from costs... */
#define PROBE_BACKOFF_MAX 2048   /* ...doubled after each probe that got nothing accepted */
#define PROBE_REACH 0.15     /* ...or that leaves drafting unprofitable even at p + this */

void bs_depth_init(bs_spec_depth *d, int block, int fixed) {
    memset(d, 0, sizeof *d);
    d->block = BS_MIN(block, BS_DEPTH_MAX);
    d->fixed = fixed;
    d->p = PRIOR_P;
    d->probe_every = PROBE_MIN;
    d->measured_k = d->block;          /* nothing to measure later unless calibrated partly */
    /* until measured: +10% per verified row, a drafter round at 30% of a step */
    for (int w = 1; w <= d->block + 1; w++) d->verify_r[w] = 1.0 + 0.1 * (w - 1);
    d->draft_r = 0.3;
    for (int k = 0; k <= d->block; k++) d->draft_kr[k] = d->draft_r;
}

void bs_depth_seed_p(bs_spec_depth *d, double p) {
    if (!(p >= 0.0 && p <= 1.0)) return;
    d->p = p;
    d->p_known = true;
}

void bs_depth_calibrate(bs_spec_depth *d, const double *verify_s, double draft_s, double append_s) {
    const double v1 = verify_s[1];
    if (!(v1 > 0)) return;
    for (int w = 1; w <= d->block + 1; w++)   /* a wider eval never costs less: keep it monotone */
        d->verify_r[w] = BS_MAX(verify_s[w] / v1, w > 1 ? d->verify_r[w - 1] : 1.0);
    d->draft_r = draft_s > 0 ? draft_s / v1 : d->draft_r;
    for (int k = 0; k <= d->block; k++) d->draft_kr[k] = d->draft_r;
    d->append_r = append_s > 0 ? append_s / v1 : 0.0;
    d->verify1_s = v1;
    d->calibrated = true;
}

void bs_depth_calibrate_draft(bs_spec_depth *d, const double *draft_s) {
    if (!(d->verify1_s > 0)) return;
    for (int k = 1; k <= d->block; k++)   /* more slots never cost less: keep it monotone */
        if (draft_s[k] > 0) d->draft_kr[k] = BS_MAX(draft_s[k] / d->verify1_s, k > 1 ? d->draft_kr[k - 1] : 0.0);
    d->draft_r = d->draft_kr[d->block];
}

void bs_depth_observe_verify(bs_spec_depth *d, int w, double sec) {
    if (w < 1 || w > d->block + 1 || !(sec > 0)) return;
    const double v1 = sec / d->verify_r[w];
    d->verify1_s = d->verify1_s > 0 ? d->verify1_s + EWMA_T * (v1 - d->verify1_s) : v1;
}

static void set_probe_interval(bs_spec_depth *d);

void bs_depth_observe_probe(bs_spec_depth *d, double extra_s) {
    if (!(d->verify1_s > 0) || !(extra_s > 0)) return;
    const double r = extra_s / d->verify1_s;   /* the first probe also pays first-touch costs: damp it */
    d->probe_r = d->probe_r > 0 ? d->probe_r + 0.5 * (r - d->probe_r) : 0.5 * r;
    set_probe_interval(d);
}

static void observe(bs_spec_depth *d, double x) {
    d->n_obs++;
    const double w = d->n_obs <= MEAN_OBS ? 1.0 / (d->n_obs + PRIOR_N) : EWMA_P;
    d->p += w * (x - d->p);
}

/* Whether drafting would pay at some depth were acceptance PROBE_REACH higher than now: where
 * it would not (a drafter that costs as much as the target needs p ~ 0.9), probes that get a
 * draft accepted now and then are not worth their cost at the base interval. */
static bool within_reach(const bs_spec_depth *d) {
    const double p = BS_MIN(1.0, d->p + PROBE_REACH), plain = bs_depth_rate(d, 0, p);
    for (int c = 1; c <= d->block; c++)
        if (bs_depth_rate(d, c, p) > plain) return true;
    return false;
}

void bs_depth_observe_accept(bs_spec_depth *d, int k, int n, const float *conf) {
    d->n_acc += n;
    for (int i = 0; i < n; i++) observe(d, 1.0);
    if (n < k) observe(d, 0.0);
    if (d->parked && k > 0) {   /* a probe: back off while they fail or drafting is out of reach */
        d->backoff = n > 0 && within_reach(d) ? 0 : BS_MIN(d->backoff + 1, 16);
        set_probe_interval(d);
        d->recheck = true;      /* p moved: the next round weighs drafting again */
    }
    if (conf)
        for (int i = 0; i < k && i <= n; i++) {
            d->conf_sum += conf[i];
            d->acc_sum += i < n;
        }
}

/* verify(w) / verify(1) for any w >= 0: measured up to block + 1, linear past that. */
static double verify_at(const bs_spec_depth *d, int w) {
    const int top = d->block + 1;
    if (w <= 0) return 0.0;
    if (w <= top) return d->verify_r[w];
    const double slope = top >= 2 ? d->verify_r[top] - d->verify_r[top - 1] : 1.0;
    return d->verify_r[top] + (w - top) * BS_MAX(slope, 0.0);
}

/* What the C + 1 rows of a round add to a pass that holds R others. */
static double verify_cost(const bs_spec_depth *d, int c) {
    const int r = d->shared_rows;
    return r > 0 ? verify_at(d, r + c + 1) - verify_at(d, r) : d->verify_r[c + 1];
}

double bs_depth_rate(const bs_spec_depth *d, int c, double p) {
    if (c <= 0) return 1.0 / (verify_cost(d, 0) + d->append_r);
    double e = 1.0, pk = 1.0;
    for (int i = 1; i <= c; i++) e += (pk *= p);
    return e / (d->draft_kr[BS_MIN(c, d->block)] + verify_cost(d, c) + d->append_r * e);
}

/* Probes cost a drafter round, up to BS_PARK_WINDOW context rows to catch up and a wider
 * verify, or what probes were measured to cost beyond a plain step, if more (caches gone cold
 * while parked): every probe_every rounds keeps that near PROBE_BUDGET of plain speed, and
 * failed probes double the interval. */
static void set_probe_interval(bs_spec_depth *d) {
    const double plain = 1.0 + d->append_r;
    const double model = d->draft_kr[1] + d->verify_r[2] - 1.0 + BS_PARK_WINDOW * d->append_r;
    const double extra = BS_MAX(model, d->probe_r);
    const double n = ceil(extra / (PROBE_BUDGET * plain));
    const int base = (int)BS_MAX(PROBE_MIN, BS_MIN(PROBE_MAX, n));
    d->probe_every = (int)BS_MIN((long)PROBE_BACKOFF_MAX, (long)base << d->backoff);
}

int bs_depth_choose(bs_spec_depth *d, int k_max) {
    k_max = BS_MIN(k_max, d->block);
    if (k_max <= 0) return d->last = 0;
    if (d->fixed >= 0) return d->last = BS_MIN(d->fixed, k_max);
    if (d->parked && !d->recheck && d->since_probe + 1 < d->probe_every) {   /* O(1) while parked */
        d->since_probe++;
        d->n_parked++;
        return d->last = 0;
    }
    d->recheck = false;
    int best = 1;
    double best_rate = bs_depth_rate(d, 1, d->p);
    for (int c = 2; c <= k_max; c++) {
        const double r = bs_depth_rate(d, c, d->p);
        if (r > best_rate * 1.01) { best = c; best_rate = r; }   /* deeper only if clearly better */
    }
    /* a drafter that has not had one draft accepted yet is not worth 8 rounds of learning */
    if (!d->p_known && d->n_obs < MIN_OBS_TO_PARK && (d->n_acc > 0 || d->n_obs < MIN_OBS_ALL_MISSED))
        return d->last = 1;
    if (bs_depth_rate(d, 0, d->p) < best_rate) {
        d->parked = false;
        return d->last = best;
    }
    if (!d->parked) {
        d->parked = true;
        d->since_probe = 0;
        d->backoff = 0;
        set_probe_interval(d);
    }
    d->n_parked++;
    if (++d->since_probe >= d->probe_every) {
        d->since_probe = 0;
        d->n_probes++;
        set_probe_interval(d);
        return d->last = 1;
    }
    return d->last = 0;
}

int bs_depth_trim(bs_spec_depth *d, const float *conf, int k, bool sampled) {
    if (d->fixed >= 0 || !conf || k <= 1 || conf[0] < 0) return k;
    /* the raw head is over-confident: scale it so its mean matches the observed acceptance */
    const double scale = d->conf_sum > 8 ? BS_MIN(2.0, d->acc_sum / d->conf_sum) : 1.0;
    int best = k;
    double e = 1.0, surv = 1.0, best_rate = -1.0;
    for (int c = 1; c <= k; c++) {
        surv *= BS_MIN(1.0, BS_MAX(0.0, conf[c - 1] * scale));
        e += surv;
        const double r = e / (d->draft_kr[k] + d->verify_r[c + 1] + d->append_r * e);   /* drafted: k */
        if (r > best_rate * 1.001) { best = c; best_rate = r; }
        else if (sampled) break;   /* the first best: whether draft c is kept reads conf up to c only */
    }
    if (best < k) d->n_trimmed++;
    return best;
}

void bs_depth_describe(const bs_spec_depth *d, char *buf, int cap) {
    int n = snprintf(buf, (size_t)cap, "depth %d%s: p=%.3f (%ld obs); costs / verify(1) = %.2f ms%s: draft %.2f..%.2f, "
                     "append %.3f/row, verify", d->last, d->parked ? " (parked)" : "", d->p, d->n_obs,
                     d->verify1_s * 1e3, d->calibrated ? "" : " (not measured)", d->draft_kr[1], d->draft_r, d->append_r);
    for (int w = 1; w <= d->block + 1 && n > 0 && n < cap; w++)
        n += snprintf(buf + n, (size_t)(cap - n), " %d:%.2f", w, d->verify_r[w]);
    if (d->calibrated && d->measured_k < d->block && n > 0 && n < cap)
        n += snprintf(buf + n, (size_t)(cap - n), " (above width %d extrapolated)", d->measured_k + 1);
    if (d->fixed >= 0 || n <= 0 || n >= cap) return;
    n += snprintf(buf + n, (size_t)(cap - n), "; speed vs plain at depth 1..%d:", d->block);
    for (int c = 1; c <= d->block && n > 0 && n < cap; c++)
        n += snprintf(buf + n, (size_t)(cap - n), " %.2f", bs_depth_rate(d, c, d->p) / bs_depth_rate(d, 0, d->p));
    if (d->parked && n > 0 && n < cap) snprintf(buf + n, (size_t)(cap - n), "; probe every %d rounds", d->probe_every);
}
