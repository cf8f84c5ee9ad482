/* gen.c: the generator's life cycle, the prompt with its prefix reuse, and stepping alone or in
 * a batch (gen.h). Sampling, delivery and speculative rounds are in gen_decode.c.
 *
 * Prompt cache: the generator remembers what its session holds and two saved states, one at the
 * request's ckpt_at (the start of a chat's last message) and one at the end of the prompt. A new
 * prompt continues from the longest of those that is a prefix of it (or from a rollback of the
 * live session). The recurrent (DeltaNet) state cannot be cut at an arbitrary position, so these
 * saved states are what make multi-turn reuse work: the next turn's prompt shares the history up
 * to the last message but renders the previous reply differently (its reasoning is dropped). */
#include "generate/gen_impl.h"
#include "sample/grammar.h"
#include "model/batch_eval.h"
#include "model/session.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *bs_gen_stop_name(int stop) {
    static const char *why[] = {"end of generation", "length limit", "context full", "interrupted",
                                "a loop", "a stop string", "an error", "nothing (running)"};
    return stop >= 0 && stop <= BS_GEN_RUNNING ? why[stop] : "?";
}

void bs_gen_request_init(bs_gen_request *r) {
    memset(r, 0, sizeof *r);
    r->sp = bs_sampler_default_params();
    r->n_breakers = -1;
    r->n_predict = -1;
    r->n_probs = -1;
    r->loop = bs_loop_guard_default_params();
    r->loop.mode = BS_LOOP_GUARD_OFF;
}

bs_gen *bs_gen_new(bs_model *m, const bs_tokenizer *tok, const bs_gen_params *p) {
    return bs_gen_new_pooled(m, tok, p, NULL);
}

bs_gen *bs_gen_new_pooled(bs_model *m, const bs_tokenizer *tok, const bs_gen_params *p, bs_pool *pool) {
    bs_gen *g = bs_xcalloc(1, sizeof *g);
    g->m = m;
    g->pool = pool;
    g->tok = tok;
    g->p = *p;
    g->n_vocab = bs_model_n_vocab(m);
    g->state = GS_IDLE;
    g->st.stop = BS_GEN_RUNNING;
    /* a drafter's round rolls back up to its block and the anchor: the cheap rollback must hold
     * that many rows (the default 16 is the most for blocks up to 15) */
    bs_session_params sp = {.n_ctx = p->n_ctx, .n_threads = pool ? bs_pool_size(pool) : p->n_threads,
                            .n_rollback = p->drafter ? BS_MAX(16, p->drafter->hp.block_size + 1) : 0};
    if (!(g->sess = bs_session_new(m, &sp))) goto fail;
    gen_own_session(g);
    if (pool && bs_session_share_pool(g->sess, pool)) goto fail;
    if (p->drafter) {
        bs_spec_params pp = {.draft_max = p->draft_max, .conf_cut = p->no_conf ? 0 : 1,
                             .draft_window = p->draft_window};
        if (!(g->spec = bs_spec_new(g->sess, p->drafter, &pp))) goto fail;
    } else if (!p->undo) {
        bs_session_set_undo(g->sess, 0);   /* plain decoding never rolls back */
    }
    g->logits = bs_xmalloc((size_t)g->n_vocab * sizeof *g->logits);
    g->toks = bs_xmalloc((size_t)bs_session_n_ctx(g->sess) * sizeof *g->toks);
    return g;
fail:
    bs_gen_free(g);
    return NULL;
}

static void end_request(bs_gen *g) {
    if (g->smp) bs_sampler_set_grammar(g->smp, NULL);
    bs_grammar_state_free(g->gstate);
    bs_grammar_free(g->grammar);
    g->gstate = NULL;
    g->grammar = NULL;
    bs_loop_guard_free(g->guard);
    bs_detok_free(g->dt);
    g->guard = NULL;
    g->dt = NULL;
    bs_stops_free(&g->stops);
    free(g->prompt);
    g->prompt = NULL;
    gen_images_free(g);
}

