/* device.c: where a model runs (--device, bs_model_params.device) and the seam to the Vulkan
 * backend: the model layer describes the network to it (hyper-parameters and each layer's
 * tensors, vulkan/backend.h's bs_vk_net_desc) and, per session, hands it evaluation while
 * keeping the bookkeeping (positions, rollback, state layout) here, the same as on the CPU.
 * auto: a discrete or integrated GPU if the instance has one (a CPU Vulkan device such as
 * lavapipe only when named or with BITSPARK_VK_ALLOW_CPU=1), else the CPU; when Vulkan cannot
 * start, auto falls back to the CPU with one line, a named device fails. Without a device
 * given, BITSPARK_DEVICE names one. */
#include "model/device.h"
#include "model/session.h"
#include "cpu/compute.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bs_vk_tensor tensor_of(const bs_weight *w) {
    bs_vk_tensor t = {.type = w->type, .ne0 = w->ne0, .ne1 = w->ne1, .data = w->data, .row_bytes = w->row_bytes,
                      .name = w->name};
    if (w->rot)   /* a Bonsai 2 file's fold (cpu/matmul.h), as the device takes it */
        t.fold = (bs_vk_fold){w->rot->block, w->rot->width, w->rot->signs, w->rot->perm_hd, w->rot->perm_nk,
                              w->rot->perm_rep, w->rot->inverse != 0};
    return t;
}

/* The network as the backend takes it (ld: its layers, the caller frees them). */
static bs_vk_net_desc describe(const bs_model *m, bs_vk_layer_desc **ldp) {
    const bs_qwen35_hparams *hp = &m->hp;
    bs_vk_layer_desc *ld = *ldp = bs_xcalloc((size_t)hp->n_layer, sizeof *ld);
    for (int il = 0; il < hp->n_layer; il++) {
        const bs_qwen35_layer *L = &m->layers[il];
        bs_vk_layer_desc *d = &ld[il];
        d->recurrent = L->recurrent;
        d->attn_norm = L->attn_norm;
        d->post_norm = L->post_norm;
        d->ffn_gate = tensor_of(&L->ffn_gate);
        d->ffn_up = tensor_of(&L->ffn_up);
        d->ffn_down = tensor_of(&L->ffn_down);
        if (L->recurrent) {
            d->qkv = tensor_of(&L->qkv);
            d->gate = tensor_of(&L->gate);
            d->beta = tensor_of(&L->beta);
            d->alpha = tensor_of(&L->alpha);
            d->ssm_out = tensor_of(&L->ssm_out);
            d->conv1d = L->conv1d;
            d->dt_bias = L->dt_bias;
            d->ssm_a = L->ssm_a;
            d->ssm_norm = L->ssm_norm;
        } else {
            d->wq = tensor_of(&L->wq);
            d->wk = tensor_of(&L->wk);
            d->wv = tensor_of(&L->wv);
            d->wo = tensor_of(&L->wo);
            d->q_norm = L->q_norm;
            d->k_norm = L->k_norm;
        }
    }
    return (bs_vk_net_desc){
        .n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_ff = hp->n_ff, .n_vocab = hp->n_vocab, .eps = hp->eps,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_rot = hp->n_rot,
        .rope_base = hp->rope_base, .conv_kernel = hp->conv_kernel, .n_k_heads = hp->n_k_heads,
        .n_v_heads = hp->n_v_heads, .d_k = hp->d_k, .d_v = hp->d_v, .conv_dim = hp->conv_dim,
        .tok_embd = tensor_of(&m->tok_embd), .output = tensor_of(&m->output), .output_norm = m->output_norm,
        .layers = ld,
    };
}

static bs_vk_net *upload(bs_model *m) {
    bs_vk_layer_desc *ld;
    const bs_vk_net_desc nd = describe(m, &ld);
    bs_vk_net *net = bs_vk_net_new(m->vk, &nd);
    free(ld);
    return net;
}

int bs_device_sleep(bs_model *m) { return m->vk_net ? bs_vk_net_sleep(m->vk_net) : 0; }

int bs_device_wake(bs_model *m) {
    if (!m->vk_net) return 0;
    bs_vk_layer_desc *ld;
    const bs_vk_net_desc nd = describe(m, &ld);
    const int rc = bs_vk_net_wake(m->vk_net, &nd);
    free(ld);
    return rc;
}

static void name_cpu(bs_model *m) {
    snprintf(m->device_name, sizeof m->device_name, "CPU (%s)", bs_cpu_level_name(bs_cpu_level()));
}

