/* cli_spec_guard.c: speculative decoding with the doom-loop guard (see cli_spec_loop.h).
 *
 * The guard sees exactly the token stream of plain decoding (speculative rounds are lossless),
 * one token at a time and in order, so it detects the same loops at the same tokens. A round's
 * tokens after the one that completes a loop are simply dropped. A rewind restores the target
 * from the guard's checkpoint and replays up to the rejected token (bit-exact, as without a
 * drafter); bs_spec_sync then crops the drafter's context to the same position, and the next
 * round drafts from the resampled token. Checkpoints are taken after rounds, with the verify
 * row that predicted the round's last token (batch-invariant kernels: a straight run's logits). */
#include "cli_spec_loop.h"
#include "session.h"
#include "util.h"

#include <stdlib.h>

typedef struct {
    cli_gen *g;
    const cli_gen_run *r;
    cli_gen_stats *st;
    size_t cap;
} guard_run;

/* Store generated token id and show it to the guard. Returns BS_LOOP_* (REWOUND: the guard has
 * put session, sampler and detector back and written the logits to sample from into
 * g->logits), or -1. EOG ends generation (GEN_STOP_EOG) and is reported as BS_LOOP_STOP. */
static int take(guard_run *gr, int32_t id) {
    cli_gen *g = gr->g;
    cli_gen_stats *st = gr->st;
    if (!gr->r->ignore_eos && bs_token_is_eog(g->tok, id)) {
        st->stop = GEN_STOP_EOG;
        return BS_LOOP_STOP;
    }
    if ((size_t)st->n_gen == gr->cap) st->tokens = bs_xrealloc(st->tokens, (gr->cap *= 2) * sizeof *st->tokens);
    st->tokens[st->n_gen++] = id;
    int keep, act = bs_loop_guard_push(g->guard, id, g->logits, &keep);
    if (act == BS_LOOP_STOP) st->stop = GEN_STOP_LOOP;
    if (act == BS_LOOP_REWOUND) {
        st->n_gen = keep;
        bs_spec_sync(g->spec->sp);   /* drafter context back to the rewound position */
    }
    return act;
}

int cli_spec_guard_loop(cli_gen *g, const cli_gen_run *r, cli_gen_stats *st) {
    cli_spec *c = g->spec;
    bs_detok *dt = cli_gen_detok_open(g);
    if (!dt) return -1;
    guard_run gr = {g, r, st, 64};
    st->tokens = bs_xmalloc(gr.cap * sizeof *st->tokens);
    int32_t out[BS_DSPARK_MAX_BLOCK + 1];
    int rc = 0, n_emitted = 0, act = BS_LOOP_REWOUND;   /* REWOUND: sample from g->logits next */
    bool prepared = false, parked = false;
    int32_t id = -1;
    double t0 = bs_time();
    const int base = bs_session_n_past(g->sess);
    bs_loop_guard_begin(g->guard, g->logits);
    while (rc == 0 && !cli_spec_should_stop(g, r, st)) {
        if (act == BS_LOOP_REWOUND) {   /* start, or after a rewind: one plain draw */
            if ((id = bs_sampler_sample(g->smp, g->logits)) < 0) { rc = -1; break; }
            if (!r->ignore_eos && bs_token_is_eog(g->tok, id)) { st->stop = GEN_STOP_EOG; break; }
            bs_sampler_accept(g->smp, id);
            if ((act = take(&gr, id)) < 0) { rc = -1; break; }
            if (act == BS_LOOP_STOP) break;
            if (act == BS_LOOP_CONTINUE && !prepared) {
                prepared = true;
                if (cli_spec_prepare(g, id)) { rc = -1; break; }
            }
        } else {
            const int left = r->n_predict < 0 ? BS_DSPARK_MAX_BLOCK + 1 : r->n_predict - st->n_gen;
            const int m = bs_spec_round(c->sp, g->smp, id, left, r->ignore_eos ? NULL : cli_spec_is_eog, g->tok, out);
            if (m < 0) { bs_error_prefix("decoding: "); rc = -1; break; }
            st->n_decode++;
            for (int k = 0; k < m && act == BS_LOOP_CONTINUE; k++) act = take(&gr, out[k]);
            if (act < 0) { rc = -1; break; }
            if (act == BS_LOOP_STOP) {   /* keep the session's contract: all but the last token */
                const int keep = base + st->n_gen - (st->stop == GEN_STOP_EOG ? 0 : 1);
                if (bs_session_n_past(g->sess) > keep && bs_session_rollback(g->sess, keep)) rc = -1;
                bs_spec_sync(c->sp);
                break;
            }
            if (act == BS_LOOP_CONTINUE) {
                id = out[m - 1];
                bs_loop_guard_evaluated(g->guard, bs_spec_logits(c->sp, m - 1));
                cli_spec_note_parking(c, &parked);
            }
        }
        if (cli_gen_guard_emit(dt, r, st, &n_emitted, bs_loop_guard_n_safe(g->guard))) { rc = -1; break; }
    }
    rc = cli_gen_guard_finish(g, dt, r, st, &n_emitted, rc);
    st->t_gen = bs_time() - t0;
    return rc;
}
