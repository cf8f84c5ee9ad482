/* engine.c: opening a target (+ LoRA, + drafter) with one generator, tokenizing and rendering
 * prompts, streaming a generation and printing its statistics (engine.h). */
#include "generate/engine.h"
#include "generate/drafter.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "formats/gguf.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void bs_engine_opts_init(bs_engine_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = bs_sampler_default_params();
    o->n_breakers = -1;
    o->draft_max = BS_DRAFT_AUTO;
    o->loop = bs_loop_guard_default_params();
}

int bs_loras_attach(bs_model *m, const bs_engine_opts *o, struct bs_lora **loras, int *n) {
    *n = 0;
    for (int k = 0; k < o->n_lora; k++) {
        char *path;
        float scale;
        if (o->lora_has_scale[k]) {
            path = bs_xstrdup(o->lora[k]);
            scale = o->lora_scale[k];
        } else if (bs_lora_parse_arg(o->lora[k], &path, &scale)) {
            return -1;
        }
        bs_lora *l = bs_lora_load(path, m->file);
        free(path);
        if (!l) return -1;
        loras[(*n)++] = l;
        if (bs_lora_attach(m, l, scale)) return -1;
        bs_log(1, "LoRA %s: %d matrices, alpha %g, scale %g\n", l->path, l->n, (double)l->alpha, (double)scale);
    }
    return 0;
}

void bs_loras_detach(bs_model *m, struct bs_lora **loras, int n) {
    if (m) bs_lora_detach(m);
    for (int k = 0; k < n; k++) bs_lora_free(loras[k]);
}

static int open_drafter(bs_engine *e) {
    const bs_engine_opts *o = &e->o;
    const double t0 = bs_time();
    if (!(e->drafter = bs_gen_drafter_open(o->drafter, e->model, o->draft_max, o->share_embeddings))) return -1;
    e->t_draft_load = bs_time() - t0;
    return 0;
}

int bs_engine_open(bs_engine *e, const bs_engine_opts *o) {
    memset(e, 0, sizeof *e);
    e->o = *o;
    if (!o->model) return bs_error("no model given (-m FILE)");
    const double t0 = bs_time();
    bs_model_params mp = {.no_mmap = o->no_mmap, .device = o->device};
    if (!(e->model = bs_model_load(o->model, &mp))) goto fail;
    if (!(e->tok = bs_tokenizer_load(e->model))) goto fail;
    if (o->normalize_set && bs_tokenizer_set_normalize(e->tok, o->normalize)) goto fail;
    e->n_vocab = bs_model_n_vocab(e->model);
    if (bs_loras_attach(e->model, o, e->loras, &e->n_loras)) goto fail;
    if (o->drafter && open_drafter(e)) goto fail;
    bs_gen_params gp = {.n_ctx = o->n_ctx, .n_threads = o->n_threads, .undo = o->undo, .drafter = e->drafter,
                        .drafter_path = o->drafter, .draft_max = o->draft_max, .no_conf = o->no_conf,
                        .draft_window = o->draft_window};
    if (!(e->gen = bs_gen_new(e->model, e->tok, &gp))) goto fail;
    const int n_ctx = bs_session_n_ctx(bs_gen_session(e->gen));
    if (o->n_ctx > 0 && n_ctx < o->n_ctx) bs_log(1, "context capped at %d (the model's training context)\n", n_ctx);
    if (!o->seed_set) {
        e->o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        if (o->sp.temp > 0) bs_log(1, "seed: %llu\n", (unsigned long long)e->o.sp.seed);
    }
    e->t_load = bs_time() - t0;
    return 0;
fail:
    bs_engine_close(e);
    return -1;
}

void bs_engine_close(bs_engine *e) {
    bs_gen_free(e->gen);
    bs_loras_detach(e->model, e->loras, e->n_loras);
    bs_dspark_free(e->drafter);
    bs_tokenizer_free(e->tok);
    bs_model_free(e->model);
    memset(e, 0, sizeof *e);
}

void bs_engine_request(const bs_engine *e, bs_gen_request *r) {
    const bs_engine_opts *o = &e->o;
    bs_gen_request_init(r);
    r->sp = o->sp;
    r->bias_id = o->bias_id;
    r->bias = o->bias;
    r->n_bias = o->n_bias;
    r->breakers = o->breakers;
    r->n_breakers = o->n_breakers;
    r->ignore_eos = o->ignore_eos;
    r->context_shift = o->context_shift;
    r->n_keep = o->n_keep;
    r->loop = o->loop;
    r->keep_sampler = true;
}

int bs_engine_tokenize(const bs_engine *e, const char *text, size_t len, int32_t **ids, size_t *n) {
    return bs_tokenize_prompt(e->tok, text, len, ids, n);
}

