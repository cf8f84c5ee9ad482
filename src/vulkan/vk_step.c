/* vk_step.c: running the forward (vk_forward.c records it): a session's steps, recorded once
 * per shape and resubmitted (the recording cache), its evaluations (tokens or embedding rows,
 * with what comes back: rows, argmax ids, top-k lists, taps) and several sessions' rows in one
 * pass (bs_vk_batch). */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* A result the host reads from mapped device memory (counted in the stats). */
static void read_back(bs_vk_ctx *c, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    bs_vk_count_read(c, bytes);
}

/* The adapters changed since this session last ran: scratch of their size, and recordings
 * made without them (or with others) dropped. */
static int lora_sync(bs_vk_sess *s) {
    bs_vk_net *net = s->net;
    if (s->lora_gen == net->lora_gen) return 0;
    for (int i = 0; i < CACHE_STEPS; i++) bs_vk_step_drop(s, &s->cache[i]);
    bs_vk_buf_free(net->c, &s->lt);
    if (net->lora_r > 0 && bs_vk_buf_new(net->c, &s->lt, 4u * (size_t)s->B * net->lora_r, false)) return -1;
    s->lora_gen = net->lora_gen;
    return 0;
}

/* After a step of n rows: its snapshot held, and its record's rows (those record_inputs wrote).
 * The record is kept only for the step that took the snapshot: a replay starts from the snapshot,
 * so the rows of a later step of the same evaluation (one of more than a submission's rows, whose
 * later steps run on the held state) would be replayed onto the wrong state. */
static void step_done(bs_vk_sess *s, int n) {
    const bool took = s->snap == SNAP_PENDING;
    bs_vk_sess_stepped(s);
    s->rp_n = took && n <= s->rp_rows ? n : 0;
}

/* The split attention's workgroups for n rows from p0, where its dispatch reads them (params at
 * ATTN_GROUPS): the chunks of the last row's positions, n rows of KV heads. */
static void attn_split_groups(bs_vk_sess *s, uint32_t p0, int n) {
    if (s->n_chunk == 0) return;
    const uint32_t C = (uint32_t)s->net->attn_chunk;
    const uint32_t g[3] = {(p0 + (uint32_t)n + C - 1) / C, (uint32_t)n * (uint32_t)s->net->hp.n_head_kv, 1};
    memcpy((char *)s->params.map + ATTN_GROUPS, g, sizeof g);
}

/* attn_split_b's workgroups this pass, per ATT_BATCH sequences (into agrp, where the recorded
 * dispatches read them): the most chunks and rows of KV heads of its sequences. */
static void attn_batch_groups(bs_vk_sess *io, const bs_vk_seq *q, int np) {
    const uint32_t C = (uint32_t)io->net->attn_chunk, Hkv = (uint32_t)io->net->hp.n_head_kv;
    for (int g = 0; g * ATT_BATCH < np; g++) {
        uint32_t w[4] = {0, 0, (uint32_t)BS_MIN(ATT_BATCH, np - g * ATT_BATCH), 0};
        for (int i = g * ATT_BATCH; i < BS_MIN(np, (g + 1) * ATT_BATCH); i++) {
            w[0] = BS_MAX(w[0], ((uint32_t)q[i].pos0 + (uint32_t)q[i].n + C - 1) / C);
            w[1] = BS_MAX(w[1], (uint32_t)q[i].n * Hkv);
        }
        memcpy((char *)io->agrp.map + 16 * g, w, sizeof w);
    }
}

/* Which of a session's state buffers a step binds: the pairs' order, and whether it reads the
 * other ones (a pending snapshot). */
static int state_key(const bs_vk_sess *s) { return (s->snap == SNAP_PENDING) | (int)s->pair_flip << 1; }

