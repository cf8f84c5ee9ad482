/* vk_session.c: a session's device buffers (scratch rows, recurrent states and their
 * snapshot, KV cache) and the host transfers of its states. */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

int bs_vk_sess_rows(const bs_vk_sess *s) { return s->B; }

int bs_vk_sess_taps_read(bs_vk_sess *s, float *out, int n) {
    TRY(bs_vk_sess_settle(s));
    const size_t row = 4u * (size_t)s->n_taps * s->net->hp.n_embd;
    if (n < 0 || n > s->B || !s->taps.buf) return bs_error("Vulkan: no taps for %d rows", n);
    bs_vk_count_read(s->net->c, (size_t)n * row);
    return bs_vk_buf_read(s->net->c, &s->taps, 0, out, (size_t)n * row);
}

const bs_vk_buf *bs_vk_sess_taps(const bs_vk_sess *s, int *n_taps) {
    *n_taps = s->n_taps;
    return &s->taps;
}

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }


/* Chunks of attn_split.comp for a context of n_ctx (0: attn.comp): its shared memory holds a KV
 * group's q heads (G * D <= 2048), it reads element pairs (D even) and its partials must fit one
 * binding. */
static int attn_chunks(const bs_vk_net *net, int n_ctx, size_t B) {
    const bs_vk_net_desc *hp = &net->hp;
    if (net->no_split || net->n_att == 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv) return 0;
    const size_t G = (size_t)(hp->n_head / hp->n_head_kv), D = (size_t)hp->head_dim;
    const size_t n_chunk = ((size_t)n_ctx + (size_t)net->attn_chunk - 1) / (size_t)net->attn_chunk;
    if (D > MAX_HEAD_DIM || D % 2 || G * D > 2048 || n_chunk > 65535) return 0;
    return 4u * B * (size_t)hp->n_head * n_chunk * (D + 2) > net->c->max_binding ? 0 : (int)n_chunk;
}

