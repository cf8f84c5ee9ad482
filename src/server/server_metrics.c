/* server_metrics.c: counters of `bitspark serve` and their Prometheus text (GET /metrics), named
 * like llama-server's (llamacpp:*) so existing dashboards work; plus what an autoscaler reads
 * (requests waiting and in flight, readiness, time-to-first-token and per-token latency
 * histograms, from which Prometheus computes p50 / p95 with histogram_quantile), and the small
 * text buffer the server parts share. */
#include "server/server.h"
#include "io/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = BS_MAX(b->cap * 2, b->len + n + 256);
        b->p = bs_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_adds(srv_buf *b, const char *s) { srv_buf_add(b, s, strlen(s)); }

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void srv_metrics_request(srv_metrics *m, int status) {
    pthread_mutex_lock(&m->mu);
    m->requests_total++;
    if (status == 503) m->requests_rejected++;
    else if (status >= 400) m->requests_errors++;
    if (status == 499) m->requests_client_closed++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_task(srv_metrics *m, const srv_timings *t) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += t->n_prompt;
    m->cached_tokens += t->n_cached;
    m->predicted_tokens += t->n_gen;
    m->prompt_seconds += t->t_prompt_ms / 1e3;
    m->predicted_seconds += t->t_gen_ms / 1e3;
    m->draft_tokens += t->draft_n;
    m->draft_accepted += t->draft_accepted;
    m->n_tokens_max = BS_MAX(m->n_tokens_max, (long)t->n_prompt + t->n_cached + t->n_gen);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_loop_guard(srv_metrics *m, const bs_loop_guard_result *r) {
    pthread_mutex_lock(&m->mu);
    m->loops_detected += r->n_detected;
    m->loop_rewinds += r->n_rewinds;
    m->loop_stops += r->stopped;
    pthread_mutex_unlock(&m->mu);
}

/* Bucket bounds in seconds. TTFT spans a warm cache on a tiny model to a long prompt queued
 * behind others on a 27B; per-token latency a fast CPU to a loaded one. */
static const double TTFT_LE[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TPOT_LE[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
_Static_assert(BS_ARRAY_LEN(TTFT_LE) <= SRV_HIST_MAX && BS_ARRAY_LEN(TPOT_LE) <= SRV_HIST_MAX, "SRV_HIST_MAX");

static void observe(srv_hist *h, const double *le, int n_le, double v) {
    int i = 0;
    while (i < n_le && v > le[i]) i++;
    h->n[i]++;
    h->sum += v;
    h->count++;
}

void srv_metrics_latency(srv_metrics *m, double t_submit, double t_first, double t_end, int n_gen) {
    if (t_first <= 0 || t_submit <= 0) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, TTFT_LE, (int)BS_ARRAY_LEN(TTFT_LE), BS_MAX(0.0, t_first - t_submit));
    if (n_gen > 1) observe(&m->tpot, TPOT_LE, (int)BS_ARRAY_LEN(TPOT_LE), BS_MAX(0.0, t_end - t_first) / (n_gen - 1));
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_in_flight(srv_metrics *m, int delta) {
    pthread_mutex_lock(&m->mu);
    m->in_flight += delta;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_client_closed(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->requests_client_closed++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_image_job(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->image_jobs++;
    pthread_mutex_unlock(&m->mu);
}

int srv_metrics_get_in_flight(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    int n = m->in_flight;
    pthread_mutex_unlock(&m->mu);
    return n;
}

static void histogram(srv_buf *b, const char *name, const char *help, const srv_hist *h, const double *le, int n_le) {
    char line[512];
    snprintf(line, sizeof line, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s histogram\n", name, help, name);
    srv_buf_adds(b, line);
    long cum = 0;
    for (int i = 0; i <= n_le; i++) {
        cum += h->n[i];
        if (i < n_le) snprintf(line, sizeof line, "llamacpp:%s_bucket{le=\"%g\"} %ld\n", name, le[i], cum);
        else snprintf(line, sizeof line, "llamacpp:%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
        srv_buf_adds(b, line);
    }
    snprintf(line, sizeof line, "llamacpp:%s_sum %.10g\nllamacpp:%s_count %ld\n", name, h->sum, name, h->count);
    srv_buf_adds(b, line);
}

static void metric(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    char line[512];
    snprintf(line, sizeof line, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.10g\n", name, help,
             name, type, name, v);
    srv_buf_adds(b, line);
}

char *srv_metrics_text(srv_metrics *m, int n_slots) {
    pthread_mutex_lock(&m->mu);
    srv_metrics c = *m;
    pthread_mutex_unlock(&m->mu);
    srv_buf b = {0};
    metric(&b, "requests_total", "counter", "HTTP requests answered.", (double)c.requests_total);
    metric(&b, "requests_errors_total", "counter", "Requests answered with a 4xx/5xx error other than 503.",
           (double)c.requests_errors);
    metric(&b, "requests_client_closed_total", "counter", "Requests whose client left before the answer (499) or the end of its stream.",
           (double)c.requests_client_closed);
    metric(&b, "requests_rejected_total", "counter", "Requests answered 503 (queue full, loading, draining).",
           (double)c.requests_rejected);
    metric(&b, "prompt_tokens_total", "counter", "Number of prompt tokens processed.", (double)c.prompt_tokens);
    metric(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens reused from the prompt cache.",
           (double)c.cached_tokens);
    metric(&b, "prompt_seconds_total", "counter", "Prompt process time.", c.prompt_seconds);
    metric(&b, "tokens_predicted_total", "counter", "Number of generation tokens processed.",
           (double)c.predicted_tokens);
    metric(&b, "tokens_predicted_seconds_total", "counter", "Predict process time.", c.predicted_seconds);
    metric(&b, "prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
           c.prompt_seconds > 0 ? c.prompt_tokens / c.prompt_seconds : 0.0);
    metric(&b, "predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s (per request).",
           c.predicted_seconds > 0 ? c.predicted_tokens / c.predicted_seconds : 0.0);
    metric(&b, "n_decode_total", "counter", "Batched decode passes.", (double)c.n_decode);
    metric(&b, "n_busy_slots_per_decode", "gauge", "Average number of slots per decode pass.",
           c.n_decode ? (double)c.n_decode_rows / c.n_decode : 0.0);
    metric(&b, "n_tokens_max", "counter", "Largest observed n_tokens (a finished request's prompt and output).",
           (double)c.n_tokens_max);
    metric(&b, "requests_image_jobs_total", "counter",
           "Requests parsed on the image job pool (images are never decoded on an HTTP thread).", (double)c.image_jobs);
    metric(&b, "requests_processing", "gauge", "Number of requests processing.", c.processing);
    metric(&b, "requests_deferred", "gauge", "Number of requests waiting in the queue.", c.deferred);
    metric(&b, "n_slots", "gauge", "Number of slots.", n_slots);
    metric(&b, "requests_waiting", "gauge",
           "Requests accepted whose first token has not come yet (queued or in their prompt).", c.waiting);
    metric(&b, "requests_in_flight", "gauge", "Generation requests being answered, streams included.",
           c.in_flight);
    metric(&b, "ready", "gauge", "1 while the replica takes new requests (not loading or draining).",
           c.state == SRV_READY);
    metric(&b, "draining", "gauge", "1 while the replica finishes its work before it stops.",
           c.state == SRV_DRAINING || c.state == SRV_STOPPING);
    histogram(&b, "time_to_first_token_seconds", "Seconds from a request being queued to its first token.",
              &c.ttft, TTFT_LE, (int)BS_ARRAY_LEN(TTFT_LE));
    histogram(&b, "time_per_output_token_seconds",
              "Seconds per generated token after the first (one observation per request).", &c.tpot, TPOT_LE,
              (int)BS_ARRAY_LEN(TPOT_LE));
    metric(&b, "spec_decode_num_drafts_total", "counter", "Speculative rounds that drafted.",
           (double)c.draft_rounds);
    metric(&b, "spec_decode_shared_blocks_total", "counter",
           "Drafter blocks run in one pass with other slots' blocks.", (double)c.n_draft_shared);
    metric(&b, "spec_decode_num_draft_tokens_total", "counter", "Drafted tokens verified.", (double)c.draft_tokens);
    metric(&b, "spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens accepted.",
           (double)c.draft_accepted);
    metric(&b, "loop_guard_loops_detected_total", "counter", "Doom loops the loop guard detected.",
           (double)c.loops_detected);
    metric(&b, "loop_guard_rewinds_total", "counter", "Loop-guard rewinds (rolled back and resampled).",
           (double)c.loop_rewinds);
    metric(&b, "loop_guard_stops_total", "counter", "Generations the loop guard ended on a loop.",
           (double)c.loop_stops);
    return b.p;
}
