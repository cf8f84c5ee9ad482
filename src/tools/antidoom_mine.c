/* antidoom_mine.c: `bitspark antidoom mine`: run raw completions of (primed) prompts, detect the
 * first doom loop with antidoom's detector, and write one FTPO pair per loop: the context
 * before the first token of the first repeat, that token as rejected, and antidoom's chosen
 * alternatives from the model's own distribution at that position (antidoom.h has the format).
 *
 * The prompt's text is part of what the detector scans, so a primed prompt (text that already
 * repeats a phrase) yields the start of the next copy as the rejected token. The position's
 * logits come from rewinding the session there (loop_guard.h), bit-identical to a straight
 * evaluation of the context. */
#include "tools/antidoom.h"
#include "io/atomic_file.h"
#include "model/lora.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The prompt followed by K copies of its own continuation (cut after the last sentence end). */
static bs_gen_request mine_request(const bs_engine *e, int n_predict) {
    bs_gen_request r;
    bs_engine_request(e, &r);
    r.n_predict = n_predict;
    r.no_cache = true;
    r.no_draft = true;
    r.loop.mode = BS_LOOP_GUARD_OFF;
    return r;
}

/* Generated token ids (malloc'd, *n). */
static int32_t *gen_ids(bs_engine *e, int *n) {
    bs_gen_output out;
    bs_gen_output_get(e->gen, &out);
    int32_t *ids = bs_xmalloc((size_t)BS_MAX(out.n_toks, 1) * sizeof *ids);
    for (int i = 0; i < out.n_toks; i++) ids[i] = out.toks[i].id;
    *n = out.n_toks;
    return ids;
}

