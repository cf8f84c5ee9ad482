/* cli_convert.c: `bitspark convert drafter-to-safetensors | drafter-to-gguf | hf-to-gguf`
 * (convert.h). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "tools/convert.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdio.h>
#include <string.h>

void help_convert(void) {
    printf(
        "usage: bitspark convert drafter-to-safetensors IN.gguf OUTDIR [-t N]\n"
        "       bitspark convert drafter-to-gguf INDIR OUT.gguf\n"
        "       bitspark convert hf-to-gguf INDIR OUT.gguf [--type T] [-t N]\n"
        "       bitspark convert hf-to-gguf INDIR MMPROJ.gguf --mmproj [--type T] [-t N]\n"
        "\n"
        "drafter-to-safetensors  a DSpark drafter GGUF (PrismML's dspark files) -> the DeepSpec\n"
        "    Qwen3DSparkModel standalone layout: OUTDIR/model.safetensors with HF tensor names\n"
        "    and OUTDIR/config.json built from the GGUF metadata. F32/F16/BF16 tensors keep their\n"
        "    dtype and bytes; quantized tensors are dequantized to BF16 (with a note).\n"
        "drafter-to-gguf  the inverse: a safetensors checkpoint (one file or shards, with\n"
        "    config.json) -> dspark GGUF, tensors byte for byte.\n"
        "hf-to-gguf  a Hugging Face Qwen3.5/3.6 dense text checkpoint (config.json,\n"
        "    model*.safetensors, tokenizer.json, tokenizer_config.json) -> qwen35 GGUF with\n"
        "    llama.cpp's converter transforms: +1 on norms (not linear_attn.norm), ssm_a =\n"
        "    -exp(A_log), V heads reordered to the tiled GGUF order, conv squeezed, vocabulary,\n"
        "    merges, token types, special tokens and chat template. Vision (model.visual.*,\n"
        "    see --mmproj) and MTP (mtp.*) tensors are skipped with a note.\n"
        "      --mmproj   the vision projector instead of the text model (as llama.cpp's\n"
        "                 convert_hf_to_gguf.py --mmproj): model.visual.* -> a clip GGUF with\n"
        "                 clip.projector_type = qwen3vl_merger for --mmproj in run/chat/serve;\n"
        "                 --type f32|f16|bf16|q8_0 sets its matrices (default: keep the dtype).\n"
        "      --type T   type of the weight matrices (f32 f16 bf16 or any quantize type);\n"
        "                 default: keep each tensor's dtype. Norms, conv, ssm_a, ssm_dt: F32.\n"
        "\n");
    cli_opts_help(CMD_CONVERT);
}

int cmd_convert(int argc, char **argv) {
    const char *pos[3] = {0}, *type_s = NULL;
    int n_pos = 0, mmproj = 0;
    long nt = 0;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_CONVERT, argc, argv, &i, &a)) return cli_fail("convert");
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MMPROJ: mmproj = 1; break;
        case OPT_TYPE: type_s = a.s; break;
        case OPT_THREADS: nt = a.n; break;
        default:
            if (a.opt || n_pos == 3) { bs_error("too many arguments"); return cli_fail("convert"); }
            pos[n_pos++] = a.s;
        }
    }
    cli_opts_end();
    if (n_pos != 3) {
        bs_error("expected a mode (drafter-to-safetensors, drafter-to-gguf, hf-to-gguf), an input and an output");
        return cli_fail("convert");
    }
    int type = -1, rc;
    if (type_s) {
        type = bs_type_from_name(type_s);
        const bs_type_traits *tr = bs_type_get(type);
        if (!tr || !tr->from_float || type == BS_Q8_1 || type == BS_Q8_K) {
            bs_error("--type: '%s' is not a type bitspark can write", type_s);
            return cli_fail("convert");
        }
    }
    if (type_s && strcmp(pos[0], "hf-to-gguf")) {
        bs_error("--type applies to hf-to-gguf only (use bitspark quantize afterwards)");
        return cli_fail("convert");
    }
    if (mmproj && strcmp(pos[0], "hf-to-gguf")) {
        bs_error("--mmproj applies to hf-to-gguf only");
        return cli_fail("convert");
    }
    if (mmproj) rc = bs_convert_hf_to_mmproj(pos[1], pos[2], type, (int)nt);
    else if (!strcmp(pos[0], "drafter-to-safetensors")) rc = bs_convert_drafter_to_st(pos[1], pos[2], (int)nt);
    else if (!strcmp(pos[0], "drafter-to-gguf")) rc = bs_convert_drafter_to_gguf(pos[1], pos[2], (int)nt);
    else if (!strcmp(pos[0], "hf-to-gguf")) rc = bs_convert_hf_to_gguf(pos[1], pos[2], type, (int)nt);
    else rc = bs_error("unknown mode '%s' (drafter-to-safetensors, drafter-to-gguf, hf-to-gguf)", pos[0]);
    return rc ? cli_fail("convert") : 0;
}
