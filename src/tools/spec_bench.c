/* spec_bench.c: `bitspark bench -m TARGET -md DRAFTER --spec`: the measured cost of each part of
 * a DSpark round (drafter context append, block pass, lm head + Markov per slot, confidence,
 * verify per width, rollback, acceptance overhead) and, from those measurements, the expected
 * tokens per second and speedup over plain decoding at assumed per-token acceptance rates.
 * Synthetic drafters have random weights, so real acceptance cannot be measured with them: the
 * projections say what a round would cost if drafts were accepted at rate p. With the target on
 * a Vulkan device the drafter runs there too (as the engine runs them: BITSPARK_DRAFT_DEVICE=cpu
 * keeps it on the CPU) and the verify passes' taps stay on the device for its appends. */
#include "dspark/dspark.h"
#include "formats/gguf.h"
#include "generate/drafter.h"
#include "model/qwen35.h"
#include "sample/sampler.h"
#include "model/device.h"
#include "model/session.h"
#include "model/batch_eval.h"
#include "tools/spec_bench.h"
#include "vulkan/backend.h"
#include "generate/gen.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B;
    double verify[BS_DSPARK_MAX_BLOCK + 2];   /* seconds, index = width */
    double rollback;                           /* worst case: keep 1 of B+1 rows */
    double append_row, block, markov, conf;
    double head[BS_DSPARK_MAX_BLOCK + 1];      /* greedy drafts of k slots after a block: LM head
                                                  rows, Markov terms, argmaxes, confidences (on a
                                                  device the rows stay there) */
    double accept_row;                         /* greedy acceptance of one verified row (its id) */
    double chain[BS_DSPARK_MAX_BLOCK + 1];     /* sampled drafts of k slots (top-k 40) as the device's
                                                  chain in one submission (a drafter on the device) */
    double slots;                              /* ... of all B slots, a submission each */
    double multi, multi_apart;                 /* the blocks of MULTI contexts (drafting server
                                                  slots) in one bs_dspark_block_multi, and one a call */
    uint64_t multi_bytes, multi_apart_bytes;   /* the weights those read (on a device) */
    double app, app_apart;                     /* their appends of a round's rows then their blocks: the
                                                  appends collected into one pass, and a pass each */
    uint64_t app_bytes, app_apart_bytes;
} costs;

enum { MULTI = 4 };

#define BEST(var, expr) do { double t0_ = bs_time(); expr; double dt_ = bs_time() - t0_; if (dt_ < (var)) (var) = dt_; } while (0)

/* The sampled drafts' lists of slots 1..B after a block, as a round on the device takes them:
 * the chain in one submission, and a slot at a time (BITSPARK_VK_NO_CHAIN=1). */
static void measure_sampled(bs_dspark_ctx *dc, int32_t anchor, int B, bool warm, costs *c) {
    enum { K = 40 };
    const bs_draw p = {K, 1, 0.95f, 0.05f, 0.8f};
    double u[BS_DSPARK_MAX_BLOCK];
    int32_t pred[BS_DSPARK_MAX_BLOCK], *ids = bs_xmalloc(sizeof *ids * K * BS_DSPARK_MAX_BLOCK);
    float *vals = bs_xmalloc(sizeof *vals * K * BS_DSPARK_MAX_BLOCK);
    int n[BS_DSPARK_MAX_BLOCK];
    for (int k = 0; k < B; k++) u[k] = (k + 0.5) / B;
    for (int k = 1; k <= B; k++) {
        double t = 1e30;
        int got = 0;
        BEST(t, got = bs_dspark_draft_sampled(dc, anchor, k, &p, u, pred, ids, vals, n));
        if (!warm && got == k) c->chain[k] = BS_MIN(c->chain[k], t);
    }
    double t = 1e30;
    int got = 0;
    BEST(t, for (int k = 0; k < B; k++) got += bs_dspark_slot_top(dc, k, k ? pred[k - 1] : anchor, K, ids, vals) > 0);
    if (!warm && got == B) c->slots = BS_MIN(c->slots, t);
    free(ids);
    free(vals);
}

/* The MULTI contexts' appends of a round's B + 1 kept rows from the session's taps on the device,
 * then their blocks, as the server's slots run them after a pass: the appends collected into one
 * pass (bs_dspark_collect) against a pass each; the contexts and session are put back after. */
