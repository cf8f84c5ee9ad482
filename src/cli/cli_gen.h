/* cli_gen.h: the command-line options of the generating commands (run, chat, antidoom), parsed
 * into the options a bs_engine opens with (generate/engine.h). */
#ifndef BS_CLI_GEN_H
#define BS_CLI_GEN_H

#include "generate/engine.h"

/* Defaults: engine defaults with every core. */
void cli_gen_defaults(bs_engine_opts *o);
/* Try argv[*i] as a model/session/sampling/drafter/guard/LoRA option: 1 if consumed (with its
 * value; *i advanced), 0 if not one of these, -1 + bs_error on a bad value. */
int cli_gen_parse(bs_engine_opts *o, int argc, char **argv, int *i);
/* Usage lines of those options. */
void cli_gen_help(void);
/* The sampling options alone (temperature ... DRY, logit bias, seed, --ignore-eos, --lora), and
 * the doom-loop guard's: serve takes these too, as its requests' defaults. */
int cli_gen_parse_sampling(bs_engine_opts *o, int argc, char **argv, int *i);
void cli_gen_sampling_help(void);
/* --context-shift and --keep (serve takes these too). */
int cli_gen_parse_context(bs_engine_opts *o, int argc, char **argv, int *i);
void cli_gen_context_help(void);
/* --tokenizer-normalize VALUE (run, chat, antidoom, serve, tokenize): "auto" leaves the model's
 * normalization (*set = false), "none" / "nfc" / ... overrides it. -1 + bs_error if invalid. */
int cli_parse_normalize(const char *v, bool *set, bs_norm_mode *mode);
#define CLI_NORMALIZE_HELP \
    "  --tokenizer-normalize M\n" \
    "                          Unicode normalization of the text before tokenization: auto (the\n" \
    "                          model's; NFC for Qwen vocabularies, as their tokenizer.json says) |\n" \
    "                          none (llama.cpp's token ids) | nfc | nfd | nfkc | nfkd (auto)\n"

/* -c beyond the model's training context (qwen35.context_length) is capped to it with a
 * warning, as the help says; reads only the GGUF header. */
void cli_gen_cap_ctx(bs_engine_opts *o);
/* The doom-loop guard's options alone (serve takes these too). */
int cli_gen_guard_parse(bs_engine_opts *o, int argc, char **argv, int *i);
void cli_gen_guard_help(void);

#endif
