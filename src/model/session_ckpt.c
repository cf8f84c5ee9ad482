/* session_ckpt.c: recurrent-state checkpoints of a session (see session_ckpt.h). */
#include "model/session_ckpt.h"
#include "model/session.h"
#include "model/device.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

struct bs_session_ckpt {
    const bs_model *m;
    size_t conv_sz, ssm_sz;       /* floats per GDN slot, as in the session it was made for */
    int pos;                      /* -1: empty */
    bool has_logits;
    float *state;                 /* [n_recurrent][conv_sz + ssm_sz] */
    float *logits;                /* [n_vocab] */
};

size_t bs_session_ckpt_bytes(const bs_session *s) {
    return ((size_t)s->m->n_recurrent * (s->conv_sz + s->ssm_sz) + (size_t)s->m->hp.n_vocab) *
           sizeof(float);
}

bs_session_ckpt *bs_session_ckpt_new(const bs_session *s) {
    bs_session_ckpt *c = bs_xcalloc(1, sizeof *c);
    c->m = s->m;
    c->conv_sz = s->conv_sz;
    c->ssm_sz = s->ssm_sz;
    c->pos = -1;
    size_t n = (size_t)s->m->n_recurrent * (s->conv_sz + s->ssm_sz);
    c->state = bs_xmalloc((n ? n : 1) * sizeof(float));
    c->logits = bs_xmalloc((size_t)s->m->hp.n_vocab * sizeof(float));
    return c;
}

void bs_session_ckpt_free(bs_session_ckpt *c) {
    if (!c) return;
    free(c->state);
    free(c->logits);
    free(c);
}

void bs_session_ckpt_save(bs_session_ckpt *c, const bs_session *s, const float *logits) {
    float *p = c->state;
    /* on the device: its recurrent state to the session's host arrays first (no KV rows) */
    if (s->vk && bs_device_state((bs_session *)s, 0, true)) bs_log(0, "bitspark: %s\n", bs_last_error());
    for (int g = 0; g < s->m->n_recurrent; g++) {
        memcpy(p, sess_conv(s, g, s->cur), s->conv_sz * sizeof(float));
        p += s->conv_sz;
        memcpy(p, sess_ssm(s, g, s->cur), s->ssm_sz * sizeof(float));
        p += s->ssm_sz;
    }
    c->pos = s->n_past;
    c->has_logits = logits != NULL;
    if (logits) memcpy(c->logits, logits, (size_t)s->m->hp.n_vocab * sizeof(float));
}

int bs_session_ckpt_restore(const bs_session_ckpt *c, bs_session *s) {
    if (c->pos < 0) return bs_error("checkpoint: empty");
    if (c->m != s->m || c->conv_sz != s->conv_sz || c->ssm_sz != s->ssm_sz)
        return bs_error("checkpoint: taken on another model or session");
    if (c->pos > s->n_past)
        return bs_error("checkpoint at %d is past the session's %d positions", c->pos, s->n_past);
    const float *p = c->state;
    for (int g = 0; g < s->m->n_recurrent; g++) {
        memcpy(sess_conv(s, g, s->cur), p, s->conv_sz * sizeof(float));
        p += s->conv_sz;
        memcpy(sess_ssm(s, g, s->cur), p, s->ssm_sz * sizeof(float));
        p += s->ssm_sz;
    }
    if (s->vk && (bs_device_state(s, 0, false) || bs_vk_sess_snapshot(s->vk))) return -1;
    s->n_past = c->pos;
    s->rb_n = 0;                  /* nothing of the last batch is left to undo */
    s->rb_base = s->n_past;
    s->rb_recorded = false;
    return 0;
}

int bs_session_ckpt_pos(const bs_session_ckpt *c) { return c->pos; }
const float *bs_session_ckpt_logits(const bs_session_ckpt *c) { return c->has_logits ? c->logits : NULL; }
