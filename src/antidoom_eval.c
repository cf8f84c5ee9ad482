/* antidoom_eval.c: `bitspark antidoom eval`: FTPO's chosen-win on a pairs file (forward only:
 * the share of chosen tokens whose logit beats the rejected one at the end of context_before;
 * one softmax normaliser, so the same as comparing log-probabilities), and the loop rate of
 * completions over a temperature sweep. */
#include "antidoom.h"
#include "cli.h"
#include "util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPS 32
#define FTPO_MARGIN 2.0   /* clip_epsilon_logits of FTPO: a chosen token "wins by the margin" */

typedef struct {
    cli_gen_opts g;
    const char *pairs, *prompts;
    bool json, loop_rate;
    float temps[MAX_TEMPS];
    int n_temps, n_predict;
} eval_opts;

void ad_eval_help(void) {
    printf("antidoom eval --pairs FILE: chosen-win per pair and the mean\n"
           "  --pairs FILE            pairs as antidoom writes them (tokens as raw vocabulary strings;\n"
           "                          context_ids/rejected_id/chosen_ids are used when present)\n"
           "  --json                  print {\"pairs\": [{\"chosen_win\": x, ...}], \"chosen_win\": mean}\n"
           "antidoom eval --loop-rate --prompts FILE: share of completions that fall into a loop\n"
           "  --temps T,T,...         temperatures (0,0.3,0.7); 0 is greedy\n"
           "  -n N                    max tokens per completion (256)\n"
           "  --seed S                completion i at each temperature uses seed S + i (0)\n"
           "  --loop-min-repeats R, --loop-min-chars C, --loop-max-period P   the detector\n"
           "  model and sampling options as for `run`\n");
}

static int parse_temps(eval_opts *o, const char *v) {
    o->n_temps = 0;
    for (const char *p = v; *p;) {
        char *end;
        double t = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(t >= 0 && t <= 100))
            return bs_error("--temps: expected numbers like 0,0.3,0.7, got '%s'", v);
        if (o->n_temps == MAX_TEMPS) return bs_error("--temps: at most %d", MAX_TEMPS);
        o->temps[o->n_temps++] = (float)t;
        p = *end ? end + 1 : end;
    }
    return o->n_temps ? 0 : bs_error("--temps: empty list");
}

