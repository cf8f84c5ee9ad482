/* test_dspark_spec.c: DSpark speculative decoding is lossless and its rollback exact.
 *
 * 1. Greedy output with a drafter equals plain greedy decoding, token for token, over 210
 *    tokens, for --draft-max 1..4 and auto (BS_DSPARK_FULL=1: every pair x every depth), on fixture targets (f32, q1_0, legacy q2_0) with the
 *    fixture drafter and on synthetic q1_0 / q2_0 targets with synthetic drafters in the f32,
 *    q4_1 (with the target's q1_0 / legacy q2_0 token_embd, borrowed) and bf16 packs; short and
 *    long prompts (the long one is evaluated in other batch splits than plain decoding's).
 * 2. The same with an oracle drafter that proposes the true continuation with random
 *    corruption, so every accept length 0..k happens many times.
 * 3. Rollback stress (q1_0 target; f32 too in the full run): thousands of random rounds; after each, the session state (recurrent state,
 *    conv windows, KV cache) must be byte-identical to a session that evaluated the committed
 *    tokens one by one. */
#include "dspark/dspark.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "model/qwen35.h"
#include "sample/sampler.h"
#include "model/session.h"
#include "dspark/speculative.h"
#include "tools/synth.h"
#include "test.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Under sanitizers (TEST_SANITIZED) the same checks run on fewer samples; the release build runs
 * the full sizes. BS_TEST_QUICK=1 (the aarch64 runs under qemu, ~10-30x slower) takes the
 * sanitizer sizes, with the ternary pair too (its own kernels on ARM); BS_TEST_QUICK=2 only the
 * two lossless pairs. */
static int quick;
#define N_GEN_MAX 210
#define N_GEN (quick ? 60 : N_GEN_MAX)
#define MAX_PROMPT 400

static char tmpdir[512];
static int32_t prompt_short[32], prompt_long[MAX_PROMPT];
static int n_short, n_long;

static bs_session *new_session(bs_model *m) {
    bs_session_params p = {.n_ctx = 1024, .n_threads = 1};
    return bs_session_new(m, &p);
}

static bs_sampler *greedy_sampler(int n_vocab) {
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0;
    return bs_sampler_new(&p, n_vocab);
}