bs_vk_sess *bs_vk_sess_alloc(bs_vk_net *net, int n_ctx, int B_rows, int logit_rows, bool kv_f32, bool states) {
    const bs_vk_net_desc *hp = &net->hp;
    bs_vk_ctx *c = net->c;
    if (net->asleep) {
        bs_error("Vulkan: the model is asleep (its weights are not on the device)");
        return NULL;
    }
    bs_vk_sess *s = bs_xcalloc(1, sizeof *s);
    s->net = net;
    net->n_sess++;
    s->n_ctx = n_ctx;
    s->kv_f32 = kv_f32;
    s->no_cache = bs_env_flag("BITSPARK_VK_NO_CACHE") || c->profiling;
    s->no_ahead = bs_env_flag("BITSPARK_VK_NO_AHEAD");
    s->B = B_rows;
    static uint64_t next_uid;
    s->uid = __atomic_add_fetch(&next_uid, 1, __ATOMIC_RELAXED);
    const size_t H = (size_t)hp->n_head, Hkv = (size_t)hp->n_head_kv, D = (size_t)hp->head_dim;
    const size_t vdim = (size_t)hp->n_v_heads * hp->d_v, ff = (size_t)hp->n_ff, cd = (size_t)hp->conv_dim;
    const size_t E = (size_t)hp->n_embd, B = (size_t)s->B;
    s->wa = zmax(zmax(cd, 2 * H * D), ff);
    s->wb = zmax(zmax(vdim, Hkv * D), ff);
    s->wc = zmax(cd, Hkv * D);
    s->wd = zmax(vdim, H * D);
    s->wq = zmax(zmax(E, ff), zmax(vdim, H * D));   /* widest product input */
    /* the epilogues' counters: the norming products' one per 8 rows; the rotating ones' one per
       block of at least 32 (the GLU's and DeltaNet's over one row group, attention's per row) */
    const size_t cnt_bytes = 4 * zmax(zmax(CNT_GROUPS, ff / 32), zmax(vdim / 32, BS_VK_EPI_ROWS * H * D / 32));
    const uint64_t kv_bytes = (uint64_t)n_ctx * Hkv * D * (kv_f32 ? 4 : 2), sc_bytes = 4u * B * H * (uint64_t)n_ctx;
    const uint64_t lg_bytes = 4u * (uint64_t)logit_rows * (uint64_t)hp->n_vocab;
    if (kv_bytes > c->max_binding || sc_bytes > c->max_binding || lg_bytes > c->max_binding) {
        bs_error("Vulkan: a context of %d positions does not fit one binding of %llu bytes", n_ctx,
                 (unsigned long long)c->max_binding);
        net->n_sess--;   /* counted above: a refused session must not keep the weights awake */
        free(s);
        return NULL;
    }
    s->n_chunk = states ? attn_chunks(net, n_ctx, B) : 0;   /* a batch's scratch runs no attention of its own */
    const size_t pt_bytes = zmax(16, 4u * B * H * (size_t)s->n_chunk * (D + 2)), acnt_bytes = 4u * B * Hkv;
    int rc = bs_vk_buf_new(c, &s->x, 4 * B * E, false) || bs_vk_buf_new(c, &s->xn, 4 * B * E, false) ||
             bs_vk_buf_new(c, &s->y, 4 * B * E, false) || bs_vk_buf_new(c, &s->a, 4 * B * s->wa, false) ||
             bs_vk_buf_new(c, &s->b, 4 * B * s->wb, false) || bs_vk_buf_new(c, &s->cc, 4 * B * s->wc, false) ||
             bs_vk_buf_new(c, &s->d, 4 * B * s->wd, false) ||
             bs_vk_buf_new(c, &s->ga, 4 * B * (size_t)hp->n_v_heads, false) ||
             bs_vk_buf_new(c, &s->gbeta, 4 * B * (size_t)hp->n_v_heads, false) ||
             bs_vk_buf_new(c, &s->aq, B * s->wq, false) || bs_vk_buf_new(c, &s->xr, 4 * B * s->wq, false) ||
             bs_vk_buf_new(c, &s->xrot, net->folded ? 4 * B * s->wq : 16, false) || bs_vk_buf_new(c, &s->as, B * s->wq / 8, false) ||
             bs_vk_buf_new(c, &s->am, B * s->wq / 8, false) || bs_vk_buf_new(c, &s->aq2, B * ff, false) ||
             bs_vk_buf_new(c, &s->as2, B * ff / 8, false) || bs_vk_buf_new(c, &s->am2, B * ff / 8, false) ||
             bs_vk_counters_new(c, &s->cnt, cnt_bytes) || bs_vk_buf_new(c, &s->apart, pt_bytes, false) ||
             bs_vk_counters_new(c, &s->acnt, zmax(16, acnt_bytes)) ||
             bs_vk_counters_new(c, &s->dcnt, zmax(16, 4u * (size_t)hp->n_v_heads)) ||
             bs_vk_buf_new(c, &s->tok, 4 * B, true) || bs_vk_buf_new(c, &s->params, 32, true) || bs_vk_buf_new(c, &s->rope, 4 * B * (size_t)BS_MAX(hp->n_rot, 1), true) ||
             bs_vk_buf_new(c, &s->logits, lg_bytes, true) || bs_vk_buf_new(c, &s->scores, sc_bytes, false) ||
             bs_vk_buf_new(c, &s->ids, 4u * (size_t)BS_MAX(logit_rows, 1), true) ||
             bs_vk_amax_bufs_new(c, &s->amax, (uint64_t)BS_MAX(logit_rows, 1));
    s->conv = bs_xcalloc((size_t)net->n_rec + 1, sizeof *s->conv);
    s->ssm = bs_xcalloc((size_t)net->n_rec + 1, sizeof *s->ssm);
    s->conv_bak = bs_xcalloc((size_t)net->n_rec + 1, sizeof *s->conv_bak);
    s->ssm_bak = bs_xcalloc((size_t)net->n_rec + 1, sizeof *s->ssm_bak);
    s->kc = bs_xcalloc((size_t)net->n_att + 1, sizeof *s->kc);
    s->vc = bs_xcalloc((size_t)net->n_att + 1, sizeof *s->vc);
    const size_t conv_b = 4 * (size_t)(hp->conv_kernel - 1) * cd, ssm_b = 4 * (size_t)hp->n_v_heads * hp->d_v * hp->d_k;
    for (int g = 0; g < net->n_rec && !rc && states; g++)
        rc = bs_vk_buf_new(c, &s->conv[g], conv_b, false) || bs_vk_buf_new(c, &s->ssm[g], ssm_b, false) ||
             bs_vk_buf_new(c, &s->conv_bak[g], conv_b, false) || bs_vk_buf_new(c, &s->ssm_bak[g], ssm_b, false);
    for (int a = 0; a < net->n_att && !rc && states; a++)
        rc = bs_vk_buf_new(c, &s->kc[a], kv_bytes, false) || bs_vk_buf_new(c, &s->vc[a], kv_bytes, false);
    if (!rc && states && net->n_rec > 0 && !bs_env_flag("BITSPARK_VK_NO_REPLAY")) {
        s->rp_rows = BS_MIN(s->B, REPLAY_ROWS);
        const size_t rows = (size_t)net->n_rec * (size_t)s->rp_rows;
        rc = bs_vk_buf_new(c, &s->rp_a, 4 * rows * cd, false) || bs_vk_buf_new(c, &s->rp_ga, 4 * rows * (size_t)hp->n_v_heads, false) ||
             bs_vk_buf_new(c, &s->rp_gb, 4 * rows * (size_t)hp->n_v_heads, false);
    }
    if (rc || (states && (bs_vk_sess_reset(s) || bs_vk_sess_snapshot(s)))) {
        bs_error_prefix("Vulkan session: ");
        bs_vk_sess_free(s);
        return NULL;
    }
    return s;
}

