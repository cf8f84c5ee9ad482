/* server_http.c: the HTTP side of `bitspark serve` on libmicrohttpd (server.h).
 *
 * Event loop: a small pool of MHD worker threads (epoll) serves every connection; nothing
 * blocks in them. A request that waits - for its generation, for the next tokens of a stream,
 * or for body memory - suspends its connection, and the watcher thread resumes it once there
 * is something to do or the client has gone (its task is then cancelled and the slot freed).
 * The scheduler kicks the watcher whenever it publishes tokens or ends a task
 * (cfg.on_publish), so an answer leaves as soon as it is there; without kicks the watcher still
 * looks every WATCH_MS, for departed clients and deadlines. So idle and slow connections cost a socket and a little
 * memory, not a thread, and /health stays answerable whatever the other clients do.
 *
 * Slow clients: a request's headers must arrive within HEADER_S of the connection (or of the
 * previous request's end: that also bounds an idle keep-alive connection) and its body within
 * BODY_S of the headers, however steadily it drips; the watcher shuts down connections past
 * their deadline. Body memory: a request's body buffer grows as its bytes arrive, each step
 * reserved from one budget (cfg.body_budget) first; a body that cannot grow waits suspended
 * while the budget is spent (the oldest holder never waits), so N huge bodies at once cost at
 * most the budget and one body, not N bodies, and a socket that only declares a size costs nothing.
 * While bodies wait, a holder whose body stops growing (HOLD_RATE) is cut instead of holding them
 * up until its BODY_S.
 *
 * Order of checks per request: framing (400 / 501: srv_framing_check), Host (403), CORS
 * preflight, API key (401), the lifecycle (health and readiness answered, 503 while loading or,
 * for generation, draining: server_life.c), a browser's POST content type (415) and declared body size (413)
 * on the first call, before the body is read; the body is collected up to the limit (413 past
 * it); then routing (a request with image parts is parsed on the job pool, server_jobs.c, while
 * its connection waits suspended). Every answer names the replica (X-Replica-Id,
 * --replica-id); every 503 carries Retry-After. */
#include "server/server.h"
#include "server/server_dialect.h"
#include "io/util.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MS 10
#define HEADER_S 10.0
#define BODY_S 60.0
/* While bodies wait for budget, a holder must keep its body growing: past HOLD_GRACE_S after its
 * headers, at HOLD_RATE bytes a second on average, or it is cut (one client that stops mid-body
 * must not hold every other large body for BODY_S). */
#define HOLD_GRACE_S 5.0
#define HOLD_RATE (64.0 * 1024)

/* One connection (MHD's socket context), on the watcher's list from accept to close. */
typedef struct conn {
    struct MHD_Connection *c;
    int fd;
    double t0;                 /* start of the deadline now running */
    int phase;                 /* PH_HEADERS, PH_BODY (deadlines), PH_WORK (none) */
    int wait;                  /* what a suspended connection waits for (W_*), W_NONE: running */
    struct req *q;             /* the request in progress (W_TASK, W_BUDGET) */
    struct sse_ctx *x;         /* the stream being sent (W_STREAM) */
    struct conn *prev, *next;
} conn;
enum { PH_HEADERS, PH_BODY, PH_WORK };
enum { W_NONE, W_TASK, W_STREAM, W_BUDGET, W_JOB };

typedef struct req {
    srv_buf body;
    bool too_big;
    long reserved;             /* bytes of the body budget held: the body buffer's capacity */
    long want;                 /* bytes of budget a suspended body waits for (W_BUDGET) */
    struct req *hold_prev, *hold_next;   /* on W's list of budget holders while reserved > 0 */
    long long declared;        /* Content-Length, -1: chunked or none */
    bool woke;                 /* resumed after a budget wait: MHD may call once more with no
                                  data although the body has not come yet */
    srv_pending *pending;      /* non-streaming generation in progress */
    srv_job *job;              /* the request being parsed on the job pool (image parts) */
    bool in_flight;            /* a generation request, counted in metrics.in_flight until done */
    bool has_early;            /* a lifecycle answer to a request without a body, sent on the next
                                  call (queued on the first one, MHD would close the connection) */
    srv_reply early;
    bool anthropic;            /* an Anthropic path: every error answer in its shape */
} req;

typedef struct sse_ctx {
    srv *s;
    srv_stream *st;
    srv_buf buf;
    size_t off;
    conn *k;
    bool ended;                /* the stream's end is in hand, or its client's leaving counted */
} sse_ctx;

