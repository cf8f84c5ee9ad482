/* sampler.c: the sampler chain (see sampler.h for the order and the semantics). */
#include "sample/sampler.h"
#include "sample/grammar.h"
#include "sample/sampler_dry.h"
#include "sample/sampler_stages.h"
#include "model/profile.h"
#include "vulkan/backend.h"
#include "io/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bs_sampler {
    bs_sampler_params p;
    int32_t n_vocab;
    bs_rng rng;
    float *w;                 /* [n_vocab] working logits */
    bs_token_prob *cand;      /* [n_vocab] candidates of the last apply */
    float *alt;               /* [2 n_vocab] the final softmax, XTC's second distribution */
    int n_cand;
    bool sorted;              /* cand in descending order (ties: lower id first) */
    bool applied;
    int32_t *bias_id;
    float *bias;
    int n_bias, cap_bias;
    int32_t *ban;
    int n_ban, cap_ban;
    int32_t *hist;
    size_t n_hist, cap_hist;
    int32_t *count;           /* [n_vocab] occurrences in the penalty window; kept all zero */
    int32_t *seen;            /* [n_vocab] distinct tokens of the window */
    bs_dry dry;
    bs_grammar_state *grammar;  /* NULL, or what constrains the tokens accepted from grammar_base on */
    size_t grammar_base;
    double ahead[BS_SAMPLER_AHEAD];  /* uniforms drawn ahead (bs_sampler_lookahead): taken first */
    int n_ahead;
    float mu;                 /* Mirostat's surprise bound, updated by each token accepted after an apply */
    float *mu_hist;           /* [cap_hist] mu before each accepted token (truncation restores it) */
    bool miro_pending;        /* an apply ran since the last accept: the next token updates mu */
    bool t_done;              /* an ordered chain took the temperature already (or has none): finish's is 1 */
    bs_token_prob *cand2;     /* [n_vocab] an ordered chain's second set after XTC's split (or NULL) */
    float *mix;               /* [n_vocab] their mixture by id; -1 between applies */
};

/* The next uniform of the sampler's stream: one drawn ahead, else a new one. */
static double next_uniform(bs_sampler *s) {
    if (s->n_ahead == 0) return bs_rng_uniform(&s->rng);
    const double u = s->ahead[0];
    memmove(s->ahead, s->ahead + 1, sizeof *s->ahead * (size_t)--s->n_ahead);
    return u;
}

struct bs_draw bs_sampler_draw_steps(const bs_sampler *s, int top_k) {
    return (bs_draw){top_k, s->p.min_keep, s->p.top_p, s->p.min_p, s->p.temp};
}

int bs_sampler_lookahead(bs_sampler *s, int n, double *u) {
    n = BS_MAX(0, BS_MIN(n, BS_SAMPLER_AHEAD));
    while (s->n_ahead < n) s->ahead[s->n_ahead++] = bs_rng_uniform(&s->rng);
    memcpy(u, s->ahead, sizeof *u * (size_t)n);
    return n;
}

bs_sampler_params bs_sampler_default_params(void) {
    return (bs_sampler_params){
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .min_keep = 1,
        .penalty_last_n = 64, .repeat_penalty = 1.0f,
        .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .dry_multiplier = 0.0f, .dry_base = 1.75f, .dry_allowed_length = 2,
        .dry_penalty_last_n = -1, .seed = 0, .typical_p = 1.0f, .top_n_sigma = -1.0f,
        .xtc_probability = 0.0f, .xtc_threshold = 0.1f, .dynatemp_range = 0.0f, .dynatemp_exponent = 1.0f,
        .mirostat = 0, .mirostat_tau = 5.0f, .mirostat_eta = 0.1f,
    };
}

static int check_params(const bs_sampler_params *p) {
    if (isnan(p->temp) || isnan(p->top_p) || isnan(p->min_p) || isnan(p->presence_penalty) ||
        isnan(p->frequency_penalty) || isnan(p->dry_multiplier) || isnan(p->dry_base) ||
        isinf(p->presence_penalty) || isinf(p->frequency_penalty) || isinf(p->dry_multiplier) ||
        !isfinite(p->typical_p) || !isfinite(p->top_n_sigma) || !isfinite(p->xtc_probability) ||
        !isfinite(p->xtc_threshold) || !isfinite(p->dynatemp_range) || !isfinite(p->dynatemp_exponent))
        return bs_error("sampler: parameters must be finite numbers");
    if (p->mirostat < 0 || p->mirostat > 2) return bs_error("sampler: mirostat must be 0, 1 or 2");
    if (!isfinite(p->mirostat_tau) || !isfinite(p->mirostat_eta) || p->mirostat_tau < 0 || p->mirostat_eta < 0)
        return bs_error("sampler: mirostat tau and eta must be finite and >= 0");
    if (p->xtc_probability < 0 || p->xtc_probability > 1) return bs_error("sampler: XTC probability must be in [0, 1]");
    if (p->dynatemp_exponent < 0) return bs_error("sampler: dynamic temperature exponent must be >= 0");
    if (p->dry_multiplier < 0) return bs_error("sampler: DRY multiplier must be >= 0 (0 = off)");
    if (!(p->repeat_penalty > 0) || isinf(p->repeat_penalty))
        return bs_error("sampler: repeat penalty must be > 0 (1 = off), got %g",
                        (double)p->repeat_penalty);
    if (p->penalty_last_n < -1) return bs_error("sampler: penalty window must be >= -1");
    if (p->dry_penalty_last_n < -1) return bs_error("sampler: DRY window must be >= -1");
    if (p->dry_allowed_length < 0) return bs_error("sampler: DRY allowed length must be >= 0");
    if (!memchr(p->order, 0, sizeof p->order)) return bs_error("sampler: the stage order is not terminated");
    for (const char *c = p->order; *c; c++)
        if (!strchr(BS_SAMPLER_STAGES, *c)) return bs_error("sampler: unknown stage '%c' in the order (letters: %s)", *c, BS_SAMPLER_STAGES);
    return 0;
}

