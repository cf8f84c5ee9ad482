/* server_sched.c: the slots and the scheduler thread of `bitspark serve` (server.h).
 *
 * One thread owns every slot. A slot is one generator (generate/gen.h), which owns the slot's
 * session, its prompt cache (the live session and two saved states: the start of the prompt's
 * last message and the end of the prompt), sampling, stop strings, the doom-loop guard and, with
 * a drafter, speculative rounds. Each turn the thread takes queued tasks into idle slots, steps
 * the prompts of slots that draft alone, then evaluates the decode step or speculative round of
 * every generating slot and a chunk of each waiting prompt in a single bs_eval_multi call (one
 * pass through the weights for all of them: continuous batching; drafting and plain slots share
 * it). Evaluation is batch-invariant, so a request's greedy
 * output does not depend on what else runs. After each step a slot's new text and tokens are
 * copied into its task, which the connection threads stream from.
 *
 * Doom-loop guard: a request in `rewind` mode decodes without drafting (the server's choice:
 * rewinds are rare, drafting stays on for the other requests of a slot). */
#include "server/server.h"
#include "server/server_vision.h"
#include "generate/drafter.h"
#include "model/batch_eval.h"
#include "model/sleep.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROMPT_BUDGET 256   /* prompt rows per pass, shared by the slots whose prompts wait */
#define MAX_SLOTS 256
#define EMB_SHARED 16       /* embedding rows per pass while slots work */
#define EMB_IDLE 64         /* ... and while they do not (a request that comes waits for one pass) */

typedef struct slot {
    int id;
    bs_gen *gen;
    srv_task *task;
    int n_decoded;              /* the task's tokens so far, and whether any of them held a newline */
    bool new_line;              /* (both atomic: /slots reads them between the passes' updates) */
    long last_used;
    float lora[SRV_MAX_LORA];   /* the adapter scales its cached prefix was computed with */
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
    const bs_mmproj *mmproj;    /* encodes the images of the requests slots take */
    int draft_max;
    pthread_t thr;
    bool thr_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    bool shutdown;              /* srv_sched_shutdown: end everything, take nothing new */
    srv_task **queue;
    int q_head, q_len, q_cap;   /* q_cap: q_limit + a place per slot */
    int q_limit;                /* requests that may wait for a busy server */
    srv_slot_info *info;       /* guarded by mu, for /slots */
    long tick;
    /* embeddings (server_embed.c): one task at a time on its own session, its chunks in the
     * passes' prompt budget; the others wait in their own queue (eq, q_limit places) */
    bs_session *emb_sess;
    float *emb_rows;           /* PROMPT_BUDGET rows of taps */
    srv_task *emb_task;        /* scheduler thread only */
    srv_task **eq;
    int eq_head, eq_len;       /* guarded by mu */
    /* LoRA (server_lora.c): the scales attached to the model now, those of this pass, and the
     * slot whose scales the next pass takes first (passes take turns between scale sets) */
    float lora_cur[SRV_MAX_LORA], lora_pass[SRV_MAX_LORA];
    int lora_turn;
    /* --sleep-idle-seconds: the slots' generators and the batch are freed while sleeping */
    bool sleeping;             /* atomic: /props reads it */
    double t_active;           /* bs_time() of the last turn with work */
};

static int slot_init(srv_sched *s, slot *sl, int id);

/* ---- tasks ---------------------------------------------------------------------------------- */

static long lp_held;   /* logprob entries of the requests in flight */

