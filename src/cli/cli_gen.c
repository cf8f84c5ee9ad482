/* cli_gen.c: the options every generating command shares (model and session, sampling,
 * speculative decoding, the doom-loop guard, LoRA adapters), parsed into bs_engine_opts
 * (generate/engine.h). */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "formats/gguf.h"
#include "io/util.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_gen_defaults(bs_engine_opts *o) {
    bs_engine_opts_init(o);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = n > 0 ? (int)BS_MIN(n, 64) : 1;
}

static void spec_help(void) {
    printf("speculative decoding (DSpark):\n"
           "  -md, --model-draft F    DSpark drafter (.gguf, or safetensors + config.json)\n"
           "  --draft-max N|auto      drafts verified per round, 0..block size (auto)\n"
           "  --draft-share-embeddings  use the target's token_embd / output for the drafter\n"
           "                          even where they differ (identical ones are always shared)\n"
           "  --draft-no-conf         auto depth without the confidence-head trim\n"
           "  --draft-window N        the drafter attends to its last N context rows only (0:\n"
           "                          all; caps the drafter's cost at long contexts; changes\n"
           "                          drafts, never the output)\n"
           "  auto measures the cost of each verify width and drafter block once per machine,\n"
           "  model pair and thread count, and keeps them with the acceptance and probe cost\n"
           "  the last run ended with in $XDG_CACHE_HOME/bitspark/dspark-costs (or\n"
           "  ~/.cache/...); BITSPARK_NO_COST_CACHE=1 measures afresh and keeps nothing.\n");
}

static int spec_parse(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
        if (!(o->drafter = cli_value(argc, argv, i))) return -1;
    } else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        long x;
        if (!strcmp(v, "auto")) o->draft_max = BS_DRAFT_AUTO;
        else if (cli_parse_int(a, v, 0, BS_DSPARK_MAX_BLOCK, &x)) return -1;
        else o->draft_max = (int)x;
    } else if (!strcmp(a, "--draft-share-embeddings")) {
        o->share_embeddings = true;
    } else if (!strcmp(a, "--draft-no-conf")) {
        o->no_conf = true;
    } else if (!strcmp(a, "--draft-window")) {
        long x;
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(a, v, 0, 1 << 24, &x)) return -1;
        o->draft_window = (int)x;
    } else {
        return 0;
    }
    return 1;
}

int cli_gen_guard_parse(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long x;
    bs_loop_guard_params *p = &o->loop;
    if (!strcmp(a, "--loop-guard")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        int m = bs_loop_guard_mode_parse(v);
        if (m < 0) return bs_error("--loop-guard: expected off, stop or rewind, got '%s'", v);
        p->mode = m;
        return 1;
    }
    static const struct { const char *name; long lo, hi; size_t off; } iopts[] = {
        {"--loop-min-repeats", 2, 1000000, offsetof(bs_loop_guard_params, det.min_repeats)},
        {"--loop-min-chars", 1, 100000000, offsetof(bs_loop_guard_params, det.min_chars)},
        {"--loop-max-period", 1, 1000000, offsetof(bs_loop_guard_params, det.max_period)},
        {"--loop-max-rewinds", 0, 1000000, offsetof(bs_loop_guard_params, max_rewinds)},
        {"--loop-ckpt-every", 1, 1000000, offsetof(bs_loop_guard_params, ckpt_every)},
        {"--loop-ckpt-count", 0, 4096, offsetof(bs_loop_guard_params, ckpt_count)},
    };
    for (size_t k = 0; k < BS_ARRAY_LEN(iopts); k++) {
        if (strcmp(a, iopts[k].name)) continue;
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(a, v, iopts[k].lo, iopts[k].hi, &x)) return -1;
        *(int *)((char *)p + iopts[k].off) = (int)x;
        return 1;
    }
    return 0;
}

void cli_gen_guard_help(void) {
    printf("doom-loop guard (antidoom's detector: a span repeating >= R times over >= C chars):\n"
           "  --loop-guard MODE       off | stop (end generation at a loop) | rewind (roll back\n"
           "                          to the loop's first repeat, ban that token, resample) (off)\n"
           "  --loop-min-repeats R    (4)\n"
           "  --loop-min-chars C      (60)\n"
           "  --loop-max-period P     longest period looked for, in characters (1024)\n"
           "  --loop-max-rewinds N    rewinds per generation, then stop (8)\n"
           "  --loop-ckpt-every N     rewind: tokens between state checkpoints (64)\n"
           "  --loop-ckpt-count N     rewind: checkpoints kept (8)\n");
}