bs_vk_sess *bs_vk_sess_new(bs_vk_net *net, int n_ctx, int n_batch, bool kv_f32) {
    const int B = BS_MAX(1, BS_MIN(n_batch, DEV_ROWS));
    return bs_vk_sess_alloc(net, n_ctx, B, B, kv_f32, true);
}

void bs_vk_step_drop(bs_vk_sess *s, struct step_cache *e) {
    bs_vk_ctx *c = s->net->c;
    if (e->cmd) c->fn->vkFreeCommandBuffers(c->dev, c->cpool, 1, &e->cmd);
    bs_vk_pools_free(c, &e->pools);
    memset(e, 0, sizeof *e);
}

void bs_vk_sess_free(bs_vk_sess *s) {
    if (!s) return;
    bs_vk_ctx *c = s->net->c;
    if (s->ahead) bs_vk_sess_wait(s, s->ahead_io);   /* its buffers are about to go */
    s->net->n_sess--;
    bs_vk_buf *bs[] = {&s->x, &s->xn, &s->y, &s->a, &s->b, &s->cc, &s->d, &s->ga, &s->gbeta, &s->aq, &s->as, &s->am, &s->aq2, &s->as2, &s->am2, &s->cnt, &s->apart, &s->acnt, &s->agrp, &s->dcnt, &s->xr, &s->xrot,
                       &s->tok, &s->rope, &s->logits, &s->scores, &s->taps, &s->params, &s->lt, &s->ids,
                       &s->tok_alt, &s->rope_alt, &s->params_alt, &s->ids_alt, &s->rp_a, &s->rp_ga, &s->rp_gb,
                       &s->unif, &s->unif_alt, &s->topv_alt};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
    bs_vk_top_bufs_free(c, &s->top);
    bs_vk_amax_bufs_free(c, &s->amax);
    for (int i = 0; i < 2; i++) bs_vk_fence_free(c, s->fence[i]);
    for (int i = 0; i < CACHE_STEPS; i++) bs_vk_step_drop(s, &s->cache[i]);
    for (int g = 0; g < s->net->n_rec; g++) {
        bs_vk_buf_free(c, &s->conv[g]);
        bs_vk_buf_free(c, &s->ssm[g]);
        bs_vk_buf_free(c, &s->conv_bak[g]);
        bs_vk_buf_free(c, &s->ssm_bak[g]);
    }
    for (int a = 0; a < s->net->n_att; a++) {
        bs_vk_buf_free(c, &s->kc[a]);
        bs_vk_buf_free(c, &s->vc[a]);
    }
    free(s->conv); free(s->ssm); free(s->conv_bak); free(s->ssm_bak); free(s->kc); free(s->vc);
    free(s);
}

/* The rollback snapshot of the recurrent state is never copied: the delta rule's state (3 MiB
 * per layer of the 27B) and the conv windows are each a pair of buffers, a step after a
 * snapshot reads them from one and writes the other (delta_lanes.glsl's and the convs' from_in),
 * so the state before that step stays where it was, and restoring is swapping back, with no
 * submission at all. As the CPU path keeps two halves (session.c's cur). */
bs_vk_buf *bs_vk_ssm_cur(bs_vk_sess *s, int g) { return s->pair_flip ? &s->ssm_bak[g] : &s->ssm[g]; }
static bs_vk_buf *conv_cur(bs_vk_sess *s, int g) { return s->pair_flip ? &s->conv_bak[g] : &s->conv[g]; }

void bs_vk_sess_stepped(bs_vk_sess *s) {
    if (s->snap != SNAP_PENDING) return;
    s->pair_flip = !s->pair_flip;
    s->snap = SNAP_HELD;
}

int bs_vk_sess_snapshot(bs_vk_sess *s) {
    TRY(bs_vk_sess_settle(s));
    s->snap = SNAP_PENDING;
    return 0;
}

int bs_vk_sess_restore(bs_vk_sess *s) {
    TRY(bs_vk_sess_settle(s));
    if (s->snap == SNAP_PENDING || s->net->n_rec == 0) return 0;   /* no step since: the state is it */
    if (s->snap != SNAP_HELD) return bs_error("Vulkan: no snapshot to restore");
    s->pair_flip = !s->pair_flip;
    s->snap = SNAP_PENDING;   /* the state is the snapshot again, which the next step keeps */
    return 0;
}