/* A cached recording submitted: waited for, or with fence f (not waited for). */
static int submit_step(bs_vk_sess *s, const struct step_cache *e, VkFence f) {
    bs_vk_count_submit(s->net->c, &e->counts);
    if (!f) return bs_vk_submit_cmd(s->net->c, e->cmd);
    if (bs_vk_submit_cmd_to(s->net->c, e->cmd, f)) return -1;
    s->busy[s->io] = e->cmd;   /* f is the current set's fence: bs_vk_sess_wait clears it */
    return 0;
}

/* The recording of a step of n rows (rows with logits; a batch's with key and its parts) from
 * the cache, recorded into it first if it is not there, and submitted (f: submit_step's). */
static int run_cached(bs_vk_sess *s, int n, int rows, const batch_key *key, const vk_part *pt, int np, VkFence f) {
    bs_vk_ctx *c = s->net->c;
    const int state = state_key(s);
    for (int i = 0; i < CACHE_STEPS; i++) {
        const struct step_cache *e = &s->cache[i];
        if (e->cmd && e->n == n && e->rows == rows && e->greedy == s->greedy && e->topk == s->topk && e->feed == s->feed &&
            e->io == s->io && e->drawn == (s->draw != NULL) && (!s->draw || !memcmp(&e->draw, s->draw, sizeof e->draw)) &&
            e->state == state && !memcmp(&e->key, key, sizeof *key))
            return submit_step(s, e, f);
    }
    struct step_cache *e;
    do {   /* never a recording still in flight (at most two: vk_ahead.c's) */
        e = &s->cache[s->cache_next];
        s->cache_next = (s->cache_next + 1) % CACHE_STEPS;
    } while (e->cmd && (e->cmd == s->busy[0] || e->cmd == s->busy[1]));
    bs_vk_step_drop(s, e);
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->cpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if (c->fn->vkAllocateCommandBuffers(c->dev, &ai, &e->cmd) != VK_SUCCESS) {
        e->cmd = VK_NULL_HANDLE;
        return bs_error("Vulkan: command buffer");
    }
    if (bs_vk_record_into(c, e->cmd, &e->pools)) {
        bs_vk_step_drop(s, e);
        return -1;
    }
    int rc = bs_vk_record_chunk(s, n, rows, NULL, 0, pt, np);
    rc = bs_vk_record_end(c) || rc;
    if (rc) { bs_vk_step_drop(s, e); return -1; }
    e->counts = c->rec;
    e->n = n;
    e->rows = rows;
    e->greedy = s->greedy;
    e->topk = s->topk;
    e->feed = s->feed;
    e->drawn = s->draw != NULL;
    if (s->draw) e->draw = *s->draw;
    e->io = s->io;
    e->state = state;
    memcpy(&e->key, key, sizeof *key);   /* padding too: keys are compared with memcmp */
    return submit_step(s, e, f);
}

/* One step of n rows: the cached recording of its shape (taps are recorded for the step alone). */
static int run_step(bs_vk_sess *s, int n, int rows, const int *taps, int n_taps) {
    bs_vk_ctx *c = s->net->c;
    if (n_taps > 0 || s->no_cache || s->rows_in) {
        TRY(bs_vk_begin(c));
        const int rc = bs_vk_record_chunk(s, n, rows, taps, n_taps, NULL, 0);
        return bs_vk_submit(c) || rc ? -1 : 0;
    }
    static const batch_key none;
    return run_cached(s, n, rows, &none, NULL, 0, VK_NULL_HANDLE);
}

/* Room for n_taps taps of every row (the drafter reads them from there). */
static int taps_ensure(bs_vk_sess *s, int n_taps) {
    const size_t bytes = 4u * (size_t)s->B * n_taps * s->net->hp.n_embd;
    if (n_taps > 0) s->n_taps = n_taps;
    if (n_taps <= 0 || (s->taps.buf && s->taps.size >= bytes)) return 0;
    bs_vk_buf_free(s->net->c, &s->taps);
    s->taps_gen++;
    return bs_vk_buf_new(s->net->c, &s->taps, bytes, true);
}