bool srv_logprob_reserve(long n) {
    long cur = __atomic_load_n(&lp_held, __ATOMIC_RELAXED);
    do {
        if (cur + n > SRV_LOGPROB_BUDGET) return false;
    } while (!__atomic_compare_exchange_n(&lp_held, &cur, cur + n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return true;
}

srv_task *srv_task_new(void) {
    static long long next_id;
    srv_task *t = bs_xcalloc(1, sizeof *t);
    t->id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->refs = 1;
    t->n_predict = -1;
    t->n_probs = -1;
    t->n_keep = -1;
    t->n_breakers = -1;
    t->slot = -1;
    t->id_slot = -1;
    t->sp = bs_sampler_default_params();
    t->loop = bs_loop_guard_default_params();
    return t;
}

srv_task *srv_task_choice(srv_task *t, int k) {
    srv_task *c = srv_task_new();
    /* the parameters (everything above mu), then what is owned copied again */
    memcpy(c, t, offsetof(srv_task, mu));
    c->prompt = bs_xmalloc((size_t)t->n_prompt * sizeof *c->prompt);
    memcpy(c->prompt, t->prompt, (size_t)t->n_prompt * sizeof *c->prompt);
    for (int i = 0; i < t->n_stop; i++) c->stop[i] = bs_xstrdup(t->stop[i]);
    for (int i = 0; i < t->n_breakers; i++) c->breakers[i] = bs_xstrdup(t->breakers[i]);
    c->grammar = t->grammar ? bs_xstrdup(t->grammar) : NULL;
    c->sp.seed = t->sp.seed + (uint64_t)k;
    c->n_choices = 1;
    memset(c->sib, 0, sizeof c->sib);
    srv_task_ref(t);
    c->leader = t;
    return c;
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
    if (!t->leader) srv_images_free(t->images, t->pixels, t->n_images);
    srv_task_unref(t->leader);
    free(t->prompt);
    free(t->grammar);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    for (int i = 0; i < t->n_breakers; i++) free(t->breakers[i]);
    free(t->text);
    free(t->toks);
    free(t->prog_done);
    free(t->prog_ms);
    srv_emb_free(t->emb);
    srv_slot_op_free(t->op);
    if (t->lp_reserved) __atomic_sub_fetch(&lp_held, t->lp_reserved, __ATOMIC_RELAXED);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* ---- a slot's task ---------------------------------------------------------------------------- */

static void publish_info(srv_sched *s, const slot *sl) {
    int n = 0;
    if (sl->gen) bs_gen_cached(sl->gen, &n);
    pthread_mutex_lock(&s->mu);
    srv_slot_info *in = &s->info[sl->id];
    in->busy = sl->task != NULL;
    in->generating = in->generating && sl->task != NULL;
    in->n_cached = n;
    pthread_mutex_unlock(&s->mu);
}

/* Copy what the generator produced since the last copy into the task (under t->mu). */
/* cfg.on_publish of the (one) server: called after tokens are published or a task ends */
static void (*on_publish)(void);
static void notify(void) {
    if (on_publish) on_publish();
}

long srv_task_positions(const srv_task *t) {
    long n = t->n_prompt;
    for (int k = 0; k < t->n_images; k++) n += (long)t->images[k].nx * t->images[k].ny - 1;
    return n;
}

/* A progress entry when the prompt positions in the slot grew (t->mu held). */
static void note_progress(slot *sl) {
    srv_task *t = sl->task;
    int n = 0;
    bs_gen_cached(sl->gen, &n);
    n = (int)BS_MIN((long)n, srv_task_positions(t));
    if (t->n_prog > 0 && n <= t->prog_done[t->n_prog - 1]) return;
    if (t->n_prog == t->cap_prog) {
        t->cap_prog = BS_MAX(2 * t->cap_prog, 8);
        t->prog_done = bs_xrealloc(t->prog_done, (size_t)t->cap_prog * sizeof *t->prog_done);
        t->prog_ms = bs_xrealloc(t->prog_ms, (size_t)t->cap_prog * sizeof *t->prog_ms);
    }
    t->prog_done[t->n_prog] = n;
    t->prog_ms[t->n_prog++] = (float)((bs_time() - t->t_prompt0) * 1e3);
}

static void sync_task(slot *sl) {
    srv_task *t = sl->task;
    size_t tf;
    int kf;
    bs_gen_output_changed(sl->gen, &tf, &kf);
    bs_gen_output o;
    bs_gen_output_get(sl->gen, &o);
    pthread_mutex_lock(&t->mu);
    if (o.len + 1 > t->cap) {
        t->cap = BS_MAX(t->cap * 2, o.len + 64);
        t->text = bs_xrealloc(t->text, t->cap);
    }
    if (o.len > tf) memcpy(t->text + tf, o.text + tf, o.len - tf);
    t->len = o.len;
    t->text[t->len] = 0;
    if (o.n_toks > t->cap_toks) {
        t->cap_toks = BS_MAX(2 * t->cap_toks, o.n_toks + 64);
        t->toks = bs_xrealloc(t->toks, (size_t)t->cap_toks * sizeof *t->toks);
    }
    if (o.n_toks > kf)   /* nothing yet (t->toks may still be NULL): no pointer arithmetic on it */
        memcpy(t->toks + kf, o.toks + kf, (size_t)(o.n_toks - kf) * sizeof *t->toks);
    t->n_toks = o.n_toks;
    __atomic_store_n(&sl->n_decoded, o.n_toks, __ATOMIC_RELAXED);
    if (o.len > tf && memchr(o.text + tf, '\n', o.len - tf))   /* once any newline came (llama-server's) */
        __atomic_store_n(&sl->new_line, true, __ATOMIC_RELAXED);
    t->n_safe = o.n_safe;
    t->n_toks_safe = o.n_toks_safe;
    t->tm.n_gen = o.n_toks;
    const bs_gen_stats *gs = bs_gen_get_stats(sl->gen);   /* the timings so far (timings_per_token) */
    t->tm.n_prompt = gs->n_prompt;
    t->tm.n_cached = gs->n_cached;
    t->tm.t_prompt_ms = gs->t_prompt * 1e3;
    t->tm.t_gen_ms = gs->t_gen * 1e3;
    if (o.n_toks > 0 && t->t_first == 0) t->t_first = bs_time();
    note_progress(sl);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    notify();
}

static int finish_reason(int stop) {
    switch (stop) {
    case BS_GEN_EOG: case BS_GEN_STOP_STRING: case BS_GEN_LOOP: return SRV_FINISH_STOP;
    case BS_GEN_LENGTH: case BS_GEN_CTX: return SRV_FINISH_LENGTH;
    default: return SRV_FINISH_ERROR;
    }
}

/* The slot's generation has ended (err: the message of an error the generator did not record;
 * forced: SRV_FINISH_SHUTDOWN when the server stops it, else SRV_FINISH_NONE). */
static void finish_as(srv_sched *s, slot *sl, const char *err, int forced) {
    srv_task *t = sl->task;
    if (!bs_gen_done(sl->gen)) bs_gen_cancel(sl->gen, forced ? BS_GEN_INTERRUPT : BS_GEN_ERROR);
    const bs_gen_stats *st = bs_gen_get_stats(sl->gen);
    const int why = forced ? forced : err ? SRV_FINISH_ERROR : finish_reason(st->stop);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", err ? err : st->stop == BS_GEN_INTERRUPT ? "cancelled" : bs_last_error());
    sync_task(sl);   /* (the text, tokens and timings, final now) */
    pthread_mutex_lock(&t->mu);
    t->tm.draft_n = st->n_drafted;   /* (the generator counts these at its end only) */
    t->tm.draft_accepted = st->n_accepted;
    t->shifted = st->n_shifts > 0;
    srv_timings tm = t->tm;
    const double t_submit = t->t_submit, t_first = t->t_first;
    pthread_mutex_unlock(&t->mu);
    if (why != SRV_FINISH_ERROR) {   /* counted before the answer is released: a client that
                                      * reads /metrics after its answer sees it */
        srv_metrics_task(s->met, &tm);
        srv_metrics_latency(s->met, t_submit, t_first, bs_time(), tm.n_gen);
        srv_metrics_loop_guard(s->met, &st->loop);
        pthread_mutex_lock(&s->met->mu);
        s->met->draft_rounds += st->n_draft_rounds;
        pthread_mutex_unlock(&s->met->mu);
    }
    pthread_mutex_lock(&t->mu);
    t->loop_res = st->loop;
    t->finish = why;
    t->gen_stop = st->stop;
    if (why == SRV_FINISH_ERROR) snprintf(t->error, sizeof t->error, "%s", msg);
    t->done = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    notify();
    t->prompt_ready = true;
    srv_task_unref(t);
    sl->task = NULL;
    sl->last_used = ++s->tick;
    publish_info(s, sl);
}

static void finish(srv_sched *s, slot *sl, const char *err) { finish_as(s, sl, err, SRV_FINISH_NONE); }

/* A task that never reached a slot ends (s->mu held or the thread gone). */
static void end_queued(srv_task *t, int why, const char *msg) {
    pthread_mutex_lock(&t->mu);
    t->done = true;
    t->finish = why;
    snprintf(t->error, sizeof t->error, "%s", msg);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    notify();
    t->prompt_ready = true;
    srv_task_unref(t);
}

/* The embeddings task ends (scheduler thread): done, or err / forced as finish_as. */
static void emb_end(srv_sched *s, const char *err, int forced) {
    srv_task *t = s->emb_task;
    s->emb_task = NULL;
    end_queued(t, forced ? forced : err ? SRV_FINISH_ERROR : SRV_FINISH_STOP, err ? err : "");
}

/* After a step: stream what it produced, or finish. */
static void stepped(srv_sched *s, slot *sl) {
    if (!bs_gen_in_prompt(sl->gen)) sl->task->prompt_ready = true;   /* scheduler thread only */
    if (bs_gen_done(sl->gen)) finish(s, sl, NULL);
    else sync_task(sl);
}

/* The grammar matcher's cancel hook: the client left (a busy lock: ask again later). */
static bool task_cancelled(void *ud) {
    srv_task *t = ud;
    if (pthread_mutex_trylock(&t->mu)) return false;
    const bool c = t->cancel;
    pthread_mutex_unlock(&t->mu);
    return c;
}

static bool same_lora(const float *a, const float *b) { return !memcmp(a, b, SRV_MAX_LORA * sizeof *a); }

/* Whether a slot's work goes into this pass: it runs with the pass's adapter scales. */
static bool in_pass(const srv_sched *s, const slot *sl) {
    return !s->cfg.n_loras || same_lora(sl->task->lora, s->lora_pass);
}

/* The adapter scales of this pass: those of the first busy slot (or the embeddings task) from
 * lora_turn on, attached to the model if they are not already. false + err: attaching
 * failed (the pass's slots end with it). */
static bool lora_choose(srv_sched *s, char *err, size_t len) {
    if (!s->cfg.n_loras) return true;
    const float *want = NULL;
    const int n = s->cfg.n_slots + 1;   /* the slots, then the embeddings task */
    for (int k = 0; k < n && !want; k++) {
        const int i = (s->lora_turn + k) % n;
        const srv_task *t = i < s->cfg.n_slots ? s->slots[i].task : s->emb_task;
        if (t) {
            want = t->lora;
            s->lora_turn = (i + 1) % n;
        }
    }
    if (!want) return true;
    memcpy(s->lora_pass, want, sizeof s->lora_pass);
    if (same_lora(s->lora_cur, s->lora_pass)) return true;
    if (srv_lora_apply(s->m, s->cfg.loras, s->cfg.n_loras, s->lora_pass)) {
        snprintf(err, len, "attaching the LoRA adapters: %s", bs_last_error());
        bs_lora_detach(s->m);
        memset(s->lora_cur, 0, sizeof s->lora_cur);
        return false;
    }
    memcpy(s->lora_cur, s->lora_pass, sizeof s->lora_cur);
    return true;
}

/* A slot action (server_slots.c) runs at once on the idle slot and ends. */
static void run_op(srv_sched *s, slot *sl, srv_task *t) {
    srv_slot_op_run(t->op, &s->cfg, sl->gen, sl->lora);
    pthread_mutex_lock(&t->mu);
    t->started = true;
    t->slot = sl->id;
    pthread_mutex_unlock(&t->mu);
    end_queued(t, SRV_FINISH_STOP, "");
    sl->last_used = ++s->tick;
    publish_info(s, sl);
}

/* What a task runs with: n_keep defaulting to --keep (max_tokens: srv_task_n_predict). */
static int task_n_keep(const srv_sched *s, const srv_task *t) { return t->n_keep >= 0 ? t->n_keep : s->cfg.gen.n_keep; }

static void admit(srv_sched *s, slot *sl, srv_task *t) {
    if (t->op) { run_op(s, sl, t); return; }
    if (!same_lora(sl->lora, t->lora)) {   /* its cache was computed with other adapters */
        bs_gen_forget(sl->gen);
        memcpy(sl->lora, t->lora, sizeof sl->lora);
    }
    sl->task = t;
    bs_gen_set_cancel_hook(sl->gen, task_cancelled, t);
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp = t->sp;
    r.bias_id = t->bias_id;
    r.bias = t->bias;
    r.n_bias = t->n_bias;
    r.breakers = s->cfg.gen.breakers;   /* the request's, else serve's --dry-sequence-breaker, or llama.cpp's */
    r.n_breakers = s->cfg.gen.n_breakers;
    if (t->n_breakers >= 0) {
        r.breakers = (const char *const *)t->breakers;
        r.n_breakers = t->n_breakers;
    }
    r.n_predict = srv_task_n_predict(&s->cfg, t);
    r.ignore_eos = t->ignore_eos;
    r.n_indent = t->n_indent;
    r.t_max_predict_ms = t->t_max_predict_ms;
    r.stop = (const char *const *)t->stop;
    r.n_stop = t->n_stop;
    r.n_probs = t->n_probs;
    r.greedy_on_device = true;   /* plain greedy slots on a GPU: only token ids come back */
    r.post_probs = t->post_probs;
    r.loop = t->loop;
    r.no_draft = t->no_draft || t->loop.mode == BS_LOOP_GUARD_REWIND;
    r.no_cache = t->no_cache;
    r.ckpt_at = t->ckpt_at;
    r.ckpt_end = true;
    r.tool_tags = true;
    r.grammar = t->grammar;
    r.context_shift = s->cfg.gen.context_shift && t->loop.mode != BS_LOOP_GUARD_REWIND;
    r.n_keep = task_n_keep(s, t);
    r.images = t->images;
    r.n_images = t->n_images;
    if (t->leader && t->leader->slot >= 0)   /* another choice: the first one's evaluated prompt */
        bs_gen_share_prompt(sl->gen, s->slots[t->leader->slot].gen);
    char err[256];
    int rc = 0;
    if (t->n_images && srv_vision_encode(s->mmproj, t->images, t->pixels, t->n_images, s->cfg.n_threads, err,
                                         sizeof err))
        rc = bs_error("%s", err);
    const double t0 = bs_time();
    if (!rc) rc = bs_gen_begin(sl->gen, &r, t->prompt, t->n_prompt);
    pthread_mutex_lock(&t->mu);
    t->started = true;
    t->slot = sl->id;
    t->tm.n_cached = rc ? 0 : bs_gen_get_stats(sl->gen)->n_cached;
    t->t_prompt0 = t0;
    if (!rc) note_progress(sl);   /* the start: what the cache gave */
    pthread_mutex_unlock(&t->mu);
    publish_info(s, sl);
    if (rc) finish(s, sl, bs_last_error());
}

static int n_active(const srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) n += s->slots[i].task != NULL;
    return n;
}

/* ---- one pass ------------------------------------------------------------------------------- */

/* Every generating slot's next token or speculative round (anchor + drafts) and chunks of the
 * waiting prompts (PROMPT_BUDGET rows in all; those of drafting slots with the taps their drafter
 * reads) go through the weights together; the drafter blocks of the rounds ran together before. */
static void step(srv_sched *s) {
    bs_batch_seq q[MAX_SLOTS];
    slot *who[MAX_SLOTS], *gen_slots[MAX_SLOTS];
    bs_gen *gens[MAX_SLOTS];
    int n = 0, n_gen = 0, budget = PROMPT_BUDGET, n_generating = 0;
    char lerr[200];
    if (!lora_choose(s, lerr, sizeof lerr)) {
        for (int i = 0; i < s->cfg.n_slots; i++)
            if (s->slots[i].task && in_pass(s, &s->slots[i])) finish(s, &s->slots[i], lerr);
        if (s->emb_task && same_lora(s->emb_task->lora, s->lora_pass)) emb_end(s, lerr, SRV_FINISH_NONE);
        return;
    }
    for (int i = 0; i < s->cfg.n_slots; i++) {   /* the slots past their prompts */
        slot *sl = &s->slots[i];
        if (!sl->task || bs_gen_in_prompt(sl->gen) || !in_pass(s, sl)) continue;
        gen_slots[n_generating] = sl;
        gens[n_generating++] = sl->gen;
    }
    for (int j = 0; j < n_generating; j++)   /* auto depth: what the shared pass costs */
        bs_gen_set_shared_rows(gens[j], n_generating - 1);
    const int n_shared = bs_gen_draft_together(gens, n_generating);   /* drafter blocks: one pass */
    if (n_shared) {
        pthread_mutex_lock(&s->met->mu);
        s->met->n_draft_shared += n_shared;
        pthread_mutex_unlock(&s->met->mu);
    }
    for (int j = 0; j < n_generating; j++) {   /* decode steps and speculative rounds */
        slot *sl = gen_slots[j];
        if (bs_gen_plan(sl->gen, 0, &q[n])) who[n++] = sl, n_gen++;
        else if (bs_gen_done(sl->gen)) finish(s, sl, NULL);
    }
    for (int i = 0; i < s->cfg.n_slots; i++) {   /* an image a prompt goes on with: alone */
        slot *sl = &s->slots[i];
        if (!sl->task || !in_pass(s, sl) || !bs_gen_next_is_image(sl->gen)) continue;
        if (bs_gen_step(sl->gen, 0) == 0) {
            stepped(s, sl);
            continue;
        }
        char err[256];
        snprintf(err, sizeof err, "%s", bs_last_error());
        finish(s, sl, err);
    }
    /* the embeddings chunk: EMB_IDLE rows on an idle server, else a small one (EMB_SHARED
     * rows), so a pass - every generating slot's next token - costs little more than without it */
    int emb = -1;
    bool fresh = false;
    const int32_t *etok = NULL;
    const bool emb_here = s->emb_task && (!s->cfg.n_loras || same_lora(s->emb_task->lora, s->lora_pass));
    const int en = emb_here ? srv_emb_plan(s->emb_task->emb, n_active(s) ? EMB_SHARED : BS_MIN(budget, EMB_IDLE), &etok, &fresh) : 0;
    if (en > 0) {
        if (fresh) bs_session_reset(s->emb_sess);
        q[n] = (bs_batch_seq){.s = s->emb_sess, .tokens = etok, .n = en, .logits_mode = BS_LOGITS_NONE,
                              .taps = s->emb_rows};
        emb = n++;
        budget -= en;
    }
    for (int i = 0; i < s->cfg.n_slots && budget > 0; i++) {   /* chunks of waiting prompts */
        slot *sl = &s->slots[i];
        if (sl->task && in_pass(s, sl) && bs_gen_in_prompt(sl->gen) && bs_gen_plan(sl->gen, budget, &q[n])) {
            budget -= q[n].n;
            who[n++] = sl;
        }
    }
    if (!n) return;
    if (bs_eval_multi(s->batch, q, n)) {
        char err[256];
        snprintf(err, sizeof err, "evaluating: %s", bs_last_error());
        for (int i = 0; i < n; i++)
            if (i == emb) emb_end(s, err, SRV_FINISH_NONE);
            else finish(s, who[i], err);
        return;
    }
    if (emb >= 0) {
        srv_emb_rows(s->m, s->emb_task->emb, s->emb_rows, en);
        bool more = srv_emb_plan(s->emb_task->emb, 1, &etok, &fresh) > 0;
        if (!more) emb_end(s, NULL, SRV_FINISH_NONE);
    }
    if (n_gen) {
        pthread_mutex_lock(&s->met->mu);
        s->met->n_decode++;
        s->met->n_decode_rows += n_gen;
        pthread_mutex_unlock(&s->met->mu);
    }
    /* the drafting slots' appends of the rows they kept: collected, then one pass on a device */
    if (s->drafter) bs_dspark_collect(s->drafter, true);
    for (int i = 0; i < n; i++) {
        if (i == emb) continue;
        bs_gen_commit(who[i]->gen, true);
        stepped(s, who[i]);
    }
    if (s->drafter && bs_dspark_collect(s->drafter, false)) bs_log(1, "drafter appends: %s\n", bs_last_error());
}

/* ---- the thread ----------------------------------------------------------------------------- */

static slot *pick_slot(srv_sched *s, const srv_task *t) {
    if (t->id_slot >= 0) return s->slots[t->id_slot].task ? NULL : &s->slots[t->id_slot];   /* "id_slot" */
    slot *best = NULL;
    int best_reuse = -1;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->task) continue;
        int r = same_lora(sl->lora, t->lora) ? bs_gen_reusable(sl->gen, t->prompt, t->n_prompt, t->images, t->n_images,
                                                               t->no_cache) : 0;
        if (r > best_reuse || (r == best_reuse && sl->last_used < best->last_used)) {
            best = sl;
            best_reuse = r;
        }
    }
    return best;
}

