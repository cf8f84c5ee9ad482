/* cli_antidoom.c: `bitspark antidoom` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_antidoom(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("antidoom"); }
void help_antidoom(void) { printf("usage: bitspark antidoom\n"); }
