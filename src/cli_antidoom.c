/* cli_antidoom.c: `bitspark antidoom mine|eval`: the antidoom pair toolchain around a model
 * (antidoom.md): mine FTPO preference pairs from loops, measure chosen-win and loop rates. */
#include "antidoom.h"
#include "cli.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

void help_antidoom(void) {
    printf("usage: bitspark antidoom mine -m MODEL --prompts FILE -o PAIRS.jsonl [options]\n"
           "       bitspark antidoom eval -m MODEL --pairs PAIRS.jsonl [--json]\n"
           "       bitspark antidoom eval -m MODEL --loop-rate --prompts FILE [--temps 0,0.3,0.7]\n\n");
    ad_mine_help();
    printf("\n");
    ad_eval_help();
}

int cmd_antidoom(int argc, char **argv) {
    if (argc < 2) {
        bs_error("expected a subcommand: mine or eval (see bitspark help antidoom)");
        return cli_fail("antidoom");
    }
    if (!strcmp(argv[1], "mine")) return ad_mine(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return ad_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        help_antidoom();
        return 0;
    }
    bs_error("unknown subcommand '%s' (mine or eval)", argv[1]);
    return cli_fail("antidoom");
}
