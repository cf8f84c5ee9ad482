/* cli_run.c: `bitspark run`: generate from one prompt. Only the generated text goes to stdout
 * (streamed, whole UTF-8 code points); logs and llama.cpp-style timings go to stderr. */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "io/utf8.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    bs_engine_opts g;
    cli_vision vis;
    const char *prompt, *file, *system;
    int n_predict;
    bool chat, no_think, quiet;
} run_opts;

void help_run(void) {
    printf("usage: bitspark run -m MODEL (-p TEXT | -f FILE) [options]\n"
           "\n"
           "Generate a continuation of the prompt. The prompt is tokenized with special tokens\n"
           "parsed (like llama.cpp's -p); --chat wraps it in the model's chat template.\n"
           "With --image, the images go before the prompt (inside the user message with --chat),\n"
           "each as " BS_IMAGE_CHAT ", unless a prompt without --chat places\n"
           "them itself with " BS_IMAGE_MARKER ".\n"
           "\n");
    cli_opts_help(CMD_RUN);
}

static int parse(run_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->n_predict = -1;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_RUN, argc, argv, &i, &a)) return -1;
        if (!a.opt) return bs_error("unexpected argument '%s' (the prompt goes after -p)", a.s);
        int r = cli_gen_apply(&o->g, &a);
        if (!r) r = cli_vision_apply(&o->vis, &a);
        if (r < 0) return -1;
        if (r > 0) continue;
        switch (a.opt->id) {
        case OPT_PROMPT: o->prompt = a.s; break;
        case OPT_FILE: o->file = a.s; break;
        case OPT_SYSTEM: o->system = a.s; break;
        case OPT_N_PREDICT: o->n_predict = (int)a.n; break;
        case OPT_CHAT: o->chat = true; break;
        case OPT_NO_THINK: o->no_think = true; break;
        case OPT_QUIET: o->quiet = true; bs_log_level = 0; break;
        case OPT_VERBOSE: bs_log_level = 2; break;
        default: return bs_error("%s: not handled by run", a.name);
        }
    }
    cli_opts_end();
    if (cli_gen_check(&o->g)) return -1;
    if (!o->prompt == !o->file) return bs_error("give exactly one of -p TEXT or -f FILE");
    if ((o->no_think || o->system) && !o->chat) return bs_error("--no-think and -sys need --chat");
    if (o->vis.n_paths && !o->vis.mmproj) return bs_error("--image needs --mmproj FILE (the vision projector)");
    return 0;
}

static void emit_stdout(void *ud, const char *text, size_t len) {
    (void)ud;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
}

static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0, got;
    char *buf = bs_xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - 1 - n, stdin)) > 0) {
        n += got;
        if (n + 1 == cap) buf = bs_xrealloc(buf, cap *= 2);
    }
    if (ferror(stdin)) {
        free(buf);
        bs_error("reading the prompt from stdin failed");
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* The prompt text: as given, or rendered as a one-message chat. malloc'd. */
static char *prompt_text(const run_opts *o, bs_engine *e, size_t *len) {
    char *raw = NULL;
    size_t n;
    if (o->file && !strcmp(o->file, "-")) {
        if (!(raw = read_stdin(&n))) return NULL;
    } else if (o->file) {
        if (!(raw = bs_read_file(o->file, &n))) return NULL;
    } else {
        raw = bs_xstrdup(o->prompt);
        n = strlen(raw);
    }
    size_t bad;
    if (!bs_utf8_valid(raw, n, &bad)) {
        bs_error("the prompt is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                 (unsigned char)raw[bad], bad);
        free(raw);
        return NULL;
    }
    if (o->chat && memchr(raw, 0, n)) {   /* before the image parts, which end at a NUL */
        free(raw);
        bs_error("the prompt contains a NUL byte");
        return NULL;
    }
    /* the images go first, unless a prompt without --chat places them itself */
    if (o->vis.n_paths && (o->chat || !strstr(raw, BS_IMAGE_MARKER))) {
        char *p = cli_vision_prefix(o->vis.n_paths, raw);
        free(raw);
        raw = p;
        n = strlen(p);
    }
    if (!o->chat) {
        *len = n;
        return raw;
    }
    bs_chat_msg msgs[2] = {{0}};
    int nm = 0;
    if (o->system) msgs[nm++] = (bs_chat_msg){.role = "system", .content = o->system};
    msgs[nm++] = (bs_chat_msg){.role = "user", .content = raw};
    char *out = bs_engine_render(e, msgs, nm, o->no_think ? 0 : -1, true, len);
    free(raw);
    return out;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {0};
    if (parse(&o, argc, argv)) return cli_fail("run");
    bs_engine e;
    cli_gen_cap_ctx(&o.g);
    if (bs_engine_open(&e, &o.g)) return cli_fail("run");
    int rc = 1;
    size_t len, n;
    int32_t *ids = NULL;
    int n_img = 0;
    char *text = NULL;
    if (cli_vision_open(&o.vis, e.model, o.g.n_threads)) goto done;
    text = prompt_text(&o, &e, &len);
    if (!text || bs_tokenize_prompt_images(e.tok, text, len, &ids, &n, &n_img)) goto done;
    if (n_img != o.vis.n) {
        bs_error("the prompt places %d images but %d were given (--image)", n_img, o.vis.n);
        goto done;
    }
    if (n > (size_t)INT32_MAX) { bs_error("prompt too long"); goto done; }
    bs_log(2, "prompt (%zu tokens):\n%.*s\n", n, (int)BS_MIN(len, 4096), text);
    bs_gen_request r;
    bs_engine_request(&e, &r);
    r.greedy_on_device = true;   /* plain greedy: only token ids come back from a GPU */
    r.n_predict = o.n_predict;
    r.images = o.vis.im;
    r.n_images = o.vis.n;
    if (bs_engine_generate(&e, &r, ids, (int)n, emit_stdout, NULL)) goto done;
    if (!o.quiet) bs_engine_print_stats(&e, bs_gen_get_stats(e.gen));
    rc = 0;
done:
    if (rc) cli_fail("run");
    free(ids);
    free(text);
    cli_vision_close(&o.vis);
    bs_engine_close(&e);
    return rc;
}
