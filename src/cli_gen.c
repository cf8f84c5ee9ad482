/* cli_gen.c: model/sampling options, setup and the streaming generation loop of `run` and
 * `chat` (see cli_gen.h). */
#include "cli_gen.h"
#include "cli.h"
#include "cli_spec_loop.h"
#include "qwen35.h"
#include "util.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cli_gen_defaults(cli_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = bs_sampler_default_params();
    o->n_breakers = -1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = n > 0 ? (int)BS_MIN(n, 64) : 1;
    cli_spec_defaults(&o->spec);
    o->loop = bs_loop_guard_default_params();
}

void cli_gen_help(void) {
    printf(
        "model and session:\n"
        "  -m, --model FILE        qwen35 GGUF (Bonsai-27B Q1_0, Ternary-Bonsai Q2_0, ...)\n"
        "  -t, --threads N         threads (default: all cores)\n"
        "  -c, --ctx N             context size in tokens (default 4096, capped by the model)\n"
        "  --no-mmap               read the model into memory instead of mapping it\n"
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
    cli_spec_help();
    cli_gen_guard_help();
    cli_gen_lora_help();
}

static int parse_bias(cli_gen_opts *o, const char *v) {
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
    if (o->n_bias == CLI_GEN_MAX_BIAS) return bs_error("--logit-bias: at most %d", CLI_GEN_MAX_BIAS);
    o->bias_id[o->n_bias] = (int32_t)id;
    o->bias[o->n_bias++] = bias;
    return 0;
}

int cli_gen_parse(cli_gen_opts *o, int argc, char **argv, int *i) {
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
    int sr = cli_spec_parse(&o->spec, argc, argv, i);
    if (sr) return sr;
    if ((sr = cli_gen_guard_parse(o, argc, argv, i))) return sr;
    if ((sr = cli_gen_lora_parse(o, argc, argv, i))) return sr;
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
    } else if (!strcmp(a, "--ignore-eos")) {
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
        else if (o->n_breakers == CLI_GEN_MAX_BREAKERS) return bs_error("too many DRY breakers");
        else o->breakers[o->n_breakers++] = v;
    } else if (!strcmp(a, "--logit-bias") || !strcmp(a, "-l")) {
        if (!(v = cli_value(argc, argv, i)) || parse_bias(o, v)) return -1;
    } else {
        return 0;
    }
    return 1;
}

static int setup_sampler(cli_gen *g, const cli_gen_opts *o) {
    bs_sampler_params sp = o->sp;
    if (!o->seed_set) {
        sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (sp.temp > 0) bs_log(1, "seed: %llu\n", (unsigned long long)sp.seed);
    }
    if (!(g->smp = bs_sampler_new(&sp, g->n_vocab))) return -1;
    for (int k = 0; k < o->n_bias; k++)
        if (bs_sampler_set_logit_bias(g->smp, o->bias_id[k], o->bias[k])) return -1;
    /* ids the model can emit but the tokenizer cannot print */
    for (int32_t id = bs_tokenizer_n_vocab(g->tok); id < g->n_vocab; id++)
        bs_sampler_set_logit_bias(g->smp, id, -INFINITY);
    if (sp.dry_multiplier != 0.0f) {
        static const char *defaults[] = {"\n", ":", "\"", "*"};
        bs_sampler_vocab v = {g->tok, bs_tokenizer_piece_cb, bs_tokenizer_tokenize_cb};
        const char *const *b = o->n_breakers < 0 ? defaults : o->breakers;
        int nb = o->n_breakers < 0 ? 4 : o->n_breakers;
        if (bs_sampler_set_dry_breakers(g->smp, b, nb, &v)) return -1;
    }
    return 0;
}

