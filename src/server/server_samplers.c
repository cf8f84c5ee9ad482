/* server_samplers.c: llama-server's sampler fields beyond the chain's own parameters.
 *
 * `samplers` (a list of names, or a string of llama.cpp's one-letter codes) says which stages
 * run. The chain's order is fixed (llama.cpp's default: penalties, DRY, top-k, top-p, min-p,
 * temperature), so the list's order is not followed, but a stage left out is off, as in
 * llama.cpp: penalties, DRY, top-k, top-p and min-p neutral, and without `temperature` the
 * logits are not scaled (temperature 1; llama.cpp's greedy lives in that stage too).
 *
 * Stages the chain does not have (mirostat, typical-p, XTC, dynamic temperature, top-n-sigma)
 * are accepted at the values that turn them off, which clients such as llama.cpp's own web page
 * send every time; any other value is a 400 naming the field, never silently ignored. A negative
 * temperature is greedy, as llama-server documents. */
#include "server/server.h"

#include <jansson.h>
#include <string.h>

enum { ST_PENALTIES = 1, ST_DRY = 2, ST_TOP_K = 4, ST_TOP_P = 8, ST_MIN_P = 16, ST_TEMP = 32, ST_TYPICAL = 64,
       ST_XTC = 128, ST_SIGMA = 256, ST_ALL = 511 };

static int stage_of_name(const char *n) {
    static const struct { const char *name; int st; } names[] = {
        {"penalties", ST_PENALTIES}, {"dry", ST_DRY}, {"top_k", ST_TOP_K}, {"top-k", ST_TOP_K},
        {"top_p", ST_TOP_P}, {"top-p", ST_TOP_P}, {"nucleus", ST_TOP_P}, {"min_p", ST_MIN_P}, {"min-p", ST_MIN_P},
        {"temperature", ST_TEMP}, {"temp", ST_TEMP}, {"typ_p", ST_TYPICAL}, {"typ-p", ST_TYPICAL}, {"typ", ST_TYPICAL},
        {"typical_p", ST_TYPICAL}, {"typical-p", ST_TYPICAL}, {"typical", ST_TYPICAL}, {"xtc", ST_XTC},
        {"top_n_sigma", ST_SIGMA}, {"top-n-sigma", ST_SIGMA},
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(n, names[i].name)) return names[i].st;
    return 0;   /* unknown names are skipped, as llama.cpp skips them (infill among them) */
}

static int stage_of_char(char c) {
    static const char code[] = "edkpmtyxs";   /* llama.cpp's letters, in the order of the enum */
    const char *at = strchr(code, c);
    return c && at ? 1 << (at - code) : 0;
}

/* The stages `samplers` names (ST_ALL without the field); -1 + f on a bad type. */
static int parse_stages(json_t *v, srv_fail *f) {
    static const char msg[] = "'samplers' must be an array of sampler names or a string of their letters";
    if (!v || json_is_null(v)) return ST_ALL;
    int st = 0;
    if (json_is_string(v)) {
        for (const char *c = json_string_value(v); *c; c++) st |= stage_of_char(*c);
        return st;
    }
    if (!json_is_array(v)) return srv_fail_set(f, 400, "invalid_request_error", msg), -1;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) return srv_fail_set(f, 400, "invalid_request_error", msg), -1;
        st |= stage_of_name(json_string_value(e));
    }
    return st;
}

/* A number field (absent or null: off), or -2 + f when it is not a number. */
static int number(json_t *b, const char *k, double *x, srv_fail *f) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return srv_fail_set(f, 400, "invalid_request_error", "'%s' must be a number", k), -2;
    *x = json_number_value(v);
    return 1;
}

/* Each stage the chain lacks, with the field that turns it on and the test of "off". */
static int refuse_missing(json_t *b, int stages, srv_fail *f) {
    static const struct { const char *field; int st; double off_at; bool off_below; const char *off; } lack[] = {
        {"mirostat", ST_ALL, 0, false, "0"},   /* (replaces the chain: whatever `samplers` says) */
        {"typical_p", ST_TYPICAL, 1, true, "1"},
        {"typ_p", ST_TYPICAL, 1, true, "1"},
        {"xtc_probability", ST_XTC, 0, false, "0"},
        {"dynatemp_range", ST_TEMP, 0, false, "0"},
        {"top_n_sigma", ST_SIGMA, 0, false, "0 or less"},
    };
    for (size_t i = 0; i < sizeof lack / sizeof *lack; i++) {
        double x = 0;
        const int rc = number(b, lack[i].field, &x, f);
        if (rc < 0) return f->status;
        const bool on = lack[i].off_below ? x < lack[i].off_at : x > lack[i].off_at;
        if (rc && on && (lack[i].st == ST_ALL || (stages & lack[i].st)))
            return srv_fail_set(f, 400, "not_supported_error", "'%s' is not supported: only %s (off) is accepted",
                                lack[i].field, lack[i].off);
    }
    return 0;
}

int srv_sampler_fields(json_t *b, bs_sampler_params *p, srv_fail *f) {
    const int st = parse_stages(json_object_get(b, "samplers"), f);
    if (st < 0 || refuse_missing(b, st, f)) return f->status;
    if (p->temp < 0) p->temp = 0;
    if (!(st & ST_PENALTIES)) p->repeat_penalty = 1, p->presence_penalty = p->frequency_penalty = 0;
    if (!(st & ST_DRY)) p->dry_multiplier = 0;
    if (!(st & ST_TOP_K)) p->top_k = 0;
    if (!(st & ST_TOP_P)) p->top_p = 1;
    if (!(st & ST_MIN_P)) p->min_p = 0;
    if (!(st & ST_TEMP)) p->temp = 1;
    return 0;
}
