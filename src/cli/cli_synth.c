/* cli_synth.c: `bitspark synth` - write a synthetic qwen35 target or dspark drafter (synth.h). */
#include "cli/cli.h"
#include "formats/quant.h"
#include "tools/synth.h"
#include "tools/synth_mmproj.h"
#include "io/util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        "options:\n"
        "  -o, --output FILE   output GGUF (write big models outside the repository)\n"
        "  --dry-run, --list   print the tensor table from the same plan the writer uses,\n"
        "                      one 'name<TAB>type<TAB>ne0[,ne1]<TAB>bytes' line per tensor\n"
        "                      and '# tensors N bytes B'; writes nothing\n"
        "  --type T            matrix type: f32 f16 bf16 q1_0 q2_0 q2_0_g64 pq2_0 q4_0 q4_1\n"
        "                      q8_0 q6_k tq1_0 tq2_0 (norms and other vectors stay f32);\n"
        "                      for drafters this makes every matrix T\n"
        "  --embd-type T, --output-type T   type of token_embd / output (default: --type)\n"
        "  --ssm-ab-type T     type of ssm_alpha / ssm_beta (default: --type; bf16 for the\n"
        "                      ternary preset)\n"
        "  --drafter-type P    drafter pack: q4_1 (token_embd q1_0 or q2_0 as the target's,\n"
        "                      markov_head_a and log_snr fc bf16, other matrices q4_1),\n"
        "                      bf16 (every matrix), f32\n"
        "  --values V          binary | ternary (default: ternary for the q2_0/tq types,\n"
        "                      binary otherwise; q1_0 is always binary, q2_0 always ternary)\n"
        "  --seed N            RNG seed (default 42); each tensor has its own stream\n"
        "  --name S            general.name\n"
        "shape overrides:\n"
        "  --n-layer N --n-embd N --n-ff N --n-head N --n-head-kv N --head-dim N --n-vocab N\n"
        "  --n-ctx N           (both kinds)\n"
        "  --rope-dim N --rope-sections a,b,c,d --ssm-k-heads N --ssm-v-heads N\n"
        "  --ssm-head-dim N --conv-kernel N --attn-interval N --n-merges N   (targets)\n"
        "  --taps a,b,... --block-size N --mask-id N --markov-rank N         (drafters)\n"
        "Row widths must be multiples of the chosen type's block size (q1_0/q2_0: 128,\n"
        "q2_0_g64: 64, q4_*/q8_0: 32, q6_k/tq*: 256); synth says which tensor does not fit.\n"
        "\n"
        "examples:\n"
        "  bitspark synth --preset tiny --type q1_0 -o tiny-q1_0.gguf\n"
        "  bitspark synth --preset bonsai-27b --dry-run\n"
        "  bitspark synth --preset drafter-bonsai-27b --drafter-type bf16 -o /tmp/drafter.gguf\n");
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
    const char *out;
    bool dry_run, explicit_sections, explicit_mask;
} synth_opts;

/* One shape override; returns 1 if argv[*i] was one, 0 if not, -1 on error. */
static int parse_shape(synth_opts *o, int argc, char **argv, int *i) {
    static const struct { const char *opt; size_t off; long lo, hi; } ints[] = {
#define F(o, f, lo, hi) {o, offsetof(bs_synth_config, f), lo, hi}
        F("--n-layer", n_layer, 1, 1024), F("--n-embd", n_embd, 1, 1 << 20), F("--n-ff", n_ff, 1, 1 << 20),
        F("--n-head", n_head, 1, 4096), F("--n-head-kv", n_head_kv, 1, 4096), F("--head-dim", head_dim, 2, 4096),
        F("--n-vocab", n_vocab, 2, 1 << 24), F("--n-ctx", n_ctx, 1, 1 << 24), F("--rope-dim", rope_dim, 2, 4096),
        F("--ssm-k-heads", ssm_k_heads, 1, 4096), F("--ssm-v-heads", ssm_v_heads, 1, 4096),
        F("--ssm-head-dim", ssm_head_dim, 1, 4096), F("--conv-kernel", conv_kernel, 1, 64),
        F("--attn-interval", attn_interval, 1, 1024), F("--block-size", block_size, 1, 64),
        F("--mask-id", mask_id, 0, 1 << 24), F("--markov-rank", markov_rank, 1, 65536),
#undef F
    };
    for (size_t k = 0; k < BS_ARRAY_LEN(ints); k++) {
        if (strcmp(argv[*i], ints[k].opt)) continue;
        const char *v = cli_value(argc, argv, i);
        long x;
        if (!v || cli_parse_int(ints[k].opt, v, ints[k].lo, ints[k].hi, &x)) return -1;
        *(int64_t *)((char *)&o->c + ints[k].off) = x;
        if (strcmp(ints[k].opt, "--mask-id") == 0) o->explicit_mask = true;
        return 1;
    }
    return 0;
}

