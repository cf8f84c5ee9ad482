/* cli_antidoom.c: `bitspark antidoom mine|eval`: the antidoom pair toolchain around a model
 * (antidoom.md): mine FTPO preference pairs from loops, measure chosen-win and loop rates. */
#include "tools/antidoom.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mine_help(void) {
    printf("antidoom mine: one pair per prompt whose completion falls into a loop\n"
           "  --prompts FILE          one prompt per line (raw text, a JSON string, or a JSON object\n"
           "                          with \"prompt\"/\"text\"/\"context\"/\"conversations\")\n"
           "  -o FILE                 pairs as JSON lines (antidoom's format + the ids used)\n"
           "  -n N                    max tokens per completion (512)\n"
           "  --generate-primes       first turn each prompt into a priming context: the prompt,\n"
           "                          then its own greedy continuation cut at a sentence end,\n"
           "                          repeated --prime-copies times\n"
           "  --prime-tokens N        tokens generated for the primed phrase (24)\n"
           "  --prime-copies K        copies of the phrase in the priming context (3)\n"
           "  --primes-out FILE       also write the priming contexts as JSON lines\n"
           "  --chosen-top-k K        candidates from the top of the distribution (20)\n"
           "  --chosen-min-p P        floor relative to the best remaining candidate (0.01)\n"
           "  --chosen-max N          chosen tokens per pair (20)\n"
           "  --chosen-min-chars N    min stripped decoded length (1)\n"
           "  --chosen-require-alnum  chosen text must contain a letter or digit\n"
           "  --loop-min-repeats R, --loop-min-chars C, --loop-max-period P   the detector\n"
           "  sampling and model options as for `run` (default here: --temp 0, greedy)\n");
}

static int parse_mine(ad_mine_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->g.sp.temp = 0;
    o->n_predict = 512;
    o->prime_tokens = 24;
    o->prime_copies = 3;
    o->ch = ad_chosen_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_gen_parse(&o->g, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        long x;
        double f;
        if (!strcmp(a, "--prompts")) {
            if (!(o->prompts = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!(o->out = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--primes-out")) {
            if (!(o->primes_out = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--generate-primes")) {
            o->generate_primes = true;
        } else if (!strcmp(a, "--chosen-require-alnum")) {
            o->ch.require_alnum = true;
        } else if (!strcmp(a, "--chosen-min-p")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_float(a, v, &f)) return -1;
            if (!(f >= 0 && f <= 1)) return bs_error("%s: expected a value in [0, 1]", a);
            o->ch.min_p = (float)f;
        } else {
            static const char *names[] = {"-n", "--prime-tokens", "--prime-copies", "--chosen-top-k",
                                          "--chosen-max", "--chosen-min-chars"};
            int *dst[] = {&o->n_predict, &o->prime_tokens, &o->prime_copies, &o->ch.top_k, &o->ch.max_n,
                          &o->ch.min_chars};
            size_t k = 0;
            while (k < BS_ARRAY_LEN(names) && strcmp(a, names[k])) k++;
            if (k == BS_ARRAY_LEN(names)) return bs_error("unknown option '%s' (see bitspark help antidoom)", a);
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, k == 5 ? 0 : 1, 1 << 20, &x)) return -1;
            *dst[k] = (int)x;
        }
    }
    if (!o->g.model) return bs_error("no model given (-m FILE)");
    if (!o->prompts) return bs_error("no prompts given (--prompts FILE)");
    if (!o->out) return bs_error("no output given (-o FILE)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;   /* mining drives its own guard */
    return 0;
}

static void eval_help(void) {
    printf("antidoom eval --pairs FILE: chosen-win per pair and the mean\n"
           "  --pairs FILE            pairs as antidoom writes them (tokens as raw vocabulary strings;\n"
           "                          context_ids/rejected_id/chosen_ids are used when present)\n"
           "  --json                  print {\"pairs\": [{\"chosen_win\": x, ...}], \"chosen_win\": mean}\n"
           "antidoom eval --loop-rate --prompts FILE: share of completions that fall into a loop\n"
           "  --temps T,T,...         temperatures (0,0.3,0.7); 0 is greedy\n"
           "  -n N                    max tokens per completion (256)\n"
           "  --seed S                completion i at each temperature uses seed S + i (0)\n"
           "  --loop-min-repeats R, --loop-min-chars C, --loop-max-period P   the detector\n"
           "  model and sampling options as for `run`\n");
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
        const char *a = argv[i], *v;
        int r = cli_gen_parse(&o->g, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        long x;
        if (!strcmp(a, "--pairs")) {
            if (!(o->pairs = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--prompts")) {
            if (!(o->prompts = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--loop-rate")) {
            o->loop_rate = true;
        } else if (!strcmp(a, "--temps")) {
            if (!(v = cli_value(argc, argv, &i)) || parse_temps(o, v)) return -1;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1 << 24, &x)) return -1;
            o->n_predict = (int)x;
        } else {
            return bs_error("unknown option '%s' (see bitspark help antidoom)", a);
        }
    }
    if (!o->g.model) return bs_error("no model given (-m FILE)");
    if (o->loop_rate ? !o->prompts : !o->pairs)
        return bs_error(o->loop_rate ? "--loop-rate needs --prompts FILE" : "give --pairs FILE (or --loop-rate)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;
    return 0;
}


void help_antidoom(void) {
    printf("usage: bitspark antidoom mine -m MODEL --prompts FILE -o PAIRS.jsonl [options]\n"
           "       bitspark antidoom eval -m MODEL --pairs PAIRS.jsonl [--json]\n"
           "       bitspark antidoom eval -m MODEL --loop-rate --prompts FILE [--temps 0,0.3,0.7]\n\n");
    mine_help();
    printf("\n");
    eval_help();
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