static void update_gauges(srv_sched *s, int active, int queued) {
    int before_first = 0;   /* in a slot, no token yet (t_first is written by this thread) */
    for (int i = 0; i < s->cfg.n_slots; i++) before_first += s->slots[i].task && s->slots[i].task->t_first == 0;
    pthread_mutex_lock(&s->met->mu);
    s->met->processing = active;
    s->met->deferred = queued;
    s->met->waiting = queued + before_first;
    pthread_mutex_unlock(&s->met->mu);
}

/* srv_sched_shutdown: every slot's task and every queued one ends now (s->mu held; released
 * while the slots finish, which publish under it). */
static void shut_all(srv_sched *s) {
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->cfg.n_slots; i++)
        if (s->slots[i].task) finish_as(s, &s->slots[i], NULL, SRV_FINISH_SHUTDOWN);
    if (s->emb_task) emb_end(s, NULL, SRV_FINISH_SHUTDOWN);
    pthread_mutex_lock(&s->mu);
    while (s->q_len > 0) {
        end_queued(s->queue[s->q_head], SRV_FINISH_SHUTDOWN, "the server shut down");
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
    }
    for (; s->eq_len > 0; s->eq_len--, s->eq_head = (s->eq_head + 1) % s->q_limit)
        end_queued(s->eq[s->eq_head], SRV_FINISH_SHUTDOWN, "the server shut down");
}