void bs_gen_free(bs_gen *g) {
    if (!g) return;
    end_request(g);
    gen_costs_flush(g);
    bs_grammar_vocab_free(g->gvocab);
    bs_sampler_free(g->smp);
    bs_spec_free(g->spec);
    if (g->sess && g->pool) bs_session_unshare_pool(g->sess);
    bs_session_free(g->sess);
    for (int k = 0; k < 2; k++) {
        free(g->ck[k].toks);
        free(g->ck[k].state);
        free(g->ck[k].logits);
    }
    free(g->logits);
    free(g->toks);
    free(g->text);
    free(g->out);
    free(g);
}

/* ---- prompt cache ---------------------------------------------------------------------------- */

static int prefix_len(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0, lim = BS_MIN(na, nb);
    while (n < lim && a[n] == b[n]) n++;
    return n;
}

/* How many prompt tokens can be reused and from where: -1 the live session, 0/1 a saved state,
 * 2 a rollback of the live session. At least one prompt token is left to evaluate (its logits),
 * unless a saved state holds the whole prompt with its logits. */
static int reuse_len(const bs_gen *g, const int32_t *prompt, int n, bool no_cache, int *from) {
    int best = 0;
    *from = -2;
    if (no_cache || g->state == GS_PROMPT) return 0;
    /* the live session counts only while it is what the generator left: not after a reset or a
     * state load by the caller (bs_gen_session), and not past rows an aborted or failed
     * evaluation left unrecorded (then the rows before them still are toks: a rollback holds) */
    const bool own = bs_session_loads(g->sess) == g->sess_loads;
    const bool whole = own && bs_session_n_past(g->sess) == g->n_toks;
    /* a reused prefix never ends inside an image: the rest of it would need its earlier rows */
    const int common = own ? gen_image_cut(prompt, n, prefix_len(g->toks, g->n_toks, prompt, n)) : 0;
    if (whole && g->n_toks > 0 && g->n_toks < n && common == g->n_toks) {
        best = g->n_toks;
        *from = -1;
    }
    for (int k = 0; k < 2; k++) {
        const gen_ckpt *c = &g->ck[k];
        if (c->state && c->n > best && (c->n < n || (c->n == n && c->logits)) &&
            prefix_len(c->toks, c->n, prompt, n) == c->n && gen_image_cut(prompt, n, c->n) == c->n) {
            best = c->n;
            *from = k;
        }
    }
    if (*from == -2 && common > 0 && common < n) {   /* only if the last batch reaches back there */
        best = common;
        *from = 2;
    }
    return best;
}

void gen_spec_keep(bs_gen *g, const int32_t *toks, int n) {
    if (!g->spec) return;
    /* the drafter followed the session, and the session g->toks while it is the generator's own */
    const bool own = bs_session_loads(g->sess) == g->sess_loads;
    bs_spec_crop(g->spec, own ? prefix_len(g->toks, BS_MIN(g->n_toks, bs_session_n_past(g->sess)), toks, n) : 0);
}

void bs_gen_share_prompt(bs_gen *dst, const bs_gen *src) {
    const gen_ckpt *c = &src->ck[1];
    gen_ckpt *d = &dst->ck[1];
    if (!c->state || !c->logits || dst == src) return;
    if (d->len < c->len) {
        free(d->state);
        d->state = bs_xmalloc(c->len);
    }
    memcpy(d->state, c->state, c->len);
    d->len = c->len;
    free(d->toks);
    d->toks = bs_xmalloc((size_t)(c->n ? c->n : 1) * sizeof *d->toks);
    memcpy(d->toks, c->toks, (size_t)c->n * sizeof *d->toks);
    d->n = c->n;
    if (!d->logits) d->logits = bs_xmalloc((size_t)dst->n_vocab * sizeof *d->logits);
    memcpy(d->logits, c->logits, (size_t)dst->n_vocab * sizeof *d->logits);
}

