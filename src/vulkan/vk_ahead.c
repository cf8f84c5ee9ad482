/* vk_ahead.c: greedy decoding one step ahead. A decode step's next token is known on the device
 * (argmax.comp) before the host reads it, so the step after it can be submitted before the host
 * waits: its token is copied on the device from the argmax into the other set of per-step
 * buffers (tok, rope, params, ids come in two sets, filled by the host in turn), and the queue
 * runs it as soon as the first finishes. The host's wait, read-back and stop checks then
 * overlap the device's next step instead of leaving it idle between steps.
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
    s->io ^= 1;
}

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

/* The step of token tok (NULL: fed by the step before) at pos0 submitted in the current set;
 * *io gets that set (its fence and ids). */
static int issue(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, int *io) {
    *io = s->io;
    TRY(bs_vk_step_fed(s, tok, pos0, rope, s->fence[*io]));
    next_set(s);
    return 0;
}

int bs_vk_sess_decode_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, int32_t *next) {
    bs_vk_ctx *c = s->net->c;
    if (pos0 < 0 || pos0 >= s->n_ctx) return bs_error("Vulkan eval: a token at %d does not fit", pos0);
    if (!s->no_cache && !s->no_ahead && ahead_ready(s)) {   /* no second set: wait for each step (said once) */
        bs_log(1, "Vulkan: %s; greedy steps wait for each other\n", bs_last_error());
        bs_clear_error();
        s->no_ahead = true;
    }
    if (s->no_cache || s->no_ahead)   /* (steps recorded anew every time have one set of buffers) */
        return bs_vk_sess_eval_out(s, &tok, 1, pos0, rope0, &(bs_vk_out){.mode = 1, .next = next}, NULL, 0, NULL);
    int io;
    /* under way already, with the adapters it was recorded with (LoRA may have changed since) */
    if (s->ahead && s->ahead_tok == tok && s->ahead_pos == pos0 && s->lora_gen == s->net->lora_gen) {
        io = s->ahead_io;
        s->ahead = false;
    } else {
        TRY(bs_vk_sess_settle(s) || issue(s, &tok, pos0, rope0, &io));
    }
    /* the next one, its token this one's argmax, undoable (the snapshot is the state after this);
       if it cannot go, this step still stands (its state is the session's) and later ones wait */
    if (rope1 && pos0 + 1 < s->n_ctx) {
        if (bs_vk_sess_snapshot(s) || issue(s, NULL, pos0 + 1, rope1, &s->ahead_io)) {
            bs_log(1, "Vulkan: a step ahead could not be submitted (%s); greedy steps wait for each other\n",
                   bs_last_error());
            bs_clear_error();
            s->no_ahead = true;
        } else {
            s->ahead = true;
            s->ahead_pos = pos0 + 1;
            c->stats.ahead++;
        }
    }
    if (bs_vk_sess_wait(s, io)) return -1;
    memcpy(next, (io == s->io ? &s->ids : &s->ids_alt)->map, 4);
    bs_vk_count_read(c, 4);
    s->ahead_tok = *next;
    return 0;
}
