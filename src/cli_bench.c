/* cli_bench.c: `bitspark bench` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_bench(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("bench"); }
void help_bench(void) { printf("usage: bitspark bench\n"); }