static int lora_parse(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bool scaled = !strcmp(a, "--lora-scaled");
    if (strcmp(a, "--lora") && !scaled) return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    if (o->n_lora == BS_ENGINE_MAX_LORA) return bs_error("%s: at most %d adapters", a, BS_ENGINE_MAX_LORA);
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

static void lora_help(void) {
    printf("LoRA adapters (llama.cpp GGUF or PEFT safetensors), applied at run time:\n"
           "  --lora FILE[:SCALE]     repeatable; y = W x + SCALE * alpha/r * B (A x) (SCALE 1)\n"
           "  --lora-scaled FILE S    the same with the scale as a separate argument\n");
}

int cli_parse_normalize(const char *v, bool *set, bs_norm_mode *mode) {
    *set = strcmp(v, "auto") != 0;
    if (*set && bs_norm_from_name(v, mode)) return bs_error_prefix("--tokenizer-normalize: ");
    return 0;
}

void cli_gen_sampling_help(void) {
    printf(
        "sampling (llama.cpp order and defaults):\n"
        "  --temp T                temperature, <= 0 is greedy (0.8)\n"
        "  --top-k K               0 = off (40)\n"
        "  --top-p P               1 = off (0.95)\n"
        "  --min-p P               0 = off (0.05)\n"
        "  --repeat-penalty X      1 = off (1.0)\n"
        "  --repeat-last-n N       window of the penalties, -1 = whole context (64)\n"
        "  --presence-penalty X    (0)\n"
        "  --frequency-penalty X   (0)\n"
        "  --dry-multiplier X      0 = DRY off (0)\n"
        "  --dry-base X            (1.75)\n"
        "  --dry-allowed-length N  (2)\n"
        "  --dry-penalty-last-n N  -1 = whole context (-1)\n"
        "  --dry-sequence-breaker S  repeatable; 'none' clears (\\n : \" *)\n"
        "  --logit-bias ID(+|-)X   e.g. 15043+1 or 15043-inf (ban)\n"
        "  --ignore-eos            keep generating past end-of-generation tokens\n"
        "  --seed S                random seed (default: from the clock, printed)\n");
    lora_help();
}

void cli_gen_context_help(void) {
    printf("  --context-shift         a full context drops the older half of what follows the kept\n"
           "                          start and re-evaluates the rest (every kept position: the\n"
           "                          recurrent state cannot forget), instead of stopping\n"
           "  --keep N                tokens at the start a context shift keeps (0)\n");
}

void cli_gen_help(void) {
    printf("model and session:\n"
           "  -m, --model FILE        qwen35 GGUF (Bonsai-27B Q1_0, Ternary-Bonsai Q2_0, ...)\n"
           "  -t, --threads N         threads (default: all cores)\n"
           "  -c, --ctx N             context size in tokens (default 4096, capped by the model)\n"
           "  --no-mmap               read the model into memory instead of mapping it\n"
           CLI_NORMALIZE_HELP);
    cli_gen_context_help();
    cli_gen_sampling_help();
    spec_help();
    cli_gen_guard_help();
}

static int parse_bias(bs_engine_opts *o, const char *v) {
    char *end;
    long id = strtol(v, &end, 10);
    if (end == v || (*end != '+' && *end != '-') || id < 0 || id > INT32_MAX)
        return bs_error("--logit-bias: expected ID+X or ID-X, got '%s'", v);
    float bias;
    if (!strcmp(end + 1, "inf") || !strcmp(end + 1, "infinity")) {
        if (*end == '+') return bs_error("--logit-bias: +inf is not allowed");
        bias = -INFINITY;
    } else {
        double x;
        if (cli_parse_float("--logit-bias", end, &x)) return -1;
        bias = (float)x;
    }
    if (o->n_bias == BS_ENGINE_MAX_BIAS) return bs_error("--logit-bias: at most %d", BS_ENGINE_MAX_BIAS);
    o->bias_id[o->n_bias] = (int32_t)id;
    o->bias[o->n_bias++] = bias;
    return 0;
}

int cli_gen_parse_sampling(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    bs_sampler_params *p = &o->sp;
    static const struct { const char *name; size_t off; } fopts[] = {
        {"--temp", offsetof(bs_sampler_params, temp)},
        {"--top-p", offsetof(bs_sampler_params, top_p)},
        {"--min-p", offsetof(bs_sampler_params, min_p)},
        {"--repeat-penalty", offsetof(bs_sampler_params, repeat_penalty)},
        {"--presence-penalty", offsetof(bs_sampler_params, presence_penalty)},
        {"--frequency-penalty", offsetof(bs_sampler_params, frequency_penalty)},
        {"--dry-multiplier", offsetof(bs_sampler_params, dry_multiplier)},
        {"--dry-base", offsetof(bs_sampler_params, dry_base)},
    };
    static const struct { const char *name; size_t off; long lo; } iopts[] = {
        {"--top-k", offsetof(bs_sampler_params, top_k), -1},
        {"--repeat-last-n", offsetof(bs_sampler_params, penalty_last_n), -1},
        {"--dry-allowed-length", offsetof(bs_sampler_params, dry_allowed_length), 0},
        {"--dry-penalty-last-n", offsetof(bs_sampler_params, dry_penalty_last_n), -1},
    };
    int sr = lora_parse(o, argc, argv, i);
    if (sr) return sr;
    for (size_t k = 0; k < BS_ARRAY_LEN(fopts); k++) {
        if (strcmp(a, fopts[k].name)) continue;
        const char *v = cli_value(argc, argv, i);
        double x;
        if (!v || cli_parse_float(a, v, &x)) return -1;
        *(float *)((char *)p + fopts[k].off) = (float)x;
        return 1;
    }
    for (size_t k = 0; k < BS_ARRAY_LEN(iopts); k++) {
        if (strcmp(a, iopts[k].name)) continue;
        const char *v = cli_value(argc, argv, i);
        long x;
        if (!v || cli_parse_int(a, v, iopts[k].lo, INT32_MAX, &x)) return -1;
        *(int32_t *)((char *)p + iopts[k].off) = (int32_t)x;
        return 1;
    }
    const char *v;
    if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = true;
    } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        char *end;
        unsigned long long s = strtoull(v, &end, 10);
        if (end == v || *end || v[0] == '-') return bs_error("%s: '%s' is not a seed", a, v);
        o->sp.seed = s;
        o->seed_set = true;
    } else if (!strcmp(a, "--dry-sequence-breaker")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (o->n_breakers < 0) o->n_breakers = 0;
        if (!strcmp(v, "none")) o->n_breakers = 0;
        else if (o->n_breakers == BS_GEN_MAX_BREAKERS) return bs_error("too many DRY breakers");
        else o->breakers[o->n_breakers++] = v;
    } else if (!strcmp(a, "--logit-bias") || !strcmp(a, "-l")) {
        if (!(v = cli_value(argc, argv, i)) || parse_bias(o, v)) return -1;
    } else {
        return 0;
    }
    return 1;
}