/* The watcher: connection list, body budget, the thread. One per process (one server). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* kicks (CLOCK_MONOTONIC) */
    pthread_t thread;
    bool running, stopping, kicked;
    conn *head;
    long budget_used;
    struct req *hold_head, *hold_tail;   /* budget holders, oldest first */
    int n_budget_wait;                   /* bodies suspended for budget */
    int n_suspended;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void kick(void) {
    pthread_mutex_lock(&W.mu);
    W.kicked = true;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
}

/* True once the peer has closed its end (or the socket failed). */
static bool conn_gone(void *ud) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info((struct MHD_Connection *)ud, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char c;
    return recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- browser-facing checks ------------------------------------------------------------------ */

/* Whether `item` (n bytes) is one of the comma-separated entries of list (case-insensitive). */
static bool in_list(const char *list, const char *item, size_t n) {
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t e = k;
        while (e && p[e - 1] == ' ') e--;
        if (e && e == n && !strncasecmp(p, item, n)) return true;
        p += k;
    }
    return false;
}

/* The Access-Control-Allow-Origin value for this request, or NULL: none unless --cors allows
 * the request's Origin ("*" allows any; an allowed origin is echoed with Vary: Origin). */
const char *srv_cors_origin(const srv *s, const char *o) {
    if (!s->cfg.cors) return NULL;
    if (!strcmp(s->cfg.cors, "*")) return "*";
    return o && in_list(s->cfg.cors, o, strlen(o)) ? o : NULL;
}

