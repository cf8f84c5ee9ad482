/* cli_antidoom.c: `bitspark antidoom mine|eval`: the antidoom pair toolchain around a model
 * (antidoom.md): mine FTPO preference pairs from loops, measure chosen-win and loop rates. */
#include "tools/antidoom.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_mine(ad_mine_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->g.sp.temp = 0;
    o->n_predict = 512;
    o->prime_tokens = 24;
    o->prime_copies = 3;
    o->ch = ad_chosen_defaults();
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_AD_MINE, argc, argv, &i, &a)) return -1;
        if (!a.opt) return bs_error("unexpected argument '%s'", a.s);
        int r = cli_gen_apply(&o->g, &a);
        if (r < 0) return -1;
        if (r > 0) continue;
        switch (a.opt->id) {
        case OPT_PROMPTS: o->prompts = a.s; break;
        case OPT_OUTPUT: o->out = a.s; break;
        case OPT_PRIMES_OUT: o->primes_out = a.s; break;
        case OPT_GENERATE_PRIMES: o->generate_primes = true; break;
        case OPT_CHOSEN_REQUIRE_ALNUM: o->ch.require_alnum = true; break;
        case OPT_CHOSEN_MIN_P: o->ch.min_p = (float)a.f; break;
        case OPT_N_PREDICT: o->n_predict = (int)a.n; break;
        case OPT_PRIME_TOKENS: o->prime_tokens = (int)a.n; break;
        case OPT_PRIME_COPIES: o->prime_copies = (int)a.n; break;
        case OPT_CHOSEN_TOP_K: o->ch.top_k = (int)a.n; break;
        case OPT_CHOSEN_MAX: o->ch.max_n = (int)a.n; break;
        case OPT_CHOSEN_MIN_CHARS: o->ch.min_chars = (int)a.n; break;
        default: return bs_error("%s: not handled by antidoom mine", a.name);
        }
    }
    cli_opts_end();
    if (cli_gen_check(&o->g)) return -1;
    if (!o->prompts) return bs_error("no prompts given (--prompts FILE)");
    if (!o->out) return bs_error("no output given (-o FILE)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;   /* mining drives its own guard */
    return 0;
}

static int parse_temps(ad_eval_opts *o, const char *v) {
    o->n_temps = 0;
    for (const char *p = v; *p;) {
        char *end;
        double t = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(t >= 0 && t <= 100))
            return bs_error("--temps: expected numbers like 0,0.3,0.7, got '%s'", v);
        if (o->n_temps == AD_MAX_TEMPS) return bs_error("--temps: at most %d", AD_MAX_TEMPS);
        o->temps[o->n_temps++] = (float)t;
        p = *end ? end + 1 : end;
    }
    return o->n_temps ? 0 : bs_error("--temps: empty list");
}

static int parse_eval(ad_eval_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->g.sp.seed = 0;
    o->g.seed_set = true;
    o->n_predict = 256;
    parse_temps(o, "0,0.3,0.7");
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_AD_EVAL, argc, argv, &i, &a)) return -1;
        if (!a.opt) return bs_error("unexpected argument '%s'", a.s);
        int r = cli_gen_apply(&o->g, &a);
        if (r < 0) return -1;
        if (r > 0) continue;
        switch (a.opt->id) {
        case OPT_PAIRS: o->pairs = a.s; break;
        case OPT_PROMPTS: o->prompts = a.s; break;
        case OPT_JSON: o->json = true; break;
        case OPT_LOOP_RATE: o->loop_rate = true; break;
        case OPT_TEMPS: if (parse_temps(o, a.s)) return -1; break;
        case OPT_N_PREDICT: o->n_predict = (int)a.n; break;
        default: return bs_error("%s: not handled by antidoom eval", a.name);
        }
    }
    cli_opts_end();
    if (cli_gen_check(&o->g)) return -1;
    if (o->loop_rate ? !o->prompts : !o->pairs)
        return bs_error(o->loop_rate ? "--loop-rate needs --prompts FILE" : "give --pairs FILE (or --loop-rate)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;
    return 0;
}


void help_antidoom(void) {
    printf("usage: bitspark antidoom mine -m MODEL --prompts FILE -o PAIRS.jsonl [options]\n"
           "       bitspark antidoom eval -m MODEL --pairs PAIRS.jsonl [--json]\n"
           "       bitspark antidoom eval -m MODEL --loop-rate --prompts FILE [--temps 0,0.3,0.7]\n\n");
    printf("(antidoom mine: default --temp 0, greedy)\n\n");
    cli_opts_help(CMD_AD_MINE | CMD_AD_EVAL);
}

int cmd_antidoom(int argc, char **argv) {
    if (argc < 2) {
        bs_error("expected a subcommand: mine or eval (see bitspark help antidoom)");
        return cli_fail("antidoom");
    }
    if (!strcmp(argv[1], "mine")) {
        ad_mine_opts o;
        memset(&o, 0, sizeof o);
        if (parse_mine(&o, argc - 1, argv + 1) || ad_mine(&o)) return cli_fail("antidoom mine");
        return 0;
    }
    if (!strcmp(argv[1], "eval")) {
        ad_eval_opts o;
        memset(&o, 0, sizeof o);
        if (parse_eval(&o, argc - 1, argv + 1) || ad_eval(&o)) return cli_fail("antidoom eval");
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        help_antidoom();
        return 0;
    }
    bs_error("unknown subcommand '%s' (mine or eval)", argv[1]);
    return cli_fail("antidoom");
}
