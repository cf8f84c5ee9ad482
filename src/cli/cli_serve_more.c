/* cli_serve_more.c: serve's llama-server options for slots, adapters, model names, media and
 * idling (server_slots.c, server_lora.c, server_props.c, server_media.c, server_sched.c). */
#include "cli/cli.h"
#include "server/server.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_serve_more_help(void) {
    printf("llama-server's slot, adapter and model-name options:\n"
           "  --slot-save-path DIR    POST /slots/{id}?action=save|restore|erase {\"filename\"}:\n"
           "                          a slot's tokens and state as a file in DIR\n"
           "  --no-slots              GET /slots and the slot actions answer 501 (--slots: on)\n"
           "  --lora-init-without-apply  load the --lora adapters at scale 0 (POST\n"
           "                          /lora-adapters or a request's \"lora\" turn them on)\n"
           "  -a, --alias NAME[,NAME] model names in /v1/models (repeatable); the first is the id\n"
           "  --tags TAG[,TAG]        tags listed in /v1/models\n"
           "  --media-path DIR        image_url file://NAME reads DIR/NAME (nothing outside DIR)\n"
           "  --sleep-idle-seconds N  after N idle seconds free the slots' memory (KV cache and\n"
           "                          states); the next request brings it back (/props is_sleeping)\n"
           "\n");
}

/* NAME[,NAME...] appended to v (at most SRV_MAX_ALIAS); the strings stay in argv. */
static int add_list(const char *opt, char *arg, const char **v, int *n) {
    for (char *p = strtok(arg, ","); p; p = strtok(NULL, ",")) {
        if (!*p) continue;
        if (*n == SRV_MAX_ALIAS) return bs_error("%s: at most %d names", opt, SRV_MAX_ALIAS);
        v[(*n)++] = p;
    }
    return 0;
}

static int directory(const char *opt, const char *v) {
    struct stat st;
    if (stat(v, &st) || !S_ISDIR(st.st_mode)) return bs_error("%s: '%s' is not a directory", opt, v);
    return 0;
}

int cli_serve_parse_more(srv_config *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v;
    if (!strcmp(a, "--slot-save-path")) {
        if (!(v = cli_value(argc, argv, i)) || directory(a, v)) return -1;
        c->slot_save_path = v;
    } else if (!strcmp(a, "--no-slots")) {
        c->no_slots = true;
    } else if (!strcmp(a, "--slots")) {
        c->no_slots = false;
    } else if (!strcmp(a, "--lora-init-without-apply")) {
        c->lora_init_without_apply = true;
    } else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) {
        if (!(v = cli_value(argc, argv, i)) || add_list(a, argv[*i], c->aliases, &c->n_aliases)) return -1;
        if (!c->n_aliases) return bs_error("%s: no name given", a);
        c->alias = c->aliases[0];
    } else if (!strcmp(a, "--tags")) {
        if (!(v = cli_value(argc, argv, i)) || add_list(a, argv[*i], c->tags, &c->n_tags)) return -1;
    } else if (!strcmp(a, "--media-path")) {
        if (!(v = cli_value(argc, argv, i)) || directory(a, v)) return -1;
        c->media_path = v;
    } else if (!strcmp(a, "--sleep-idle-seconds")) {
        char *e;
        if (!(v = cli_value(argc, argv, i))) return -1;
        c->sleep_idle = strtod(v, &e);
        if (e == v || *e || !(c->sleep_idle >= 0 && c->sleep_idle <= 1e7))
            return bs_error("%s: seconds from 0 (never) to 10000000, got '%s'", a, v);
    } else {
        return 0;
    }
    return 1;
}
