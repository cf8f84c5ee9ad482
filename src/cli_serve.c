/* cli_serve.c: `bitspark serve` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_serve(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("serve"); }
void help_serve(void) { printf("usage: bitspark serve\n"); }
