/* session.c: sessions on a qwen35 model: buffers sized once at creation, taps, the bookkeeping
 * around a batch, and state save / load (see session.h; evaluation and rollback: eval.c). */
#include "model/session.h"
#include "model/device.h"
#include "cpu/compute.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC 0x54534253u   /* "BSST" */
#define STATE_VERSION 2u   /* 2: the model's fingerprint */
#define N_CTX_MAX (1 << 24)

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

/* Allocation whose size comes from the caller's parameters: fails cleanly instead of aborting. */
static void *alloc_n(size_t count, size_t size, const char *what) {
    uint64_t bytes;
    if (bs_mul_overflow(count, size, &bytes) || bytes > SIZE_MAX) {
        bs_error("%s: size overflow", what);
        return NULL;
    }
    void *p = calloc(bytes ? (size_t)bytes : 1, 1);
    if (!p) bs_error("%s: cannot allocate %.1f MiB", what, (double)bytes / 1048576.0);
    return p;
}

static int resolve_params(const bs_model *m, const bs_session_params *p, bs_session *s) {
    s->n_ctx = p->n_ctx > 0 ? p->n_ctx : BS_MIN(4096, m->hp.n_ctx_train);
    if (s->n_ctx > N_CTX_MAX) return bs_error("context %d is too large (max %d)", s->n_ctx, N_CTX_MAX);
    s->n_batch = BS_MIN(p->n_batch > 0 ? p->n_batch : 512, s->n_ctx);
    s->n_rollback = BS_MIN(p->n_rollback > 0 ? p->n_rollback : 16, s->n_batch);
    s->kv_type = p->kv_type;
    if (s->kv_type != BS_KV_F16 && s->kv_type != BS_KV_F32) return bs_error("unknown KV cache type %d", p->kv_type);
    if (p->n_threads < 0 || p->n_threads > 1024) return bs_error("bad thread count %d", p->n_threads);
    return 0;
}

static int alloc_buffers(bs_session *s) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const size_t nb = (size_t)s->n_batch, H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    const size_t vdim = (size_t)hp->n_v_heads * hp->d_v, ff = (size_t)hp->n_ff, cd = (size_t)hp->conv_dim;
    const size_t nrec = (size_t)s->m->n_recurrent, natt = (size_t)s->m->n_attention;
    const size_t nth = (size_t)bs_pool_size(s->pool);   /* attention scratch per thread */

    s->conv_sz = (size_t)(hp->conv_kernel - 1) * cd;
    s->ssm_sz = (size_t)hp->n_v_heads * hp->d_k * hp->d_v;
    s->kv_row = Hkv * D * (s->kv_type == BS_KV_F32 ? 4 : 2);
    s->wa = zmax(zmax(cd, 2 * H * D), ff);
    s->wb = zmax(zmax(vdim, Hkv * D), ff);
    s->wc = zmax(cd, Hkv * D);
    s->wd = zmax(vdim, H * D);
    const size_t E = (size_t)hp->n_embd, F = sizeof(float);
    if (!(s->conv = alloc_n(nrec * 2, s->conv_sz * F, "recurrent conv state")) ||
        !(s->ssm = alloc_n(nrec * 2, s->ssm_sz * F, "recurrent state")) ||
        !(s->k = alloc_n(natt * (size_t)s->n_ctx, s->kv_row, "KV cache")) ||
        !(s->v = alloc_n(natt * (size_t)s->n_ctx, s->kv_row, "KV cache")) ||
        !(s->rb_tokens = alloc_n(nb, sizeof(int32_t), "rollback tokens")) ||
        !(s->pos_next = alloc_n((size_t)s->n_ctx, sizeof(int32_t), "positions")) ||
        !(s->rb_rec = alloc_n(nrec * (size_t)s->n_rollback, (cd + 2 * (size_t)hp->n_v_heads) * F, "rollback record")) ||
        !(s->x = alloc_n(nb, E * F, "activations")) || !(s->xn = alloc_n(nb, E * F, "activations")) ||
        !(s->y = alloc_n(nb, E * F, "activations")) || !(s->a = alloc_n(nb, s->wa * F, "activations")) ||
        !(s->b = alloc_n(nb, s->wb * F, "activations")) || !(s->c = alloc_n(nb, s->wc * F, "activations")) ||
        !(s->d = alloc_n(nb, s->wd * F, "activations")) ||
        !(s->gb = alloc_n(nb, 2 * (size_t)hp->n_v_heads * F, "activations")) ||
        !(s->rope = alloc_n(BS_MAX(nb, 2), (size_t)hp->n_rot * F, "activations")) ||   /* 2: device.c's decode_ahead */
        !(s->scores = alloc_n(nth * (size_t)BS_MAX(H, BS_ATTN_MAX_GROUP), (size_t)s->n_ctx * F, "attention scores")) ||
        !(s->qtmp = alloc_n(nth * (2 * BS_ATTN_MAX_GROUP + 1) * D, F, "activations")))
        return -1;
    return 0;
}

