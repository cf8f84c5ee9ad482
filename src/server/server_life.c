/* server_life.c: the lifecycle of `bitspark serve` as a load balancer or Kubernetes sees it
 * (server.h).
 *
 *   LOADING   the listener is open, the model is not: GET /health and /ready answer 503
 *             {"status":"loading"} (llama-server's liveness semantics), everything else 503
 *   READY     /health 200 {"status":"ok"}; /ready 200, or 503 {"status":"busy"} while the queue
 *             is full, so a balancer sends the next request elsewhere
 *   DRAINING  after SIGTERM: /health stays 200 (the process is healthy), /ready and every new
 *             generation request answer 503 with Retry-After; what is in flight finishes
 *   STOPPING  in-flight work was cancelled (drain timeout or a second signal)
 *
 * Liveness and readiness are separate on purpose: a replica that restarts on a failed liveness
 * probe must not be restarted because it is busy or draining. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int srv_state_get(const srv *s) { return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE); }

void srv_state_set(srv *s, int state) {
    __atomic_store_n(&s->state, state, __ATOMIC_RELEASE);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.state = state;
    pthread_mutex_unlock(&s->metrics.mu);
}

static const char *state_name(int st) {
    switch (st) {
    case SRV_LOADING: return "loading";
    case SRV_READY: return "ok";
    case SRV_DRAINING: return "draining";
    default: return "stopping";
    }
}

static bool path_is(const char *url, const char *path) {
    size_t n = strcspn(url, "?");
    return n == strlen(path) && !strncmp(url, path, n);
}

/* {"status": ...} with the replica's id when it has one (loading: llama-server's error object too). */
static void status_reply(srv *s, srv_reply *r, int code, const char *status) {
    json_t *j = json_pack("{s:s}", "status", status);
    if (!strcmp(status, "loading"))   /* llama-server's loading answer beside it */
        json_object_set_new(j, "error", json_pack("{s:i,s:s,s:s}", "code", 503, "message", "Loading model", "type",
                                                  "unavailable_error"));
    if (s->cfg.replica_id) json_object_set_new(j, "replica", json_string(s->cfg.replica_id));
    srv_reply_json(r, code, j);
}

bool srv_life_gate(srv *s, const char *method, const char *url, bool ready_arg, bool bodies_wait, srv_reply *r) {
    const int st = srv_state_get(s);
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const bool health = path_is(url, "/health") || path_is(url, "/v1/health");
    const bool ready = path_is(url, "/ready") || path_is(url, "/v1/ready") ||
                       (health && (ready_arg || strstr(url, "?ready") || strstr(url, "&ready")));
    if (get && ready) {
        if (st == SRV_READY && (!srv_sched_accepting(s->sched) || bodies_wait))
            status_reply(s, r, 503, "busy");
        else if (st == SRV_READY) status_reply(s, r, 200, "ready");
        else status_reply(s, r, 503, state_name(st));
        return true;
    }
    if (get && health) {   /* liveness: only loading is not alive yet */
        status_reply(s, r, st == SRV_LOADING ? 503 : 200, state_name(st));
        return true;
    }
    if (st == SRV_LOADING) {
        srv_reply_error(r, 503, "unavailable_error", "the model is loading");
        return true;
    }
    if (st != SRV_READY && srv_route_generates(url)) {
        srv_reply_error(r, 503, "unavailable_error", "this replica is shutting down: send the request to another one");
        return true;
    }
    return false;
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int srv_drain(srv *s, double timeout_s, bool (*interrupted)(void *), void *ud) {
    srv_state_set(s, SRV_DRAINING);
    const double t0 = bs_time();
    int n = srv_metrics_get_in_flight(&s->metrics);
    fprintf(stderr, "bitspark serve: draining: %d generation request%s in flight, waiting at most %g s\n", n,
            n == 1 ? "" : "s", timeout_s);
    const char *why = NULL;
    while ((n = srv_metrics_get_in_flight(&s->metrics)) > 0) {
        if (bs_time() - t0 >= timeout_s) { why = "the drain timeout"; break; }
        if (interrupted ? interrupted(ud) : (nap_ms(50), false)) { why = "a second signal"; break; }
    }
    if (!why) return 0;
    fprintf(stderr, "bitspark serve: %s: cancelling %d generation request%s\n", why, n, n == 1 ? "" : "s");
    srv_state_set(s, SRV_STOPPING);
    srv_sched_shutdown(s->sched);
    /* the cancelled answers (a final stream event, a 503) still go out before the listener
     * closes; a client that does not read them is not waited for long */
    for (int i = 0; i < 100 && srv_metrics_get_in_flight(&s->metrics) > 0; i++) nap_ms(20);
    return n;
}
