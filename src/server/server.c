/* server.c: bring `bitspark serve` up and down (server.h): the HTTP daemon first (answering
 * "loading"), then the model and its tokenizer and chat template, the slots with their
 * scheduler thread. */
#include "server/server.h"
#include "server/server_vision.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int srv_open(srv *s, const srv_config *cfg) {
    memset(s, 0, sizeof *s);
#ifdef M_MMAP_THRESHOLD
    /* Request bodies and their JSON are the server's only big buffers. glibc would otherwise
     * raise its mmap threshold after the first big free and keep later ones in per-thread
     * arenas, so RSS after a burst of 8 MB bodies would stay at arenas x body size; mapped
     * buffers go back to the system when freed. Setting it also stops the dynamic raise. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    s->cfg = *cfg;
    if (s->cfg.loop.det.min_repeats == 0) s->cfg.loop = bs_loop_guard_default_params();   /* not set */
    s->t_start = bs_time();
    s->t_created = (long)time(NULL);
    pthread_mutex_init(&s->metrics.mu, NULL);
    srv_state_set(s, SRV_LOADING);
    if (!cfg->model) return bs_error("no model given (-m FILE)");
    if (cfg->n_slots < 1 || cfg->n_slots > 256) return bs_error("-np: %d slots (1..256)", cfg->n_slots);
    /* listening first: a balancer's probes see a replica that is loading, not a dead one */
    return srv_http_start(s);
}

/* The model, its tokenizer and template, the slots (and the drafter): the parts the HTTP side
 * reads only once the state says READY (stored with release order after them). */
int srv_load(srv *s) {
    const srv_config *cfg = &s->cfg;
    bs_model_params mp = {.no_mmap = cfg->no_mmap, .device = cfg->device};
    if (!(s->model = bs_model_load(cfg->model, &mp))) return -1;
    if (srv_lora_load(s)) return -1;
    const int train = bs_model_n_ctx_train(s->model);
    if (s->cfg.n_ctx < 0) s->cfg.n_ctx = BS_MIN(train, 1 << 24);   /* -c 0: the model's, as llama-server reads it */
    if (s->cfg.n_ctx > train) {   /* as `help serve` says: capped by the model */
        fprintf(stderr, "warning: -c %d is more than the model's training context of %d tokens: using %d\n",
                s->cfg.n_ctx, train, train);
        s->cfg.n_ctx = train;
    }
    if (!(s->tok = bs_tokenizer_load(s->model))) return -1;
    if (cfg->normalize_set && bs_tokenizer_set_normalize(s->tok, cfg->normalize)) return -1;
    for (int32_t id = 0; id < bs_tokenizer_n_vocab(s->tok); id++) {
        const char *piece;
        size_t n = 0;
        if (bs_token_to_piece(s->tok, id, true, &piece, &n) == 0 && (int)n > s->max_piece) s->max_piece = (int)n;
    }
    if (cfg->mmproj) {
        if (!(s->mmproj = bs_vision_load(cfg->mmproj, s->model))) return -1;
        srv_vision_set_budget(cfg->image_budget);
    }
    srv_media_set_path(cfg->media_path);
    s->tmpl_text = gguf_get_str(s->model->file, "tokenizer.chat_template");
    bs_chat_template_detect(s->tmpl_text, &s->tmpl);
    if (!(s->sched = srv_sched_new(s->model, s->tok, &s->cfg, &s->metrics, s->mmproj))) return -1;
    srv_state_set(s, SRV_READY);
    return 0;
}

int srv_start(srv *s, const srv_config *cfg) {
    if (srv_open(s, cfg) || srv_load(s)) {   /* after either fails, srv_stop undoes the rest */
        srv_stop(s);
        return -1;
    }
    return 0;
}

void srv_stop(srv *s) {
    srv_http_stop(s);
    srv_sched_free(s->sched);
    bs_tokenizer_free(s->tok);
    bs_mmproj_free(s->mmproj);
    s->mmproj = NULL;
    srv_lora_unload(s);
    bs_model_free(s->model);
    s->sched = NULL;
    s->tok = NULL;
    s->model = NULL;
    pthread_mutex_destroy(&s->metrics.mu);
}
