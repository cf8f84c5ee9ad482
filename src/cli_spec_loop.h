/* cli_spec_loop.h: cli_gen_prompt / cli_gen_loop with speculative rounds (same contracts as in
 * cli_gen.h), used by cli_gen.c when a drafter is loaded, and the speculative statistics. */
#ifndef BS_CLI_SPEC_LOOP_H
#define BS_CLI_SPEC_LOOP_H

#include "cli_gen.h"
#include "cli_spec.h"

int cli_spec_prompt(cli_gen *g, const int32_t *prompt, int n, cli_gen_stats *st);
int cli_spec_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st);
/* The same loop with the doom-loop guard (cli_spec_guard.c): each round's tokens are pushed to
 * the guard in order; a rewind puts target and drafter back exactly (checkpoint + replay, then
 * bs_spec_sync) and speculative rounds resume from the resampled token. */
int cli_spec_guard_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st);

/* Shared by the two loops (cli_spec.c): auto depth's cost measurement (or the cached one) once
 * the first token is known; a --verbose line when parking starts or ends; the stop conditions
 * checked before each round (sets st->stop); is_stop for bs_spec_round (ud: the tokenizer). */
int cli_spec_prepare(cli_gen *g, int32_t token);
void cli_spec_note_parking(cli_spec *c, bool *parked);
bool cli_spec_should_stop(const cli_gen *g, const cli_gen_run *r, cli_gen_stats *st);
bool cli_spec_is_eog(void *ud, int32_t id);
/* drafted / accepted / acceptance / mean accepted length / tokens per second, on stderr. */
void cli_spec_print_stats(const cli_spec *c, const cli_gen_stats *st);

#endif
