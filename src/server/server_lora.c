/* server_lora.c: LoRA switching as llama-server has it: GET /lora-adapters lists the adapters
 * loaded with --lora (id, path, scale), POST /lora-adapters [{"id", "scale"}] sets the scales
 * every request gets (adapters not listed: 0), --lora-init-without-apply starts them all at 0,
 * and a request's "lora" [{"id", "scale"}] runs that request with these scales instead (the
 * adapters it does not list at 0).
 *
 * An adapter hangs off the model's weights (bs_lora_attach), which every slot shares, so the
 * scheduler attaches the scales of each pass before it (srv_lora_apply) and only puts slots that
 * run with the same scales into one pass; a slot whose cached prefix was computed with other
 * scales forgets it before it takes a request (server_sched.c). Scale 0 is never attached: a
 * request with every scale 0 computes exactly what the model without adapters does. */
#include "server/server.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LORA_SCALE_MAX 100.0   /* far past any useful scale; more is a 400 */


int srv_lora_load(srv *s) {
    const bs_engine_opts *o = &s->cfg.gen;
    float init[SRV_MAX_LORA] = {0};
    s->n_loras = 0;
    for (int k = 0; k < o->n_lora; k++) {
        char *path;
        float scale = o->lora_scale[k];
        if (o->lora_has_scale[k]) path = bs_xstrdup(o->lora[k]);
        else if (bs_lora_parse_arg(o->lora[k], &path, &scale)) return -1;
        bs_lora *l = bs_lora_load(path, s->model->file);
        free(path);
        if (!l) return -1;
        s->loras[s->n_loras++] = l;
        /* checked now (matrix names and shapes), then left off: the scheduler attaches per pass */
        if (bs_lora_attach(s->model, l, 1.0f)) return -1;
        bs_lora_detach(s->model);
        init[k] = s->cfg.lora_init_without_apply ? 0.0f : scale;
        bs_log(1, "LoRA %d: %s, %d matrices, scale %g\n", k, l->path, l->n, (double)init[k]);
    }
    srv_lora_set_global(init);
    s->cfg.loras = s->loras;
    s->cfg.n_loras = s->n_loras;
    return 0;
}

void srv_lora_unload(srv *s) {
    if (s->model) bs_lora_detach(s->model);
    for (int k = 0; k < s->n_loras; k++) bs_lora_free(s->loras[k]);
    s->n_loras = 0;
    static const float none[SRV_MAX_LORA];
    srv_lora_set_global(none);
}

/* [{"id": k, "scale": x}, ...] -> out (the adapters not listed at 0); false + a 400 in r. */
static bool parse_list(const srv *s, json_t *v, const char *field, float *out, srv_reply *r) {
    if (!json_is_array(v)) {
        srv_reply_error(r, 400, "invalid_request_error", "'%s' must be an array of {\"id\", \"scale\"}", field);
        return false;
    }
    float sc[SRV_MAX_LORA] = {0};
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        json_t *id = json_object_get(e, "id"), *scale = json_object_get(e, "scale");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= s->n_loras) {
            srv_reply_error(r, 400, "invalid_request_error", "'%s': entry %zu needs an \"id\" of a loaded adapter (0..%d)",
                            field, i, s->n_loras - 1);
            return false;
        }
        if (!json_is_number(scale) || !(fabs(json_number_value(scale)) <= LORA_SCALE_MAX)) {
            srv_reply_error(r, 400, "invalid_request_error", "'%s': entry %zu needs a \"scale\" in [-%g, %g]", field, i,
                            LORA_SCALE_MAX, LORA_SCALE_MAX);
            return false;
        }
        sc[json_integer_value(id)] = (float)json_number_value(scale);
    }
    memcpy(out, sc, sizeof sc);
    return true;
}

bool srv_lora_parse(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    srv_lora_global(t->lora);
    json_t *v = json_object_get(b, "lora");
    if (!v || json_is_null(v)) return true;
    return parse_list(s, v, "lora", t->lora, r);
}

static json_t *adapters_json(const srv *s) {
    float sc[SRV_MAX_LORA];
    srv_lora_global(sc);
    json_t *a = json_array();
    for (int k = 0; k < s->n_loras; k++)
        json_array_append_new(a, json_pack("{s:i,s:s,s:f}", "id", k, "path", s->loras[k]->path, "scale", (double)sc[k]));
    return a;
}

bool srv_lora_route(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r) {
    const size_t plen = strcspn(url, "?");
    if (plen != 14 || strncmp(url, "/lora-adapters", 14)) return false;
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
        srv_reply_json(r, 200, adapters_json(s));
        return true;
    }
    if (strcmp(method, "POST")) {
        srv_reply_error(r, 405, "invalid_request_error", "/lora-adapters needs GET or POST");
        r->allow = "GET, HEAD, POST, OPTIONS";
        return true;
    }
    json_error_t je;
    json_t *b = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    float sc[SRV_MAX_LORA];
    if (!b) srv_reply_error(r, 400, "invalid_request_error", "the body is not valid JSON: %s", je.text);
    else if (parse_list(s, b, "body", sc, r)) {
        srv_lora_set_global(sc);
        srv_reply_json(r, 200, json_pack("{s:b}", "success", true));
    }
    json_decref(b);
    return true;
}
