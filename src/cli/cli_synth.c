/* cli_synth.c: `bitspark synth` - write a synthetic qwen35 target or dspark drafter (synth.h). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "formats/quant.h"
#include "tools/synth.h"
#include "tools/synth_mmproj.h"
#include "io/util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void help_synth(void) {
    printf(
        "usage: bitspark synth [--preset NAME] [options] -o OUT.gguf\n"
        "       bitspark synth [--preset NAME] [options] --dry-run\n"
        "\n"
        "Writes a model with random weights shaped like quantization-aware training: every\n"
        "128-element group of a matrix row has one magnitude s and values in {-s, +s} (binary,\n"
        "as Q1_0 stores them) or {-s, 0, +s} (ternary, Q2_0). Float and other quantized types\n"
        "store the same values, so models made with one seed agree across types (a q1_0 file\n"
        "dequantizes exactly to the f32 file). Norms are near 1, ssm_a = -exp(A_log) < 0, and\n"
        "matrix magnitudes scale with 1/sqrt(fan_in) so activations stay O(1) at any depth.\n"
        "Tensors are generated and streamed one at a time, so memory stays small at any size.\n"
        "Targets carry a byte-level BPE vocabulary trained on a built-in English corpus, the\n"
        "Qwen special tokens (CONTROL; at their real ids 248044.. in 248320-token vocabularies),\n"
        "[PAD{i}] fill, EOS <|im_end|> and a ChatML + thinking chat template.\n"
        "\n"
        "presets (--preset NAME; options given after or before it override it):\n"
        "  tiny (default)      qwen35 like the fixtures: 8 layers (every 4th full attention),\n"
        "                      hidden 256, FFN 512, 4/2 heads of 64, rope 16 dims [3,3,2,0],\n"
        "                      DeltaNet 2 K / 6 V heads of 64, conv 4, vocab 1024 (256 bytes,\n"
        "                      700 merges, 33 specials from id 956, [PAD]); q1_0\n"
        "  bonsai-27b          the 851-tensor table of Bonsai-27B-Q1_0.gguf (~3.8 GB): all\n"
        "                      matrices q1_0, norms/conv/ssm_a/ssm_dt f32, vocab 248320\n"
        "  ternary-bonsai-27b  same shapes, legacy q2_0 (128-group) with bf16 ssm_alpha/beta\n"
        "  ternary-bonsai-2-27b  Ternary-Bonsai-2-27B's table: ptq1_0, bf16 ssm_alpha/beta, the\n"
        "                      matrices and token table Hadamard-folded in blocks of 1024\n"
        "  drafter-tiny        dspark drafter for tiny: 2 layers, hidden 256, 4/2 heads of 64,\n"
        "                      FFN 256, taps 1,4,6, block 4, mask n_vocab-1, Markov rank 32; f32\n"
        "  drafter-bonsai-27b  the 79-tensor Bonsai drafter: 6 layers, 40/4 heads of 128, taps\n"
        "                      1,16,31,46,61, block 4, mask 248319, rank 256; the q4_1 pack\n"
        "                      with a q1_0 token_embd (the target's)\n"
        "  drafter-ternary-bonsai-27b   the same with the ternary target's q2_0 token_embd\n"
        "  mmproj-tiny         a vision projector (qwen3vl_merger mmproj) like the fixture's:\n"
        "                      width 64, 2 layers, 2 heads, MLP 128, 6x6 positions, out 256; f32\n"
        "  mmproj-bonsai-27b   Qwen3.5-27B's vision tower: width 1152, 27 layers, 16 heads,\n"
        "                      MLP 4304, 48x48 positions, out 5120; f16 (~0.9 GB)\n"
        "                      (projectors take -o, --seed, --type f32|f16|bf16|q8_0 and\n"
        "                      --n-layer --n-embd --n-ff --n-head --pos-side --proj-dim)\n"
        "Drafters carry no vocabulary (tokenizer.ggml.model = none, like PrismML's files). A\n"
        "drafter and a target made with the same seed and type share token_embd and output.\n"
        "\n"
        "Row widths must be multiples of the chosen type's block size (q1_0/q2_0: 128,\n"
        "q2_0_g64: 64, q4_*/q8_0: 32, q6_k/tq*: 256); synth says which tensor does not fit.\n"
        "\n"
        "examples:\n"
        "  bitspark synth --preset tiny --type q1_0 -o tiny-q1_0.gguf\n"
        "  bitspark synth --preset bonsai-27b --dry-run\n"
        "  bitspark synth --preset drafter-bonsai-27b --drafter-type bf16 -o /tmp/drafter.gguf\n"
        "  bitspark synth --preset mmproj-tiny --dry-run\n\n");
    cli_opts_help(CMD_SYNTH);
}

