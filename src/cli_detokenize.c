/* cli_detokenize.c: `bitspark detokenize` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_detokenize(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("detokenize"); }
void help_detokenize(void) { printf("usage: bitspark detokenize\n"); }
