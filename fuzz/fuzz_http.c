/* fuzz_http.c: libFuzzer target for the server's request handling: headers -> the Host / CORS /
 * content-type / API-key checks, and body -> JSON -> task mapping for every endpoint (chat,
 * completions, tokenize, detokenize, apply-template, embeddings, the GET routes), on a real server over the
 * tiny fixture model (BS_FUZZ_MODEL) with its scheduler running.
 *
 * Input: one selector byte (endpoint and method), then header lines "Name: value\n" up to an
 * empty line (also checked for ambiguous framing: srv_framing_check), then the body. Every request must get a status in 200..599 with a JSON (or the
 * page's / metrics') body; error bodies must have OpenAI's shape. Generations are not waited
 * for (the reply is async: pending answers and streams are freed, which cancels their task), so
 * inputs stay fast; the scheduler still takes and drops the tasks it was given. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BS_FUZZ_MODEL
#define BS_FUZZ_MODEL "tiny-q1_0.gguf"
#endif

static srv S;
static bool started;

static const struct { const char *method, *url; } ROUTES[] = {
    {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"POST", "/tokenize"},
    {"POST", "/detokenize"},          {"POST", "/apply-template"}, {"GET", "/health"},
    {"GET", "/v1/models"},            {"GET", "/props"},           {"GET", "/slots"},
    {"GET", "/metrics"},              {"DELETE", "/slots"},        {"FOO", "/v1/chat/completions"},
    {"POST", "/nothing?x=1"},         {"HEAD", "/"},               {"POST", "/chat/completions"},
    {"POST", "/completions"},         {"POST", "/completion"},     {"POST", "/v1/embeddings"},
};

static void start(void) {
    srv_config c;
    memset(&c, 0, sizeof c);
    c.model = getenv("BS_FUZZ_MODEL") ? getenv("BS_FUZZ_MODEL") : BS_FUZZ_MODEL;
    c.host = "127.0.0.1";
    c.port = 0;
    c.n_slots = 2;
    c.n_ctx = 128;
    c.n_threads = 1;
    c.queue_max = 64;
    c.body_max = 1 << 20;
    c.max_connections = 16;
    c.api_key = "fuzz-key";
    c.cors = "https://a.example, http://localhost:3000";
    c.allowed_hosts = "bitspark.lan";
    c.draft_max = BS_DRAFT_AUTO;
    c.loop = bs_loop_guard_default_params();
    bs_engine_opts_init(&c.gen);    /* the requests' sampling defaults, as serve sets them */
    c.embeddings = true;
    bs_log_level = 0;
    if (srv_start(&S, &c)) { fprintf(stderr, "fuzz_http: %s\n", bs_last_error()); abort(); }
    started = true;
}

/* The value of header `name` in the header block, as a NUL-terminated copy in buf (NULL: absent). */
static const char *header(const char *hdrs, size_t n, const char *name, char *buf, size_t cap) {
    size_t k = strlen(name);
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && hdrs[e] != '\n') e++;
        if (e - i > k && !strncasecmp(hdrs + i, name, k) && hdrs[i + k] == ':') {
            size_t b = i + k + 1;
            while (b < e && hdrs[b] == ' ') b++;
            size_t len = BS_MIN(e - b, cap - 1);
            memcpy(buf, hdrs + b, len);
            buf[len] = 0;
            if (memchr(buf, 0, len)) return NULL;   /* MHD never hands over a NUL in a value */
            return buf;
        }
        i = e + 1;
    }
    return NULL;
}

/* The framing check (duplicate Content-Length / Host, Transfer-Encoding) over every header line:
 * its answer must be 0, 400 or 501 with a message. */
static void check_framing(const char *hdrs, size_t n) {
    enum { MAX = 32 };
    char names[MAX][64], values[MAX][256];
    const char *np[MAX], *vp[MAX];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MAX;) {
        size_t e = i;
        while (e < n && hdrs[e] != '\n') e++;
        const char *colon = memchr(hdrs + i, ':', e - i);
        if (colon && !memchr(hdrs + i, 0, e - i)) {
            size_t nl = BS_MIN((size_t)(colon - hdrs) - i, sizeof names[0] - 1);
            size_t vl = BS_MIN(e - (size_t)(colon - hdrs) - 1, sizeof values[0] - 1);
            memcpy(names[k], hdrs + i, nl);
            names[k][nl] = 0;
            memcpy(values[k], colon + 1, vl);
            values[k][vl] = 0;
            np[k] = names[k];
            vp[k] = values[k];
            k++;
        }
        i = e + 1;
    }
    char msg[160] = "";
    const int st = srv_framing_check(np, vp, k, msg, sizeof msg);
    if ((st != 0 && st != 400 && st != 501) || (st && !msg[0])) { fprintf(stderr, "framing %d '%s'\n", st, msg); abort(); }
}

