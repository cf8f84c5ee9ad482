/* cli_spec.c: speculative-decoding options, drafter setup and the speculative generation loop
 * of `run` / `chat` (see cli_spec.h, cli_spec_loop.h). The loop keeps cli_gen_loop's contract
 * exactly (same stops, same streaming, session ends holding every token but the last), so the
 * commands behave the same with or without a drafter. */
#include "cli_spec_loop.h"
#include "cli.h"
#include "qwen35.h"
#include "session.h"
#include "spec_cost_cache.h"
#include "gguf.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_spec_defaults(cli_spec_opts *o) {
    memset(o, 0, sizeof *o);
    o->draft_max = BS_DRAFT_AUTO;
}

void cli_spec_help(void) {
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

int cli_spec_parse(cli_spec_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
        if (!(o->drafter = cli_value(argc, argv, i))) return -1;
    } else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        long x;
        if (!strcmp(v, "auto")) o->draft_max = BS_DRAFT_AUTO;
        else if (cli_parse_int(a, v, 0, BS_DSPARK_MAX_BLOCK, &x)) return -1;
        else o->draft_max = (int)x;
        o->draft_max_set = true;
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

cli_spec *cli_spec_open(const cli_spec_opts *o, bs_model *target, bs_session *sess) {
    double t0 = bs_time();
    cli_spec *c = bs_xcalloc(1, sizeof *c);
    c->o = *o;
    if (!(c->d = bs_dspark_load(o->drafter, NULL))) goto fail;
    if (bs_dspark_check_pair(c->d, target)) {
        bs_error_prefix("%s does not fit the target: ", o->drafter);
        goto fail;
    }
    if (o->draft_max > c->d->hp.block_size) {
        bs_error("--draft-max %d exceeds the drafter's block size %d", o->draft_max, c->d->hp.block_size);
        goto fail;
    }
    int shared = bs_dspark_share_embeddings(c->d, target, o->share_embeddings);
    bs_log(shared ? 1 : 2, "drafter: %s%s%s from the target\n", shared ? "borrowing" : "nothing borrowed",
           c->d->embd_borrowed ? " token_embd" : "", c->d->output_borrowed ? " output" : "");
    bs_spec_params sp = {.draft_max = o->draft_max, .conf_cut = o->no_conf ? 0 : 1, .draft_window = o->draft_window};
    if (!(c->sp = bs_spec_new(sess, c->d, &sp))) goto fail;
    c->t_load = bs_time() - t0;
    return c;
fail:
    cli_spec_close(c);
    return NULL;
}

void cli_spec_close(cli_spec *c) {
    if (!c) return;
    bs_spec_free(c->sp);
    bs_dspark_free(c->d);
    free(c);
}

int cli_spec_prompt(cli_gen *g, const int32_t *prompt, int n, cli_gen_stats *st) {
    memset(st, 0, sizeof *st);
    const int n_ctx = bs_session_n_ctx(g->sess), n_past = bs_session_n_past(g->sess);
    if (n < 1) return bs_error(n_past ? "nothing new to evaluate" : "empty prompt");
    if ((long)n_past + n >= n_ctx)
        return bs_error("the prompt is %d tokens but the context holds %d (use --ctx)", n_past + n, n_ctx);
    double t0 = bs_time();
    if (bs_spec_prompt(g->spec->sp, prompt, n, g->logits)) return bs_error_prefix("evaluating the prompt: ");
    st->t_prompt = bs_time() - t0;
    st->n_prompt = n;
    bs_sampler_accept_many(g->smp, prompt, (size_t)n);
    return 0;
}

bool cli_spec_is_eog(void *ud, int32_t id) { return bs_token_is_eog(ud, id); }

/* Store and stream one token; false when it ends generation (EOG). */
static bool push(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st, bs_detok *dt, size_t *cap, int32_t id,
                 int *rc) {
    if (!r->ignore_eos && bs_token_is_eog(g->tok, id)) {
        st->stop = GEN_STOP_EOG;
        return false;
    }
    if ((size_t)st->n_gen == *cap) st->tokens = bs_xrealloc(st->tokens, (*cap *= 2) * sizeof *st->tokens);
    st->tokens[st->n_gen++] = id;
    const char *text;
    size_t len;
    if (bs_detok_push(dt, id, &text, &len) < 0) {
        *rc = -1;
        return false;
    }
    if (r->emit) r->emit(r->ud, id, text, len);
    return true;
}

bool cli_spec_should_stop(const cli_gen *g, const cli_gen_run *r, cli_gen_stats *st) {
    if (r->interrupt && *r->interrupt) st->stop = GEN_STOP_INTERRUPT;
    else if (r->n_predict >= 0 && st->n_gen >= r->n_predict) st->stop = GEN_STOP_LENGTH;
    else if (bs_session_n_past(g->sess) >= bs_session_n_ctx(g->sess)) st->stop = GEN_STOP_CTX;
    else return false;
    return true;
}

static void log_depth(const cli_spec *c, const char *when) {
    if (bs_log_level < 2) return;
    char buf[512];
    bs_depth_describe(bs_spec_get_depth(c->sp), buf, sizeof buf);
    bs_log(2, "speculative (%s): %s\n", when, buf);
}

int cli_spec_prepare(cli_gen *g, int32_t token) {
    cli_spec *c = g->spec;
    if (c->o.draft_max != BS_DRAFT_AUTO) return 0;
    const char *tp = g->model->file->path;
    const int nt = bs_pool_size(g->sess->pool);
    if (bs_cost_cache_load(bs_spec_depth_mut(c->sp), tp, c->o.drafter, nt)) {
        log_depth(c, "costs from the cache");
        return 0;
    }
    if (bs_spec_calibrate_upto(c->sp, token, 1)) return -1;   /* deeper ones when first wanted */
    bs_cost_cache_store(bs_spec_get_depth(c->sp), tp, c->o.drafter, nt);
    log_depth(c, "measured");
    return 0;
}

void cli_spec_note_parking(cli_spec *c, bool *parked) {
    if (bs_spec_get_depth(c->sp)->parked == *parked) return;
    *parked = !*parked;
    log_depth(c, *parked ? "parked" : "drafting again");
}

int cli_spec_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st) {
    cli_spec *c = g->spec;
    bs_detok *dt = cli_gen_detok_open(g);
    if (!dt) return -1;
    size_t cap = 64;
    st->tokens = bs_xmalloc(cap * sizeof *st->tokens);
    int32_t out[BS_DSPARK_MAX_BLOCK + 1];
    int rc = 0;
    double t0 = bs_time();
    int32_t id = -1;
    if (!cli_spec_should_stop(g, r, st) && (id = bs_sampler_sample(g->smp, g->logits)) < 0) rc = -1;
    if (id >= 0 && push(g, r, st, dt, &cap, id, &rc)) {
        bs_sampler_accept(g->smp, id);
        if (cli_spec_prepare(g, id)) rc = -1;
        bool parked = false;
        while (rc == 0 && !cli_spec_should_stop(g, r, st)) {
            const int left = r->n_predict < 0 ? BS_DSPARK_MAX_BLOCK + 1 : r->n_predict - st->n_gen;
            const int m = bs_spec_round(c->sp, g->smp, id, left, r->ignore_eos ? NULL : cli_spec_is_eog, g->tok, out);
            if (m < 0) { bs_error_prefix("decoding: "); rc = -1; break; }
            st->n_decode++;
            int k = 0;
            while (k < m && push(g, r, st, dt, &cap, out[k], &rc)) k++;
            if (k < m) break;
            id = out[m - 1];
            cli_spec_note_parking(c, &parked);
        }
    }
    cli_gen_detok_close(dt, r);
    st->t_gen = bs_time() - t0;
    log_depth(c, "end");
    if (c->o.draft_max == BS_DRAFT_AUTO)   /* the acceptance this pair ended with, for the next run */
        bs_cost_cache_store(bs_spec_get_depth(c->sp), g->model->file->path, c->o.drafter, bs_pool_size(g->sess->pool));
    return rc;
}