static int parse_option(synth_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int r = parse_shape(o, argc, argv, i);
    if (r) return r < 0 ? -1 : 0;
    if (strcmp(a, "--dry-run") == 0 || strcmp(a, "--list") == 0) { o->dry_run = true; return 0; }
    if (!(v = cli_value(argc, argv, i))) return -1;
    bs_synth_config *c = &o->c;
    if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) { o->out = v; return 0; }
    if (strcmp(a, "--name") == 0) { c->name = v; return 0; }
    if (strcmp(a, "--type") == 0) {
        if (parse_type(a, v, &c->matrix_type)) return -1;
        c->embd_type = c->output_type = c->fc_type = c->markov_a_type = c->log_snr_type = -1;
        if (c->arch == BS_SYNTH_DSPARK || c->ssm_ab_type != BS_BF16) c->ssm_ab_type = -1;
        return 0;
    }
    if (strcmp(a, "--embd-type") == 0) return parse_type(a, v, &c->embd_type);
    if (strcmp(a, "--output-type") == 0) return parse_type(a, v, &c->output_type);
    if (strcmp(a, "--ssm-ab-type") == 0) return parse_type(a, v, &c->ssm_ab_type);
    if (strcmp(a, "--drafter-type") == 0) {
        if (c->arch != BS_SYNTH_DSPARK) return bs_error("--drafter-type needs a drafter preset");
        return bs_synth_drafter_pack(c, v);
    }
    if (strcmp(a, "--values") == 0) {
        if (strcmp(v, "binary") == 0) c->values = BS_SYNTH_BINARY;
        else if (strcmp(v, "ternary") == 0) c->values = BS_SYNTH_TERNARY;
        else return bs_error("--values: '%s' is not binary or ternary", v);
        return 0;
    }
    if (strcmp(a, "--seed") == 0) {
        char *end;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end) return bs_error("--seed: '%s' is not a number", v);
        c->seed = s;
        return 0;
    }
    if (strcmp(a, "--n-merges") == 0) {
        long x;
        if (cli_parse_int(a, v, 0, 1 << 20, &x)) return -1;
        c->n_merges = (uint32_t)x;
        return 0;
    }
    if (strcmp(a, "--rope-sections") == 0) {
        int n = parse_list(a, v, c->rope_sections, 4, 0, 4096);
        if (n < 0) return -1;
        if (n != 4) return bs_error("--rope-sections needs 4 values");
        o->explicit_sections = true;
        return 0;
    }
    if (strcmp(a, "--taps") == 0) {
        int n = parse_list(a, v, c->taps, BS_SYNTH_MAX_TAPS, 0, 1023);
        if (n < 0) return -1;
        c->n_taps = n;
        return 0;
    }
    return bs_error("unknown option '%s' (see bitspark help synth)", a);
}

/* The projector presets (synth_mmproj.h): their own few options. */
static int synth_mmproj(int argc, char **argv, const char *preset) {
    bs_synth_mmproj_config c;
    const char *out = NULL;
    bs_synth_mmproj_preset(preset, &c);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = cli_value(argc, argv, &i);
        long x;
        if (!v) return cli_fail("synth");
        int *dst = !strcmp(a, "--n-layer") ? &c.n_layer : !strcmp(a, "--n-embd") ? &c.n_embd
                 : !strcmp(a, "--n-ff") ? &c.n_ff : !strcmp(a, "--n-head") ? &c.n_head
                 : !strcmp(a, "--pos-side") ? &c.pos_side : !strcmp(a, "--proj-dim") ? &c.proj_dim : NULL;
        if (!strcmp(a, "--preset")) continue;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--type")) { if (parse_type(a, v, &c.type)) return cli_fail("synth"); }
        else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(a, v, 0, 0x7fffffff, &x)) return cli_fail("synth");
            c.seed = (uint64_t)x;
        } else if (dst) {
            if (cli_parse_int(a, v, 1, 1 << 16, &x)) return cli_fail("synth");
            *dst = (int)x;
        } else {
            bs_error("option '%s' does not apply to projector presets (see bitspark help synth)", a);
            return cli_fail("synth");
        }
    }
    if (!out) { bs_error("no output file (-o OUT.gguf)"); return cli_fail("synth"); }
    return bs_synth_mmproj_write(&c, out) ? cli_fail("synth") : 0;
}

int cmd_synth(int argc, char **argv) {
    synth_opts o = {0};
    const char *preset = "tiny";
    /* The preset goes first so every other option overrides it, wherever it is written. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--preset") == 0) preset = argv[i + 1];
    bs_synth_mmproj_config mc;
    if (!bs_synth_mmproj_preset(preset, &mc)) return synth_mmproj(argc, argv, preset);
    if (bs_synth_preset(preset, &o.c)) return cli_fail("synth");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0) {
            if (++i == argc) { bs_error("option --preset needs a value"); return cli_fail("synth"); }
            continue;
        }
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { help_synth(); return 0; }
        if (parse_option(&o, argc, argv, &i)) return cli_fail("synth");
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
