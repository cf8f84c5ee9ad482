/* server_sched.c: the slots and the scheduler thread of `bitspark serve` (server.h).
 *
 * One thread owns every session. Each turn it takes queued tasks into idle slots, then runs the
 * decode step of every generating slot and a chunk of each waiting prompt as a single
 * bs_eval_multi call (one pass through the weights for all of them: continuous batching) and
 * samples each slot's next token. Evaluation is batch-invariant, so a request's greedy output
 * does not depend on what else runs.
 *
 * Prompt cache: a slot keeps what its session holds (the tokens evaluated so far) and two saved
 * states: one at the start of the prompt's last message and one at the end of the prompt. A
 * new prompt continues from the longest of those that is a prefix of it. The recurrent
 * (DeltaNet) state cannot be cut at an arbitrary position, so these checkpoints are what makes
 * multi-turn reuse work: the next turn's prompt shares the history up to the last message, but
 * renders the previous reply differently (its reasoning is dropped).
 *
 * Doom-loop guard (loop_guard.h): a slot whose task asks for it drives a bs_loop_guard the way
 * `run` does (cli_gen_guard.c): every sampled token is shown to it before being evaluated; on a
 * rewind the session, sampler and detector are rolled back exactly and the task's text is rebuilt
 * from the kept tokens. Text (and logprobs) are streamed only once no rewind can reach them.
 * Slots that draft run the guard in `stop` mode; a `rewind` request decodes without drafting
 * (a round evaluates several tokens at once, which the guard cannot roll back into). */
#include "server.h"
#include "batch_eval.h"
#include "speculative.h"
#include "threadpool.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT_BUDGET 256   /* prompt rows per pass, shared by the slots whose prompts wait */
#define MAX_SLOTS 256

enum { SLOT_IDLE, SLOT_PROMPT, SLOT_GEN };

typedef struct ckpt {
    int32_t *toks;
    int n;
    void *state;
    size_t len;
} ckpt;

typedef struct slot {
    int id, state;
    bs_session *sess;
    srv_task *task;
    bs_sampler *smp;
    bs_detok *dt;
    float *logits;
    int32_t *toks;             /* what the session holds: toks[0..n_toks) == positions */
    int n_toks;
    int n_done;                /* prompt tokens in the session */
    int32_t pending;           /* sampled, not yet evaluated */
    double t0;
    ckpt ck[2];                /* start of the last message, end of the prompt */
    bool stop_hit;             /* a stop string ended the text: drop what the detokenizer holds */
    bs_loop_guard *guard;      /* the task's doom-loop guard; NULL when off */
    bs_spec *spec;             /* with a drafter: this slot's speculative decoder */
    bool use_spec;             /* the running task drafts */
    const bs_tokenizer *tok;
    long last_used;
} slot;

struct srv_sched {
    bs_model *m;
    const bs_tokenizer *tok;
    srv_config cfg;
    srv_metrics *met;
    int n_vocab, n_ctx;
    slot *slots;
    bs_pool *pool;
    bs_batch *batch;
    bs_dspark *drafter;
    pthread_t thr;
    bool thr_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    srv_task **queue;
    int q_head, q_len, q_cap;   /* q_cap: q_limit + a place per slot */
    int q_limit;                /* requests that may wait for a busy server */
    srv_slot_info *info;       /* guarded by mu, for /slots */
    long tick;
};

/* ---- tasks ---------------------------------------------------------------------------------- */

srv_task *srv_task_new(void) {
    srv_task *t = bs_xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->refs = 1;
    t->n_predict = -1;
    t->n_probs = -1;
    t->slot = -1;
    t->sp = bs_sampler_default_params();
    t->loop = bs_loop_guard_default_params();
    return t;
}

void srv_task_ref(srv_task *t) {
    pthread_mutex_lock(&t->mu);
    t->refs++;
    pthread_mutex_unlock(&t->mu);
}

void srv_task_unref(srv_task *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    int left = --t->refs;
    pthread_mutex_unlock(&t->mu);
    if (left) return;
    free(t->prompt);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->text);
    free(t->toks);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* ---- slots ---------------------------------------------------------------------------------- */