static const char *cors_origin(const srv *s, struct MHD_Connection *c) {
    return srv_cors_origin(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"));
}

static bool is_loopback(const char *host) {
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

/* DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 is same-origin with
 * it in the browser's eyes, but its requests still say Host: evil.example. So a server on a
 * loopback address answers only Host localhost / 127.0.0.1 / [::1] (any port) and the names of
 * --allowed-hosts; elsewhere --allowed-hosts (if given) is the whole list. No Host (HTTP/1.0)
 * is not a browser. */
bool srv_host_allowed(const srv *s, const char *h) {
    const bool loop = is_loopback(s->cfg.host);
    if (!loop && !s->cfg.allowed_hosts) return true;
    if (!h) return true;
    size_t n;
    if (h[0] == '[') {                        /* [v6]:port */
        const char *e = strchr(h, ']');
        if (!e || (e[1] && e[1] != ':')) return false;
        n = (size_t)(e - h) + 1;
    } else {
        n = strcspn(h, ":");
    }
    if (loop && ((n == 9 && !strncasecmp(h, "localhost", 9)) || (n == 9 && !strncmp(h, "127.0.0.1", 9)) ||
                 (n == 5 && !strncmp(h, "[::1]", 5))))
        return true;
    return in_list(s->cfg.allowed_hosts, h, n) || in_list(s->cfg.allowed_hosts, h, strlen(h));
}

static bool host_allowed(const srv *s, struct MHD_Connection *c) {
    return srv_host_allowed(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"));
}

/* Whether a POST body is declared JSON. Text/plain, form and multipart bodies are what a page
 * may send cross-origin without a CORS preflight, so a browser's (one with an Origin that
 * --cors does not allow) must be: see post_type_ok. */
bool srv_json_content_type(const char *t) {
    if (!t) return false;
    while (*t == ' ') t++;
    if (strncasecmp(t, "application/json", 16)) return false;
    t += 16;
    while (*t == ' ') t++;
    return !*t || *t == ';';
}

/* A POST's body is read as JSON whatever its declared type (llama-server does the same: `curl
 * -d` sends a form type, Python's requests none), except from a browser: a request with an
 * Origin header that --cors does not allow must declare JSON, which a page cannot send
 * cross-origin without a preflight. Browsers send Origin with every POST (the Fetch standard),
 * so a page's simple POST never gets here unasked. */
bool srv_post_type_ok(const srv *s, const char *content_type, const char *origin) {
    return srv_json_content_type(content_type) || !origin || srv_cors_origin(s, origin);
}

static bool post_type_ok(const srv *s, struct MHD_Connection *c) {
    return srv_post_type_ok(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
                            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"));
}

/* Compare in time that depends only on the configured key's length (no early exit). */
/* Whether given is one of the keys (one per line), each compared in time independent of where
 * they differ. */
static bool key_equal(const char *given, const char *keys) {
    const size_t ng = strlen(given);
    bool any = false;
    for (const char *key = keys; *key;) {
        const size_t nk = strcspn(key, "\n");
        unsigned char d = ng != nk || nk == 0;   /* an empty key matches nothing */
        for (size_t i = 0; i < nk; i++) d |= (unsigned char)((i < ng ? given[i] : 0) ^ key[i]);
        any |= d == 0;
        key += nk + (key[nk] == '\n');
    }
    return any;
}

static void add_common_headers(const srv *s, struct MHD_Response *resp, const char *ctype, const char *origin) {
    MHD_add_response_header(resp, "Content-Type", ctype ? ctype : "application/json; charset=utf-8");
    if (origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        if (strcmp(origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    }
    MHD_add_response_header(resp, "Server", "bitspark/" BITSPARK_VERSION);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    /* which replica answered (prompt-cache affinity can be checked from outside) */
    if (s->cfg.replica_id) MHD_add_response_header(resp, "X-Replica-Id", s->cfg.replica_id);
    /* a draining server closes kept-alive connections so clients reconnect elsewhere */
    if (srv_state_get(s) >= SRV_DRAINING) MHD_add_response_header(resp, "Connection", "close");
}

static conn *conn_of(struct MHD_Connection *c);

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *c, srv_reply *r) {
    /* errors given before routing (401, 413, 415, bad JSON, 404, 405, 503) speak the path's
     * dialect too: the Anthropic SDKs read {"type": "error", "error": {...}} */
    const conn *k = conn_of(c);
    if (r->status >= 400 && k && k->q && k->q->anthropic) srv_anthropic_error(r);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body ? r->body : (void *)"", r->body ? MHD_RESPMEM_MUST_FREE
                                                                                     : MHD_RESPMEM_PERSISTENT);
    if (!resp) { free(r->body); return MHD_NO; }
    add_common_headers(s, resp, r->ctype, cors_origin(s, c));
    if (r->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    /* loading, draining, shut down or a full queue: worth retrying soon, maybe elsewhere */
    if (r->status == 503) MHD_add_response_header(resp, "Retry-After", srv_state_get(s) == SRV_LOADING ? "5" : "1");
    if (r->allow) MHD_add_response_header(resp, "Allow", r->allow);
    if (r->csp) {   /* the page: only its own script and style, no other origin, never framed */
        MHD_add_response_header(resp, "Content-Security-Policy", r->csp);
        MHD_add_response_header(resp, "X-Frame-Options", "DENY");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->metrics, r->status);
    return ok;
}

static bool suspend_on(conn *k, int what);
/* Whether srv_http_stop began (read by MHD's workers, the readers and the watcher). */
static bool stopping(void);

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    sse_ctx *x = cls;
    while (x->off == x->buf.len) {
        x->buf.len = 0;
        x->off = 0;
        if (x->k && !x->ended && conn_gone(x->k->c)) {   /* frees: cancels */
            srv_metrics_client_closed(&x->s->metrics);
            x->ended = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (stopping()) return MHD_CONTENT_READER_END_WITH_ERROR;
        int rc = srv_stream_poll(x->st, &x->buf);
        if (rc == 2) {          /* nothing yet: sleep until the watcher sees news */
            if (!x->k) rc = srv_stream_read(x->st, &x->buf);
            else return suspend_on(x->k, W_STREAM) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (srv_stream_done(x->st)) x->ended = true;   /* all of it is in hand: a client that leaves now read its answer */
        if (rc == 0 && x->buf.len == 0) {
            x->ended = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
    }
    size_t n = BS_MIN(max, x->buf.len - x->off);
    memcpy(out, x->buf.p + x->off, n);
    x->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse_ctx *x = cls;
    /* a stream freed before its end, and not by a stop, lost its client: often MHD saw it first,
     * its send failing on the reset socket before the reader looked */
    if (!x->ended && !stopping()) srv_metrics_client_closed(&x->s->metrics);
    pthread_mutex_lock(&W.mu);
    if (x->k && x->k->x == x) x->k->x = NULL;
    pthread_mutex_unlock(&W.mu);
    srv_stream_free(x->st);
    srv_buf_free(&x->buf);
    free(x);
}

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result send_stream(srv *s, struct MHD_Connection *c, srv_reply *r) {
    sse_ctx *x = bs_xcalloc(1, sizeof *x);
    x->s = s;
    x->st = r->stream;
    x->k = conn_of(c);
    if (x->k) x->k->x = x;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!resp) { x->ended = true; sse_free(x); return MHD_NO; }
    add_common_headers(s, resp, "text/event-stream", cors_origin(s, c));
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->metrics, 200);
    return ok;
}

bool srv_authorized(const srv *s, const char *url, const char *authorization, const char *x_api_key) {
    if (!s->cfg.api_key) return true;
    size_t n = strcspn(url, "?");
    if ((n == 7 && !strncmp(url, "/health", 7)) || (n == 10 && !strncmp(url, "/v1/health", 10)) ||
        (n == 6 && !strncmp(url, "/ready", 6)) || (n == 9 && !strncmp(url, "/v1/ready", 9)) ||
        (n == 1 && url[0] == '/') || (n == 11 && !strncmp(url, "/index.html", 11)) ||
        (n == 7 && !strncmp(url, "/models", 7)) || (n == 10 && !strncmp(url, "/v1/models", 10)) ||
        (n == 9 && !strncmp(url, "/api/tags", 9)))   /* public in llama-server too */
        return true;
    const char *h = authorization;   /* "Bearer KEY", or the bare key as llama-server takes it */
    if (h && ((!strncmp(h, "Bearer ", 7) && key_equal(h + 7, s->cfg.api_key)) || key_equal(h, s->cfg.api_key)))
        return true;
    return x_api_key && key_equal(x_api_key, s->cfg.api_key);
}

static bool authorized(srv *s, struct MHD_Connection *c, const char *url) {
    return srv_authorized(s, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
                          MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key"));
}

/* Request framing (RFC 9112 6.1, 6.3, 3.2): what a proxy in front could read differently from
 * us is refused, since libmicrohttpd takes the first of two Content-Length headers, the first of
 * two Hosts, and waits for a connection close on a Transfer-Encoding it does not know. */
static const char *trim_ws(const char *v, size_t *n) {
    while (*v == ' ' || *v == '\t') v++;
    size_t k = strlen(v);
    while (k && (v[k - 1] == ' ' || v[k - 1] == '\t')) k--;
    *n = k;
    return v;
}

int srv_framing_check(const char *const *name, const char *const *value, size_t n, char *msg, size_t len) {
    const char *cl = NULL, *te = NULL;
    size_t cl_n = 0, te_n = 0;
    int hosts = 0, tes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t vn;
        const char *v = trim_ws(value[i] ? value[i] : "", &vn);
        if (!strcasecmp(name[i], "Host")) {
            hosts++;
        } else if (!strcasecmp(name[i], "Content-Length")) {
            if (!vn || strspn(v, "0123456789") < vn) {
                snprintf(msg, len, "a Content-Length that is not a number");
                return 400;
            }
            if (cl && (cl_n != vn || strncmp(cl, v, vn))) {
                snprintf(msg, len, "two different Content-Length headers");
                return 400;
            }
            cl = v, cl_n = vn;
        } else if (!strcasecmp(name[i], "Transfer-Encoding")) {
            tes++;
            te = v, te_n = vn;
        }
    }
    if (hosts > 1) { snprintf(msg, len, "more than one Host header"); return 400; }
    if (te && (tes > 1 || te_n != 7 || strncasecmp(te, "chunked", 7))) {
        snprintf(msg, len, "Transfer-Encoding '%.*s' is not supported (only chunked)", (int)BS_MIN(te_n, 64), te);
        return 501;
    }
    if (te && cl) { snprintf(msg, len, "both Content-Length and Transfer-Encoding"); return 400; }
    return 0;
}

#define FRAMING_MAX 16   /* Host, Content-Length and Transfer-Encoding headers looked at */
typedef struct framing { const char *name[FRAMING_MAX], *value[FRAMING_MAX]; size_t n; bool more; } framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (strcasecmp(key, "Host") && strcasecmp(key, "Content-Length") && strcasecmp(key, "Transfer-Encoding"))
        return MHD_YES;
    if (f->n == FRAMING_MAX) { f->more = true; return MHD_NO; }
    f->name[f->n] = key;
    f->value[f->n++] = value;
    return MHD_YES;
}

/* 0, or the status (400, 501) of a request whose framing is ambiguous; msg says why. */
static int framing_status(struct MHD_Connection *c, char *msg, size_t len) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &f);
    if (f.more) { snprintf(msg, len, "too many Host, Content-Length or Transfer-Encoding headers"); return 400; }
    return srv_framing_check(f.name, f.value, f.n, msg, len);
}

static enum MHD_Result fail(srv *s, struct MHD_Connection *c, int status, const char *type, const char *msg) {
    srv_reply r = {0};
    srv_reply_error(&r, status, type, "%s", msg);
    return send_reply(s, c, &r);
}

/* ---- suspension and the watcher ------------------------------------------------------------ */

static bool stopping(void) { return __atomic_load_n(&W.stopping, __ATOMIC_ACQUIRE); }

/* Called from the handler or the content reader (MHD's rule): park the connection until the
 * watcher sees what it waits for. False, and nothing parked, once the server is stopping: its
 * stop waits for the suspended connections to be resumed, and MHD must not stop with one left,
 * so none may be added after the flag is set (checked under the lock that counts them). */
static bool suspend_on(conn *k, int what) {
    pthread_mutex_lock(&W.mu);
    const bool ok = !W.stopping;
    if (ok) {
        MHD_suspend_connection(k->c);
        k->wait = what;
        W.n_suspended++;
        if (what == W_BUDGET) W.n_budget_wait++;
    }
    pthread_mutex_unlock(&W.mu);
    return ok;
}

/* default: one body of the largest size, and room for small requests beside it */
static long budget_limit(const srv *s) { return s->cfg.body_budget > 0 ? s->cfg.body_budget : s->cfg.body_max + (1L << 20); }

/* Body memory is reserved as the bytes arrive (the buffer grows in steps, each reserved first),
 * so a connection that declares a large Content-Length and sends nothing holds nothing. While the
 * budget is spent a growing body waits; the oldest holder may always go on (at most one body past
 * the budget), so bodies that each hold part of the budget never wait for each other. */
static bool budget_fits(const srv *s, const req *q, long n) {   /* W.mu held */
    return W.budget_used + n <= budget_limit(s) || !W.hold_head || W.hold_head == q;
}

static bool budget_take(const srv *s, req *q, long n, bool force) {
    pthread_mutex_lock(&W.mu);
    bool ok = force || budget_fits(s, q, n);
    if (ok && n > 0) {
        W.budget_used += n;
        if (!q->reserved) {   /* a new holder, the youngest */
            q->hold_prev = W.hold_tail;
            q->hold_next = NULL;
            if (W.hold_tail) W.hold_tail->hold_next = q;
            else W.hold_head = q;
            W.hold_tail = q;
        }
        q->reserved += n;
    }
    pthread_mutex_unlock(&W.mu);
    return ok;
}

/* Give back all q holds. */
static void budget_give(req *q) {
    if (!q->reserved) return;
    pthread_mutex_lock(&W.mu);
    W.budget_used -= q->reserved;
    q->reserved = 0;
    if (q->hold_prev) q->hold_prev->hold_next = q->hold_next;
    else W.hold_head = q->hold_next;
    if (q->hold_next) q->hold_next->hold_prev = q->hold_prev;
    else W.hold_tail = q->hold_prev;
    q->hold_prev = q->hold_next = NULL;
    W.kicked = true;   /* a body waiting for memory may fit now */
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
}

static bool budget_spent(const srv *s) {
    pthread_mutex_lock(&W.mu);
    bool spent = W.n_budget_wait > 0 || W.budget_used >= budget_limit(s);
    pthread_mutex_unlock(&W.mu);
    return spent;
}

#define BODY_STEP (256L << 10)

/* Room in q's body buffer for n more bytes: 0, or the bytes of budget to wait for (force: take
 * them anyway, for a request that cannot wait). */
static long body_room(srv *s, req *q, size_t n, bool force) {
    const size_t need = q->body.len + n + 1;
    if (need <= q->body.cap) return 0;
    size_t cap = q->body.cap + BS_MAX((size_t)BODY_STEP, q->body.cap / 2);
    const size_t most = (q->declared > 0 ? (size_t)q->declared : (size_t)s->cfg.body_max) + 1;
    cap = BS_MAX(need, BS_MIN(cap, most));
    const long more = (long)(cap - q->body.cap);
    if (!budget_take(s, q, more, force)) return more;
    q->body.p = bs_xrealloc(q->body.p, cap);
    q->body.cap = cap;
    return 0;
}

static bool wait_over(srv *s, conn *k) {
    if (stopping() || conn_gone(k->c)) return true;
    switch (k->wait) {
    case W_TASK: return k->q && k->q->pending && srv_pending_ready(k->q->pending);
    case W_STREAM: return k->x && srv_stream_ready(k->x->st);
    case W_JOB: return k->q && k->q->job && srv_job_done(k->q->job);
    case W_BUDGET: {   /* the resumed handler takes it (or waits again) */
        pthread_mutex_lock(&W.mu);
        bool fits = !k->q || budget_fits(s, k->q, k->q->want);
        pthread_mutex_unlock(&W.mu);
        if (fits && k->q) k->q->woke = true;
        return fits;
    }
    }
    return false;
}

static void watch_cv_init(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&W.cv, &a);
    pthread_condattr_destroy(&a);
}

/* A body holding budget that others wait for, growing slower than HOLD_RATE past its grace
 * (its reservation follows its bytes, in BODY_STEP steps). W.mu held. */
static bool holds_up(const conn *k, double now) {
    const double t = now - k->t0 - HOLD_GRACE_S;
    return k->phase == PH_BODY && W.n_budget_wait > 0 && k->q && k->q->reserved > 0 && t > 0 &&
           (double)k->q->reserved < t * HOLD_RATE;
}

static void *watcher(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&W.mu);
    while (W.running) {
        if (!W.kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += WATCH_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&W.cv, &W.mu, &ts);
        }
        W.kicked = false;
        const double now = bs_time();
        for (conn *k = W.head; k; k = k->next) {
            if (k->wait != W_NONE) {
                int what = k->wait;
                pthread_mutex_unlock(&W.mu);   /* the predicates take task locks */
                bool over = wait_over(s, k);
                pthread_mutex_lock(&W.mu);
                /* k cannot have closed meanwhile: a suspended connection is never cleaned up */
                if (over && k->wait == what) {
                    if (what == W_BUDGET) W.n_budget_wait--, k->t0 = now;   /* waiting was not its fault */
                    k->wait = W_NONE;
                    W.n_suspended--;
                    MHD_resume_connection(k->c);
                }
            } else if ((k->phase == PH_HEADERS && now - k->t0 > HEADER_S) ||
                       (k->phase == PH_BODY && now - k->t0 > BODY_S) || holds_up(k, now)) {
                /* past its deadline: MHD sees the shut socket and closes the connection */
                shutdown(k->fd, SHUT_RDWR);
                k->phase = PH_WORK;
            }
        }
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn *k = bs_xcalloc(1, sizeof *k);
        k->c = c;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        k->t0 = bs_time();
        pthread_mutex_lock(&W.mu);
        k->next = W.head;
        if (W.head) W.head->prev = k;
        W.head = k;
        pthread_mutex_unlock(&W.mu);
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn *k = *socket_context;
        if (!k) return;
        pthread_mutex_lock(&W.mu);
        if (k->prev) k->prev->next = k->next;
        else W.head = k->next;
        if (k->next) k->next->prev = k->prev;
        if (k->x) k->x->k = NULL;
        if (k->wait != W_NONE) W.n_suspended--;
        if (k->wait == W_BUDGET) W.n_budget_wait--;
        pthread_mutex_unlock(&W.mu);
        free(k);
        *socket_context = NULL;
    }
}