/* ---- sleeping (--sleep-idle-seconds) --------------------------------------------------------- */

static int batch_new(srv_sched *s) {
    /* every slot's verify rows (anchor + a block of drafts) and the prompt chunks in one pass */
    const int per_slot = s->drafter ? s->drafter->hp.block_size + 1 : 1;
    s->batch = bs_batch_new(s->m, s->cfg.n_slots * per_slot + PROMPT_BUDGET, s->cfg.n_slots * per_slot, s->pool);
    return s->batch ? 0 : -1;
}

/* The embeddings session (--embeddings): the last layer's rows are its taps; the batch's pool
 * runs it. Closed while the server sleeps: on a device it would keep the weights there. */
static int emb_open(srv_sched *s) {
    const int last = bs_model_n_layer(s->m) - 1;
    bs_session_params sp = {.n_ctx = s->n_ctx, .n_threads = s->cfg.n_threads > 0 ? s->cfg.n_threads : 1};
    bs_session *e = bs_session_new(s->m, &sp);
    if (!e || bs_session_set_taps(e, &last, 1) || bs_session_share_pool(e, s->pool)) {
        bs_session_free(e);   /* half made: none, so the next wake tries again */
        return -1;
    }
    s->emb_sess = e;
    return 0;
}

static void emb_close(srv_sched *s) {
    if (!s->emb_sess) return;
    bs_session_unshare_pool(s->emb_sess);
    bs_session_free(s->emb_sess);
    s->emb_sess = NULL;
}