/* Whether each stage that can be off is on under p (one definition for the chain, the
 * orders and the device's fast paths). */
static bool penalties_on(const bs_sampler_params *p) {
    return p->penalty_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}
static bool dry_on(const bs_sampler_params *p) {
    return p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}
static bool typical_on(const bs_sampler_params *p) { return p->typical_p > 0 && p->typical_p < 1; }
static bool xtc_on(const bs_sampler_params *p) { return p->xtc_probability > 0 && p->xtc_threshold <= 0.5f; }

/* Whether stage L does anything under p (a stage that does nothing may stand anywhere). */
static bool stage_active(const bs_sampler_params *p, char L, int32_t n_vocab) {
    switch (L) {
    case 's': return p->top_n_sigma > 0;
    case 'k': return p->top_k > 0 && p->top_k < n_vocab;
    case 'y': return typical_on(p);
    case 'p': return p->top_p < 1;
    case 'm': return p->min_p > 0;
    case 'x': return xtc_on(p);
    case 't': return true;
    case 'e': return penalties_on(p);
    case 'd': return dry_on(p);
    default: return false;
    }
}

/* The active stages of order in their order. */
static void active_order(const bs_sampler_params *p, const char *order, int32_t n_vocab, char *out) {
    int n = 0;
    for (const char *c = order; *c; c++)
        if (stage_active(p, *c, n_vocab) && !memchr(out, *c, (size_t)n)) out[n++] = *c;
    out[n] = 0;
}

/* An order that runs what the default chain runs, in its order, is the default (""): the fast
 * chain (and the device's top-k lists) serve it. */
static void settle_order(bs_sampler_params *p, int32_t n_vocab) {
    if (!p->order[0] || p->mirostat) return;
    if (!strchr(p->order, 't')) p->temp = 1, p->dynatemp_range = 0;   /* no temperature stage: 1 (not greedy), as llama.cpp */
    char given[16], def[16];
    active_order(p, p->order, n_vocab, given);
    active_order(p, BS_SAMPLER_STAGES, n_vocab, def);
    if (!strcmp(given, def)) p->order[0] = 0;
}

bs_sampler *bs_sampler_new(const bs_sampler_params *params, int32_t n_vocab) {
    if (n_vocab < 1) {
        bs_error("sampler: vocabulary size %d", n_vocab);
        return NULL;
    }
    bs_sampler_params p = params ? *params : bs_sampler_default_params();
    if (check_params(&p) < 0) return NULL;
    if (p.min_keep < 1) p.min_keep = 1;
    settle_order(&p, n_vocab);
    bs_sampler *s = bs_xcalloc(1, sizeof *s);
    s->p = p;
    s->n_vocab = n_vocab;
    bs_rng_seed(&s->rng, p.seed);
    s->mu = 2.0f * p.mirostat_tau;   /* llama.cpp's start */
    s->w = bs_xmalloc((size_t)n_vocab * sizeof *s->w);
    s->cand = bs_xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->alt = bs_xmalloc(2 * (size_t)n_vocab * sizeof *s->alt);
    s->count = bs_xcalloc((size_t)n_vocab, sizeof *s->count);
    s->seen = bs_xmalloc((size_t)n_vocab * sizeof *s->seen);
    bs_dry_init(&s->dry, n_vocab);
    return s;
}

void bs_sampler_free(bs_sampler *s) {
    if (!s) return;
    free(s->w);
    free(s->cand);
    free(s->cand2);
    free(s->mix);
    free(s->alt);
    free(s->bias_id);
    free(s->bias);
    free(s->ban);
    free(s->hist);
    free(s->mu_hist);
    free(s->count);
    free(s->seen);
    bs_dry_free(&s->dry);
    free(s);
}

const bs_sampler_params *bs_sampler_get_params(const bs_sampler *s) { return &s->p; }
int32_t bs_sampler_n_vocab(const bs_sampler *s) { return s->n_vocab; }
void bs_sampler_set_seed(bs_sampler *s, uint64_t seed) {
    s->miro_pending = false;
    s->p.seed = seed;
    bs_rng_seed(&s->rng, seed);
    s->n_ahead = 0;
}

/* --- logit bias and bans --------------------------------------------------------------------- */

int bs_sampler_set_logit_bias(bs_sampler *s, int32_t id, float bias) {
    if (id < 0 || id >= s->n_vocab) return bs_error("logit bias: token %d out of range", id);
    if (isnan(bias) || bias == INFINITY) return bs_error("logit bias: bias must be finite or -inf");
    for (int i = 0; i < s->n_bias; i++)
        if (s->bias_id[i] == id) {
            s->bias[i] = bias;
            return 0;
        }
    if (s->n_bias == s->cap_bias) {
        s->cap_bias = s->cap_bias ? 2 * s->cap_bias : 16;
        s->bias_id = bs_xrealloc(s->bias_id, (size_t)s->cap_bias * sizeof *s->bias_id);
        s->bias = bs_xrealloc(s->bias, (size_t)s->cap_bias * sizeof *s->bias);
    }
    s->bias_id[s->n_bias] = id;
    s->bias[s->n_bias++] = bias;
    return 0;
}

