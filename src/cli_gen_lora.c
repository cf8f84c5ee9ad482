/* cli_gen_lora.c: --lora FILE[:SCALE] / --lora-scaled FILE SCALE for `run` and `chat`: LoRA
 * adapters applied at run time (lora.h), in the order given. */
#include "cli.h"
#include "cli_gen.h"
#include "lora.h"
#include "qwen35.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_gen_lora_parse(cli_gen_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bool scaled = !strcmp(a, "--lora-scaled");
    if (strcmp(a, "--lora") && !scaled) return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    if (o->n_lora == CLI_GEN_MAX_LORA) return bs_error("%s: at most %d adapters", a, CLI_GEN_MAX_LORA);
    o->lora[o->n_lora] = v;
    o->lora_scale[o->n_lora] = 1.0f;
    o->lora_has_scale[o->n_lora] = false;
    if (scaled) {
        double s;
        const char *sv = cli_value(argc, argv, i);
        if (!sv || cli_parse_float(a, sv, &s)) return -1;
        o->lora_scale[o->n_lora] = (float)s;
        o->lora_has_scale[o->n_lora] = true;
    }
    o->n_lora++;
    return 1;
}

void cli_gen_lora_help(void) {
    printf("LoRA adapters (llama.cpp GGUF or PEFT safetensors), applied at run time:\n"
           "  --lora FILE[:SCALE]     repeatable; y = W x + SCALE * alpha/r * B (A x) (SCALE 1)\n"
           "  --lora-scaled FILE S    the same with the scale as a separate argument\n");
}

int cli_gen_lora_open(cli_gen *g, const cli_gen_opts *o) {
    for (int k = 0; k < o->n_lora; k++) {
        char *path;
        float scale;
        if (o->lora_has_scale[k]) {
            path = bs_xstrdup(o->lora[k]);
            scale = o->lora_scale[k];
        } else if (bs_lora_parse_arg(o->lora[k], &path, &scale)) {
            return -1;
        }
        bs_lora *l = bs_lora_load(path, g->model->file);
        free(path);
        if (!l) return -1;
        g->loras[g->n_loras++] = l;
        if (bs_lora_attach(g->model, l, scale)) return -1;
        bs_log(1, "LoRA %s: %d matrices, alpha %g, scale %g\n", l->path, l->n, (double)l->alpha, (double)scale);
    }
    return 0;
}

void cli_gen_lora_close(cli_gen *g) {
    if (g->model) bs_lora_detach(g->model);
    for (int k = 0; k < g->n_loras; k++) bs_lora_free(g->loras[k]);
    g->n_loras = 0;
}
