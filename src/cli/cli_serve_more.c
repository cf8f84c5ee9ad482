/* cli_serve_more.c: serve's llama-server options for slots, adapters, model names, media and
 * idling (server_slots.c, server_lora.c, server_props.c, server_media.c, server_sched.c). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "server/server.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int cli_serve_apply_compat(srv_config *c, const cli_arg *a);   /* cli_serve_compat.c */

/* serve's options for slots, adapters, model names, media and idling; 0 or -1 + bs_error. */
int cli_serve_apply_more(srv_config *c, const cli_arg *a) {
    switch (a->opt->id) {
    case OPT_SLOT_SAVE_PATH:
        if (directory(a->name, a->s)) return -1;
        c->slot_save_path = a->s;
        break;
    case OPT_NO_SLOTS: c->no_slots = true; break;
    case OPT_SLOTS: c->no_slots = false; break;
    case OPT_LORA_INIT_WITHOUT_APPLY: c->lora_init_without_apply = true; break;
    case OPT_ALIAS:
        if (add_list(a->name, (char *)a->s, c->aliases, &c->n_aliases)) return -1;
        if (!c->n_aliases) return bs_error("%s: no name given", a->name);
        c->alias = c->aliases[0];
        break;
    case OPT_TAGS: return add_list(a->name, (char *)a->s, c->tags, &c->n_tags);
    case OPT_MEDIA_PATH:
        if (directory(a->name, a->s)) return -1;
        c->media_path = a->s;
        break;
    case OPT_SLEEP_IDLE: c->sleep_idle = a->f; break;
    default: return cli_serve_apply_compat(c, a);
    }
    return 0;
}