void bs_sampler_clear_logit_bias(bs_sampler *s) { s->n_bias = 0; }

int bs_sampler_ban_once(bs_sampler *s, int32_t id) {
    if (id < 0 || id >= s->n_vocab) return bs_error("ban: token %d out of range", id);
    if (s->n_ban == s->cap_ban) {
        s->cap_ban = s->cap_ban ? 2 * s->cap_ban : 8;
        s->ban = bs_xrealloc(s->ban, (size_t)s->cap_ban * sizeof *s->ban);
    }
    s->ban[s->n_ban++] = id;
    return 0;
}

/* --- history --------------------------------------------------------------------------------- */

void bs_sampler_accept(bs_sampler *s, int32_t id) { bs_sampler_accept_many(s, &id, 1); }

/* Mirostat's update for the token that joins after an apply: its surprise in that distribution
 * against the target (a token the distribution did not hold, e.g. forced, teaches nothing). */
static void mirostat_learn(bs_sampler *s, int32_t id) {
    const float p = bs_sampler_prob(s, id);
    if (p > 0) s->mu -= s->p.mirostat_eta * (-log2f(p) - s->p.mirostat_tau);
}

void bs_sampler_accept_many(bs_sampler *s, const int32_t *ids, size_t n) {
    if (s->n_hist + n > s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist : 256;
        while (cap < s->n_hist + n) cap *= 2;
        s->hist = bs_xrealloc(s->hist, cap * sizeof *s->hist);
        s->mu_hist = bs_xrealloc(s->mu_hist, cap * sizeof *s->mu_hist);
        s->cap_hist = cap;
    }
    for (size_t i = 0; i < n; i++) s->mu_hist[s->n_hist + i] = s->mu;
    if (n == 1 && s->miro_pending && s->p.mirostat) mirostat_learn(s, ids[0]);
    s->miro_pending = false;
    if (n) memcpy(s->hist + s->n_hist, ids, n * sizeof *ids);
    s->n_hist += n;
    for (size_t i = 0; s->grammar && i < n; i++) bs_grammar_accept(s->grammar, ids[i]);
}

void bs_sampler_truncate(bs_sampler *s, size_t n) {
    s->miro_pending = false;   /* what was applied is not the next token's distribution any more */
    if (n >= s->n_hist) return;
    s->n_hist = n;
    s->mu = s->mu_hist[n];
    if (!s->grammar) return;
    /* the grammar state of a shorter history: replay what is left since it was set */
    if (s->grammar_base > n) s->grammar_base = n;
    bs_grammar_state_reset(s->grammar);
    for (size_t i = s->grammar_base; i < n; i++) bs_grammar_accept(s->grammar, s->hist[i]);
}

void bs_sampler_set_grammar(bs_sampler *s, bs_grammar_state *g) {
    s->grammar = g;
    s->grammar_base = s->n_hist;
}

int bs_sampler_grammar_prefix(bs_sampler *s, const int32_t *ids, int n) {
    return s->grammar ? bs_grammar_valid_prefix(s->grammar, ids, n) : n;
}
size_t bs_sampler_history_len(const bs_sampler *s) { return s->n_hist; }
float bs_sampler_mirostat_mu(const bs_sampler *s) { return s->mu; }
const int32_t *bs_sampler_history(const bs_sampler *s) { return s->hist; }

/* --- DRY breakers ---------------------------------------------------------------------------- */

int bs_sampler_set_dry_breakers(bs_sampler *s, const char *const *strings, int n,
                                const bs_sampler_vocab *vocab) {
    return bs_dry_set_strings(&s->dry, strings, n, vocab);
}
int bs_sampler_add_dry_breaker(bs_sampler *s, int32_t head, const int32_t *tail, int n_tail) {
    return bs_dry_add(&s->dry, head, tail, n_tail);
}
void bs_sampler_clear_dry_breakers(bs_sampler *s) { bs_dry_clear(&s->dry); }
int bs_sampler_n_dry_breakers(const bs_sampler *s) { return s->dry.n_br; }

/* --- ordering helpers ------------------------------------------------------------------------ */