int cli_gen_open(cli_gen *g, const cli_gen_opts *o) {
    memset(g, 0, sizeof *g);
    if (!o->model) return bs_error("no model given (-m FILE)");
    double t0 = bs_time();
    bs_model_params mp = {.no_mmap = o->no_mmap};
    if (!(g->model = bs_model_load(o->model, &mp))) goto fail;
    if (!(g->tok = bs_tokenizer_from_gguf(g->model->file))) {
        bs_error_prefix("%s: tokenizer: ", o->model);
        goto fail;
    }
    g->n_vocab = bs_model_n_vocab(g->model);
    if (cli_gen_lora_open(g, o)) goto fail;
    bs_session_params sp = {.n_ctx = o->n_ctx, .n_threads = o->n_threads};
    if (!(g->sess = bs_session_new(g->model, &sp))) goto fail;
    if (o->n_ctx > 0 && bs_session_n_ctx(g->sess) < o->n_ctx)
        bs_log(1, "context capped at %d (the model's training context)\n", bs_session_n_ctx(g->sess));
    if (o->spec.drafter && !(g->spec = cli_spec_open(&o->spec, g->model, g->sess))) goto fail;
    if (setup_sampler(g, o)) goto fail;
    if (cli_gen_guard_open(g, o)) goto fail;
    g->logits = bs_xmalloc((size_t)g->n_vocab * sizeof *g->logits);
    g->t_load = bs_time() - t0;
    return 0;
fail:
    cli_gen_close(g);
    return -1;
}

void cli_gen_close(cli_gen *g) {
    cli_spec_close(g->spec);
    bs_loop_guard_free(g->guard);
    cli_gen_lora_close(g);
    bs_sampler_free(g->smp);
    bs_session_free(g->sess);
    bs_tokenizer_free(g->tok);
    bs_model_free(g->model);
    free(g->logits);
    memset(g, 0, sizeof *g);
}

int cli_gen_tokenize(cli_gen *g, const char *text, size_t len, int32_t **ids, size_t *n) {
    int32_t *raw;
    size_t nr;
    if (bs_tokenize(g->tok, text, len, true, &raw, &nr) < 0) return bs_error_prefix("prompt: ");
    int32_t bos = bs_token_bos(g->tok);
    bool add = bs_tokenizer_add_bos(g->tok) && bos >= 0 && !(nr > 0 && raw[0] == bos);
    *n = nr + add;
    *ids = bs_xmalloc((*n ? *n : 1) * sizeof **ids);
    if (add) (*ids)[0] = bos;
    if (nr) memcpy(*ids + add, raw, nr * sizeof *raw);
    free(raw);
    return 0;
}

/* --- the generation loop ---------------------------------------------------------------------- */

int cli_gen_prompt(cli_gen *g, const int32_t *prompt, int n, cli_gen_stats *st) {
    if (g->spec) return cli_spec_prompt(g, prompt, n, st);
    memset(st, 0, sizeof *st);
    const int n_ctx = bs_session_n_ctx(g->sess), n_past = bs_session_n_past(g->sess);
    if (n < 1) return bs_error(n_past ? "nothing new to evaluate" : "empty prompt");
    if ((long)n_past + n >= n_ctx)
        return bs_error("the prompt is %d tokens but the context holds %d (use --ctx)", n_past + n,
                        n_ctx);
    double t0 = bs_time();
    if (bs_eval(g->sess, prompt, n, BS_LOGITS_LAST, g->logits, NULL))
        return bs_error_prefix("evaluating the prompt: ");
    st->t_prompt = bs_time() - t0;
    st->n_prompt = n;
    bs_sampler_accept_many(g->smp, prompt, (size_t)n);
    return 0;
}

int cli_gen_feed(cli_gen *g, const int32_t *tokens, int n) {
    if (n < 1) return 0;
    if (g->spec ? bs_spec_prompt(g->spec->sp, tokens, n, NULL) : bs_eval(g->sess, tokens, n, BS_LOGITS_NONE, NULL, NULL))
        return bs_error_prefix("evaluating the prompt: ");
    bs_sampler_accept_many(g->smp, tokens, (size_t)n);
    return 0;
}

int cli_gen_generate(cli_gen *g, const int32_t *prompt, int n, const cli_gen_run *r,
                     cli_gen_stats *st) {
    if (cli_gen_prompt(g, prompt, n, st)) return -1;
    return cli_gen_loop(g, r, st);
}

