/* gen_decode.c: sampling, delivering tokens (text, stop strings, the doom-loop guard) and
 * speculative rounds of the generator (gen.h).
 *
 * Doom-loop guard (loop_guard.h): every sampled token is shown to the guard before it is
 * evaluated; on a rewind the session, sampler and detector are back at an earlier position
 * exactly, and the text is rebuilt from the kept tokens through a fresh detokenizer, as a
 * straight run over them makes it. With speculative rounds the guard sees exactly the token
 * stream of plain decoding (rounds are lossless), one token at a time and in order, so it
 * detects the same loops at the same tokens; a round's tokens after the one that completes a
 * loop are dropped, and after a rewind bs_spec_sync crops the drafter's context to the rewound
 * position. Checkpoints are taken after rounds, with the verify row that predicted the round's
 * last token (batch-invariant kernels: a straight run's logits). */
#include "generate/gen_impl.h"
#include "dspark/spec_cost_cache.h"
#include "model/device.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "formats/gguf.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the detokenizer ------------------------------------------------------------------------- */

bs_detok *gen_detok_new(const bs_gen *g) {
    bs_detok *dt = bs_detok_new(g->tok, false);
    static const char *shown[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    const size_t n = g->r.tool_tags ? 4 : 2;
    for (size_t i = 0; dt && i < n; i++) bs_detok_preserve(dt, shown[i]);
    return dt;
}

/* ---- text and stop strings ------------------------------------------------------------------- */

static void text_add(bs_gen *g, const char *s, size_t n) {
    if (g->len + n + 1 > g->cap) {
        g->cap = BS_MAX(g->cap * 2, g->len + n + 64);
        g->text = bs_xrealloc(g->text, g->cap);
    }
    memcpy(g->text + g->len, s, n);
    g->len += n;
    g->text[g->len] = 0;
}

/* llama-server's n_indent over text[from, len): the lines after the first newline must be
 * indented (spaces, tabs) by at least n_indent; the first whose first other character (an empty
 * line's newline, a CR) comes sooner ends generation there. Returns that character's position,
 * or SIZE_MAX. */
static size_t indent_cut(bs_gen *g, size_t from) {
    for (size_t i = from; i < g->len; i++) {
        const char c = g->text[i];
        if (g->line_at != SIZE_MAX && !g->line_judged && c != ' ' && c != '\t') {   /* the line's first other char */
            g->line_judged = true;   /* (an empty line's is its newline: it ends the answer, as in llama-server) */
            if (g->r.n_indent > 0 && i - g->line_at < (size_t)g->r.n_indent) return i;
        }
        if (c == '\n') {
            g->line_at = i + 1;
            g->line_judged = false;
        }
    }
    return SIZE_MAX;
}

/* Cut the text at p: generation ends there (nothing past it was streamed: it came just now). */
static void cut_at(bs_gen *g, size_t p) {
    g->len = p;
    g->text[p] = 0;
    g->n_safe = p;
}

/* Append a token's text. BS_GEN_STOP_STRING when a stop string completed (the text is cut before
 * it), BS_GEN_LENGTH when a line fell short of n_indent (cut at its first character), else 0. */
static int add_text(bs_gen *g, const char *s, size_t n) {
    const size_t at = g->len;
    text_add(g, s, n);
    const size_t p = bs_stops_feed(&g->stops, s, n, at);
    const size_t q = indent_cut(g, at);
    if (p != SIZE_MAX && p <= q) {
        cut_at(g, p);
        return BS_GEN_STOP_STRING;
    }
    if (q != SIZE_MAX) {
        cut_at(g, q);
        return BS_GEN_LENGTH;
    }
    g->n_safe = g->len - bs_stops_partial(&g->stops);
    return 0;
}

/* What may be streamed: only tokens no rewind can reach any more. Never less than before: a
 * stream does not take text back. (The guard's limit holds while the text grows; a second loop
 * found soon after a rewind could in principle reach further back, into text already streamed:
 * the answer is right, the stream then showed discarded text.) */
static void guard_limit(bs_gen *g) {
    if (!g->guard) { g->n_out_safe = g->n_out; return; }
    int ns = BS_MIN(bs_loop_guard_n_safe(g->guard), g->n_out);
    ns = BS_MAX(ns, BS_MIN(g->n_out_safe, g->n_out));
    g->n_out_safe = ns;
    const size_t bytes = ns > 0 ? g->out[ns - 1].text_end : 0;
    if (g->n_safe > bytes) g->n_safe = bytes;
}

/* The guard rolled the session back to the first `keep` generated tokens: drop what came after
 * and rebuild the text from the kept tokens. */
static int rewound(bs_gen *g, int keep) {
    bs_detok *dt = gen_detok_new(g);
    if (!dt) return -1;
    bs_detok_free(g->dt);
    g->dt = dt;
    g->n_toks = bs_session_n_past(g->sess);
    const size_t sent_max = g->n_safe;   /* may already be streamed: never taken back */
    g->len = 0;
    for (int i = 0; i < keep; i++) {
        const char *text;
        size_t len;
        if (bs_detok_push(dt, g->out[i].id, &text, &len) < 0) return -1;
        text_add(g, text, len);
        g->out[i].text_end = g->len;
    }
    if (g->text) g->text[g->len] = 0;
    g->n_out = keep;
    g->st.n_gen = keep;
    bs_stops_reset(&g->stops);   /* the kept text held no stop string: only the states change */
    bs_stops_feed(&g->stops, g->text ? g->text : "", g->len, 0);
    g->line_at = SIZE_MAX;       /* nor a line short of n_indent */
    g->line_judged = false;
    indent_cut(g, 0);
    g->n_safe = g->len - bs_stops_partial(&g->stops);
    guard_limit(g);
    if (g->n_safe < sent_max && sent_max <= g->len) g->n_safe = sent_max;
    g->dirty_text = 0;
    g->dirty_tok = BS_MIN(g->dirty_tok, keep);
    if (g->spec) bs_spec_sync(g->spec);   /* the drafter's context back to the rewound position */
    return 0;
}

/* Store a generated token (not EOG) and its text. False when that ended generation. */
static bool record(bs_gen *g, bs_gen_token *tk) {
    const char *text;
    size_t len;
    if (bs_detok_push(g->dt, tk->id, &text, &len) < 0) {
        gen_finish(g, BS_GEN_ERROR);
        return false;
    }
    const size_t before = g->len;
    const int stopped = add_text(g, text, len);
    g->dirty_text = BS_MIN(g->dirty_text, BS_MIN(before, g->len));
    tk->text_end = g->len;
    const double now = bs_time();
    if (g->n_out == 0) g->t_first_out = now;
    g->nl_last = memchr(text, '\n', len) != NULL;   /* t_max_predict_ms looks at the clock then */
    g->st.t_gen = now - g->t0;   /* so far (the end sets it again) */
    if (g->n_out == g->cap_out) {
        g->cap_out = g->cap_out ? 2 * g->cap_out : 64;
        g->out = bs_xrealloc(g->out, (size_t)g->cap_out * sizeof *g->out);
    }
    g->out[g->n_out++] = *tk;
    g->st.n_gen = g->n_out;
    guard_limit(g);
    if (stopped) {
        g->stop_hit = true;
        gen_finish(g, stopped);
        return false;
    }
    return true;
}

static bool is_eog(const bs_gen *g, int32_t id) { return !g->r.ignore_eos && bs_token_is_eog(g->tok, id); }

/* Show token id to the guard: BS_LOOP_CONTINUE / STOP / REWOUND (the text is rebuilt; with
 * stop_at_rewind the request ends there instead), or -1 (the request ended with an error). */
static int guard_push(bs_gen *g, bs_gen_token *tk) {
    if (!g->guard) return BS_LOOP_CONTINUE;
    int keep, act = bs_loop_guard_push(g->guard, tk->id, g->logits, &keep);
    if (act == BS_LOOP_REWOUND && g->r.stop_at_rewind) {
        record(g, tk);   /* the output keeps the loop that was found */
        g->st.rewound_to = keep;
        g->n_toks = bs_session_n_past(g->sess);
        if (g->state != GS_DONE) gen_finish(g, BS_GEN_LOOP);
        return -1;
    }
    if (act == BS_LOOP_REWOUND && rewound(g, keep)) act = -1;
    if (act < 0) gen_finish(g, BS_GEN_ERROR);
    return act;
}

/* Context shift: the first n_keep tokens and the newer half of the rest stay, and the session is
 * rebuilt from them. The recurrent (DeltaNet) state cannot forget positions, so every kept
 * position is evaluated again; the pending token stays pending. False when nothing can go. */
static bool shift(bs_gen *g) {
    const int n = g->n_toks, keep = BS_MIN(BS_MAX(g->r.n_keep, 0), n / 2), discard = (n - keep) / 2;
    if (discard < 1) return false;
    for (int i = 0; i < n; i++)
        if (g->toks[i] < 0) return false;   /* image rows: re-evaluating them is not done here */
    memmove(g->toks + keep, g->toks + keep + discard, (size_t)(n - keep - discard) * sizeof *g->toks);
    g->n_toks = n - discard;
    bs_session_reset(g->sess);
    gen_own_session(g);   /* (a failed evaluation below leaves fewer rows: reuse_len sees it) */
    const int e = g->spec ? bs_spec_prompt(g->spec, g->toks, g->n_toks, NULL)
                              : bs_eval(g->sess, g->toks, g->n_toks, BS_LOGITS_NONE, NULL, NULL);
    if (e) {
        bs_error_prefix("context shift: ");
        gen_finish(g, BS_GEN_ERROR);
        return false;
    }
    g->gen_base -= discard;   /* still: session positions = gen_base + generated tokens evaluated */
    g->st.n_shifts++;
    g->st.n_shifted += discard;
    bs_log(2, "context shift: kept %d + %d of %d positions\n", keep, n - keep - discard, n);
    return true;
}

/* Checks after a token was delivered; false when they ended generation. */
static bool may_continue(bs_gen *g) {
    if (g->r.interrupt && *g->r.interrupt) gen_finish(g, BS_GEN_INTERRUPT);
    else if (g->r.n_predict >= 0 && g->n_out >= g->r.n_predict) gen_finish(g, BS_GEN_LENGTH);
    else if (g->r.t_max_predict_ms > 0 && g->nl_last && g->t_first_out > 0 &&
             (bs_time() - g->t_first_out) * 1000.0 > g->r.t_max_predict_ms)
        gen_finish(g, BS_GEN_LENGTH);   /* llama-server's t_max_predict_ms: past it, at a newline (whole lines) */
    else if (bs_session_n_past(g->sess) < bs_session_n_ctx(g->sess)) return true;
    else if (!g->r.context_shift) gen_finish(g, BS_GEN_CTX);
    else if (shift(g)) return true;
    else if (g->state != GS_DONE) gen_finish(g, BS_GEN_CTX);
    return false;
}

/* ---- auto depth ------------------------------------------------------------------------------ */

static void log_depth(const bs_gen *g, const char *when) {
    if (bs_log_level < 2) return;
    char buf[512];
    bs_depth_describe(bs_spec_get_depth(g->spec), buf, sizeof buf);
    bs_log(2, "speculative (%s): %s\n", when, buf);
}

static int n_threads(const bs_gen *g) { return bs_pool_size(g->sess->pool); }
/* the cost cache's device: a target on Vulkan has its own entry */
static const char *device(const bs_gen *g) { return g->m->vk ? bs_model_device(g->m) : "cpu"; }

/* Auto depth's cost measurement (or the cached one) once the first token is known: once per
 * generator, since a server slot's later requests go on from the depth it has (its acceptance). */
static int prepare(bs_gen *g, int32_t token) {
    g->prepared = true;
    if (g->p.draft_max != BS_DRAFT_AUTO || g->costs_known) return 0;
    const char *tp = g->m->file->path, *dp = g->p.drafter_path ? g->p.drafter_path : "";
    g->costs_known = true;
    if (bs_cost_cache_load(bs_spec_depth_mut(g->spec), tp, dp, n_threads(g), device(g))) {
        log_depth(g, "costs from the cache");
        return 0;
    }
    if (bs_spec_calibrate_upto(g->spec, token, 1)) return -1;   /* deeper ones when first wanted */
    bs_cost_cache_store(bs_spec_get_depth(g->spec), tp, dp, n_threads(g), device(g));
    g->t_costs_saved = bs_time();
    log_depth(g, "measured");
    return 0;
}

/* The cache file is rewritten (and synced) at most this often by one generator: a server's
 * requests end many times a second, on the thread that steps every slot. */
#define COSTS_SAVE_EVERY_S 60.0

/* Write the acceptance this pair has reached for the next run: now if `force` (the generator
 * goes away), else when the last write is old enough. */
static void costs_save(bs_gen *g, bool force) {
    if (!g->costs_dirty || (!force && bs_time() - g->t_costs_saved < COSTS_SAVE_EVERY_S)) return;
    bs_cost_cache_store(bs_spec_get_depth(g->spec), g->m->file->path, g->p.drafter_path ? g->p.drafter_path : "",
                        n_threads(g), device(g));
    g->costs_dirty = false;
    g->t_costs_saved = bs_time();
}

void gen_costs_flush(bs_gen *g) {
    if (g->spec) costs_save(g, true);
}

static void note_parking(bs_gen *g) {
    if (bs_spec_get_depth(g->spec)->parked == g->parked) return;
    g->parked = !g->parked;
    log_depth(g, g->parked ? "parked" : "drafting again");
}

/* ---- decoding -------------------------------------------------------------------------------- */

/* The chain's final distribution for tk (post_probs): the n most probable candidates (ties: the
 * lower id), those with p = 0 left out, as log p; and log p of the token drawn. */
static void chain_probs(const bs_sampler *smp, int n, bs_gen_token *tk) {
    int nc = 0, k = 0;
    const bs_token_prob *c = bs_sampler_candidates(smp, &nc);
    float p[BS_GEN_MAX_TOP];
    n = n < BS_GEN_MAX_TOP ? n : BS_GEN_MAX_TOP;
    for (int i = 0; i < nc && n > 0; i++) {
        if (!(c[i].p > 0.0f) || (k == n && !(c[i].p > p[n - 1]))) continue;
        int j = k < n ? k++ : n - 1;
        for (; j > 0 && c[i].p > p[j - 1]; j--) p[j] = p[j - 1], tk->top_id[j] = tk->top_id[j - 1];
        p[j] = c[i].p;
        tk->top_id[j] = c[i].id;
    }
    for (int j = 0; j < k; j++) tk->top_lp[j] = logf(p[j]);
    tk->n_top = k;
    tk->logprob = logf(bs_sampler_prob(smp, tk->id));
}

void gen_after_logits(bs_gen *g) {
    for (;;) {
        if (g->r.interrupt && *g->r.interrupt) { gen_finish(g, BS_GEN_INTERRUPT); return; }
        if (g->r.n_predict >= 0 && g->n_out >= g->r.n_predict) { gen_finish(g, BS_GEN_LENGTH); return; }
        const int32_t id = g->have_next ? g->next_id
                         : g->have_top ? bs_sampler_sample_top(g->smp, g->top_ids, g->top_vals, g->n_top)
                                       : bs_sampler_sample(g->smp, g->logits);
        g->have_next = g->have_top = false;
        if (id < 0) { gen_finish(g, BS_GEN_ERROR); return; }
        if (is_eog(g, id)) { gen_finish(g, BS_GEN_EOG); return; }
        bs_sampler_accept(g->smp, id);
        bs_gen_token tk = {.id = id};
        if (g->r.n_probs >= 0 && g->r.post_probs)
            chain_probs(g->smp, g->r.n_probs, &tk);
        else if (g->r.n_probs >= 0)
            tk.n_top = bs_top_logprobs(g->logits, g->n_vocab, g->r.n_probs, tk.top_id, tk.top_lp, id, &tk.logprob);
        const int act = guard_push(g, &tk);
        if (act < 0) return;
        if (act == BS_LOOP_REWOUND) continue;   /* sample again at the earlier position */
        if (!record(g, &tk)) return;
        if (act == BS_LOOP_STOP) { gen_finish(g, BS_GEN_LOOP); return; }
        if (g->use_spec && !g->prepared && prepare(g, id)) { gen_finish(g, BS_GEN_ERROR); return; }
        if (!may_continue(g)) return;
        g->pending = id;
        g->state = g->use_spec ? GS_SPEC : GS_DECODE;
        return;
    }
}

static bool spec_is_stop(void *ud, int32_t id) { return is_eog(ud, id); }

/* A round ended generation part way: keep the session contract (every generated token but the
 * last; all of them after an EOG) by rolling the verify pass back. */
static void spec_trim(bs_gen *g) {
    if (g->st.stop == BS_GEN_ERROR) return;
    const int keep = g->gen_base + g->n_out - (g->st.stop == BS_GEN_EOG ? 0 : 1);
    if (bs_session_n_past(g->sess) > keep) {
        if (bs_session_rollback(g->sess, keep)) {
            g->st.stop = BS_GEN_ERROR;
            return;
        }
    }
    g->n_toks = bs_session_n_past(g->sess);
    bs_spec_sync(g->spec);
}

/* A round produced out[0..m): deliver them in order (the guard sees each), keep the session
 * contract if one ended generation, or set the next anchor. */
static void spec_after(bs_gen *g, int m, const int32_t *out) {
    g->st.n_decode++;
    /* the session now holds the old anchor and out[0..m-1) */
    g->toks[g->n_toks++] = g->pending;
    for (int j = 0; j + 1 < m; j++) g->toks[g->n_toks++] = out[j];
    int act = BS_LOOP_CONTINUE;
    for (int k = 0; k < m && act == BS_LOOP_CONTINUE; k++) {
        if (is_eog(g, out[k])) { gen_finish(g, BS_GEN_EOG); break; }
        bs_gen_token tk = {.id = out[k]};
        if (g->r.n_probs >= 0)   /* verify row k is the target's distribution for out[k] */
            tk.n_top = bs_top_logprobs(bs_spec_logits(g->spec, k), g->n_vocab, g->r.n_probs, tk.top_id, tk.top_lp,
                                       out[k], &tk.logprob);
        if ((act = guard_push(g, &tk)) < 0 || act == BS_LOOP_REWOUND) break;
        if (!record(g, &tk)) break;
        if (act == BS_LOOP_STOP) gen_finish(g, BS_GEN_LOOP);
    }
    if (g->state == GS_DONE) {
        spec_trim(g);
        return;
    }
    if (act == BS_LOOP_REWOUND) {   /* one plain draw from the rewound logits, then rounds again */
        gen_after_logits(g);
        return;
    }
    g->pending = out[m - 1];
    if (g->guard) bs_loop_guard_evaluated(g->guard, bs_spec_logits(g->spec, m - 1));
    note_parking(g);
    may_continue(g);
}

static int round_room(const bs_gen *g) {
    const int left = g->r.n_predict < 0 ? BS_DSPARK_MAX_BLOCK + 1 : g->r.n_predict - g->n_out;
    return BS_MAX(left, 1);
}

/* the round's verify rows are read after it for log-probabilities and the loop guard's rewinds */
static void spec_rows(bs_gen *g) {
    bs_spec_want_rows(g->spec, g->r.n_probs >= 0 || (g->guard && bs_loop_guard_reads_logits(g->guard)));
}

void gen_spec_round(bs_gen *g) {
    int32_t out[BS_DSPARK_MAX_BLOCK + 1];
    spec_rows(g);
    const int m = bs_spec_round(g->spec, g->smp, g->pending, round_room(g), spec_is_stop, g, out);
    if (m < 0) {
        bs_error_prefix("decoding: ");
        gen_finish(g, BS_GEN_ERROR);
        return;
    }
    spec_after(g, m, out);
}

int bs_gen_draft_together(bs_gen *const *gs, int n) {
    bs_spec *sps[BS_DSPARK_MAX_MULTI];
    int m = 0;
    for (int i = 0; i < n && m < BS_DSPARK_MAX_MULTI; i++) {
        bs_gen *g = gs[i];
        if (!g->use_spec || g->state != GS_SPEC) continue;
        const int r = bs_spec_round_prepare(g->spec, g->smp, g->pending, round_room(g));
        if (r > 0) sps[m++] = g->spec;
        /* r < 0: bs_gen_plan prepares it again and reports the error there */
    }
    /* on failure every round runs its own block in bs_gen_plan (which reports what fails) */
    const int r = m > 1 ? bs_spec_blocks(sps, m) : 0;
    if (r < 0) bs_log(1, "drafting together: %s\n", bs_last_error());
    return BS_MAX(r, 0);
}

bool gen_spec_plan(bs_gen *g, bs_batch_seq *q) {
    spec_rows(g);
    if (bs_spec_round_begin(g->spec, g->smp, g->pending, round_room(g), q)) {
        bs_error_prefix("decoding: ");
        gen_finish(g, BS_GEN_ERROR);
        return false;
    }
    return true;
}

void gen_spec_commit(bs_gen *g, bool ok) {
    int32_t out[BS_DSPARK_MAX_BLOCK + 1];
    const int m = bs_spec_round_end(g->spec, g->smp, ok, false, spec_is_stop, g, out);
    if (m < 0) {
        bs_error_prefix("decoding: ");
        gen_finish(g, BS_GEN_ERROR);
        return;
    }
    spec_after(g, m, out);
}

/* ---- the end --------------------------------------------------------------------------------- */

void gen_finish(bs_gen *g, int stop) {
    if (g->state == GS_DONE) return;
    const bool generating = g->n_prompt > 0 && g->n_done == g->n_prompt;
    const char *text;
    size_t len = 0;
    if (g->dt) bs_detok_flush(g->dt, &text, &len);
    if (len && stop != BS_GEN_ERROR && !g->stop_hit) {
        const size_t before = g->len;
        add_text(g, text, len);
        g->dirty_text = BS_MIN(g->dirty_text, BS_MIN(before, g->len));
    }
    g->n_safe = g->len;
    g->n_out_safe = g->n_out;
    if (g->guard) g->st.loop = *bs_loop_guard_result_get(g->guard);
    if (generating) g->st.t_gen = bs_time() - g->t0;
    if (g->spec) {
        const bs_spec_stats *s = bs_spec_get_stats(g->spec);
        g->st.n_drafted = s->n_drafted - g->spec0.n_drafted;
        g->st.n_accepted = s->n_accepted - g->spec0.n_accepted;
        g->st.n_draft_rounds = s->n_draft_rounds - g->spec0.n_draft_rounds;
    }
    g->st.stop = stop;
    g->state = GS_DONE;
    if (g->use_spec && g->prepared) {
        log_depth(g, "end");
        if (g->p.draft_max == BS_DRAFT_AUTO) {   /* the acceptance this pair ended with, for the next run */
            g->costs_dirty = true;
            costs_save(g, false);
        }
    }
}