/* A step submitted ahead that the caller did not ask for: waited for, then the state from
 * before it put back (it took a snapshot); its KV rows lie past n_past, rewritten before read. */
int bs_vk_sess_settle(bs_vk_sess *s) {
    if (!s->ahead) return 0;
    s->ahead = false;
    bs_vk_ctx *c = s->net->c;
    c->stats.discarded++;
    s->rp_n = 0;   /* the record is the discarded step's */
    return bs_vk_sess_wait(s, s->ahead_io) || bs_vk_sess_restore(s) ? -1 : 0;
}

int bs_vk_sess_wait(bs_vk_sess *s, int io) {
    s->busy[io] = VK_NULL_HANDLE;
    return bs_vk_fence_wait(s->net->c, s->fence[io]);
}

int bs_vk_sess_reset(bs_vk_sess *s) {
    bs_vk_ctx *c = s->net->c;
    TRY(bs_vk_sess_settle(s));
    s->pair_flip = false;
    s->snap = SNAP_NONE;
    s->rp_n = 0;
    if (s->net->n_rec == 0) return 0;
    if (bs_vk_begin(c)) return -1;
    for (int g = 0; g < s->net->n_rec; g++) {
        bs_vk_cmd_fill(c, &s->conv[g]);
        bs_vk_cmd_fill(c, &s->ssm[g]);
    }
    return bs_vk_submit(c);
}

/* The delta rule's state on the device is [n_v][d_k][d_v] (neighbouring invocations, state
 * rows j, read neighbouring words: coalesced), the CPU's [n_v][d_v][d_k]: transposed per head
 * between the two (dir 1: CPU to device). */
static void state_transpose(const bs_vk_net_desc *hp, const float *src, float *dst, bool to_dev) {
    const size_t dk = (size_t)hp->d_k, dv = (size_t)hp->d_v;
    for (size_t h = 0; h < (size_t)hp->n_v_heads; h++)
        for (size_t j = 0; j < dv; j++)
            for (size_t i = 0; i < dk; i++) {
                const size_t cpu = (h * dv + j) * dk + i, dev = (h * dk + i) * dv + j;
                if (to_dev) dst[dev] = src[cpu]; else dst[cpu] = src[dev];
            }
}

static int ssm_io(bs_vk_sess *s, bs_vk_buf *b, float *host, bool to_host) {
    bs_vk_ctx *c = s->net->c;
    float *t = bs_xmalloc((size_t)b->size);
    int rc;
    if (to_host) {
        rc = bs_vk_buf_read(c, b, 0, t, (size_t)b->size);
        if (!rc) state_transpose(&s->net->hp, t, host, false);
    } else {
        state_transpose(&s->net->hp, host, t, true);
        rc = bs_vk_buf_write(c, b, 0, t, (size_t)b->size);
    }
    free(t);
    return rc;
}

int bs_vk_sess_state(bs_vk_sess *s, float *conv, float *ssm, size_t conv_stride, size_t ssm_stride, uint8_t *k,
                     uint8_t *v, size_t kv_stride, int n_pos, bool to_host) {
    bs_vk_ctx *c = s->net->c;
    const bs_vk_net_desc *hp = &s->net->hp;
    const size_t kv_row = (s->kv_f32 ? 4 : 2) * (size_t)hp->n_head_kv * hp->head_dim, kvb = (size_t)n_pos * kv_row;
    if (n_pos < 0 || n_pos > s->n_ctx) return bs_error("Vulkan state: bad position count");
    TRY(bs_vk_sess_settle(s));
    int rc = 0;
    for (int g = 0; g < s->net->n_rec && !rc; g++) {
        float *cp = conv + (size_t)g * conv_stride, *sp = ssm + (size_t)g * ssm_stride;
        bs_vk_buf *cv = conv_cur(s, g);
        rc = (to_host ? bs_vk_buf_read(c, cv, 0, cp, cv->size) : bs_vk_buf_write(c, cv, 0, cp, cv->size)) ||
             ssm_io(s, bs_vk_ssm_cur(s, g), sp, to_host);
    }
    if (!to_host) s->snap = SNAP_NONE, s->rp_n = 0;   /* a state loaded: no snapshot or record is of it */
    for (int a = 0; a < s->net->n_att && !rc && kvb; a++) {
        uint8_t *kp = k + (size_t)a * kv_stride, *vp = v + (size_t)a * kv_stride;
        rc = to_host ? bs_vk_buf_read(c, &s->kc[a], 0, kp, kvb) || bs_vk_buf_read(c, &s->vc[a], 0, vp, kvb)
                     : bs_vk_buf_write(c, &s->kc[a], 0, kp, kvb) || bs_vk_buf_write(c, &s->vc[a], 0, vp, kvb);
    }
    return rc ? -1 : 0;
}