/* The one total order every filter uses: higher logit first, then lower id. */
static inline bool better(const bs_token_prob *a, const bs_token_prob *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_better(const void *a, const void *b) {
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Min-heap on `better`: the worst kept candidate sits at the root. */
static void heap_down(bs_token_prob *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(&h[m], &h[l])) m = l;
        if (r < n && better(&h[m], &h[r])) m = r;
        if (m == i) return;
        bs_token_prob t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

/* Move the k best of a[0..n) to a[0..k), sorted. O(n log k), only the head is sorted. */
static int select_top(bs_token_prob *a, int n, int k) {
    if (k >= n) {
        qsort(a, (size_t)n, sizeof *a, cmp_better);
        return n;
    }
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(a, k, i);
    for (int i = k; i < n; i++)
        if (better(&a[i], &a[0])) {
            a[0] = a[i];
            heap_down(a, k, 0);
        }
    qsort(a, (size_t)k, sizeof *a, cmp_better);
    return k;
}

/* --- the chain ------------------------------------------------------------------------------- */

/* A working logit as the later steps need it: never NaN (out of the race), never +inf (the
 * softmax takes differences to the max); -inf stays banned. */
static inline float tame(float x) { return isnan(x) ? -INFINITY : x > FLT_MAX ? FLT_MAX : x; }

static void load_logits(bs_sampler *s, const float *logits) {
    for (int32_t i = 0; i < s->n_vocab; i++) s->w[i] = tame(logits[i]);
    for (int i = 0; i < s->n_bias; i++) s->w[s->bias_id[i]] = tame(s->w[s->bias_id[i]] + s->bias[i]);
    for (int i = 0; i < s->n_ban; i++) s->w[s->ban[i]] = -INFINITY;
    s->n_ban = 0;
}

static size_t window(const bs_sampler *s, int32_t last_n) {
    return last_n < 0 ? s->n_hist : BS_MIN((size_t)last_n, s->n_hist);
}

static void apply_penalties(bs_sampler *s) {
    const bs_sampler_params *p = &s->p;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    size_t n = window(s, p->penalty_last_n);
    if (n == 0) return;
    const int32_t *t = s->hist + s->n_hist - n;
    int n_seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0 || t[i] >= s->n_vocab) continue;
        if (s->count[t[i]]++ == 0) s->seen[n_seen++] = t[i];
    }
    for (int i = 0; i < n_seen; i++) {
        int32_t id = s->seen[i];
        float *x = &s->w[id];
        const float count = (float)s->count[id];
        s->count[id] = 0;
        if (*x == -INFINITY) continue;   /* banned or masked: stays so (-inf - -inf would be NaN) */
        *x = *x <= 0 ? *x * p->repeat_penalty : *x / p->repeat_penalty;
        *x = tame(*x - (count * p->frequency_penalty + p->presence_penalty));
    }
}

static void apply_dry(bs_sampler *s) {
    const bs_sampler_params *p = &s->p;
    if (p->dry_multiplier == 0.0f || p->dry_base < 1.0f || p->dry_penalty_last_n == 0) return;
    size_t n = window(s, p->dry_penalty_last_n);
    if (n == 0) return;
    bs_dry_apply(&s->dry, s->hist + s->n_hist - n, n, p->dry_multiplier, p->dry_base,
                 p->dry_allowed_length, s->w);
}

/* The first id holding the largest working logit (w has no NaN: tame). Two passes the compiler
 * turns into vector code: the max as a branch-free reduction, then the scan for its first
 * position (bounded all the same). */
static int32_t argmax_first(const float *w, int32_t n) {
    float mx = w[0];
    for (int32_t i = 1; i < n; i++) mx = w[i] > mx ? w[i] : mx;
    int32_t i = 0;
    while (i < n - 1 && w[i] != mx) i++;
    return i;
}

static int greedy(bs_sampler *s) {
    const int32_t best = argmax_first(s->w, s->n_vocab);
    if (s->w[best] == -INFINITY) return bs_error("sampler: every token is banned");
    s->cand[0] = (bs_token_prob){best, s->w[best], 1.0f};
    s->n_cand = 1;
    s->sorted = true;
    return 1;
}

/* Candidates = every token that is not banned, in id order; or the top k, sorted. */
/* The k best of the working logits straight into cand[0..k), sorted: one pass with a heap, no
 * copy of the vocabulary. Banned tokens are skipped. Returns how many (< k if fewer remain). */
static int heap_top_k(bs_sampler *s, int k) {
    bs_token_prob *h = s->cand;
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (s->w[i] == -INFINITY) continue;
        bs_token_prob t = {i, s->w[i], 0.0f};
        if (n < k) {
            h[n++] = t;
            if (n == k)
                for (int j = k / 2 - 1; j >= 0; j--) heap_down(h, k, j);
        } else if (better(&t, &h[0])) {
            h[0] = t;
            heap_down(h, k, 0);
        }
    }
    qsort(h, (size_t)n, sizeof *h, cmp_better);
    return n;
}

/* Candidates = every token that is not banned, in id order. */
static int gather_all(bs_sampler *s) {
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->w[i] != -INFINITY) s->cand[n++] = (bs_token_prob){i, s->w[i], 0.0f};
    s->n_cand = n;
    s->sorted = false;
    return n ? 0 : bs_error("sampler: every token is banned");
}

/* Candidates = every token that is not banned, in id order; or the top k, sorted. */
static int gather(bs_sampler *s) {
    int k = s->p.top_k;
    if (!(k > 0 && k < s->n_vocab)) {
        if (gather_all(s) < 0) return -1;
        if (k > 0) {   /* k covers the whole vocabulary: just the order */
            qsort(s->cand, (size_t)s->n_cand, sizeof *s->cand, cmp_better);
            s->sorted = true;
        }
        return 0;
    }
    s->n_cand = heap_top_k(s, BS_MIN(k, s->n_vocab));   /* (min_keep is top-p's and min-p's, as in llama.cpp) */
    s->sorted = true;
    return s->n_cand ? 0 : bs_error("sampler: every token is banned");
}

/* Store exp(logit - max) in .p; return the sum (double, candidate order). */
static double weights(bs_token_prob *c, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = BS_MAX(mx, c[i].logit);
    double z = 0;
    for (int i = 0; i < n; i++) z += c[i].p = expf(c[i].logit - mx);
    return z;
}

/* Mass-weighted quickselect: reorder c[0..n) so that c[0..m) holds the best tokens whose weight
 * (.p) sums to at least `need`, with m as small as the order allows. Expected O(n). */