void cli_spec_print_stats(const cli_spec *c, const cli_gen_stats *st) {
    const bs_spec_stats *s = bs_spec_get_stats(c->sp);
    const bs_spec_depth *d = bs_spec_get_depth(c->sp);
    fprintf(stderr, "bitspark: speculative: drafter load %.2f ms, draft-max %s", c->t_load * 1e3,
            c->o.draft_max == BS_DRAFT_AUTO ? "auto" : "");
    if (c->o.draft_max != BS_DRAFT_AUTO) fprintf(stderr, "%d", c->o.draft_max);
    fprintf(stderr, ", block %d\n", c->d->hp.block_size);
    fprintf(stderr, "bitspark: n_drafted = %ld, n_accepted = %ld, acceptance = %.2f%%, rounds = %ld "
            "(%ld drafting), mean accepted per drafting round = %.3f, tokens per round = %.3f\n",
            s->n_drafted, s->n_accepted, s->n_drafted ? 100.0 * s->n_accepted / s->n_drafted : 0.0, s->n_rounds,
            s->n_draft_rounds, s->n_draft_rounds ? (double)s->n_accepted / s->n_draft_rounds : 0.0,
            s->n_rounds ? (double)s->n_tokens / s->n_rounds : 0.0);
    fprintf(stderr, "bitspark: time draft %.2f ms, verify %.2f ms, rollback %.2f ms, drafter context %.2f ms; "
            "%.2f tokens per second\n", s->t_draft * 1e3, s->t_verify * 1e3, s->t_rollback * 1e3, s->t_append * 1e3,
            st->t_gen > 0 ? st->n_gen / st->t_gen : 0.0);
    if (c->o.draft_max == BS_DRAFT_AUTO)
        fprintf(stderr, "bitspark: auto depth: p = %.3f, %ld parked rounds, %ld probes, %ld rounds trimmed by confidence\n",
                d->p, d->n_parked, d->n_probes, d->n_trimmed);
}
