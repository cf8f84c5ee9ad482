/* cli_opts.h: the one table of command-line options (cli_opts_table.c): each row names an
 * option and its aliases, its value's type and range, its default and help text, and the
 * commands that take it. Every command parses its arguments with cli_next and prints its
 * options with cli_opts_help from that table, so the two cannot drift apart. */
#ifndef BS_CLI_OPTS_H
#define BS_CLI_OPTS_H

#include <stdbool.h>

/* The commands (and subcommands) that parse options, as bits of cli_opt.cmds. */
enum {
    CMD_RUN = 1u << 0, CMD_CHAT = 1u << 1, CMD_SERVE = 1u << 2, CMD_AD_MINE = 1u << 3,
    CMD_AD_EVAL = 1u << 4, CMD_LOGITS = 1u << 5, CMD_DRAFT_LOGITS = 1u << 6, CMD_LORA = 1u << 7,
    CMD_MMPROJ_EMBED = 1u << 8, CMD_TOKENIZE = 1u << 9, CMD_DETOKENIZE = 1u << 10,
    CMD_SYNTH = 1u << 11, CMD_INSPECT = 1u << 12, CMD_CONVERT = 1u << 13, CMD_QUANTIZE = 1u << 14,
    CMD_BENCH = 1u << 15, CMD_BENCH_SPEC = 1u << 16, CMD_BENCH_VISION = 1u << 17, CMD_BENCH_GRAMMAR = 1u << 18,
    CMD_N_BITS = 19
};
#define CMD_GEN (CMD_RUN | CMD_CHAT | CMD_AD_MINE | CMD_AD_EVAL)   /* cli_gen's engine options */

typedef enum {
    CLI_FLAG,      /* no value */
    CLI_INT,       /* an integer in [lo, hi] */
    CLI_INT_AUTO,  /* the same, or "auto" (n = -1) */
    CLI_FLOAT,     /* a finite number; in [flo, fhi] unless both are 0 */
    CLI_STR,       /* any text (a file, a list the command checks) */
    CLI_CHOICE,    /* one of choices ("a|b|c") */
    CLI_STR2,      /* two values (s, s2) */
    CLI_SECTION    /* not an option: a heading of the help */
} cli_type;

/* Option ids: what a command switches on. Rows of one id may differ per command (range, help). */
enum {
    OPT_NONE,
    /* model and session (cli_gen) */
    OPT_MODEL, OPT_THREADS, OPT_CTX, OPT_NO_MMAP, OPT_DEVICE, OPT_NORMALIZE, OPT_CONTEXT_SHIFT, OPT_KEEP,
    /* sampling */
    OPT_TEMP, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N, OPT_PRESENCE_PENALTY,
    OPT_FREQUENCY_PENALTY, OPT_DRY_MULTIPLIER, OPT_DRY_BASE, OPT_DRY_ALLOWED_LENGTH, OPT_DRY_PENALTY_LAST_N,
    OPT_DRY_BREAKER, OPT_TYPICAL, OPT_TOP_N_SIGMA, OPT_XTC_PROBABILITY, OPT_XTC_THRESHOLD, OPT_DYNATEMP_RANGE,
    OPT_DYNATEMP_EXP, OPT_MIROSTAT, OPT_MIROSTAT_LR, OPT_MIROSTAT_ENT, OPT_LOGIT_BIAS, OPT_IGNORE_EOS, OPT_SEED, OPT_LORA, OPT_LORA_SCALED,
    /* speculative decoding */
    OPT_MODEL_DRAFT, OPT_DRAFT_MAX, OPT_DRAFT_SHARE_EMBD, OPT_DRAFT_NO_CONF, OPT_DRAFT_WINDOW,
    /* the doom-loop guard */
    OPT_LOOP_GUARD, OPT_LOOP_MIN_REPEATS, OPT_LOOP_MIN_CHARS, OPT_LOOP_MAX_PERIOD, OPT_LOOP_MAX_REWINDS,
    OPT_LOOP_CKPT_EVERY, OPT_LOOP_CKPT_COUNT,
    /* images */
    OPT_MMPROJ, OPT_IMAGE,
    /* shared by several commands */
    OPT_OUTPUT, OPT_N_PREDICT, OPT_QUIET, OPT_VERBOSE, OPT_PROMPT, OPT_FILE, OPT_SYSTEM, OPT_NO_THINK, OPT_JSON,
    OPT_TYPE,
    /* run, chat */
    OPT_CHAT, OPT_STATS, OPT_NO_REUSE,
    /* serve */
    OPT_HOST, OPT_PORT, OPT_PARALLEL, OPT_QUEUE, OPT_API_KEY, OPT_API_KEY_FILE, OPT_ALIAS, OPT_BODY_LIMIT,
    OPT_MAX_CONNECTIONS, OPT_HTTP_THREADS, OPT_BODY_BUDGET, OPT_IMAGE_BUDGET, OPT_NO_WEBUI, OPT_REPLICA_ID,
    OPT_DRAIN_TIMEOUT, OPT_EMBEDDINGS, OPT_POOLING, OPT_CORS, OPT_ALLOWED_HOSTS, OPT_SPECIAL_IN_MESSAGES,
    OPT_SLOT_SAVE_PATH, OPT_NO_SLOTS, OPT_SLOTS, OPT_LORA_INIT_WITHOUT_APPLY, OPT_TAGS, OPT_MEDIA_PATH, OPT_SLEEP_IDLE,
    /* serve: llama-server's options taken here (cli_serve_compat.c) */
    OPT_COMPAT_NOOP, OPT_NGL, OPT_REASONING_BUDGET, OPT_REASONING_FORMAT, OPT_TEMPLATE_KWARGS,
    OPT_HTTP_TIMEOUT, OPT_NO_CONTEXT_SHIFT, OPT_VERBOSITY, OPT_LOG_DISABLE, OPT_REASONING, OPT_SAMPLERS, OPT_GEN_SAMPLERS, OPT_LOG_FILE, OPT_EMBD_NORMALIZE,
    /* antidoom */
    OPT_PROMPTS, OPT_GENERATE_PRIMES, OPT_PRIME_TOKENS, OPT_PRIME_COPIES, OPT_PRIMES_OUT, OPT_CHOSEN_TOP_K,
    OPT_CHOSEN_MIN_P, OPT_CHOSEN_MAX, OPT_CHOSEN_MIN_CHARS, OPT_CHOSEN_REQUIRE_ALNUM, OPT_PAIRS, OPT_LOOP_RATE,
    OPT_TEMPS,
    /* logits, draft-logits */
    OPT_TOKENS, OPT_TOKENS_FILE, OPT_TAPS, OPT_TAPS_OUT, OPT_BATCH, OPT_KV_TYPE, OPT_IMAGE_EMBD, OPT_IMAGE_GRID,
    OPT_FEATURES, OPT_ROWS, OPT_ANCHOR, OPT_POS, OPT_ROUNDS,
    /* tokenize, detokenize */
    OPT_SPECIAL, OPT_PIECES, OPT_JSONL, OPT_NO_SPECIAL,
    /* synth */
    OPT_PRESET, OPT_HADAMARD, OPT_DRY_RUN, OPT_EMBD_TYPE, OPT_OUTPUT_TYPE, OPT_SSM_AB_TYPE, OPT_DRAFTER_TYPE, OPT_VALUES,
    OPT_NAME, OPT_SYNTH_INT, OPT_ROPE_SECTIONS, OPT_SYNTH_TAPS, OPT_N_MERGES,
    /* quantize */
    OPT_TENSOR_TYPE, OPT_Q2_GROUP, OPT_PURE, OPT_ALLOW_REQUANTIZE,
    /* bench */
    OPT_N_PROMPT, OPT_N_GEN, OPT_REPS, OPT_VERIFY, OPT_BENCH_PARALLEL, OPT_BENCH_SAMPLED, OPT_NO_MEMBW, OPT_NO_WARMUP, OPT_SPEC, OPT_MATMUL, OPT_MATMUL_TYPE,
    OPT_MATMUL_MB, OPT_MATMUL_ROWS, OPT_MATMUL_PACKED, OPT_IMAGE_SIZE, OPT_GRAMMAR, OPT_SCHEMA,
    OPT_COUNT
};

