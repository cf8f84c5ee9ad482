/* cli_inspect.c: `bitspark inspect` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("inspect"); }
void help_inspect(void) { printf("usage: bitspark inspect\n"); }