int bs_model_choose_device(bs_model *m, const char *spec) {
    int kind, index;
    /* no device given: BITSPARK_DEVICE (the tests pin the CPU suite to the CPU with it, so a
     * machine with a GPU runs the same checks) */
    if ((!spec || !*spec) && getenv("BITSPARK_DEVICE") && *getenv("BITSPARK_DEVICE")) spec = getenv("BITSPARK_DEVICE");
    if (bs_vk_parse_device(spec, &kind, &index)) return -1;
    name_cpu(m);
    if (kind == BS_DEVICE_CPU) return 0;
    const bool named = kind == BS_DEVICE_VULKAN;
    if (!named) {
        if (!bs_vk_built()) return 0;
        index = bs_vk_pick(false);
        if (index < 0) {
            /* a loader or instance that failed says why; no GPU at all needs no line */
            const char *why = bs_last_error();
            if (why && *why && strstr(why, "Vulkan") && !strstr(why, "no Vulkan loader"))
                bs_log(1, "device: Vulkan unavailable (%s); using the CPU\n", why);
            bs_clear_error();
            return 0;
        }
    } else if (index < 0 && (index = bs_vk_pick(true)) < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", bs_last_error() && *bs_last_error() ? bs_last_error() : "no Vulkan device");
        return bs_error("--device %s: %s", spec, why);
    }
    if (!(m->vk = bs_vk_open(index)) || !(m->vk_net = upload(m))) {
        if (named) return bs_error_prefix("--device %s: ", spec);
        bs_log(1, "device: Vulkan device %d unusable (%s); using the CPU\n", index, bs_last_error());
        bs_vk_net_free(m->vk_net);
        bs_vk_close(m->vk);
        m->vk_net = NULL;
        m->vk = NULL;
        bs_clear_error();
        return 0;
    }
    /* (and how prompts' products run, where not mv_q's way: cooperative matrices on a GPU) */
    const int mm = bs_vk_mm_mode(m->vk);
    bool khr = false;
    const bs_vk_coop_shape cs = bs_vk_mm_coop(m->vk, &khr);
    char shape[48] = "";
    if (mm == BS_VK_MM_COOP) snprintf(shape, sizeof shape, " %ux%ux%u %s", cs.m, cs.n, cs.k, khr ? "KHR" : "NV");
    snprintf(m->device_name, sizeof m->device_name, "Vulkan %.200s%s%s%s", bs_vk_info(m->vk)->name, mm ? ", prompts by " : "",
             mm ? bs_vk_mm_name(mm) : "", shape);
    return 0;
}

void bs_model_release_device(bs_model *m) {
    bs_vk_net_free(m->vk_net);
    bs_vk_close(m->vk);
    m->vk_net = NULL;
    m->vk = NULL;
}

const char *bs_model_device(const bs_model *m) { return m->device_name; }

/* --- sessions on the device ---------------------------------------------------------------- */
int bs_device_session_new(bs_session *s) {
    if (!s->m->vk_net) return 0;
    return (s->vk = bs_vk_sess_new(s->m->vk_net, s->n_ctx, s->n_batch, s->kv_type == BS_KV_F32)) ? 0 : -1;
}

int bs_device_begin(bs_session *s, const int32_t *tokens, int c, bool *snap) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    memmove(s->rb_tokens, tokens, (size_t)c * sizeof(int32_t));
    s->rb_img = false;
    const bool undo = !(s->no_undo && c == 1);
    if (snap) *snap = undo;
    else if (undo && bs_vk_sess_snapshot(s->vk)) return -1;
    s->rb_base = s->n_past;
    s->rb_n = undo ? c : 0;
    s->rb_recorded = false;
    for (int t = 0; t < c; t++)
        bs_rope_cache(s->rope + (size_t)t * hp->n_rot, sess_pos(s) + t, hp->n_rot, hp->rope_base, hp->rope_sections);
    return 0;
}

void bs_device_end(bs_session *s, int c) {
    for (int t = 0; t < c; t++) s->pos_next[s->n_past + t] = sess_pos(s) + t + 1;
    s->n_past += c;
}

_Static_assert(BS_TOP_MAX <= BS_VK_TOP_MAX, "the device's top-k list holds BS_TOP_MAX");

/* An evaluation in chunks of the session's batch: each chunk's logits rows (mode) come back as
 * o asks (rows, greedy tokens or k best lists; bs_vk_out), its taps into taps. */
