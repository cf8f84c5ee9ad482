/* cli_spec_loop.h: cli_gen_prompt / cli_gen_loop with speculative rounds (same contracts as in
 * cli_gen.h), used by cli_gen.c when a drafter is loaded, and the speculative statistics. */
#ifndef BS_CLI_SPEC_LOOP_H
#define BS_CLI_SPEC_LOOP_H

#include "cli_gen.h"
#include "cli_spec.h"

int cli_spec_prompt(cli_gen *g, const int32_t *prompt, int n, cli_gen_stats *st);
int cli_spec_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st);
/* drafted / accepted / acceptance / mean accepted length / tokens per second, on stderr. */
void cli_spec_print_stats(const cli_spec *c, const cli_gen_stats *st);

#endif
