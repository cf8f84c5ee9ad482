/* test_context_shift.c: the engine's context shift (--context-shift). On the trained tiny model
 * with a 48-token context, greedy generation of 120 tokens (EOG ignored):
 *   - without the shift it stops when the context is full;
 *   - with it, it produces all 120 tokens, and what follows the first shift is exactly greedy
 *     decoding from the kept tokens (the first n_keep, then the newer half of the rest) as a
 *     fresh prompt: the rebuilt state is a straight evaluation of them;
 *   - with a drafter the output is the same (the drafter's context is rebuilt too);
 *   - the rewinding loop guard is refused with it. */
#include "gen_helper.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX 48
#define N_KEEP 3
#define N_GEN 120

static bs_engine_opts opts(const char *model, const char *drafter, bool shift) {
    bs_engine_opts o = greedy_opts(model, drafter, 3, N_CTX);
    o.ignore_eos = true;
    o.context_shift = shift;
    o.n_keep = N_KEEP;
    return o;
}

static gen_result generate(const char *model, const char *drafter, bool shift, const int32_t *prompt, int n,
                           int *n_shifts) {
    bs_engine_opts o = opts(model, drafter, shift);
    bs_engine e;
    gen_result res;
    memset(&res, 0, sizeof res);
    if (bs_engine_open(&e, &o)) {
        fprintf(stderr, "open: %s\n", bitspark_last_error());
        CHECK(0);
        return res;
    }
    CHECK_EQ_INT(gen_generate(&e, prompt, n, N_GEN, NULL, NULL, &res), 0);
    *n_shifts = bs_gen_get_stats(e.gen)->n_shifts;
    bs_engine_close(&e);
    return res;
}

/* Greedy decoding of `count` tokens after seq[0..n) in a fresh session, compared with want. */
static void check_straight(const char *model, const int32_t *seq, int n, const int32_t *want, int count) {
    bs_model *m = bs_model_load(model, NULL);
    bs_session_params sp = {.n_ctx = N_CTX};
    bs_session *s = m ? bs_session_new(m, &sp) : NULL;
    CHECK(s != NULL);
    if (!s) { bs_model_free(m); return; }
    const int V = bs_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    CHECK_EQ_INT(bs_eval(s, seq, n, BS_LOGITS_LAST, logits, NULL), 0);
    int same = 0;
    for (int i = 0; i < count; i++) {
        int best = 0;
        for (int v = 1; v < V; v++) if (logits[v] > logits[best]) best = v;
        if (best != want[i]) break;
        same++;
        if (i + 1 < count && bs_eval(s, &want[i], 1, BS_LOGITS_LAST, logits, NULL)) break;
    }
    CHECKF(same == count, "after the shift: %d of %d tokens equal a straight run from the kept tokens", same, count);
    free(logits);
    bs_session_free(s);
    bs_model_free(m);
}

int main(void) {
    char model[1024], drafter[1024];
    trained_pair(model, drafter, sizeof model);
    const int32_t prompt[] = {78, 397, 138, 383, 342, 91, 27, 156};   /* any ids < n_vocab (the tiny vocabulary) */
    const int np = (int)(sizeof prompt / sizeof *prompt);
    int shifts = 0;

    gen_result plain = generate(model, NULL, false, prompt, np, &shifts);
    CHECK_EQ_INT(plain.stop, BS_GEN_CTX);
    CHECK_EQ_INT(plain.n_gen, N_CTX - np + 1);   /* the last sampled token is never evaluated */

    gen_result sh = generate(model, NULL, true, prompt, np, &shifts);
    CHECK_EQ_INT(sh.n_gen, N_GEN);
    CHECK_EQ_INT(sh.stop, BS_GEN_LENGTH);
    CHECK(shifts >= 2);
    CHECK(memcmp(sh.tokens, plain.tokens, (size_t)plain.n_gen * sizeof(int32_t)) == 0);   /* same until full */
    /* the first shift: positions = prompt + the first j generated tokens (j = N_CTX - np), the
     * pending token out[j] follows the kept ones */
    const int j = N_CTX - np, n = N_CTX, keep = N_KEEP, discard = (n - keep) / 2;
    int32_t all[N_CTX], kept[N_CTX + 1];
    memcpy(all, prompt, sizeof prompt);
    memcpy(all + np, sh.tokens, (size_t)j * sizeof(int32_t));
    memcpy(kept, all, (size_t)keep * sizeof(int32_t));
    memcpy(kept + keep, all + keep + discard, (size_t)(n - keep - discard) * sizeof(int32_t));
    const int nk = n - discard;
    kept[nk] = sh.tokens[j];
    check_straight(model, kept, nk + 1, sh.tokens + j + 1, 12);

    gen_result sd = generate(model, drafter, true, prompt, np, &shifts);
    CHECK_EQ_INT(sd.n_gen, N_GEN);
    CHECKF(memcmp(sd.tokens, sh.tokens, (size_t)N_GEN * sizeof(int32_t)) == 0, "the drafter changed the output");

    bs_engine_opts o = opts(model, NULL, true);
    o.loop.mode = BS_LOOP_GUARD_REWIND;
    bs_engine e;
    CHECK_EQ_INT(bs_engine_open(&e, &o), 0);
    bs_gen_request r;
    bs_engine_request(&e, &r);
    CHECK(bs_gen_begin(e.gen, &r, prompt, np) != 0 && strstr(bitspark_last_error(), "do not combine"));
    bs_engine_close(&e);
    free(plain.tokens);
    free(sh.tokens);
    free(sd.tokens);
    return test_summary("test_context_shift");
}