bs_session *bs_session_new(bs_model *m, const bs_session_params *params) {
    bs_session_params def = {0};
    bs_session *s = bs_xcalloc(1, sizeof *s);
    s->m = m;
    if (!m->layers) {   /* bs_model_params.vocab_only */
        bs_error("the model was loaded vocab-only");
        goto fail;
    }
    if (resolve_params(m, params ? params : &def, s)) goto fail;
    int nt = params ? params->n_threads : 0;
    if (nt > 1 && !(s->pool = bs_pool_new(nt))) goto fail;
    if (alloc_buffers(s) || bs_device_session_new(s)) goto fail;
    return s;
fail:
    bs_error_prefix("creating a session: ");
    bs_session_free(s);
    return NULL;
}

void bs_session_free(bs_session *s) {
    if (!s) return;
    bs_vk_sess_free(s->vk);
    bs_pool_free(s->pool);
    void *bufs[] = {s->conv, s->ssm, s->k, s->v, s->rb_tokens, s->rb_rec, s->taps, s->pos_next, s->rb_embd, s->x, s->xn, s->y,
                    s->a, s->b, s->c, s->d, s->gb, s->rope, s->scores, s->qtmp};
    for (size_t i = 0; i < BS_ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(s);
}

int bs_session_n_ctx(const bs_session *s) { return s->n_ctx; }
int bs_session_n_past(const bs_session *s) { return s->n_past; }
unsigned bs_session_loads(const bs_session *s) { return s->loads; }
int bs_session_n_taps(const bs_session *s) { return s->n_taps; }
bool bs_session_on_device(const bs_session *s) { return s->vk != NULL; }

void bs_session_reset(bs_session *s) {
    s->loads++;
    for (int g = 0; g < s->m->n_recurrent; g++) {
        memset(sess_conv(s, g, s->cur), 0, s->conv_sz * sizeof(float));
        memset(sess_ssm(s, g, s->cur), 0, s->ssm_sz * sizeof(float));
    }
    if (s->vk && bs_vk_sess_reset(s->vk)) bs_log(0, "bitspark: %s\n", bs_last_error());
    s->n_past = 0;
    s->rb_n = 0;
    s->rb_base = 0;
    s->rb_recorded = false;
}

int bs_session_set_taps(bs_session *s, const int *layers, int n) {
    if (n < 0 || n > 4096 || (n > 0 && !layers)) return bs_error("bad tap list");
    for (int i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] >= s->m->hp.n_layer)
            return bs_error("tap layer %d is out of range [0, %d)", layers[i], s->m->hp.n_layer);
    free(s->taps);
    s->taps = n ? bs_xmalloc((size_t)n * sizeof(int)) : NULL;
    if (n) memcpy(s->taps, layers, (size_t)n * sizeof(int));
    s->n_taps = n;
    return 0;
}

void bs_session_begin_batch(bs_session *s, const int32_t *tokens, int n) {
    memmove(s->rb_tokens, tokens, (size_t)n * sizeof(int32_t));
    s->rb_img = false;
    s->in_place = s->no_undo && n == 1;
    s->rb_base = s->n_past;
    s->rb_n = s->in_place ? 0 : n;
    s->rb_recorded = !s->in_place && n <= s->n_rollback;
}

