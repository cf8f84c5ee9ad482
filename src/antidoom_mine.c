/* antidoom_mine.c: `bitspark antidoom mine`: run raw completions of (primed) prompts, detect the
 * first doom loop with antidoom's detector, and write one FTPO pair per loop: the context
 * before the first token of the first repeat, that token as rejected, and antidoom's chosen
 * alternatives from the model's own distribution at that position (antidoom.h has the format).
 *
 * The prompt's text is part of what the detector scans, so a primed prompt (text that already
 * repeats a phrase) yields the start of the next copy as the rejected token. The position's
 * logits come from rewinding the session there (loop_guard.h), bit-identical to a straight
 * evaluation of the context. */
#include "antidoom.h"
#include "cli.h"
#include "utf8.h"
#include "util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cli_gen_opts g;
    const char *prompts, *out, *primes_out;
    int n_predict, prime_tokens, prime_copies;
    bool generate_primes;
    ad_chosen_params ch;
} mine_opts;

void ad_mine_help(void) {
    printf("antidoom mine: one pair per prompt whose completion falls into a loop\n"
           "  --prompts FILE          one prompt per line (raw text, a JSON string, or a JSON object\n"
           "                          with \"prompt\"/\"text\"/\"context\"/\"conversations\")\n"
           "  -o FILE                 pairs as JSON lines (antidoom's format + the ids used)\n"
           "  -n N                    max tokens per completion (512)\n"
           "  --generate-primes       first turn each prompt into a priming context: the prompt,\n"
           "                          then its own greedy continuation cut at a sentence end,\n"
           "                          repeated --prime-copies times\n"
           "  --prime-tokens N        tokens generated for the primed phrase (24)\n"
           "  --prime-copies K        copies of the phrase in the priming context (3)\n"
           "  --primes-out FILE       also write the priming contexts as JSON lines\n"
           "  --chosen-top-k K        candidates from the top of the distribution (20)\n"
           "  --chosen-min-p P        floor relative to the best remaining candidate (0.01)\n"
           "  --chosen-max N          chosen tokens per pair (20)\n"
           "  --chosen-min-chars N    min stripped decoded length (1)\n"
           "  --chosen-require-alnum  chosen text must contain a letter or digit\n"
           "  --loop-min-repeats R, --loop-min-chars C, --loop-max-period P   the detector\n"
           "  sampling and model options as for `run` (default here: --temp 0, greedy)\n");
}