int bs_gen_reusable(const bs_gen *g, const int32_t *prompt, int n, const bs_gen_image *images, int n_images,
                    bool no_cache) {
    int32_t *x = NULL;
    if (n_images > 0 && !(x = gen_expand_request(g, prompt, n, images, n_images, &n))) return 0;
    int from, r = reuse_len(g, x ? x : prompt, n, no_cache, &from);
    free(x);
    return from == 2 ? 0 : r;   /* a rollback may fail: do not count on it */
}

static void ckpt_save(bs_gen *g, int k) {
    gen_ckpt *c = &g->ck[k];
    size_t need = bs_session_state_size(g->sess);
    if (need > c->len) {
        free(c->state);
        c->state = malloc(need);
        c->len = c->state ? need : 0;
    }
    free(c->toks);
    c->toks = NULL;
    c->n = 0;
    if (!c->state || bs_session_state_save(g->sess, c->state, need)) return;
    c->len = need;
    if (k == 1) {
        if (!c->logits) c->logits = bs_xmalloc((size_t)g->n_vocab * sizeof *c->logits);
        memcpy(c->logits, g->logits, (size_t)g->n_vocab * sizeof *c->logits);
    }
    c->toks = bs_xmalloc((size_t)(g->n_toks ? g->n_toks : 1) * sizeof *c->toks);
    memcpy(c->toks, g->toks, (size_t)g->n_toks * sizeof *c->toks);
    c->n = g->n_toks;
}

/* Bring the session to the reused prefix; returns its length (0: a fresh session). */
static int restore_prefix(bs_gen *g, const int32_t *prompt, int n, bool no_cache) {
    int from, reuse = reuse_len(g, prompt, n, no_cache, &from);
    if (from == 0 || from == 1) {
        const gen_ckpt *c = &g->ck[from];
        gen_spec_keep(g, c->toks, c->n);   /* a prompt shared from another slot is other tokens */
        if (bs_session_state_load(g->sess, c->state, c->len) == 0) {
            memcpy(g->toks, c->toks, (size_t)c->n * sizeof *g->toks);
            g->n_toks = c->n;
            if (c->n == n) memcpy(g->logits, c->logits, (size_t)g->n_vocab * sizeof *g->logits);
        } else {
            reuse = 0;
        }
    } else if (from == 2 && bs_session_rollback(g->sess, reuse)) {
        reuse = 0;
    }
    if (reuse == 0) bs_session_reset(g->sess);
    g->n_toks = reuse;   /* from == -1: the live session already holds exactly that */
    gen_own_session(g);
    return reuse;
}

static void prompt_done(bs_gen *g, int n);

/* The request's grammar, constraining the sampler from the first generated token on. */
static int setup_grammar(bs_gen *g, const char *gbnf) {
    if (!(g->grammar = bs_grammar_parse(gbnf))) return -1;
    if (!g->gvocab) g->gvocab = bs_grammar_vocab_new(g->tok);
    if (!(g->gstate = bs_grammar_state_new(g->grammar, g->gvocab))) return -1;
    bs_grammar_state_set_cancel(g->gstate, g->cancelled, g->cancel_ud);
    bs_sampler_set_grammar(g->smp, g->gstate);
    return 0;
}

/* ---- starting a request ---------------------------------------------------------------------- */