int cli_gen_parse(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    int sr = spec_parse(o, argc, argv, i);
    if (sr) return sr;
    if ((sr = cli_gen_guard_parse(o, argc, argv, i))) return sr;
    if ((sr = cli_gen_parse_sampling(o, argc, argv, i))) return sr;
    if ((sr = cli_gen_parse_context(o, argc, argv, i))) return sr;
    const char *v;
    long x;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!(o->model = cli_value(argc, argv, i))) return -1;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(a, v, 1, 512, &x)) return -1;
        o->n_threads = (int)x;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(a, v, 1, INT32_MAX, &x)) return -1;
        o->n_ctx = (int)x;
    } else if (!strcmp(a, "--no-mmap")) {
        o->no_mmap = true;
    } else if (!strcmp(a, "--tokenizer-normalize")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_normalize(v, &o->normalize_set, &o->normalize)) return -1;
    } else {
        return 0;
    }
    return 1;
}

int cli_gen_parse_context(bs_engine_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long x;
    if (!strcmp(a, "--context-shift")) {
        o->context_shift = true;
    } else if (!strcmp(a, "--keep")) {
        if (!(v = cli_value(argc, argv, i)) || cli_parse_int(a, v, 0, INT32_MAX, &x)) return -1;
        o->n_keep = (int)x;
    } else {
        return 0;
    }
    return 1;
}

void cli_gen_cap_ctx(bs_engine_opts *o) {
    if (o->n_ctx <= 0 || !o->model) return;
    gguf_file *f = gguf_open(o->model, GGUF_OPEN_META_ONLY);
    uint32_t train = 0;
    if (f && gguf_get_u32(f, "qwen35.context_length", &train) == 0 && train > 0 && (uint32_t)o->n_ctx > train) {
        fprintf(stderr, "warning: -c %d is more than the model's training context of %u tokens: using %u\n",
                o->n_ctx, train, train);
        o->n_ctx = (int)train;
    }
    gguf_close(f);
    bs_clear_error();
}
