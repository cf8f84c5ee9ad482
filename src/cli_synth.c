/* cli_synth.c: `bitspark synth` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_synth(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("synth"); }
void help_synth(void) { printf("usage: bitspark synth\n"); }
