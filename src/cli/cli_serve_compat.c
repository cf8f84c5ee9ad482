/* cli_serve_compat.c: llama-server's options that a deployment passes out of habit, taken so
 * that its command line starts this server too: those with a meaning here are mapped to it
 * (-ngl 0 is the CPU, --reasoning-budget 0 and --chat-template-kwargs set requests' thinking
 * default, --reasoning-format their reasoning_format, -to the idle-connection timeout, the log
 * levels); those without one are accepted with a line saying so. Those that ask for something
 * this server does not do (another chat template, TLS, downloads, static files) are refused
 * with the reason (cli_opts_table.c's cli_refused_opts), never silently dropped. */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "server/server.h"
#include "io/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* -ngl N|auto|all: no partial offload here, so 0 keeps everything on the CPU and any other
 * count puts every layer on the device --device picks. */
static int gpu_layers(srv_config *c, const cli_arg *a) {
    char *end;
    const long n = strtol(a->s, &end, 10);
    if (!strcmp(a->s, "auto") || !strcmp(a->s, "all")) return 0;
    if (end == a->s || *end || n < -1) return bs_error("%s: expected a layer count, auto or all, got '%s'", a->name, a->s);
    if (n == 0) c->gen.device = "cpu";
    return 0;
}

/* --chat-template-kwargs JSON: the templates here read enable_thinking; other keys are said to
 * do nothing. */
static int template_kwargs(srv_config *c, const cli_arg *a) {
    json_error_t je;
    json_t *j = json_loads(a->s, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return bs_error("%s: a JSON object, e.g. '{\"enable_thinking\": false}'", a->name);
    }
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(j, k, v) {
        if (strcmp(k, "enable_thinking")) {
            bs_log(1, "bitspark serve: %s: '%s' does nothing here (the templates read enable_thinking)\n", a->name, k);
        } else if (!json_is_boolean(v)) {
            rc = bs_error("%s: enable_thinking must be true or false", a->name);
        } else {
            c->thinking = json_is_true(v) ? 1 : -1;
        }
    }
    json_decref(j);
    return rc;
}

int cli_serve_apply_compat(srv_config *c, const cli_arg *a) {
    switch (a->opt->id) {
    case OPT_NGL: return gpu_layers(c, a);
    case OPT_REASONING_BUDGET:   /* 0: off; a budget is not enforced here (max_tokens bounds the answer) */
        c->thinking = a->n == 0 ? -1 : 0;
        if (a->n > 0) bs_log(1, "bitspark serve: %s %ld: thinking is not cut at a budget here\n", a->name, a->n);
        break;
    case OPT_REASONING_FORMAT:
        c->reasoning_format = !strcmp(a->s, "none") ? 1 : !strcmp(a->s, "deepseek-legacy") ? 2 : 0;
        break;
    case OPT_TEMPLATE_KWARGS: return template_kwargs(c, a);
    case OPT_HTTP_TIMEOUT: c->http_timeout = (int)a->n; break;
    case OPT_NO_CONTEXT_SHIFT: c->gen.context_shift = false; break;
    case OPT_VERBOSITY: bs_log_level = a->n <= 1 ? 0 : a->n >= 4 ? 2 : 1; break;
    case OPT_LOG_DISABLE: bs_log_level = 0; break;
    case OPT_REASONING: c->thinking = !strcmp(a->s, "on") ? 1 : !strcmp(a->s, "off") ? -1 : 0; break;
    case OPT_SAMPLERS: {   /* names (--samplers) or letters (--sampling-seq), by the option's name */
        char order[16];
        c->samplers = a->s;
        return cli_parse_samplers(a->name, a->s, order, &c->samplers_letters);
    }
    case OPT_EMBD_NORMALIZE: c->embd_normalize = (int)a->n + 1; break;
    case OPT_LOG_FILE: {   /* opened first: a path that fails leaves stderr to say so */
        FILE *f = fopen(a->s, "a");
        if (!f) return bs_error("%s: cannot open '%s' for appending: %s", a->name, a->s, strerror(errno));
        fflush(stderr);
        const int rc = dup2(fileno(f), STDERR_FILENO);
        fclose(f);
        if (rc < 0) return bs_error("%s: %s", a->name, strerror(errno));
        setvbuf(stderr, NULL, _IOLBF, 0);
        break;
    }
    case OPT_COMPAT_NOOP: bs_log(1, "bitspark serve: %s: %s\n", a->name, a->opt->help); break;
    default: return bs_error("%s: not handled by serve", a->name);
    }
    return 0;
}

/* llama-server's environment variables (LLAMA_ARG_*, LLAMA_API_KEY: its Docker images are set up
 * by them) as the options they stand for, taken before the command line so that an option given
 * there wins. A flag's variable turns it on with 1 / true / on / enabled and is left out with
 * 0 / false / off / disabled. */
