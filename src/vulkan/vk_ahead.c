/* vk_ahead.c: decoding one step ahead, greedy or sampled. A greedy step's next token is known
 * on the device (argmax.comp) before the host reads it, so the step after it can be submitted
 * before the host waits: its token is copied on the device from the argmax into the other set
 * of per-step buffers (tok, rope, params, ids come in two sets, filled by the host in turn), and
 * the queue runs it as soon as the first finishes. The host's wait, read-back and stop checks
 * then overlap the device's next step instead of leaving it idle between steps. A sampled step
 * (a sampler that reads only the k best) feeds the draw draft_draw.comp predicts from its list
 * with the uniform the host's sampler will draw it with (bs_sampler_lookahead); the host still
 * draws the token, and where it is another (float and double rounding a boundary apart) its
 * next call's token differs from the one fed and the step ahead is undone.
 *
 * The step ahead takes the rollback snapshot (the state pair: vk_session.c), so when the caller
 * asks for anything else (another token, a rollback, the state, a batch) it is undone exactly:
 * bs_vk_sess_settle waits for it and puts the state back. Its KV rows lie past what the
 * caller evaluated, rewritten before any step reads them. */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <string.h>

static void swap_buf(bs_vk_buf *a, bs_vk_buf *b) {
    const bs_vk_buf t = *a;
    *a = *b;
    *b = t;
}

/* The sets change places: the next step's values go into the other one. */
static void next_set(bs_vk_sess *s) {
    swap_buf(&s->tok, &s->tok_alt);
    swap_buf(&s->rope, &s->rope_alt);
    swap_buf(&s->params, &s->params_alt);
    swap_buf(&s->ids, &s->ids_alt);
    if (s->topv_alt.buf) {   /* (sampled steps' lists and uniforms, once made) */
        swap_buf(&s->top.topv, &s->topv_alt);
        swap_buf(&s->unif, &s->unif_alt);
    }
    s->io ^= 1;
}

/* A set's buffer: the current one's (a) or the other's (b). */
static const bs_vk_buf *of_set(const bs_vk_sess *s, int io, const bs_vk_buf *a, const bs_vk_buf *b) { return io == s->io ? a : b; }

/* The second set and the fences, made on first use (all or none). */
static int ahead_ready(bs_vk_sess *s) {
    if (s->fence[1]) return 0;
    bs_vk_ctx *c = s->net->c;
    if (bs_vk_buf_new(c, &s->tok_alt, s->tok.size, true) || bs_vk_buf_new(c, &s->rope_alt, s->rope.size, true) ||
        bs_vk_buf_new(c, &s->params_alt, s->params.size, true) || bs_vk_buf_new(c, &s->ids_alt, s->ids.size, true) ||
        bs_vk_fence_new(c, &s->fence[0]) || bs_vk_fence_new(c, &s->fence[1])) {
        bs_vk_buf *alt[] = {&s->tok_alt, &s->rope_alt, &s->params_alt, &s->ids_alt};
        for (int i = 0; i < 4; i++) bs_vk_buf_free(c, alt[i]);
        for (int i = 0; i < 2; i++) bs_vk_fence_free(c, s->fence[i]);
        s->fence[0] = s->fence[1] = VK_NULL_HANDLE;
        return bs_error_prefix("Vulkan decoding ahead: ");
    }
    return 0;
}

/* A sampled step's lists and uniforms in both sets, made on first use. */
static int drawn_ready(bs_vk_sess *s) {
    if (s->topv_alt.buf) return 0;
    bs_vk_ctx *c = s->net->c;
    if (bs_vk_top_ready(s) || bs_vk_buf_new(c, &s->topv_alt, s->top.topv.size, true) || bs_vk_buf_new(c, &s->unif, 4, true) ||
        bs_vk_buf_new(c, &s->unif_alt, 4, true)) {
        bs_vk_buf *b[] = {&s->topv_alt, &s->unif, &s->unif_alt};
        for (int i = 0; i < 3; i++) bs_vk_buf_free(c, b[i]);
        return bs_error_prefix("Vulkan sampling ahead: ");
    }
    /* from now on the lists swap with the sets: a list's recording made before, in the other
       set, binds what is now this one's (none is in flight: only greedy steps went ahead) */
    for (int i = 0; i < CACHE_STEPS; i++)
        if (s->cache[i].cmd && s->cache[i].topk > 0) bs_vk_step_drop(s, &s->cache[i]);
    return 0;
}

/* The step of token tok (NULL: fed by the step before) at pos0 submitted in the current set,
 * greedy (p NULL) or sampled with uniform u; *io gets that set (its fence, ids and list). */
