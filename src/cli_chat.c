/* cli_chat.c: `bitspark chat` (being written). */
#include "cli.h"
#include "util.h"
#include <stdio.h>
int cmd_chat(int argc, char **argv) { (void)argc; (void)argv; bs_error("not implemented yet"); return cli_fail("chat"); }
void help_chat(void) { printf("usage: bitspark chat\n"); }
