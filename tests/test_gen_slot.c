/* test_gen_slot: a generator with a drafter taking a session state it did not make itself (the
 * server's slot restore, bs_gen_adopt, and a prompt shared by another slot, bs_gen_share_prompt)
 * keeps only the drafter rows of the positions where the new tokens agree with the ones the
 * drafter saw; the rest become a gap in its context. Rows of another conversation used to be
 * kept as far as the counts allowed: drafts from the wrong text (lossless still, but acceptance
 * lost). Then greedy output after the adopted state equals plain decoding's. The trained tiny
 * pair in models/. */
#include "test.h"
#include "gen_helper.h"
#include "generate/gen_impl.h"
#include "dspark/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP 16   /* prompt length */
#define NG 6    /* tokens generated */

typedef struct {
    void *state;
    size_t len;
    int32_t *toks;
    int n;
} saved;

/* One greedy request of n_predict tokens on prompt (the prompt's end saved: ckpt_end). */
static void request(bs_engine *e, const int32_t *prompt, int n) {
    bs_gen_request r;
    bs_engine_request(e, &r);
    r.n_predict = NG;
    r.ckpt_end = true;
    CHECK_EQ_INT(bs_engine_generate(e, &r, prompt, n, NULL, NULL), 0);
}

static saved save(bs_gen *g) {
    saved s = {0};
    bs_session *ss = bs_gen_session(g);
    s.len = bs_session_state_size(ss);
    s.state = malloc(s.len);
    CHECK_EQ_INT(bs_session_state_save(ss, s.state, s.len), 0);
    s.n = g->n_toks;
    s.toks = malloc((size_t)s.n * sizeof *s.toks);
    memcpy(s.toks, g->toks, (size_t)s.n * sizeof *s.toks);
    CHECK_EQ_INT(s.n, bs_session_n_past(ss));
    return s;
}

static void saved_free(saved *s) {
    free(s->state);
    free(s->toks);
}

static void prompts(int32_t *a, int32_t *b, int32_t *c) {
    for (int i = 0; i < NP; i++) {
        a[i] = 40 + 3 * i;
        b[i] = 41 + 5 * i;
        c[i] = i < NP / 2 ? b[i] : 300 + i;   /* b's first half, then its own */
    }
}

/* bs_gen_adopt: the same conversation keeps every row, another one none, one sharing a prefix
 * keeps that prefix's rows. */
