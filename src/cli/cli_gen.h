/* cli_gen.h: the command-line options of the generating commands (run, chat, antidoom), parsed
 * into the options a bs_engine opens with (generate/engine.h). */
#ifndef BS_CLI_GEN_H
#define BS_CLI_GEN_H

#include "generate/engine.h"
#include "vision/vision.h"

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
/* As cli_gen_parse, for --mmproj and --image. */
int cli_vision_parse(cli_vision *v, int argc, char **argv, int *i);
/* Load the projector (checked against m) and encode the --image files; -1 + bs_error (--image
 * without --mmproj, a bad projector or image). Nothing to do without --mmproj. */
int cli_vision_open(cli_vision *v, const bs_model *m, int n_threads);
/* Encode one more image file (chat's /image); -1 + bs_error. */
int cli_vision_add(cli_vision *v, const char *path);
void cli_vision_truncate(cli_vision *v, int n);   /* keep the first n images */
void cli_vision_close(cli_vision *v);
/* n chat image parts (BS_IMAGE_CHAT) before text, malloc'd: what a message with images holds. */
char *cli_vision_prefix(int n, const char *text);
#define CLI_VISION_HELP \
    "images (Qwen3.5 vision projector; on the model's device):\n" \
    "  --mmproj F              the vision projector (mmproj GGUF) matching the model\n" \
    "  --image PATH            an image (PNG, JPEG or binary PPM), repeatable: the images go\n" \
    "                          before the text of the (first) user message\n"

#endif
