/* api_model.c: the public API's model metadata, logging hooks, the sessions' abort callback and
 * the defaults of every params struct (bitspark.h): what the command line uses, so an embedder
 * who starts from them gets the same behaviour. */
#include "bitspark.h"
#include "formats/gguf.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "io/util.h"

#include <time.h>
#include <unistd.h>

void bs_log_set(bs_log_callback cb, void *ud) { bs_log_set_sink(cb, ud); }
void bs_log_set_level(int level) { bs_log_level = level < 0 ? 0 : level; }

const char *bs_model_meta_str(const bs_model *m, const char *key) {
    return m && key ? gguf_get_str(m->file, key) : NULL;
}
const char *bs_model_name(const bs_model *m) {
    const char *n = bs_model_meta_str(m, "general.name");
    return n ? n : "";
}
uint64_t bs_model_size(const bs_model *m) { return m ? m->file->file_size : 0; }
const char *bs_model_chat_template(const bs_model *m) { return bs_model_meta_str(m, "tokenizer.chat_template"); }
bool bs_model_is_vocab_only(const bs_model *m) { return m && !m->layers; }

uint64_t bs_model_n_params(const bs_model *m) {
    if (!m) return 0;
    uint64_t n = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        uint64_t e = 1;
        for (int d = 0; d < t->n_dims; d++) e *= (uint64_t)t->ne[d];
        n += e;
    }
    return n;
}

void bs_session_set_abort(bs_session *s, bool (*abort)(void *ud), void *ud) {
    s->abort_cb = abort;
    s->abort_ud = ud;
}

/* every core, as cli_gen_defaults (the matmul pool caps at 64) */
static int all_cores(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)BS_MIN(n, 64) : 1;
}

bs_model_params bs_model_default_params(void) { return (bs_model_params){0}; }

bs_session_params bs_session_default_params(void) {
    return (bs_session_params){.n_ctx = 0, .n_batch = 512, .kv_type = BS_KV_F16, .n_threads = all_cores(),
                               .n_rollback = 16};
}

bs_gen_params bs_gen_default_params(void) {
    return (bs_gen_params){.n_threads = all_cores(), .draft_max = BS_DRAFT_AUTO};
}

bs_gen_request bs_gen_request_default_params(void) {
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);   /* as `run` without --seed */
    return r;
}