int bs_session_begin_image(bs_session *s, const float *embd, int n, int nx, int ny, int i0) {
    const size_t E = (size_t)s->m->hp.n_embd;
    if (!s->rb_embd && !(s->rb_embd = alloc_n((size_t)s->n_batch, E * sizeof(float), "image rows"))) return -1;
    memmove(s->rb_embd, embd, (size_t)n * E * sizeof(float));
    for (int t = 0; t < n; t++) s->rb_tokens[t] = -1;
    s->in_place = false;   /* image rows are never a one-token step without undo */
    s->rb_base = s->n_past;
    s->rb_n = n;
    s->rb_recorded = n <= s->n_rollback;
    s->rb_img = true;
    s->rb_img_nx = nx;
    s->rb_img_ny = ny;
    s->rb_img_i0 = i0;
    return 0;
}

/* Image token i sits at grid (x, y) = (i % nx, i / nx) and gets (p0, p0 + y, p0 + x, 0), p0 the
 * position where the image starts (mtmd's M-RoPE layout); rows after it continue at
 * p0 + max(nx, ny). */
void bs_session_batch_rows(bs_session *s, int n, float *x) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int p = sess_pos(s);
    if (!s->rb_img) {
        bs_get_rows(&s->m->tok_embd, s->rb_tokens, n, x);   /* ids were validated by the caller */
        for (int t = 0; t < n; t++) {
            bs_rope_cache(s->rope + (size_t)t * hp->n_rot, p + t, hp->n_rot, hp->rope_base, hp->rope_sections);
            s->pos_next[s->n_past + t] = p + t + 1;
        }
        return;
    }
    const int nx = s->rb_img_nx, adv = BS_MAX(nx, s->rb_img_ny);
    const int p0 = s->rb_img_i0 ? p - adv : p;   /* a continued image: p is already past it */
    memcpy(x, s->rb_embd, (size_t)n * hp->n_embd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const int i = s->rb_img_i0 + t;
        const int pos4[4] = {p0, p0 + i / nx, p0 + i % nx, 0};
        bs_rope_cache4(s->rope + (size_t)t * hp->n_rot, pos4, hp->n_rot, hp->rope_base, hp->rope_sections);
        s->pos_next[s->n_past + t] = p0 + adv;
    }
}

void bs_session_end_batch(bs_session *s, int n) {
    if (!s->in_place) s->cur = 1 - s->cur;   /* the recurrent layers wrote the other half */
    s->in_place = false;
    s->n_past += n;
}

void bs_session_set_undo(bs_session *s, int keep) { s->no_undo = !keep; }
void bs_session_ahead_limit(bs_session *s, int n_pos) { s->ahead_limit = n_pos > 0 ? n_pos : 0; }

/* ---- state save / load ----------------------------------------------------------------------- */

typedef struct state_header {
    uint32_t magic, version;
    int32_t n_layer, n_embd, n_vocab, n_recurrent, n_attention, kv_type, n_past;
    int32_t pos_delta;   /* next position - n_past (0 without images: older states load as is) */
    uint64_t conv_sz, ssm_sz, kv_row;
    uint64_t model;      /* bs_model.fingerprint: shapes alone let another model's state load */
} state_header;

static void fill_header(const bs_session *s, state_header *h) {
    memset(h, 0, sizeof *h);
    h->magic = STATE_MAGIC;
    h->version = STATE_VERSION;
    h->n_layer = s->m->hp.n_layer;
    h->n_embd = s->m->hp.n_embd;
    h->n_vocab = s->m->hp.n_vocab;
    h->n_recurrent = s->m->n_recurrent;
    h->n_attention = s->m->n_attention;
    h->kv_type = s->kv_type;
    h->n_past = s->n_past;
    h->pos_delta = sess_pos(s) - s->n_past;
    h->conv_sz = s->conv_sz;
    h->ssm_sz = s->ssm_sz;
    h->kv_row = s->kv_row;
    h->model = s->m->fingerprint;
}