static int prefix_len(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = 0, lim = BS_MIN(na, nb);
    while (n < lim && a[n] == b[n]) n++;
    return n;
}

/* How many prompt tokens slot sl can reuse, and from where: -1 the live session, 0/1 a
 * checkpoint. At least one prompt token must remain to be evaluated (its logits). */
static int reuse_len(const slot *sl, const srv_task *t, int *from) {
    int best = 0;
    *from = -2;
    if (t->no_cache) return 0;
    if (sl->n_toks > 0 && sl->n_toks < t->n_prompt &&
        prefix_len(sl->toks, sl->n_toks, t->prompt, t->n_prompt) == sl->n_toks) {
        best = sl->n_toks;
        *from = -1;
    }
    for (int k = 0; k < 2; k++) {
        const ckpt *c = &sl->ck[k];
        if (c->state && c->n > best && c->n < t->n_prompt &&
            prefix_len(c->toks, c->n, t->prompt, t->n_prompt) == c->n) {
            best = c->n;
            *from = k;
        }
    }
    return best;
}

static void ckpt_save(slot *sl, int k) {
    ckpt *c = &sl->ck[k];
    size_t need = bs_session_state_size(sl->sess);
    if (need > c->len) {
        free(c->state);
        c->state = malloc(need);
        c->len = c->state ? need : 0;
    }
    free(c->toks);
    c->toks = NULL;
    c->n = 0;
    if (!c->state || bs_session_state_save(sl->sess, c->state, need)) return;
    c->len = need;
    c->toks = bs_xmalloc((size_t)(sl->n_toks ? sl->n_toks : 1) * sizeof(int32_t));
    memcpy(c->toks, sl->toks, (size_t)sl->n_toks * sizeof(int32_t));
    c->n = sl->n_toks;
}

static int ckpt_load(slot *sl, int k) {
    ckpt *c = &sl->ck[k];
    if (bs_session_state_load(sl->sess, c->state, c->len)) return -1;
    memcpy(sl->toks, c->toks, (size_t)c->n * sizeof(int32_t));
    sl->n_toks = c->n;
    return 0;
}

/* ---- the task's text ------------------------------------------------------------------------ */

/* Length of the longest suffix of text that is a proper prefix of a stop string. */
static size_t stop_partial(const srv_task *t) {
    size_t best = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        for (size_t k = BS_MIN(sl - 1, t->len); k > best; k--)
            if (!memcmp(t->text + t->len - k, t->stop[i], k)) { best = k; break; }
    }
    return best;
}

/* Earliest complete stop string starting at or after `from`; SIZE_MAX if none. */
static size_t stop_find(const srv_task *t, size_t from) {
    size_t best = SIZE_MAX;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        for (size_t p = from; p + sl <= t->len && p < best; p++)
            if (!memcmp(t->text + p, t->stop[i], sl)) { best = p; break; }
    }
    return best;
}

static void text_add(srv_task *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        t->cap = BS_MAX(t->cap * 2, t->len + n + 64);
        t->text = bs_xrealloc(t->text, t->cap);
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = 0;
}

/* Append a token's text (under t->mu). Returns true when a stop string completed. */
static bool task_add_text(srv_task *t, const char *s, size_t n) {
    size_t maxstop = 0;
    for (int i = 0; i < t->n_stop; i++) maxstop = BS_MAX(maxstop, strlen(t->stop[i]));
    size_t from = t->len > maxstop ? t->len - maxstop : 0;
    text_add(t, s, n);
    size_t p = t->n_stop ? stop_find(t, from) : SIZE_MAX;
    if (p != SIZE_MAX) {
        t->len = p;
        t->text[p] = 0;
        t->n_safe = p;
        return true;
    }
    t->n_safe = t->len - stop_partial(t);
    return false;
}

/* ---- finishing ------------------------------------------------------------------------------ */

static void publish_info(srv_sched *s, const slot *sl) {
    pthread_mutex_lock(&s->mu);
    s->info[sl->id].busy = sl->task != NULL;
    s->info[sl->id].n_cached = sl->n_toks;
    pthread_mutex_unlock(&s->mu);
}