static void check_reply(const srv_reply *r) {
    if (r->stream || r->pending) return;
    if (r->status < 200 || r->status > 599) { fprintf(stderr, "status %d\n", r->status); abort(); }
    if (r->ctype && strncmp(r->ctype, "application/json", 16)) return;   /* the page, metrics */
    json_error_t je;
    json_t *j = json_loadb(r->body ? r->body : "", r->len, JSON_ALLOW_NUL, &je);   /* detokenize may answer a NUL escape */
    if (!j) { fprintf(stderr, "reply is not JSON: %.*s\n", (int)BS_MIN(r->len, 300), r->body); abort(); }
    if (r->status >= 400) {
        json_t *e = json_object_get(j, "error");
        if (!json_is_string(json_object_get(e, "message")) || !json_is_string(json_object_get(e, "type")) ||
            json_integer_value(json_object_get(e, "code")) != r->status) {
            fprintf(stderr, "error reply of the wrong shape: %.*s\n", (int)BS_MIN(r->len, 300), r->body);
            abort();
        }
    }
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!started) start();
    if (size < 1) return 0;
    const int sel = data[0] % (int)BS_ARRAY_LEN(ROUTES);
    const char *in = (const char *)data + 1;
    size_t n = size - 1, hn = 0;
    while (hn + 1 < n && !(in[hn] == '\n' && in[hn + 1] == '\n')) hn++;
    const char *body = in;
    size_t blen = n;
    if (hn + 1 < n) { body = in + hn + 2; blen = n - hn - 2; } else hn = 0;
    char b1[512], b2[512], b3[512];
    /* the checks the HTTP layer runs before the body (their answers must be deterministic) */
    check_framing(in, hn);
    (void)srv_host_allowed(&S, header(in, hn, "Host", b1, sizeof b1));
    const char *o = header(in, hn, "Origin", b1, sizeof b1), *co = srv_cors_origin(&S, o);
    if (co && strcmp(co, "*") && (!o || strcmp(co, o))) abort();
    /* a browser's request (an Origin --cors does not allow) is read only when declared JSON */
    const bool json = srv_json_content_type(header(in, hn, "Content-Type", b2, sizeof b2));
    if (o && !co && srv_post_type_ok(&S, header(in, hn, "Content-Type", b2, sizeof b2), o) != json) abort();
    bool auth = srv_authorized(&S, ROUTES[sel].url, header(in, hn, "Authorization", b2, sizeof b2),
                               header(in, hn, "X-Api-Key", b3, sizeof b3));
    if (auth && !strcmp(ROUTES[sel].url, "/props")) {   /* a key was accepted: it must be the key */
        const char *a = header(in, hn, "Authorization", b2, sizeof b2), *x = header(in, hn, "X-Api-Key", b3, sizeof b3);
        if (!((a && (!strcmp(a, "Bearer fuzz-key") || !strcmp(a, "fuzz-key"))) || (x && !strcmp(x, "fuzz-key")))) abort();
    }
    if (blen > (size_t)S.cfg.body_max) return 0;   /* 413 before the body is read */
    char *copy = bs_xmalloc(blen + 1);             /* exact size: ASan sees overreads */
    memcpy(copy, body, blen);
    copy[blen] = 0;
    srv_reply r = {.async = true};
    srv_handle(&S, ROUTES[sel].method, ROUTES[sel].url, copy, blen, &r);
    check_reply(&r);
    if (r.stream) {   /* the first event is ready at once; then drop the stream (cancels) */
        srv_buf out = {0};
        if (srv_stream_poll(r.stream, &out) < 0) abort();
        srv_buf_free(&out);
        srv_stream_free(r.stream);
    }
    srv_pending_free(r.pending);
    free(r.body);
    free(copy);
    return 0;
}
