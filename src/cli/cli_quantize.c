/* cli_quantize.c: `bitspark quantize IN.gguf OUT.gguf TYPE [options]` (quantize.h). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void help_quantize(void) {
    printf(
        "usage: bitspark quantize IN.gguf OUT.gguf TYPE [options]\n"
        "\n"
        "Rewrites a GGUF with its weight matrices in TYPE, one tensor at a time (memory stays\n"
        "small for any model), keeping every metadata key (general.file_type is updated).\n"
        "TYPE: q1_0 q2_0 pq2_0 ptq1_0 q2_0_g64 q4_0 q4_1 q8_0 q6_k tq1_0 tq2_0 bf16 f16 f32.\n"
        "Quantized bytes are those of llama.cpp's reference quantizers.\n"
        "\n"
        "Like llama-quantize, only matrices are converted: tensors whose name ends in 'weight'\n"
        "with two or more dimensions, except norms and ssm_conv1d. Norms, biases, ssm_a,\n"
        "ssm_dt and the conv stay as they are (F32). Every matrix gets TYPE, token_embd and\n"
        "output included (as in the published Bonsai files); use --output-type q6_k for\n"
        "llama.cpp's default head. Rows that do not fit a block fall back (q6_k -> q8_0,\n"
        "1/2-bit and ternary types -> q4_0, else the source float type) with a note.\n"
        "\n"
        "\n");
    cli_opts_help(CMD_QUANTIZE);
}

static int parse_type(const char *opt, const char *s, int q2_group, int *out) {
    int t = bs_type_from_name(s);
    const bs_type_traits *tr = bs_type_get(t);
    if (!tr || !tr->from_float || t == BS_Q8_1 || t == BS_Q8_K)
        return bs_error("%s: '%s' is not a type bitspark can write", opt, s);
    if (t == BS_Q2_0 && q2_group == 64) t = BS_Q2_0_G64;
    *out = t;
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    bs_quantize_params p;
    bs_quantize_params_init(&p);
    const char *pos[3] = {0}, *out_t = NULL, *embd_t = NULL;
    int n_pos = 0, rc = 1;
    long group = 128, nt = 0;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_QUANTIZE, argc, argv, &i, &a)) goto fail;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_OUTPUT_TYPE: out_t = a.s; break;
        case OPT_EMBD_TYPE: embd_t = a.s; break;
        case OPT_TENSOR_TYPE: if (bs_quantize_add_override(&p, a.s)) goto fail; break;
        case OPT_Q2_GROUP: group = atol(a.s); break;
        case OPT_PURE: p.pure = true; break;
        case OPT_ALLOW_REQUANTIZE: p.allow_requantize = true; break;
        case OPT_THREADS: nt = a.n; break;
        default:
            if (a.opt || n_pos == 3) { bs_error("too many arguments (expected IN.gguf OUT.gguf TYPE)"); goto fail; }
            pos[n_pos++] = a.s;
        }
    }
    cli_opts_end();
    if (n_pos != 3) { bs_error("expected IN.gguf OUT.gguf TYPE (see bitspark help quantize)"); goto fail; }
    p.n_threads = (int)nt;
    if (parse_type("TYPE", pos[2], (int)group, &p.type) ||
        (out_t && parse_type("--output-type", out_t, (int)group, &p.output_type)) ||
        (embd_t && parse_type("--embd-type", embd_t, (int)group, &p.embd_type)))
        goto fail;
    if (group == 64)
        for (int i = 0; i < p.n_overrides; i++)
            if (p.overrides[i].type == BS_Q2_0) p.overrides[i].type = BS_Q2_0_G64;
    if (!strcmp(pos[0], pos[1])) { bs_error("input and output are the same file"); goto fail; }
    if (bs_quantize_file(pos[0], pos[1], &p)) goto fail;
    rc = 0;
    goto done;
fail:
    rc = cli_fail("quantize");
done:
    bs_quantize_params_free(&p);
    return rc;
}
