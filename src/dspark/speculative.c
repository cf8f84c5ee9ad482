/* speculative.c: the draft / verify / accept round of DSpark speculative decoding (see
 * speculative.h). */
#include "dspark/speculative.h"
#include "cpu/compute.h"
#include "model/session.h"
#include "vulkan/backend.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT_CHUNK 64      /* prompt rows evaluated (and their taps held) at once */
_Static_assert(BS_DSPARK_MAX_BLOCK <= BS_SAMPLER_AHEAD, "a round's uniforms fit the sampler's queue");

struct bs_spec {
    bs_session *s;
    const bs_dspark *d;
    bs_dspark_ctx *dc;           /* NULL without a drafter (hook only) */
    bs_spec_params prm;
    bs_spec_stats st;
    bs_spec_depth depth;
    int V, B;
    size_t row;                  /* floats in one tap row */
    float *taps;                 /* [max(PROMPT_CHUNK, B+1)][row] */
    float *logits;               /* [B+1][V] verify logits */
    float *q;                    /* [B][V] drafter logits, then distributions when sampling */
    float *p, *r;                /* [V] target distribution, residual / Markov bias */
    /* verification without its rows (a GPU then reads back ids, not megabytes): each row's
       greedy token, or its k best for a sampler that reads no more (bs_sampler_top_k_only) */
    int32_t next[BS_DSPARK_MAX_BLOCK + 1];
    int32_t *top_ids;            /* [B+1][BS_TOP_MAX] */
    float *top_vals;
    int n_top[BS_DSPARK_MAX_BLOCK + 1];
    bool want_rows;              /* the caller reads the rows (bs_spec_logits) */
    int32_t drafts[BS_DSPARK_MAX_BLOCK];
    float conf[BS_DSPARK_MAX_BLOCK];
    /* a sampled chain's slots from the device (chain_lists): their lists, its predicted drafts */
    int32_t ch_ids[BS_DSPARK_MAX_BLOCK * BS_TOP_MAX], ch_pred[BS_DSPARK_MAX_BLOCK];
    float ch_vals[BS_DSPARK_MAX_BLOCK * BS_TOP_MAX];
    int ch_n[BS_DSPARK_MAX_BLOCK];
    bool dev_taps;               /* drafter and target on the device: taps stay there */
    double append_row_s;         /* best seen time to feed one tap row */
    float *pend;                 /* [2 * BS_PARK_WINDOW][row] tap rows kept back while parked */
    int n_pend;                  /* rows in pend, the positions right before n_past */
    int n_skip;                  /* positions before those that the drafter will get no row for */
    bs_spec_draft_fn hook;
    void *hook_ud;
    struct {                     /* the round between bs_spec_round_begin and _end */
        int32_t ids[BS_DSPARK_MAX_BLOCK + 1];   /* anchor + drafts: the verify rows */
        int32_t anchor;
        int s, k, max_new;
        bool prepared;           /* bs_spec_round_prepare chose k for this anchor */
        bool blocked;            /* the drafter's block for it has run (bs_spec_blocks) */
        bool probe, sampling;
        int lists;               /* LISTS_*: what verification reads */
        int top_k;
        double t0, t1, t_draft;
    } rd;
};