/* Parses "a,b,c" into at most max ints in [lo, hi]; returns the count or -1. */
static int parse_list(const char *opt, const char *s, int32_t *out, int max, long lo, long hi) {
    char buf[256];
    int n = 0;
    if (strlen(s) >= sizeof buf) return bs_error("%s: list too long", opt);
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (n == max) return bs_error("%s: more than %d values", opt, max);
        if (cli_parse_int(opt, tok, lo, hi, &v)) return -1;
        out[n++] = (int32_t)v;
    }
    if (n == 0) return bs_error("%s: empty list", opt);
    return n;
}

static int parse_type(const char *opt, const char *s, int *out) {
    int t = bs_type_from_name(s);
    if (t == BS_TYPE_INVALID) return bs_error("%s: unknown type '%s'", opt, s);
    *out = t;
    return 0;
}

typedef struct synth_opts {
    bs_synth_config c;
    bs_synth_mmproj_config mc;
    bool mmproj;                  /* the preset is a vision projector */
    const char *out, *drafter_type;
    const char *misfit;           /* the first option the preset's kind does not take */
    bool dry_run, explicit_sections, explicit_mask;
} synth_opts;

/* A shape override by name: the field of the target / drafter config, or of the projector's. */
static int64_t *shape_field(bs_synth_config *c, const char *name) {
    static const struct { const char *opt; size_t off; } f[] = {
#define F(o, f) {o, offsetof(bs_synth_config, f)}
        F("--n-layer", n_layer), F("--n-embd", n_embd), F("--n-ff", n_ff), F("--n-head", n_head),
        F("--n-head-kv", n_head_kv), F("--head-dim", head_dim), F("--n-vocab", n_vocab), F("--n-ctx", n_ctx),
        F("--rope-dim", rope_dim), F("--ssm-k-heads", ssm_k_heads), F("--ssm-v-heads", ssm_v_heads),
        F("--ssm-head-dim", ssm_head_dim), F("--conv-kernel", conv_kernel), F("--attn-interval", attn_interval),
        F("--block-size", block_size), F("--mask-id", mask_id), F("--markov-rank", markov_rank),
#undef F
    };
    for (size_t k = 0; k < BS_ARRAY_LEN(f); k++)
        if (!strcmp(name, f[k].opt)) return (int64_t *)((char *)c + f[k].off);
    return NULL;
}

static int *mmproj_field(bs_synth_mmproj_config *c, const char *name) {
    return !strcmp(name, "--n-layer") ? &c->n_layer : !strcmp(name, "--n-embd") ? &c->n_embd
         : !strcmp(name, "--n-ff") ? &c->n_ff : !strcmp(name, "--n-head") ? &c->n_head
         : !strcmp(name, "--pos-side") ? &c->pos_side : !strcmp(name, "--proj-dim") ? &c->proj_dim : NULL;
}

/* What every preset takes: output, listing, seed, shape; 1 if a was one, 0 if not, -1. */
static int apply_common(synth_opts *o, const cli_arg *a) {
    switch (a->opt->id) {
    case OPT_PRESET: return 1;   /* taken before the others */
    case OPT_OUTPUT: o->out = a->s; return 1;
    case OPT_DRY_RUN: o->dry_run = true; return 1;
    case OPT_SEED:   /* -1: from the clock, as everywhere */
        o->c.seed = o->mc.seed = a->n >= 0 ? (uint64_t)a->n : (uint64_t)time(NULL);
        return 1;
    case OPT_SYNTH_INT:
        if (o->mmproj) {
            int *f = mmproj_field(&o->mc, a->name);
            if (f) *f = (int)a->n;
            else if (!o->misfit) o->misfit = a->name;
        } else {
            int64_t *f = shape_field(&o->c, a->name);
            if (f) *f = a->n;
            else if (!o->misfit) o->misfit = a->name;
            if (!strcmp(a->name, "--mask-id")) o->explicit_mask = true;
        }
        return 1;
    case OPT_TYPE:
        if (o->mmproj) return parse_type(a->name, a->s, &o->mc.type) ? -1 : 1;
        return 0;
    default:
        return 0;
    }
}

