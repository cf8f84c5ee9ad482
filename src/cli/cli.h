/* cli.h: the subcommands of the bitspark executable (git-style: bitspark <command> ...). Each
 * command lives in its own cli_<name>.c, parses its options from the table (cli_opts.h) and
 * returns the exit status. */
#ifndef BS_CLI_H
#define BS_CLI_H

#include <stdbool.h>

typedef struct bs_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);   /* argv[0] is the command name */
    void (*help)(void);                   /* full usage, printed by `bitspark help <name>` */
} bs_command;

/* Defined in cli_*.c; listed in main.c. */
#define BS_DECLARE_COMMAND(n) int cmd_##n(int argc, char **argv); void help_##n(void)
BS_DECLARE_COMMAND(inspect);
BS_DECLARE_COMMAND(synth);
BS_DECLARE_COMMAND(run);
BS_DECLARE_COMMAND(chat);
BS_DECLARE_COMMAND(logits);
BS_DECLARE_COMMAND(tokenize);
BS_DECLARE_COMMAND(detokenize);
BS_DECLARE_COMMAND(bench);
BS_DECLARE_COMMAND(devices);
BS_DECLARE_COMMAND(quantize);
BS_DECLARE_COMMAND(convert);
BS_DECLARE_COMMAND(serve);
BS_DECLARE_COMMAND(antidoom);
BS_DECLARE_COMMAND(lora);
BS_DECLARE_COMMAND(draft_logits);
BS_DECLARE_COMMAND(mmproj_embed);

/* Shared option parsing helpers (cli_common.c). All return 0 or -1 with bs_error set. */
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_float(const char *opt, const char *s, double *out);
/* --samplers NAMES / --sampling-seq LETTERS (told apart by the spelling `opt`): the stages' order
 * (16 bytes) and whether they were letters; -1 when no stage is named. */
int cli_parse_samplers(const char *opt, const char *s, char order[16], bool *letters);
/* Print "bitspark <cmd>: <last error>" and return the exit status 1. */
int cli_fail(const char *cmd);

/* bench --mmproj (cli_bench_vision.c): the vision encoder's time per image; 0 or -1. */
int bench_vision(int argc, char **argv);
/* bench --grammar / --schema (cli_bench_grammar.c): the token mask's time; 0 or -1. */
int bench_grammar(int argc, char **argv);

#endif