static int setup_sampler(bs_gen *g, const bs_gen_request *r, int reuse) {
    if (r->keep_sampler && g->smp) {
        bs_sampler_truncate(g->smp, (size_t)reuse);
        bs_sampler_accept_many(g->smp, g->prompt + reuse, (size_t)(g->n_prompt - reuse));
        return 0;
    }
    bs_sampler_free(g->smp);
    if (!(g->smp = bs_sampler_new(&r->sp, g->n_vocab))) return -1;
    for (int k = 0; k < r->n_bias; k++)
        if (bs_sampler_set_logit_bias(g->smp, r->bias_id[k], r->bias[k])) return -1;
    for (int32_t id = bs_tokenizer_n_vocab(g->tok); id < g->n_vocab; id++)
        bs_sampler_set_logit_bias(g->smp, id, -INFINITY);   /* ids the tokenizer cannot print */
    if (r->sp.dry_multiplier != 0.0f) {
        static const char *defaults[] = {"\n", ":", "\"", "*"};
        bs_sampler_vocab v = {(void *)g->tok, bs_tokenizer_piece_cb, bs_tokenizer_tokenize_cb};
        const char *const *b = r->n_breakers < 0 ? defaults : r->breakers;
        if (bs_sampler_set_dry_breakers(g->smp, b, r->n_breakers < 0 ? 4 : r->n_breakers, &v)) return -1;
    }
    bs_sampler_accept_many(g->smp, g->prompt, (size_t)g->n_prompt);
    return 0;
}

static void reset_output(bs_gen *g) {
    g->len = g->n_safe = 0;
    if (g->text) g->text[0] = 0;
    g->n_out = g->n_out_safe = 0;
    g->dirty_text = 0;
    g->dirty_tok = 0;
    g->stop_hit = false;
    g->line_at = SIZE_MAX;
    g->line_judged = false;
    g->t_first_out = 0;
    g->nl_last = false;
    memset(&g->st, 0, sizeof g->st);
    g->st.stop = BS_GEN_RUNNING;
    g->st.loop.mode = BS_LOOP_GUARD_OFF;
}

int bs_gen_begin(bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n) {
    const int n_ctx = bs_session_n_ctx(g->sess);
    if (n < 1 || !prompt) return bs_error("empty prompt");
    if (n >= n_ctx) return bs_error("the prompt is %d tokens but the context holds %d (use --ctx)", n, n_ctx);
    if (r->n_stop < 0 || r->n_stop > BS_GEN_MAX_STOP) return bs_error("at most %d stop strings", BS_GEN_MAX_STOP);
    if (r->n_probs > BS_GEN_MAX_TOP) return bs_error("at most %d top logprobs", BS_GEN_MAX_TOP);
    if (r->context_shift && r->loop.mode == BS_LOOP_GUARD_REWIND)   /* its checkpoints name old positions */
        return bs_error("the context shift and the rewinding loop guard do not combine");
    end_request(g);
    reset_output(g);
    g->r = *r;
    g->r.stop = NULL;
    g->r.grammar = NULL;   /* compiled below; the text is not kept */
    if (bs_stops_init(&g->stops, r->stop, r->n_stop)) {
        end_request(g);
        g->state = GS_IDLE;
        return -1;
    }
    if (gen_images_begin(g, r, prompt, n, &g->prompt, &g->n_prompt)) {
        end_request(g);
        g->state = GS_IDLE;
        return -1;
    }
    if (r->n_images) g->r.ckpt_at = gen_expand_pos(r, prompt, n, r->ckpt_at);
    g->r.images = NULL;   /* copied into g->img */
    prompt = g->prompt;
    n = g->n_prompt;
    g->t0 = bs_time();
    /* a request that does not draft still feeds its prompt to the drafter (the prompt paths take
     * g->spec): the next turn of the conversation drafts from a context that has it */
    g->use_spec = g->spec && !r->no_draft && !(r->post_probs && r->n_probs >= 0);
    g->prepared = g->parked = false;
    if (g->spec) g->spec0 = *bs_spec_get_stats(g->spec);
    const int reuse = restore_prefix(g, prompt, n, r->no_cache);
    g->n_done = reuse;
    g->st.n_cached = reuse;
    g->state = GS_PROMPT;
    if (setup_sampler(g, r, reuse) || !(g->dt = gen_detok_new(g)) ||
        (r->loop.mode != BS_LOOP_GUARD_OFF && !(g->guard = bs_loop_guard_new(&r->loop, g->sess, g->smp, g->tok)))) {
        end_request(g);
        g->state = GS_IDLE;
        return -1;
    }
    if (r->grammar && setup_grammar(g, r->grammar)) {
        end_request(g);
        g->state = GS_IDLE;
        return -1;
    }
    /* decoding needs only each token's id: the device's argmax, not the logits row */
    const bool ids_only = r->greedy_on_device && !g->use_spec && r->n_probs < 0 && !g->guard && bs_session_on_device(g->sess);
    g->argmax_dev = ids_only && bs_sampler_plain_greedy(g->smp);
    g->top_dev = ids_only && !g->argmax_dev ? bs_sampler_top_k_only(g->smp, BS_TOP_MAX) : 0;
    g->have_next = g->have_top = false;
    if (reuse == n) {   /* the whole prompt and its logits came from the cache */
        if (g->spec) bs_spec_sync(g->spec);
        prompt_done(g, 0);
    }
    return 0;
}