static int device_eval(bs_session *s, const int32_t *tokens, int n, const bs_vk_out *o, float *taps) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const size_t nv = (size_t)hp->n_vocab, tap_row = (size_t)s->n_taps * hp->n_embd, k = (size_t)o->top_k;
    const bool all = o->mode == BS_LOGITS_ALL;
    for (int off = 0; off < n; off += s->n_batch) {
        const int c = BS_MIN(s->n_batch, n - off);
        const bool last = off + c == n;
        const size_t r0 = all ? (size_t)off : 0;   /* the chunk's first logits row */
        bs_vk_out co = {.mode = all ? BS_LOGITS_ALL : (o->mode == BS_LOGITS_LAST && last ? BS_LOGITS_LAST : BS_LOGITS_NONE),
                        .logits = o->logits ? o->logits + r0 * nv : NULL, .next = o->next ? o->next + r0 : NULL,
                        .top_k = o->top_k, .top_ids = o->top_ids ? o->top_ids + r0 * k : NULL,
                        .top_vals = o->top_vals ? o->top_vals + r0 * k : NULL, .n_top = o->n_top ? o->n_top + r0 : NULL};
        if (bs_device_begin(s, tokens + off, c, NULL)) return -1;
        float *tap_out = taps && !s->taps_on_device ? taps + (size_t)off * tap_row : NULL;
        if (bs_vk_sess_eval_out(s->vk, s->rb_tokens, c, s->n_past, s->rope, &co, s->taps, taps ? s->n_taps : 0, tap_out))
            return -1;
        bs_device_end(s, c);
    }
    return 0;
}

int bs_device_eval(bs_session *s, const int32_t *tokens, int n, int mode, float *logits, float *taps) {
    return device_eval(s, tokens, n, &(bs_vk_out){.mode = mode, .logits = logits}, taps);
}

/* A decode step one ahead (undo off): the device runs the step after it meanwhile, at the next
 * position, fed this step's token on the device: its argmax (o->next: bs_vk_sess_decode_ahead)
 * or the draw predicted there from its k best (o->draw: bs_vk_sess_sample_ahead). */
static int step_ahead(bs_session *s, int32_t tok, const bs_vk_out *o) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    if (bs_device_begin(s, &tok, 1, NULL)) return -1;
    float *rope1 = s->rope + hp->n_rot;   /* session.c keeps two rows at least */
    bs_rope_cache(rope1, sess_pos(s) + 1, hp->n_rot, hp->rope_base, hp->rope_sections);
    const float *r1 = !s->ahead_limit || s->n_past + 1 < s->ahead_limit ? rope1 : NULL;
    const int rc = o->next ? bs_vk_sess_decode_ahead(s->vk, tok, s->n_past, s->rope, r1, o->next)
                           : bs_vk_sess_sample_ahead(s->vk, tok, s->n_past, s->rope, r1, o->draw, o->u, o->top_ids,
                                                     o->top_vals, o->n_top);
    if (rc) return -1;
    bs_device_end(s, 1);
    return 0;
}

/* BITSPARK_VK_NO_TOPK=1 (comparisons): the rows back, their k best taken here */
static int lists_on_host(bs_session *s, const int32_t *tokens, int n, const bs_vk_out *o, float *taps) {
    const int V = s->m->hp.n_vocab, rows = o->mode == BS_LOGITS_ALL ? n : 1;
    float *lg = bs_xmalloc(sizeof(float) * (size_t)V * (size_t)rows);
    int rc = device_eval(s, tokens, n, &(bs_vk_out){.mode = o->mode, .logits = lg}, taps);
    for (int r = 0; r < rows && !rc; r++) {
        const size_t at = (size_t)r * (size_t)o->top_k;
        o->n_top[r] = bs_top_lowest(lg + (size_t)r * V, V, o->top_k, o->top_ids + at, o->top_vals + at);
    }
    free(lg);
    return rc;
}

int bs_device_eval_out(bs_session *s, const int32_t *tokens, int n, const bs_vk_out *o, float *taps) {
    if (o->mode == BS_LOGITS_LAST && n == 1 && o->next && !taps && s->no_undo) return step_ahead(s, tokens[0], o);
    if (o->top_k && bs_env_flag("BITSPARK_VK_NO_TOPK")) return lists_on_host(s, tokens, n, o, taps);
    if (o->mode == BS_LOGITS_LAST && n == 1 && o->top_k && o->draw && !taps && s->no_undo) return step_ahead(s, tokens[0], o);
    return device_eval(s, tokens, n, o, taps);
}

/* bs_session_begin_image's bookkeeping (session.c uses this file: no call back into it): the rows
 * kept in rb_embd, which rollback restores the snapshot and re-evaluates from. */