static int select_mass(bs_token_prob *c, int n, double need) {
    int lo = 0, hi = n;
    while (hi - lo > 16) {
        int mid = lo + (hi - lo) / 2;
        /* median of three as pivot, moved to hi-1 */
        bs_token_prob *a = &c[lo], *b = &c[mid], *d = &c[hi - 1], *m;
        if (better(a, b)) m = better(b, d) ? b : better(a, d) ? d : a;
        else m = better(a, d) ? a : better(b, d) ? d : b;
        bs_token_prob t = *m; *m = c[hi - 1]; c[hi - 1] = t;
        const bs_token_prob piv = c[hi - 1];
        int j = lo;
        double mass = 0;
        for (int i = lo; i < hi - 1; i++)
            if (better(&c[i], &piv)) {
                mass += c[i].p;
                t = c[i]; c[i] = c[j]; c[j] = t;
                j++;
            }
        c[hi - 1] = c[j]; c[j] = piv;
        if (mass >= need) hi = j;
        else if (mass + piv.p >= need) return j + 1;
        else { need -= mass + piv.p; lo = j + 1; }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_better);
    for (int i = lo; i < hi; i++) {
        need -= c[i].p;
        if (need <= 0) return i + 1;
    }
    return hi;
}

static void apply_typical(bs_sampler *s) {
    if (!typical_on(&s->p)) return;
    s->n_cand = bs_stage_typical(s->cand, s->n_cand, s->p.typical_p, BS_MAX(s->p.min_keep, 1));
    s->sorted = false;   /* in the order of typicality now */
}

static void apply_top_p(bs_sampler *s) {
    float top_p = s->p.top_p;
    if (top_p >= 1.0f) return;
    bs_token_prob *c = s->cand;
    int n = s->n_cand;
    double z = weights(c, n);
    if (!s->sorted) {
        /* a slightly larger target keeps a superset of the exact cut, made below in order */
        n = select_mass(c, n, (double)top_p * z * (1 + 1e-9));
        if (n < s->p.min_keep) n = select_top(c, s->n_cand, BS_MIN(s->p.min_keep, s->n_cand));
        else qsort(c, (size_t)n, sizeof *c, cmp_better);   /* c[0..n) are the best n */
        s->sorted = true;
    }
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].p / z;
        if (cum >= top_p && i + 1 >= s->p.min_keep) {
            n = i + 1;
            break;
        }
    }
    s->n_cand = n;
}

static void apply_min_p(bs_sampler *s) {
    float min_p = s->p.min_p;
    if (min_p <= 0.0f) return;
    bs_token_prob *c = s->cand;
    float mx = -INFINITY;
    for (int i = 0; i < s->n_cand; i++) mx = BS_MAX(mx, c[i].logit);
    const float lim = mx + logf(min_p);
    int pass = 0;
    for (int i = 0; i < s->n_cand; i++) pass += c[i].logit >= lim;
    if (pass < s->p.min_keep) {   /* too few pass: keep the best min_keep */
        if (!s->sorted) select_top(c, s->n_cand, BS_MIN(s->p.min_keep, s->n_cand));
        s->sorted = true;
        s->n_cand = BS_MIN(s->p.min_keep, s->n_cand);
        return;
    }
    int n = 0;
    for (int i = 0; i < s->n_cand; i++)
        if (c[i].logit >= lim) c[n++] = c[i];
    s->n_cand = n;
}

/* The temperature of c[from..n): the fixed one, or the dynamic one of those candidates. */
static float temp_of(const bs_sampler *s, int from) {
    const bs_sampler_params *p = &s->p;
    if (s->t_done) return 1.0f;
    return p->dynatemp_range > 0 ? bs_stage_dynatemp(s->cand + from, s->n_cand - from, p->temp, p->dynatemp_range,
                                                     p->dynatemp_exponent)
                                 : p->temp;
}

/* XTC and the temperature, then the final softmax (bs_stage_softmax: differences to the max
 * taken before dividing, so a tiny temperature cannot overflow). With XTC the distribution is
 * the mixture of the candidates as they are and of those its cut leaves (each at its own
 * temperature, as the dynamic one differs); candidates left at probability 0 are dropped. */
static void finish(bs_sampler *s, bool xtc) {
    bs_token_prob *c = s->cand;
    int cut = 0;
    if (xtc) {
        if (!s->sorted) qsort(c, (size_t)s->n_cand, sizeof *c, cmp_better);
        s->sorted = true;
        cut = bs_stage_xtc_cut(c, s->n_cand, s->p.xtc_threshold, BS_MAX(s->p.min_keep, 1));
    }
    float *all = s->alt, *left = s->alt + s->n_vocab;
    if (cut) bs_stage_softmax(c, cut, s->n_cand, temp_of(s, cut), left);
    const float t = temp_of(s, 0), P = cut ? s->p.xtc_probability : 0.0f;
    bs_stage_softmax(c, 0, s->n_cand, t, all);
    int n = 0;
    for (int i = 0; i < s->n_cand; i++) {
        const float p = cut ? (1 - P) * all[i] + (i >= cut ? P * left[i] : 0.0f) : all[i];
        if (!(p > 0) && (cut || !(t > 0))) continue;   /* a dynamic temperature of 0 keeps the best; XTC at 1 drops the cut */
        c[n] = c[i];
        c[n].p = p;
        if (t > 0) c[n].logit /= t;
        n++;
    }
    s->n_cand = n;
}

/* Mirostat v1's k: the top-k that gives surprise mu under the Zipf law fitted to the m best
 * (c[0..m) sorted), as llama.cpp computes it; its limit where the fitted exponent is 1. */