/* Idle for the configured time: the slots' sessions (KV caches, recurrent states, saved
 * prefixes), the embeddings session and the batch's buffers go back to the system; the adapters
 * come off. */
static void go_sleep(srv_sched *s) {
    for (int i = 0; i < s->cfg.n_slots; i++) {
        bs_gen_free(s->slots[i].gen);
        s->slots[i].gen = NULL;
        memset(s->slots[i].lora, 0, sizeof s->slots[i].lora);
    }
    bs_batch_free(s->batch);
    s->batch = NULL;
    emb_close(s);
    if (s->cfg.n_loras) bs_lora_detach(s->m);
    memset(s->lora_cur, 0, sizeof s->lora_cur);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->cfg.n_slots; i++) s->info[i].n_cached = 0;
    pthread_mutex_unlock(&s->mu);
    /* the weights too (the tokenizer and template, read from the metadata, stay) */
    const bool weights = !bs_model_sleep(s->m);
    if (!weights) bs_log(1, "server: %s\n", bs_last_error());
    __atomic_store_n(&s->sleeping, true, __ATOMIC_RELEASE);
    bs_log(1, "server: idle for %g s, slots' memory freed%s\n", s->cfg.sleep_idle,
           weights ? ", weights' memory freed" : "");
}

/* Work came: the slots again, fresh (-1: they could not be made; the queued tasks fail). */
static int wake_up(srv_sched *s) {
    if (bs_model_wake(s->m)) return -1;
    for (int i = 0; i < s->cfg.n_slots; i++)
        if (!s->slots[i].gen && slot_init(s, &s->slots[i], i)) return -1;
    if (!s->batch && batch_new(s)) return -1;
    if (s->cfg.embeddings && !s->emb_sess && emb_open(s)) return -1;
    __atomic_store_n(&s->sleeping, false, __ATOMIC_RELEASE);
    bs_log(1, "server: awake\n");
    return 0;
}