static size_t state_bytes(const bs_session *s, int n_past) {
    return sizeof(state_header) +
           (size_t)s->m->n_recurrent * (s->conv_sz + s->ssm_sz) * sizeof(float) +
           (size_t)s->m->n_attention * 2 * (size_t)n_past * s->kv_row;
}

size_t bs_session_state_size(const bs_session *s) { return state_bytes(s, s->n_past); }
size_t bs_session_state_bytes(const bs_session *s, int n_past) { return state_bytes(s, n_past); }

/* Copy between the session and a flat buffer (save: to_buf). */
static void copy_state(bs_session *s, uint8_t *p, bool to_buf) {
    const size_t slot = (size_t)s->n_ctx * s->kv_row, kv_bytes = (size_t)s->n_past * s->kv_row;
#define XFER(ptr, n) do { if (to_buf) memcpy(p, (ptr), (n)); else memcpy((ptr), p, (n)); p += (n); } while (0)
    for (int g = 0; g < s->m->n_recurrent; g++) {
        XFER(sess_conv(s, g, s->cur), s->conv_sz * sizeof(float));
        XFER(sess_ssm(s, g, s->cur), s->ssm_sz * sizeof(float));
    }
    for (int a = 0; a < s->m->n_attention; a++) {
        XFER(s->k + (size_t)a * slot, kv_bytes);
        XFER(s->v + (size_t)a * slot, kv_bytes);
    }
#undef XFER
}

int bs_session_state_save(const bs_session *s, void *buf, size_t cap) {
    const size_t need = bs_session_state_size(s);
    if (!buf || cap < need) return bs_error("state buffer too small: %zu bytes, need %zu", cap, need);
    state_header h;
    fill_header(s, &h);
    memcpy(buf, &h, sizeof h);
    if (s->vk && bs_device_state((bs_session *)s, s->n_past, true)) return -1;
    copy_state((bs_session *)s, (uint8_t *)buf + sizeof h, true);
    return 0;
}

int bs_session_state_check(const bs_session *s, const void *buf, size_t len) {
    state_header h, want;
    if (!buf || len < sizeof h) return bs_error("state: truncated");
    memcpy(&h, buf, sizeof h);
    if (h.magic != STATE_MAGIC) return bs_error("state: not a bitspark session state");
    if (h.version != STATE_VERSION) return bs_error("state: saved by another version of bitspark (format %u)", h.version);
    fill_header(s, &want);
    want.n_past = h.n_past;
    want.pos_delta = h.pos_delta;
    if (h.model != want.model) return bs_error("state: saved from a different model");
    if (memcmp(&h, &want, sizeof h)) return bs_error("state: saved from a different model or KV cache type");
    if (h.n_past < 0 || h.n_past > s->n_ctx)
        return bs_error("state: %d positions do not fit in this session's context of %d", h.n_past, s->n_ctx);
    if (len != state_bytes(s, h.n_past)) return bs_error("state: size %zu does not match its header", len);
    if (h.pos_delta > 0 || (h.n_past == 0 && h.pos_delta) || h.n_past + h.pos_delta < 0)
        return bs_error("state: bad position offset %d", h.pos_delta);
    return h.n_past;
}

int bs_session_state_load(bs_session *s, const void *buf, size_t len) {
    state_header h;
    s->loads++;
    if (bs_session_state_check(s, buf, len) < 0) return -1;
    memcpy(&h, buf, sizeof h);
    s->n_past = h.n_past;
    /* only the last row's successor is ever read: rollback reaches no further back than here */
    if (s->n_past) s->pos_next[s->n_past - 1] = s->n_past + h.pos_delta;
    copy_state(s, (uint8_t *)buf + sizeof h, false);
    if (s->vk && (bs_device_state(s, s->n_past, false) || bs_vk_sess_snapshot(s->vk))) return -1;
    s->rb_n = 0;
    s->rb_base = s->n_past;
    s->rb_recorded = false;
    return 0;
}
