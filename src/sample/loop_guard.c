/* loop_guard.c: the doom-loop guard around a generation (see loop_guard.h). */
#include "sample/loop_guard.h"
#include "model/session_ckpt.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int pos; int32_t id; } tried;

struct bs_loop_guard {
    bs_loop_guard_params p;
    bs_session *sess;
    bs_sampler *smp;
    const bs_tokenizer *tok;
    int n_vocab;
    bs_loop_detector *det;
    int base_past;                /* session positions before the first generated token */
    size_t base_hist;             /* sampler history length then */
    int32_t *ids;                 /* generated tokens */
    int n_ids, cap_ids;
    bs_session_ckpt *start;       /* state at base_past (with the prompt's logits) */
    bs_session_ckpt **ring;       /* periodic checkpoints, ckpt_count slots (allocated on use) */
    int ring_next;
    int last_eval;                /* generated positions evaluated at the last bs_loop_guard_evaluated */
    tried *tried;                 /* tokens rejected so far, by generated position */
    int n_tried, cap_tried;
    bs_loop_guard_result res;
};

bs_loop_guard_params bs_loop_guard_default_params(void) {
    return (bs_loop_guard_params){.mode = BS_LOOP_GUARD_OFF, .det = bs_loop_default_params(),
                                  .max_rewinds = 8, .ckpt_every = 64, .ckpt_count = 8};
}

int bs_loop_guard_mode_parse(const char *s) {
    if (!strcmp(s, "off")) return BS_LOOP_GUARD_OFF;
    if (!strcmp(s, "stop")) return BS_LOOP_GUARD_STOP;
    if (!strcmp(s, "rewind")) return BS_LOOP_GUARD_REWIND;
    return -1;
}

const char *bs_loop_guard_mode_name(int mode) {
    static const char *names[] = {"off", "stop", "rewind"};
    return mode >= 0 && mode <= BS_LOOP_GUARD_REWIND ? names[mode] : "?";
}

bs_loop_guard *bs_loop_guard_new(const bs_loop_guard_params *p, bs_session *s, bs_sampler *smp,
                                  const bs_tokenizer *tok) {
    if (p->mode < BS_LOOP_GUARD_OFF || p->mode > BS_LOOP_GUARD_REWIND)
        return bs_error("loop guard: bad mode %d", p->mode), NULL;
    if (p->max_rewinds < 0 || p->ckpt_every < 1 || p->ckpt_count < 0 || p->ckpt_count > 4096)
        return bs_error("loop guard: bad rewind/checkpoint settings"), NULL;
    bs_loop_detector *det = bs_loop_detector_new(&p->det);
    if (!det) return NULL;
    bs_loop_guard *g = bs_xcalloc(1, sizeof *g);
    g->p = *p;
    g->sess = s;
    g->smp = smp;
    g->tok = tok;
    g->n_vocab = bs_sampler_n_vocab(smp);
    g->det = det;
    if (p->mode == BS_LOOP_GUARD_REWIND) {
        g->start = bs_session_ckpt_new(s);
        g->ring = bs_xcalloc((size_t)p->ckpt_count + 1, sizeof *g->ring);
    }
    g->res.mode = p->mode;
    return g;
}

void bs_loop_guard_free(bs_loop_guard *g) {
    if (!g) return;
    bs_loop_detector_free(g->det);
    bs_session_ckpt_free(g->start);
    if (g->ring)
        for (int i = 0; i < g->p.ckpt_count; i++) bs_session_ckpt_free(g->ring[i]);
    free(g->ring);
    free(g->ids);
    free(g->tried);
    free(g);
}

void bs_loop_guard_begin(bs_loop_guard *g, const float *logits) {
    bs_loop_detector_reset(g->det);
    g->n_ids = 0;
    g->n_tried = 0;
    g->ring_next = 0;
    g->last_eval = 0;
    int mode = g->res.mode;
    memset(&g->res, 0, sizeof g->res);
    g->res.mode = mode;
    g->base_past = bs_session_n_past(g->sess);
    g->base_hist = bs_sampler_history_len(g->smp);
    if (g->start) bs_session_ckpt_save(g->start, g->sess, logits);
    /* stale checkpoints from an earlier generation would be past a rewritten prefix */
    for (int i = 0; i < g->p.ckpt_count && g->ring; i++) {
        bs_session_ckpt_free(g->ring[i]);
        g->ring[i] = NULL;
    }
}

int bs_loop_guard_set_prefix(bs_loop_guard *g, const char *text, size_t len) {
    return bs_loop_detector_set_prefix(g->det, text, len);
}

bool bs_loop_guard_reads_logits(const bs_loop_guard *g) { return g->ring && g->p.ckpt_count > 0; }

void bs_loop_guard_evaluated(bs_loop_guard *g, const float *logits) {
    if (!g->ring || g->p.ckpt_count == 0) return;
    /* one checkpoint whenever a multiple of ckpt_every is reached or passed (speculative rounds
     * evaluate several tokens at once) */
    const int n = bs_session_n_past(g->sess) - g->base_past, last = g->last_eval;
    g->last_eval = n;
    if (n <= 0 || n / g->p.ckpt_every <= last / g->p.ckpt_every) return;
    if (!g->ring[g->ring_next]) g->ring[g->ring_next] = bs_session_ckpt_new(g->sess);
    bs_session_ckpt_save(g->ring[g->ring_next], g->sess, logits);
    g->ring_next = (g->ring_next + 1) % g->p.ckpt_count;
}