bool srv_sched_sleeping(srv_sched *s) { return __atomic_load_n(&s->sleeping, __ATOMIC_ACQUIRE); }

static bool idle(const srv_sched *s) {
    return s->q_len == 0 && n_active(s) == 0 && s->eq_len == 0 && !s->emb_task;
}

/* Wait for work (s->mu held); with --sleep-idle-seconds, sleep when none came in time. */
static void wait_work(srv_sched *s) {
    while (!s->quit && idle(s)) {
        if (s->cfg.sleep_idle <= 0 || s->sleeping) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        const double left = s->t_active + s->cfg.sleep_idle - bs_time();
        if (left <= 0) {
            pthread_mutex_unlock(&s->mu);
            go_sleep(s);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + left;
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
}

/* sl is reserved for t (s->mu held): /slots shows it busy, and a generation as its task from now,
 * its progress counted from 0 (a slot action or embeddings keep the last task's). */
static void reserve(srv_sched *s, slot *sl, srv_task *t) {
    sl->task = t;   /* admit() sets it up */
    srv_slot_info *in = &s->info[sl->id];
    in->busy = true;
    if (t->op || t->emb) return;
    in->generating = true;
    in->has_task = true;
    in->id_task = t->id;
    in->sp = t->sp;
    in->n_predict = srv_task_n_predict(&s->cfg, t);
    in->n_keep = task_n_keep(s, t);
    in->ignore_eos = t->ignore_eos;
    __atomic_store_n(&sl->n_decoded, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&sl->new_line, false, __ATOMIC_RELAXED);
}

/* The queued tasks that can start now, each with its slot reserved (s->mu held), in queue order:
 * one that cannot start yet (its "id_slot" busy, a later choice waiting for the first one's
 * prompt) keeps its place without holding up the tasks behind it, as llama-server defers it.
 * Tasks whose clients went away leave the queue here instead of counting against its room (a
 * flag being set right now is seen on the next pass). */
static int take_queued(srv_sched *s, srv_task **take, slot **into) {
    int nt = 0, kept = 0;
    for (int i = 0; i < s->q_len; i++) {
        srv_task *t = s->queue[(s->q_head + i) % s->q_cap];
        if (task_cancelled(t)) {
            end_queued(t, SRV_FINISH_ERROR, "cancelled");
            continue;
        }
        const bool waits = t->leader && !t->leader->prompt_ready;   /* for the first choice's prompt */
        slot *sl = nt < 256 && !waits ? pick_slot(s, t) : NULL;
        if (!sl) {
            s->queue[(s->q_head + kept++) % s->q_cap] = t;   /* (kept <= i: the ring compacts in place) */
            continue;
        }
        take[nt] = t;
        into[nt++] = sl;
        reserve(s, sl, t);
    }
    s->q_len = kept;
    return nt;
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    s->t_active = bs_time();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        wait_work(s);
        if (s->quit) { pthread_mutex_unlock(&s->mu); break; }
        if (s->sleeping && !s->shutdown) {
            pthread_mutex_unlock(&s->mu);
            const int rc = wake_up(s);
            pthread_mutex_lock(&s->mu);
            if (rc) {   /* nothing can run: what waits ends with the reason */
                char err[256];
                snprintf(err, sizeof err, "waking up: %s", bs_last_error());
                for (; s->q_len > 0; s->q_len--, s->q_head = (s->q_head + 1) % s->q_cap)
                    end_queued(s->queue[s->q_head], SRV_FINISH_ERROR, err);
                for (; s->eq_len > 0; s->eq_len--, s->eq_head = (s->eq_head + 1) % s->q_limit)
                    end_queued(s->eq[s->eq_head], SRV_FINISH_ERROR, err);
                pthread_mutex_unlock(&s->mu);
                continue;
            }
        }
        s->t_active = bs_time();
        if (s->shutdown) {
            shut_all(s);
            pthread_mutex_unlock(&s->mu);
            update_gauges(s, 0, 0);
            continue;
        }
        srv_task *take[256];
        slot *into[256];
        const int nt = take_queued(s, take, into);
        if (!s->emb_task && s->eq_len > 0) {   /* the next embeddings request */
            s->emb_task = s->eq[s->eq_head];
            s->eq_head = (s->eq_head + 1) % s->q_limit;
            s->eq_len--;
        }
        int queued = s->q_len + s->eq_len;
        pthread_mutex_unlock(&s->mu);
        if (s->emb_task) {
            pthread_mutex_lock(&s->emb_task->mu);
            s->emb_task->started = true;
            bool cancel = s->emb_task->cancel;
            pthread_mutex_unlock(&s->emb_task->mu);
            if (cancel) emb_end(s, "cancelled", SRV_FINISH_NONE);
        }
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
            if (cancel) finish(s, sl, "cancelled");
        }
        update_gauges(s, n_active(s), queued);
        step(s);
        pthread_mutex_lock(&s->mu);
        queued = s->q_len + s->eq_len;
        pthread_mutex_unlock(&s->mu);
        update_gauges(s, n_active(s), queued);
        s->t_active = bs_time();
    }
    return NULL;
}

