/* cli_tokenize.c: `bitspark tokenize` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("tokenize"); }
void help_tokenize(void) { printf("usage: bitspark tokenize\n"); }