char *bs_engine_render(bs_engine *e, const bs_chat_msg *msgs, int n, int enable_thinking,
                       bool add_generation_prompt, size_t *len) {
    if (!e->tmpl_ready) {
        bs_chat_template_detect(gguf_get_str(e->model->file, "tokenizer.chat_template"), &e->tmpl);
        e->tmpl_ready = true;
        bs_log(2, "chat template: %s\n", bs_chat_kind_name(e->tmpl.kind));
    }
    bs_chat_opts co = {.add_generation_prompt = add_generation_prompt, .enable_thinking = enable_thinking};
    char *out = bs_chat_render(&e->tmpl, msgs, (size_t)n, &co);
    if (!out) {
        bs_error_prefix("chat template: ");
        return NULL;
    }
    *len = strlen(out);
    return out;
}

typedef struct {
    void (*emit)(void *ud, const char *text, size_t len);
    void *ud;
    size_t sent;
} streamer;

static void stream_safe(void *ud, bs_gen *g) {
    streamer *s = ud;
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    if (o.n_safe > s->sent && s->emit) s->emit(s->ud, o.text + s->sent, o.n_safe - s->sent);
    if (o.n_safe > s->sent) s->sent = o.n_safe;
}

int bs_engine_generate(bs_engine *e, const bs_gen_request *r, const int32_t *prompt, int n,
                       void (*emit)(void *ud, const char *text, size_t len), void *ud) {
    if (bs_gen_begin(e->gen, r, prompt, n)) return -1;
    streamer s = {emit, ud, 0};
    return bs_gen_run(e->gen, stream_safe, &s);
}

static void print_spec_stats(const bs_engine *e, const bs_gen_stats *st) {
    bs_spec *sp = bs_gen_spec(e->gen);
    const bs_spec_stats *s = bs_spec_get_stats(sp);
    const bs_spec_depth *d = bs_spec_get_depth(sp);
    const bool aut = e->o.draft_max == BS_DRAFT_AUTO;
    fprintf(stderr, "bitspark: speculative: drafter load %.2f ms, draft-max %s", e->t_draft_load * 1e3,
            aut ? "auto" : "");
    if (!aut) fprintf(stderr, "%d", e->o.draft_max);
    fprintf(stderr, ", block %d\n", e->drafter->hp.block_size);
    fprintf(stderr, "bitspark: n_drafted = %ld, n_accepted = %ld, acceptance = %.2f%%, rounds = %ld "
            "(%ld drafting), mean accepted per drafting round = %.3f, tokens per round = %.3f\n",
            s->n_drafted, s->n_accepted, s->n_drafted ? 100.0 * s->n_accepted / s->n_drafted : 0.0, s->n_rounds,
            s->n_draft_rounds, s->n_draft_rounds ? (double)s->n_accepted / s->n_draft_rounds : 0.0,
            s->n_rounds ? (double)s->n_tokens / s->n_rounds : 0.0);
    fprintf(stderr, "bitspark: time draft %.2f ms, verify %.2f ms, rollback %.2f ms, drafter context %.2f ms; "
            "%.2f tokens per second\n", s->t_draft * 1e3, s->t_verify * 1e3, s->t_rollback * 1e3, s->t_append * 1e3,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0);
    if (aut)
        fprintf(stderr, "bitspark: auto depth: p = %.3f, %ld parked rounds, %ld probes, %ld rounds trimmed by confidence\n",
                d->p, d->n_parked, d->n_probes, d->n_trimmed);
}

void bs_engine_print_stats(const bs_engine *e, const bs_gen_stats *st) {
    const double tp = st->t_prompt * 1e3, tg = st->t_gen * 1e3;
    fprintf(stderr, "\nbitspark:        load time = %10.2f ms\n", e->t_load * 1e3);
    fprintf(stderr, "bitspark: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
            tp, st->n_prompt, st->n_prompt ? tp / st->n_prompt : 0.0, tp > 0 ? 1e3 * st->n_prompt / tp : 0.0);
    fprintf(stderr, "bitspark:        eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
            tg, st->n_gen, st->n_gen ? tg / st->n_gen : 0.0, tg > 0 ? 1e3 * st->n_gen / tg : 0.0);
    fprintf(stderr, "bitspark: stopped by %s; peak RSS %.1f MiB\n", bs_gen_stop_name(st->stop),
            (double)bs_peak_rss() / (1 << 20));
    if (e->drafter) print_spec_stats(e, st);
    if (st->loop.mode != BS_LOOP_GUARD_OFF) {
        char line[256];
        bs_loop_guard_result_format(&st->loop, line, sizeof line);
        fprintf(stderr, "bitspark: %s\n", line);
    }
}