/* A step's values besides its tokens: the rope table's rows and the positions from p0. */
static void step_values(bs_vk_sess *s, const float *rope, uint32_t p0, int m) {
    const int nr = s->net->hp.n_rot;
    if (nr > 0) memcpy(s->rope.map, rope, sizeof(float) * (size_t)m * (size_t)nr);
    memcpy(s->params.map, &p0, 4);
    attn_split_groups(s, p0, m);
}

/* A one-row step fed to the next: greedy (p NULL: the argmax) or sampled (the k best, and the
 * draw predicted from them with uniform u). */
static int step_fed(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, VkFence f, const bs_draw *p, float u) {
    TRY(lora_sync(s));
    if (tok) memcpy(s->tok.map, tok, 4);
    if (p) memcpy(s->unif.map, &u, 4);
    step_values(s, rope, (uint32_t)pos0, 1);
    static const batch_key none;
    s->greedy = !p;
    s->feed = true;
    s->topk = p ? p->top_k : 0;
    s->draw = p;
    const int rc = run_cached(s, 1, 1, &none, NULL, 0, f);
    s->greedy = s->feed = false;
    s->topk = 0;
    s->draw = NULL;
    if (rc) return bs_error_prefix("Vulkan eval: ");
    step_done(s, 1);
    s->net->c->stats.tokens++;
    return 0;
}

int bs_vk_step_fed(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, VkFence f) {
    return step_fed(s, tok, pos0, rope, f, NULL, 0.0f);
}

int bs_vk_step_fed_drawn(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, VkFence f, const bs_draw *p,
                         float u) {
    return step_fed(s, tok, pos0, rope, f, p, u);
}

/* What a chunk's rows (from row `first` of the evaluation) give back: the rows, their ids, or
 * their lists. */
static void chunk_out(bs_vk_sess *s, const bs_vk_out *o, size_t first, int rows) {
    bs_vk_ctx *c = s->net->c;
    const size_t V = (size_t)s->net->hp.n_vocab, k = (size_t)o->top_k;
    if (o->next) read_back(c, o->next + first, s->ids.map, 4u * (size_t)rows);
    else if (o->top_k)
        for (int r = 0; r < rows; r++)
            o->n_top[first + r] = bs_vk_top_list(c, &s->top, (size_t)r, o->top_k, o->top_ids + (first + r) * k,
                                                 o->top_vals + (first + r) * k);
    else read_back(c, o->logits + first * V, s->logits.map, sizeof(float) * V * (size_t)rows);
}

/* tokens, or embedding rows [n][n_embd] (embd != NULL) written straight into x; o: what the
 * rows with logits give back (bs_vk_out) */
static int sess_eval(bs_vk_sess *s, const int32_t *tokens, const float *embd, int n, int pos0, const float *rope,
                     const bs_vk_out *o, const int *taps, int n_taps, float *tap_out) {
    const bs_vk_net_desc *hp = &s->net->hp;
    const size_t E = (size_t)hp->n_embd;
    if (n <= 0 || pos0 < 0 || pos0 + n > s->n_ctx) return bs_error("Vulkan eval: %d tokens at %d do not fit", n, pos0);
    if (o->top_k && (o->top_k > BS_VK_TOP_MAX || o->top_k < 0)) return bs_error("Vulkan top-k: k = %d (1..%d)", o->top_k, BS_VK_TOP_MAX);
    TRY(bs_vk_sess_settle(s) || lora_sync(s) || taps_ensure(s, n_taps) || (o->top_k ? bs_vk_top_ready(s) : 0));
    for (int off = 0; off < n; off += s->B) {
        const int m = BS_MIN(s->B, n - off);
        const bool last = off + m == n;
        const int rows = o->mode == 2 ? m : (o->mode == 1 && last ? 1 : 0);
        for (int t = 0; t < m && !embd; t++) {
            const uint32_t id = (uint32_t)tokens[off + t];
            memcpy((uint32_t *)s->tok.map + t, &id, 4);
        }
        if (embd && bs_vk_buf_write(s->net->c, &s->x, 0, embd + (size_t)off * E, sizeof(float) * (size_t)m * E))
            return bs_error_prefix("Vulkan eval: ");
        step_values(s, rope + (size_t)off * hp->n_rot, (uint32_t)(pos0 + off), m);
        s->greedy = o->next && rows;
        s->topk = rows ? o->top_k : 0;
        s->rows_in = embd != NULL;
        const int rc = run_step(s, m, rows, taps, n_taps);
        s->greedy = false;
        s->topk = 0;
        s->rows_in = false;
        if (rc) return bs_error_prefix("Vulkan eval: ");
        step_done(s, m);
        s->net->c->stats.tokens += (uint64_t)m;
        if (rows) chunk_out(s, o, o->mode == 2 ? (size_t)off : 0, rows);
        if (n_taps && tap_out) read_back(s->net->c, tap_out + (size_t)off * n_taps * E, s->taps.map, sizeof(float) * (size_t)m * n_taps * E);
    }
    return 0;
}

