/* cli_gen.c: the options every generating command shares (model and session, sampling,
 * speculative decoding, the doom-loop guard, LoRA adapters), parsed into bs_engine_opts
 * (generate/engine.h). */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
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

/* --lora A,B,...: llama-server's list form, each entry FILE[:SCALE] (kept in a static arena: the
 * options live as long as the process, as argv's strings do). */
static int add_lora_list(bs_engine_opts *o, const cli_arg *a) {
    static char arena[8192];
    static size_t used;
    for (const char *p = a->s; *p;) {
        const size_t k = strcspn(p, ",");
        if (k) {
            if (used + k + 1 > sizeof arena) return bs_error("%s: the adapter list is too long", a->name);
            if (o->n_lora == BS_ENGINE_MAX_LORA) return bs_error("%s: at most %d adapters", a->name, BS_ENGINE_MAX_LORA);
            memcpy(arena + used, p, k);
            arena[used + k] = 0;
            o->lora[o->n_lora] = arena + used;
            o->lora_scale[o->n_lora] = 1.0f;
            o->lora_has_scale[o->n_lora++] = false;
            used += k + 1;
        }
        p += k + (p[k] == ',');
    }
    return 0;
}

static int add_lora(bs_engine_opts *o, const cli_arg *a) {
    if (!a->s2 && (strchr(a->s, ',') || a->opt->id == OPT_LORA_SCALED)) return add_lora_list(o, a);   /* (FILE:SCALE,...) */
    if (o->n_lora == BS_ENGINE_MAX_LORA) return bs_error("%s: at most %d adapters", a->name, BS_ENGINE_MAX_LORA);
    o->lora[o->n_lora] = a->s;
    o->lora_scale[o->n_lora] = 1.0f;
    o->lora_has_scale[o->n_lora] = false;
    if (a->s2) {
        double x;
        if (cli_parse_float(a->name, a->s2, &x)) return -1;
        o->lora_scale[o->n_lora] = (float)x;
        o->lora_has_scale[o->n_lora] = true;
    }
    o->n_lora++;
    return 0;
}

static int add_breaker(bs_engine_opts *o, const char *v) {
    if (o->n_breakers < 0) o->n_breakers = 0;
    if (!strcmp(v, "none")) o->n_breakers = 0;
    else if (o->n_breakers == BS_GEN_MAX_BREAKERS) return bs_error("too many DRY breakers");
    else o->breakers[o->n_breakers++] = v;
    return 0;
}

int cli_parse_normalize(const char *v, bool *set, bs_norm_mode *mode) {
    *set = strcmp(v, "auto") != 0;
    if (*set && bs_norm_from_name(v, mode)) return bs_error_prefix("--tokenizer-normalize: ");
    return 0;
}

/* The sampler's float and int fields, by option id. */
static float *sp_float(bs_sampler_params *p, int id) {
    switch (id) {
    case OPT_TEMP: return &p->temp;
    case OPT_TOP_P: return &p->top_p;
    case OPT_MIN_P: return &p->min_p;
    case OPT_REPEAT_PENALTY: return &p->repeat_penalty;
    case OPT_PRESENCE_PENALTY: return &p->presence_penalty;
    case OPT_FREQUENCY_PENALTY: return &p->frequency_penalty;
    case OPT_DRY_MULTIPLIER: return &p->dry_multiplier;
    case OPT_DRY_BASE: return &p->dry_base;
    case OPT_TYPICAL: return &p->typical_p;
    case OPT_TOP_N_SIGMA: return &p->top_n_sigma;
    case OPT_XTC_PROBABILITY: return &p->xtc_probability;
    case OPT_XTC_THRESHOLD: return &p->xtc_threshold;
    case OPT_DYNATEMP_RANGE: return &p->dynatemp_range;
    case OPT_DYNATEMP_EXP: return &p->dynatemp_exponent;
    case OPT_MIROSTAT_LR: return &p->mirostat_eta;
    case OPT_MIROSTAT_ENT: return &p->mirostat_tau;
    default: return NULL;
    }
}