bs_spec *bs_spec_new(bs_session *s, const bs_dspark *d, const bs_spec_params *p) {
    if (d && bs_dspark_check_pair(d, s->m)) {
        bs_error_prefix("drafter and target do not fit: ");
        return NULL;
    }
    if (d && bs_session_n_past(s) != 0) {
        bs_error("speculative decoding needs a fresh session (its positions have no taps)");
        return NULL;
    }
    bs_spec *sp = bs_xcalloc(1, sizeof *sp);
    sp->s = s;
    sp->d = d;
    sp->prm = *p;
    sp->V = s->m->hp.n_vocab;
    sp->B = d ? d->hp.block_size : BS_MIN(BS_DSPARK_MAX_BLOCK, 8);
    if (s->n_batch < sp->B + 1 || s->n_rollback < sp->B + 1) {
        bs_error("the session's batch (%d) and rollback window (%d) must hold %d rows", s->n_batch,
                 s->n_rollback, sp->B + 1);
        free(sp);
        return NULL;
    }
    if (d) {
        /* a target on Vulkan gets the drafter there too (BITSPARK_DRAFT_DEVICE=cpu keeps it on
         * the CPU); its contexts then run on the device */
        const char *dd = getenv("BITSPARK_DRAFT_DEVICE");
        if (s->vk && !(dd && !strcmp(dd, "cpu")) && bs_dspark_to_device(d, s->m, NULL)) {
            bs_error_prefix("drafter on the device: ");
            free(sp);
            return NULL;
        }
        if (bs_session_set_taps(s, d->hp.taps, d->hp.n_taps) ||
            !(sp->dc = bs_dspark_ctx_new(d, s->n_ctx, s->pool))) {
            free(sp);
            return NULL;
        }
        bs_dspark_ctx_set_window(sp->dc, p->draft_window);
        sp->dev_taps = bs_dspark_ctx_link(sp->dc, s, sp->B + 1);   /* a verify pass */
        sp->row = (size_t)d->hp.n_taps * d->hp.n_embd;
        sp->taps = bs_xmalloc((size_t)BS_MAX(PROMPT_CHUNK, sp->B + 1) * sp->row * sizeof(float));
    }
    const size_t V = (size_t)sp->V;
    sp->logits = bs_xmalloc((size_t)(sp->B + 1) * V * sizeof(float));
    sp->q = bs_xmalloc((size_t)sp->B * V * sizeof(float));
    sp->p = bs_xmalloc(V * sizeof(float));
    sp->top_ids = bs_xmalloc((size_t)(sp->B + 1) * BS_TOP_MAX * sizeof *sp->top_ids);
    sp->top_vals = bs_xmalloc((size_t)(sp->B + 1) * BS_TOP_MAX * sizeof *sp->top_vals);
    sp->r = bs_xmalloc(V * sizeof(float));
    int depth = p->draft_max == BS_DRAFT_AUTO ? BS_DRAFT_AUTO : BS_MIN(BS_MAX(p->draft_max, 0), sp->B);
    bs_depth_init(&sp->depth, sp->B, depth);
    return sp;
}

void bs_spec_free(bs_spec *sp) {
    if (!sp) return;
    bs_dspark_ctx_free(sp->dc);   /* first: an append it kept may read the session's taps */
    if (sp->d) bs_session_set_taps(sp->s, NULL, 0);
    bs_dspark_ctx_link(NULL, sp->s, 0);
    free(sp->taps);
    free(sp->pend);
    free(sp->logits);
    free(sp->q);
    free(sp->p);
    free(sp->r);
    free(sp->top_ids);
    free(sp->top_vals);
    free(sp);
}

void bs_spec_set_draft_hook(bs_spec *sp, bs_spec_draft_fn fn, void *ud) {
    sp->hook = fn;
    sp->hook_ud = ud;
}

const bs_spec_stats *bs_spec_get_stats(const bs_spec *sp) { return &sp->st; }
const float *bs_spec_logits(const bs_spec *sp, int i) { return sp->logits + (size_t)i * sp->V; }
void bs_spec_want_rows(bs_spec *sp, bool on) { sp->want_rows = on; }
const bs_spec_depth *bs_spec_get_depth(const bs_spec *sp) { return &sp->depth; }
bs_spec_depth *bs_spec_depth_mut(bs_spec *sp) { return &sp->depth; }

/* rows NULL: the n tap rows the device session just evaluated, read there */
static int append_rows(bs_spec *sp, const float *rows, int n) {
    double t0 = bs_time();
    if (rows ? bs_dspark_ctx_append(sp->dc, rows, n) : bs_dspark_ctx_append_session(sp->dc, sp->s->vk, n)) return -1;
    double dt = bs_time() - t0;
    sp->st.t_append += dt;
    if (sp->append_row_s == 0 || dt / n < sp->append_row_s) sp->append_row_s = dt / n;
    return 0;
}

/* Parked decoding must cost what plain decoding costs. So while parked the drafter gets nothing
 * per step: the tap rows are kept back, and only the last BS_PARK_WINDOW of them reach it, in one
 * batch, when it next runs (a probe, or drafting again); positions older than that become a gap
 * in its context (bs_dspark_ctx_skip). Drafts near a gap may be a little worse; the output is
 * the same, since every draft is verified. */
static int flush(bs_spec *sp) {
    const int n = sp->n_pend, skip = sp->n_skip;
    sp->n_pend = sp->n_skip = 0;
    if (skip > 0 && bs_dspark_ctx_skip(sp->dc, skip)) return -1;
    return n > 0 ? append_rows(sp, sp->pend, n) : 0;
}

