/* cli_gen_guard.c: the doom-loop guard in the generation loop of `run` and `chat`: its options
 * (--loop-guard ...) and the guarded variant of cli_gen_loop (see cli_gen.h, loop_guard.h).
 *
 * In rewind mode, generated text is streamed out only once no rewind can reach it any more
 * (bs_loop_guard_n_safe), so what the user sees never contains a loop that is later undone. */
#include "cli.h"
#include "cli_gen.h"
#include "util.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_gen_guard_parse(cli_gen_opts *o, int argc, char **argv, int *i) {
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

int cli_gen_guard_open(cli_gen *g, const cli_gen_opts *o) {
    if (o->loop.mode == BS_LOOP_GUARD_OFF) return 0;
    if (!(g->guard = bs_loop_guard_new(&o->loop, g->sess, g->smp, g->tok))) return -1;
    return 0;
}

int cli_gen_guard_emit(bs_detok *dt, const cli_gen_run *r, const cli_gen_stats *st, int *n_emitted, int n) {
    const char *text;
    size_t len;
    for (; *n_emitted < n; ++*n_emitted) {
        int32_t id = st->tokens[*n_emitted];
        if (bs_detok_push(dt, id, &text, &len) < 0) return -1;
        if (r->emit) r->emit(r->ud, id, text, len);
    }
    return 0;
}

int cli_gen_guard_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st) {
    bs_detok *dt = cli_gen_detok_open(g);
    if (!dt) return -1;
    size_t cap = 64;
    st->tokens = bs_xmalloc(cap * sizeof *st->tokens);
    const int n_ctx = bs_session_n_ctx(g->sess);
    int rc = 0, n_emitted = 0;
    double t0 = bs_time();
    bs_loop_guard_begin(g->guard, g->logits);
    for (;;) {
        if (r->interrupt && *r->interrupt) { st->stop = GEN_STOP_INTERRUPT; break; }
        if (r->n_predict >= 0 && st->n_gen >= r->n_predict) { st->stop = GEN_STOP_LENGTH; break; }
        int32_t id = bs_sampler_sample(g->smp, g->logits);
        if (id < 0) { rc = -1; break; }
        if (!r->ignore_eos && bs_token_is_eog(g->tok, id)) { st->stop = GEN_STOP_EOG; break; }
        bs_sampler_accept(g->smp, id);
        if ((size_t)st->n_gen == cap) st->tokens = bs_xrealloc(st->tokens, (cap *= 2) * sizeof *st->tokens);
        st->tokens[st->n_gen++] = id;
        int keep, act = bs_loop_guard_push(g->guard, id, g->logits, &keep);
        if (act < 0) { rc = -1; break; }
        if (act == BS_LOOP_STOP) { st->stop = GEN_STOP_LOOP; break; }
        if (act == BS_LOOP_REWOUND) { st->n_gen = keep; continue; }
        if (cli_gen_guard_emit(dt, r, st, &n_emitted, bs_loop_guard_n_safe(g->guard))) { rc = -1; break; }
        if (r->interrupt && *r->interrupt) { st->stop = GEN_STOP_INTERRUPT; break; }
        if (r->n_predict >= 0 && st->n_gen >= r->n_predict) { st->stop = GEN_STOP_LENGTH; break; }
        if (bs_session_n_past(g->sess) >= n_ctx) { st->stop = GEN_STOP_CTX; break; }
        if (bs_eval(g->sess, &id, 1, BS_LOGITS_LAST, g->logits, NULL)) {
            bs_error_prefix("decoding: ");
            rc = -1;
            break;
        }
        st->n_decode++;
        bs_loop_guard_evaluated(g->guard, g->logits);
    }
    rc = cli_gen_guard_finish(g, dt, r, st, &n_emitted, rc);
    st->t_gen = bs_time() - t0;
    return rc;
}

int cli_gen_guard_finish(cli_gen *g, bs_detok *dt, const cli_gen_run *r, cli_gen_stats *st,
                         int *n_emitted, int rc) {
    if (!rc && cli_gen_guard_emit(dt, r, st, n_emitted, st->n_gen)) rc = -1;
    cli_gen_detok_close(dt, r);
    st->loop = *bs_loop_guard_result_get(g->guard);
    return rc;
}