/* ---- the prompt ------------------------------------------------------------------------------ */

/* Rows of the next prompt chunk: at most budget (<= 0: no limit), ending at ckpt_at first. */
static int prompt_chunk(const bs_gen *g, int budget) {
    const int ck = g->r.ckpt_at;
    const int target = ck > g->n_done && ck < g->n_prompt ? ck : g->n_prompt;
    const int c = budget > 0 ? BS_MIN(budget, target - g->n_done) : target - g->n_done;
    return gen_text_run(g, g->n_done, g->n_done + c) - g->n_done;   /* text up to the next image */
}

/* The image the prompt goes on with, or NULL: it is evaluated whole, on its own. */
static const gen_img *next_image(const bs_gen *g) {
    return g->state == GS_PROMPT && g->n_done < g->n_prompt && gen_is_image_start(g->prompt[g->n_done])
               ? gen_image_at(g, g->n_done) : NULL;
}

bool bs_gen_next_is_image(const bs_gen *g) { return next_image(g) != NULL; }

static int image_step(bs_gen *g, const gen_img *im) {
    const int rows = im->nx * im->ny;
    const bool last = g->n_done + rows == g->n_prompt;
    float *lg = last ? g->logits : NULL;
    if (g->spec ? bs_spec_prompt_image(g->spec, im->embd, im->nx, im->ny, lg)
                    : bs_eval_image(g->sess, im->embd, im->nx, im->ny, last ? BS_LOGITS_LAST : BS_LOGITS_NONE, lg, NULL)) {
        bs_error_prefix("evaluating the prompt's image: ");
        gen_finish(g, BS_GEN_ERROR);
        return -1;
    }
    prompt_done(g, rows);
    return 0;
}

/* A prompt chunk of n tokens has been evaluated. */
static void prompt_done(bs_gen *g, int n) {
    memcpy(g->toks + g->n_toks, g->prompt + g->n_done, (size_t)n * sizeof *g->toks);
    g->n_toks += n;
    g->n_done += n;
    if (g->n_done == g->r.ckpt_at) ckpt_save(g, 0);
    if (g->n_done < g->n_prompt) return;
    if (g->r.ckpt_end && n > 0) ckpt_save(g, 1);
    const double now = bs_time();
    g->st.n_prompt = g->n_prompt - g->st.n_cached;
    g->st.t_prompt = now - g->t0;
    g->t0 = now;
    g->gen_base = g->n_toks;
    if (g->guard) bs_loop_guard_begin(g->guard, g->logits);
    if (g->guard && g->r.loop_prefix)
        bs_loop_guard_set_prefix(g->guard, g->r.loop_prefix, g->r.loop_prefix_len);
    gen_after_logits(g);
}