/* Feed the tap rows of the positions just kept (in sp->taps) to the drafter, or keep them back. */
static int feed(bs_spec *sp, int n, bool defer) {
    if (!sp->dc || n <= 0) return 0;
    if (!defer || n > BS_PARK_WINDOW) return flush(sp) || append_rows(sp, sp->dev_taps ? NULL : sp->taps, n) ? -1 : 0;
    /* kept back while parked: from the device, these few rows come to the host */
    if (sp->dev_taps && bs_vk_sess_taps_read(sp->s->vk, sp->taps, n)) return -1;
    if (!sp->pend) sp->pend = bs_xmalloc((size_t)2 * BS_PARK_WINDOW * sp->row * sizeof(float));
    if (sp->n_pend + n > 2 * BS_PARK_WINDOW) {   /* keep the newest rows; amortized one copy per row */
        const int drop = sp->n_pend - (BS_PARK_WINDOW - n);
        memmove(sp->pend, sp->pend + (size_t)drop * sp->row, (size_t)(sp->n_pend - drop) * sp->row * sizeof(float));
        sp->n_pend -= drop;
        sp->n_skip += drop;
    }
    memcpy(sp->pend + (size_t)sp->n_pend * sp->row, sp->taps, (size_t)n * sp->row * sizeof(float));
    sp->n_pend += n;
    return 0;
}

void bs_spec_crop(bs_spec *sp, int n) {
    sp->rd.prepared = sp->rd.blocked = false;   /* a prepared round's block may be stale now */
    if (!sp->dc) return;
    const int len = bs_dspark_ctx_len(sp->dc);
    if (len > n) {
        bs_dspark_ctx_crop(sp->dc, BS_MAX(n, 0));
        sp->n_pend = sp->n_skip = 0;
    } else if (len + sp->n_skip + sp->n_pend > n) {   /* drop the newest kept-back rows first */
        const int excess = len + sp->n_skip + sp->n_pend - n, drop = BS_MIN(excess, sp->n_pend);
        sp->n_pend -= drop;
        sp->n_skip -= excess - drop;
    }
}

int bs_spec_rows(const bs_spec *sp) { return sp->dc ? bs_dspark_ctx_len(sp->dc) + sp->n_pend : 0; }

int bs_spec_sync(bs_spec *sp) {
    const int n_past = bs_session_n_past(sp->s);
    bs_spec_crop(sp, n_past);
    if (!sp->dc) return 0;
    const int len = bs_dspark_ctx_len(sp->dc);
    if (len + sp->n_skip + sp->n_pend < n_past) {
        /* positions the session evaluated without the drafter (a request that did not draft, a
         * state restored or shared): a gap in its context, as parking leaves one, the kept-back
         * rows before it included; drafts near it may be worse, the output is the same */
        const int gap = n_past - (len + sp->n_skip + sp->n_pend) + sp->n_pend;
        bs_log(2, "speculative: %d positions the drafter has not seen become a gap in its context\n", gap);
        sp->n_skip += gap;
        sp->n_pend = 0;
        return gap;
    }
    return 0;
}

int bs_spec_prompt_plan(bs_spec *sp, const int32_t *tokens, int n, float *logits, bs_batch_seq *q) {
    if (n < 1) return bs_error("empty prompt");
    bs_spec_sync(sp);
    /* taps on the device: one submission's rows at a time (the device keeps the last one's) */
    const int c = sp->dc ? BS_MIN(sp->dev_taps ? BS_MIN(PROMPT_CHUNK, bs_vk_sess_rows(sp->s->vk)) : PROMPT_CHUNK, n) : n;
    const bool want = c == n && logits;
    *q = (bs_batch_seq){.s = sp->s, .tokens = tokens, .n = c, .logits_mode = want ? BS_LOGITS_LAST : BS_LOGITS_NONE,
                        .logits = want ? logits : NULL, .taps = sp->dc ? sp->taps : NULL};
    return c;
}

int bs_spec_prompt_commit(bs_spec *sp, int n) { return feed(sp, n, false); }

int bs_spec_prompt(bs_spec *sp, const int32_t *tokens, int n, float *logits) {
    if (n < 1) return bs_error("empty prompt");
    for (int off = 0; off < n;) {
        bs_batch_seq q;
        const int c = bs_spec_prompt_plan(sp, tokens + off, n - off, logits, &q);
        if (c < 0 || bs_eval(q.s, q.tokens, q.n, q.logits_mode, q.logits, q.taps) || bs_spec_prompt_commit(sp, c))
            return -1;
        off += c;
    }
    return 0;
}