/* ---- public --------------------------------------------------------------------------------- */

static int slot_init(srv_sched *s, slot *sl, int id) {
    sl->id = id;
    bs_gen_params gp = {.n_ctx = s->cfg.n_ctx, .drafter = s->drafter,
                        .drafter_path = s->cfg.drafter, .draft_max = s->draft_max, .no_conf = s->cfg.gen.no_conf,
                        .draft_window = s->cfg.draft_window};
    return (sl->gen = bs_gen_new_pooled(s->m, s->tok, &gp, s->pool)) ? 0 : -1;
}

srv_sched *srv_sched_new(bs_model *m, const bs_tokenizer *tok, const srv_config *cfg, srv_metrics *met,
                         const bs_mmproj *mmproj) {
    srv_sched *s = bs_xcalloc(1, sizeof *s);
    on_publish = cfg->on_publish;
    s->m = m;
    s->tok = tok;
    s->cfg = *cfg;
    s->met = met;
    s->mmproj = mmproj;
    s->n_vocab = bs_model_n_vocab(m);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->q_limit = cfg->queue_max > 0 ? cfg->queue_max : 1;
    s->q_cap = s->q_limit + cfg->n_slots;
    s->queue = bs_xcalloc((size_t)s->q_cap, sizeof *s->queue);
    s->slots = bs_xcalloc((size_t)cfg->n_slots, sizeof *s->slots);
    s->info = bs_xcalloc((size_t)cfg->n_slots, sizeof *s->info);
    s->eq = bs_xcalloc((size_t)s->q_limit, sizeof *s->eq);
    if (!(s->pool = bs_pool_new(cfg->n_threads > 0 ? cfg->n_threads : 1))) goto fail;
    if (cfg->drafter) {
        if (!(s->drafter = bs_gen_drafter_open(cfg->drafter, m, cfg->draft_max, cfg->gen.share_embeddings)))
            goto fail;
        s->draft_max = cfg->draft_max;
    }
    if (batch_new(s)) goto fail;
    for (int i = 0; i < cfg->n_slots; i++) {
        if (slot_init(s, &s->slots[i], i)) goto fail;
        s->info[i] = (srv_slot_info){.id = i, .n_ctx = bs_session_n_ctx(bs_gen_session(s->slots[i].gen))};
    }
    s->n_ctx = s->info[0].n_ctx;
    if (cfg->embeddings) {
        if (emb_open(s)) goto fail;
        s->emb_rows = bs_xmalloc((size_t)PROMPT_BUDGET * bs_model_n_embd(m) * sizeof *s->emb_rows);
    }
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
        if (sl->task) finish(s, sl, "server shutting down");
        bs_gen_free(sl->gen);
    }
    for (int i = 0; i < s->q_len; i++)
        end_queued(s->queue[(s->q_head + i) % s->q_cap], SRV_FINISH_ERROR, "server shutting down");
    if (s->emb_task) emb_end(s, "server shutting down", SRV_FINISH_NONE);
    for (int i = 0; i < s->eq_len; i++) end_queued(s->eq[(s->eq_head + i) % s->q_limit], SRV_FINISH_ERROR, "server shutting down");
    emb_close(s);
    free(s->emb_rows);
    free(s->eq);
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