static int image_begin(bs_session *s, const float *embd, int n, int nx, int ny, int i0) {
    const size_t E = (size_t)s->m->hp.n_embd;
    if (!s->rb_embd && !(s->rb_embd = calloc((size_t)s->n_batch * E, sizeof(float))))
        return bs_error("image rows: cannot allocate %.1f MiB", (double)s->n_batch * E * 4 / 1048576.0);
    memmove(s->rb_embd, embd, (size_t)n * E * sizeof(float));
    for (int t = 0; t < n; t++) s->rb_tokens[t] = -1;
    s->rb_base = s->n_past;
    s->rb_n = n;
    s->rb_recorded = false;
    s->rb_img = true;
    s->rb_img_nx = nx;
    s->rb_img_ny = ny;
    s->rb_img_i0 = i0;
    return 0;
}

/* Image rows i0..i0+n-1 of an nx x ny image, in batches as tokens are: the rows go up in place
 * of the embedding lookup, with the M-RoPE positions bs_session_batch_rows gives them on the
 * CPU (row i at (p0, p0 + i / nx, p0 + i % nx, 0); what follows continues at p0 + max(nx, ny)). */
int bs_device_eval_image(bs_session *s, const float *embd, int nx, int ny, int i0, int n, int mode, float *logits,
                         float *taps) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const size_t nv = (size_t)hp->n_vocab, tap_row = (size_t)s->n_taps * hp->n_embd, E = (size_t)hp->n_embd;
    const int adv = BS_MAX(nx, ny);
    for (int off = 0; off < n; off += s->n_batch) {
        const int c = BS_MIN(s->n_batch, n - off), i = i0 + off;
        const bool last = off + c == n;
        if (image_begin(s, embd + (size_t)off * E, c, nx, ny, i) || bs_vk_sess_snapshot(s->vk)) return -1;
        const int p = sess_pos(s), p0 = i ? p - adv : p;   /* a continued image: p is already past it */
        for (int t = 0; t < c; t++) {
            const int pos4[4] = {p0, p0 + (i + t) / nx, p0 + (i + t) % nx, 0};
            bs_rope_cache4(s->rope + (size_t)t * hp->n_rot, pos4, hp->n_rot, hp->rope_base, hp->rope_sections);
        }
        const int bm = mode == BS_LOGITS_ALL ? BS_LOGITS_ALL : (mode == BS_LOGITS_LAST && last ? BS_LOGITS_LAST : BS_LOGITS_NONE);
        float *bl = mode == BS_LOGITS_ALL ? logits + (size_t)off * nv : logits;
        float *tap_out = taps && !s->taps_on_device ? taps + (size_t)off * tap_row : NULL;
        if (bs_vk_sess_eval_rows(s->vk, s->rb_embd, c, s->n_past, s->rope, bm, bl, s->taps, taps ? s->n_taps : 0,
                                 tap_out))
            return -1;
        for (int t = 0; t < c; t++) s->pos_next[s->n_past + t] = p0 + adv;
        s->n_past += c;
    }
    return 0;
}

int bs_device_rollback(bs_session *s, int j) {
    if (bs_vk_sess_restore(s->vk)) return -1;
    s->n_past = s->rb_base;
    s->rb_n = 0;
    /* the kept rows' recurrence replayed from the step's record (not images: their rows are
       re-evaluated): the bits of evaluating them again, at a fraction of a step's cost; the
       snapshot stays, so the rows kept can be undone again, as on the CPU */
    if (j > 0 && !s->rb_img && !bs_env_flag("BITSPARK_VK_NO_REPLAY")) {
        const int r = bs_vk_sess_replay(s->vk, j);
        if (r < 0) return -1;
        if (r == 0) {
            s->rb_n = j;
            bs_device_end(s, j);
            return 0;
        }
    }
    if (j > 0 && s->rb_img)
        return bs_device_eval_image(s, s->rb_embd, s->rb_img_nx, s->rb_img_ny, s->rb_img_i0, j, BS_LOGITS_NONE, NULL, NULL);
    return j > 0 ? bs_device_eval(s, s->rb_tokens, j, BS_LOGITS_NONE, NULL, NULL) : 0;
}

int bs_device_state(bs_session *s, int n_pos, bool to_host) {
    return bs_vk_sess_state(s->vk, sess_conv(s, 0, s->cur), sess_ssm(s, 0, s->cur), 2 * s->conv_sz, 2 * s->ssm_sz,
                            s->k, s->v, (size_t)s->n_ctx * s->kv_row, n_pos, to_host);
}

int bs_device_lora(bs_model *m, const char *name, int r, const float *a, const float *b, float scale) {
    return m->vk_net ? bs_vk_net_lora(m->vk_net, name, r, a, b, scale) : 0;
}

void bs_device_lora_clear(bs_model *m) {
    if (m->vk_net) bs_vk_net_lora_clear(m->vk_net);
}