static char *make_prime(bs_engine *e, const char *prompt, const ad_mine_opts *o) {
    int32_t *ids;
    size_t np;
    if (bs_engine_tokenize(e, prompt, strlen(prompt), &ids, &np)) return NULL;
    bs_gen_request r = mine_request(e, o->prime_tokens);
    int rc = np > (size_t)INT32_MAX ? bs_error("prompt too long") : bs_engine_generate(e, &r, ids, (int)np, NULL, NULL);
    free(ids);
    if (rc) return NULL;
    int n;
    int32_t *gen = gen_ids(e, &n);
    const bs_tokenizer *tok = e->tok;
    char *text = NULL;
    size_t len = 0;
    if (bs_detokenize(tok, gen, (size_t)n, false, &text, &len)) { free(gen); return NULL; }
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

static json_t *make_pair(bs_engine *e, const ad_mine_opts *o, const char *source_prompt, const char *context,
                         const int32_t *ctx_ids, size_t n_ctx, const int32_t *gen, int n_gen, int j,
                         const bs_loop_guard_result *res) {
    int32_t rejected = gen[j];
    int32_t *chosen = bs_xmalloc((size_t)BS_MAX(o->ch.max_n, 1) * sizeof *chosen);
    int nc = ad_select_chosen(e->tok, bs_gen_logits(e->gen), e->n_vocab, rejected, &o->ch, chosen);
    if (nc == 0) { free(chosen); return NULL; }
    char *gtext;
    size_t glen;
    bs_detokenize(e->tok, gen, (size_t)j, false, &gtext, &glen);
    size_t cl = strlen(context);
    char *before = bs_xmalloc(cl + glen + 1);
    memcpy(before, context, cl);
    memcpy(before + cl, gtext, glen);
    before[cl + glen] = 0;
    free(gtext);
    json_t *p = json_object();
    json_object_set_new(p, "context_before", json_string(before));
    free(before);
    json_object_set_new(p, "rejected_token", json_string(bs_token_text(e->tok, rejected)));
    char *d = ad_token_decoded(e->tok, rejected);
    json_object_set_new(p, "rejected_decoded", json_string(d));
    free(d);
    json_t *ct = json_array(), *cd = json_array();
    for (int i = 0; i < nc; i++) {
        json_array_append_new(ct, json_string(bs_token_text(e->tok, chosen[i])));
        d = ad_token_decoded(e->tok, chosen[i]);
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
    bs_detokenize(e->tok, gen, (size_t)n_gen, false, &all, &al);
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
static int mine_one(bs_engine *e, const ad_mine_opts *o, const char *source_prompt, const char *context,
                    json_t **pair, bool *looped) {
    *pair = NULL;
    *looped = false;
    int32_t *ids;
    size_t n;
    if (bs_engine_tokenize(e, context, strlen(context), &ids, &n)) return -1;
    bs_gen_request r = mine_request(e, o->n_predict);
    r.loop = o->g.loop;
    r.loop.mode = BS_LOOP_GUARD_REWIND;
    r.loop.max_rewinds = 1;
    r.stop_at_rewind = true;   /* the session at the rejected token, its logits */
    r.loop_prefix = context;
    r.loop_prefix_len = strlen(context);
    int rc = n > (size_t)INT32_MAX ? bs_error("prompt too long") : bs_engine_generate(e, &r, ids, (int)n, NULL, NULL);
    const bs_gen_stats *st = bs_gen_get_stats(e->gen);
    if (!rc && st->loop.n_detected > 0) {
        *looped = true;
        if (st->loop.n_rewinds > 0) {
            int n_gen, keep = st->rewound_to;
            int32_t *gen = gen_ids(e, &n_gen);
            /* the context ids: prompt + kept tokens */
            int32_t *cids = bs_xmalloc((n + (size_t)keep) * sizeof *cids);
            memcpy(cids, ids, n * sizeof *ids);
            memcpy(cids + n, gen, (size_t)keep * sizeof *gen);
            *pair = make_pair(e, o, source_prompt, context, cids, n + (size_t)keep, gen, n_gen, keep, &st->loop);
            free(cids);
            free(gen);
        }
    }
    free(ids);
    return rc;
}

int ad_mine(const ad_mine_opts *op) {
    const ad_mine_opts o = *op;
    ad_prompts pr;
    if (ad_prompts_read(o.prompts, &pr)) return -1;
    bs_engine g;
    if (bs_engine_open(&g, &o.g)) { ad_prompts_free(&pr); return -1; }
    /* both outputs are temporaries until every prompt is mined: a stopped run keeps the
     * previous files */
    const char *inputs[3 + 2 * BS_ENGINE_MAX_LORA] = {o.prompts, o.g.model, o.g.drafter};
    int n_in = 3;
    for (int k = 0; k < g.n_loras; k++) {   /* the adapters (and a PEFT one's config) too */
        inputs[n_in++] = g.loras[k]->path;
        inputs[n_in++] = g.loras[k]->config;
    }
    bs_afile *aout = NULL, *apout = NULL;
    FILE *out = NULL, *pout = NULL;
    int rc = 1, n_pairs = 0, n_looped = 0, n_prompts = pr.n;
    if (bs_check_outputs(o.out, o.primes_out, inputs, n_in)) goto done;
    if (!(aout = bs_afile_open(o.out))) goto done;
    if (o.primes_out && !(apout = bs_afile_open(o.primes_out))) goto done;
    out = bs_afile_fp(aout);
    pout = apout ? bs_afile_fp(apout) : NULL;
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
        int e = mine_one(&g, &o, pr.text[i], ctx, &pair, &looped);
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
    if (!rc && apout) { rc = bs_afile_commit(apout) ? 1 : 0; apout = NULL; }
    if (!rc) { rc = bs_afile_commit(aout) ? 1 : 0; aout = NULL; }
    bs_afile_abort(aout);
    bs_afile_abort(apout);
    bs_engine_close(&g);
    ad_prompts_free(&pr);
    if (rc) return -1;
    printf("prompts %d, looped %d, pairs %d -> %s\n", n_prompts, n_looped, n_pairs, o.out);
    return 0;
}