static void set_phase(conn *k, int phase) {
    if (!k) return;
    pthread_mutex_lock(&W.mu);
    k->phase = phase;
    k->t0 = bs_time();
    pthread_mutex_unlock(&W.mu);
}

/* ---- the request handler ----------------------------------------------------------------------- */

static enum MHD_Result first_call(srv *s, struct MHD_Connection *c, const char *url, const char *method, req *q) {
    q->anthropic = srv_anthropic_path(url);
    char why[128];
    const int bad = framing_status(c, why, sizeof why);
    if (bad) return fail(s, c, bad, bad == 501 ? "not_supported_error" : "invalid_request_error", why);
    if (!host_allowed(s, c))
        return fail(s, c, 403, "permission_error",
                    "this Host is not allowed (a server on a loopback address answers localhost, "
                    "127.0.0.1 and [::1]; see --allowed-hosts)");
    if (!strcmp(method, "OPTIONS")) {   /* CORS preflight: allowed only for --cors origins */
        const char *origin = cors_origin(s, c);
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        add_common_headers(s, resp, "text/plain", origin);
        MHD_add_response_header(resp, "Allow", "GET, HEAD, POST, OPTIONS");
        if (origin) {
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        }
        enum MHD_Result ok = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return ok;
    }
    if (!authorized(s, c, url))
        return fail(s, c, 401, "authentication_error", "Invalid API Key");
    /* counted before the state is read: a drain that sees no request in flight has made every
     * later one see it draining (server_life.c) */
    if (srv_route_generates(url)) {
        q->in_flight = true;
        srv_metrics_in_flight(&s->metrics, 1);
    }
    const char *arg;
    size_t arg_len;
    const bool ready_arg = MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "ready", 5, &arg, &arg_len) == MHD_YES;
    srv_reply gate = {0};
    if (srv_life_gate(s, method, url, ready_arg, budget_spent(s), &gate)) {
        const bool bodiless = !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length") &&
                              !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
        if (!bodiless) return send_reply(s, c, &gate);   /* its body is not read: the connection closes */
        q->early = gate;
        q->has_early = true;
        return MHD_YES;
    }
    if (!strcmp(method, "POST") && !post_type_ok(s, c))
        return fail(s, c, 415, "invalid_request_error",
                    "a browser's request body must be sent with 'Content-Type: application/json'");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    long long declared = cl ? strtoll(cl, NULL, 10) : -1;
    q->declared = declared;
    if (declared > s->cfg.body_max) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %ld bytes", s->cfg.body_max);
        return fail(s, c, 413, "invalid_request_error", msg);
    }
    return MHD_YES;   /* body memory is reserved as the bytes come (body_room) */
}

