/* server_props.c: GET /props and GET /models, /v1/models in llama-server's shapes.
 *
 * /props: default_generation_settings with llama-server's "params" (the sampling defaults of
 * requests that do not set them: serve's --temp ..., the fixed sampler order, the --n-predict
 * cap), total_slots, model_path, chat_template, modalities, build_info, is_sleeping.
 * /models: each model with its id (the first --alias, else the file name), "aliases" (every
 * --alias), "tags" (--tags) and "capabilities": completion, chat, vision (an mmproj is loaded),
 * embeddings (--embeddings), infill (the vocabulary has the FIM tokens). */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <string.h>

/* A special token's text ("" without one). */
static json_t *token_text(const srv *s, int32_t id) {
    const char *p = "";
    size_t len = 0;
    if (id >= 0) bs_token_to_piece(s->tok, id, true, &p, &len);
    return json_stringn(p, len);
}

static json_t *breakers_json(const bs_engine_opts *o) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    json_t *a = json_array();
    const int n = o->n_breakers < 0 ? 4 : o->n_breakers;
    for (int i = 0; i < n; i++) json_array_append_new(a, json_string(o->n_breakers < 0 ? defaults[i] : o->breakers[i]));
    return a;
}

static json_t *params_json(const srv *s) {
    const bs_engine_opts *o = &s->cfg.gen;
    const bs_sampler_params *p = &o->sp;
    json_t *j = json_object();
    json_object_set_new(j, "seed", json_integer(o->seed_set ? (json_int_t)p->seed : 4294967295LL));   /* -1: random */
    srv_sampler_settings(j, p);
    json_object_set_new(j, "dry_sequence_breakers", breakers_json(o));
    json_object_set_new(j, "n_predict", json_integer(srv_n_predict_cap(&s->cfg)));
    json_object_set_new(j, "max_tokens", json_integer(srv_n_predict_cap(&s->cfg)));
    json_object_set_new(j, "n_keep", json_integer(o->n_keep));
    json_object_set_new(j, "ignore_eos", json_boolean(o->ignore_eos));
    json_object_set_new(j, "stream", json_false());
    json_object_set_new(j, "n_probs", json_integer(0));
    json_object_set_new(j, "stop", json_array());
    char order[16];
    srv_sampler_default_order(s->cfg.samplers, s->cfg.samplers_letters, order);
    json_object_set_new(j, "samplers", srv_sampler_chain_json(s->cfg.samplers ? order : NULL));
    json_object_set_new(j, "speculative.n_max", json_integer(s->cfg.drafter ? s->cfg.draft_max : 0));
    float sc[SRV_MAX_LORA];
    srv_lora_global(sc);
    json_t *lora = json_array();
    for (int k = 0; k < s->n_loras; k++) json_array_append_new(lora, json_pack("{s:i,s:f}", "id", k, "scale", (double)sc[k]));
    json_object_set_new(j, "lora", lora);
    return j;
}

void srv_api_props(srv *s, srv_reply *r) {
    const bs_sampler_params d = s->cfg.gen.sp;
    const bs_loop_guard_params *lg = &s->cfg.loop;
    json_t *gs = json_pack("{s:i,s:f,s:i,s:f,s:f,s:i,s:{s:s,s:i,s:i,s:i,s:i}}", "n_ctx", srv_sched_n_ctx(s->sched),
                           "temperature", (double)d.temp, "top_k", d.top_k, "top_p", (double)d.top_p, "min_p",
                           (double)d.min_p, "n_predict", srv_n_predict_cap(&s->cfg), "loop_guard", "mode",
                           bs_loop_guard_mode_name(lg->mode), "min_repeats", lg->det.min_repeats, "min_chars",
                           lg->det.min_chars, "max_period", lg->det.max_period, "max_rewinds", lg->max_rewinds);
    json_object_set_new(gs, "params", params_json(s));
    json_object_set_new(gs, "speculative", json_boolean(s->cfg.drafter != NULL));
    json_t *j = json_pack("{s:o,s:i,s:s,s:s,s:s,s:s,s:b,s:i}", "default_generation_settings", gs, "total_slots",
                          srv_sched_n_slots(s->sched), "model_path", s->cfg.model, "model_alias", srv_model_name(s),
                          "chat_template", s->tmpl_text ? s->tmpl_text : "", "build_info",
                          "bitspark-" BITSPARK_VERSION, "speculative", s->cfg.drafter != NULL, "n_ctx",
                          srv_sched_n_ctx(s->sched));
    json_object_set_new(j, "modalities", json_pack("{s:b,s:b}", "vision", s->mmproj != NULL, "audio", 0));
    json_object_set_new(j, "bos_token", token_text(s, bs_token_bos(s->tok)));
    json_object_set_new(j, "eos_token", token_text(s, bs_token_eos(s->tok)));
    json_object_set_new(j, "media_marker", json_string("<__media__>"));   /* /completion's multimodal prompts */
    json_object_set_new(j, "endpoint_slots", json_boolean(!s->cfg.no_slots));
    json_object_set_new(j, "endpoint_props", json_false());   /* POST /props: 501 */
    json_object_set_new(j, "endpoint_metrics", json_true());
    json_object_set_new(j, "webui", json_boolean(!s->cfg.no_webui));
    json_object_set_new(j, "is_sleeping", json_boolean(srv_sched_sleeping(s->sched)));
    srv_reply_json(r, 200, j);
}