int bs_vk_sess_eval(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, int logits_mode,
                    float *logits, const int *taps, int n_taps, float *tap_out) {
    const bs_vk_out o = {.mode = logits_mode, .logits = logits};
    return sess_eval(s, tokens, NULL, n, pos0, rope, &o, taps, n_taps, tap_out);
}

int bs_vk_sess_eval_out(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, const bs_vk_out *o,
                        const int *taps, int n_taps, float *tap_out) {
    return sess_eval(s, tokens, NULL, n, pos0, rope, o, taps, n_taps, tap_out);
}

int bs_vk_sess_eval_rows(bs_vk_sess *s, const float *embd, int n, int pos0, const float *rope, int logits_mode,
                         float *logits, const int *taps, int n_taps, float *tap_out) {
    const bs_vk_out o = {.mode = logits_mode, .logits = logits};
    return sess_eval(s, NULL, embd, n, pos0, rope, &o, taps, n_taps, tap_out);
}

/* --- several sessions in one pass ------------------------------------------------------------ */
struct bs_vk_batch {
    bs_vk_sess *w;                /* the shared rows: scratch only, no state */
    int logit_rows;
    int max_seqs;                 /* BITSPARK_VK_BATCH_SEQS (tests, tuning), else BS_VK_BATCH_SEQS */
};

bs_vk_batch *bs_vk_batch_new(bs_vk_net *net, int max_rows, int max_logit_rows) {
    const int rows = BS_MAX(1, BS_MIN(max_rows, BS_VK_BATCH_ROWS));
    bs_vk_batch *b = bs_xcalloc(1, sizeof *b);
    const uint64_t per_row = 4u * (uint64_t)net->hp.n_vocab;   /* the logits rows must fit one binding */
    b->logit_rows = (int)BS_MAX(1, BS_MIN((uint64_t)BS_MIN(max_logit_rows, rows), net->c->max_binding / per_row));
    const char *ms = getenv("BITSPARK_VK_BATCH_SEQS");
    b->max_seqs = ms && atoi(ms) > 0 ? BS_MIN(atoi(ms), BS_VK_BATCH_SEQS) : BS_VK_BATCH_SEQS;
    if (!(b->w = bs_vk_sess_alloc(net, 0, rows, b->logit_rows, false, false)) ||
        bs_vk_buf_new(net->c, &b->w->agrp, 16u * ((BS_VK_BATCH_SEQS + ATT_BATCH - 1) / ATT_BATCH), true)) {
        bs_vk_sess_free(b->w);
        free(b);
        return NULL;
    }
    return b;
}

void bs_vk_batch_free(bs_vk_batch *b) {
    if (!b) return;
    bs_vk_sess_free(b->w);
    free(b);
}

int bs_vk_batch_rows(const bs_vk_batch *b) { return b->w->B; }

