/* forward.c: one batch through the qwen35 decoder (qwen35-arch.md §4): embeddings, per layer
 * h = x + Mixer(RMSNorm(x) * attn_norm), out = h + FFN(RMSNorm(h) * post_attention_norm) with a
 * SwiGLU FFN, then the final norm and the LM head. The residual stream is f32; every weight
 * multiply is one bs_matmul call over the whole batch. */
#include "cpu/compute.h"
#include "model/profile.h"
#include "model/session.h"

#include <string.h>

static void norm_rows(float *dst, const float *src, const float *w, int n, int width, float eps) {
    for (int t = 0; t < n; t++)
        bs_rmsnorm(dst + (size_t)t * width, src + (size_t)t * width, w, width, eps);
}

static void add_rows(float *x, const float *y, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] = y[i] + x[i];
}

static void ffn(bs_session *s, const bs_qwen35_layer *L, int n) {
    const size_t count = (size_t)n * s->m->hp.n_ff;
    bs_prof_matmul(BS_PROF_MM_FFN_UP, &L->ffn_gate, s->xn, n, s->a, s->pool);
    bs_prof_matmul(BS_PROF_MM_FFN_UP, &L->ffn_up, s->xn, n, s->b, s->pool);
    const uint64_t t0 = bs_prof_begin();
    bs_silu_mul(s->a, s->a, s->b, count);
    bs_prof_end(BS_PROF_SWIGLU, t0);
    bs_prof_matmul(BS_PROF_MM_FFN_DOWN, &L->ffn_down, s->a, n, s->y, s->pool);
}

/* Copy the residual stream after layer il into every tap slot that names it. */
static void capture(const bs_session *s, int il, int n, float *taps) {
    const int E = s->m->hp.n_embd;
    const size_t row = (size_t)s->n_taps * E;
    for (int c = 0; c < s->n_taps; c++)
        if (s->taps[c] == il)
            for (int t = 0; t < n; t++)
                memcpy(taps + t * row + (size_t)c * E, s->x + (size_t)t * E, (size_t)E * sizeof(float));
}

void bs_forward_batch(bs_session *s, int n, bool record, int logits_mode,
                      float *logits, float *taps) {
    const bs_model *m = s->m;
    const bs_qwen35_hparams *hp = &m->hp;
    const int E = hp->n_embd;

    bs_prof_step(n);
    uint64_t t0 = bs_prof_begin();
    bs_session_batch_rows(s, n, s->x);   /* token embeddings or image rows, and their RoPE */
    bs_prof_end(BS_PROF_EMBED, t0);

    for (int il = 0; il < hp->n_layer; il++) {
        const bs_qwen35_layer *L = &m->layers[il];
        t0 = bs_prof_begin();
        norm_rows(s->xn, s->x, L->attn_norm, n, E, hp->eps);
        bs_prof_end(BS_PROF_NORM, t0);
        if (L->recurrent) bs_deltanet_forward(s, L, n, record);
        else bs_attention_forward(s, L, n);
        t0 = bs_prof_begin();
        add_rows(s->x, s->y, (size_t)n * E);
        norm_rows(s->xn, s->x, L->post_norm, n, E, hp->eps);
        bs_prof_end(BS_PROF_NORM, t0);
        ffn(s, L, n);
        t0 = bs_prof_begin();
        add_rows(s->x, s->y, (size_t)n * E);
        bs_prof_end(BS_PROF_NORM, t0);
        if (taps) capture(s, il, n, taps);
    }
    bs_session_end_batch(s, n);

    if (logits_mode == BS_LOGITS_ALL) {
        norm_rows(s->xn, s->x, m->output_norm, n, E, hp->eps);
        bs_prof_matmul(BS_PROF_MM_HEAD, &m->output, s->xn, n, logits, s->pool);
    } else if (logits_mode == BS_LOGITS_LAST) {
        norm_rows(s->xn, s->x + (size_t)(n - 1) * E, m->output_norm, 1, E, hp->eps);
        bs_prof_matmul(BS_PROF_MM_HEAD, &m->output, s->xn, 1, logits, s->pool);
    }
}
