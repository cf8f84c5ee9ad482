/* server_jobs.c: requests whose parsing is heavy (image parts: base64, decoding, preprocessing)
 * run srv_handle on a small pool of their own threads (server.h), so the HTTP worker threads
 * never decode an image and /health stays answerable whatever images clients send. The pool is
 * bounded: a few threads and a queue of SRV_JOBS_QUEUE requests; past that the answer is 503. */
#include "server/server.h"
#include "io/util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SRV_JOBS_QUEUE 64

struct srv_job {
    srv *s;
    char *method, *url, *body;
    size_t len;
    srv_reply r;
    bool done, abandoned;
    struct srv_job *next;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thr[8];
    int n_thr, n_queued;
    bool quit;
    srv_job *head, *tail;
    void (*on_done)(void);
} J = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void result_free(srv_reply *r) {
    if (r->pending) srv_pending_free(r->pending);
    if (r->stream) srv_stream_free(r->stream);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static void job_free(srv_job *j) {
    result_free(&j->r);
    free(j->method);
    free(j->url);
    free(j->body);
    free(j);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&J.mu);
    for (;;) {
        while (!J.quit && !J.head) pthread_cond_wait(&J.cv, &J.mu);
        if (!J.head) break;   /* quit, and nothing left */
        srv_job *j = J.head;
        J.head = j->next;
        if (!J.head) J.tail = NULL;
        J.n_queued--;
        const bool gone = j->abandoned;
        pthread_mutex_unlock(&J.mu);
        if (!gone) {
            srv_metrics_image_job(&j->s->metrics);
            srv_handle(j->s, j->method, j->url, j->body ? j->body : "", j->len, &j->r);
        }
        free(j->body);
        j->body = NULL;
        pthread_mutex_lock(&J.mu);
        j->done = true;
        if (j->abandoned) job_free(j);   /* its connection is gone: nobody takes the answer */
        if (J.on_done) {
            pthread_mutex_unlock(&J.mu);
            J.on_done();
            pthread_mutex_lock(&J.mu);
        }
    }
    pthread_mutex_unlock(&J.mu);
    return NULL;
}

int srv_jobs_start(int n_threads, void (*on_done)(void)) {
    J.quit = false;
    J.on_done = on_done;
    J.n_thr = 0;
    n_threads = BS_MAX(1, BS_MIN(n_threads, (int)BS_ARRAY_LEN(J.thr)));
    for (int i = 0; i < n_threads; i++) {
        if (pthread_create(&J.thr[i], NULL, worker, NULL)) break;
        J.n_thr++;
    }
    return J.n_thr ? 0 : bs_error("cannot start a thread");
}

void srv_jobs_stop(void) {
    pthread_mutex_lock(&J.mu);
    J.quit = true;
    pthread_cond_broadcast(&J.cv);
    pthread_mutex_unlock(&J.mu);
    for (int i = 0; i < J.n_thr; i++) pthread_join(J.thr[i], NULL);
    J.n_thr = 0;
}

srv_job *srv_job_submit(srv *s, const char *method, const char *url, char *body, size_t len, const srv_reply *r) {
    pthread_mutex_lock(&J.mu);
    if (J.quit || !J.n_thr || J.n_queued >= SRV_JOBS_QUEUE) {
        pthread_mutex_unlock(&J.mu);
        return NULL;
    }
    srv_job *j = bs_xcalloc(1, sizeof *j);
    *j = (srv_job){.s = s, .method = bs_xstrdup(method), .url = bs_xstrdup(url), .body = body, .len = len, .r = *r};
    if (J.tail) J.tail->next = j;
    else J.head = j;
    J.tail = j;
    J.n_queued++;
    pthread_cond_signal(&J.cv);
    pthread_mutex_unlock(&J.mu);
    return j;
}

bool srv_job_done(srv_job *j) {
    pthread_mutex_lock(&J.mu);
    bool d = j->done;
    pthread_mutex_unlock(&J.mu);
    return d;
}

void srv_job_take(srv_job *j, srv_reply *out) {
    *out = j->r;
    memset(&j->r, 0, sizeof j->r);
    job_free(j);
}

void srv_job_abandon(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&J.mu);
    const bool done = j->done;
    j->abandoned = true;
    pthread_mutex_unlock(&J.mu);
    if (done) job_free(j);   /* else the worker frees it when it ends */
}