static void finish(srv_sched *s, slot *sl, int why, const char *err) {
    srv_task *t = sl->task;
    const char *text;
    size_t len = 0;
    if (sl->dt) bs_detok_flush(sl->dt, &text, &len);
    bs_loop_guard_result lg = {.mode = BS_LOOP_GUARD_OFF};
    if (sl->guard) lg = *bs_loop_guard_result_get(sl->guard);
    pthread_mutex_lock(&t->mu);
    if (sl->state == SLOT_GEN) t->tm.t_gen_ms = (bs_time() - sl->t0) * 1e3;
    srv_timings tm = t->tm;
    pthread_mutex_unlock(&t->mu);
    if (why != SRV_FINISH_ERROR) {   /* counted before the answer is released: a client that
                                      * reads /metrics after its answer sees it */
        srv_metrics_task(s->met, &tm);
        srv_metrics_loop_guard(s->met, &lg);
    }
    pthread_mutex_lock(&t->mu);
    if (len && why != SRV_FINISH_ERROR && !sl->stop_hit) task_add_text(t, text, len);
    t->n_safe = t->len;
    t->n_toks_safe = t->n_toks;
    t->loop_res = lg;
    t->finish = why;
    if (err) snprintf(t->error, sizeof t->error, "%s", err);
    t->done = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    srv_task_unref(t);
    bs_loop_guard_free(sl->guard);
    sl->guard = NULL;
    bs_sampler_free(sl->smp);
    bs_detok_free(sl->dt);
    sl->smp = NULL;
    sl->dt = NULL;
    sl->task = NULL;
    sl->state = SLOT_IDLE;
    sl->last_used = ++s->tick;
    publish_info(s, sl);
}

/* ---- sampling ------------------------------------------------------------------------------- */