/* Sequences a pass may hold: each adds its recurrences' and attentions' dispatches (at most 3
 * and 2 a layer) to the shared ones (about 16 a layer, with LoRA terms up to about 3 per product
 * more), and a submission takes BS_VK_MAX_SETS (the 27B: 32 sequences, 28 with adapters). */
int bs_vk_batch_seqs(const bs_vk_batch *b) {
    const bs_vk_net *n = b->w->net;
    const int shared = n->hp.n_layer * (n->lora_r > 0 ? 48 : 20) + 64, per_seq = 3 * n->n_rec + 2 * n->n_att;
    return BS_MAX(1, BS_MIN(b->max_seqs, (BS_VK_MAX_SETS - shared) / BS_MAX(per_seq, 1)));
}
int bs_vk_batch_logit_rows(const bs_vk_batch *b) { return b->logit_rows; }

static int batch_check(const bs_vk_batch *b, const bs_vk_seq *q, int n_seq) {
    int rows = 0, lrows = 0;
    if (n_seq < 1 || n_seq > bs_vk_batch_seqs(b)) return bs_error("Vulkan batch: %d sequences (1..%d)", n_seq, bs_vk_batch_seqs(b));
    for (int i = 0; i < n_seq; i++) {
        const bs_vk_sess *s = q[i].s;
        if (!s || s->net != b->w->net) return bs_error("Vulkan batch: sequence %d is not on this network", i);
        for (int j = 0; j < i; j++)
            if (q[j].s == s) return bs_error("Vulkan batch: session given twice");
        if (q[i].n < 1 || q[i].n > s->B || q[i].pos0 < 0 || q[i].pos0 + q[i].n > s->n_ctx)
            return bs_error("Vulkan batch: %d rows at %d do not fit sequence %d", q[i].n, q[i].pos0, i);
        if (q[i].logit_rows < 0 || q[i].logit_rows > q[i].n) return bs_error("Vulkan batch: bad logits rows");
        rows += q[i].n;
        lrows += q[i].logit_rows;
    }
    if (rows > b->w->B || lrows > b->logit_rows)
        return bs_error("Vulkan batch: %d rows (%d with logits) exceed %d (%d)", rows, lrows, b->w->B, b->logit_rows);
    return 0;
}

/* The key of a pass (its recording binds the sessions' own buffers); false: not cacheable. */
static bool batch_key_of(const vk_part *pt, int np, batch_key *k) {
    memset(k, 0, sizeof *k);
    k->n_seq = np;
    for (int i = 0; i < np; i++) {
        if (pt[i].n_taps > KEY_TAPS) return false;
        k->q[i].uid = pt[i].s->uid;
        k->q[i].taps_gen = pt[i].s->taps_gen;
        k->q[i].n = pt[i].n;
        k->q[i].n_logit = pt[i].n_logit;
        k->q[i].n_taps = pt[i].n_taps;
        k->q[i].snap = pt[i].snap;
        k->q[i].flip = pt[i].s->pair_flip;
        k->q[i].io = pt[i].s->io;
        for (int t = 0; t < pt[i].n_taps; t++) k->q[i].taps[t] = pt[i].taps[t];
    }
    return true;
}

/* A pass of the same sequences and shapes as one before (the server's decode steps) resubmits
 * that one's recording; others are recorded (into the scratch session's cache). */
static int batch_run(bs_vk_sess *S, int R, const vk_part *pt, int np) {
    batch_key key;
    if (!S->no_cache && batch_key_of(pt, np, &key)) return run_cached(S, R, 0, &key, pt, np, VK_NULL_HANDLE);
    bs_vk_ctx *c = S->net->c;
    TRY(bs_vk_begin(c));
    const int rc = bs_vk_record_chunk(S, R, 0, NULL, 0, pt, np);
    return bs_vk_submit(c) || rc ? -1 : 0;
}

