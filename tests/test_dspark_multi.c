/* test_dspark_multi.c: drafter blocks of several sequences run together (the server's slots).
 *
 * 1. bs_dspark_block_multi over contexts of different lengths, positions and block sizes gives
 *    each context bit for bit the hidden states and base logits bs_dspark_block_n gives it alone.
 * 2. Speculative rounds of three sequences stepped together (bs_spec_round_prepare on each,
 *    bs_spec_blocks, then begin / eval / end) make the same drafts as each alone (same draft and
 *    accept counts) and the same tokens as alone (which test_dspark_spec shows equal plain greedy
 *    decoding), and the blocks did run together. */
#include "dspark/dspark.h"
#include "dspark/speculative.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "test.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SEQ 3
#define N_GEN 48

static bs_sampler *greedy(int n_vocab) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    return bs_sampler_new(&p, n_vocab);
}

static void fill_taps(float *t, size_t n, uint64_t seed) {
    bs_rng r;
    bs_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) t[i] = (float)((double)(bs_rng_next(&r) % 2001) / 1000.0 - 1.0);
}

static void blocks_bitwise(const bs_dspark *d) {
    const bs_dspark_hparams *hp = &d->hp;
    const size_t row = (size_t)hp->n_taps * hp->n_embd, V = (size_t)hp->n_vocab, E = (size_t)hp->n_embd;
    const int lens[N_SEQ] = {5, 37, 90}, slots[N_SEQ] = {hp->block_size, 2, BS_MIN(5, hp->block_size)};
    const int32_t anchors[N_SEQ] = {3, 17, 400};
    bs_dspark_ctx *alone[N_SEQ], *together[N_SEQ];
    int pos[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        float *taps = bs_xmalloc((size_t)lens[i] * row * sizeof(float));
        fill_taps(taps, (size_t)lens[i] * row, 11 + (uint64_t)i);
        alone[i] = bs_dspark_ctx_new(d, 256, NULL);
        together[i] = bs_dspark_ctx_new(d, 256, NULL);
        CHECK(!bs_dspark_ctx_append(alone[i], taps, lens[i]) && !bs_dspark_ctx_append(together[i], taps, lens[i]));
        pos[i] = lens[i] + (i == 1);   /* one block past a gap */
        free(taps);
    }
    CHECK(!bs_dspark_block_multi(together, anchors, pos, slots, N_SEQ));
    float *a = bs_xmalloc((size_t)hp->block_size * V * sizeof(float)), *b = bs_xmalloc((size_t)hp->block_size * V * sizeof(float));
    for (int i = 0; i < N_SEQ; i++) {
        CHECK(!bs_dspark_block_n(alone[i], anchors[i], pos[i], slots[i]));
        for (int t = 0; t < slots[i]; t++)
            CHECKF(!memcmp(bs_dspark_hidden(alone[i], t), bs_dspark_hidden(together[i], t), E * sizeof(float)),
                   "block %d slot %d: hidden state differs", i, t);
        bs_dspark_logits(alone[i], 0, slots[i], a);
        bs_dspark_logits(together[i], 0, slots[i], b);
        CHECKF(!memcmp(a, b, (size_t)slots[i] * V * sizeof(float)), "block %d: logits differ", i);
    }
    /* bad batches are refused, not run */
    bs_dspark_ctx *twice[2] = {together[0], together[0]};
    CHECK(bs_dspark_block_multi(twice, anchors, pos, slots, 2) < 0);
    int bad_pos[N_SEQ] = {0, pos[1], pos[2]};
    CHECK(bs_dspark_block_multi(together, anchors, bad_pos, slots, N_SEQ) < 0);
    free(a);
    free(b);
    for (int i = 0; i < N_SEQ; i++) {
        bs_dspark_ctx_free(alone[i]);
        bs_dspark_ctx_free(together[i]);
    }
}

typedef struct {
    bs_session *s;
    bs_sampler *smp;
    bs_spec *sp;
    int32_t out[N_GEN + BS_DSPARK_MAX_BLOCK + 1];
    int got;
} seq;

static int seq_start(seq *q, bs_model *m, const bs_dspark *d, int depth, const int32_t *prompt, int np) {
    bs_session_params sp = {.n_ctx = 512, .n_threads = 1};
    q->s = bs_session_new(m, &sp);
    q->smp = greedy(m->hp.n_vocab);
    bs_spec_params p = {.draft_max = depth};
    q->sp = q->s ? bs_spec_new(q->s, d, &p) : NULL;
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    int rc = q->sp ? bs_spec_prompt(q->sp, prompt, np, logits) : -1;
    bs_sampler_accept_many(q->smp, prompt, (size_t)np);
    if (!rc) bs_sampler_accept(q->smp, q->out[q->got++] = bs_sampler_sample(q->smp, logits));
    free(logits);
    return rc;
}