int bs_spec_prompt_image(bs_spec *sp, const float *embd, int nx, int ny, float *logits) {
    if (nx < 1 || ny < 1 || nx > bs_session_n_ctx(sp->s) || ny > bs_session_n_ctx(sp->s))
        return bs_error("bad image grid %dx%d", nx, ny);
    bs_spec_sync(sp);
    /* taps on the device: one submission's rows at a time, as bs_spec_prompt_plan */
    const int n = nx * ny, chunk = sp->dc ? (sp->dev_taps ? BS_MIN(PROMPT_CHUNK, bs_vk_sess_rows(sp->s->vk)) : PROMPT_CHUNK) : n;
    const size_t E = (size_t)bs_model_n_embd(sp->s->m);
    for (int off = 0; off < n; off += chunk) {
        const int c = BS_MIN(chunk, n - off);
        const bool want = off + c == n && logits;
        if (bs_eval_image_rows(sp->s, embd + (size_t)off * E, nx, ny, off, c, want ? BS_LOGITS_LAST : BS_LOGITS_NONE,
                               want ? logits : NULL, sp->dc ? sp->taps : NULL) ||
            feed(sp, c, false))
            return -1;
    }
    return 0;
}

/* Greedy drafts with the drafter. Returns k. */
static int draft_greedy(bs_spec *sp, int32_t anchor, int k) {
    bs_dspark_draft_greedy(sp->dc, anchor, k, sp->drafts, sp->conf);
    return k;
}

/* The chain's slots on the device in one submission (bs_dspark_draft_sampled; with the block's,
 * where the round armed it: bs_spec_round_prepare): their lists, and the drafts the device
 * predicts with the round's uniforms; 0 where it cannot run. */
static int chain_lists(bs_spec *sp, const bs_sampler *smp, int32_t anchor, int k, int tk, const double *u) {
    const bs_draw p = bs_sampler_draw_steps(smp, tk);
    return bs_dspark_draft_sampled(sp->dc, anchor, k, &p, u, sp->ch_pred, sp->ch_ids, sp->ch_vals, sp->ch_n);
}

/* Drafts sampled from q = the target's sampler chain (logit bias, penalties, DRY, top-k, top-p,
 * min-p, temperature) applied to the drafter's logits (base + Markov bias, mask id excluded):
 * drafts then come from the same truncated support the target samples from, which is what gets
 * them accepted; the accept / residual rule is exact for any q. q rows are kept for
 * verification. Returns k.
 * Where the sampler reads only the k best, the uniforms its next k draws take are drawn first
 * (bs_sampler_lookahead, as when the round was prepared), so that the device can run the whole
 * chain in one submission and predict each draw; every draft is still drawn here, from its
 * slot's list by the sampler, which takes those very uniforms in order,
 * and the device's lists are taken only while its predictions equal those draws (after a miss
 * the slots go one submission each, from the drafts drawn here). */
static int draft_sample(bs_spec *sp, bs_sampler *smp, int32_t anchor, int k, float T) {
    const int V = sp->V, tk = bs_sampler_top_k_only(smp, BS_TOP_MAX);
    (void)T;   /* the chain's own temperature */
    double u[BS_DSPARK_MAX_BLOCK];   /* (k uniforms always fit the queue: the assertion above) */
    if (tk) bs_sampler_lookahead(smp, k, u);
    int chained = tk ? chain_lists(sp, smp, anchor, k, tk, u) : 0;
    int32_t prev = anchor;
    for (int i = 0; i < k; i++) {
        float *q = sp->q + (size_t)i * V;
        /* a chain that reads only the k best: those of the slot's scores, found on the device
           (the same list as from the row, so the same draws) */
        int32_t ids_i[BS_TOP_MAX];
        float vals_i[BS_TOP_MAX];
        const int32_t *ids = ids_i;
        const float *vals = vals_i;
        int n;
        if (i < chained) {
            sp->st.n_chained++;
            ids = sp->ch_ids + (size_t)i * tk, vals = sp->ch_vals + (size_t)i * tk, n = sp->ch_n[i];
        } else {
            n = tk ? bs_dspark_slot_top(sp->dc, i, prev, tk, ids_i, vals_i) : 0;
        }
        if (n > 0) {
            if (bs_sampler_apply_top(smp, ids, vals, n) < 0) return i;
        } else {
            bs_dspark_logits(sp->dc, i, 1, q);
            bs_dspark_markov_bias(sp->dc, prev, sp->r);
            for (int v = 0; v < V; v++) q[v] += sp->r[v];
            q[sp->d->hp.mask_id] = -INFINITY;
            if (bs_sampler_apply(smp, q) < 0) return i;
        }
        bs_sampler_probs_dense(smp, q);
        sp->conf[i] = bs_dspark_confidence(sp->dc, i, prev);
        const int32_t t = bs_sampler_draw(smp, NULL, q, V);
        if (t < 0) return i;
        sp->drafts[i] = prev = t;
        if (i < chained && t != sp->ch_pred[i]) {   /* later lists are of another draft */
            chained = i + 1;
            sp->st.n_chain_miss++;
        }
    }
    return k;
}

