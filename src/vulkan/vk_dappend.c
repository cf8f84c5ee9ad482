/* vk_dappend.c: the drafter's context rows on the device. A round's kept tap rows go through fc,
 * the hidden RMSNorm and every layer's K and V products, their k heads normed and roped and
 * stored with v in the context's cache. Several contexts' rows (the server's slots after a
 * pass) run as one: the products once over all their rows (fc and the K/V matrices read once,
 * not once a context), the norms, RoPE and stores each context's own. */
#include "vulkan/vk_dspark_int.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

enum { GROUP_ROWS = 256 };   /* rows of one appends' pass (the server's 32 slots: 5 rows each) */

/* A context's rows in an append pass: from row off of the pass's rows, to cache rows row0.. */
typedef struct dl_part {
    bs_vk_dctx *s;
    int off, n, row0;
} dl_part;

/* Each part's k normed and roped and stored with v at its cache rows (qk.comp with no q heads,
 * or BITSPARK_VK_NO_QK=1's steps apart), then a barrier: the next products write kb and vb. */
static int store_kv(bs_vk_dspark *d, const dl_rows *r, const bs_vk_buf *rope, const dl_layer *L, const dl_part *p, int np,
                    int rows) {
    const int l = (int)(L - d->L);
    if (d->no_qk) TRY(dl_norm_rope(d, rope, &r->kb, &L->k_norm, rows, d->hp.n_head_kv));
    for (int i = 0; i < np; i++) {
        bs_vk_dctx *s = p[i].s;
        if (!d->no_qk) {
            TRY(dl_qk_dispatch(s, r, p[i].off, rope, L, p[i].n, 0));
        } else {
            dl_copy_w(d->c, &r->kb, p[i].off, &s->k[l], p[i].row0, p[i].n, s->kv_w);
            dl_copy_w(d->c, &r->vb, p[i].off, &s->v[l], p[i].row0, p[i].n, s->kv_w);
        }
    }
    bs_vk_barrier(d->c);
    return 0;
}

/* The parts' rows of taps (in r's rows, rope's rows for their positions): fc, the hidden norm,
 * then every layer's K and V from the same h, quantized once where the products are integer. */
static int record_append(bs_vk_dspark *d, const dl_rows *r, const bs_vk_buf *taps, const bs_vk_buf *rope, const dl_part *p,
                         int np, int rows) {
    const bool q1 = dl_kv_integer(d);
    for (int i = 0; i < np; i++)   /* (the product's barrier covers the fills) */
        bs_vk_cmd_fill_at(d->c, &p[i].s->kvpos, 0, 4, (uint32_t)p[i].row0);
    TRY(dl_mv(d, r, d->fc, taps, rows, &r->x));
    TRY(q1 ? dl_norm_q(d, r, &d->hid_norm, &r->h, rows) : dl_norm_rows(d, &r->x, &d->hid_norm, &r->h, rows));
    for (int l = 0; l < d->hp.n_layer; l++) {
        const dl_layer *L = &d->L[l];
        if (q1) {
            TRY(dl_record_qkv(d->c, r, L, 1, rows));
            bs_vk_barrier(d->c);
        } else {
            TRY(dl_mv(d, r, L->wk, &r->h, rows, &r->kb));
            TRY(dl_mv(d, r, L->wv, &r->h, rows, &r->vb));
        }
        TRY(store_kv(d, r, rope, L, p, np, rows));
    }
    return 0;
}

static int check_rows(const bs_vk_dctx *s, int n, int row0) {
    if (n < 0 || row0 < 0 || row0 > s->n_rows_max - n)
        return bs_error("Vulkan drafter: rows %d..%d outside the context of %d", row0, row0 + n, s->n_rows_max);
    return 0;
}

/* Not waited for: the host goes on (the round's bookkeeping, the next block's recording) while
 * the device appends; the next submission queues behind it. Host writes to the buffers it reads
 * (rope, in) settle it first. */
static int submit_append(bs_vk_dctx *s, const bs_vk_buf *taps, int n, int row0, const float *rope) {
    bs_vk_ctx *c = s->d->c;
    TRY(bs_vk_settle(c));
    memcpy(s->rope.map, rope, 4u * (size_t)n * s->d->hp.head_dim);
    TRY(bs_vk_begin(c));
    const dl_part p = {s, 0, n, row0};
    const int rc = record_append(s->d, &s->r, taps, &s->rope, &p, 1, n);
    return bs_vk_submit_nowait(c) || rc ? bs_error_prefix("Vulkan drafter: ") : 0;
}

int bs_vk_dctx_append(bs_vk_dctx *s, const float *taps, int n, int row0, const float *rope) {
    TRY(check_rows(s, n, row0));
    const size_t row = (size_t)s->d->hp.n_taps * s->d->hp.n_embd, D = (size_t)s->d->hp.head_dim;
    for (int off = 0; off < n; off += APPEND_ROWS) {
        const int m = BS_MIN(APPEND_ROWS, n - off);
        TRY(bs_vk_settle(s->d->c));   /* the chunk before may still read `in` */
        memcpy(s->in.map, taps + (size_t)off * row, 4u * (size_t)m * row);
        TRY(submit_append(s, &s->in, m, row0 + off, rope + (size_t)off * D));
    }
    return 0;
}

