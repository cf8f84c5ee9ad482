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

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -ngl N|auto|all: no partial offload here, so 0 keeps everything on the CPU and any other
 * count puts every layer on the device --device picks. */
static int gpu_layers(srv_config *c, const cli_arg *a) {
    char *end;
    const long n = strtol(a->s, &end, 10);
    if (!strcmp(a->s, "auto") || !strcmp(a->s, "all")) return 0;
    if (end == a->s || *end || n < 0) return bs_error("%s: expected a layer count, auto or all, got '%s'", a->name, a->s);
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
    case OPT_REASONING_BUDGET: c->thinking = a->n == 0 ? -1 : 0; break;
    case OPT_REASONING_FORMAT:
        c->reasoning_format = !strcmp(a->s, "none") ? 1 : !strcmp(a->s, "deepseek-legacy") ? 2 : 0;
        break;
    case OPT_TEMPLATE_KWARGS: return template_kwargs(c, a);
    case OPT_HTTP_TIMEOUT: c->http_timeout = (int)a->n; break;
    case OPT_NO_CONTEXT_SHIFT: c->gen.context_shift = false; break;
    case OPT_VERBOSITY: bs_log_level = a->n <= 1 ? 0 : a->n >= 4 ? 2 : 1; break;
    case OPT_LOG_DISABLE: bs_log_level = 0; break;
    case OPT_COMPAT_NOOP: bs_log(1, "bitspark serve: %s: %s\n", a->name, a->opt->help); break;
    default: return bs_error("%s: not handled by serve", a->name);
    }
    return 0;
}