static int seq_round_end(seq *q, bool ok) {
    int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
    const int r = bs_spec_round_end(q->sp, q->smp, ok, false, NULL, NULL, buf);
    if (r < 1) return -1;
    memcpy(q->out + q->got, buf, (size_t)r * sizeof *buf);
    q->got += r;
    return 0;
}

static void seq_free(seq *q) {
    bs_spec_free(q->sp);
    bs_sampler_free(q->smp);
    bs_session_free(q->s);
}

/* Every sequence to N_GEN tokens, alone (together = false) or in shared steps. */
static int run_seqs(bs_model *m, const bs_dspark *d, int32_t prompts[N_SEQ][24], bool together, seq *qs, int *n_together) {
    const int depths[N_SEQ] = {3, 2, 4};
    for (int i = 0; i < N_SEQ; i++)
        if (seq_start(&qs[i], m, d, depths[i], prompts[i], 10 + 6 * i)) return -1;
    *n_together = 0;
    for (;;) {
        bs_spec *live[N_SEQ];
        int idx[N_SEQ], n = 0;
        for (int i = 0; i < N_SEQ; i++)
            if (qs[i].got < N_GEN) idx[n] = i, live[n++] = qs[i].sp;
        if (!n) return 0;
        if (together) {
            for (int j = 0; j < n; j++)
                if (bs_spec_round_prepare(live[j], qs[idx[j]].smp, qs[idx[j]].out[qs[idx[j]].got - 1], N_GEN - qs[idx[j]].got) < 0)
                    return -1;
            const int r = bs_spec_blocks(live, n);
            if (r < 0) return -1;
            *n_together += r;
        }
        for (int j = 0; j < n; j++) {
            seq *q = &qs[idx[j]];
            bs_batch_seq b;
            if (bs_spec_round_begin(q->sp, q->smp, q->out[q->got - 1], N_GEN - q->got, &b)) return -1;
            const bool ok = bs_eval(b.s, b.tokens, b.n, b.logits_mode, b.logits, b.taps) == 0;
            if (seq_round_end(q, ok)) return -1;
        }
    }
}

static void rounds_together(const char *target, const char *drafter) {
    bs_model *m = bs_model_load(target, NULL);
    bs_dspark *d = bs_dspark_load(drafter, NULL);
    CHECK(m && d);
    if (!m || !d) {
        bs_model_free(m);
        bs_dspark_free(d);
        return;
    }
    blocks_bitwise(d);
    int32_t prompts[N_SEQ][24];
    bs_rng r;
    bs_rng_seed(&r, 9);
    for (int i = 0; i < N_SEQ; i++)
        for (int j = 0; j < 24; j++) prompts[i][j] = (int32_t)(bs_rng_next(&r) % 900);
    seq a[N_SEQ] = {0}, b[N_SEQ] = {0};
    int na, nb;
    CHECK(!run_seqs(m, d, prompts, false, a, &na));
    CHECK(!run_seqs(m, d, prompts, true, b, &nb));
    CHECKF(nb > 0, "no blocks ran together");
    for (int i = 0; i < N_SEQ; i++) {
        CHECKF(a[i].got >= N_GEN && b[i].got >= N_GEN && !memcmp(a[i].out, b[i].out, N_GEN * sizeof(int32_t)),
               "sequence %d: tokens differ when drafting together", i);
        const bs_spec_stats *sa = bs_spec_get_stats(a[i].sp), *sb = bs_spec_get_stats(b[i].sp);
        CHECKF(sa && sb && sa->n_drafted == sb->n_drafted && sa->n_accepted == sb->n_accepted,
               "sequence %d: drafts differ when drafting together", i);
        seq_free(&a[i]);
        seq_free(&b[i]);
    }
    printf("  %s + %s: %d blocks ran together\n", target, drafter, nb);
    bs_dspark_free(d);
    bs_model_free(m);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *src = getenv("BS_SRC");
    char t[600], dr[600];
    snprintf(t, sizeof t, "%s/tiny-q1_0.gguf", fx ? fx : "tests/fixtures");
    snprintf(dr, sizeof dr, "%s/tiny-dspark-f32.gguf", fx ? fx : "tests/fixtures");
    rounds_together(t, dr);
    snprintf(t, sizeof t, "%s/models/bonsai-tiny-q1_0.gguf", src ? src : ".");
    snprintf(dr, sizeof dr, "%s/models/bonsai-tiny-dspark.gguf", src ? src : ".");
    rounds_together(t, dr);
    return test_summary("test_dspark_multi");
}