/* Room in the queue (s->mu held). Queued requests an idle slot is about to take are not waiting
 * for a busy server: only the rest count against the limit (a burst must not be refused while
 * slots are free). */
static bool has_room(const srv_sched *s) {
    int idle = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) idle += !s->info[i].busy;
    return s->q_len - idle < s->q_limit && s->q_len < s->q_cap;
}

bool srv_sched_accepting(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    bool ok = !s->shutdown && has_room(s);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void srv_sched_shutdown(srv_sched *s) {
    pthread_mutex_lock(&s->mu);
    s->shutdown = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_submit(srv_sched *s, srv_task *t) {
    pthread_mutex_lock(&s->mu);
    if (s->shutdown) {
        pthread_mutex_unlock(&s->mu);
        return bs_error("the server is shutting down");
    }
    if (!has_room(s)) {
        pthread_mutex_unlock(&s->mu);
        return bs_error("the server is busy: all %d slots are working and %d requests are waiting",
                        s->cfg.n_slots, s->q_limit);
    }
    t->t_submit = bs_time();
    srv_task_ref(t);
    if (t->emb) {   /* checked for room above like a generation, and in its own queue */
        srv_lora_global(t->lora);   /* embeddings run with the global adapter scales */
        if (!s->cfg.embeddings || s->eq_len >= s->q_limit) {   /* (the session is closed while asleep) */
            pthread_mutex_unlock(&s->mu);
            srv_task_unref(t);
            return bs_error(!s->cfg.embeddings ? "embeddings are off" : "the server is busy: %d embeddings requests are waiting",
                            s->q_limit);
        }
        s->eq[(s->eq_head + s->eq_len++) % s->q_limit] = t;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
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
int srv_n_predict_cap(const srv_config *cfg) { return cfg->n_predict > 0 ? cfg->n_predict : SRV_N_PREDICT_DEFAULT; }
int srv_task_n_predict(const srv_config *cfg, const srv_task *t) {
    const int cap = srv_n_predict_cap(cfg);
    return t->n_predict < 0 || t->n_predict > cap ? cap : t->n_predict;
}

void srv_sched_slots(srv_sched *s, srv_slot_info *out) {
    pthread_mutex_lock(&s->mu);   /* (the counters are reset under it with the task they count) */
    memcpy(out, s->info, (size_t)s->cfg.n_slots * sizeof *out);
    for (int i = 0; i < s->cfg.n_slots; i++) {
        out[i].drafts = s->drafter && s->draft_max > 0;
        out[i].n_decoded = __atomic_load_n(&s->slots[i].n_decoded, __ATOMIC_RELAXED);
        out[i].has_new_line = __atomic_load_n(&s->slots[i].new_line, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&s->mu);
}
