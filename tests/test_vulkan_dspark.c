/* test_vulkan_dspark.c: DSpark speculative decoding with target and drafter on the Vulkan device
 * (lavapipe in CI) is lossless: greedy output with the drafter equals plain greedy decoding on the
 * device, token for token, at --draft-max 1..4 and auto, for
 *   - the fixture pair (tiny-q1_0 + the F32 fixture drafter; 1, 4 and auto under the
 *     sanitizers, whose host paths the trained pair's 1..4 cover),
 *   - the trained tiny pair of models/ (Q8_0 drafter borrowing the target's Q1_0 token_embd /
 *     output; and the same drafter from safetensors + config.json, BF16),
 *   - a synthetic target with a drafter in the legacy Q4_1 pack (token_embd the target's Q1_0).
 * The drafter must actually be on the device (its context there, taps kept there), and
 * BITSPARK_DRAFT_DEVICE=cpu must keep it on the CPU with the same output. Verification reads
 * each row's greedy token (or, sampling with a top-k, each row's k best) found on the device
 * instead of the rows: the same tokens as from the rows (bs_spec_want_rows), greedy and sampled
 * from the same seed, without the verified rows read back. The drafter's greedy drafts are taken
 * on the device (base logits + Markov term, argmax, slot after slot) without its rows read
 * back: the drafts and confidences of the rows read back and taken on the host
 * (BITSPARK_VK_DRAFT_HOST=1), bit for bit, also where a greedy round takes them in the block's
 * submission (one submission for both). Blocks of several contexts in one submission
 * (bs_dspark_block_multi, the server's slots) give each context the states, rows and drafts of
 * its block alone.
 * Skipped (77) without a Vulkan device. */
#include "dspark/dspark.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "sample/sampler.h"
#include "dspark/speculative.h"
#include "formats/quant.h"
#include "tools/synth.h"
#include "formats/gguf.h"
#include "test.h"
#include "vk_test.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 24
static int32_t prompt[24];
static const int NP = 24;

static bs_session *new_session(bs_model *m) {
    bs_session_params p = {.n_ctx = 512, .n_threads = 1};
    return bs_session_new(m, &p);
}

static bs_sampler *greedy(int n_vocab) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    return bs_sampler_new(&p, n_vocab);
}

/* the sampler of spec(): greedy, or temperature 0.9 with top-k 40, top-p 0.9 and min-p 0.05
 * (each cut of the device chain's predicted draws) from seed 5 */
static bool sampled;
static bs_sampler *spec_sampler(int n_vocab) {
    if (!sampled) return greedy(n_vocab);
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0.9f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.seed = 5;
    return bs_sampler_new(&p, n_vocab);
}
static bool want_rows;           /* spec(): verification from the rows (bs_spec_want_rows) */
static double read_per_round;    /* spec(): bytes read back per verify round */
static double subs_per_round;    /* spec(): submissions per round */

