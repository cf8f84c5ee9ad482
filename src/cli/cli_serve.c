/* cli_serve.c: `bitspark serve`: the OpenAI-compatible HTTP server (server.h). Listens at once
 * (health: loading), loads, serves until SIGTERM or SIGINT, then drains: new generation requests
 * are refused, what is in flight finishes within --drain-timeout (a second signal cuts it
 * short), and the process exits 0. */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "server/server.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cli_serve_more.c: the slot, adapter, model-name, media and idle options */
int cli_serve_apply_more(srv_config *c, const cli_arg *a);
/* cli_serve_compat.c: llama-server's LLAMA_ARG_* / LLAMA_API_KEY variables as arguments
 * (argv[0] "serve"); 0 or -1 + bs_error */
int cli_serve_env_args(char **argv, int cap, int *n, int cmd_argc, char **cmd_argv);

void help_serve(void) {
    printf("usage: bitspark serve -m MODEL [options]\n"
           "\n"
           "OpenAI-compatible HTTP server (llama-server's API): POST /v1/chat/completions,\n"
           "/v1/completions, /tokenize, /detokenize, /apply-template; GET /v1/models, /health,\n"
           "/props, /slots, /metrics, /ready, and a web chat page at /.\n"
           "\n"
           "Behind a load balancer (see deploy/README.md): GET /health answers 503\n"
           "{\"status\":\"loading\"} until the model is loaded, then 200 (liveness); GET /ready (or\n"
           "/health?ready) 200 only while new work is taken: 503 while loading, draining or with\n"
           "the queue full (readiness). A request's headers must arrive within 10 s (also the idle\n"
           "time of a kept-alive connection) and its body within 60 s of them; slower clients are\n"
           "disconnected.\n"
           "\n"
           "Browser safety (any web page the user visits can send requests to a local server):\n"
           "replies carry no CORS header, POST bodies must be 'Content-Type: application/json',\n"
           "and on a loopback address only requests for Host localhost, 127.0.0.1 or [::1]\n"
           "are answered (403 otherwise: DNS rebinding). The page at / is same-origin.\n"
           "\n"
           "The sampling options set the defaults of requests that do not give them (--lora: for\n"
           "every request). The doom-loop guard's set the server's default; a request overrides it\n"
           "with \"loop_guard\": \"off\" | \"stop\" | \"rewind\", or {\"mode\", \"min_repeats\",\n"
           "\"min_chars\", \"max_period\", \"max_rewinds\"} (each optional). Every answer reports what\n"
           "the guard did in \"loop_guard\" {mode, loops_detected, rewinds, discarded_tokens,\n"
           "stopped, span} next to \"timings\" (streams: on the finish chunk); /metrics counts\n"
           "loops, rewinds and stops. A generation the guard ends has finish_reason \"stop\".\n"
           "In rewind mode text streams out once no rewind can reach it. With -md, stop mode\n"
           "drafts as usual and a rewind request decodes without drafting.\n"
           "\n");
    cli_opts_help(CMD_SERVE);
}

/* Keys one per line (static storage: they live as long as the server): the file's lines, or a
 * comma-separated --api-key list, blanks around each dropped, empty ones skipped (llama-server
 * takes both forms). NULL + bs_error when there are too many. */
static const char *key_list(const char *what, const char *text, const char *seps) {
    static char keys[8192];
    size_t n = 0;
    for (const char *p = text; *p;) {
        size_t k = strcspn(p, seps);
        const char *q = p;
        p += k + (p[k] != 0);
        while (k && (*q == ' ' || *q == '\t')) q++, k--;
        while (k && (q[k - 1] == ' ' || q[k - 1] == '\t')) k--;
        if (!k) continue;
        if (n + k + 2 > sizeof keys) { bs_error("%s: more than %zu bytes of keys", what, sizeof keys - 2); return NULL; }
        if (n) keys[n++] = '\n';
        memcpy(keys + n, q, k);
        n += k;
    }
    keys[n] = 0;
    return keys;   /* (none at all: refused once the options are read) */
}

static const char *read_key_file(const char *path) {
    size_t n;
    char *s = bs_read_file(path, &n);
    if (!s) return NULL;
    const char *keys = strlen(s) == n ? key_list(path, s, "\r\n") : NULL;
    if (!keys && strlen(s) != n) bs_error("%s: a NUL byte in the key file", path);
    free(s);
    return keys;
}

