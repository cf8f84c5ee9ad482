/* cli_run.c: `bitspark run` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_run(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("run"); }
void help_run(void) { printf("usage: bitspark run\n"); }