static bool has_fim(const srv *s) {
    return bs_token_lookup(s->tok, "<|fim_prefix|>") >= 0 && bs_token_lookup(s->tok, "<|fim_suffix|>") >= 0 &&
           bs_token_lookup(s->tok, "<|fim_middle|>") >= 0;
}

static json_t *strings_json(const char *const *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_string(v[i]));
    return a;
}

void srv_api_models(srv *s, srv_reply *r) {
    json_t *caps = json_pack("[s,s]", "completion", "chat");
    if (s->mmproj) json_array_append_new(caps, json_string("vision"));
    if (s->cfg.embeddings) json_array_append_new(caps, json_string("embeddings"));
    if (has_fim(s)) json_array_append_new(caps, json_string("infill"));
    json_t *meta = json_pack("{s:i,s:i,s:i,s:i,s:i,s:I,s:I}", "vocab_type", 2, "n_vocab", bs_model_n_vocab(s->model),
                             "n_ctx_train", bs_model_n_ctx_train(s->model), "n_embd", bs_model_n_embd(s->model),
                             "n_layer", bs_model_n_layer(s->model), "n_params", (json_int_t)bs_model_n_params(s->model),
                             "size", (json_int_t)bs_model_size(s->model));   /* vocab_type 2: BPE, llama.cpp's number */
    json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:o,s:O}", "id", srv_model_name(s), "object", "model", "created",
                          (json_int_t)s->t_created, "owned_by", "llamacpp", "aliases",
                          strings_json(s->cfg.aliases, s->cfg.n_aliases), "tags",
                          strings_json(s->cfg.tags, s->cfg.n_tags), "meta", meta, "capabilities", caps);
    /* llama-server's Ollama-style list beside OpenAI's */
    json_t *om = json_pack("{s:s,s:s,s:s,s:o,s:o}", "name", srv_model_name(s), "model", srv_model_name(s), "type",
                           "model", "tags", strings_json(s->cfg.tags, s->cfg.n_tags), "capabilities", caps);
    srv_reply_json(r, 200, json_pack("{s:s,s:[o],s:[o]}", "object", "list", "data", m, "models", om));
}

/* POST /api/show (Ollama's, as llama-server answers it for model pickers that speak Ollama): the
 * chat template, the context a slot holds, the capabilities. */
void srv_api_show(srv *s, srv_reply *r) {
    json_t *caps = json_pack("[s]", "completion");
    if (s->mmproj) json_array_append_new(caps, json_string("vision"));
    const char *tmpl = bs_model_chat_template(s->model), *arch = bs_model_meta_str(s->model, "general.architecture");
    if (!arch) arch = "qwen35";
    srv_reply_json(r, 200, json_pack("{s:s,s:s,s:s,s:{s:i},s:{s:s,s:s,s:[s],s:s,s:s},s:o}", "template", tmpl ? tmpl : "",
                                     "modelfile", "", "parameters", "", "model_info", "llama.context_length",
                                     srv_sched_n_ctx(s->sched), "details", "format", "gguf", "family", arch,
                                     "families", arch, "parameter_size", "", "quantization_level", "",
                                     "capabilities", caps));
}