static int plain(bs_model *m, int32_t *out) {
    bs_session *s = new_session(m);
    bs_sampler *smp = greedy(m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    int rc = s ? bs_eval(s, prompt, NP, BS_LOGITS_LAST, logits, NULL) : -1;
    for (int i = 0; i < N_GEN && !rc; i++) {
        out[i] = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, out[i]);
        if (i + 1 < N_GEN) rc = bs_eval(s, &out[i], 1, BS_LOGITS_LAST, logits, NULL);
    }
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

static int spec(bs_model *m, const bs_dspark *d, int draft_max, int32_t *out, bs_spec_stats *st, bool *dev_ctx) {
    bs_session *s = new_session(m);
    bs_sampler *smp = spec_sampler(m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    bs_spec_params sp = {.draft_max = draft_max, .conf_cut = 1};
    bs_spec *sx = s ? bs_spec_new(s, d, &sp) : NULL;
    if (sx) bs_spec_want_rows(sx, want_rows);
    int rc = sx ? bs_spec_prompt(sx, prompt, NP, logits) : -1, got = 0;
    *dev_ctx = s && s->taps_on_device;
    if (!rc) {
        out[got] = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, out[got++]);
        if (draft_max == BS_DRAFT_AUTO) rc = bs_spec_calibrate(sx, out[0]);
    }
    int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
    bs_vk_stats v0, v1;
    bs_vk_stats_get(m->vk, &v0);
    long rounds = 0;
    while (!rc && got < N_GEN) {
        const int r = bs_spec_round(sx, smp, out[got - 1], N_GEN - got, NULL, NULL, buf);
        if (r < 1 || r > N_GEN - got) { rc = -1; break; }
        memcpy(out + got, buf, (size_t)r * sizeof *buf);
        got += r;
        rounds++;
    }
    bs_vk_stats_get(m->vk, &v1);
    read_per_round = rounds ? (double)(v1.read_bytes - v0.read_bytes) / (double)rounds : 0;
    subs_per_round = rounds ? (double)(v1.submits - v0.submits) / (double)rounds : 0;
    if (!rc) *st = *bs_spec_get_stats(sx);
    if (rc) fprintf(stderr, "spec: %s\n", bs_last_error());
    bs_spec_free(sx);
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

enum { CPU_TOO = 1, LISTS = 2 };   /* lossless(): the CPU drafter as well; ids / lists against rows */

static void lossless(const char *target, const char *drafter, const int *depths, int what) {
    const bool cpu_too = what & CPU_TOO;
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(target, &mp);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    CHECKF(m && d, "%s", bs_last_error());
    if (!m || !d) { bs_model_free(m); return; }
    const int shared = bs_dspark_share_embeddings(d, m, false);
    int32_t ref[N_GEN], got[N_GEN];
    CHECK(plain(m, ref) == 0);
    printf("%s + %s (%d borrowed):\n", strrchr(target, '/') + 1, strrchr(drafter, '/') + 1, shared);
    for (int i = 0; depths[i]; i++) {
        bs_spec_stats st;
        bool dev = false;
        if (spec(m, d, depths[i], got, &st, &dev)) { CHECKF(false, "depth %d: spec failed", depths[i]); continue; }
        CHECKF(!memcmp(ref, got, sizeof ref), "depth %d: output differs from plain greedy", depths[i]);
        CHECKF(dev && bs_dspark_on_device(d), "depth %d: the drafter did not run on the device", depths[i]);
        printf("  draft-max %-4s identical, acceptance %.2f over %ld drafts\n",
               depths[i] == BS_DRAFT_AUTO ? "auto" : (char[]){(char)('0' + depths[i]), 0},
               st.n_drafted ? (double)st.n_accepted / st.n_drafted : 0.0, st.n_drafted);
    }
    /* verification from ids / lists against from rows: the same tokens (greedy, then sampled
       with a top-k from one seed); the rows are megabytes per round, the lists not */
    for (int smp_kind = 0; smp_kind < 2 && (what & LISTS); smp_kind++) {
        sampled = smp_kind == 1;
        const char *kind = sampled ? "sampled (top-k 40, top-p 0.9, min-p 0.05)" : "greedy";
        int32_t by_rows[N_GEN], host_drafts[N_GEN];
        bs_spec_stats st;
        bool dev = false;
        want_rows = true;   /* verification from the rows */
        int rc = spec(m, d, 3, by_rows, &st, &dev);
        const double rows_read = read_per_round;
        setenv("BITSPARK_VK_DRAFT_HOST", "1", 1);   /* the drafter's rows back, its drafts taken here */
        want_rows = false;
        rc = rc || spec(m, d, 3, host_drafts, &st, &dev);
        unsetenv("BITSPARK_VK_DRAFT_HOST");
        const double host_read = read_per_round;
        int32_t by_slot[N_GEN];
        double slot_subs = 0;
        if (sampled) {   /* the sampled drafts' lists a slot at a time, not the device's chain */
            setenv("BITSPARK_VK_NO_CHAIN", "1", 1);
            rc = rc || spec(m, d, 3, by_slot, &st, &dev);
            unsetenv("BITSPARK_VK_NO_CHAIN");
            slot_subs = subs_per_round;
        }
        rc = rc || spec(m, d, 3, got, &st, &dev);   /* ids / lists only, both ends */
        const double lists_read = read_per_round, subs = subs_per_round;
        CHECKF(!rc && !memcmp(by_rows, got, sizeof got) && !memcmp(host_drafts, got, sizeof got),
               "%s: tokens differ between verification from the rows, drafts from the rows and neither", kind);
        /* sampled: the chain's lists with the block, each draw predicted there and drawn here
           again (a miss only where float and double round a boundary apart) */
        if (sampled) {
            CHECKF(!rc && !memcmp(by_slot, got, sizeof got), "sampled: tokens differ with the chain's lists a slot at a time");
            CHECKF(!rc && st.n_chained > 0 && st.n_chain_miss * 100 <= st.n_chained,
                   "sampled: %ld drafts from the device's chain, %ld of its draws mispredicted", st.n_chained, st.n_chain_miss);
            CHECKF(!rc && subs < slot_subs, "sampled: %.2f submissions per round with the chain, %.2f a slot at a time", subs,
                   slot_subs);
            printf("  sampled chain: %ld drafts from its lists, %ld mispredicted; %.2f submissions a round (%.2f a slot at a time)\n",
                   st.n_chained, st.n_chain_miss, subs, slot_subs);
        }
        if (!sampled) CHECKF(!rc && !memcmp(ref, got, sizeof got), "greedy from ids: differs from plain greedy");
        /* a round of 3 drafts verifies 4 rows, and drafts from 3; what is left is ids, lists and
           the drafter's final states (E floats a slot, for the confidence head) */
        const double row = 4.0 * m->hp.n_vocab;
        CHECKF(rows_read - lists_read >= 2 * row && host_read - lists_read >= 2 * row,
               "%s: bytes read back per round: %.0f (rows verified), %.0f (drafter's rows), %.0f (neither)", kind, rows_read,
               host_read, lists_read);
        /* a round's submissions: the drafter's block with its drafts (greedy) or its sampled
           chain's lists, the verification, the rollback where drafts were rejected, and the
           append of the rows kept (not waited for): no more than 4 */
        CHECKF(subs <= 4.0, "%s: %.2f submissions per round (at most 4)", kind, subs);
        printf("  %s: %.0f bytes read back per round (%.0f with the rows verified, %.0f with the drafter's rows), "
               "%.2f submissions\n", kind, lists_read, rows_read, host_read, subs);
    }
    sampled = false;
    if (cpu_too) {   /* BITSPARK_DRAFT_DEVICE=cpu: the drafter on the CPU, taps to the host */
        bs_dspark *dc = bs_dspark_load(drafter, NULL);
        bs_dspark_share_embeddings(dc, m, false);
        setenv("BITSPARK_DRAFT_DEVICE", "cpu", 1);
        bs_spec_stats st;
        bool dev = true;
        CHECK(dc && spec(m, dc, 3, got, &st, &dev) == 0);
        unsetenv("BITSPARK_DRAFT_DEVICE");
        CHECKF(!dev && dc && !bs_dspark_on_device(dc), "BITSPARK_DRAFT_DEVICE=cpu: the drafter went to the device");
        CHECKF(!memcmp(ref, got, sizeof ref), "CPU drafter with the target on Vulkan: output differs");
        bs_dspark_free(dc);
    }
    bs_dspark_free(d);   /* before the target: it may hold the target's tensors on the device */
    bs_model_free(m);
}

/* Greedy drafts on the device against the host's from the same block rows, for several anchors
 * and block widths over a context of made-up tap rows. */
static void draft_chain(const char *target, const char *drafter) {
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(target, &mp);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    CHECKF(m && d, "%s", bs_last_error());
    if (!m || !d) { bs_dspark_free(d); bs_model_free(m); return; }
    bs_dspark_share_embeddings(d, m, false);
    CHECKF(bs_dspark_to_device(d, m, NULL) == 0, "%s", bs_last_error());
    bs_dspark_ctx *dc = bs_dspark_ctx_new(d, 64, NULL);
    const int B = d->hp.block_size, row = d->hp.n_taps * d->hp.n_embd, n_rows = 9;
    float *taps = malloc(sizeof(float) * (size_t)row * n_rows);
    bs_rng r;
    bs_rng_seed(&r, 3);
    for (int i = 0; i < row * n_rows; i++) taps[i] = (float)((int)(bs_rng_next(&r) % 2001) - 1000) / 500.0f;
    CHECK(dc && bs_dspark_ctx_on_device(dc) && bs_dspark_ctx_append(dc, taps, n_rows) == 0);
    int same = 0, runs = 0;
    for (int a = 0; a < 6 && dc; a++) {
        const int32_t anchor = (int32_t)(bs_rng_next(&r) % (uint64_t)d->hp.n_vocab);
        const int n = 1 + a % B;
        int32_t dev[BS_DSPARK_MAX_BLOCK], host[BS_DSPARK_MAX_BLOCK];
        float cdev[BS_DSPARK_MAX_BLOCK], chost[BS_DSPARK_MAX_BLOCK];
        bs_vk_stats s0, s1;
        CHECK(bs_dspark_block(dc, anchor, n_rows) == 0);
        bs_vk_stats_get(m->vk, &s0);
        bs_dspark_draft_greedy(dc, anchor, n, dev, cdev);
        bs_vk_stats_get(m->vk, &s1);
        CHECKF(s1.read_bytes - s0.read_bytes < 4u * (uint64_t)d->hp.n_vocab, "device drafts: %llu bytes read back",
               (unsigned long long)(s1.read_bytes - s0.read_bytes));
        /* taken with the block (a greedy round's): one submission for both, the same drafts */
        int32_t with[BS_DSPARK_MAX_BLOCK];
        float cwith[BS_DSPARK_MAX_BLOCK];
        bs_dspark_ctx_greedy_ahead(dc, true);
        bs_vk_stats_get(m->vk, &s0);
        CHECK(bs_dspark_block(dc, anchor, n_rows) == 0);
        bs_dspark_draft_greedy(dc, anchor, n, with, cwith);
        bs_vk_stats_get(m->vk, &s1);
        bs_dspark_ctx_greedy_ahead(dc, false);
        CHECKF(s1.submits - s0.submits == 1, "block and greedy drafts: %llu submissions, not 1",
               (unsigned long long)(s1.submits - s0.submits));
        setenv("BITSPARK_VK_DRAFT_HOST", "1", 1);
        CHECK(bs_dspark_block(dc, anchor, n_rows) == 0);
        bs_dspark_draft_greedy(dc, anchor, n, host, chost);
        unsetenv("BITSPARK_VK_DRAFT_HOST");
        same += !memcmp(dev, host, sizeof *dev * (size_t)n) && !memcmp(cdev, chost, sizeof *cdev * (size_t)n) &&
                !memcmp(with, host, sizeof *dev * (size_t)n) && !memcmp(cwith, chost, sizeof *cdev * (size_t)n);
        runs++;
    }
    CHECKF(same == runs, "%s: greedy drafts on the device differ from the host's in %d of %d blocks", strrchr(drafter, '/') + 1,
           runs - same, runs);
    printf("%s: greedy drafts on the device = the host's in %d blocks (Markov rank %d)\n", strrchr(drafter, '/') + 1, runs,
           d->hp.markov_rank);
    free(taps);
    bs_dspark_ctx_free(dc);
    bs_dspark_free(d);
    bs_model_free(m);
}

/* A sampled chain recorded with the blocks (bs_dspark_ctx_sampled_ahead) against the same chain
 * run alone after a block: the same lists and predictions, and no submission of its own. */
static const bs_draw chain_p = {8, 1, 0.9f, 0.02f, 1.5f};
static const double chain_u[BS_DSPARK_MAX_BLOCK] = {0.31, 0.77, 0.05, 0.5};

static void chain_with_blocks(bs_model *m, bs_dspark_ctx *alone, bs_dspark_ctx *together, int32_t anchor, int n) {
    enum { K = 8 };
    int32_t pa[BS_DSPARK_MAX_BLOCK], pb[BS_DSPARK_MAX_BLOCK], ia[BS_DSPARK_MAX_BLOCK * K], ib[BS_DSPARK_MAX_BLOCK * K];
    float va[BS_DSPARK_MAX_BLOCK * K], vb[BS_DSPARK_MAX_BLOCK * K];
    int na[BS_DSPARK_MAX_BLOCK], nb[BS_DSPARK_MAX_BLOCK];
    bs_vk_stats v0, v1;
    CHECK(bs_dspark_draft_sampled(alone, anchor, n, &chain_p, chain_u, pa, ia, va, na) == n);
    bs_vk_stats_get(m->vk, &v0);
    CHECK(bs_dspark_draft_sampled(together, anchor, n, &chain_p, chain_u, pb, ib, vb, nb) == n);
    bs_vk_stats_get(m->vk, &v1);
    CHECKF(v1.submits == v0.submits, "the chain run with the blocks took %ld submissions more", (long)(v1.submits - v0.submits));
    bool same = !memcmp(pa, pb, sizeof *pa * (size_t)n) && !memcmp(na, nb, sizeof *na * (size_t)n);
    for (int k = 0; k < n && same; k++)
        same = na[k] > 0 && !memcmp(ia + k * K, ib + k * K, sizeof *ia * (size_t)na[k]) &&
               !memcmp(va + k * K, vb + k * K, sizeof *va * (size_t)na[k]);
    CHECKF(same, "a sampled chain with the blocks differs from alone");
    printf("  a sampled chain of %d slots with the blocks: the lists and draws of one alone\n", n);
}

/* Two blocks' layers read the weights once (record_group): a submission of a block of B slots
 * and one of 2 (6 rows: one row group of the fused layers) binds the bytes of the first alone. */
static void weights_once(bs_model *m, bs_dspark *d, const float *taps) {
    const int B = d->hp.block_size;
    bs_dspark_ctx *cs[2] = {bs_dspark_ctx_new(d, 64, NULL), bs_dspark_ctx_new(d, 64, NULL)};
    const int32_t anchors[2] = {5, 9};
    const int pos[2] = {6, 11}, slots[2] = {B, 2};
    CHECK(cs[0] && cs[1] && !bs_dspark_ctx_append(cs[0], taps, pos[0]) && !bs_dspark_ctx_append(cs[1], taps, pos[1]));
    bs_vk_stats v0, v1, v2;
    bs_vk_stats_get(m->vk, &v0);
    CHECK(bs_dspark_block_n(cs[0], anchors[0], pos[0], B) == 0);
    bs_vk_stats_get(m->vk, &v1);
    CHECK(bs_dspark_block_multi(cs, anchors, pos, slots, 2) == 0);
    bs_vk_stats_get(m->vk, &v2);
    const uint64_t alone = v1.weight_bytes - v0.weight_bytes, both = v2.weight_bytes - v1.weight_bytes;
    CHECKF(alone > 0 && both == alone && v2.submits - v1.submits == 1,
           "two blocks together read %llu bytes of weights in %llu submissions, one alone %llu",
           (unsigned long long)both, (unsigned long long)(v2.submits - v1.submits), (unsigned long long)alone);
    printf("  two blocks together: %llu bytes of weights, those of one alone\n", (unsigned long long)both);
    bs_dspark_ctx_free(cs[0]);
    bs_dspark_ctx_free(cs[1]);
}

/* More blocks than the 8 a submission once took (the server's slots drafting together): one
 * submission, each block's states and logits rows those of it alone. */
static void many_blocks(bs_model *m, bs_dspark *d, const float *taps) {
    enum { N = 10 };
    const int B = d->hp.block_size, E = d->hp.n_embd, V = d->hp.n_vocab;
    bs_dspark_ctx *cs[N], *alone[N];
    int32_t anchors[N];
    int pos[N], slots[N];
    float *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
    for (int i = 0; i < N; i++) {
        cs[i] = bs_dspark_ctx_new(d, 64, NULL);
        alone[i] = bs_dspark_ctx_new(d, 64, NULL);
        anchors[i] = (int32_t)((7 + 31 * i) % V);
        pos[i] = 1 + (i * 5) % 19;
        slots[i] = 1 + i % B;
        CHECK(cs[i] && alone[i] && !bs_dspark_ctx_append(cs[i], taps, pos[i]) && !bs_dspark_ctx_append(alone[i], taps, pos[i]));
    }
    bs_vk_stats v0, v1;
    bs_vk_stats_get(m->vk, &v0);
    CHECK(bs_dspark_block_multi(cs, anchors, pos, slots, N) == 0);
    bs_vk_stats_get(m->vk, &v1);
    CHECKF(v1.submits - v0.submits == 1, "%d blocks took %llu submissions", N, (unsigned long long)(v1.submits - v0.submits));
    int same = 1;
    for (int i = 0; i < N; i++) {
        CHECK(bs_dspark_block_n(alone[i], anchors[i], pos[i], slots[i]) == 0);
        for (int t = 0; t < slots[i]; t++) same &= !memcmp(bs_dspark_hidden(alone[i], t), bs_dspark_hidden(cs[i], t), sizeof(float) * (size_t)E);
        bs_dspark_logits(alone[i], 0, slots[i], la);
        bs_dspark_logits(cs[i], 0, slots[i], lb);
        same &= !memcmp(la, lb, sizeof(float) * (size_t)slots[i] * V);
    }
    CHECKF(same, "%d blocks in one submission: states or rows differ from each alone", N);
    printf("  %d blocks in one submission: the states and rows of each alone\n", N);
    for (int i = 0; i < N; i++) {
        bs_dspark_ctx_free(cs[i]);
        bs_dspark_ctx_free(alone[i]);
    }
    free(la); free(lb);
}

/* Three contexts' appends of their sessions' tap rows collected and run as one pass
 * (bs_dspark_collect, as the server's slots after a pass) against each context's own: the
 * blocks after them give the same states and rows, and the pass reads fewer weight bytes. */
static void appends_together(bs_model *m, bs_dspark *d) {
    enum { N = 3 };
    const int E = d->hp.n_embd, V = d->hp.n_vocab, B = d->hp.block_size, lens[N] = {3, 7, 5};
    bs_session *ss[N];
    bs_dspark_ctx *own[N], *grp[N];
    float *logits = malloc(sizeof(float) * (size_t)V), *taps = malloc(sizeof(float) * 8 * (size_t)d->hp.n_taps * E);
    float *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    for (int i = 0; i < N; i++) {
        ss[i] = bs_session_new(m, &sp);
        own[i] = bs_dspark_ctx_new(d, 64, NULL);
        grp[i] = bs_dspark_ctx_new(d, 64, NULL);
        CHECK(ss[i] && own[i] && grp[i] && !bs_session_set_taps(ss[i], d->hp.taps, d->hp.n_taps) &&
              bs_dspark_ctx_link(own[i], ss[i], 8));
        int32_t tok[8];
        for (int t = 0; t < lens[i]; t++) tok[t] = (int32_t)((11 + 97 * i + 13 * t) % m->hp.n_vocab);
        CHECK(ss[i] && bs_eval(ss[i], tok, lens[i], BS_LOGITS_LAST, logits, taps) == 0);   /* (the taps stay there) */
    }
    bs_vk_stats v0, v1, v2;
    bs_vk_stats_get(m->vk, &v0);
    for (int i = 0; i < N; i++) CHECKF(own[i] && bs_dspark_ctx_append_session(own[i], ss[i]->vk, lens[i]) == 0, "%s", bs_last_error());
    bs_vk_stats_get(m->vk, &v1);
    bs_dspark_collect(d, true);
    for (int i = 0; i < N; i++) CHECK(grp[i] && bs_dspark_ctx_append_session(grp[i], ss[i]->vk, lens[i]) == 0);
    CHECK(bs_dspark_collect(d, false) == 0);
    bs_vk_stats_get(m->vk, &v2);
    const uint64_t wo = v1.weight_bytes - v0.weight_bytes, wg = v2.weight_bytes - v1.weight_bytes;
    CHECKF(v2.submits - v1.submits == 1 && wg < wo, "three appends collected: %llu submissions, %llu weight bytes (%llu apart)",
           (unsigned long long)(v2.submits - v1.submits), (unsigned long long)wg, (unsigned long long)wo);
    int same = 1;
    for (int i = 0; i < N; i++) {
        CHECK(bs_dspark_block_n(own[i], 5, lens[i], B) == 0 && bs_dspark_block_n(grp[i], 5, lens[i], B) == 0);
        for (int t = 0; t < B; t++) same &= !memcmp(bs_dspark_hidden(own[i], t), bs_dspark_hidden(grp[i], t), sizeof(float) * (size_t)E);
        bs_dspark_logits(own[i], 0, B, la);
        bs_dspark_logits(grp[i], 0, B, lb);
        same &= !memcmp(la, lb, sizeof(float) * (size_t)B * V);
    }
    CHECKF(same, "blocks after collected appends differ from those after each context's own");
    printf("  3 contexts' appends in one pass (%.2fx the weight bytes): the blocks after them those after each one's own\n",
           (double)wg / (double)wo);
    for (int i = 0; i < N; i++) {
        bs_dspark_ctx_free(own[i]);
        bs_dspark_ctx_free(grp[i]);
        bs_session_free(ss[i]);
    }
    free(logits); free(taps); free(la); free(lb);
}

/* Blocks of ns device contexts (different lengths and widths) in one submission against each
 * alone: the same final states, base logits and greedy drafts. Two blocks' rows (B + 2) are one
 * row group of the fused layers; three (B + 5 with B = 4) take the products' multi-row forms. */
static void blocks_together(const char *target, const char *drafter, int ns) {
    enum { NS = 3 };
    bs_model_params mp = {.device = "vulkan"};
    bs_model *m = bs_model_load(target, &mp);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    CHECKF(m && d && bs_dspark_to_device(d, m, NULL) == 0, "%s", bs_last_error());
    if (!m || !d) { bs_dspark_free(d); bs_model_free(m); return; }
    const int B = d->hp.block_size, E = d->hp.n_embd, V = d->hp.n_vocab, row = d->hp.n_taps * E;
    const int lens[NS] = {4, 9, 21}, slots[NS] = {B, 2, BS_MIN(3, B)};
    const int32_t anchors[NS] = {3, 17, 400 % V};
    int pos[NS];
    bs_dspark_ctx *alone[NS], *together[NS];
    float *taps = malloc(sizeof(float) * (size_t)row * 21), *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
    bs_rng r;
    bs_rng_seed(&r, 9);
    for (int i = 0; i < row * 21; i++) taps[i] = (float)((int)(bs_rng_next(&r) % 2001) - 1000) / 500.0f;
    for (int i = 0; i < NS; i++) {
        alone[i] = bs_dspark_ctx_new(d, 64, NULL);
        together[i] = bs_dspark_ctx_new(d, 64, NULL);
        if (together[i] && i != 1) bs_dspark_ctx_greedy_ahead(together[i], true);   /* drafts with the blocks */
        if (together[i] && i == 1) bs_dspark_ctx_sampled_ahead(together[i], &chain_p, chain_u, slots[i]);   /* a sampled chain */
        CHECK(alone[i] && together[i] && bs_dspark_ctx_on_device(together[i]) && !bs_dspark_ctx_append(alone[i], taps, lens[i]) &&
              !bs_dspark_ctx_append(together[i], taps, lens[i]));
        pos[i] = lens[i];
    }
    CHECK(bs_dspark_block_multi(together, anchors, pos, slots, ns) == 0);
    for (int i = 0; i < ns; i++) {
        int32_t da[BS_DSPARK_MAX_BLOCK], db[BS_DSPARK_MAX_BLOCK];
        CHECK(bs_dspark_block_n(alone[i], anchors[i], pos[i], slots[i]) == 0);
        bs_dspark_draft_greedy(alone[i], anchors[i], slots[i], da, NULL);
        bs_dspark_draft_greedy(together[i], anchors[i], slots[i], db, NULL);
        CHECKF(!memcmp(da, db, sizeof *da * (size_t)slots[i]), "block %d together: greedy drafts differ", i);
        if (i == 1) chain_with_blocks(m, alone[i], together[i], anchors[i], slots[i]);   /* (before the rows come back) */
        int same = 1;
        for (int t = 0; t < slots[i]; t++) same &= !memcmp(bs_dspark_hidden(alone[i], t), bs_dspark_hidden(together[i], t), sizeof(float) * (size_t)E);
        bs_dspark_logits(alone[i], 0, slots[i], la);
        bs_dspark_logits(together[i], 0, slots[i], lb);
        CHECKF(same && !memcmp(la, lb, sizeof(float) * (size_t)slots[i] * V), "block %d of %d together: states or rows differ", i, ns);
    }
    if (ns == 2) weights_once(m, d, taps);
    else {
        many_blocks(m, d, taps);
        appends_together(m, d);
    }
    for (int i = 0; i < NS; i++) {
        bs_dspark_ctx_free(alone[i]);
        bs_dspark_ctx_free(together[i]);
    }
    free(taps); free(la); free(lb);
    bs_dspark_free(d);
    bs_model_free(m);
}

static int synth_hadamard;   /* synth(): targets folded with this block (0: plain) */
static int synth_output_type = -1;   /* synth(): the target's head type (-1: its matrices') */

static const char *synth(const char *preset, const char *dir, const char *name, int type, const char *pack, int embd_type) {
    static char paths[4][600];
    static int n;
    bs_synth_config c;
    if (bs_synth_preset(preset, &c)) return NULL;
    c.seed = 7;
    c.hadamard = synth_hadamard;
    if (pack) {
        bs_synth_drafter_pack(&c, pack);
        c.embd_type = embd_type;
    } else {
        c.matrix_type = c.embd_type = c.output_type = type;
        if (synth_output_type >= 0) c.output_type = synth_output_type;
        c.ssm_ab_type = type;
        c.values = BS_SYNTH_VALUES_AUTO;
    }
    bs_synth_derive(&c, false, false);
    char *p = paths[n++ % 4];
    snprintf(p, 600, "%s/vk_dspark_%s.gguf", dir, name);
    if (bs_synth_validate(&c) || bs_synth_write(&c, p)) {
        fprintf(stderr, "synth %s: %s\n", name, bs_last_error());
        return NULL;
    }
    return p;
}

/* A drafter block's logits: the drafter beside the target (on `dev`), over made-up tap rows. */
static float *block_logits(const char *target, const char *drafter, const char *dev, bool *on_device) {
    bs_model_params mp = {.device = dev};
    bs_model *m = bs_model_load(target, &mp);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    float *out = NULL;
    if (d) {
        bs_dspark_share_embeddings(d, m, false);
        if (m->vk) bs_dspark_to_device(d, m, NULL);
        *on_device = bs_dspark_on_device(d);
        bs_dspark_ctx *dc = bs_dspark_ctx_new(d, 64, NULL);
        const int row = d->hp.n_taps * d->hp.n_embd;
        float *taps = malloc(sizeof(float) * (size_t)row * 5);
        bs_rng r;
        bs_rng_seed(&r, 4);
        for (int i = 0; i < row * 5; i++) taps[i] = (float)((int)(bs_rng_next(&r) % 2001) - 1000) / 500.0f;
        out = malloc(sizeof(float) * (size_t)d->hp.block_size * (size_t)d->hp.n_vocab);
        if (!dc || bs_dspark_ctx_append(dc, taps, 5) || bs_dspark_block(dc, 17, 5)) { free(out); out = NULL; }
        else bs_dspark_logits(dc, 0, d->hp.block_size, out);
        free(taps);
        bs_dspark_ctx_free(dc);
    }
    bs_dspark_free(d);
    bs_model_free(m);
    return out;
}

/* The drafter at `drafter` with the target's token table and head in place of its own (the
 * target's types and bytes), as a Bonsai 2 drafter carries a folded target's: into out. */
static const char *with_target_tensors(const char *drafter, const char *target, const char *out) {
    gguf_file *d = gguf_open(drafter, 0), *t = gguf_open(target, 0);
    gguf_writer *w = d && t ? gguf_w_open(out) : NULL;
    int rc = w ? 0 : -1;
    for (uint64_t i = 0; w && i < d->n_kv; i++) gguf_w_set_value(w, d->kv[i].key.s, &d->kv[i].val);
    const gguf_tensor **src = w ? bs_xcalloc(d->n_tensors, sizeof *src) : NULL;
    for (uint64_t i = 0; w && i < d->n_tensors && !rc; i++) {
        const gguf_tensor *x = &d->tensors[i], *y = gguf_find_tensor(t, x->name);
        src[i] = y && (!strcmp(x->name, "token_embd.weight") || !strcmp(x->name, "output.weight")) ? y : x;
        rc = gguf_w_add_tensor(w, x->name, src[i]->type, src[i]->n_dims, src[i]->ne) < 0;
    }
    for (uint64_t i = 0; w && i < d->n_tensors && !rc; i++) rc = gguf_w_write(w, src[i]->data, (size_t)src[i]->nbytes);
    if (w) rc = rc ? (gguf_w_abort(w), -1) : gguf_w_close(w);
    free(src);
    gguf_close(d);
    gguf_close(t);
    return rc ? NULL : out;
}

int main(void) {
    bs_vk_device_info info[8];
    const int nd = vk_test_devices(info, 8);
    if (nd < 0) return -nd;
    const char *fx = getenv("BS_FIXTURES"), *src = getenv("BS_SRC"), *tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!src) src = ".";
    if (!tmp) tmp = "/tmp";
    bs_rng r;
    bs_rng_seed(&r, 11);
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(bs_rng_next(&r) % 900);
    char t_fix[600], d_fix[600], t_tiny[600], d_tiny[600], d_st[600];
    snprintf(t_fix, sizeof t_fix, "%s/tiny-q1_0.gguf", fx);
    snprintf(d_fix, sizeof d_fix, "%s/tiny-dspark-f32.gguf", fx);
    snprintf(t_tiny, sizeof t_tiny, "%s/models/bonsai-tiny-q1_0.gguf", src);
    snprintf(d_tiny, sizeof d_tiny, "%s/models/bonsai-tiny-dspark.gguf", src);
    snprintf(d_st, sizeof d_st, "%s/models/bonsai-tiny-dspark", src);
    static const int all[] = {1, 2, 3, 4, BS_DRAFT_AUTO, 0}, some[] = {2, BS_DRAFT_AUTO, 0};
    static const int ends[] = {1, 4, BS_DRAFT_AUTO, 0};   /* the fixture pair under the sanitizers */
    draft_chain(t_fix, d_fix);
    draft_chain(t_tiny, d_tiny);
    blocks_together(t_tiny, d_tiny, 2);
    blocks_together(t_tiny, d_tiny, 3);
    /* (the lists against the rows: every drafter format in a release build; the shipped pair's
       alone under the sanitizers, whose host paths the formats share) */
    lossless(t_fix, d_fix, TEST_SANITIZED ? ends : all, TEST_SANITIZED ? 0 : LISTS);
    lossless(t_tiny, d_tiny, all, CPU_TOO | LISTS);
    lossless(t_tiny, d_st, some, 0);   /* the same drafter from safetensors: it loads and drafts the same */
    const char *sq1 = synth("tiny", tmp, "t_q1_0", BS_Q1_0, NULL, -1);
    const char *dq41 = synth("drafter-tiny", tmp, "d_q4_1", 0, "q4_1", BS_Q1_0);
    CHECKF(sq1 && dq41, "synthetic pair");
    if (sq1 && dq41) lossless(sq1, dq41, some, TEST_SANITIZED ? 0 : LISTS);
    /* a Hadamard-folded target (Bonsai 2) and a drafter carrying its folded table and head: the
     * drafter shares them on the device with their folds, the output is plain greedy's */
    synth_hadamard = 128;
    const char *fq1 = synth("tiny", tmp, "t_q1_0_folded", BS_Q1_0, NULL, -1);
    synth_hadamard = 0;
    char dcopy[700];
    snprintf(dcopy, sizeof dcopy, "%s/vk_dspark_d_folded_copies.gguf", tmp);
    const char *dfold = fq1 && dq41 ? with_target_tensors(dq41, fq1, dcopy) : NULL;
    CHECKF(fq1 && dfold, "the folded pair: %s", bs_last_error());
    if (fq1 && dfold) lossless(fq1, dfold, some, 0);
    if (fq1 && dfold) {   /* its block on the device: the same pair's on the CPU (the table rotated back, the head's input rotated) */
        bool on_dev = false, on_cpu = false;
        float *a = block_logits(fq1, dfold, "cpu", &on_cpu), *b = block_logits(fq1, dfold, "vulkan", &on_dev);
        double num = 0, den = 0;
        for (int i = 0; a && b && i < 4 * 1024; i++) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += (double)a[i] * a[i];
        CHECKF(a && b && on_dev && !on_cpu && sqrt(num / den) < 2e-2, "the folded pair's drafter block on the device: %g from "
               "the CPU's (on the device: %d)", den > 0 ? sqrt(num / den) : -1.0, on_dev);
        printf("folded pair: the drafter's block on the device is %.2e from the CPU's\n", den > 0 ? sqrt(num / den) : -1.0);
        free(a), free(b);
    }
    /* ... with a Q6_K head, whose product rounds its floats first: the drafter stays on the CPU and drafts */
    synth_hadamard = 128;
    synth_output_type = BS_Q6_K;
    const char *fq6 = synth("tiny", tmp, "t_q6k_folded", BS_Q1_0, NULL, -1);
    synth_hadamard = 0;
    synth_output_type = -1;
    char dcopy6[700];
    snprintf(dcopy6, sizeof dcopy6, "%s/vk_dspark_d_folded_q6k.gguf", tmp);
    const char *dfold6 = fq6 && dq41 ? with_target_tensors(dq41, fq6, dcopy6) : NULL;
    if (fq6 && dfold6) {
        bool on_dev = true, on_cpu = false;
        float *a = block_logits(fq6, dfold6, "cpu", &on_cpu), *b = block_logits(fq6, dfold6, "vulkan", &on_dev);
        double num = 0, den = 0;
        for (int i = 0; a && b && i < 4 * 1024; i++) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += (double)a[i] * a[i];
        CHECKF(a && b && !on_dev && sqrt(num / den) < 1e-5, "a folded Q6_K head beside a GPU target: the drafter %s, %g from the CPU's",
               on_dev ? "went to the device" : "stayed on the CPU", den > 0 ? sqrt(num / den) : -1.0);
        free(a), free(b);
    } else {
        CHECKF(false, "the folded Q6_K pair: %s", bs_last_error());
    }
    return test_summary("test_vulkan_dspark");
}