static enum MHD_Result reply(srv *s, struct MHD_Connection *c, srv_reply *r) {
    if (r->stream) return send_stream(s, c, r);
    if (r->status == 499) { srv_metrics_request(&s->metrics, 499); free(r->body); return MHD_NO; }
    return send_reply(s, c, r);
}

/* A parsed request's answer: sent now, or (a generation) waited for suspended. */
static enum MHD_Result answer(srv *s, struct MHD_Connection *c, conn *k, req *q, srv_reply *r) {
    if (r->pending) {
        q->pending = r->pending;
        return !k || suspend_on(k, W_TASK) ? MHD_YES : MHD_NO;   /* (stopping: completed() cancels it) */
    }
    return reply(s, c, r);
}

/* The request to the job pool (images are decoded there): the job owns the body from now. */
static enum MHD_Result to_job(srv *s, struct MHD_Connection *c, conn *k, req *q, const char *method, const char *url,
                              const srv_reply *r) {
    if (!(q->job = srv_job_submit(s, method, url, q->body.p, q->body.len, r)))
        return fail(s, c, 503, "unavailable_error", "too many requests with images are being parsed: retry soon");
    q->body = (srv_buf){0};
    return suspend_on(k, W_JOB) ? MHD_YES : MHD_NO;   /* (stopping: completed() abandons the job) */
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    req *q = *con_cls;
    conn *k = conn_of(c);
    const bool first = !q;
    if (first) {
        q = bs_xcalloc(1, sizeof *q);
        *con_cls = q;
        if (k) k->q = q;
        set_phase(k, PH_BODY);
        return first_call(s, c, url, method, q);
    }
    if (q->has_early) {                   /* health / readiness, or a bodiless request refused */
        q->has_early = false;
        return send_reply(s, c, &q->early);
    }
    if (*upload_size) {
        if (!q->too_big && q->body.len + *upload_size <= (size_t)s->cfg.body_max) {
            if (stopping()) return MHD_NO;
            /* without a connection context (never expected) it cannot wait: it takes the memory */
            const long want = body_room(s, q, *upload_size, !k);
            if (want) {   /* the budget is spent: the bytes stay with MHD until it has room */
                q->want = want;
                return suspend_on(k, W_BUDGET) ? MHD_YES : MHD_NO;
            }
            srv_buf_add(&q->body, upload, *upload_size);
        } else {
            q->too_big = true;
        }
        *upload_size = 0;
        q->woke = false;
        return MHD_YES;
    }
    /* not the end of the body yet: the call that follows a resume carries no data */
    if (!q->pending && !q->job && !q->too_big && (q->declared > 0 ? q->body.len < (size_t)q->declared : q->woke)) {
        q->woke = false;
        return MHD_YES;
    }
    set_phase(k, PH_WORK);
    if (q->job) {                           /* resumed: parsed on the job pool, or the client gone */
        if (conn_gone(c) || stopping()) {
            srv_job_abandon(q->job);
            q->job = NULL;
            if (!stopping()) srv_metrics_request(&s->metrics, 499);
            return MHD_NO;
        }
        if (!srv_job_done(q->job)) return suspend_on(k, W_JOB) ? MHD_YES : MHD_NO;
        srv_reply r;
        srv_job_take(q->job, &r);
        q->job = NULL;
        budget_give(q);
        return answer(s, c, k, q, &r);
    }
    if (q->pending) {                       /* resumed: the generation is done, or the client gone */
        if (conn_gone(c) || stopping()) {   /* completed() cancels the task */
            if (!stopping()) srv_metrics_request(&s->metrics, 499);   /* the client left */
            return MHD_NO;
        }
        if (!srv_pending_ready(q->pending)) return !k || suspend_on(k, W_TASK) ? MHD_YES : MHD_NO;
        srv_reply r = {0};
        srv_pending *p = q->pending;
        q->pending = NULL;
        srv_pending_finish(p, &r);
        return reply(s, c, &r);
    }
    if (q->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %ld bytes", s->cfg.body_max);
        return fail(s, c, 413, "invalid_request_error", msg);
    }
    srv_reply r = {.client_gone = conn_gone, .ud = c, .async = k != NULL};
    /* images are decoded on the job pool, never on this thread: a body that names image_url
     * (or multimodal_data) goes there at once, and the handler hands back any other (an Anthropic image block, an
     * escaped key) at its first image */
    if (k && s->mmproj && q->body.len &&
        (memmem(q->body.p, q->body.len, "image_url", 9) || memmem(q->body.p, q->body.len, "multimodal_data", 15)))
        return to_job(s, c, k, q, method, url, &r);
    r.no_images = k && s->mmproj;
    char with_action[512];   /* POST /slots/{id}?action=..., GET /slots?fail_on_no_slot=1: the handler reads the query */
    const char *act = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    const char *fail = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    if (act && !strncmp(url, "/slots/", 7) && strlen(url) + strlen(act) + 9 < sizeof with_action) {
        snprintf(with_action, sizeof with_action, "%s?action=%s", url, act);
        url = with_action;
    } else if (fail && !strcmp(url, "/slots") && strlen(fail) < 64) {
        snprintf(with_action, sizeof with_action, "/slots?fail_on_no_slot=%s", fail);
        url = with_action;
    }
    srv_handle(s, method, url, q->body.p, q->body.len, &r);
    if (r.wants_job) {
        free(r.body);
        srv_reply jr = {.client_gone = conn_gone, .ud = c, .async = true};
        return to_job(s, c, k, q, method, url, &jr);
    }
    /* the body is parsed: its memory goes back to the budget now, not at the end */
    srv_buf_free(&q->body);
    budget_give(q);
    return answer(s, c, k, q, &r);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)code;
    req *q = *con_cls;
    if (!q) return;
    conn *k = conn_of(c);
    if (k) {
        pthread_mutex_lock(&W.mu);
        k->q = NULL;
        k->phase = PH_HEADERS;   /* keep-alive: the next request's headers have HEADER_S */
        k->t0 = bs_time();
        pthread_mutex_unlock(&W.mu);
    }
    srv_pending_free(q->pending);
    srv_job_abandon(q->job);
    if (q->has_early) free(q->early.body);
    if (q->in_flight) srv_metrics_in_flight(&((srv *)cls)->metrics, -1);
    budget_give(q);
    srv_buf_free(&q->body);
    free(q);
    *con_cls = NULL;
}