static int measure_appends(const bs_spec_bench_opts *o, bs_session *s, bs_dspark *d, bs_dspark_ctx **cs, const int32_t *anchors,
                           const int *slots, costs *c) {
    if (!s->m->vk || !s->taps_on_device) return 0;
    const int B = d->hp.block_size, s0 = bs_session_n_past(s), V = s->m->hp.n_vocab;
    int32_t ids[BS_DSPARK_MAX_BLOCK + 1], next[BS_DSPARK_MAX_BLOCK + 1];
    int pos[MULTI];
    for (int i = 0; i <= B; i++) ids[i] = (int32_t)((500 + 31 * i) % V);
    for (int i = 0; i < MULTI; i++) pos[i] = s0 + B + 1;
    float *logits = bs_xmalloc(sizeof *logits * (size_t)(B + 1) * V);
    float *taps = bs_xmalloc(sizeof *taps * (size_t)(B + 1) * d->hp.n_taps * d->hp.n_embd);   /* (not written: the taps stay there) */
    const bs_batch_seq q = {.s = s, .tokens = ids, .n = B + 1, .logits_mode = BS_LOGITS_ALL, .logits = logits, .taps = taps, .next = next};
    int rc = bs_eval_seq(&q);
    for (int rep = 0; rep <= o->reps && !rc; rep++)
        for (int way = 0; way < 2 && !rc; way++) {   /* 0: one appends' pass, 1: a pass each */
            bs_vk_stats v0, v1;
            bs_vk_stats_get(s->m->vk, &v0);
            const double t0 = bs_time();
            if (!way) bs_dspark_collect(d, true);
            for (int i = 0; i < MULTI; i++) rc |= bs_dspark_ctx_append_session(cs[i], s->vk, B + 1);
            if (!way) rc |= bs_dspark_collect(d, false);
            rc |= bs_dspark_block_multi(cs, anchors, pos, slots, MULTI);
            const double dt = bs_time() - t0;
            bs_vk_stats_get(s->m->vk, &v1);
            for (int i = 0; i < MULTI; i++) bs_dspark_ctx_crop(cs[i], s0);
            if (!rep) continue;
            *(way ? &c->app_apart : &c->app) = BS_MIN(way ? c->app_apart : c->app, dt);
            *(way ? &c->app_apart_bytes : &c->app_bytes) = v1.weight_bytes - v0.weight_bytes;
        }
    rc |= bs_session_rollback(s, s0);
    free(logits);
    free(taps);
    return rc ? -1 : 0;
}

/* The blocks of MULTI contexts of s0 rows each in one pass, as drafting server slots run them
 * (on a device: the layers and the LM head once for all of them), then measure_appends. */
static int measure_multi(const bs_spec_bench_opts *o, bs_session *s, bs_dspark *d, int s0, const float *ptaps, costs *c) {
    bs_dspark_ctx *cs[MULTI] = {NULL};
    int32_t anchors[MULTI];
    int pos[MULTI], slots[MULTI], rc = 0;
    for (int i = 0; i < MULTI && !rc; i++) {
        rc = !(cs[i] = bs_dspark_ctx_new(d, s->n_ctx, s->pool)) || bs_dspark_ctx_append(cs[i], ptaps, s0);
        anchors[i] = (int32_t)((1000 + 37 * i) % s->m->hp.n_vocab);
        pos[i] = s0;
        slots[i] = d->hp.block_size;
    }
    bs_vk_stats v[3] = {{0}};
    for (int rep = 0; rep <= o->reps && !rc; rep++) {
        double t = 1e30, ta = 1e30;
        if (s->m->vk) bs_vk_stats_get(s->m->vk, &v[0]);
        BEST(t, rc |= bs_dspark_block_multi(cs, anchors, pos, slots, MULTI));
        if (s->m->vk) bs_vk_stats_get(s->m->vk, &v[1]);
        BEST(ta, for (int i = 0; i < MULTI; i++) rc |= bs_dspark_block_multi(cs + i, anchors + i, pos + i, slots + i, 1));
        if (s->m->vk) bs_vk_stats_get(s->m->vk, &v[2]);
        if (rep) c->multi = BS_MIN(c->multi, t), c->multi_apart = BS_MIN(c->multi_apart, ta);
    }
    c->multi_bytes = v[1].weight_bytes - v[0].weight_bytes;
    c->multi_apart_bytes = v[2].weight_bytes - v[1].weight_bytes;
    if (!rc) rc = measure_appends(o, s, d, cs, anchors, slots, c);
    for (int i = 0; i < MULTI; i++) bs_dspark_ctx_free(cs[i]);
    return rc ? -1 : 0;
}