static int make_drafts(bs_spec *sp, bs_sampler *smp, int32_t anchor, int pos, int k, bool sampling, float T) {
    for (int i = 0; i < k; i++) sp->conf[i] = -1.0f;
    if (sp->hook) {
        int n = sp->hook(sp->hook_ud, anchor, pos, k, smp, sp->drafts, sampling ? sp->q : NULL);
        return BS_MAX(0, BS_MIN(n, k));
    }
    /* k drafts need k slots (the anchor's predicts the first): a shorter block costs
     * proportionally less, and on the trained tiny pair accepts about as often */
    if (!sp->rd.blocked && (flush(sp) || bs_dspark_block_n(sp->dc, anchor, pos, k))) return -1;
    return sampling ? draft_sample(sp, smp, anchor, k, T) : draft_greedy(sp, anchor, k);
}

enum { LISTS_NONE, LISTS_NEXT, LISTS_TOP };

/* Which verification reads: the greedy tokens or k best lists where the sampler reads no more
 * of a row and the caller wants no rows, else the rows. */
static int lists_for(const bs_spec *sp, const bs_sampler *smp, bool sampling, int *top_k) {
    *top_k = 0;
    if (sp->want_rows) return LISTS_NONE;
    if (!sampling) return bs_sampler_plain_greedy(smp) ? LISTS_NEXT : LISTS_NONE;
    return (*top_k = bs_sampler_top_k_only(smp, BS_TOP_MAX)) > 0 ? LISTS_TOP : LISTS_NONE;
}

/* The sampler's distribution at row i: from its row, or from its k best. */
static int apply_row(bs_spec *sp, bs_sampler *smp, int i) {
    if (sp->rd.lists != LISTS_TOP) return bs_sampler_apply(smp, sp->logits + (size_t)i * sp->V);
    const size_t at = (size_t)i * (size_t)sp->rd.top_k;
    return bs_sampler_apply_top(smp, sp->top_ids + at, sp->top_vals + at, sp->n_top[i]);
}

static int cmp_id(const void *a, const void *b) {
    const int32_t x = ((const bs_token_prob *)a)->id, y = ((const bs_token_prob *)b)->id;
    return (x > y) - (x < y);
}

/* A draw from max(0, p - q) after a rejection. p - q > 0 only where p > 0, so over p's
 * candidates; taken in id order, the sums and the draw are those of the dense rows' (zeros
 * elsewhere add nothing), so both ways give the same token from the same seed. */
static int32_t draw_residual(bs_spec *sp, bs_sampler *smp, const float *q) {
    if (sp->rd.lists != LISTS_TOP) {
        bs_sampler_probs_dense(smp, sp->p);
        double mass = 0.0;
        for (int v = 0; v < sp->V; v++) mass += (sp->r[v] = fmaxf(0.0f, sp->p[v] - q[v]));
        return mass > 1e-12 ? bs_sampler_draw(smp, NULL, sp->r, sp->V) : bs_sampler_pick(smp);
    }
    int n;
    const bs_token_prob *c = bs_sampler_candidates(smp, &n);
    bs_token_prob by_id[BS_TOP_MAX];
    int32_t ids[BS_TOP_MAX];
    memcpy(by_id, c, sizeof *c * (size_t)n);
    qsort(by_id, (size_t)n, sizeof *by_id, cmp_id);
    double mass = 0.0;
    for (int j = 0; j < n; j++) {
        ids[j] = by_id[j].id;
        mass += (sp->r[j] = fmaxf(0.0f, by_id[j].p - q[by_id[j].id]));
    }
    return mass > 1e-12 ? bs_sampler_draw(smp, ids, sp->r, n) : bs_sampler_pick(smp);
}

/* Verify row i against draft d: 1 accepted, 0 rejected with the replacement in *t, -1 error. */
static int verify_row(bs_spec *sp, bs_sampler *smp, int i, int32_t d, bool sampling, int32_t *t) {
    if (!sampling) {
        *t = sp->rd.lists == LISTS_NEXT ? sp->next[i] : bs_sampler_sample(smp, sp->logits + (size_t)i * sp->V);
        return *t < 0 ? -1 : *t == d;
    }
    if (apply_row(sp, smp, i) < 0) return -1;
    const float *q = sp->q + (size_t)i * sp->V;
    if (bs_sampler_uniform(smp) * q[d] < bs_sampler_prob(smp, d)) return 1;   /* prob min(1, p/q) */
    *t = draw_residual(sp, smp, q);
    return *t < 0 ? -1 : 0;
}