int cli_gen_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st) {
    if (g->spec) return g->guard ? cli_spec_guard_loop(g, r, st) : cli_spec_loop(g, r, st);
    if (g->guard) return cli_gen_guard_loop(g, r, st);
    bs_detok *dt = cli_gen_detok_open(g);
    if (!dt) return -1;
    size_t cap = 64;
    st->tokens = bs_xmalloc(cap * sizeof *st->tokens);
    const int n_ctx = bs_session_n_ctx(g->sess);
    const char *text;
    size_t len;
    int rc = 0;
    double t0 = bs_time();
    for (;;) {
        if (r->interrupt && *r->interrupt) { st->stop = GEN_STOP_INTERRUPT; break; }
        if (r->n_predict >= 0 && st->n_gen >= r->n_predict) { st->stop = GEN_STOP_LENGTH; break; }
        int32_t id = bs_sampler_sample(g->smp, g->logits);
        if (id < 0) { rc = -1; break; }
        if (!r->ignore_eos && bs_token_is_eog(g->tok, id)) { st->stop = GEN_STOP_EOG; break; }
        bs_sampler_accept(g->smp, id);
        if ((size_t)st->n_gen == cap) st->tokens = bs_xrealloc(st->tokens, (cap *= 2) * sizeof *st->tokens);
        st->tokens[st->n_gen++] = id;
        if (bs_detok_push(dt, id, &text, &len) < 0) { rc = -1; break; }
        if (r->emit) r->emit(r->ud, id, text, len);
        if (r->interrupt && *r->interrupt) { st->stop = GEN_STOP_INTERRUPT; break; }
        if (r->n_predict >= 0 && st->n_gen >= r->n_predict) { st->stop = GEN_STOP_LENGTH; break; }
        if (bs_session_n_past(g->sess) >= n_ctx) { st->stop = GEN_STOP_CTX; break; }
        if (bs_eval(g->sess, &id, 1, BS_LOGITS_LAST, g->logits, NULL)) {
            bs_error_prefix("decoding: ");
            rc = -1;
            break;
        }
        st->n_decode++;
    }
    cli_gen_detok_close(dt, r);
    st->t_gen = bs_time() - t0;
    return rc;
}

bs_detok *cli_gen_detok_open(const cli_gen *g) {
    bs_detok *dt = bs_detok_new(g->tok, false);
    if (!dt) return NULL;
    bs_detok_preserve(dt, "<think>");
    bs_detok_preserve(dt, "</think>");
    return dt;
}

void cli_gen_detok_close(bs_detok *dt, const cli_gen_run *r) {
    const char *text;
    size_t len;
    bs_detok_flush(dt, &text, &len);
    if (len && r->emit) r->emit(r->ud, -1, text, len);
    bs_detok_free(dt);
}

void cli_gen_print_stats(const cli_gen *g, const cli_gen_stats *st) {
    static const char *why[] = {"end of generation", "length limit", "context full", "interrupted", "a loop"};
    double tp = st->t_prompt * 1e3, tg = st->t_gen * 1e3;
    fprintf(stderr, "\nbitspark:        load time = %10.2f ms\n", g->t_load * 1e3);
    fprintf(stderr, "bitspark: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
            tp, st->n_prompt, st->n_prompt ? tp / st->n_prompt : 0.0,
            tp > 0 ? 1e3 * st->n_prompt / tp : 0.0);
    fprintf(stderr, "bitspark:        eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
            tg, st->n_gen, st->n_gen ? tg / st->n_gen : 0.0, tg > 0 ? 1e3 * st->n_gen / tg : 0.0);
    fprintf(stderr, "bitspark: stopped by %s; peak RSS %.1f MiB\n", why[st->stop],
            (double)bs_peak_rss() / (1 << 20));
    if (g->spec) cli_spec_print_stats(g->spec, st);
    if (g->guard) {
        char line[256];
        bs_loop_guard_result_format(&st->loop, line, sizeof line);
        fprintf(stderr, "bitspark: %s\n", line);
    }
}

/* --- chat ------------------------------------------------------------------------------------ */

char *cli_gen_render(cli_gen *g, const bs_chat_msg *msgs, int n, int enable_thinking,
                     bool add_generation_prompt, size_t *len) {
    if (!g->tmpl_ready) {
        bs_chat_template_detect(gguf_get_str(g->model->file, "tokenizer.chat_template"), &g->tmpl);
        g->tmpl_ready = true;
        bs_log(2, "chat template: %s\n", bs_chat_kind_name(g->tmpl.kind));
    }
    bs_chat_opts co = {.add_generation_prompt = add_generation_prompt,
                       .enable_thinking = enable_thinking};
    char *out = bs_chat_render(&g->tmpl, msgs, (size_t)n, &co);
    if (!out) {
        bs_error_prefix("chat template: ");
        return NULL;
    }
    *len = strlen(out);
    return out;
}