/* Options only serve takes, into c; 0 or -1 + bs_error. */
static int apply_serve(srv_config *c, const cli_arg *a) {
    switch (a->opt->id) {
    case OPT_MMPROJ: c->mmproj = a->s; break;
    case OPT_HOST: c->host = a->s; break;
    case OPT_PORT: c->port = (int)a->n; break;
    case OPT_PARALLEL: c->n_slots = a->n < 0 ? 4 : (int)a->n; break;   /* -1: llama-server's auto, 4 */
    case OPT_QUEUE: c->queue_max = (int)a->n; break;
    case OPT_N_PREDICT: c->n_predict = a->n < 0 ? 0 : (int)a->n; break;   /* -1: the default cap */
    case OPT_BODY_LIMIT: c->body_max = a->n; break;
    case OPT_MAX_CONNECTIONS: c->max_connections = (int)a->n; break;
    case OPT_HTTP_THREADS: c->http_threads = (int)a->n; break;
    case OPT_BODY_BUDGET: c->body_budget = a->n; break;
    case OPT_IMAGE_BUDGET: c->image_budget = a->n; break;
    case OPT_API_KEY: if (!(c->api_key = key_list(a->name, a->s, ",\r\n"))) return -1; break;   /* (a line break is no key) */
    case OPT_API_KEY_FILE: if (!(c->api_key = read_key_file(a->s))) return -1; break;
    case OPT_CORS: c->cors = a->s; break;
    case OPT_ALLOWED_HOSTS: c->allowed_hosts = a->s; break;
    case OPT_SPECIAL_IN_MESSAGES: c->special_in_messages = true; break;
    case OPT_NO_WEBUI: c->no_webui = true; break;
    case OPT_REPLICA_ID:
        c->replica_id = a->s;
        for (const char *p = c->replica_id; *p; p++)   /* it goes into a header */
            if (*p < 0x21 || *p > 0x7e) return bs_error("--replica-id: printable ASCII without spaces, got '%s'", c->replica_id);
        if (!*c->replica_id) return bs_error("--replica-id: empty");
        break;
    case OPT_DRAIN_TIMEOUT: c->drain_timeout = a->f; break;
    case OPT_EMBEDDINGS: c->embeddings = true; break;
    case OPT_POOLING:
        c->pooling_last = !strcmp(a->s, "last");
        c->pooling_none = !strcmp(a->s, "none");
        break;
    case OPT_QUIET: bs_log_level = 0; break;
    case OPT_VERBOSE: bs_log_level = 2; break;
    default: return cli_serve_apply_more(c, a);
    }
    return 0;
}

static int parse(srv_config *c, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->n_slots = 1;
    c->queue_max = -1;
    c->body_max = 8L << 20;
    c->max_connections = 2048;
    c->drain_timeout = 30;
    bs_engine_opts *g = &c->gen;   /* the model, drafter and request defaults, parsed as for run */
    cli_gen_defaults(g);
    static char *env_argv[128];    /* llama-server's LLAMA_ARG_* first: the command line wins */
    int env_argc;
    if (cli_serve_env_args(env_argv, 128, &env_argc, argc, argv)) return -1;
    for (int pass = 0; pass < 2; pass++) {
        char **av = pass ? argv : env_argv;
        const int ac = pass ? argc : env_argc;
        for (int i = 1; i < ac; i++) {
            cli_arg a;
            if (cli_next(CMD_SERVE, ac, av, &i, &a)) return pass ? -1 : bs_error_prefix("from the environment: ");
            if (!a.opt) return bs_error("unexpected argument '%s'", a.s);
            int r = cli_gen_apply(g, &a);
            if (r < 0 || (!r && apply_serve(c, &a))) return pass ? -1 : bs_error_prefix("from the environment: ");
        }
    }
    cli_opts_end();
    if (cli_gen_check(g)) return -1;
    c->model = g->model;
    c->drafter = g->drafter;
    c->draft_max = g->draft_max;
    c->draft_window = g->draft_window;
    c->n_ctx = g->n_ctx;
    c->n_threads = g->n_threads;
    c->device = g->device;
    c->no_mmap = g->no_mmap;
    c->normalize_set = g->normalize_set;
    c->normalize = g->normalize;
    c->loop = g->loop;
    if (c->api_key && !*c->api_key) return bs_error("the API key is empty (--api-key / --api-key-file)");
    if (c->cors && !*c->cors) return bs_error("--cors needs an origin list or '*'");
    if (c->queue_max < 0) c->queue_max = 16 * c->n_slots;
    if (c->queue_max == 0) c->queue_max = 1;
    return 0;
}

/* srv_drain's question every ~50 ms: did another SIGTERM / SIGINT come? */
static bool second_signal(void *ud) {
    const struct timespec ts = {0, 50 * 1000000L};
    return sigtimedwait((const sigset_t *)ud, NULL, &ts) > 0;
}

int cmd_serve(int argc, char **argv) {
    srv_config cfg;
    if (parse(&cfg, argc, argv)) return cli_fail("serve");
    signal(SIGPIPE, SIG_IGN);
    /* every thread started from here on inherits the block; the main thread waits for them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    static srv s;
    if (srv_open(&s, &cfg)) { srv_stop(&s); return cli_fail("serve"); }
    /* "listening on" (what scripts wait for) once requests are served; health answers before */
    fprintf(stderr, "bitspark serve: loading %s (health: http://%s:%d/health)\n", cfg.model, cfg.host, s.port);
    if (srv_load(&s)) { srv_stop(&s); return cli_fail("serve"); }
    fprintf(stderr, "bitspark serve: listening on http://%s:%d (%d slot%s, context %d, %d threads)\n", cfg.host,
            s.port, cfg.n_slots, cfg.n_slots > 1 ? "s" : "", srv_sched_n_ctx(s.sched), cfg.n_threads);
    int sig = 0;
    sigwait(&set, &sig);   /* a signal that came while loading is pending: taken at once */
    fprintf(stderr, "bitspark serve: %s: shutting down\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    srv_drain(&s, cfg.drain_timeout, second_signal, &set);
    srv_stop(&s);
    fprintf(stderr, "bitspark serve: stopped\n");
    return 0;
}