/* Every connection is a socket: make room for the connection limit (plus the model, logs). */
static void raise_fd_limit(int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= (rlim_t)want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)want ? (rlim_t)want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

int srv_http_start(srv *s) {
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, s->cfg.host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->cfg.port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, s->cfg.host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->cfg.port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        return bs_error("--host: '%s' is not an IPv4 or IPv6 address", s->cfg.host);
    }
    raise_fd_limit(s->cfg.max_connections + 256);
    s->cfg.on_publish = kick;   /* before the scheduler exists: srv_load copies the config */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_cv_init);
    W.running = true;
    __atomic_store_n(&W.stopping, false, __ATOMIC_RELEASE);
    if (pthread_create(&W.thread, NULL, watcher, s)) { W.running = false; return bs_error("cannot start a thread"); }
    const unsigned workers = s->cfg.http_threads > 0 ? (unsigned)s->cfg.http_threads : 4u;
    if (srv_jobs_start((int)(workers + 1) / 2, kick)) { srv_http_stop(s); return -1; }
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_THREAD_POOL_SIZE, workers,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, s->cfg.http_timeout > 0 ? (unsigned)s->cfg.http_timeout : 600u,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, notify_conn, s, MHD_OPTION_END);
    if (!s->daemon) {
        srv_http_stop(s);
        return bs_error("cannot listen on %s:%d", s->cfg.host, s->cfg.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void srv_http_stop(srv *s) {
    MHD_socket listen_fd = MHD_INVALID_SOCKET;
    if (s->daemon) {
        /* MHD must not stop with suspended connections: wake them all; stopping makes each one
         * end at once instead of waiting again */
        listen_fd = MHD_quiesce_daemon(s->daemon);
        pthread_mutex_lock(&W.mu);
        __atomic_store_n(&W.stopping, true, __ATOMIC_RELEASE);   /* no suspension after this (suspend_on) */
        pthread_mutex_unlock(&W.mu);
        for (int i = 0; i < 500; i++) {
            pthread_mutex_lock(&W.mu);
            int n = W.n_suspended;
            pthread_mutex_unlock(&W.mu);
            if (n == 0) break;
            struct timespec ts = {0, 2 * WATCH_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (W.running) {
        pthread_mutex_lock(&W.mu);
        W.running = false;
        pthread_cond_signal(&W.cv);
        pthread_mutex_unlock(&W.mu);
        pthread_join(W.thread, NULL);
    }
    if (s->daemon) MHD_stop_daemon(s->daemon);
    srv_jobs_stop();   /* after the connections: an abandoned job frees itself when it ends */
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);   /* quiesce hands it to us */
    s->daemon = NULL;
}