static bs_detok *new_detok(const bs_tokenizer *tok) {
    bs_detok *dt = bs_detok_new(tok, false);
    static const char *shown[] = {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    for (size_t i = 0; dt && i < BS_ARRAY_LEN(shown); i++) bs_detok_preserve(dt, shown[i]);
    return dt;
}

static int setup_sampler(srv_sched *s, slot *sl, const srv_task *t) {
    if (!(sl->smp = bs_sampler_new(&t->sp, s->n_vocab))) return -1;
    for (int k = 0; k < t->n_bias; k++)
        if (bs_sampler_set_logit_bias(sl->smp, t->bias_id[k], t->bias[k])) return -1;
    for (int32_t id = bs_tokenizer_n_vocab(s->tok); id < s->n_vocab; id++)
        bs_sampler_set_logit_bias(sl->smp, id, -INFINITY);   /* ids the tokenizer cannot print */
    if (t->sp.dry_multiplier != 0.0f) {
        static const char *breakers[] = {"\n", ":", "\"", "*"};
        bs_sampler_vocab v = {(void *)s->tok, bs_tokenizer_piece_cb, bs_tokenizer_tokenize_cb};
        if (bs_sampler_set_dry_breakers(sl->smp, breakers, 4, &v)) return -1;
    }
    if (!(sl->dt = new_detok(s->tok))) return -1;
    bs_sampler_accept_many(sl->smp, t->prompt, (size_t)t->n_prompt);
    if (t->loop.mode != BS_LOOP_GUARD_OFF && !(sl->guard = bs_loop_guard_new(&t->loop, sl->sess, sl->smp, s->tok)))
        return -1;
    return 0;
}

/* What of the task may be streamed: only tokens no rewind can reach any more (under t->mu, after
 * the stop-string limit is set). Never less than before: a stream does not take text back. (The
 * guard's limit holds while the text grows; a second loop found soon after a rewind could in
 * principle reach further back, into text already streamed: the answer is right, the stream
 * then showed discarded text.) */
static void guard_limit(const slot *sl, srv_task *t) {
    if (!sl->guard) { t->n_toks_safe = t->n_toks; return; }
    int ns = BS_MIN(bs_loop_guard_n_safe(sl->guard), t->n_toks);
    ns = BS_MAX(ns, BS_MIN(t->n_toks_safe, t->n_toks));
    t->n_toks_safe = ns;
    size_t bytes = ns > 0 ? t->toks[ns - 1].text_end : 0;
    if (t->n_safe > bytes) t->n_safe = bytes;
}

/* The guard rolled the session back to the first `keep` generated tokens: the slot and the task
 * drop what came after; the text is rebuilt through a fresh detokenizer, as a straight run over
 * the kept tokens makes it. */
static int guard_rewound(srv_sched *s, slot *sl, int keep) {
    srv_task *t = sl->task;
    bs_detok *dt = new_detok(s->tok);
    if (!dt) return -1;
    bs_detok_free(sl->dt);
    sl->dt = dt;
    sl->n_toks = bs_session_n_past(sl->sess);
    pthread_mutex_lock(&t->mu);
    size_t sent_max = t->n_safe;   /* may already be streamed: never taken back */
    t->len = 0;
    int rc = 0;
    for (int i = 0; i < keep && !rc; i++) {
        const char *text;
        size_t len;
        if (bs_detok_push(dt, t->toks[i].id, &text, &len) < 0) rc = -1;
        else text_add(t, text, len);
        t->toks[i].text_end = t->len;
    }
    if (t->text) t->text[t->len] = 0;
    t->n_toks = keep;
    t->tm.n_gen = keep;
    t->n_safe = t->len - stop_partial(t);
    guard_limit(sl, t);
    if (t->n_safe < sent_max && sent_max <= t->len) t->n_safe = sent_max;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

/* Show a sampled token (not end-of-generation) to the guard: BS_LOOP_CONTINUE / STOP / REWOUND
 * (the slot is back at an earlier position: sample again), -1 (the slot is finished). */
static int guard_push(srv_sched *s, slot *sl, int32_t id) {
    if (!sl->guard) return BS_LOOP_CONTINUE;
    int keep, act = bs_loop_guard_push(sl->guard, id, sl->logits, &keep);
    if (act == BS_LOOP_REWOUND && guard_rewound(s, sl, keep)) act = -1;
    if (act < 0) finish(s, sl, SRV_FINISH_ERROR, bs_last_error());
    return act;
}

/* Hand a token (already in the sampler's history unless it ends generation) to the task: EOG,
 * text, stop strings, length. false when the slot finished; otherwise the token is pending. */
static bool deliver(srv_sched *s, slot *sl, int32_t id, srv_tok *tk) {
    srv_task *t = sl->task;
    if (!t->ignore_eos && bs_token_is_eog(s->tok, id)) { finish(s, sl, SRV_FINISH_STOP, NULL); return false; }
    const char *text;
    size_t len;
    if (bs_detok_push(sl->dt, id, &text, &len) < 0) { finish(s, sl, SRV_FINISH_ERROR, bs_last_error()); return false; }
    pthread_mutex_lock(&t->mu);
    bool stopped = task_add_text(t, text, len);
    tk->text_end = t->len;
    if (t->n_toks == t->cap_toks) {
        t->cap_toks = t->cap_toks ? 2 * t->cap_toks : 64;
        t->toks = bs_xrealloc(t->toks, (size_t)t->cap_toks * sizeof *t->toks);
    }
    t->toks[t->n_toks++] = *tk;
    t->tm.n_gen++;
    guard_limit(sl, t);
    int n_gen = t->tm.n_gen;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (stopped) {
        sl->stop_hit = true;
        finish(s, sl, SRV_FINISH_STOP, NULL);
        return false;
    }
    if ((t->n_predict >= 0 && n_gen >= t->n_predict) || sl->n_toks >= bs_session_n_ctx(sl->sess)) {
        finish(s, sl, SRV_FINISH_LENGTH, NULL);
        return false;
    }
    sl->pending = id;
    sl->state = SLOT_GEN;
    return true;
}

/* Sample from sl->logits and deliver the token (after the guard had its say: a rewind means
 * sampling again at the earlier position; a loop that stops generation still ends with the
 * token that completed it, as `run` prints it). */
static void after_logits(srv_sched *s, slot *sl) {
    srv_task *t = sl->task;
    for (;;) {
        int32_t id = bs_sampler_sample(sl->smp, sl->logits);
        if (id < 0) { finish(s, sl, SRV_FINISH_ERROR, bs_last_error()); return; }
        bool eog = !t->ignore_eos && bs_token_is_eog(s->tok, id);
        if (!eog) bs_sampler_accept(sl->smp, id);
        srv_tok tk = {.id = id};
        if (t->n_probs >= 0)
            tk.n_top = bs_top_logprobs(sl->logits, s->n_vocab, t->n_probs, tk.top_id, tk.top_lp, id, &tk.logprob);
        int act = eog ? BS_LOOP_CONTINUE : guard_push(s, sl, id);
        if (act < 0) return;
        if (act == BS_LOOP_REWOUND) continue;
        if (deliver(s, sl, id, &tk) && act == BS_LOOP_STOP) finish(s, sl, SRV_FINISH_STOP, NULL);
        return;
    }
}

/* ---- speculative slots ---------------------------------------------------------------------- */

static bool spec_is_stop(void *ud, int32_t id) {
    const slot *sl = ud;
    return !sl->task->ignore_eos && bs_token_is_eog(sl->tok, id);
}

/* One DSpark round for a slot that drafts: its own verify pass (rounds are not batched across
 * slots), then each produced token is delivered in order. */
static void spec_step(srv_sched *s, slot *sl) {
    srv_task *t = sl->task;
    int room = bs_session_n_ctx(sl->sess) - sl->n_toks;
    int max_new = t->n_predict >= 0 ? t->n_predict - t->tm.n_gen : room;
    max_new = BS_MIN(max_new, room);
    const bs_spec_stats st0 = *bs_spec_get_stats(sl->spec);
    int32_t out[BS_DSPARK_MAX_BLOCK + 2];
    int m = bs_spec_round(sl->spec, sl->smp, sl->pending, BS_MAX(max_new, 1), spec_is_stop, sl, out);
    if (m < 0) { finish(s, sl, SRV_FINISH_ERROR, bs_last_error()); return; }
    const bs_spec_stats *st1 = bs_spec_get_stats(sl->spec);
    pthread_mutex_lock(&t->mu);
    t->tm.draft_n += st1->n_drafted - st0.n_drafted;
    t->tm.draft_accepted += st1->n_accepted - st0.n_accepted;
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&s->met->mu);
    s->met->draft_rounds += st1->n_draft_rounds - st0.n_draft_rounds;
    pthread_mutex_unlock(&s->met->mu);
    /* the session now holds the old anchor and out[0..m-1) */
    sl->toks[sl->n_toks++] = sl->pending;
    for (int j = 0; j + 1 < m; j++) sl->toks[sl->n_toks++] = out[j];
    for (int j = 0; j < m; j++) {
        srv_tok tk = {.id = out[j]};
        /* the guard is in stop mode here (admit): it never rewinds */
        int act = spec_is_stop(sl, out[j]) ? BS_LOOP_CONTINUE : guard_push(s, sl, out[j]);
        if (act < 0 || !deliver(s, sl, out[j], &tk)) return;
        if (act != BS_LOOP_CONTINUE) { finish(s, sl, SRV_FINISH_STOP, NULL); return; }
    }
}

/* ---- prompt processing ---------------------------------------------------------------------- */

static void admit(srv_sched *s, slot *sl, srv_task *t) {
    sl->task = t;
    sl->stop_hit = false;
    /* logprobs need each token's distribution, which a speculative round does not expose; a
     * guard that rewinds needs each token evaluated alone */
    sl->use_spec = sl->spec && !t->no_draft && t->n_probs < 0 && t->loop.mode != BS_LOOP_GUARD_REWIND;
    sl->t0 = bs_time();
    int from, reuse = reuse_len(sl, t, &from);
    if (from >= 0 && ckpt_load(sl, from)) reuse = 0;
    if (reuse == 0) {
        bs_session_reset(sl->sess);
        sl->n_toks = 0;
    }   /* from == -1: the live session already holds exactly toks[0..reuse) */
    sl->n_done = reuse;
    pthread_mutex_lock(&t->mu);
    t->started = true;
    t->slot = sl->id;
    t->tm.n_cached = reuse;
    pthread_mutex_unlock(&t->mu);
    sl->state = SLOT_PROMPT;
    publish_info(s, sl);
    if (setup_sampler(s, sl, t)) finish(s, sl, SRV_FINISH_ERROR, bs_last_error());
}

/* The prompt chunk a waiting slot evaluates next: up to budget tokens, ending at the cache
 * checkpoint position if that comes first. */
static int prompt_chunk(const slot *sl, int budget) {
    const srv_task *t = sl->task;
    int target = t->ckpt_at > sl->n_done && t->ckpt_at < t->n_prompt ? t->ckpt_at : t->n_prompt;
    return BS_MIN(budget, target - sl->n_done);
}

/* A slot's prompt chunk of n tokens has been evaluated. */
static void prompt_done(srv_sched *s, slot *sl, int n) {
    srv_task *t = sl->task;
    memcpy(sl->toks + sl->n_toks, t->prompt + sl->n_done, (size_t)n * sizeof(int32_t));
    sl->n_toks += n;
    sl->n_done += n;
    if (sl->n_done == t->ckpt_at) ckpt_save(sl, 0);
    if (sl->n_done < t->n_prompt) return;
    ckpt_save(sl, 1);
    double now = bs_time();
    pthread_mutex_lock(&t->mu);
    t->tm.n_prompt = t->n_prompt - t->tm.n_cached;
    t->tm.t_prompt_ms = (now - sl->t0) * 1e3;
    pthread_mutex_unlock(&t->mu);
    sl->t0 = now;
    sl->state = SLOT_GEN;
    publish_info(s, sl);
    if (t->n_predict == 0) {
        finish(s, sl, SRV_FINISH_LENGTH, NULL);   /* max_tokens 0: prompt only */
        return;
    }
    if (sl->guard) bs_loop_guard_begin(sl->guard, sl->logits);
    after_logits(s, sl);
}

/* ---- one pass ------------------------------------------------------------------------------- */

/* Every generating slot's next token and chunks of waiting prompts (PROMPT_BUDGET rows in all),
 * through the weights together. */
static void step_spec(srv_sched *s);

static void step(srv_sched *s) {
    step_spec(s);
    bs_batch_seq q[MAX_SLOTS * 2];
    slot *who[MAX_SLOTS * 2];
    int n = 0, n_gen = 0, budget = PROMPT_BUDGET;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->state != SLOT_GEN || !sl->task || sl->use_spec) continue;
        q[n] = (bs_batch_seq){.s = sl->sess, .tokens = &sl->pending, .n = 1, .logits_mode = BS_LOGITS_LAST,
                              .logits = sl->logits};
        who[n++] = sl;
        n_gen++;
    }
    for (int i = 0; i < s->cfg.n_slots && budget > 0; i++) {
        slot *sl = &s->slots[i];
        if (sl->state != SLOT_PROMPT || !sl->task || sl->use_spec) continue;
        int c = prompt_chunk(sl, budget);
        bool last = sl->n_done + c == sl->task->n_prompt;
        q[n] = (bs_batch_seq){.s = sl->sess, .tokens = sl->task->prompt + sl->n_done, .n = c,
                              .logits_mode = last ? BS_LOGITS_LAST : BS_LOGITS_NONE, .logits = sl->logits};
        who[n++] = sl;
        budget -= c;
    }
    if (!n) return;
    if (bs_eval_multi(s->batch, q, n)) {
        char err[256];
        snprintf(err, sizeof err, "evaluating: %s", bs_last_error());
        for (int i = 0; i < n; i++) finish(s, who[i], SRV_FINISH_ERROR, err);
        return;
    }
    if (n_gen) {
        pthread_mutex_lock(&s->met->mu);
        s->met->n_decode++;
        s->met->n_decode_rows += n_gen;
        pthread_mutex_unlock(&s->met->mu);
    }
    for (int i = 0; i < n; i++) {
        slot *sl = who[i];
        if (sl->state == SLOT_PROMPT) {
            prompt_done(s, sl, q[i].n);
        } else {
            sl->toks[sl->n_toks++] = sl->pending;
            if (sl->guard) bs_loop_guard_evaluated(sl->guard, sl->logits);
            after_logits(s, sl);
        }
    }
}