/* The options of targets and drafters. */
static int apply_model(synth_opts *o, const cli_arg *a) {
    bs_synth_config *c = &o->c;
    int n;
    switch (a->opt->id) {
    case OPT_NAME: c->name = a->s; return 0;
    case OPT_TYPE:
        if (parse_type(a->name, a->s, &c->matrix_type)) return -1;
        c->embd_type = c->output_type = c->fc_type = c->markov_a_type = c->log_snr_type = -1;
        if (c->arch == BS_SYNTH_DSPARK || c->ssm_ab_type != BS_BF16) c->ssm_ab_type = -1;
        return 0;
    case OPT_EMBD_TYPE: return parse_type(a->name, a->s, &c->embd_type);
    case OPT_OUTPUT_TYPE: return parse_type(a->name, a->s, &c->output_type);
    case OPT_SSM_AB_TYPE: return parse_type(a->name, a->s, &c->ssm_ab_type);
    case OPT_DRAFTER_TYPE: o->drafter_type = a->s; return 0;   /* after the loop: it needs a drafter */
    case OPT_VALUES: c->values = !strcmp(a->s, "binary") ? BS_SYNTH_BINARY : BS_SYNTH_TERNARY; return 0;
    case OPT_N_MERGES: c->n_merges = (uint32_t)a->n; return 0;
    case OPT_HADAMARD: c->hadamard = (int)a->n; return 0;
    case OPT_ROPE_SECTIONS:
        if ((n = parse_list(a->name, a->s, c->rope_sections, 4, 0, 4096)) < 0) return -1;
        if (n != 4) return bs_error("--rope-sections needs 4 values");
        o->explicit_sections = true;
        return 0;
    case OPT_SYNTH_TAPS:
        if ((n = parse_list(a->name, a->s, c->taps, BS_SYNTH_MAX_TAPS, 0, 1023)) < 0) return -1;
        c->n_taps = n;
        return 0;
    default:
        return bs_error("%s: not handled by synth", a->name);
    }
}

static int parse(synth_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_SYNTH, argc, argv, &i, &a)) return -1;
        if (!a.opt) return bs_error("unexpected argument '%s'", a.s);
        int r = apply_common(o, &a);
        if (r < 0) return -1;
        if (r > 0) continue;
        if (o->mmproj) { if (!o->misfit) o->misfit = a.name; }
        else if (apply_model(o, &a)) return -1;
    }
    cli_opts_end();
    if (o->misfit) return bs_error("option '%s' does not apply to %s presets (see bitspark help synth)", o->misfit,
                                   o->mmproj ? "projector" : "target and drafter");
    if (o->drafter_type) {
        if (o->c.arch != BS_SYNTH_DSPARK) return bs_error("--drafter-type needs a drafter preset");
        if (bs_synth_drafter_pack(&o->c, o->drafter_type)) return -1;
    }
    return 0;
}

int cmd_synth(int argc, char **argv) {
    synth_opts o = {0};
    const char *preset = "tiny";
    /* The preset goes first so every other option overrides it, wherever it is written. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--preset") == 0) preset = argv[i + 1];
    o.mmproj = !bs_synth_mmproj_preset(preset, &o.mc);
    if (!o.mmproj && bs_synth_preset(preset, &o.c)) return cli_fail("synth");
    if (parse(&o, argc, argv)) return cli_fail("synth");
    if (o.mmproj) {
        if (o.dry_run) return bs_synth_mmproj_list(&o.mc, stdout) ? cli_fail("synth") : 0;
        if (!o.out) { bs_error("no output file (-o OUT.gguf), or --dry-run"); return cli_fail("synth"); }
        return bs_synth_mmproj_write(&o.mc, o.out) ? cli_fail("synth") : 0;
    }
    bs_synth_derive(&o.c, o.explicit_sections, o.explicit_mask);
    if (o.dry_run) return bs_synth_list(&o.c, stdout) ? cli_fail("synth") : 0;
    if (!o.out) { bs_error("no output file (-o OUT.gguf), or --dry-run"); return cli_fail("synth"); }
    double t0 = bs_time();
    if (bs_synth_write(&o.c, o.out)) return cli_fail("synth");
    bs_log(1, "synth: wrote %s (preset %s) in %.1f s, peak RSS %.1f MiB\n", o.out, preset,
           bs_time() - t0, (double)bs_peak_rss() / (1 << 20));
    return 0;
}