typedef struct cli_opt {
    int id;
    unsigned cmds;        /* CMD_* bits of the commands that take it */
    const char *names;    /* "-o, --output, --out": every spelling accepted, as help prints them */
    const char *meta;     /* the value's placeholder in help; NULL for a flag */
    cli_type type;
    long lo, hi;          /* CLI_INT, CLI_INT_AUTO */
    double flo, fhi;      /* CLI_FLOAT (both 0: any finite number) */
    const char *choices;  /* CLI_CHOICE */
    const char *def;      /* the default, as help shows it; NULL: none shown */
    const char *help;     /* lines separated by '\n' */
    const char *example;  /* CLI_STR with a format the command checks: a value it accepts */
} cli_opt;

extern const cli_opt cli_opts[];
extern const int cli_n_opts;
/* Options of other programs a command refuses with a reason (cli_next's error). */
typedef struct cli_refused {
    unsigned cmds;
    const char *names;
    const char *why;
} cli_refused;
extern const cli_refused cli_refused_opts[];
extern const int cli_n_refused;

/* One parsed argument: opt NULL for a positional argument (s: the text). */
typedef struct cli_arg {
    const cli_opt *opt;
    const char *name;     /* the spelling used */
    const char *s, *s2;   /* the value's text */
    long n;               /* CLI_INT / CLI_INT_AUTO */
    double f;             /* CLI_FLOAT */
} cli_arg;

/* argv[*i] for command cmd: an option of cmd (its value checked against the row and *i advanced
 * past it) or a positional argument. 0, or -1 + bs_error (an option cmd does not take, a
 * missing or bad value). */
int cli_next(unsigned cmd, int argc, char **argv, int *i, cli_arg *a);
/* The option of cmd spelled `name` (no value read), or NULL. */
const cli_opt *cli_find(unsigned cmd, const char *name);
/* After a command's options parsed: with BITSPARK_OPTS_CHECK=1 in the environment print
 * "options ok" and exit 0 (tests/test_cli_opts.py checks every option this way). */
void cli_opts_end(void);
/* The options of cmd, in table order, under their section headings. */
void cli_opts_help(unsigned cmd);
/* `bitspark help --options`: one line per option and command that takes it, tab-separated:
* command, names, type, lo, hi, flo, fhi, choices, example (what tests/test_cli_opts.py walks). */
void cli_opts_dump(void);
/* The command bit of "run", "antidoom-mine", ...; 0 if none. */
unsigned cli_cmd_bit(const char *name);
const char *cli_cmd_name(unsigned bit);

#endif
