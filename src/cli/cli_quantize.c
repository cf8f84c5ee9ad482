/* cli_quantize.c: `bitspark quantize IN.gguf OUT.gguf TYPE [options]` (quantize.h). */
#include "cli/cli.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/util.h"

#include <stdio.h>
#include <string.h>

void help_quantize(void) {
    printf(
        "usage: bitspark quantize IN.gguf OUT.gguf TYPE [options]\n"
        "\n"
        "Rewrites a GGUF with its weight matrices in TYPE, one tensor at a time (memory stays\n"
        "small for any model), keeping every metadata key (general.file_type is updated).\n"
        "TYPE: q1_0 q2_0 pq2_0 q2_0_g64 q4_0 q4_1 q8_0 q6_k tq1_0 tq2_0 bf16 f16 f32.\n"
        "Quantized bytes are those of llama.cpp's reference quantizers.\n"
        "\n"
        "Like llama-quantize, only matrices are converted: tensors whose name ends in 'weight'\n"
        "with two or more dimensions, except norms and ssm_conv1d. Norms, biases, ssm_a,\n"
        "ssm_dt and the conv stay as they are (F32). Every matrix gets TYPE, token_embd and\n"
        "output included (as in the published Bonsai files); use --output-type q6_k for\n"
        "llama.cpp's default head. Rows that do not fit a block fall back (q6_k -> q8_0,\n"
        "1/2-bit and ternary types -> q4_0, else the source float type) with a note.\n"
        "\n"
        "options:\n"
        "  --output-type T          type of output.weight\n"
        "  --embd-type T            type of token_embd.weight (--token-embedding-type too)\n"
        "  --tensor-type PAT=T      type of the matrices whose name matches the extended\n"
        "                           regular expression PAT (searched; repeatable; the last\n"
        "                           match wins), e.g. 'ssm_(alpha|beta)=bf16'\n"
        "  --q2-group 128|64        group size meant by q2_0 (default 128: the legacy\n"
        "                           34-byte block of Ternary-Bonsai; 64: mainline's)\n"
        "  --pure                   accepted for llama-quantize compatibility (the default\n"
        "                           already uses one type for every matrix)\n"
        "  --allow-requantize       allow converting tensors that are already quantized\n"
        "  -t, --threads N          threads (default: all CPUs)\n");
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
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help_quantize(); rc = 0; goto done; }
        if (!strcmp(a, "--output-type") || !strcmp(a, "--output-tensor-type")) {
            if (!(out_t = cli_value(argc, argv, &i))) goto fail;
        } else if (!strcmp(a, "--embd-type") || !strcmp(a, "--token-embedding-type")) {
            if (!(embd_t = cli_value(argc, argv, &i))) goto fail;
        } else if (!strcmp(a, "--tensor-type")) {
            if (!(v = cli_value(argc, argv, &i)) || bs_quantize_add_override(&p, v)) goto fail;
        } else if (!strcmp(a, "--q2-group")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 64, 128, &group)) goto fail;
            if (group != 64 && group != 128) { bs_error("--q2-group must be 128 or 64"); goto fail; }
        } else if (!strcmp(a, "--pure")) {
            p.pure = true;
        } else if (!strcmp(a, "--allow-requantize")) {
            p.allow_requantize = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1024, &nt)) goto fail;
        } else if (a[0] == '-' && a[1]) {
            bs_error("unknown option %s (see bitspark help quantize)", a);
            goto fail;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            bs_error("too many arguments (expected IN.gguf OUT.gguf TYPE)");
            goto fail;
        }
    }
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