enum { VAL, FLAG, NOT };   /* the variable is the option's value / turns the flag on / turns it on when false */
static const struct { const char *env, *opt; int kind; } env_opts[] = {
    {"LLAMA_ARG_MODEL", "-m", VAL}, {"LLAMA_ARG_MODEL_DRAFT", "-md", VAL}, {"LLAMA_ARG_MMPROJ", "--mmproj", VAL},
    {"LLAMA_ARG_CTX_SIZE", "-c", VAL}, {"LLAMA_ARG_N_PARALLEL", "-np", VAL}, {"LLAMA_ARG_THREADS", "-t", VAL},
    {"LLAMA_ARG_N_PREDICT", "-n", VAL}, {"LLAMA_ARG_HOST", "--host", VAL}, {"LLAMA_ARG_PORT", "--port", VAL},
    {"LLAMA_API_KEY", "--api-key", VAL}, {"LLAMA_ARG_API_KEY", "--api-key", VAL},
    {"LLAMA_ARG_API_KEY_FILE", "--api-key-file", VAL}, {"LLAMA_ARG_ALIAS", "-a", VAL},
    {"LLAMA_ARG_EMBEDDINGS", "--embeddings", FLAG}, {"LLAMA_ARG_POOLING", "--pooling", VAL},
    {"LLAMA_ARG_N_GPU_LAYERS", "-ngl", VAL}, {"LLAMA_ARG_DEVICE", "-dev", VAL},
    {"LLAMA_ARG_DRAFT_MAX", "--draft-max", VAL}, {"LLAMA_ARG_SLOT_SAVE_PATH", "--slot-save-path", VAL},
    {"LLAMA_ARG_TIMEOUT", "-to", VAL}, {"LLAMA_ARG_THREADS_HTTP", "--threads-http", VAL},
    {"LLAMA_ARG_NO_WEBUI", "--no-webui", FLAG}, {"LLAMA_ARG_NO_MMAP", "--no-mmap", FLAG},
    {"LLAMA_ARG_CONTEXT_SHIFT", "--context-shift", FLAG}, {"LLAMA_ARG_THINK_BUDGET", "--reasoning-budget", VAL},
    {"LLAMA_ARG_REASONING_BUDGET", "--reasoning-budget", VAL}, {"LLAMA_ARG_REASONING", "--reasoning", VAL},
    {"LLAMA_ARG_MMAP", "--no-mmap", NOT}, {"LLAMA_ARG_WEBUI", "--no-webui", NOT}, {"LLAMA_ARG_UI", "--no-webui", NOT},
    {"LLAMA_ARG_THINK", "--reasoning-format", VAL}, {"LLAMA_ARG_CHAT_TEMPLATE_KWARGS", "--chat-template-kwargs", VAL},
    {"LLAMA_ARG_FLASH_ATTN", "-fa", VAL}, {"LLAMA_ARG_CACHE_TYPE_K", "-ctk", VAL},
    {"LLAMA_ARG_CACHE_TYPE_V", "-ctv", VAL}, {"LLAMA_ARG_BATCH", "-b", VAL}, {"LLAMA_ARG_UBATCH", "-ub", VAL},
    {"LLAMA_ARG_CONT_BATCHING", "-cb", FLAG}, {"LLAMA_ARG_JINJA", "--jinja", FLAG}, {"LLAMA_ARG_MLOCK", "--mlock", FLAG},
    {"LLAMA_ARG_ENDPOINT_METRICS", "--metrics", FLAG}, {"LLAMA_ARG_ENDPOINT_SLOTS", "--slots", FLAG},
    {"LLAMA_ARG_ENDPOINT_PROPS", "--props", FLAG}, {"LLAMA_ARG_HF_REPO", "-hf", VAL},
    {"LLAMA_ARG_CHAT_TEMPLATE", "--chat-template", VAL}, {"LLAMA_ARG_SSL_KEY_FILE", "--ssl-key-file", VAL},
};

static int truth(const char *env, const char *v, bool *on) {
    static const char *const yes[] = {"1", "true", "on", "enabled"}, *const no[] = {"0", "false", "off", "disabled"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcmp(v, yes[i])) { *on = true; return 0; }
        if (!strcmp(v, no[i])) { *on = false; return 0; }
    }
    return bs_error("%s=%s: expected 1/true/on or 0/false/off", env, v);
}

/* Whether the command line (argv[1..argc)) gives the option spelled `spelling` (any spelling of
 * it; a value that looks like an option only errs toward the command line). */
static bool cli_given(const char *spelling, int argc, char **argv) {
    const cli_opt *want = cli_find(CMD_SERVE, spelling);
    for (int k = 1; want && k < argc; k++) {
        const cli_opt *o = argv[k][0] == '-' ? cli_find(CMD_SERVE, argv[k]) : NULL;
        if (o && o->id == want->id) return true;
    }
    return false;
}

int cli_serve_env_args(char **argv, int cap, int *n, int cmd_argc, char **cmd_argv) {
    *n = 0;
    argv[(*n)++] = (char *)"serve";
    for (size_t i = 0; i < sizeof env_opts / sizeof env_opts[0]; i++) {
        const char *v = getenv(env_opts[i].env);
        if (!v || !*v) continue;
        bool on = true;
        if (env_opts[i].kind != VAL && truth(env_opts[i].env, v, &on)) return -1;
        if (env_opts[i].kind == NOT) on = !on;   /* LLAMA_ARG_MMAP=false: --no-mmap */
        if (!on || cli_given(env_opts[i].opt, cmd_argc, cmd_argv)) continue;   /* the command line wins */
        if (*n + 2 > cap) return bs_error("too many LLAMA_ARG_* variables");
        argv[(*n)++] = (char *)env_opts[i].opt;
        if (env_opts[i].kind == VAL) argv[(*n)++] = (char *)v;
        bs_log(2, "bitspark serve: %s from the environment (%s)\n", env_opts[i].opt, env_opts[i].env);
    }
    return 0;
}