/* Slots that draft run alone: their prompt chunk (with the taps the drafter reads) or a round. */
static void step_spec(srv_sched *s) {
    for (int i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->task || !sl->use_spec) continue;
        if (sl->state == SLOT_GEN) {
            spec_step(s, sl);
            continue;
        }
        int c = prompt_chunk(sl, PROMPT_BUDGET);
        bool last = sl->n_done + c == sl->task->n_prompt;
        if (bs_spec_prompt(sl->spec, sl->task->prompt + sl->n_done, c, last ? sl->logits : NULL)) {
            finish(s, sl, SRV_FINISH_ERROR, bs_last_error());
            continue;
        }
        prompt_done(s, sl, c);
    }
}

/* ---- the thread ----------------------------------------------------------------------------- */

static slot *pick_slot(srv_sched *s, const srv_task *t) {
    slot *best = NULL;
    int best_reuse = -1;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->task) continue;
        int from, r = reuse_len(sl, t, &from);
        if (r > best_reuse || (r == best_reuse && sl->last_used < best->last_used)) {
            best = sl;
            best_reuse = r;
        }
    }
    return best;
}

static int n_active(const srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) n += s->slots[i].task != NULL;
    return n;
}

static void update_gauges(srv_sched *s, int active, int queued) {
    pthread_mutex_lock(&s->met->mu);
    s->met->processing = active;
    s->met->deferred = queued;
    pthread_mutex_unlock(&s->met->mu);
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && s->q_len == 0 && n_active(s) == 0) pthread_cond_wait(&s->cv, &s->mu);
        if (s->quit) { pthread_mutex_unlock(&s->mu); break; }
        srv_task *take[256];
        slot *into[256];
        int nt = 0;
        while (s->q_len > 0 && nt < 256) {
            slot *sl = pick_slot(s, s->queue[s->q_head]);
            if (!sl) break;
            take[nt] = s->queue[s->q_head];
            into[nt++] = sl;
            sl->task = take[nt - 1];   /* reserved; admit() below sets it up */
            s->info[sl->id].busy = true;
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
        }
        int queued = s->q_len;
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < nt; i++) {
            into[i]->task = NULL;
            admit(s, into[i], take[i]);
        }
        for (int i = 0; i < s->cfg.n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->task) continue;
            pthread_mutex_lock(&sl->task->mu);
            bool cancel = sl->task->cancel;
            pthread_mutex_unlock(&sl->task->mu);
            if (cancel) finish(s, sl, SRV_FINISH_ERROR, "cancelled");
        }
        update_gauges(s, n_active(s), queued);
        step(s);
        pthread_mutex_lock(&s->mu);
        queued = s->q_len;
        pthread_mutex_unlock(&s->mu);
        update_gauges(s, n_active(s), queued);
    }
    return NULL;
}

