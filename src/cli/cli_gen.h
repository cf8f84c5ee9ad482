/* cli_gen.h: the command-line options of the generating commands (run, chat, antidoom), parsed
 * into the options a bs_engine opens with (generate/engine.h). */
#ifndef BS_CLI_GEN_H
#define BS_CLI_GEN_H

#include "generate/engine.h"
#include "vision/vision.h"

/* Defaults: engine defaults with every core. */
void cli_gen_defaults(bs_engine_opts *o);
/* A parsed argument (cli_opts.h) that is a model/session/sampling/drafter/guard/LoRA option:
 * 1 (stored in *o), 0 if not one of these, -1 + bs_error on a bad value. */
struct cli_arg;
int cli_gen_apply(bs_engine_opts *o, const struct cli_arg *a);
/* After parsing: a model is given, drafter options come with a drafter (-md); -1 + bs_error. */
int cli_gen_check(const bs_engine_opts *o);
/* --tokenizer-normalize VALUE: "auto" leaves the model's normalization (*set = false), "none" /
 * "nfc" / ... overrides it. -1 + bs_error if invalid. */
int cli_parse_normalize(const char *v, bool *set, bs_norm_mode *mode);

/* -c beyond the model's training context (qwen35.context_length) is capped to it with a
 * warning, as the help says; reads only the GGUF header. */
void cli_gen_cap_ctx(bs_engine_opts *o);
/* --mmproj F and --image PATH (run, chat): the projector and the images encoded so far. */
#define CLI_MAX_IMAGES 16
typedef struct cli_vision {
    const char *mmproj;
    const char *paths[CLI_MAX_IMAGES];   /* --image, in order */
    int n_paths;
    bs_mmproj *proj;
    int n_threads;
    bs_image_embd embd[CLI_MAX_IMAGES];
    bs_gen_image im[CLI_MAX_IMAGES];     /* n of them, for bs_gen_request.images */
    int n;
} cli_vision;
/* As cli_gen_apply, for --mmproj and --image. */
int cli_vision_apply(cli_vision *v, const struct cli_arg *a);
/* Load the projector (checked against m) and encode the --image files; -1 + bs_error (--image
 * without --mmproj, a bad projector or image). Nothing to do without --mmproj. */
int cli_vision_open(cli_vision *v, const bs_model *m, int n_threads);
/* Encode one more image file (chat's /image); -1 + bs_error. */
int cli_vision_add(cli_vision *v, const char *path);
void cli_vision_truncate(cli_vision *v, int n);   /* keep the first n images */
void cli_vision_close(cli_vision *v);
/* n chat image parts (BS_IMAGE_CHAT) before text, malloc'd: what a message with images holds. */
char *cli_vision_prefix(int n, const char *text);
#endif