static int prompt_step(bs_gen *g, int budget) {
    const gen_img *im = next_image(g);
    if (im) return image_step(g, im);
    const int c = prompt_chunk(g, budget);
    const bool last = g->n_done + c == g->n_prompt;
    const int32_t *t = g->prompt + g->n_done;
    int e = g->spec ? bs_spec_prompt(g->spec, t, c, last ? g->logits : NULL)
                        : bs_eval(g->sess, t, c, last ? BS_LOGITS_LAST : BS_LOGITS_NONE, last ? g->logits : NULL, NULL);
    if (e) {
        bs_error_prefix("evaluating the prompt: ");
        gen_finish(g, BS_GEN_ERROR);
        return -1;
    }
    prompt_done(g, c);
    return 0;
}

/* ---- stepping -------------------------------------------------------------------------------- */

/* The pending token was evaluated (logits in g->logits). */
static void decoded(bs_gen *g) {
    g->toks[g->n_toks++] = g->pending;
    g->st.n_decode++;
    if (g->guard) bs_loop_guard_evaluated(g->guard, g->logits);
    gen_after_logits(g);
}

/* A greedy or sampled step on a device runs the next one ahead unless the token budget ends
 * with this one (a request of a few tokens would pay a step in vain). */
static void ahead_hint(bs_gen *g) {
    if (!g->argmax_dev && !g->top_dev) return;
    const bool last = g->r.n_predict >= 0 && g->n_out + 1 >= g->r.n_predict;
    bs_session_ahead_limit(g->sess, last ? bs_session_n_past(g->sess) + 1 : 0);
}

/* A sampled step from the device's k best: with the uniforms of this draw and the next (the
 * sampler's own, taken first: bs_sampler_lookahead), so that the step after can run meanwhile,
 * fed the draw the device predicts. */
static int top_step(bs_gen *g) {
    const bs_draw d = bs_sampler_draw_steps(g->smp, g->top_dev);
    double u[2];
    bs_sampler_lookahead(g->smp, 2, u);
    return bs_eval_top_drawn(g->sess, g->pending, &d, u, g->top_ids, g->top_vals);
}

int bs_gen_step(bs_gen *g, int budget) {
    switch (g->state) {
    case GS_PROMPT:
        return prompt_step(g, budget);
    case GS_DECODE:
        ahead_hint(g);
        g->have_next = g->argmax_dev;
        g->have_top = g->top_dev > 0;
        if (g->argmax_dev ? bs_eval_greedy(g->sess, &g->pending, 1, &g->next_id, NULL)
            : g->top_dev  ? (g->n_top = top_step(g)) < 0
                          : bs_eval(g->sess, &g->pending, 1, BS_LOGITS_LAST, g->logits, NULL)) {
            bs_error_prefix("decoding: ");
            gen_finish(g, BS_GEN_ERROR);
            return -1;
        }
        decoded(g);
        return 0;
    case GS_SPEC:
        gen_spec_round(g);
        return g->st.stop == BS_GEN_ERROR ? -1 : 0;
    default:
        return 0;
    }
}

int bs_gen_run(bs_gen *g, void (*on_step)(void *ud, bs_gen *g), void *ud) {
    int rc = 0;
    while (!bs_gen_done(g) && rc == 0) {
        rc = bs_gen_step(g, 0);
        if (on_step) on_step(ud, g);
    }
    return rc;
}

