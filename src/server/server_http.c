/* server_http.c: the HTTP side of `bitspark serve` on libmicrohttpd (server.h).
 *
 * Thread per connection: a handler may block while its task runs, and an SSE stream's content
 * reader blocks (in 50 ms waits, never returning 0, which would make the daemon spin) until the
 * next tokens arrive. A client that goes away is noticed either by a failed write or, while
 * nothing is written, by peeking at the socket; its task is then cancelled and the slot freed.
 *
 * Order of checks per request: API key (401) and declared body size (413) on the first call,
 * before the body is read; the body is collected up to the limit (413 past it); then routing. */
#include "server/server.h"
#include "io/util.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

typedef struct req {
    srv_buf body;
    bool too_big;
} req;

typedef struct sse_ctx {
    srv *s;
    srv_stream *st;
    srv_buf buf;
    size_t off;
} sse_ctx;

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
static const char *cors_origin(const srv *s, struct MHD_Connection *c) {
    if (!s->cfg.cors) return NULL;
    if (!strcmp(s->cfg.cors, "*")) return "*";
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    return o && in_list(s->cfg.cors, o, strlen(o)) ? o : NULL;
}

static bool is_loopback(const char *host) {
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

/* DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 is same-origin with
 * it in the browser's eyes, but its requests still say Host: evil.example. So a server on a
 * loopback address answers only Host localhost / 127.0.0.1 / [::1] (any port) and the names of
 * --allowed-hosts; elsewhere --allowed-hosts (if given) is the whole list. No Host (HTTP/1.0)
 * is not a browser. */
static bool host_allowed(const srv *s, struct MHD_Connection *c) {
    const bool loop = is_loopback(s->cfg.host);
    if (!loop && !s->cfg.allowed_hosts) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
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

/* A POST body must be declared JSON: text/plain, form and multipart bodies are what a page may
 * send cross-origin without a CORS preflight, so they are refused before anything runs. */
static bool json_content_type(struct MHD_Connection *c) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!t) return false;
    while (*t == ' ') t++;
    if (strncasecmp(t, "application/json", 16)) return false;
    t += 16;
    while (*t == ' ') t++;
    return !*t || *t == ';';
}

/* Compare in time that depends only on the configured key's length (no early exit). */
static bool key_equal(const char *given, const char *key) {
    size_t ng = strlen(given), nk = strlen(key);
    unsigned char d = ng != nk;
    for (size_t i = 0; i < nk; i++) d |= (unsigned char)((i < ng ? given[i] : 0) ^ key[i]);
    return d == 0;
}

static void add_common_headers(struct MHD_Response *resp, const char *ctype, const char *origin) {
    MHD_add_response_header(resp, "Content-Type", ctype ? ctype : "application/json; charset=utf-8");
    if (origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        if (strcmp(origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
    }
    MHD_add_response_header(resp, "Server", "bitspark/" BITSPARK_VERSION);
}

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *c, srv_reply *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body ? r->body : (void *)"", r->body ? MHD_RESPMEM_MUST_FREE
                                                                                     : MHD_RESPMEM_PERSISTENT);
    if (!resp) { free(r->body); return MHD_NO; }
    add_common_headers(resp, r->ctype, cors_origin(s, c));
    if (r->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (r->allow) MHD_add_response_header(resp, "Allow", r->allow);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->metrics, r->status);
    return ok;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    sse_ctx *x = cls;
    while (x->off == x->buf.len) {
        x->buf.len = 0;
        x->off = 0;
        int rc = srv_stream_read(x->st, &x->buf);
        if (rc < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0 && x->buf.len == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = BS_MIN(max, x->buf.len - x->off);
    memcpy(out, x->buf.p + x->off, n);
    x->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse_ctx *x = cls;
    srv_stream_free(x->st);
    srv_buf_free(&x->buf);
    free(x);
}

static enum MHD_Result send_stream(srv *s, struct MHD_Connection *c, srv_reply *r) {
    sse_ctx *x = bs_xcalloc(1, sizeof *x);
    x->s = s;
    x->st = r->stream;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
    if (!resp) { sse_free(x); return MHD_NO; }
    add_common_headers(resp, "text/event-stream", cors_origin(s, c));
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    srv_metrics_request(&s->metrics, 200);
    return ok;
}

static bool authorized(srv *s, struct MHD_Connection *c, const char *url) {
    if (!s->cfg.api_key) return true;
    size_t n = strcspn(url, "?");
    if ((n == 7 && !strncmp(url, "/health", 7)) || (n == 10 && !strncmp(url, "/v1/health", 10)) ||
        (n == 1 && url[0] == '/') || (n == 11 && !strncmp(url, "/index.html", 11)))
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncmp(h, "Bearer ", 7) && key_equal(h + 7, s->cfg.api_key)) return true;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return h && key_equal(h, s->cfg.api_key);
}

static enum MHD_Result fail(srv *s, struct MHD_Connection *c, int status, const char *type, const char *msg) {
    srv_reply r = {0};
    srv_reply_error(&r, status, type, "%s", msg);
    return send_reply(s, c, &r);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    req *q = *con_cls;
    if (!q) {
        q = bs_xcalloc(1, sizeof *q);
        *con_cls = q;
        if (!host_allowed(s, c))
            return fail(s, c, 403, "permission_error",
                        "this Host is not allowed (a server on a loopback address answers localhost, "
                        "127.0.0.1 and [::1]; see --allowed-hosts)");
        if (!strcmp(method, "OPTIONS")) {   /* CORS preflight: allowed only for --cors origins */
            const char *origin = cors_origin(s, c);
            struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            add_common_headers(resp, "text/plain", origin);
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
        if (!strcmp(method, "POST") && !json_content_type(c))
            return fail(s, c, 415, "invalid_request_error",
                        "the body must be JSON, sent with 'Content-Type: application/json'");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoll(cl, NULL, 10) > s->cfg.body_max) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than the limit of %ld bytes", s->cfg.body_max);
            return fail(s, c, 413, "invalid_request_error", msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_big && q->body.len + *upload_size <= (size_t)s->cfg.body_max) srv_buf_add(&q->body, upload, *upload_size);
        else q->too_big = true;
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the limit of %ld bytes", s->cfg.body_max);
        return fail(s, c, 413, "invalid_request_error", msg);
    }
    srv_reply r = {.client_gone = conn_gone, .ud = c};
    srv_handle(s, method, url, q->body.p, q->body.len, &r);
    if (r.stream) return send_stream(s, c, &r);
    if (r.status == 499) { srv_metrics_request(&s->metrics, 499); free(r.body); return MHD_NO; }
    return send_reply(s, c, &r);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)cls; (void)c; (void)code;
    req *q = *con_cls;
    if (!q) return;
    srv_buf_free(&q->body);
    free(q);
    *con_cls = NULL;
}

int srv_http_start(srv *s) {
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
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
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_END);
    if (!s->daemon) return bs_error("cannot listen on %s:%d", s->cfg.host, s->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void srv_http_stop(srv *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
