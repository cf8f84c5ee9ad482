/* cli_lora.c: `bitspark lora merge`: merge LoRA adapters into a GGUF, re-quantized, with a
 * report of how much of each delta the weight format kept (lora.h). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "model/lora.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ADAPTERS 16

void help_lora(void) {
    printf("usage: bitspark lora merge BASE.gguf ADAPTER[:SCALE] [ADAPTER[:SCALE] ...] -o OUT.gguf [--type T]\n\n"
           "W' = W + scale * (alpha / r) * B A for every adapted matrix, computed in float from the\n"
           "dequantized base and quantized again. ADAPTER: a llama.cpp GGUF LoRA, or a PEFT adapter\n"
           "(directory with adapter_config.json + adapter_model.safetensors, or the .safetensors).\n"
           "Prints per merged tensor and in total the share of signs that flipped, the relative\n"
           "change of the 128-weight group scales (mean |w|: Q1_0's d) and the cosine between the\n"
           "delta that survived quantization and the intended one.\n\n");
    cli_opts_help(CMD_LORA);
}

int cmd_lora(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "merge")) {
        bs_error(argc < 2 ? "expected a subcommand: merge" : "unknown subcommand '%s' (merge)", argc < 2 ? "" : argv[1]);
        return cli_fail("lora");
    }
    const char *base = NULL, *out = NULL, *adapters[MAX_ADAPTERS];
    int n = 0, type = BS_TYPE_INVALID;
    bool quiet = false;
    for (int i = 2; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_LORA, argc, argv, &i, &a)) return cli_fail("lora");
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_OUTPUT: out = a.s; break;
        case OPT_TYPE:
            if ((type = bs_type_from_name(a.s)) == BS_TYPE_INVALID) {
                bs_error("--type: unknown type '%s'", a.s);
                return cli_fail("lora");
            }
            break;
        case OPT_QUIET: quiet = true; break;
        case OPT_NONE:
            if (!base) base = a.s;
            else if (n < MAX_ADAPTERS) adapters[n++] = a.s;
            else { bs_error("at most %d adapters", MAX_ADAPTERS); return cli_fail("lora"); }
            break;
        default: bs_error("%s: not handled by lora", a.name); return cli_fail("lora");
        }
    }
    cli_opts_end();
    if (!base || !n || !out) {
        bs_error("usage: bitspark lora merge BASE ADAPTER[:SCALE]... -o OUT.gguf");
        return cli_fail("lora");
    }
    bs_lora *loras[MAX_ADAPTERS] = {0};
    float scales[MAX_ADAPTERS];
    int rc = 1;
    gguf_file *bf = gguf_open(base, GGUF_OPEN_META_ONLY);
    if (!bf) goto done;
    for (int k = 0; k < n; k++) {
        char *path;
        if (bs_lora_parse_arg(adapters[k], &path, &scales[k])) goto done;
        loras[k] = bs_lora_load(path, bf);
        free(path);
        if (!loras[k]) goto done;
    }
    bs_lora_merge_params p = {.base = base, .out = out, .loras = (const bs_lora *const *)loras,
                              .scales = scales, .n_loras = n, .type = type, .quiet = quiet};
    bs_lora_merge_stats total;
    if (bs_lora_merge(&p, &total)) goto done;
    rc = 0;
done:
    gguf_close(bf);
    for (int k = 0; k < n; k++) bs_lora_free(loras[k]);
    return rc ? cli_fail("lora") : 0;
}