/* Plain greedy decoding, one token per eval, like the engine without a drafter. */
static int plain_greedy(bs_model *m, const int32_t *prompt, int np, int n, int32_t *out) {
    bs_session *s = new_session(m);
    bs_sampler *smp = greedy_sampler(m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    int rc = bs_eval(s, prompt, np, BS_LOGITS_LAST, logits, NULL);
    bs_sampler_accept_many(smp, prompt, (size_t)np);
    for (int i = 0; i < n && !rc; i++) {
        out[i] = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, out[i]);
        if (i + 1 < n) rc = bs_eval(s, &out[i], 1, BS_LOGITS_LAST, logits, NULL);
    }
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

/* --- oracle drafter: the true continuation, corrupted at a random slot ----------------------- */
typedef struct {
    const int32_t *truth;      /* plain greedy tokens */
    int n_truth, base;         /* truth[0] sits at position base */
    bs_rng rng;
    int n_vocab;
} oracle;

static int oracle_draft(void *ud, int32_t anchor, int pos, int k, bs_sampler *smp, int32_t *drafts, float *q) {
    (void)anchor; (void)smp; (void)q;
    oracle *o = ud;
    const int good = (int)(bs_rng_next(&o->rng) % (uint64_t)(k + 1));   /* 0..k correct drafts */
    for (int i = 0; i < k; i++) {
        const int at = pos + 1 + i - o->base;
        int32_t t = at >= 0 && at < o->n_truth ? o->truth[at] : 0;
        if (i >= good) t = (t + 1 + (int32_t)(bs_rng_next(&o->rng) % (uint64_t)(o->n_vocab - 1))) % o->n_vocab;
        drafts[i] = t;
    }
    return k;
}

/* Rounds from out[got - 1] on until out holds n tokens: 0, or -1. */
static int rounds(bs_spec *spec, bs_sampler *smp, int32_t *out, int got, int n) {
    int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
    while (got < n) {
        const int r = bs_spec_round(spec, smp, out[got - 1], n - got, NULL, NULL, buf);
        if (r < 1 || r > n - got) return -1;
        memcpy(out + got, buf, (size_t)r * sizeof *buf);
        got += r;
    }
    return 0;
}

/* Speculative greedy decoding of n tokens; returns 0 and fills out, or -1. */
static int spec_greedy(bs_model *m, bs_dspark *d, oracle *orc, int draft_max, const int32_t *prompt, int np,
                       int n, int32_t *out, bs_spec_stats *stats) {
    bs_session *s = new_session(m);
    bs_sampler *smp = greedy_sampler(m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    bs_spec_params sp = {.draft_max = draft_max, .conf_cut = 1};
    bs_spec *spec = bs_spec_new(s, d, &sp);
    int rc = spec ? 0 : -1;
    if (spec && orc) bs_spec_set_draft_hook(spec, oracle_draft, orc);
    if (!rc) rc = bs_spec_prompt(spec, prompt, np, logits);
    bs_sampler_accept_many(smp, prompt, (size_t)np);
    int got = 0;
    if (!rc) {
        out[got] = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, out[got++]);
        if (draft_max == BS_DRAFT_AUTO) rc = bs_spec_calibrate(spec, out[0]);
    }
    if (!rc) rc = rounds(spec, smp, out, got, n);
    if (!rc && stats) *stats = *bs_spec_get_stats(spec);
    if (rc) fprintf(stderr, "spec_greedy: %s\n", bs_last_error());
    bs_spec_free(spec);
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

static int first_diff(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* Sampled speculative decoding (temperature 0.9, top-k 40, seed 5) of n tokens verifying from the
 * rows (want_rows) or from each row's 40 best (bs_spec_want_rows false). 0 or -1. */
static int spec_sampled(bs_model *m, bs_dspark *d, bool want_rows, const int32_t *prompt, int np, int n, int32_t *out) {
    bs_session *s = new_session(m);
    bs_sampler_params p = bs_sampler_default_params();
    p.temp = 0.9f, p.top_k = 40, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 5;
    bs_sampler *smp = bs_sampler_new(&p, m->hp.n_vocab);
    float *logits = bs_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
    bs_spec_params sp = {.draft_max = 3, .conf_cut = 1};
    bs_spec *spec = bs_spec_new(s, d, &sp);
    int rc = spec ? bs_spec_prompt(spec, prompt, np, logits) : -1, got = 0;
    if (spec) bs_spec_want_rows(spec, want_rows);
    bs_sampler_accept_many(smp, prompt, (size_t)np);
    if (!rc) bs_sampler_accept(smp, out[got++] = bs_sampler_sample(smp, logits));
    if (!rc) rc = rounds(spec, smp, out, got, n);
    bs_spec_free(spec);
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    return rc;
}

/* Verification from each row's k best gives the rows' tokens from the same seed (drafts
 * rejected often: the residual draws are taken over the lists in id order). */
static void sampled_lists(const char *target, const char *drafter) {
    bs_model *m = bs_model_load(target, NULL);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    CHECKF(m && d, "%s", bs_last_error());
    enum { N = 40 };
    int32_t a[N], b[N];
    if (m && d) {
        CHECK(spec_sampled(m, d, true, prompt_short, n_short, N, a) == 0 && spec_sampled(m, d, false, prompt_short, n_short, N, b) == 0);
        CHECKF(!memcmp(a, b, sizeof a), "sampled verification from lists: token %d differs from the rows'", first_diff(a, b, N));
    }
    bs_dspark_free(d);
    bs_model_free(m);
}


/* Depth lists: "all" is 1..4 and auto. The whole matrix (every pair x every depth) runs with
 * BS_DSPARK_FULL=1; by default each pair runs the depths given, which together still cover every
 * depth on f32 and quantized targets, with real and oracle drafts. */
static const int ALL[] = {1, 2, 3, 4, BS_DRAFT_AUTO, 0};
static bool full;

static void lossless(const char *target, const char *drafter, bool with_oracle, bool long_prompt, const int *depths) {
    bs_model *m = bs_model_load(target, NULL);
    bs_dspark *d = drafter ? bs_dspark_load(drafter, NULL) : NULL;
    CHECKF(m && (d || !drafter), "%s", bs_last_error());
    if (!m || (drafter && !d)) { bs_model_free(m); bs_dspark_free(d); return; }
    int borrowed = d ? bs_dspark_share_embeddings(d, m, false) : 0;
    const int32_t *prompt = long_prompt ? prompt_long : prompt_short;
    const int np = long_prompt ? n_long : n_short;
    int32_t ref[N_GEN_MAX], got[N_GEN_MAX];
    CHECK(plain_greedy(m, prompt, np, N_GEN, ref) == 0);
    oracle orc = {.truth = ref + 1, .n_truth = N_GEN - 1, .base = np + 1, .n_vocab = m->hp.n_vocab};
    bs_rng_seed(&orc.rng, 1234);
    if (full) depths = ALL;
    for (int i = 0; depths[i]; i++) {
        bs_spec_stats st = {0};
        memset(got, 0xff, sizeof got);
        int rc = spec_greedy(m, d, with_oracle ? &orc : NULL, depths[i], prompt, np, N_GEN, got, &st);
        int at = first_diff(ref, got, N_GEN);
        CHECKF(rc == 0 && at < 0, "%s + %s%s, draft-max %d, %s prompt: differs at token %d",
               target, drafter ? drafter : "-", with_oracle ? " (oracle)" : "", depths[i], long_prompt ? "long" : "short", at);
        printf("  %-28s %-24s %s draft-max %2d %s prompt: drafted %4ld accepted %4ld rounds %3ld%s\n",
               strrchr(target, '/') + 1, drafter ? strrchr(drafter, '/') + 1 : "-", with_oracle ? "oracle" : "drafter",
               depths[i], long_prompt ? "long " : "short", st.n_drafted, st.n_accepted, st.n_rounds,
               borrowed ? " (embeddings borrowed)" : "");
    }
    bs_dspark_free(d);
    bs_model_free(m);
}

/* --- drafter repacking ----------------------------------------------------------------------- */
/* A Q4_1 drafter's matrices are repacked at load where the CPU has the kernel: in place when
 * the file is read into memory, into a copy when it is mapped. Both loads must hold the same
 * rows (read back through bs_weight_row) and give the same products, bit for bit. */
static void drafter_packing(const char *path) {
    bs_dspark_params mp = {0}, rp = {.no_mmap = true};
    bs_dspark *a = bs_dspark_load(path, &mp), *b = bs_dspark_load(path, &rp);
    CHECKF(a && b, "%s", bs_last_error());
    if (!a || !b) { bs_dspark_free(a); bs_dspark_free(b); return; }
    const bs_weight *wa[] = {&a->fc, &a->layers[0].wq, &a->layers[0].down, &a->markov_b, &a->output};
    const bs_weight *wb[] = {&b->fc, &b->layers[0].wq, &b->layers[0].down, &b->markov_b, &b->output};
    const bool packs = bs_weight_packable(&(bs_weight){.type = BS_Q4_1, .ne0 = 256, .ne1 = 16, .row_bytes = 160});
    for (size_t i = 0; i < BS_ARRAY_LEN(wa); i++) {
        const bs_weight *x = wa[i], *y = wb[i];
        if (x->type != BS_Q4_1) continue;
        CHECKF(!packs || (x->packed && x->packed != x->data && y->packed == y->data),
               "%s: mapped load packs a copy, read load packs in place", x->name);
        uint8_t *ra = bs_xmalloc(x->row_bytes), *rb = bs_xmalloc(x->row_bytes);
        int same = 1;
        for (int64_t r = 0; r < x->ne1; r++)
            same &= !memcmp(bs_weight_row(x, r, ra), bs_weight_row(y, r, rb), x->row_bytes);
        CHECKF(same, "%s: rows differ between the mapped and the read load", x->name);
        float *in = bs_xmalloc(sizeof(float) * (size_t)(3 * x->ne0));
        float *oa = bs_xmalloc(sizeof(float) * (size_t)(3 * x->ne1)), *ob = bs_xmalloc(sizeof(float) * (size_t)(3 * x->ne1));
        for (int64_t k = 0; k < 3 * x->ne0; k++) in[k] = (float)((k * 37) % 101) / 50.0f - 1.0f;
        bs_matmul(x, in, 3, oa, NULL);
        bs_matmul(y, in, 3, ob, NULL);
        CHECKF(!memcmp(oa, ob, sizeof(float) * (size_t)(3 * x->ne1)), "%s: products differ", x->name);
        free(ra), free(rb), free(in), free(oa), free(ob);
    }
    bs_dspark_free(a);
    bs_dspark_free(b);
}

/* --- rollback stress ------------------------------------------------------------------------- */
static void rollback_stress(const char *target, int n_rounds) {
    bs_model *m = bs_model_load(target, NULL);
    CHECKF(m != NULL, "%s", bs_last_error());
    if (!m) return;
    const int V = m->hp.n_vocab;
    bs_session *s = new_session(m), *ref = new_session(m);
    bs_sampler *smp = greedy_sampler(V);
    float *logits = bs_xmalloc((size_t)V * sizeof(float));
    bs_spec_params sp = {.draft_max = 4};
    bs_spec *spec = bs_spec_new(s, NULL, &sp);
    oracle orc = {.n_vocab = V};
    bs_rng_seed(&orc.rng, 99);
    bs_spec_set_draft_hook(spec, oracle_draft, &orc);
    size_t cap = bs_session_state_size(s) + (size_t)1024 * 1024 * 4;
    uint8_t *a = bs_xmalloc(cap), *b = bs_xmalloc(cap);
    int32_t buf[BS_DSPARK_MAX_BLOCK + 1];
    /* the oracle proposes the plain greedy continuation, corrupted from a random slot on */
    enum { N_TRUTH = 760 };
    int32_t *truth = bs_xmalloc(N_TRUTH * sizeof *truth);
    CHECK(plain_greedy(m, prompt_short, n_short, N_TRUTH, truth) == 0);
    long hist[6] = {0}, mismatches = 0;
    int round = 0;
    while (round < n_rounds) {
        /* a fresh sequence every 150 rounds keeps positions inside the context */
        bs_session_reset(s);
        bs_session_reset(ref);
        bs_sampler_free(smp);
        smp = greedy_sampler(V);
        CHECK(bs_spec_prompt(spec, prompt_short, n_short, logits) == 0);
        CHECK(bs_eval(ref, prompt_short, n_short, BS_LOGITS_NONE, NULL, NULL) == 0);
        bs_sampler_accept_many(smp, prompt_short, (size_t)n_short);
        int32_t anchor = bs_sampler_sample(smp, logits);
        bs_sampler_accept(smp, anchor);
        orc.truth = truth + 1;
        orc.n_truth = N_TRUTH - 1;
        orc.base = n_short + 1;
        for (int r = 0; r < 150 && round < n_rounds; r++, round++) {
            const int got = bs_spec_round(spec, smp, anchor, 5, NULL, NULL, buf);
            CHECK(got >= 1 && got <= 5);
            if (got < 1) break;
            hist[got]++;
            /* the reference evaluates the committed tokens one at a time */
            int32_t committed[6];
            committed[0] = anchor;
            memcpy(committed + 1, buf, (size_t)(got - 1) * sizeof *buf);
            for (int i = 0; i < got; i++) bs_eval(ref, &committed[i], 1, BS_LOGITS_NONE, NULL, NULL);
            anchor = buf[got - 1];
            const size_t n1 = bs_session_state_size(s), n2 = bs_session_state_size(ref);
            if (n1 != n2 || n1 > cap || bs_session_state_save(s, a, cap) || bs_session_state_save(ref, b, cap) ||
                memcmp(a, b, n1)) {
                mismatches++;
                if (mismatches < 4) fprintf(stderr, "state differs after round %d (n_past %d)\n", round, bs_session_n_past(s));
            }
        }
    }
    CHECKF(mismatches == 0, "%ld of %d rounds left a state different from a straight run", mismatches, n_rounds);
    printf("  rollback stress on %s: %d rounds, tokens per round 1:%ld 2:%ld 3:%ld 4:%ld 5:%ld, %ld mismatches\n",
           strrchr(target, '/') + 1, n_rounds, hist[1], hist[2], hist[3], hist[4], hist[5], mismatches);
    free(a);
    free(b);
    free(truth);
    bs_spec_free(spec);
    free(logits);
    bs_sampler_free(smp);
    bs_session_free(s);
    bs_session_free(ref);
    bs_model_free(m);
}

/* --- synthetic pairs --------------------------------------------------------------------------- */
static const char *synth(const char *preset, const char *name, int type, const char *pack, int embd_type) {
    static char paths[16][600];
    static int n;
    bs_synth_config c;
    if (bs_synth_preset(preset, &c)) return NULL;
    c.seed = 7;
    if (pack) {
        bs_synth_drafter_pack(&c, pack);
        if (embd_type >= 0) c.embd_type = embd_type;
    } else {
        c.matrix_type = c.embd_type = c.output_type = type;
        c.ssm_ab_type = type == BS_Q2_0 ? BS_BF16 : type;
        c.values = BS_SYNTH_VALUES_AUTO;
    }
    bs_synth_derive(&c, false, false);
    char *p = paths[n++ % 16];
    snprintf(p, 600, "%s/dspark_%s.gguf", tmpdir, name);
    if (bs_synth_validate(&c) || bs_synth_write(&c, p)) {
        fprintf(stderr, "synth %s: %s\n", name, bs_last_error());
        return NULL;
    }
    return p;
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    full = getenv("BS_DSPARK_FULL") && atoi(getenv("BS_DSPARK_FULL"));
    snprintf(tmpdir, sizeof tmpdir, "%s", tmp ? tmp : "/tmp");
    char tf32[600], tq1[600], tq2[600], dfix[600];
    snprintf(tf32, sizeof tf32, "%s/tiny-f32.gguf", fx);
    snprintf(tq1, sizeof tq1, "%s/tiny-q1_0.gguf", fx);
    snprintf(tq2, sizeof tq2, "%s/tiny-q2_0.gguf", fx);
    snprintf(dfix, sizeof dfix, "%s/tiny-dspark-f32.gguf", fx);

    bs_rng r;
    bs_rng_seed(&r, 5);
    n_short = 20;
    for (int i = 0; i < n_short; i++) prompt_short[i] = (int32_t)(bs_rng_next(&r) % 900);
    n_long = 300;
    for (int i = 0; i < n_long; i++) prompt_long[i] = (int32_t)(bs_rng_next(&r) % 900);

    const int q_env = getenv("BS_TEST_QUICK") ? atoi(getenv("BS_TEST_QUICK")) : 0;
    quick = TEST_SANITIZED || q_env > 0;
    if (q_env >= 2) {   /* the lossless check alone: the tiny pair, Q1_0 and ternary targets */
        lossless(tq1, dfix, false, false, (const int[]){3, 0});
        lossless(tq2, dfix, false, false, (const int[]){2, 0});
        sampled_lists(tq1, dfix);
        return test_summary("test_dspark_spec");
    }
    if (quick) {   /* memory safety of every path on a few cheap runs */
        lossless(tq1, dfix, false, false, (const int[]){2, BS_DRAFT_AUTO, 0});
        if (!TEST_SANITIZED) lossless(tq2, dfix, false, false, (const int[]){3, 0});
        lossless(tq1, NULL, true, false, (const int[]){4, 0});
        rollback_stress(tq1, 200);
        sampled_lists(tq1, dfix);
        return test_summary("test_dspark_spec");
    }
    printf("fixture pairs:\n");
    lossless(tq1, dfix, false, false, ALL);
    lossless(tq1, dfix, false, true, (const int[]){3, 0});
    lossless(tf32, dfix, false, false, (const int[]){4, BS_DRAFT_AUTO, 0});
    lossless(tq2, dfix, false, false, (const int[]){2, BS_DRAFT_AUTO, 0});
    printf("oracle drafts (every accept length):\n");
    lossless(tq1, NULL, true, false, ALL);
    lossless(tf32, NULL, true, true, (const int[]){2, 0});
    lossless(tq2, NULL, true, false, (const int[]){3, 0});
    printf("sampled verification from lists:\n");
    sampled_lists(tq1, dfix);

    printf("synthetic pairs:\n");
    const char *sq1 = synth("tiny", "t_q1_0", BS_Q1_0, NULL, -1);
    const char *sq2 = synth("tiny", "t_q2_0", BS_Q2_0, NULL, -1);
    const char *d_f32 = synth("drafter-tiny", "d_f32", 0, "f32", -1);
    const char *d_q41 = synth("drafter-tiny", "d_q4_1", 0, "q4_1", -1);
    const char *d_q41t = synth("drafter-tiny", "d_q4_1_tern", 0, "q4_1", BS_Q2_0);
    const char *d_bf16 = synth("drafter-tiny", "d_bf16", 0, "bf16", -1);
    CHECK(sq1 && sq2 && d_f32 && d_q41 && d_q41t && d_bf16);
    if (sq1 && sq2 && d_f32 && d_q41 && d_q41t && d_bf16) {
        drafter_packing(d_q41);
        lossless(sq1, d_q41, false, false, (const int[]){4, 0});
        lossless(sq1, d_bf16, false, true, (const int[]){BS_DRAFT_AUTO, 0});
        lossless(sq2, d_q41t, false, false, (const int[]){4, 0});
        lossless(sq2, d_f32, false, false, (const int[]){1, 0});
        lossless(sq2, NULL, true, false, (const int[]){2, 0});
    }

    printf("rollback:\n");
    rollback_stress(tq1, full ? 5000 : 2000);
    if (full) rollback_stress(tf32, 2000);
    return test_summary("test_dspark_spec");
}
