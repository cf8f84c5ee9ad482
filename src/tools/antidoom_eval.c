/* antidoom_eval.c: `bitspark antidoom eval`: FTPO's chosen-win on a pairs file (forward only:
 * the share of chosen tokens whose logit beats the rejected one at the end of context_before;
 * one softmax normaliser, so the same as comparing log-probabilities), and the loop rate of
 * completions over a temperature sweep. */
#include "tools/antidoom.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FTPO_MARGIN 2.0   /* clip_epsilon_logits of FTPO: a chosen token "wins by the margin" */

/* --- chosen-win ---------------------------------------------------------------------------------- */

/* A token given by id (when `idkey` holds one) or by raw vocabulary string. -1 if unknown. */
static int32_t token_of(const bs_engine *g, json_t *id, json_t *str) {
    if (json_is_integer(id)) {
        json_int_t v = json_integer_value(id);
        return v >= 0 && v < g->n_vocab ? (int32_t)v : -1;
    }
    const char *s = json_string_value(str);
    const int32_t t = s ? bs_token_lookup(g->tok, s) : -1;
    return t < g->n_vocab ? t : -1;   /* (bs_engine_open refuses larger tokenizers; kept local) */
}

/* Context tokens of a pair: context_ids, else context_before tokenized as `run` does. */
static int pair_context(const bs_engine *g, json_t *pair, int32_t **ids, size_t *n) {
    json_t *ci = json_object_get(pair, "context_ids");
    if (json_is_array(ci) && json_array_size(ci) > 0) {
        *n = json_array_size(ci);
        *ids = bs_xmalloc(*n * sizeof **ids);
        for (size_t i = 0; i < *n; i++) {
            json_t *v = json_array_get(ci, i);
            json_int_t x = json_integer_value(v);
            if (!json_is_integer(v) || x < 0 || x >= g->n_vocab) { free(*ids); return bs_error("bad context_ids"); }
            (*ids)[i] = (int32_t)x;
        }
        return 0;
    }
    const char *text = json_string_value(json_object_get(pair, "context_before"));
    if (!text) return bs_error("no context_before");
    return bs_engine_tokenize(g, text, strlen(text), ids, n);
}

static json_t *eval_pair(bs_engine *g, json_t *pair) {
    int32_t rej = token_of(g, json_object_get(pair, "rejected_id"), json_object_get(pair, "rejected_token"));
    if (rej < 0) return bs_error("rejected token not in the vocabulary"), NULL;
    json_t *cids = json_object_get(pair, "chosen_ids"), *cstr = json_object_get(pair, "multi_chosen_tokens");
    size_t nc = json_is_array(cids) ? json_array_size(cids) : json_array_size(cstr);
    if (nc == 0) return bs_error("no chosen tokens"), NULL;
    int32_t *ids;
    size_t n;
    if (pair_context(g, pair, &ids, &n)) return NULL;
    bs_gen_request r;
    bs_engine_request(g, &r);
    r.n_predict = 0;   /* the context only */
    r.no_cache = true;
    r.no_draft = true;
    r.loop.mode = BS_LOOP_GUARD_OFF;
    int e = n > (size_t)INT32_MAX ? bs_error("context too long") : bs_engine_generate(g, &r, ids, (int)n, NULL, NULL);
    free(ids);
    if (e) return NULL;
    const float *z = bs_gen_logits(g->gen);
    double zmax = z[0], sum = 0;
    for (int i = 1; i < g->n_vocab; i++) zmax = BS_MAX(zmax, (double)z[i]);
    for (int i = 0; i < g->n_vocab; i++) sum += exp((double)z[i] - zmax);
    const double lse = zmax + log(sum);
    int wins = 0, margin = 0, used = 0, unknown = 0;
    double dsum = 0;
    for (size_t i = 0; i < nc; i++) {
        int32_t c = token_of(g, json_is_array(cids) ? json_array_get(cids, i) : NULL,
                             json_is_array(cids) ? NULL : json_array_get(cstr, i));
        if (c < 0) { unknown++; continue; }
        double d = (double)z[c] - (double)z[rej];
        wins += d > 0;
        margin += d >= FTPO_MARGIN;
        dsum += d;
        used++;
    }
    if (!used) return bs_error("no chosen token is in the vocabulary"), NULL;
    return json_pack("{s:f, s:i, s:i, s:f, s:f, s:f, s:i}", "chosen_win", (double)wins / used, "n_chosen", used,
                     "n_win", wins, "margin_win", (double)margin / used, "mean_delta", dsum / used,
                     "logp_rejected", (double)z[rej] - lse, "unknown_tokens", unknown);
}