static int mirostat_k(const bs_token_prob *c, int m, int n, float mu, int32_t n_vocab) {
    double tb = 0, tt = 0;
    for (int i = 0; i + 1 < m; i++) {
        const double t = log((i + 2.0) / (i + 1.0));
        tb += t * ((double)c[i].logit - c[i + 1].logit);   /* log(p_i / p_i+1) */
        tt += t * t;
    }
    const double s_hat = tt > 0 ? tb / tt : 0.0, eps = s_hat - 1;
    const double k = fabs(eps) < 1e-9 ? exp2(mu) / log((double)n_vocab)
                                      : pow(eps * exp2(mu) / (1 - pow((double)n_vocab, -eps)), 1 / s_hat);
    return !(k >= 1) ? 1 : k >= n ? n : (int)k;
}

/* Every allowed token into cand, its logit less the best's at the temperature (the difference
 * taken first: a tiny temperature or a logit of FLT_MAX cannot overflow); returns how many. */
static int tempered_all(bs_sampler *s) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) mx = s->w[i] > mx ? s->w[i] : mx;
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->w[i] != -INFINITY) s->cand[n++] = (bs_token_prob){i, (s->w[i] - mx) / s->p.temp, 0.0f};
    return n;
}

/* Mirostat over every allowed token at the temperature: v2 keeps those whose surprise is at most
 * mu (at least the best), v1 the top k of mirostat_k; sorted, renormalised. */
static int apply_mirostat(bs_sampler *s) {
    bs_token_prob *c = s->cand;
    const int n = tempered_all(s);
    if (n == 0) return bs_error("sampler: every token is banned");
    int keep = 0;
    if (s->p.mirostat == 2) {
        const double lim = weights(c, n) * exp2(-(double)s->mu);   /* p >= 2^-mu */
        for (int i = 0; i < n; i++)
            if (c[i].p >= lim) c[keep++] = c[i];
        if (keep) qsort(c, (size_t)keep, sizeof *c, cmp_better);
        else keep = select_top(c, n, 1);
    } else {
        const int m = select_top(c, n, BS_MIN(100, n));
        keep = mirostat_k(c, m, n, s->mu, s->n_vocab);
        if (keep > m) select_top(c, tempered_all(s), keep);   /* (select_top leaves the tail unusable) */
    }
    const double z = weights(c, keep);
    for (int i = 0; i < keep; i++) c[i].p = (float)(c[i].p / z);
    s->n_cand = keep;
    s->sorted = true;
    return keep;
}

/* top-n-sigma over the candidates (a stage of an ordered chain: after top-k it sees the k) */
static void cand_top_n_sigma(bs_sampler *s) {
    bs_token_prob *c = s->cand;
    double sum = 0, sq = 0;
    float mx = -INFINITY;
    for (int i = 0; i < s->n_cand; i++) sum += c[i].logit, mx = BS_MAX(mx, c[i].logit);
    if (s->n_cand < 2) return;
    const double mean = sum / s->n_cand;
    for (int i = 0; i < s->n_cand; i++) sq += (c[i].logit - mean) * (c[i].logit - mean);
    const float lim = mx - s->p.top_n_sigma * (float)sqrt(sq / s->n_cand);
    int n = 0;
    for (int i = 0; i < s->n_cand; i++)
        if (c[i].logit >= lim) c[n++] = c[i];
    s->n_cand = n;
}

/* The temperature as a stage: the candidates' logits less the best's, divided (the difference
 * first: a tiny temperature cannot overflow; finite, so later stages' sums stay numbers). A
 * dynamic temperature of 0 keeps the best alone, as the default chain does. */
static void cand_temper(bs_sampler *s) {
    const float t = temp_of(s, 0);
    bs_token_prob *c = s->cand;
    s->t_done = true;
    if (!(t > 0)) {
        int best = 0;
        for (int i = 1; i < s->n_cand; i++)
            if (better(&c[i], &c[best])) best = i;
        c[0] = c[best];
        c[0].logit = 0;
        s->n_cand = 1;
        s->sorted = true;
        return;
    }
    float mx = -INFINITY;
    for (int i = 0; i < s->n_cand; i++) mx = BS_MAX(mx, c[i].logit);
    for (int i = 0; i < s->n_cand; i++) c[i].logit = BS_MAX((c[i].logit - mx) / t, -FLT_MAX);
}

/* The stages of o (letters, up to XTC's) on the candidates, in that order. */
static void run_stages(bs_sampler *s, const char *o) {
    for (; *o && *o != 'x'; o++) {
        switch (*o) {
        case 's': if (s->p.top_n_sigma > 0) cand_top_n_sigma(s); break;
        case 'k':
            if (s->p.top_k > 0 && s->p.top_k < s->n_cand) {
                s->n_cand = select_top(s->cand, s->n_cand, s->p.top_k);
                s->sorted = true;
            }
            break;
        case 'y': apply_typical(s); break;
        case 'p': apply_top_p(s); break;
        case 'm': apply_min_p(s); break;
        case 't': cand_temper(s); break;
        default: break;
        }
    }
}

/* The union of the two sets after XTC's split: A in cand[0..na) (weight 1 - P), B in
 * b[0..nb) (weight P), each with its final p; into cand, p the mixture's. */