static int parse(mine_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->g.sp.temp = 0;
    o->n_predict = 512;
    o->prime_tokens = 24;
    o->prime_copies = 3;
    o->ch = ad_chosen_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_gen_parse(&o->g, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        long x;
        double f;
        if (!strcmp(a, "--prompts")) {
            if (!(o->prompts = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!(o->out = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--primes-out")) {
            if (!(o->primes_out = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--generate-primes")) {
            o->generate_primes = true;
        } else if (!strcmp(a, "--chosen-require-alnum")) {
            o->ch.require_alnum = true;
        } else if (!strcmp(a, "--chosen-min-p")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_float(a, v, &f)) return -1;
            if (!(f >= 0 && f <= 1)) return bs_error("%s: expected a value in [0, 1]", a);
            o->ch.min_p = (float)f;
        } else {
            static const char *names[] = {"-n", "--prime-tokens", "--prime-copies", "--chosen-top-k",
                                          "--chosen-max", "--chosen-min-chars"};
            int *dst[] = {&o->n_predict, &o->prime_tokens, &o->prime_copies, &o->ch.top_k, &o->ch.max_n,
                          &o->ch.min_chars};
            size_t k = 0;
            while (k < BS_ARRAY_LEN(names) && strcmp(a, names[k])) k++;
            if (k == BS_ARRAY_LEN(names)) return bs_error("unknown option '%s' (see bitspark help antidoom)", a);
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, k == 5 ? 0 : 1, 1 << 20, &x)) return -1;
            *dst[k] = (int)x;
        }
    }
    if (!o->g.model) return bs_error("no model given (-m FILE)");
    if (!o->prompts) return bs_error("no prompts given (--prompts FILE)");
    if (!o->out) return bs_error("no output given (-o FILE)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;   /* mining drives its own guard */
    return 0;
}

/* The prompt followed by K copies of its own continuation (cut after the last sentence end). */
static char *make_prime(cli_gen *g, const char *prompt, const mine_opts *o) {
    if (ad_start(g, prompt, NULL, NULL)) return NULL;
    int32_t *gen = bs_xmalloc((size_t)o->prime_tokens * sizeof *gen);
    int n = 0;
    while (n < o->prime_tokens) {
        int32_t id = bs_sampler_sample(g->smp, g->logits);
        if (id < 0 || bs_token_is_eog(g->tok, id)) break;
        bs_sampler_accept(g->smp, id);
        gen[n++] = id;
        if (n < o->prime_tokens && bs_eval(g->sess, &id, 1, BS_LOGITS_LAST, g->logits, NULL)) break;
    }
    char *text = NULL;
    size_t len = 0;
    if (bs_detokenize(g->tok, gen, (size_t)n, false, &text, &len)) { free(gen); return NULL; }
    free(gen);
    size_t cut = len;
    for (size_t i = len; i > 0; i--)
        if (strchr(".!?\n", text[i - 1])) { cut = i; break; }
    if (cut == 0) cut = len;
    if (cut == 0) {   /* nothing generated: repeat the prompt's last word instead */
        free(text);
        const char *sp = strrchr(prompt, ' ');
        text = bs_xstrdup(sp ? sp : prompt);
        cut = strlen(text);
    }
    size_t pl = strlen(prompt), total = pl + (size_t)o->prime_copies * cut;
    char *out = bs_xmalloc(total + 1);
    memcpy(out, prompt, pl);
    for (int k = 0; k < o->prime_copies; k++) memcpy(out + pl + (size_t)k * cut, text, cut);
    out[total] = 0;
    free(text);
    return out;
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The pair for a loop found at generated token j (session rewound there, logits in g->logits). */
/* Characters [from, from + n) (code points, counted as the detector does) of text, as UTF-8. */
static json_t *substring(const char *text, int64_t from, int64_t n) {
    const unsigned char *s = (const unsigned char *)text;
    size_t len = strlen(text), off = 0, a = len, b = len;
    for (int64_t i = 0; off < len; i++) {
        if (i == from) a = off;
        if (i == from + n) { b = off; break; }
        uint32_t cp;
        int r = bs_utf8_next(s + off, len - off, &cp);
        off += r > 0 ? (size_t)r : 1;
    }
    if (a > b) a = b;
    if (b - a > 600) b = a + 600;
    while (b > a && b < len && (s[b] & 0xC0) == 0x80) b--;   /* cut at a code point */
    return json_stringn(text + a, b - a);
}

static json_t *make_pair(cli_gen *g, const mine_opts *o, const char *source_prompt, const char *context,
                         const int32_t *ctx_ids, size_t n_ctx, const int32_t *gen, int n_gen, int j,
                         const bs_loop_guard_result *res) {
    int32_t rejected = gen[j];
    int32_t *chosen = bs_xmalloc((size_t)BS_MAX(o->ch.max_n, 1) * sizeof *chosen);
    int nc = ad_select_chosen(g->tok, g->logits, g->n_vocab, rejected, &o->ch, chosen);
    if (nc == 0) { free(chosen); return NULL; }
    char *gtext;
    size_t glen;
    bs_detokenize(g->tok, gen, (size_t)j, false, &gtext, &glen);
    size_t cl = strlen(context);
    char *before = bs_xmalloc(cl + glen + 1);
    memcpy(before, context, cl);
    memcpy(before + cl, gtext, glen);
    before[cl + glen] = 0;
    free(gtext);
    json_t *p = json_object();
    json_object_set_new(p, "context_before", json_string(before));
    free(before);
    json_object_set_new(p, "rejected_token", json_string(bs_token_text(g->tok, rejected)));
    char *d = ad_token_decoded(g->tok, rejected);
    json_object_set_new(p, "rejected_decoded", json_string(d));
    free(d);
    json_t *ct = json_array(), *cd = json_array();
    for (int i = 0; i < nc; i++) {
        json_array_append_new(ct, json_string(bs_token_text(g->tok, chosen[i])));
        d = ad_token_decoded(g->tok, chosen[i]);
        json_array_append_new(cd, json_string(d));
        free(d);
    }
    json_object_set_new(p, "multi_chosen_tokens", ct);
    json_object_set_new(p, "multi_chosen_decoded", cd);
    json_object_set_new(p, "source", json_string("bitspark-antidoom-mine"));
    json_object_set_new(p, "source_prompt", json_string(source_prompt));
    const bs_loop_info *L = &res->last;
    json_t *rep = json_object();
    json_object_set_new(rep, "start_char", json_integer(L->start_char - L->prefix_chars));
    json_object_set_new(rep, "repeat_start_char", json_integer(L->repeat_start_char - L->prefix_chars));
    json_object_set_new(rep, "rejected_token_index", json_integer(j));
    json_object_set_new(rep, "period", json_integer(L->period));
    json_object_set_new(rep, "repeats", json_integer(L->repeats));
    json_object_set_new(rep, "prefix_chars", json_integer(L->prefix_chars));
    /* snippet: two copies of the repeated span, as antidoom writes it */
    char *all;
    size_t al;
    bs_detokenize(g->tok, gen, (size_t)n_gen, false, &all, &al);
    char *full = bs_xmalloc(cl + al + 1);
    memcpy(full, context, cl);
    memcpy(full + cl, all, al);
    full[cl + al] = 0;
    free(all);
    json_object_set_new(rep, "snippet", substring(full, L->start_char, 2 * (int64_t)L->period));
    free(full);
    json_object_set_new(p, "repetition", rep);
    json_object_set_new(p, "context_ids", ids_json(ctx_ids, n_ctx));
    json_object_set_new(p, "rejected_id", json_integer(rejected));
    json_object_set_new(p, "chosen_ids", ids_json(chosen, (size_t)nc));
    free(chosen);
    return p;
}

/* Complete one context; a pair (or NULL: no loop / no chosen token) into *pair. */
static int mine_one(cli_gen *g, const mine_opts *o, bs_loop_guard *guard, const char *source_prompt,
                    const char *context, json_t **pair, bool *looped) {
    *pair = NULL;
    *looped = false;
    int32_t *ids;
    size_t n;
    if (ad_start(g, context, &ids, &n)) return -1;
    bs_loop_guard_begin(guard, g->logits);
    bs_loop_guard_set_prefix(guard, context, strlen(context));
    int32_t *gen = bs_xmalloc((size_t)o->n_predict * sizeof *gen);
    int n_gen = 0, rc = 0;
    const int n_ctx = bs_session_n_ctx(g->sess);
    while (n_gen < o->n_predict) {
        int32_t id = bs_sampler_sample(g->smp, g->logits);
        if (id < 0) { rc = -1; break; }
        if (bs_token_is_eog(g->tok, id)) break;
        bs_sampler_accept(g->smp, id);
        gen[n_gen++] = id;
        int keep, act = bs_loop_guard_push(guard, id, g->logits, &keep);
        if (act < 0) { rc = -1; break; }
        if (act == BS_LOOP_REWOUND) {
            *looped = true;
            const bs_loop_guard_result *res = bs_loop_guard_result_get(guard);
            /* the context ids: prompt + kept tokens */
            int32_t *cids = bs_xmalloc((n + (size_t)keep) * sizeof *cids);
            memcpy(cids, ids, n * sizeof *ids);
            memcpy(cids + n, gen, (size_t)keep * sizeof *gen);
            *pair = make_pair(g, o, source_prompt, context, cids, n + (size_t)keep, gen, n_gen, keep, res);
            free(cids);
            break;
        }
        if (act == BS_LOOP_STOP) { *looped = true; break; }
        if (n_gen == o->n_predict || bs_session_n_past(g->sess) >= n_ctx) break;
        if (bs_eval(g->sess, &id, 1, BS_LOGITS_LAST, g->logits, NULL)) { rc = -1; break; }
        bs_loop_guard_evaluated(guard, g->logits);
    }
    free(gen);
    free(ids);
    return rc;
}

int ad_mine(int argc, char **argv) {
    mine_opts o;
    memset(&o, 0, sizeof o);
    if (parse(&o, argc, argv)) return cli_fail("antidoom mine");
    ad_prompts pr;
    if (ad_prompts_read(o.prompts, &pr)) return cli_fail("antidoom mine");
    cli_gen g;
    if (cli_gen_open(&g, &o.g)) { ad_prompts_free(&pr); return cli_fail("antidoom mine"); }
    bs_loop_guard_params gp = o.g.loop;
    gp.mode = BS_LOOP_GUARD_REWIND;
    gp.max_rewinds = 1;
    bs_loop_guard *guard = bs_loop_guard_new(&gp, g.sess, g.smp, g.tok);
    FILE *out = guard ? fopen(o.out, "w") : NULL;
    FILE *pout = out && o.primes_out ? fopen(o.primes_out, "w") : NULL;
    int rc = 1, n_pairs = 0, n_looped = 0, n_prompts = pr.n;
    if (guard && !out) bs_error("%s: cannot open for writing", o.out);
    if (out && o.primes_out && !pout) bs_error("%s: cannot open for writing", o.primes_out);
    if (!out || (o.primes_out && !pout)) goto done;
    for (int i = 0; i < pr.n; i++) {
        char *ctx = o.generate_primes ? make_prime(&g, pr.text[i], &o) : bs_xstrdup(pr.text[i]);
        if (!ctx) goto done;
        if (pout) {
            json_t *j = json_pack("{s:s, s:s}", "prompt", ctx, "source_prompt", pr.text[i]);
            json_dumpf(j, pout, JSON_COMPACT);
            fputc('\n', pout);
            json_decref(j);
        }
        json_t *pair;
        bool looped;
        int e = mine_one(&g, &o, guard, pr.text[i], ctx, &pair, &looped);
        free(ctx);
        if (e) { bs_error_prefix("prompt %d: ", i + 1); goto done; }
        n_looped += looped;
        if (pair) {
            json_dumpf(pair, out, JSON_COMPACT | JSON_ENSURE_ASCII);
            fputc('\n', out);
            json_decref(pair);
            n_pairs++;
        }
        bs_log(2, "antidoom mine: %d/%d prompts, %d looped, %d pairs\n", i + 1, pr.n, n_looped, n_pairs);
    }
    rc = 0;
done:
    if (out && fclose(out) && !rc) rc = 1, bs_error("%s: write failed", o.out);
    if (pout) fclose(pout);
    bs_loop_guard_free(guard);
    cli_gen_close(&g);
    ad_prompts_free(&pr);
    if (rc) return cli_fail("antidoom mine");
    printf("prompts %d, looped %d, pairs %d -> %s\n", n_prompts, n_looped, n_pairs, o.out);
    return 0;
}