static int parse(eval_opts *o, int argc, char **argv) {
    cli_gen_defaults(&o->g);
    o->g.sp.seed = 0;
    o->g.seed_set = true;
    o->n_predict = 256;
    parse_temps(o, "0,0.3,0.7");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int r = cli_gen_parse(&o->g, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        long x;
        if (!strcmp(a, "--pairs")) {
            if (!(o->pairs = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--prompts")) {
            if (!(o->prompts = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--loop-rate")) {
            o->loop_rate = true;
        } else if (!strcmp(a, "--temps")) {
            if (!(v = cli_value(argc, argv, &i)) || parse_temps(o, v)) return -1;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, 1 << 24, &x)) return -1;
            o->n_predict = (int)x;
        } else {
            return bs_error("unknown option '%s' (see bitspark help antidoom)", a);
        }
    }
    if (!o->g.model) return bs_error("no model given (-m FILE)");
    if (o->loop_rate ? !o->prompts : !o->pairs)
        return bs_error(o->loop_rate ? "--loop-rate needs --prompts FILE" : "give --pairs FILE (or --loop-rate)");
    o->g.loop.mode = BS_LOOP_GUARD_OFF;
    return 0;
}

/* --- chosen-win ---------------------------------------------------------------------------------- */

/* A token given by id (when `idkey` holds one) or by raw vocabulary string. -1 if unknown. */
static int32_t token_of(const cli_gen *g, json_t *id, json_t *str) {
    if (json_is_integer(id)) {
        json_int_t v = json_integer_value(id);
        return v >= 0 && v < g->n_vocab ? (int32_t)v : -1;
    }
    const char *s = json_string_value(str);
    return s ? bs_token_lookup(g->tok, s) : -1;
}

/* Context tokens of a pair: context_ids, else context_before tokenized as `run` does. */
static int pair_context(cli_gen *g, json_t *pair, int32_t **ids, size_t *n) {
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
    return cli_gen_tokenize(g, text, strlen(text), ids, n);
}

static json_t *eval_pair(cli_gen *g, json_t *pair) {
    int32_t rej = token_of(g, json_object_get(pair, "rejected_id"), json_object_get(pair, "rejected_token"));
    if (rej < 0) return bs_error("rejected token not in the vocabulary"), NULL;
    json_t *cids = json_object_get(pair, "chosen_ids"), *cstr = json_object_get(pair, "multi_chosen_tokens");
    size_t nc = json_is_array(cids) ? json_array_size(cids) : json_array_size(cstr);
    if (nc == 0) return bs_error("no chosen tokens"), NULL;
    int32_t *ids;
    size_t n;
    if (pair_context(g, pair, &ids, &n)) return NULL;
    bs_session_reset(g->sess);
    bs_sampler_truncate(g->smp, 0);
    cli_gen_stats st;
    int e = n > (size_t)INT32_MAX ? bs_error("context too long") : cli_gen_prompt(g, ids, (int)n, &st);
    free(ids);
    if (e) return NULL;
    const float *z = g->logits;
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

static int run_pairs(cli_gen *g, const eval_opts *o) {
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

/* 1 if the completion of the current prompt loops, 0 if not, -1 on error. */
static int loops(cli_gen *g, bs_loop_guard *guard, int n_predict) {
    bs_loop_guard_begin(guard, g->logits);
    const int n_ctx = bs_session_n_ctx(g->sess);
    for (int n = 0; n < n_predict; n++) {
        int32_t id = bs_sampler_sample(g->smp, g->logits);
        if (id < 0) return -1;
        if (bs_token_is_eog(g->tok, id)) return 0;
        bs_sampler_accept(g->smp, id);
        int keep, act = bs_loop_guard_push(guard, id, g->logits, &keep);
        if (act < 0) return -1;
        if (act == BS_LOOP_STOP) return 1;
        if (n + 1 == n_predict || bs_session_n_past(g->sess) >= n_ctx) break;
        if (bs_eval(g->sess, &id, 1, BS_LOGITS_LAST, g->logits, NULL)) return -1;
    }
    return 0;
}

static int run_loop_rate(cli_gen *g, const eval_opts *o) {
    ad_prompts pr;
    if (ad_prompts_read(o->prompts, &pr)) return -1;
    json_t *rows = json_array();
    int rc = 0;
    for (int t = 0; t < o->n_temps && !rc; t++) {
        bs_sampler_params sp = o->g.sp;
        sp.temp = o->temps[t];
        bs_sampler *smp = bs_sampler_new(&sp, g->n_vocab);
        if (!smp) { rc = -1; break; }
        bs_sampler_free(g->smp);
        g->smp = smp;
        bs_loop_guard_params gp = o->g.loop;
        gp.mode = BS_LOOP_GUARD_STOP;
        bs_loop_guard *guard = bs_loop_guard_new(&gp, g->sess, g->smp, g->tok);
        if (!guard) { rc = -1; break; }
        int looped = 0;
        for (int i = 0; i < pr.n && !rc; i++) {
            if (ad_start(g, pr.text[i], NULL, NULL)) { rc = bs_error_prefix("prompt %d: ", i + 1); break; }
            bs_sampler_set_seed(g->smp, o->g.sp.seed + (uint64_t)i);
            int l = loops(g, guard, o->n_predict);
            if (l < 0) rc = bs_error_prefix("prompt %d: ", i + 1);
            else looped += l;
        }
        bs_loop_guard_free(guard);
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

int ad_eval(int argc, char **argv) {
    eval_opts o;
    memset(&o, 0, sizeof o);
    if (parse(&o, argc, argv)) return cli_fail("antidoom eval");
    cli_gen g;
    if (cli_gen_open(&g, &o.g)) return cli_fail("antidoom eval");
    int rc = o.loop_rate ? run_loop_rate(&g, &o) : run_pairs(&g, &o);
    cli_gen_close(&g);
    return rc ? cli_fail("antidoom eval") : 0;
}
