/* cli_logits.c: `bitspark logits` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_logits(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("logits"); }
void help_logits(void) { printf("usage: bitspark logits\n"); }