/* Accept drafts 0..k-1 in order, then the correction or bonus token. Returns tokens written. */
static int accept(bs_spec *sp, bs_sampler *smp, int k, bool sampling, bool (*is_stop)(void *, int32_t),
                  void *ud, int32_t *out, int *n_acc) {
    int m = 0;
    *n_acc = 0;
    for (int i = 0; i < k; i++) {
        int32_t t;
        const int a = verify_row(sp, smp, i, sp->drafts[i], sampling, &t);
        if (a < 0) return -1;
        const int32_t tok = a ? sp->drafts[i] : t;
        bs_sampler_accept(smp, tok);
        out[m++] = tok;
        if (!a) return m;
        ++*n_acc;
        if (is_stop && is_stop(ud, tok)) return m;
    }
    int32_t t;
    if (sp->rd.lists == LISTS_NEXT) t = sp->next[k];
    else t = apply_row(sp, smp, k) < 0 ? -1 : bs_sampler_pick(smp);
    if (t < 0) return -1;
    bs_sampler_accept(smp, t);
    out[m++] = t;
    return m;
}

int bs_spec_round_prepare(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new) {
    const int s = bs_session_n_past(sp->s);
    sp->rd.prepared = sp->rd.blocked = false;
    if (max_new < 1) return bs_error("speculative round: no room for a token");
    if (s >= sp->s->n_ctx) return bs_error("speculative round: the context is full");
    const bool can_draft = sp->hook || sp->dc;
    const int k_max = can_draft ? BS_MIN(BS_MIN(sp->B, max_new - 1), sp->s->n_ctx - s - 1) : 0;
    int k = bs_depth_choose(&sp->depth, k_max);
    if (k > sp->depth.measured_k && sp->depth.calibrated && !sp->hook) {
        /* deeper drafts look worth it for the first time: measure what they cost */
        if (bs_spec_calibrate_upto(sp, anchor, sp->B)) return bs_error_prefix("measuring draft costs: ");
        k = bs_depth_choose(&sp->depth, k_max);
    }
    sp->rd.probe = k > 0 && sp->depth.parked;
    sp->rd.sampling = bs_sampler_get_params(smp)->temp > 0.0f;
    /* greedy drafts with the block; sampled ones from the k best with the uniforms their draws
       will take, drawn now and kept in the sampler, so that the block can run their chain too */
    if (sp->dc) {
        const int tk = sp->rd.sampling && k > 0 && !sp->hook ? bs_sampler_top_k_only(smp, BS_TOP_MAX) : 0;
        const bs_draw p = bs_sampler_draw_steps(smp, tk);
        double u[BS_DSPARK_MAX_BLOCK];
        if (tk) bs_sampler_lookahead(smp, k, u);
        bs_dspark_ctx_greedy_ahead(sp->dc, !sp->rd.sampling);
        bs_dspark_ctx_sampled_ahead(sp->dc, tk ? &p : NULL, u, tk ? k : 0);
    }
    sp->rd.s = s;
    sp->rd.k = k;
    sp->rd.anchor = anchor;
    sp->rd.max_new = max_new;
    sp->rd.t0 = bs_time();
    sp->rd.t_draft = 0;
    sp->rd.prepared = true;
    return k > 0 && !sp->hook;
}

int bs_spec_blocks(bs_spec *const *sps, int n) {
    bs_dspark_ctx *cs[BS_DSPARK_MAX_MULTI];
    bs_spec *who[BS_DSPARK_MAX_MULTI];
    int32_t anchors[BS_DSPARK_MAX_MULTI];
    int pos[BS_DSPARK_MAX_MULTI], ks[BS_DSPARK_MAX_MULTI], m = 0;
    for (int i = 0; i < n && m < BS_DSPARK_MAX_MULTI; i++) {
        bs_spec *sp = sps[i];
        if (!sp->rd.prepared || sp->rd.blocked || sp->rd.k <= 0 || sp->hook || !sp->dc) continue;
        if (m > 0 && sp->d != who[0]->d) continue;   /* another drafter: it runs its own block */
        if (flush(sp)) return -1;
        cs[m] = sp->dc, who[m] = sp, anchors[m] = sp->rd.anchor, pos[m] = sp->rd.s, ks[m] = sp->rd.k;
        m++;
    }
    if (m < 2) return 0;   /* alone, bs_spec_round_begin runs it as usual */
    const double t0 = bs_time();
    if (bs_dspark_block_multi(cs, anchors, pos, ks, m)) return -1;
    const double share = (bs_time() - t0) / m;
    for (int i = 0; i < m; i++) {
        who[i]->rd.blocked = true;
        who[i]->rd.t_draft += share;
    }
    return m;
}