/* ---- public --------------------------------------------------------------------------------- */

static int slot_init(srv_sched *s, slot *sl, int id) {
    sl->id = id;
    bs_session_params sp = {.n_ctx = s->cfg.n_ctx, .n_threads = bs_pool_size(s->pool)};
    if (!(sl->sess = bs_session_new(s->m, &sp)) || bs_session_share_pool(sl->sess, s->pool)) return -1;
    sl->tok = s->tok;
    if (s->drafter) {
        int dm = s->cfg.draft_max == SRV_DRAFT_DEFAULT ? s->drafter->hp.block_size : s->cfg.draft_max;
        bs_spec_params pp = {.draft_max = dm, .conf_cut = 1, .draft_window = s->cfg.draft_window};
        if (!(sl->spec = bs_spec_new(sl->sess, s->drafter, &pp))) return -1;
    } else {
        bs_session_set_undo(sl->sess, 0);   /* plain decoding: never rolled back */
    }
    sl->logits = bs_xmalloc((size_t)s->n_vocab * sizeof(float));
    sl->toks = bs_xmalloc((size_t)bs_session_n_ctx(sl->sess) * sizeof(int32_t));
    return 0;
}

srv_sched *srv_sched_new(bs_model *m, const bs_tokenizer *tok, const srv_config *cfg, srv_metrics *met) {
    srv_sched *s = bs_xcalloc(1, sizeof *s);
    s->m = m;
    s->tok = tok;
    s->cfg = *cfg;
    s->met = met;
    s->n_vocab = bs_model_n_vocab(m);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->q_limit = cfg->queue_max > 0 ? cfg->queue_max : 1;
    s->q_cap = s->q_limit + cfg->n_slots;
    s->queue = bs_xcalloc((size_t)s->q_cap, sizeof *s->queue);
    s->slots = bs_xcalloc((size_t)cfg->n_slots, sizeof *s->slots);
    s->info = bs_xcalloc((size_t)cfg->n_slots, sizeof *s->info);
    if (!(s->pool = bs_pool_new(cfg->n_threads > 0 ? cfg->n_threads : 1))) goto fail;
    if (!(s->batch = bs_batch_new(m, cfg->n_slots + PROMPT_BUDGET, cfg->n_slots, s->pool))) goto fail;
    if (cfg->drafter) {
        if (!(s->drafter = bs_dspark_load(cfg->drafter, NULL)) || bs_dspark_check_pair(s->drafter, m)) {
            bs_error_prefix("drafter %s: ", cfg->drafter);
            goto fail;
        }
        bs_dspark_share_embeddings(s->drafter, m, false);
    }
    for (int i = 0; i < cfg->n_slots; i++) {
        if (slot_init(s, &s->slots[i], i)) goto fail;
        s->info[i] = (srv_slot_info){.id = i, .n_ctx = bs_session_n_ctx(s->slots[i].sess)};
    }
    s->n_ctx = bs_session_n_ctx(s->slots[0].sess);
    if (pthread_create(&s->thr, NULL, sched_main, s)) {
        bs_error("cannot start the scheduler thread");
        goto fail;
    }
    s->thr_started = true;
    return s;
fail:
    bs_error_prefix("server slots: ");
    srv_sched_free(s);
    return NULL;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->thr_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thr, NULL);
    }
    for (int i = 0; i < s->cfg.n_slots && s->slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->task) finish(s, sl, SRV_FINISH_ERROR, "server shutting down");
        bs_spec_free(sl->spec);
        if (sl->sess) bs_session_unshare_pool(sl->sess);
        bs_session_free(sl->sess);
        free(sl->logits);
        free(sl->toks);
        for (int k = 0; k < 2; k++) {
            free(sl->ck[k].toks);
            free(sl->ck[k].state);
        }
    }
    for (int i = 0; i < s->q_len; i++) {
        srv_task *t = s->queue[(s->q_head + i) % s->q_cap];
        pthread_mutex_lock(&t->mu);
        t->done = true;
        t->finish = SRV_FINISH_ERROR;
        snprintf(t->error, sizeof t->error, "server shutting down");
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        srv_task_unref(t);
    }
    bs_batch_free(s->batch);
    bs_dspark_free(s->drafter);
    bs_pool_free(s->pool);
    free(s->slots);
    free(s->info);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int srv_sched_submit(srv_sched *s, srv_task *t) {
    pthread_mutex_lock(&s->mu);
    /* queued requests an idle slot is about to take are not waiting for a busy server: only
     * the rest count against the limit (a burst must not be refused while slots are free) */
    int idle = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) idle += !s->info[i].busy;
    if (s->q_len - idle >= s->q_limit || s->q_len == s->q_cap) {
        pthread_mutex_unlock(&s->mu);
        return bs_error("the server is busy: all %d slots are working and %d requests are waiting",
                        s->cfg.n_slots, s->q_limit);
    }
    srv_task_ref(t);
    s->queue[(s->q_head + s->q_len) % s->q_cap] = t;
    s->q_len++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_wake(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_n_slots(const srv_sched *s) { return s->cfg.n_slots; }
int srv_sched_n_ctx(const srv_sched *s) { return s->n_ctx; }

void srv_sched_slots(srv_sched *s, srv_slot_info *out) {
    pthread_mutex_lock(&s->mu);
    memcpy(out, s->info, (size_t)s->cfg.n_slots * sizeof *out);
    pthread_mutex_unlock(&s->mu);
}