static int32_t *sp_int(bs_sampler_params *p, int id) {
    switch (id) {
    case OPT_TOP_K: return &p->top_k;
    case OPT_REPEAT_LAST_N: return &p->penalty_last_n;
    case OPT_DRY_ALLOWED_LENGTH: return &p->dry_allowed_length;
    case OPT_DRY_PENALTY_LAST_N: return &p->dry_penalty_last_n;
    case OPT_MIROSTAT: return &p->mirostat;
    default: return NULL;
    }
}

static int *guard_int(bs_loop_guard_params *p, int id) {
    switch (id) {
    case OPT_LOOP_MIN_REPEATS: return &p->det.min_repeats;
    case OPT_LOOP_MIN_CHARS: return &p->det.min_chars;
    case OPT_LOOP_MAX_PERIOD: return &p->det.max_period;
    case OPT_LOOP_MAX_REWINDS: return &p->max_rewinds;
    case OPT_LOOP_CKPT_EVERY: return &p->ckpt_every;
    case OPT_LOOP_CKPT_COUNT: return &p->ckpt_count;
    default: return NULL;
    }
}

int cli_gen_apply(bs_engine_opts *o, const cli_arg *a) {
    if (!a->opt) return 0;
    const int id = a->opt->id;
    float *f = sp_float(&o->sp, id);
    int32_t *n32 = sp_int(&o->sp, id);
    int *g = guard_int(&o->loop, id);
    if (f) *f = (float)a->f;
    else if (n32) *n32 = (int32_t)a->n;
    else if (g) *g = (int)a->n;
    else switch (id) {
    case OPT_MODEL: o->model = a->s; break;
    case OPT_THREADS: o->n_threads = a->n > 0 ? (int)a->n : o->n_threads; break;   /* -1: all cores (the default) */
    case OPT_CTX: o->n_ctx = a->n == 0 ? -1 : (int)a->n; break;         /* serve's 0: the model's context */
    case OPT_NO_MMAP: o->no_mmap = true; break;
    case OPT_DEVICE: o->device = strcmp(a->s, "none") ? a->s : "cpu"; break;   /* llama.cpp's -dev none */
    case OPT_NORMALIZE: return cli_parse_normalize(a->s, &o->normalize_set, &o->normalize) ? -1 : 1;
    case OPT_CONTEXT_SHIFT: o->context_shift = true; break;
    case OPT_KEEP: o->n_keep = a->n < 0 ? INT32_MAX : (int)a->n; break;   /* -1: all a shift can keep */
    case OPT_DRY_BREAKER: return add_breaker(o, a->s) ? -1 : 1;
    case OPT_GEN_SAMPLERS: {   /* (stages left out do not run: the order says so, whatever the other options) */
        bool letters;
        return cli_parse_samplers(a->name, a->s, o->sp.order, &letters) ? -1 : 1;
    }
    case OPT_LOGIT_BIAS: return parse_bias(o, a->s) ? -1 : 1;
    case OPT_IGNORE_EOS: o->ignore_eos = true; break;
    case OPT_SEED:   /* -1: a seed from the clock, as without --seed (llama.cpp's LLAMA_DEFAULT_SEED) */
        o->seed_set = a->n >= 0;
        o->sp.seed = a->n >= 0 ? (uint64_t)a->n : 0;
        break;
    case OPT_LORA: case OPT_LORA_SCALED: return add_lora(o, a) ? -1 : 1;
    case OPT_MODEL_DRAFT: o->drafter = a->s; break;
    case OPT_DRAFT_MAX: o->draft_max = a->n < 0 ? BS_DRAFT_AUTO : (int)a->n; break;
    case OPT_DRAFT_SHARE_EMBD: o->share_embeddings = true; break;
    case OPT_DRAFT_NO_CONF: o->no_conf = true; break;
    case OPT_DRAFT_WINDOW: o->draft_window = (int)a->n; break;
    case OPT_LOOP_GUARD: o->loop.mode = bs_loop_guard_mode_parse(a->s); break;
    default: return 0;
    }
    return 1;
}

int cli_gen_check(const bs_engine_opts *o) {
    if (!o->model) return bs_error("no model given (-m FILE)");
    if (!o->drafter && (o->draft_max != BS_DRAFT_AUTO || o->share_embeddings || o->no_conf || o->draft_window))
        return bs_error("--draft-max, --draft-share-embeddings, --draft-no-conf and --draft-window need a "
                        "drafter (-md FILE)");
    return 0;
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