/* The latest checkpoint at or before position pos. */
static const bs_session_ckpt *best_ckpt(const bs_loop_guard *g, int pos) {
    const bs_session_ckpt *best = g->start;
    for (int i = 0; i < g->p.ckpt_count; i++) {
        int cp = g->ring[i] ? bs_session_ckpt_pos(g->ring[i]) : -1;
        if (cp >= 0 && cp <= pos && cp > bs_session_ckpt_pos(best)) best = g->ring[i];
    }
    return best;
}

/* Put session, sampler and detector back at generated position j (logits into `logits`). */
static int rewind_to(bs_loop_guard *g, int j, float *logits) {
    const int target = g->base_past + j;
    const bs_session_ckpt *c = best_ckpt(g, target);
    if (bs_session_ckpt_restore(c, g->sess)) return -1;
    int from = bs_session_ckpt_pos(c) - g->base_past;
    if (from == j) {
        memcpy(logits, bs_session_ckpt_logits(c), (size_t)g->n_vocab * sizeof *logits);
    } else {
        /* replay one token at a time, as the straight run evaluated them */
        for (int k = from; k < j; k++)
            if (bs_eval(g->sess, &g->ids[k], 1, k + 1 == j ? BS_LOGITS_LAST : BS_LOGITS_NONE, logits, NULL))
                return bs_error_prefix("loop guard replay: ");
    }
    /* checkpoints past the target belong to the discarded continuation */
    for (int i = 0; i < g->p.ckpt_count; i++)
        if (g->ring[i] && bs_session_ckpt_pos(g->ring[i]) > target) {
            bs_session_ckpt_free(g->ring[i]);
            g->ring[i] = NULL;
        }
    bs_sampler_truncate(g->smp, g->base_hist + (size_t)j);
    bs_loop_detector_truncate(g->det, j);
    g->n_ids = j;
    g->last_eval = j;
    return 0;
}

int bs_loop_guard_push(bs_loop_guard *g, int32_t id, float *logits, int *n_keep) {
    if (g->n_ids == g->cap_ids) {
        g->cap_ids = g->cap_ids ? 2 * g->cap_ids : 256;
        g->ids = bs_xrealloc(g->ids, (size_t)g->cap_ids * sizeof *g->ids);
    }
    g->ids[g->n_ids++] = id;
    *n_keep = g->n_ids;
    if (g->p.mode == BS_LOOP_GUARD_OFF) return BS_LOOP_CONTINUE;
    const char *piece;
    size_t len;
    if (bs_token_to_piece(g->tok, id, false, &piece, &len) < 0) { piece = ""; len = 0; }
    bs_loop_info info;
    if (!bs_loop_detector_push(g->det, piece, len, &info)) return BS_LOOP_CONTINUE;
    g->res.n_detected++;
    g->res.last = info;
    g->res.last_rejected_id = info.rejected_token >= 0 ? g->ids[info.rejected_token] : -1;
    if (g->p.mode == BS_LOOP_GUARD_STOP || g->res.n_rewinds >= g->p.max_rewinds ||
        info.rejected_token < 0) {
        g->res.stopped = true;
        return BS_LOOP_STOP;
    }
    const int j = info.rejected_token;
    if (g->n_tried == g->cap_tried) {
        g->cap_tried = g->cap_tried ? 2 * g->cap_tried : 16;
        g->tried = bs_xrealloc(g->tried, (size_t)g->cap_tried * sizeof *g->tried);
    }
    g->tried[g->n_tried++] = (tried){j, g->ids[j]};
    g->res.n_discarded += g->n_ids - j;
    if (rewind_to(g, j, logits)) return -1;
    for (int k = 0; k < g->n_tried; k++)
        if (g->tried[k].pos == j) bs_sampler_ban_once(g->smp, g->tried[k].id);
    g->res.n_rewinds++;
    *n_keep = j;
    return BS_LOOP_REWOUND;
}

int bs_loop_guard_n_safe(const bs_loop_guard *g) {
    if (g->p.mode != BS_LOOP_GUARD_REWIND) return g->n_ids;
    int64_t end = bs_loop_detector_n_chars(g->det);
    int64_t limit = end - bs_loop_detector_max_reach(g->det);   /* no rewind lands before it */
    /* tokens starting before `limit` and ending by it are out of reach */
    int lo = 0, hi = g->n_ids;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (bs_loop_detector_token_char(g->det, mid) <= limit) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

const bs_loop_guard_result *bs_loop_guard_result_get(const bs_loop_guard *g) { return &g->res; }

void bs_loop_guard_result_format(const bs_loop_guard_result *r, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "loop guard: %s, %d loop%s detected, %d rewind%s, %d token%s discarded%s",
                     bs_loop_guard_mode_name(r->mode), r->n_detected, r->n_detected == 1 ? "" : "s",
                     r->n_rewinds, r->n_rewinds == 1 ? "" : "s", r->n_discarded,
                     r->n_discarded == 1 ? "" : "s", r->stopped ? ", stopped on a loop" : "");
    if (r->n_detected && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " (last: period %d chars x %d repeats, rejected token %d at %d)",
                 r->last.period, r->last.repeats, r->last_rejected_id, r->last.rejected_token);
}
