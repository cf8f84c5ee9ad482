/* cli_convert.c: `bitspark convert` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_convert(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("convert"); }
void help_convert(void) { printf("usage: bitspark convert\n"); }
