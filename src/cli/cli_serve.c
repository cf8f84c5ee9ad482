/* cli_serve.c: `bitspark serve`: the OpenAI-compatible HTTP server (server.h). Listens at once
 * (health: loading), loads, serves until SIGTERM or SIGINT, then drains: new generation requests
 * are refused, what is in flight finishes within --drain-timeout (a second signal cuts it
 * short), and the process exits 0. */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "server/server.h"
#include "dspark/spec_depth.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cli_serve_more.c */
void cli_serve_more_help(void);
int cli_serve_parse_more(srv_config *c, int argc, char **argv, int *i);

void help_serve(void) {
    printf("usage: bitspark serve -m MODEL [options]\n"
           "\n"
           "OpenAI-compatible HTTP server (llama-server's API): POST /v1/chat/completions,\n"
           "/v1/completions, /tokenize, /detokenize, /apply-template; GET /v1/models, /health,\n"
           "/props, /slots, /metrics, /ready, and a web chat page at /.\n"
           "\n"
           "  -m, --model FILE        qwen35 GGUF\n"
           "  -md, --model-draft FILE DSpark drafter: speculative decoding (temperature 0 output\n"
           "                          is unchanged); a request's \"draft_max\": 0 turns it off\n"
           "  --draft-max N|auto      drafts verified per round (auto: chosen per round from the\n"
           "                          costs measured once per machine, with the batch in mind)\n"
           "  --draft-window N        the drafter attends to its last N context rows (0: all)\n"
           "  --mmproj FILE           vision projector (mmproj GGUF): chat messages may hold\n"
           "                          image_url parts (data: URLs); /props says modalities.vision\n"
           "  --host ADDR             address to listen on (127.0.0.1)\n"
           "  --port N                port, 0 = any free one (8080)\n"
           "  -np, --parallel N       slots: requests generated at the same time, their decode\n"
           "                          steps batched into one pass through the weights (1)\n"
           "  -c, --ctx N             context per slot in tokens (4096, capped by the model)\n"
           "  -t, --threads N         threads (all cores)\n"
           "  --queue N               requests that may wait for a slot; more get 503 (16 x slots)\n"
           "  -n, --n-predict N       tokens one request may generate at most, whatever its\n"
           "                          max_tokens (-1 and ignore_eos too); /props reports it (32768)\n"
           "  --api-key KEY           require 'Authorization: Bearer KEY' (not for /health and /)\n"
           "  --api-key-file FILE     the same with the key read from FILE (first line; the key\n"
           "                          then does not show in the process list)\n"
           "  --alias NAME            model id reported by /v1/models (the file name)\n"
           "  --body-limit BYTES      largest request body; more is 413 (8 MiB)\n"
           "  --max-connections N     simultaneous connections (2048); connections cost a socket,\n"
           "                          not a thread: a few HTTP threads serve them all\n"
           "  --http-threads N        HTTP worker threads (4)\n"
           "  --body-budget BYTES     request bodies being received at once, in total; more wait\n"
           "                          (--body-limit + 1 MiB)\n"
           "  --image-budget BYTES    preprocessed image pixels that requests not yet in a slot\n"
           "                          may hold, in total; an image past it is 503 (512 MiB)\n"
           "  A request's headers must arrive within 10 s (also the idle time of a kept-alive\n"
           "  connection) and its body within 60 s of them; slower clients are disconnected.\n"
           "  --no-webui              no chat page at /\n"
           "\n"
           "Behind a load balancer (see deploy/README.md):\n"
           "  GET /health answers 503 {\"status\":\"loading\"} until the model is loaded, then 200\n"
           "  (liveness); GET /ready (or /health?ready) 200 only while new work is taken: 503\n"
           "  while loading, draining or with the queue full (readiness).\n"
           "  --replica-id NAME       name this replica in an X-Replica-Id header on every answer\n"
           "  --drain-timeout S       after SIGTERM/SIGINT: refuse new generation requests (503,\n"
           "                          Retry-After), let in-flight ones finish for at most S seconds\n"
           "                          (30), then cancel the rest (streams end with finish_reason\n"
           "                          \"shutdown\", waiting answers get 503) and exit 0; a second\n"
           "                          signal cancels at once\n"
           "  --embeddings            serve POST /v1/embeddings (the last layer after the final norm,\n"
           "                          pooled and L2-normalized)\n"
           "  --pooling mean|last|none  how embeddings pool the tokens (mean; none: a vector per token)\n"
           "\n"
           "Browser safety (any web page the user visits can send requests to a local server):\n"
           "  replies carry no CORS header, POST bodies must be 'Content-Type: application/json',\n"
           "  and on a loopback address only requests for Host localhost, 127.0.0.1 or [::1]\n"
           "  are answered (403 otherwise: DNS rebinding). The page at / is same-origin.\n"
           "  --cors ORIGIN[,...]     let these origins (or '*': any) call the API from a page\n"
           "  --allowed-hosts H[,...] more Host names to answer (e.g. a name for this machine)\n"
           "  --special-in-messages   tokenize control tokens typed in message content as control\n"
           "                          tokens (default: as plain text; the template's own\n"
           "                          <|im_start|> ... stay special)\n"
           "  --no-mmap               read the model into memory\n"
           "  --device D              auto (default), cpu, vulkan or vulkan:N ('bitspark devices')\n"
           CLI_NORMALIZE_HELP
           "  -v, --verbose           more logging\n"
           "\n");
    cli_serve_more_help();
    cli_gen_context_help();
    cli_gen_sampling_help();
    printf("  These set the defaults of requests that do not give them (--lora: for every request).\n"
           "\n");
    cli_gen_guard_help();
    printf("  These set the server's default. A request overrides it with \"loop_guard\":\n"
           "  \"off\" | \"stop\" | \"rewind\", or {\"mode\", \"min_repeats\", \"min_chars\",\n"
           "  \"max_period\", \"max_rewinds\"} (each optional). Every answer reports what the\n"
           "  guard did in \"loop_guard\" {mode, loops_detected, rewinds, discarded_tokens,\n"
           "  stopped, span} next to \"timings\" (streams: on the finish chunk); /metrics counts\n"
           "  loops, rewinds and stops. A generation the guard ends has finish_reason \"stop\".\n"
           "  In rewind mode text streams out once no rewind can reach it. With -md, stop mode\n"
           "  drafts as usual and a rewind request decodes without drafting.\n");
}