static void mix_sets(bs_sampler *s, int na, const bs_token_prob *b, int nb, float P) {
    bs_token_prob *c = s->cand;
    float *m = s->mix;
    int n = na;
    for (int i = 0; i < na; i++) m[c[i].id] = (1 - P) * c[i].p;
    for (int j = 0; j < nb; j++) {
        if (m[b[j].id] >= 0) {
            m[b[j].id] += P * b[j].p;
        } else {
            c[n] = b[j];
            m[c[n++].id] = P * b[j].p;
        }
    }
    for (int i = 0; i < n; i++) {
        c[i].p = m[c[i].id];
        m[c[i].id] = -1;   /* (mix is all -1 between calls) */
    }
    s->n_cand = n;
    s->sorted = false;
}

/* A chain in the order p.order (not the default's): every allowed token, then each stage on the
 * candidates as llama.cpp runs them. XTC's coin splits the chain: the candidates as they are and
 * without XTC's cut each go through the stages after it, and the draw is their mixture. */
static void apply_ordered(bs_sampler *s) {
    const char *o = s->p.order, *x = xtc_on(&s->p) ? strchr(o, 'x') : NULL;
    s->t_done = !strchr(o, 't');   /* no temperature stage: none */
    run_stages(s, o);
    int cut = 0;
    if (x) {
        if (!s->sorted) qsort(s->cand, (size_t)s->n_cand, sizeof *s->cand, cmp_better);
        s->sorted = true;
        cut = bs_stage_xtc_cut(s->cand, s->n_cand, s->p.xtc_threshold, BS_MAX(s->p.min_keep, 1));
    }
    if (!cut) {
        if (x) run_stages(s, x + 1);
        finish(s, false);
        return;
    }
    if (!s->cand2) {
        s->cand2 = bs_xmalloc((size_t)s->n_vocab * sizeof *s->cand2);
        s->mix = bs_xmalloc((size_t)s->n_vocab * sizeof *s->mix);
        for (int32_t i = 0; i < s->n_vocab; i++) s->mix[i] = -1;
    }
    bs_token_prob *a = s->cand, *b = s->cand2;
    const int nb = s->n_cand - cut;
    const bool t_done = s->t_done;
    memcpy(b, a + cut, (size_t)nb * sizeof *b);
    run_stages(s, x + 1);   /* A: as they are */
    finish(s, false);
    const int na = s->n_cand;
    s->cand = b, s->n_cand = nb, s->sorted = true, s->t_done = t_done;
    run_stages(s, x + 1);   /* B: without the cut */
    finish(s, false);
    const int nb_left = s->n_cand;
    s->cand = a;
    mix_sets(s, na, b, nb_left, s->p.xtc_probability);
}

static int apply_chain(bs_sampler *s, const float *logits) {
    s->applied = false;
    load_logits(s, logits);
    if (s->grammar && bs_grammar_mask(s->grammar, s->w, s->n_vocab) < 0) return -1;   /* first: nothing else sees banned tokens */
    if (!s->p.mirostat) {   /* llama.cpp's Mirostat chain has no penalties; an order runs them first if it has them */
        if (!s->p.order[0] || strchr(s->p.order, 'e')) apply_penalties(s);
        if (!s->p.order[0] || strchr(s->p.order, 'd')) apply_dry(s);
    }
    if (s->p.temp <= 0.0f) {
        if (greedy(s) < 0) return -1;
    } else if (s->p.mirostat) {
        if (apply_mirostat(s) < 0) return -1;
    } else {
        s->t_done = false;
        if (s->p.order[0]) {
            if (gather_all(s) < 0) return -1;
            apply_ordered(s);
        } else {
            if (s->p.top_n_sigma > 0) bs_stage_top_n_sigma(s->w, s->n_vocab, s->p.top_n_sigma);
            if (gather(s) < 0) return -1;
            apply_typical(s);
            apply_top_p(s);
            apply_min_p(s);
            finish(s, xtc_on(&s->p));
        }
    }
    s->applied = true;
    s->miro_pending = true;
    return s->n_cand;
}

/* Whether the chain takes the logits as they come (no grammar, bias, bans, penalties, DRY). */
static bool logits_as_given(const bs_sampler *s) {
    const bs_sampler_params *p = &s->p;
    const bool penalties = !p->mirostat && penalties_on(p), dry = !p->mirostat && dry_on(p);
    return !s->grammar && s->n_bias == 0 && s->n_ban == 0 && !penalties && !dry;
}

bool bs_sampler_plain_greedy(const bs_sampler *s) { return s->p.temp <= 0.0f && logits_as_given(s); }

/* gather's k: top_k, at most the vocabulary (min_keep does not widen it: llama.cpp's top-k) */
static int top_k_of(const bs_sampler *s) { return BS_MIN(s->p.top_k, s->n_vocab); }

/* Stages the device's chain (bs_draw: top-k, top-p, min-p, temperature) does not run. */
static bool extra_stages(const bs_sampler_params *p) {
    return p->order[0] || p->top_n_sigma > 0 || typical_on(p) || xtc_on(p) || p->dynatemp_range > 0 ||
           p->mirostat;
}

int bs_sampler_top_k_only(const bs_sampler *s, int max) {
    if (s->p.temp <= 0.0f || s->p.top_k <= 0 || s->p.top_k >= s->n_vocab || !logits_as_given(s) || extra_stages(&s->p))
        return 0;
    const int k = top_k_of(s);
    return k <= max ? k : 0;
}

int32_t bs_sampler_sample_top(bs_sampler *s, const int32_t *ids, const float *logits, int n) {
    return bs_sampler_apply_top(s, ids, logits, n) < 0 ? -1 : bs_sampler_pick(s);
}

