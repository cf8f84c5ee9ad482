/* cli_quantize.c: `bitspark quantize` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_quantize(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("quantize"); }
void help_quantize(void) { printf("usage: bitspark quantize\n"); }