static int issue(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, int *io, const bs_draw *p, float u) {
    *io = s->io;
    TRY(p ? bs_vk_step_fed_drawn(s, tok, pos0, rope, s->fence[*io], p, u) : bs_vk_step_fed(s, tok, pos0, rope, s->fence[*io]));
    next_set(s);
    return 0;
}

/* Whether steps go ahead here: with the second set (made on first use) and recordings kept. */
static bool can_ahead(bs_vk_sess *s, const bs_draw *p) {
    if (!s->no_cache && !s->no_ahead && (ahead_ready(s) || (p && drawn_ready(s)))) {   /* wait for each step (said once) */
        bs_log(1, "Vulkan: %s; decoding steps wait for each other\n", bs_last_error());
        bs_clear_error();
        s->no_ahead = true;
    }
    return !s->no_cache && !s->no_ahead;   /* (steps recorded anew every time have one set of buffers) */
}

/* The step of tok at pos0, under way already or submitted now, and the one after it (rope1) fed
 * by it; the set of the step of tok into *io, waited for. u: the sampled steps' uniforms. */
static int step_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, const bs_draw *p,
                      const float *u, int *io) {
    /* under way already, of this kind and draw (a list as long as this call's), with the adapters
       it was recorded with (LoRA may have changed since) */
    const bool same_draw = !p || !memcmp(&s->ahead_draw, p, sizeof *p);
    if (s->ahead && s->ahead_tok == tok && s->ahead_pos == pos0 && s->ahead_drawn == (p != NULL) && same_draw &&
        s->lora_gen == s->net->lora_gen) {
        *io = s->ahead_io;
        s->ahead = false;
    } else {
        TRY(bs_vk_sess_settle(s) || issue(s, &tok, pos0, rope0, io, p, p ? u[0] : 0.0f));
    }
    /* the next one, its token this one's argmax or predicted draw, undoable (the snapshot is the
       state after this); if it cannot go, this step still stands (its state is the session's)
       and later ones wait */
    if (rope1 && pos0 + 1 < s->n_ctx) {
        if (bs_vk_sess_snapshot(s) || issue(s, NULL, pos0 + 1, rope1, &s->ahead_io, p, p ? u[1] : 0.0f)) {
            bs_log(1, "Vulkan: a step ahead could not be submitted (%s); decoding steps wait for each other\n",
                   bs_last_error());
            bs_clear_error();
            s->no_ahead = true;
        } else {
            s->ahead = true;
            s->ahead_pos = pos0 + 1;
            s->ahead_drawn = p != NULL;
            if (p) s->ahead_draw = *p;
            s->net->c->stats.ahead++;
        }
    }
    return bs_vk_sess_wait(s, *io);
}

int bs_vk_sess_decode_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, int32_t *next) {
    if (pos0 < 0 || pos0 >= s->n_ctx) return bs_error("Vulkan eval: a token at %d does not fit", pos0);
    if (!can_ahead(s, NULL))
        return bs_vk_sess_eval_out(s, &tok, 1, pos0, rope0, &(bs_vk_out){.mode = 1, .next = next}, NULL, 0, NULL);
    int io;
    TRY(step_ahead(s, tok, pos0, rope0, rope1, NULL, NULL, &io));
    memcpy(next, of_set(s, io, &s->ids, &s->ids_alt)->map, 4);
    bs_vk_count_read(s->net->c, 4);
    s->ahead_tok = *next;
    return 0;
}

int bs_vk_sess_sample_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, const bs_draw *p,
                            const float *u, int32_t *ids, float *vals, int *n_top) {
    if (pos0 < 0 || pos0 >= s->n_ctx) return bs_error("Vulkan eval: a token at %d does not fit", pos0);
    if (p->top_k < 1 || p->top_k > BS_VK_TOP_MAX || !(p->temp > 0.0f)) return bs_error("Vulkan sampling ahead: top-%d", p->top_k);
    if (!can_ahead(s, p)) {
        const bs_vk_out o = {.mode = 1, .top_k = p->top_k, .top_ids = ids, .top_vals = vals, .n_top = n_top};
        return bs_vk_sess_eval_out(s, &tok, 1, pos0, rope0, &o, NULL, 0, NULL);
    }
    int io;
    TRY(step_ahead(s, tok, pos0, rope0, rope1, p, u, &io));
    const bs_vk_top_bufs t = {.topv = *of_set(s, io, &s->top.topv, &s->topv_alt)};
    *n_top = bs_vk_top_list(s->net->c, &t, 0, p->top_k, ids, vals);
    memcpy(&s->ahead_tok, of_set(s, io, &s->ids, &s->ids_alt)->map, 4);   /* the predicted draw, fed */
    bs_vk_count_read(s->net->c, 4);
    return 0;
}