int bs_spec_round_begin(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new, bs_batch_seq *q) {
    if ((!sp->rd.prepared || sp->rd.anchor != anchor || sp->rd.max_new != max_new ||
         sp->rd.s != bs_session_n_past(sp->s)) && bs_spec_round_prepare(sp, smp, anchor, max_new) < 0)
        return -1;
    sp->rd.prepared = false;
    const int s = sp->rd.s;
    int k = sp->rd.k;
    const double t0 = bs_time();
    if (k > 0) {
        if ((k = make_drafts(sp, smp, anchor, s, k, sp->rd.sampling, bs_sampler_get_params(smp)->temp)) < 0) return -1;
        if (k > 0 && !sp->hook && sp->prm.conf_cut > 0) k = bs_depth_trim(&sp->depth, sp->conf, k, sp->rd.sampling);
        /* under a grammar, greedy drafts from the first one it does not allow would only be
         * rejected (the anchor is already accepted into the sampler, so the state is the
         * drafts'). Not when sampling: whether a draft is verified must not depend on its own
         * value (an exact sample needs each draft judged by accept / residual, or none), and one
         * the grammar forbids has p = 0 there, so it is rejected and the residual drawn */
        if (k > 0 && !sp->rd.sampling) k = bs_sampler_grammar_prefix(smp, sp->drafts, k);
    }
    sp->rd.blocked = false;
    sp->rd.k = k;
    sp->rd.t1 = bs_time();
    sp->rd.t_draft += sp->rd.t1 - t0;
    sp->rd.ids[0] = anchor;
    memcpy(sp->rd.ids + 1, sp->drafts, (size_t)k * sizeof *sp->rd.ids);
    /* a round without drafts keeps its one token: its state may be updated in place */
    bs_session_set_undo(sp->s, k > 0);
    *q = (bs_batch_seq){.s = sp->s, .tokens = sp->rd.ids, .n = k + 1, .logits_mode = BS_LOGITS_ALL,
                        .logits = sp->logits, .taps = sp->dc ? sp->taps : NULL};
    sp->rd.lists = lists_for(sp, smp, sp->rd.sampling, &sp->rd.top_k);
    if (sp->rd.lists == LISTS_NEXT) q->next = sp->next;
    if (sp->rd.lists == LISTS_TOP) {
        q->top_k = sp->rd.top_k;
        q->top_ids = sp->top_ids;
        q->top_logits = sp->top_vals;
        q->n_top = sp->n_top;
    }
    return 0;
}

int bs_spec_round_end(bs_spec *sp, bs_sampler *smp, bool evaluated, bool alone,
                      bool (*is_stop)(void *ud, int32_t id), void *ud, int32_t *out) {
    bs_session_set_undo(sp->s, 1);
    if (!evaluated) return bs_error_prefix("verifying drafts: ");
    const int s = sp->rd.s, k = sp->rd.k;
    double t2 = bs_time();
    /* a pass shared with other sequences does not say what this width costs alone */
    if (alone) bs_depth_observe_verify(&sp->depth, k + 1, t2 - sp->rd.t1);

    int n_acc;
    const int m = accept(sp, smp, k, sp->rd.sampling, is_stop, ud, out, &n_acc);
    if (m < 0) return -1;
    double t3 = bs_time();
    if (s + m < s + k + 1 && bs_session_rollback(sp->s, s + m)) return bs_error_prefix("rollback: ");
    double t4 = bs_time();
    if (feed(sp, m, k == 0 && sp->depth.parked)) return -1;
    if (sp->rd.probe && alone) bs_depth_observe_probe(&sp->depth, bs_time() - sp->rd.t0 - sp->depth.verify1_s);
    if (k > 0) bs_depth_observe_accept(&sp->depth, k, n_acc, sp->hook ? NULL : sp->conf);

    sp->st.n_rounds++;
    sp->st.n_draft_rounds += k > 0;
    sp->st.n_drafted += k;
    sp->st.n_accepted += n_acc;
    sp->st.n_tokens += m;
    sp->st.t_draft += sp->rd.t_draft;
    sp->st.t_verify += t3 - sp->rd.t1;
    sp->st.t_rollback += t4 - t3;
    return m;
}