static int run_pairs(bs_engine *g, const ad_eval_opts *o) {
    size_t len;
    char *buf = bs_read_file(o->pairs, &len);
    if (!buf) return bs_error_prefix("%s: ", o->pairs);
    json_t *rows = json_array();
    double total = 0;
    int line = 0, rc = 0, skipped = 0;
    for (size_t off = 0; off < len && !rc;) {
        const char *nl = memchr(buf + off, '\n', len - off);
        size_t end = nl ? (size_t)(nl - buf) : len;
        line++;
        if (end > off) {
            json_error_t err;
            json_t *pair = json_loadb(buf + off, end - off, 0, &err);
            json_t *r = pair ? eval_pair(g, pair) : NULL;
            if (!pair) {
                rc = bs_error("%s:%d: bad JSON: %s", o->pairs, line, err.text);
            } else if (!r) {   /* e.g. a token of another vocabulary: skip the pair, say so */
                bs_log(1, "warning: %s:%d: %s (pair skipped)\n", o->pairs, line, bs_last_error());
                skipped++;
            }
            json_decref(pair);
            if (r) {
                total += json_real_value(json_object_get(r, "chosen_win"));
                if (!o->json)
                    printf("pair %zu: chosen_win %.4f (%d/%d), margin_win %.4f, mean_delta %.4f, logp_rejected %.4f\n",
                           json_array_size(rows) + 1, json_real_value(json_object_get(r, "chosen_win")),
                           (int)json_integer_value(json_object_get(r, "n_win")),
                           (int)json_integer_value(json_object_get(r, "n_chosen")),
                           json_real_value(json_object_get(r, "margin_win")),
                           json_real_value(json_object_get(r, "mean_delta")),
                           json_real_value(json_object_get(r, "logp_rejected")));
                json_array_append_new(rows, r);
            }
        }
        off = end + 1;
    }
    free(buf);
    size_t np = json_array_size(rows);
    if (!rc && np == 0) rc = bs_error("%s: no pairs", o->pairs);
    if (!rc) {
        double mean = total / (double)np;
        if (o->json) {
            json_t *j = json_pack("{s:O, s:f, s:i, s:i}", "pairs", rows, "chosen_win", mean, "n_pairs", (int)np,
                                  "skipped", skipped);
            json_dumpf(j, stdout, JSON_COMPACT);
            printf("\n");
            json_decref(j);
        } else {
            printf("chosen_win %.4f (mean over %zu pairs, %d skipped)\n", mean, np, skipped);
        }
    }
    json_decref(rows);
    return rc;
}

/* --- loop rate ----------------------------------------------------------------------------------- */

/* 1 if the completion of prompt i at temperature temp loops, 0 if not, -1 on error. */
static int loops(bs_engine *e, const ad_eval_opts *o, const char *text, int i, float temp) {
    int32_t *ids;
    size_t n;
    if (bs_engine_tokenize(e, text, strlen(text), &ids, &n)) return -1;
    bs_gen_request r;
    bs_engine_request(e, &r);
    r.sp.temp = temp;
    r.sp.seed = o->g.sp.seed + (uint64_t)i;   /* completion i: seed S + i at every temperature */
    r.keep_sampler = false;
    r.n_predict = o->n_predict;
    r.no_cache = true;
    r.no_draft = true;
    r.loop.mode = BS_LOOP_GUARD_STOP;
    int rc = n > (size_t)INT32_MAX ? bs_error("prompt too long") : bs_engine_generate(e, &r, ids, (int)n, NULL, NULL);
    free(ids);
    return rc ? -1 : bs_gen_get_stats(e->gen)->stop == BS_GEN_LOOP;
}

static int run_loop_rate(bs_engine *g, const ad_eval_opts *o) {
    ad_prompts pr;
    if (ad_prompts_read(o->prompts, &pr)) return -1;
    json_t *rows = json_array();
    int rc = 0;
    for (int t = 0; t < o->n_temps && !rc; t++) {
        int looped = 0;
        for (int i = 0; i < pr.n && !rc; i++) {
            int l = loops(g, o, pr.text[i], i, o->temps[t]);
            if (l < 0) rc = bs_error_prefix("prompt %d: ", i + 1);
            else looped += l;
        }
        if (rc) break;
        double rate = (double)looped / pr.n;
        if (!o->json) printf("temp %g: loop rate %.4f (%d/%d)\n", (double)o->temps[t], rate, looped, pr.n);
        json_array_append_new(rows, json_pack("{s:f, s:f, s:i, s:i}", "temp", (double)o->temps[t], "rate", rate,
                                              "looped", looped, "n", pr.n));
    }
    if (!rc && o->json) {
        json_t *j = json_pack("{s:O}", "loop_rate", rows);
        json_dumpf(j, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(j);
    }
    json_decref(rows);
    ad_prompts_free(&pr);
    return rc;
}

int ad_eval(const ad_eval_opts *o) {
    bs_engine g;
    if (bs_engine_open(&g, &o->g)) return -1;
    int rc = o->loop_rate ? run_loop_rate(&g, o) : run_pairs(&g, o);
    bs_engine_close(&g);
    return rc;
}