int bs_vk_batch_eval(bs_vk_batch *b, const bs_vk_seq *q, int n_seq) {
    bs_vk_sess *S = b->w;
    const bs_vk_net_desc *hp = &S->net->hp;
    const size_t V = (size_t)hp->n_vocab, E = (size_t)hp->n_embd, nr = (size_t)hp->n_rot;
    vk_part pt[BS_VK_BATCH_SEQS] = {{0}};
    TRY(batch_check(b, q, n_seq) || lora_sync(S));
    int R = 0;
    for (int i = 0; i < n_seq; i++) TRY(bs_vk_sess_settle(q[i].s));
    for (int i = 0; i < n_seq; i++) {
        bs_vk_sess *s = q[i].s;
        TRY(taps_ensure(s, q[i].n_taps));
        if (q[i].snapshot) bs_vk_sess_snapshot(s);   /* taken by this pass (its windows, its state pair) */
        pt[i] = (vk_part){s, R, q[i].n, q[i].logit_rows, q[i].taps, q[i].n_taps, s->snap == SNAP_PENDING};
        for (int t = 0; t < q[i].n; t++) {
            const uint32_t id = (uint32_t)q[i].tokens[t];
            memcpy((uint32_t *)S->tok.map + R + t, &id, 4);
        }
        if (nr) memcpy((float *)S->rope.map + (size_t)R * nr, q[i].rope, sizeof(float) * (size_t)q[i].n * nr);
        const uint32_t p0 = (uint32_t)q[i].pos0;
        memcpy(s->params.map, &p0, 4);
        attn_split_groups(s, p0, q[i].n);
        R += q[i].n;
    }
    attn_batch_groups(S, q, n_seq);
    /* greedy and top-k sequences only: the argmax and the k best found on the device, they come
       back instead of the rows (the widest k for every row: a list's first k are the k best) */
    bool ids_only = true;
    int top = 0;
    for (int i = 0; i < n_seq; i++) {
        ids_only &= !q[i].logit_rows || q[i].next || q[i].top_k > 0;
        if (q[i].logit_rows && q[i].top_k > 0) top = BS_MAX(top, BS_MIN(q[i].top_k, BS_VK_TOP_MAX));
    }
    S->greedy = false;
    for (int i = 0; i < n_seq && ids_only; i++) S->greedy |= q[i].logit_rows && q[i].next;
    S->topk = ids_only ? top : 0;
    if (S->topk && bs_vk_top_ready(S)) return bs_error_prefix("Vulkan batch: ");
    const int rc = batch_run(S, R, pt, n_seq);
    S->greedy = false;
    S->topk = 0;
    if (rc) return bs_error_prefix("Vulkan batch: ");
    for (int i = 0; i < n_seq; i++) step_done(pt[i].s, pt[i].n);
    S->net->c->stats.tokens += (uint64_t)R;
    size_t k = 0;
    for (int i = 0; i < n_seq; i++) {
        const int lr = q[i].logit_rows, nt = q[i].n_taps;
        if (lr && ids_only && q[i].next) {
            read_back(S->net->c, q[i].next, (const int32_t *)S->ids.map + k, sizeof(int32_t) * (size_t)lr);
        } else if (lr && ids_only) {
            const size_t tk = (size_t)q[i].top_k;
            for (int r = 0; r < lr; r++)
                q[i].n_top[r] = bs_vk_top_list(S->net->c, &S->top, k + (size_t)r, q[i].top_k, q[i].top_ids + r * tk,
                                               q[i].top_logits + r * tk);
        } else if (lr) {
            read_back(S->net->c, q[i].logits, (float *)S->logits.map + k * V, sizeof(float) * V * (size_t)lr);
        }
        k += (size_t)lr;
        if (nt && q[i].tap_out) read_back(S->net->c, q[i].tap_out, q[i].s->taps.map, sizeof(float) * (size_t)q[i].n * nt * E);
    }
    return 0;
}