static int measure(const bs_spec_bench_opts *o, bs_session *s, bs_dspark *d, costs *c) {
    const bs_dspark_hparams *hp = &d->hp;
    const int B = hp->block_size, V = s->m->hp.n_vocab, s0 = bs_session_n_past(s);
    const size_t row = (size_t)hp->n_taps * hp->n_embd;
    float *logits = bs_xmalloc((size_t)(B + 1) * V * sizeof(float));
    float *taps = bs_xmalloc((size_t)(B + 1) * row * sizeof(float));
    int32_t ids[BS_DSPARK_MAX_BLOCK + 1], next[BS_DSPARK_MAX_BLOCK + 1];
    for (int i = 0; i <= B; i++) ids[i] = (int32_t)((1000 + 37 * i) % V);
    bs_dspark_ctx *dc = bs_dspark_ctx_new(d, s->n_ctx, s->pool);
    /* a drafter on the device reads the target's taps there, as in speculative rounds */
    if (dc) bs_dspark_ctx_link(dc, s, B + 1);
    int rc = dc ? 0 : -1;
    c->B = B;
    for (int w = 0; w <= B + 1; w++) c->verify[w] = 1e30;
    c->rollback = c->append_row = c->block = c->markov = c->conf = c->accept_row = 1e30;
    for (int k = 0; k <= B; k++) c->head[k] = c->chain[k] = 1e30;
    c->slots = c->multi = c->multi_apart = c->app = c->app_apart = 1e30;
    /* a context of s0 rows for the drafter (the taps of the prompt are random-free: real rows) */
    float *ptaps = bs_xmalloc((size_t)BS_MAX(s0, 1) * row * sizeof(float));
    for (size_t i = 0; i < (size_t)s0 * row; i++) ptaps[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    if (!rc) rc = bs_dspark_ctx_append(dc, ptaps, s0) || measure_multi(o, s, d, s0, ptaps, c);
    free(ptaps);
    for (int rep = 0; rep <= o->reps && !rc; rep++) {
        const bool warm = rep == 0;
        for (int w = 1; w <= B + 1 && !rc; w++) {
            double t0 = bs_time();
            /* as a greedy round verifies: each row's id back, not the row */
            const bs_batch_seq q = {.s = s, .tokens = ids, .n = w, .logits_mode = BS_LOGITS_ALL, .logits = logits,
                                    .taps = taps, .next = next};
            rc |= bs_eval_seq(&q);
            double dt = bs_time() - t0;
            if (!warm && dt < c->verify[w]) c->verify[w] = dt;
            double t1 = bs_time();
            rc |= bs_session_rollback(s, w == B + 1 ? s0 + 1 : s0);
            if (w == B + 1 && !warm) c->rollback = BS_MIN(c->rollback, bs_time() - t1);
            if (w == B + 1) rc |= bs_session_rollback(s, s0);
        }
        double t = 1e30;
        volatile int same = 0;   /* (volatile: the comparisons are timed, not dropped) */
        BEST(t, for (int r = 0; r <= B; r++) same += next[r] == ids[r]);
        (void)same;
        if (!warm) c->accept_row = BS_MIN(c->accept_row, t / (B + 1));
        t = 1e30;
        BEST(t, rc |= bs_dspark_ctx_append_from(dc, s, taps, B + 1));
        bs_dspark_ctx_crop(dc, s0);
        if (!warm) c->append_row = BS_MIN(c->append_row, t / (B + 1));
        t = 1e30;
        BEST(t, rc |= bs_dspark_block(dc, ids[0], s0));
        if (!warm) c->block = BS_MIN(c->block, t);
        for (int k = 1; k <= B; k++) {
            int32_t drafts[BS_DSPARK_MAX_BLOCK];
            float conf[BS_DSPARK_MAX_BLOCK];
            t = 1e30;
            BEST(t, bs_dspark_draft_greedy(dc, ids[0], k, drafts, conf));
            if (!warm) c->head[k] = BS_MIN(c->head[k], t);
        }
        measure_sampled(dc, ids[0], B, warm, c);
        t = 1e30;
        BEST(t, bs_dspark_markov_bias(dc, ids[0], logits));
        if (!warm) c->markov = BS_MIN(c->markov, t);
        t = 1e30;
        BEST(t, bs_dspark_confidence(dc, 0, ids[0]));
        if (!warm) c->conf = BS_MIN(c->conf, t);
    }
    bs_dspark_ctx_link(NULL, s, 0);
    bs_dspark_ctx_free(dc);
    free(logits);
    free(taps);
    return rc ? -1 : 0;
}

/* A round with C drafts: drafter + verify(C+1) + acceptance + rollback (when not all accepted)
 * + feeding the kept rows to the drafter. */
static double round_time(const costs *c, int C, double p, double *tokens) {
    double e = 1.0, pk = 1.0;
    for (int i = 1; i <= C; i++) e += (pk *= p);
    *tokens = e;
    const double draft = C ? c->block + c->head[C] : 0.0;
    const double all = C ? pk : 1.0;   /* probability that every draft is accepted */
    return draft + c->verify[C + 1] + (C + 1) * c->accept_row + (1.0 - all) * c->rollback + e * c->append_row;
}

/* A drafter `bitspark synth` made (general.name bitspark-synth-*): random weights, so nothing it
 * drafts is meant to be accepted. Safetensors drafters and unnamed GGUFs count as trained. */
static bool synthetic(const char *path) {
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    const char *name = f ? gguf_get_str(f, "general.name") : NULL;
    const bool synth = name && !strncmp(name, "bitspark-synth", 14);
    gguf_close(f);
    bs_clear_error();
    return synth;
}

static void report(const bs_spec_bench_opts *o, const bs_model *m, const bs_dspark *d, const costs *c) {
    const int B = c->B;
    printf("DSpark round costs (measured at context %d, %d threads, best of %d)\n", o->n_prompt, o->n_threads, o->reps);
    printf("  device: target on %s, drafter on %s\n", bs_model_device(m),
           bs_dspark_on_device(d) ? bs_model_device(m) : "the CPU");
    printf("  target %s: %d layers, hidden %d, vocab %d\n", o->model, m->hp.n_layer, m->hp.n_embd, m->hp.n_vocab);
    printf("  drafter %s: %d layers, block %d, %d taps%s%s\n", o->drafter, d->hp.n_layer, B, d->hp.n_taps,
           d->embd_borrowed ? ", token_embd borrowed" : "", d->output_borrowed ? ", output borrowed" : "");
    printf("\n  part                                  ms\n");
    for (int w = 1; w <= B + 1; w++)
        printf("  verify, width %d                %10.3f   (%.2fx width 1)\n", w, c->verify[w] * 1e3, c->verify[w] / c->verify[1]);
    printf("  rollback (keep 1 of %d rows)     %10.3f\n", B + 1, c->rollback * 1e3);
    printf("  drafter: context append / row   %10.3f\n", c->append_row * 1e3);
    printf("  drafter: block pass (%d slots)   %10.3f\n", B, c->block * 1e3);
    if (c->multi < 1e30)   /* (a block with its slots' LM head rows, as the server's slots draft) */
        printf("  drafter: blocks of %d contexts   %10.3f   (one pass; %.2fx one a pass: %.3f)\n", MULTI, c->multi * 1e3,
               c->multi / c->multi_apart, c->multi_apart * 1e3);
    if (c->multi < 1e30 && c->multi_apart_bytes)
        printf("  drafter: their weights read   %10.3f MB (one pass; %.2fx one a pass: %.3f MB)\n", c->multi_bytes / 1e6,
               (double)c->multi_bytes / (double)c->multi_apart_bytes, c->multi_apart_bytes / 1e6);
    if (c->app < 1e30 && c->app_apart < 1e30 && c->app_apart_bytes)   /* (as the server's slots after a pass) */
        printf("  drafter: appends + blocks of %d  %10.3f   (one appends' pass; %.2fx a pass each: %.3f; weights %.2fx)\n",
               MULTI, c->app * 1e3, c->app / c->app_apart, c->app_apart * 1e3, (double)c->app_bytes / (double)c->app_apart_bytes);
    for (int k = 1; k <= B; k++) printf("  drafter: greedy drafts, %2d slot%s %10.3f\n", k, k > 1 ? "s" : " ", c->head[k] * 1e3);
    for (int k = 1; k <= B && c->chain[1] < 1e30; k++)
        printf("  drafter: sampled chain, %2d slot%s %10.3f   (one submission)\n", k, k > 1 ? "s" : " ", c->chain[k] * 1e3);
    if (c->slots < 1e30) printf("  drafter: sampled, %2d slots apart %10.3f   (a submission each)\n", B, c->slots * 1e3);
    printf("  of which Markov bias / slot     %10.3f   (on the host)\n", c->markov * 1e3);
    printf("  of which confidence / slot      %10.3f\n", c->conf * 1e3);
    printf("  overhead: greedy accept / row   %10.3f\n", c->accept_row * 1e3);
    double e0;
    const double plain = round_time(c, 0, 0, &e0);
    printf("\n  plain decoding: %.3f ms/token = %.2f tokens/s\n", plain * 1e3, 1.0 / plain);
    printf("\n  PROJECTIONS from the measured costs above: acceptance is assumed, not measured\n"
           "  (%s). p = per-token conditional acceptance.\n",
           synthetic(o->drafter) ? "this synthetic drafter's weights are random"
                 : o->n_gen > 0 ? "the measured generation below shows this drafter's own"
                                : "-n N measures this drafter's own");
    printf("     p   best depth   tokens/round   tokens/s   speedup   (speedup at depth 1..%d)\n", B);
    const double ps[] = {0.5, 0.6, 0.7, 0.75, 0.8, 0.9};
    for (size_t i = 0; i < BS_ARRAY_LEN(ps); i++) {
        int best = 1;
        double best_rate = 0, best_e = 0, rate[BS_DSPARK_MAX_BLOCK + 1];
        for (int C = 1; C <= B; C++) {
            double e, t = round_time(c, C, ps[i], &e);
            rate[C] = e / t;
            if (rate[C] > best_rate) { best_rate = rate[C]; best = C; best_e = e; }
        }
        printf("  %5.2f   %10d   %12.3f   %8.2f   %6.2fx   (", ps[i], best, best_e, best_rate, best_rate * plain);
        for (int C = 1; C <= B; C++) printf("%s%.2f", C > 1 ? " " : "", rate[C] * plain);
        printf(")\n");
    }
}

/* One greedy generation of n tokens after prompt; the ids into out, the seconds of the
 * generation into *t. drafter NULL: plain decoding. */
static int generate(bs_model *m, const bs_tokenizer *tok, const bs_spec_bench_opts *o, const bs_dspark *d,
                    const int32_t *prompt, int32_t *out, int *n_out, double *t, bs_gen_stats *st) {
    bs_gen_params gp = {.n_ctx = o->n_prompt + o->n_gen + 64, .n_threads = o->n_threads, .drafter = d,
                        .drafter_path = o->drafter, .draft_max = BS_DRAFT_AUTO};
    bs_gen *g = bs_gen_new(m, tok, &gp);
    if (!g) return -1;
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = o->n_gen;
    r.ignore_eos = true;   /* the same length with and without the drafter */
    int rc = bs_gen_begin(g, &r, prompt, o->n_prompt) || bs_gen_run(g, NULL, NULL) ? -1 : 0;
    bs_gen_output go;
    bs_gen_output_get(g, &go);
    *n_out = go.n_toks;
    for (int i = 0; i < go.n_toks; i++) out[i] = go.toks[i].id;
    *st = *bs_gen_get_stats(g);
    *t = st->t_gen;
    bs_gen_free(g);
    return rc;
}

/* The measured part: plain greedy decoding against the engine with the drafter (auto depth). */
static int measured(bs_model *m, const bs_dspark *d, const bs_spec_bench_opts *o, const int32_t *prompt) {
    bs_tokenizer *tok = bs_tokenizer_load(m);
    if (!tok) return -1;
    int32_t *a = bs_xmalloc((size_t)o->n_gen * sizeof *a), *b = bs_xmalloc((size_t)o->n_gen * sizeof *b);
    int na = 0, nb = 0;
    double ta = 0, tb = 0;
    bs_gen_stats sa, sb;
    /* a short first run lets auto depth measure its costs (the cost cache keeps them), so the
     * timed run below is the steady state a user sees, not the one-time measurement */
    bs_spec_bench_opts warm = *o;
    warm.n_gen = BS_MIN(2, o->n_gen);
    int rc = generate(m, tok, &warm, d, prompt, b, &nb, &tb, &sb) || generate(m, tok, o, NULL, prompt, a, &na, &ta, &sa) ||
             generate(m, tok, o, d, prompt, b, &nb, &tb, &sb);
    if (!rc) {
        const bool same = na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
        printf("\n  MEASURED greedy generation of %d tokens after the %d-token context (engine, auto depth)\n",
               o->n_gen, o->n_prompt);
        printf("  plain:    %8.2f tokens/s\n", ta > 0 ? na / ta : 0.0);
        const double ratio = ta > 0 && tb > 0 ? (nb / tb) / (na / ta) : 0.0;
        if (sb.n_accepted)
            printf("  drafter:  %8.2f tokens/s   (%.2fx; %ld drafted, %ld accepted = %.1f%%, %d rounds)\n",
                   tb > 0 ? nb / tb : 0.0, ratio, sb.n_drafted, sb.n_accepted, 100.0 * sb.n_accepted / sb.n_drafted,
                   sb.n_decode);
        else   /* every token came from plain steps: the ratio is timing noise, not a speedup */
            printf("  drafter:  %8.2f tokens/s   (%ld drafted, none accepted%s; no speedup measured)\n",
                   tb > 0 ? nb / tb : 0.0, sb.n_drafted,
                   sb.n_drafted ? "" : ": auto depth parked the drafter, its rounds cost more than they gain");
        printf("  output identical to plain decoding: %s\n", same ? "yes" : "NO");
        if (!same) rc = bs_error("speculative output differs from plain greedy decoding");
    }
    free(a);
    free(b);
    bs_tokenizer_free(tok);
    return rc ? -1 : 0;
}

int bs_spec_bench(const bs_spec_bench_opts *op) {
    const bs_spec_bench_opts o = *op;
    bs_model_params mp = {.device = o.device};
    bs_model *m = bs_model_load(o.model, &mp);
    bs_dspark *d = m ? bs_gen_drafter_open(o.drafter, m, BS_DRAFT_AUTO, false) : NULL;
    bs_session *s = NULL;
    int32_t *prompt = NULL;
    int rc = -1;
    if (!d) goto done;
    const char *dd = getenv("BITSPARK_DRAFT_DEVICE");
    if (m->vk && !(dd && !strcmp(dd, "cpu")) && bs_dspark_to_device(d, m, NULL)) goto done;
    bs_session_params sp = {.n_ctx = o.n_prompt + 64, .n_threads = o.n_threads,
                            .n_rollback = BS_MAX(16, d->hp.block_size + 1)};   /* a round's rows (gen.c) */
    if (!(s = bs_session_new(m, &sp)) || bs_session_set_taps(s, d->hp.taps, d->hp.n_taps)) goto done;
    /* the context: n_prompt tokens evaluated in batches */
    prompt = bs_xmalloc((size_t)o.n_prompt * sizeof *prompt);
    for (int i = 0; i < o.n_prompt; i++) prompt[i] = (int32_t)((7 + 131 * i) % m->hp.n_vocab);
    if (bs_eval(s, prompt, o.n_prompt, BS_LOGITS_NONE, NULL, NULL)) goto done;
    costs c;
    if (measure(&o, s, d, &c)) goto done;
    report(&o, m, d, &c);
    bs_session_free(s);
    s = NULL;
    if (o.n_gen > 0 && measured(m, d, &o, prompt)) goto done;
    rc = 0;
done:
    free(prompt);
    bs_session_free(s);
    bs_dspark_free(d);
    bs_model_free(m);
    return rc;
}
