/* gen_slot.c: what the server's slot persistence and adapter switching need of a generator
 * between requests (gen.h): forget every cached prefix, or adopt a session state that was
 * loaded from elsewhere together with the tokens it holds. */
#include "generate/gen_impl.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* The saved prefixes: they may have been computed with other adapter scales than what the slot
 * runs with next (a restored slot takes the file's). */
static void drop_ckpts(bs_gen *g) {
    for (int k = 0; k < 2; k++) {
        free(g->ck[k].toks);
        g->ck[k].toks = NULL;
        g->ck[k].n = 0;
        free(g->ck[k].state);
        g->ck[k].state = NULL;
        g->ck[k].len = 0;
    }
}

void bs_gen_forget(bs_gen *g) {
    drop_ckpts(g);
    bs_session_reset(g->sess);
    g->n_toks = 0;
    gen_own_session(g);
    if (g->spec) bs_spec_sync(g->spec);
}

int bs_gen_adopt(bs_gen *g, const void *state, size_t len, const int32_t *toks, int n) {
    if (g->state != GS_IDLE && g->state != GS_DONE) return bs_error("the slot is busy");
    if (n < 0 || n > bs_session_n_ctx(g->sess)) return bs_error("%d tokens do not fit the context of %d", n,
                                                                  bs_session_n_ctx(g->sess));
    /* a state the session would refuse, or of another length, leaves the slot as it was */
    const int held = bs_session_state_check(g->sess, state, len);
    if (held < 0) return -1;
    if (held != n) return bs_error("the state holds %d positions, the file names %d tokens", held, n);
    gen_spec_keep(g, toks, n);   /* the restored tokens may be another conversation's */
    drop_ckpts(g);
    if (bs_session_state_load(g->sess, state, len)) {
        bs_gen_forget(g);   /* a half-loaded session holds nothing usable */
        return -1;
    }
    if (bs_session_n_past(g->sess) != n) {
        bs_gen_forget(g);
        return bs_error("the state holds %d positions, the file names %d tokens", bs_session_n_past(g->sess), n);
    }
    memcpy(g->toks, toks, (size_t)n * sizeof *g->toks);
    g->n_toks = n;
    gen_own_session(g);
    if (g->spec) bs_spec_sync(g->spec);
    return 0;
}