int bs_spec_round(bs_spec *sp, bs_sampler *smp, int32_t anchor, int max_new,
                  bool (*is_stop)(void *ud, int32_t id), void *ud, int32_t *out) {
    bs_batch_seq q;
    if (bs_spec_round_begin(sp, smp, anchor, max_new, &q)) return -1;
    const bool ok = bs_eval_seq(&q) == 0;
    return bs_spec_round_end(sp, smp, ok, true, is_stop, ud, out);
}

#define CALIB_REPS 3
#define CALIB_SLOW_S 0.02   /* a width-1 eval this slow (a big model): one measured run per width */

/* Time bs_eval at widths 1..nw (interleaved, best of the runs after a warm-up: load spikes hit
 * one run, not a width) into best[1..nw]; rolled back each time. Returns the reps used. */
static int time_widths(bs_spec *sp, const int32_t *ids, int nw, double *best) {
    const int s = bs_session_n_past(sp->s);
    int reps = CALIB_REPS;
    for (int w = 1; w <= nw; w++) best[w] = 1e30;
    for (int rep = 0; rep <= reps; rep++)
        for (int w = 1; w <= nw; w++) {
            double t0 = bs_time();
            /* as a round verifies: without its rows unless the caller wants them */
            const bs_batch_seq q = {.s = sp->s, .tokens = ids, .n = w, .logits_mode = BS_LOGITS_ALL, .logits = sp->logits,
                                    .taps = sp->dc ? sp->taps : NULL, .next = sp->want_rows ? NULL : sp->next};
            if (bs_eval_seq(&q)) return -1;
            double dt = bs_time() - t0;
            if (bs_session_rollback(sp->s, s)) return -1;
            if (rep) best[w] = BS_MIN(best[w], dt);
            else if (w == 1 && dt > CALIB_SLOW_S) reps = 1;
        }
    return reps;
}

int bs_spec_calibrate_upto(bs_spec *sp, int32_t token, int max_k) {
    const int s = bs_session_n_past(sp->s);
    max_k = BS_MAX(1, BS_MIN(max_k, sp->B));
    if (s < 1 || s + sp->B + 1 > sp->s->n_ctx) return 0;   /* nothing to measure against */
    int32_t ids[BS_DSPARK_MAX_BLOCK + 1];
    double best[BS_DEPTH_MAX + 2], dk[BS_DEPTH_MAX + 1], draft = 0;
    for (int i = 0; i <= sp->B; i++) ids[i] = token;
    const int reps = time_widths(sp, ids, max_k + 1, best);
    if (reps < 0) return -1;
    for (int w = max_k + 2; w <= sp->B + 1; w++)   /* not measured yet: linear, from the last two */
        best[w] = best[w - 1] + (best[max_k + 1] - best[max_k]);
    if (sp->dc && !flush(sp) && bs_dspark_ctx_len(sp->dc) == s) {
        /* feeding rows: B+1 at a time as rounds do (the prompt's first append also paid for
         * growing the cache, so it overstates the cost) */
        double app = 1e30;
        for (int rep = 0; rep <= reps; rep++) {
            double t0 = bs_time();
            if (sp->dev_taps ? bs_dspark_ctx_append_session(sp->dc, sp->s->vk, sp->B + 1)
                             : bs_dspark_ctx_append(sp->dc, sp->taps, sp->B + 1))
                return -1;
            if (rep) app = BS_MIN(app, (bs_time() - t0) / (sp->B + 1));
            bs_dspark_ctx_crop(sp->dc, s);
        }
        sp->append_row_s = app;
        for (int k = 1; k <= sp->B; k++) dk[k] = 1e30;
        for (int rep = 0; rep <= reps; rep++)
            for (int k = 1; k <= max_k; k++) {
                double t0 = bs_time();
                if (bs_dspark_block_n(sp->dc, token, s, k)) return -1;
                draft_greedy(sp, token, k);
                if (rep) dk[k] = BS_MIN(dk[k], bs_time() - t0);
            }
        for (int k = max_k + 1; k <= sp->B; k++) dk[k] = dk[max_k];   /* optimistic until measured */
        draft = dk[sp->B];
    }
    bs_depth_calibrate(&sp->depth, best, draft, sp->append_row_s);
    if (draft > 0) bs_depth_calibrate_draft(&sp->depth, dk);
    sp->depth.measured_k = max_k;
    return 0;
}

int bs_spec_calibrate(bs_spec *sp, int32_t token) { return bs_spec_calibrate_upto(sp, token, sp->B); }