int bs_sampler_apply_top(bs_sampler *s, const int32_t *ids, const float *logits, int n) {
    const uint64_t t0 = bs_prof_begin();
    s->applied = false;
    /* what gather's heap_top_k would have kept (load_logits' clamp; no NaN or -inf come) */
    n = BS_MIN(n, top_k_of(s));
    for (int i = 0; i < n; i++) s->cand[i] = (bs_token_prob){ids[i], logits[i] > FLT_MAX ? FLT_MAX : logits[i], 0.0f};
    s->n_cand = n;
    s->sorted = true;
    if (n > 0) {   /* the rest of the chain as apply_chain runs it after gather */
        s->t_done = false;
        apply_typical(s);
        apply_top_p(s);
        apply_min_p(s);
        finish(s, xtc_on(&s->p));
        s->applied = true;
    }
    bs_prof_end(BS_PROF_SAMPLE, t0);
    return n > 0 ? s->n_cand : bs_error("sampler: every token is banned");
}

int bs_sampler_apply(bs_sampler *s, const float *logits) {
    const uint64_t t0 = bs_prof_begin();
    const int r = apply_chain(s, logits);
    bs_prof_end(BS_PROF_SAMPLE, t0);
    return r;
}

/* The positive weights' sum, and the index whose running sum first passes x (in index order). */
static double draw_mass(const float *w, int n) {
    double total = 0;
    for (int i = 0; i < n; i++)
        if (w[i] > 0) total += w[i];
    return total > 0 && !isinf(total) ? total : 0.0;
}

static int32_t draw_scan(const int32_t *ids, const float *w, int n, double x) {
    double cum = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (!(w[i] > 0)) continue;
        last = i;
        cum += w[i];
        if (x < cum) break;
    }
    return ids ? ids[last] : last;
}

int32_t bs_sampler_draw(bs_sampler *s, const int32_t *ids, const float *w, int n) {
    const double total = draw_mass(w, n);
    if (total == 0.0) return bs_error("sampler: nothing to draw from");
    return draw_scan(ids, w, n, next_uniform(s) * total);
}

int32_t bs_sampler_draw_u(const int32_t *ids, const float *w, int n, double u) {
    const double total = draw_mass(w, n);
    if (total == 0.0) return bs_error("sampler: nothing to draw from");
    return draw_scan(ids, w, n, u * total);
}

int32_t bs_sampler_pick(bs_sampler *s) {
    if (!s->applied) return bs_error("sampler: pick before apply");
    if (s->p.temp <= 0.0f) return s->cand[0].id;
    double total = 0;
    for (int i = 0; i < s->n_cand; i++) total += s->cand[i].p;
    double u = next_uniform(s) * total, cum = 0;
    int last = 0;
    for (int i = 0; i < s->n_cand; i++) {
        if (s->cand[i].p <= 0) continue;
        last = i;
        cum += s->cand[i].p;
        if (u < cum) break;
    }
    return s->cand[last].id;
}

int32_t bs_sampler_sample(bs_sampler *s, const float *logits) {
    if (bs_sampler_apply(s, logits) < 0) return -1;
    return bs_sampler_pick(s);
}

const bs_token_prob *bs_sampler_candidates(const bs_sampler *s, int *n) {
    *n = s->applied ? s->n_cand : 0;
    return s->cand;
}

float bs_sampler_prob(const bs_sampler *s, int32_t id) {
    if (!s->applied) return 0;
    for (int i = 0; i < s->n_cand; i++)
        if (s->cand[i].id == id) return s->cand[i].p;
    return 0;
}

void bs_sampler_probs_dense(const bs_sampler *s, float *out) {
    memset(out, 0, (size_t)s->n_vocab * sizeof *out);
    if (!s->applied) return;
    for (int i = 0; i < s->n_cand; i++) out[s->cand[i].id] = s->cand[i].p;
}

double bs_sampler_uniform(bs_sampler *s) { return next_uniform(s); }

/* --- raw log-probabilities -------------------------------------------------------------------- */

int bs_top_logprobs(const float *logits, int32_t n_vocab, int n, int32_t *ids, float *logprobs,
                    int32_t id, float *out_id_logprob) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double z = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isnan(logits[i])) z += exp((double)logits[i] - mx);
    const double lz = (double)mx + log(z);
    if (out_id_logprob && id >= 0 && id < n_vocab)
        *out_id_logprob = isnan(logits[id]) ? -INFINITY : (float)(logits[id] - lz);
    n = BS_MIN(n, n_vocab);
    if (n <= 0) return 0;
    bs_token_prob *h = bs_xmalloc((size_t)n * sizeof *h);
    for (int i = 0; i < n; i++) h[i] = (bs_token_prob){i, isnan(logits[i]) ? -INFINITY : logits[i], 0};
    for (int i = n / 2 - 1; i >= 0; i--) heap_down(h, n, i);
    for (int32_t i = n; i < n_vocab; i++) {
        bs_token_prob t = {i, isnan(logits[i]) ? -INFINITY : logits[i], 0};
        if (better(&t, &h[0])) {
            h[0] = t;
            heap_down(h, n, 0);
        }
    }
    qsort(h, (size_t)n, sizeof *h, cmp_better);
    for (int i = 0; i < n; i++) {
        ids[i] = h[i].id;
        logprobs[i] = (float)(h[i].logit - lz);
    }
    free(h);
    return n;
}