/* --loop-guard and the --loop-* thresholds: the same options (and parser) as run and chat. */
static int parse_loop_guard(srv_config *c, int argc, char **argv, int *i) {
    bs_engine_opts o;
    bs_engine_opts_init(&o);
    o.loop = c->loop;
    int rc = cli_gen_guard_parse(&o, argc, argv, i);
    if (rc == 1) c->loop = o.loop;
    return rc;
}

/* The key file's first line, without the line end and surrounding blanks (static storage:
 * the key lives as long as the server). NULL + bs_error when unreadable. */
static const char *read_key_file(const char *path) {
    static char key[1024];
    size_t n;
    char *s = bs_read_file(path, &n);
    if (!s) return NULL;
    const char *p = s;
    while (*p == ' ' || *p == '\t') p++;
    size_t k = strcspn(p, "\r\n");
    while (k && (p[k - 1] == ' ' || p[k - 1] == '\t')) k--;
    if (k >= sizeof key) { free(s); bs_error("%s: the key is longer than %zu bytes", path, sizeof key - 1); return NULL; }
    memcpy(key, p, k);
    key[k] = 0;
    free(s);
    return key;
}

static int parse(srv_config *c, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->n_slots = 1;
    c->queue_max = -1;
    c->body_max = 8L << 20;
    c->max_connections = 2048;
    c->draft_max = BS_DRAFT_AUTO;
    bs_engine_opts_init(&c->gen);
    c->n_threads = bs_cpu_count();
    c->loop = bs_loop_guard_default_params();
    c->drain_timeout = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        int lg = parse_loop_guard(c, argc, argv, &i);
        if (lg < 0) return -1;
        if (lg) continue;
        int more = cli_serve_parse_more(c, argc, argv, &i);
        if (more < 0) return -1;
        if (more) continue;
        int sg = cli_gen_parse_sampling(&c->gen, argc, argv, &i);
        if (!sg) sg = cli_gen_parse_context(&c->gen, argc, argv, &i);
        if (sg < 0) return -1;
        if (sg) continue;
#define INT_OPT(lo, hi, dst) do { if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, lo, hi, &x)) return -1; dst = x; } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(c->model = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) { if (!(c->drafter = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--mmproj")) { if (!(c->mmproj = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft")) {
            if (!(v = cli_value(argc, argv, &i))) return -1;
            if (!strcmp(v, "auto")) c->draft_max = BS_DRAFT_AUTO;
            else if (cli_parse_int(a, v, 0, BS_DEPTH_MAX, &x)) return -1;
            else c->draft_max = (int)x;
        }
        else if (!strcmp(a, "--draft-window")) INT_OPT(0, 1 << 24, c->draft_window);
        else if (!strcmp(a, "--host")) { if (!(c->host = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--port")) INT_OPT(0, 65535, c->port);
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) INT_OPT(1, 256, c->n_slots);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) INT_OPT(16, 1 << 24, c->n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT_OPT(1, 512, c->n_threads);
        else if (!strcmp(a, "--queue")) INT_OPT(0, 1 << 20, c->queue_max);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) INT_OPT(1, 1 << 30, c->n_predict);
        else if (!strcmp(a, "--body-limit")) INT_OPT(1024, 1L << 32, c->body_max);
        else if (!strcmp(a, "--max-connections")) INT_OPT(4, 65536, c->max_connections);
        else if (!strcmp(a, "--http-threads")) INT_OPT(1, 64, c->http_threads);
        else if (!strcmp(a, "--body-budget")) INT_OPT(1024, 1L << 40, c->body_budget);
        else if (!strcmp(a, "--image-budget")) INT_OPT(1L << 20, 1L << 40, c->image_budget);
        else if (!strcmp(a, "--api-key")) { if (!(c->api_key = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--api-key-file")) {
            if (!(v = cli_value(argc, argv, &i)) || !(c->api_key = read_key_file(v))) return -1;
        }
        else if (!strcmp(a, "--cors")) { if (!(c->cors = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--allowed-hosts")) { if (!(c->allowed_hosts = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--special-in-messages")) c->special_in_messages = true;
        else if (!strcmp(a, "--alias")) { if (!(c->alias = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "--no-webui")) c->no_webui = true;
        else if (!strcmp(a, "--replica-id")) {
            if (!(c->replica_id = cli_value(argc, argv, &i))) return -1;
            for (const char *p = c->replica_id; *p; p++)   /* it goes into a header */
                if (*p < 0x21 || *p > 0x7e) return bs_error("--replica-id: printable ASCII without spaces, got '%s'", c->replica_id);
            if (!*c->replica_id) return bs_error("--replica-id: empty");
        }
        else if (!strcmp(a, "--drain-timeout")) {
            if (!(v = cli_value(argc, argv, &i))) return -1;
            char *e;
            c->drain_timeout = strtod(v, &e);
            if (e == v || *e || !(c->drain_timeout >= 0 && c->drain_timeout <= 86400))
                return bs_error("--drain-timeout: seconds from 0 to 86400, got '%s'", v);
        }
        else if (!strcmp(a, "--embeddings")) c->embeddings = true;
        else if (!strcmp(a, "--pooling")) {
            if (!(v = cli_value(argc, argv, &i))) return -1;
            if (strcmp(v, "mean") && strcmp(v, "last") && strcmp(v, "none"))
                return bs_error("--pooling: mean, last or none, got '%s'", v);
            c->pooling_last = !strcmp(v, "last");
            c->pooling_none = !strcmp(v, "none");
        }
        else if (!strcmp(a, "--no-mmap")) c->no_mmap = true;
        else if (!strcmp(a, "--tokenizer-normalize")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_normalize(v, &c->normalize_set, &c->normalize)) return -1;
        }
        else if (!strcmp(a, "--device")) { if (!(c->device = cli_value(argc, argv, &i))) return -1; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) bs_log_level = 2;
        else return bs_error("unknown option '%s' (see bitspark help serve)", a);
#undef INT_OPT
    }
    if (!c->model) return bs_error("no model given (-m FILE)");
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