int bs_gen_plan(bs_gen *g, int budget, bs_batch_seq *q) {
    g->spec_planned = false;
    if (g->use_spec && g->state == GS_SPEC) return g->spec_planned = gen_spec_plan(g, q);
    if (g->state == GS_DECODE) {
        ahead_hint(g);
        *q = (bs_batch_seq){.s = g->sess, .tokens = &g->pending, .n = 1, .logits_mode = BS_LOGITS_LAST,
                            .logits = g->logits, .next = g->argmax_dev ? &g->next_id : NULL, .top_k = g->top_dev,
                            .top_ids = g->top_ids, .top_logits = g->top_vals, .n_top = &g->n_top};
        return 1;
    }
    if (g->state != GS_PROMPT || budget <= 0 || next_image(g)) return 0;   /* images: bs_gen_step */
    const int c = prompt_chunk(g, budget);
    const bool last = g->n_done + c == g->n_prompt;
    if (g->spec) {   /* with the taps the drafter reads, in chunks its tap buffer holds */
        const int r = bs_spec_prompt_plan(g->spec, g->prompt + g->n_done, c, last ? g->logits : NULL, q);
        if (r < 0) {
            gen_finish(g, BS_GEN_ERROR);
            return 0;
        }
        g->planned = r;
        return 1;
    }
    g->planned = c;
    *q = (bs_batch_seq){.s = g->sess, .tokens = g->prompt + g->n_done, .n = c,
                        .logits_mode = last ? BS_LOGITS_LAST : BS_LOGITS_NONE, .logits = g->logits};
    return 1;
}

void bs_gen_commit(bs_gen *g, bool ok) {
    if (g->spec_planned) {
        g->spec_planned = false;
        gen_spec_commit(g, ok);
        return;
    }
    if (!ok) {
        gen_finish(g, BS_GEN_ERROR);
        return;
    }
    if (g->state == GS_DECODE) {
        g->have_next = g->argmax_dev;   /* the pass gave the id (bs_gen_plan's .next) */
        g->have_top = g->top_dev > 0;   /* or the k best (.top_k) */
        decoded(g);
    } else if (g->state == GS_PROMPT) {
        if (g->spec && bs_spec_prompt_commit(g->spec, g->planned)) {
            bs_error_prefix("evaluating the prompt: ");
            gen_finish(g, BS_GEN_ERROR);
            return;
        }
        prompt_done(g, g->planned);
    }
}

bool bs_gen_done(const bs_gen *g) { return g->state == GS_DONE || g->state == GS_IDLE; }
bool bs_gen_in_prompt(const bs_gen *g) { return g->state == GS_PROMPT; }
bool bs_gen_drafting(const bs_gen *g) { return g->use_spec; }

void bs_gen_set_shared_rows(bs_gen *g, int rows) {
    if (g->spec) bs_spec_depth_mut(g->spec)->shared_rows = BS_MAX(rows, 0);
}

void bs_gen_set_cancel_hook(bs_gen *g, bool (*cancelled)(void *ud), void *ud) {
    g->cancelled = cancelled;
    g->cancel_ud = ud;
}

void bs_gen_cancel(bs_gen *g, int stop) {
    if (stop < 0 || stop >= BS_GEN_RUNNING) stop = BS_GEN_INTERRUPT;   /* a reason that is none: cancelled */
    if (g->state != GS_DONE && g->state != GS_IDLE) gen_finish(g, stop);
}

/* ---- what it produced ------------------------------------------------------------------------ */

void bs_gen_output_get(const bs_gen *g, bs_gen_output *o) {
    *o = (bs_gen_output){.text = g->text ? g->text : "", .len = g->len, .n_safe = g->n_safe,
                         .toks = g->out, .n_toks = g->n_out, .n_toks_safe = g->n_out_safe};
}

void bs_gen_output_changed(bs_gen *g, size_t *text_from, int *tok_from) {
    *text_from = BS_MIN(g->dirty_text, g->len);
    *tok_from = BS_MIN(g->dirty_tok, g->n_out);
    g->dirty_text = g->len;
    g->dirty_tok = g->n_out;
}

const bs_gen_stats *bs_gen_get_stats(const bs_gen *g) { return &g->st; }
bs_session *bs_gen_session(bs_gen *g) { return g->sess; }
bs_sampler *bs_gen_sampler(bs_gen *g) { return g->smp; }
bs_spec *bs_gen_spec(bs_gen *g) { return g->spec; }
const float *bs_gen_logits(const bs_gen *g) { return g->logits; }

const int32_t *bs_gen_cached(const bs_gen *g, int *n) {
    *n = g->n_toks;
    return g->toks;
}