static void test_adopt(const char *model, const char *drafter) {
    bs_engine_opts o = greedy_opts(model, drafter, 4, 0);
    bs_engine e;
    if (bs_engine_open(&e, &o)) {
        fprintf(stderr, "open: %s\n", bitspark_last_error());
        CHECK(0);
        return;
    }
    int32_t pa[NP], pb[NP], pc[NP];
    prompts(pa, pb, pc);
    request(&e, pa, NP);
    saved sa = save(e.gen);
    request(&e, pc, NP);
    saved sc = save(e.gen);
    request(&e, pb, NP);
    saved sb = save(e.gen);
    bs_spec *sp = bs_gen_spec(e.gen);
    CHECK(sp != NULL);
    CHECK_EQ_INT(bs_spec_sync(sp), 0);   /* the drafter follows the session */
    CHECK_EQ_INT(bs_spec_rows(sp), sb.n);

    CHECK(e.gen->ck[1].state != NULL);   /* the requests' prompt ends were saved */
    CHECK_EQ_INT(bs_gen_adopt(e.gen, sb.state, sb.len, sb.toks, sb.n), 0);
    CHECKF(bs_spec_rows(sp) == sb.n, "its own state again: every drafter row kept (%d of %d)", bs_spec_rows(sp), sb.n);
    /* the saved prefixes go: they may hold other adapter scales than the state taken over */
    CHECKF(!e.gen->ck[0].state && !e.gen->ck[1].state, "an adopted state keeps the generator's saved prefixes");
    /* a state the session refuses (cut short) leaves the generator as it was */
    CHECK(bs_gen_adopt(e.gen, sa.state, sa.len - 1, sa.toks, sa.n) != 0);
    CHECKF(bs_session_n_past(bs_gen_session(e.gen)) == sb.n && bs_spec_rows(sp) == sb.n,
           "a refused state emptied the generator (%d positions)", bs_session_n_past(bs_gen_session(e.gen)));
    CHECK_EQ_INT(bs_gen_adopt(e.gen, sc.state, sc.len, sc.toks, sc.n), 0);
    CHECKF(bs_spec_rows(sp) == NP / 2, "a conversation sharing %d tokens: their rows kept, no more (%d)", NP / 2,
           bs_spec_rows(sp));
    CHECK_EQ_INT(bs_spec_sync(sp), 0);   /* adopt made the rest a gap */
    CHECK_EQ_INT(bs_gen_adopt(e.gen, sa.state, sa.len, sa.toks, sa.n), 0);
    CHECKF(bs_spec_rows(sp) == 0, "another conversation: no row kept (%d)", bs_spec_rows(sp));

    /* lossless after it: a's continuation from the adopted state equals plain decoding's */
    int32_t more[NP + NG + 4];
    memcpy(more, sa.toks, (size_t)sa.n * sizeof *more);
    more[sa.n] = 7;
    gen_result with, plain;
    CHECK_EQ_INT(gen_generate(&e, more, sa.n + 1, 8, NULL, NULL, &with), 0);
    bs_engine_close(&e);
    bs_engine_opts op = greedy_opts(model, NULL, 0, 0);
    CHECK_EQ_INT(bs_engine_open(&e, &op), 0);
    CHECK_EQ_INT(gen_generate(&e, more, sa.n + 1, 8, NULL, NULL, &plain), 0);
    CHECKF(with.n_gen == plain.n_gen && !memcmp(with.tokens, plain.tokens, (size_t)with.n_gen * sizeof(int32_t)),
           "greedy after the adopted state: the same tokens as without a drafter");
    free(with.tokens);
    free(plain.tokens);
    bs_engine_close(&e);
    saved_free(&sa);
    saved_free(&sb);
    saved_free(&sc);
}

/* bs_gen_share_prompt: a slot that held another conversation of the same length takes a prompt
 * shared from another slot; its drafter keeps none of its old rows. */
static void test_share(const char *model, const char *drafter) {
    bs_engine_opts o = greedy_opts(model, drafter, 4, 0);
    bs_engine e1, e2;
    if (bs_engine_open(&e1, &o) || bs_engine_open(&e2, &o)) {
        fprintf(stderr, "open: %s\n", bitspark_last_error());
        CHECK(0);
        return;
    }
    int32_t pa[NP + 4], pb[NP], pc[NP];
    prompts(pa, pb, pc);
    for (int i = NP; i < NP + 4; i++) pa[i] = 200 + i;
    request(&e1, pa, NP);   /* e1's prompt end: pa[0..NP) */
    request(&e2, pb, NP);   /* e2 holds b, NP + NG - 1 positions */
    bs_gen_share_prompt(e2.gen, e1.gen);
    bs_gen_request r;
    bs_engine_request(&e2, &r);
    r.n_predict = NG;
    CHECK_EQ_INT(bs_gen_begin(e2.gen, &r, pa, NP + 4), 0);
    CHECKF(bs_gen_get_stats(e2.gen)->n_cached == NP, "the shared prompt is reused (%d)", bs_gen_get_stats(e2.gen)->n_cached);
    const int gap = bs_spec_sync(bs_gen_spec(e2.gen)), rows = bs_spec_rows(bs_gen_spec(e2.gen));
    CHECKF(gap == NP && rows == 0, "the shared prompt's positions are a gap in the drafter's context (%d of %d, %d rows)",
           gap, NP, rows);
    bs_engine_close(&e1);
    bs_engine_close(&e2);
}

int main(void) {
    char model[1024], drafter[1024];
    trained_pair(model, drafter, sizeof model);
    test_adopt(model, drafter);
    test_share(model, drafter);
    return test_summary("test_gen_slot");
}