/* The session's tap rows src0..src0+n-1 (its last chunk's), or an error. */
static const bs_vk_buf *sess_taps(const bs_vk_dctx *s, const bs_vk_sess *sess, int src0, int n) {
    int n_taps;
    const bs_vk_buf *taps = bs_vk_sess_taps(sess, &n_taps);
    const size_t row = 4u * (size_t)s->d->hp.n_taps * s->d->hp.n_embd;
    if (n_taps != s->d->hp.n_taps || !taps->buf || (size_t)(src0 + n) * row > taps->size) {
        bs_error("Vulkan drafter: the session holds no taps for rows %d..%d", src0, src0 + n);
        return NULL;
    }
    if (n > APPEND_ROWS) {
        bs_error("Vulkan drafter: %d tap rows at once (at most %d)", n, APPEND_ROWS);
        return NULL;
    }
    return taps;
}

int bs_vk_dctx_append_sess(bs_vk_dctx *s, const bs_vk_sess *sess, int src0, int n, int row0, const float *rope) {
    TRY(check_rows(s, n, row0));
    const bs_vk_buf *taps = sess_taps(s, sess, src0, n);
    if (!taps) return -1;
    if (n == 0) return 0;
    const size_t row = 4u * (size_t)s->d->hp.n_taps * s->d->hp.n_embd;
    const bs_vk_buf *src = taps;
    if (src0 > 0) {   /* the products read from offset 0: the rows wanted go to the front of `in` */
        bs_vk_ctx *c = s->d->c;
        TRY(bs_vk_begin(c));
        VkBufferCopy r = {(VkDeviceSize)src0 * row, 0, (VkDeviceSize)n * row};
        bs_vk_cmd_copy(c, taps, &s->in, &r);
        TRY(bs_vk_submit(c));
        src = &s->in;
    }
    return submit_append(s, src, n, row0, rope);
}

/* The drafter's tap rows for several contexts' appends (d->ain) for at least `rows` rows. */
static bool ain_rows(bs_vk_dspark *d, int rows) {
    if (d->a_rows >= rows) return true;
    const int R = dl_grow_rows(d, rows);
    bs_vk_buf_free(d->c, &d->ain);
    d->a_rows = 0;
    if (bs_vk_buf_new(d->c, &d->ain, 4 * (size_t)R * d->hp.n_taps * d->hp.n_embd, false)) {
        bs_clear_error();
        return false;
    }
    d->a_rows = R;
    return true;
}

/* The appends as one pass: each session's tap rows copied to the drafter's, their rope rows up,
 * then record_append over all the rows. Not waited for, as a context's own. */
static int submit_group(bs_vk_dspark *d, const bs_vk_dappend *a, int n, int rows) {
    bs_vk_ctx *c = d->c;
    const size_t trow = (size_t)d->hp.n_taps * d->hp.n_embd, D = (size_t)d->hp.head_dim;
    dl_part p[BS_VK_DRAFT_BLOCKS];
    TRY(bs_vk_settle(c));   /* an append or block in flight reads grope */
    for (int i = 0, off = 0; i < n; off += a[i].n, i++) {
        p[i] = (dl_part){a[i].s, off, a[i].n, a[i].row0};
        memcpy((float *)d->grope.map + (size_t)off * D, a[i].rope, 4u * (size_t)a[i].n * D);
    }
    TRY(bs_vk_begin(c));
    for (int i = 0; i < n; i++) {
        int n_taps;
        dl_copy_w(c, bs_vk_sess_taps(a[i].sess, &n_taps), 0, &d->ain, p[i].off, a[i].n, trow);
    }
    bs_vk_barrier(c);
    const int rc = record_append(d, &d->gr, &d->ain, &d->grope, p, n, rows);
    return bs_vk_submit_nowait(c) || rc ? bs_error_prefix("Vulkan drafter: ") : 0;
}

int bs_vk_dctx_append_multi(const bs_vk_dappend *a, int n) {
    if (n < 1) return 0;
    bs_vk_dspark *d = a[0].s->d;
    if (n > BS_VK_DRAFT_BLOCKS) return bs_vk_dctx_append_multi(a, BS_VK_DRAFT_BLOCKS) || bs_vk_dctx_append_multi(a + BS_VK_DRAFT_BLOCKS, n - BS_VK_DRAFT_BLOCKS);
    int rows = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].s->d != d) return bs_error("Vulkan drafter: appends of different drafters in one pass");
        for (int j = 0; j < i; j++)
            if (a[j].s == a[i].s) return bs_error("Vulkan drafter: one context twice in an appends' pass");
        TRY(check_rows(a[i].s, a[i].n, a[i].row0));
        if (!sess_taps(a[i].s, a[i].sess, 0, a[i].n)) return -1;
        rows += a[i].n;
    }
    if (rows > GROUP_ROWS && n > 1)   /* (halves until a pass's rows fit) */
        return bs_vk_dctx_append_multi(a, n / 2) || bs_vk_dctx_append_multi(a + n / 2, n - n / 2);
    if (n == 1 || rows == 0 || d->append_apart || !dl_group_rows(d, rows) || !ain_rows(d, rows)) {
        for (int i = 0; i < n; i++) TRY(bs_vk_dctx_append_sess(a[i].s, a[i].sess, 0, a[i].n, a[i].row0, a[i].rope));
        return 0;
    }
    return submit_group(d, a, n, rows);
}
