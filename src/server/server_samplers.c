/* server_samplers.c: llama-server's sampler fields beyond the common ones (server_api.c reads
 * temperature, top-k/p, min-p, penalties and DRY).
 *
 * top_n_sigma, typical_p (typ_p), xtc_probability / xtc_threshold and dynatemp_range /
 * dynatemp_exponent set the chain's stages of those names (bitspark.h). mirostat (0, 1 or 2),
 * mirostat_tau and mirostat_eta choose llama.cpp's Mirostat chain: logit bias, temperature,
 * Mirostat, and nothing else (`samplers` is then not read, as in llama.cpp).
 *
 * `samplers` (a list of names, or a string of llama.cpp's one-letter codes) says which stages
 * run and in what order (bs_sampler_params.order: penalties and DRY run first wherever they
 * stand); a stage left out is off, as in llama.cpp; without
 * `temperature` the logits are not scaled (temperature 1, and no dynamic range: llama.cpp's
 * greedy lives in that stage too). A negative temperature is greedy, as llama-server documents. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <string.h>

/* The stages `samplers` names, in its order, onto order (16 bytes, "" on entry): true; without
 * the field the server's default (none: every stage, in the default order); false + f on a bad
 * type. */
static bool parse_stages(json_t *v, const char *def, bool letters, char *order, srv_fail *f) {
    static const char msg[] = "'samplers' must be an array of sampler names or a string of their letters";
    if (!v || json_is_null(v)) {
        bs_sampler_parse_order(def ? def : BS_SAMPLER_STAGES, def ? letters : true, order);
        return true;
    }
    if (json_is_string(v)) {
        bs_sampler_parse_order(json_string_value(v), true, order);
        return true;
    }
    if (!json_is_array(v)) return srv_fail_set(f, 400, "invalid_request_error", msg), false;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) return srv_fail_set(f, 400, "invalid_request_error", msg), false;
        bs_sampler_add_stage(bs_sampler_stage_letter(json_string_value(e)), order);
    }
    return true;
}

/* A number field in [lo, hi] into *x (absent or null: left alone); -1 + f otherwise. */
static int number(json_t *b, const char *k, double lo, double hi, float *x, srv_fail *f) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return 0;
    const double d = json_is_number(v) ? json_number_value(v) : lo - 1;
    if (!(d >= lo && d <= hi))
        return srv_fail_set(f, 400, "invalid_request_error", "'%s' must be a number in [%g, %g]", k, lo, hi), -1;
    *x = (float)d;
    return 0;
}

static int stage_fields(json_t *b, bs_sampler_params *p, srv_fail *f) {
    float miro = (float)p->mirostat;
    if (number(b, "mirostat", 0, 2, &miro, f) || number(b, "mirostat_tau", 0, 1e6, &p->mirostat_tau, f) ||
        number(b, "mirostat_eta", 0, 1e6, &p->mirostat_eta, f) || number(b, "typical_p", 0, 1e9, &p->typical_p, f) ||
        number(b, "typ_p", 0, 1e9, &p->typical_p, f) || number(b, "top_n_sigma", -1e9, 1e9, &p->top_n_sigma, f) ||
        number(b, "xtc_probability", 0, 1, &p->xtc_probability, f) ||
        number(b, "xtc_threshold", 0, 1e9, &p->xtc_threshold, f) ||
        number(b, "dynatemp_range", 0, 100, &p->dynatemp_range, f) ||
        number(b, "dynatemp_exponent", 0, 100, &p->dynatemp_exponent, f))
        return f->status;
    if (miro != (int)miro)
        return srv_fail_set(f, 400, "invalid_request_error", "'mirostat' must be 0 (off), 1 or 2");
    p->mirostat = (int32_t)miro;
    return 0;
}

int srv_sampler_fields(json_t *b, const char *def_samplers, bool def_letters, bs_sampler_params *p, srv_fail *f) {
    char order[sizeof p->order] = "";
    if (!parse_stages(json_object_get(b, "samplers"), def_samplers, def_letters, order, f) || stage_fields(b, p, f))
        return f->status;
    if (p->temp < 0) p->temp = 0;
    if (p->mirostat) return 0;   /* its own chain */
    bs_sampler_use_stages(p, order);
    return 0;
}

void srv_sampler_settings(json_t *j, const bs_sampler_params *p) {
    json_object_set_new(j, "temperature", json_real(p->temp));
    json_object_set_new(j, "top_k", json_integer(p->top_k));
    json_object_set_new(j, "top_p", json_real(p->top_p));
    json_object_set_new(j, "min_p", json_real(p->min_p));
    json_object_set_new(j, "min_keep", json_integer(p->min_keep));
    json_object_set_new(j, "repeat_last_n", json_integer(p->penalty_last_n));
    json_object_set_new(j, "repeat_penalty", json_real(p->repeat_penalty));
    json_object_set_new(j, "presence_penalty", json_real(p->presence_penalty));
    json_object_set_new(j, "frequency_penalty", json_real(p->frequency_penalty));
    json_object_set_new(j, "dry_multiplier", json_real(p->dry_multiplier));
    json_object_set_new(j, "dry_base", json_real(p->dry_base));
    json_object_set_new(j, "dry_allowed_length", json_integer(p->dry_allowed_length));
    json_object_set_new(j, "dry_penalty_last_n", json_integer(p->dry_penalty_last_n));
    json_object_set_new(j, "top_n_sigma", json_real(p->top_n_sigma));
    json_object_set_new(j, "typical_p", json_real(p->typical_p));
    json_object_set_new(j, "xtc_probability", json_real(p->xtc_probability));
    json_object_set_new(j, "xtc_threshold", json_real(p->xtc_threshold));
    json_object_set_new(j, "dynatemp_range", json_real(p->dynatemp_range));
    json_object_set_new(j, "dynatemp_exponent", json_real(p->dynatemp_exponent));
    json_object_set_new(j, "mirostat", json_integer(p->mirostat));
    json_object_set_new(j, "mirostat_tau", json_real(p->mirostat_tau));
    json_object_set_new(j, "mirostat_eta", json_real(p->mirostat_eta));
}

json_t *srv_sampler_chain_json(const char *order) {
    json_t *a = json_array();
    for (const char *c = order ? order : BS_SAMPLER_STAGES; *c; c++) {   /* ("": none runs) */
        const char *name = bs_sampler_stage_name(*c);
        if (name) json_array_append_new(a, json_string(name));
    }
    return a;
}

void srv_sampler_default_order(const char *def, bool letters, char order[16]) {
    bs_sampler_parse_order(def ? def : "", letters, order);
}
