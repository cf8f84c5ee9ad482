/* cli_inspect.c: `bitspark inspect FILE [--json] [--no-mmap]` (inspect.h does the work). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "tools/inspect.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void help_inspect(void) {
    printf(
        "usage: bitspark inspect FILE [--json] [--no-mmap]\n"
        "\n"
        "Shows what a model file is: its format and recognized model (e.g. \"qwen35 target (8\n"
        "layers: 6 Gated DeltaNet + 2 attention), Q1_0\", \"DSpark drafter (2 layers), block 4,\n"
        "taps [1,4,6], ...\"), metadata (arrays longer than 16 summarized), the tensor table\n"
        "(name, type, shape, bytes) and totals: parameters, bytes, bits per weight overall and\n"
        "per type.\n"
        "\n"
        "FILE is a .gguf file, a .safetensors file, a model.safetensors.index.json, or a\n"
        "directory holding a (sharded) safetensors checkpoint; a config.json next to a\n"
        "safetensors checkpoint is read too.\n"
        "\n"
        "\n");
    cli_opts_help(CMD_INSPECT);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, no_mmap = false;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_INSPECT, argc, argv, &i, &a)) return cli_fail("inspect");
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_JSON: json = true; break;
        case OPT_NO_MMAP: no_mmap = true; break;
        default:
            if (a.opt || path) { bs_error("more than one FILE given"); return cli_fail("inspect"); }
            path = a.s;
        }
    }
    cli_opts_end();
    if (!path) { bs_error("no FILE given (see bitspark help inspect)"); return cli_fail("inspect"); }
    json_t *info = bs_inspect_path(path, no_mmap);
    if (!info) return cli_fail("inspect");
    if (json) {
        if (json_dumpf(info, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(9)) != 0) {
            json_decref(info);
            bs_error("cannot write JSON");
            return cli_fail("inspect");
        }
        fputc('\n', stdout);
    } else {
        bs_inspect_print(stdout, info);
    }
    json_decref(info);
    return fflush(stdout) == 0 ? 0 : 1;
}
