/* vk_none.c: the backend's entry points in a build without it (no Vulkan headers or glslc at
 * build time, or -DBS_VULKAN=OFF): every device request says so, the CPU path runs. */
#include "vulkan/backend.h"
#include "io/util.h"

bool bs_vk_built(void) { return false; }
bool bs_vk_rounds_input(int type, int64_t ne0) { (void)type, (void)ne0; return false; }
int bs_vk_devices(bs_vk_device_info *out, int max) {
    (void)out; (void)max;
    return bs_error("this bitspark was built without the Vulkan backend (BS_VULKAN=OFF)");
}
const char *bs_vk_type_name(int type) { (void)type; return "?"; }
int bs_vk_pick(bool named) {
    (void)named;
    return bs_error("this bitspark was built without the Vulkan backend (BS_VULKAN=OFF)");
}
bs_vk_ctx *bs_vk_open(int index) {
    (void)index;
    bs_error("this bitspark was built without the Vulkan backend (BS_VULKAN=OFF)");
    return NULL;
}
void bs_vk_close(bs_vk_ctx *c) { (void)c; }
const bs_vk_device_info *bs_vk_info(const bs_vk_ctx *c) { (void)c; return NULL; }
int bs_vk_validation_messages(void) { return 0; }
bool bs_vk_sync_validation(void) { return false; }
bool bs_vk_has_layer(const char *name) { (void)name; return false; }
void bs_vk_memory_plan(const bs_vk_device_info *d, char *out, size_t n) { (void)d; if (n) *out = 0; }
void bs_vk_stats_get(const bs_vk_ctx *c, bs_vk_stats *out) { (void)c; *out = (bs_vk_stats){0}; }
void bs_vk_stats_reset(bs_vk_ctx *c) { (void)c; }
bool bs_vk_uses_dp4a(const bs_vk_ctx *c) { (void)c; return false; }
bool bs_vk_asum_staged(const bs_vk_ctx *c) { (void)c; return false; }
int bs_vk_delta_spread(const bs_vk_ctx *c) { (void)c; return 1; }
uint32_t bs_vk_delta_cols(const bs_vk_ctx *c) { (void)c; return 64; }
bool bs_vk_fma_fused(const bs_vk_ctx *c) { (void)c; return false; }
int bs_vk_mm_mode(const bs_vk_ctx *c) { (void)c; return BS_VK_MM_OFF; }
bool bs_vk_mm_lanes(const bs_vk_ctx *c) { (void)c; return false; }
const char *bs_vk_mm_name(int mode) { (void)mode; return "mv_q"; }
bs_vk_coop_shape bs_vk_mm_coop(const bs_vk_ctx *c, bool *khr) {
    (void)c;
    if (khr) *khr = false;
    return (bs_vk_coop_shape){0, 0, 0};
}
bs_vk_matrix *bs_vk_matrix_new(bs_vk_ctx *c, const bs_vk_tensor *W) { (void)c; (void)W; return NULL; }
void bs_vk_matrix_free(bs_vk_ctx *c, bs_vk_matrix *m) { (void)c; (void)m; }
int bs_vk_matrix_parts(const bs_vk_matrix *m) { (void)m; return 0; }
int bs_vk_matrix_split(const bs_vk_matrix *m) { (void)m; return 0; }
int bs_vk_matvec(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y) {
    (void)c; (void)m; (void)x; (void)n; (void)y;
    return bs_error("no Vulkan backend");
}
int bs_vk_matvec_norm(bs_vk_ctx *c, const bs_vk_matrix *m, const float *d, int n, const bs_vk_epilogue *e) {
    (void)c; (void)m; (void)d; (void)n; (void)e;
    return bs_error("no Vulkan backend");
}

int bs_vk_matvec_glu(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const float *d, int n,
                     const bs_vk_epilogue *e) {
    (void)c; (void)gate; (void)up; (void)d; (void)n; (void)e;
    return bs_error("no Vulkan backend");
}

int bs_vk_matvec_conv(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y, float *win, const float *w, int K,
                      float *out, bool from_in) {
    (void)c; (void)m; (void)x; (void)n; (void)y; (void)win; (void)w; (void)K; (void)out; (void)from_in;
    return bs_error("no Vulkan backend");
}
int bs_vk_rmsnorm(bs_vk_ctx *c, const float *x, const float *w, int d, int n, float eps, float *y) {
    (void)c; (void)x; (void)w; (void)d; (void)n; (void)eps; (void)y;
    return bs_error("no Vulkan backend");
}
int bs_vk_quantize_q8(bs_vk_ctx *c, const float *x, int d, int n, void *out) {
    (void)c; (void)x; (void)d; (void)n; (void)out;
    return bs_error("no Vulkan backend");
}
int bs_vk_embed(bs_vk_ctx *c, const bs_vk_matrix *m, const int32_t *tokens, int n, float *out) {
    (void)c; (void)m; (void)tokens; (void)n; (void)out;
    return bs_error("no Vulkan backend");
}
int bs_vk_pipes_build(bs_vk_ctx *c) { (void)c; return bs_error("no Vulkan backend"); }
int bs_vk_kernel_run(bs_vk_ctx *c, const char *kernel, void *const *data, const size_t *bytes, int n_bind, const void *push,
                     size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    (void)c; (void)kernel; (void)data; (void)bytes; (void)n_bind; (void)push; (void)push_bytes; (void)gx; (void)gy; (void)gz;
    return bs_error("no Vulkan backend");
}
uint32_t bs_vk_amax_chunk(uint32_t V) { return V; }
double bs_vk_copy_bandwidth(bs_vk_ctx *c, size_t bytes, int reps) { (void)c; (void)bytes; (void)reps; return -1; }
int bs_vk_copy_chain(bs_vk_ctx *c, const void *in, void *out, size_t bytes, bool barrier) {
    (void)c; (void)in; (void)out; (void)bytes; (void)barrier;
    return bs_error("no Vulkan backend");
}
bs_vk_net *bs_vk_net_new(bs_vk_ctx *c, const bs_vk_net_desc *d) { (void)c; (void)d; bs_error("no Vulkan backend"); return NULL; }
void bs_vk_net_free(bs_vk_net *n) { (void)n; }
int bs_vk_net_sleep(bs_vk_net *n) { (void)n; return bs_error("Vulkan: not built"); }
int bs_vk_net_wake(bs_vk_net *n, const bs_vk_net_desc *d) { (void)n; (void)d; return bs_error("Vulkan: not built"); }
bool bs_vk_net_asleep(const bs_vk_net *n) { (void)n; return false; }
uint64_t bs_vk_bytes_held(const bs_vk_ctx *c) { (void)c; return 0; }
int bs_vk_net_lora(bs_vk_net *n, const char *name, int r, const float *a, const float *b, float scale) {
    (void)n; (void)name; (void)r; (void)a; (void)b; (void)scale;
    return bs_error("no Vulkan backend");
}
void bs_vk_net_lora_clear(bs_vk_net *n) { (void)n; }
bs_vk_sess *bs_vk_sess_new(bs_vk_net *n, int n_ctx, int n_batch, bool kv_f32) {
    (void)n; (void)n_ctx; (void)n_batch; (void)kv_f32;
    return NULL;
}
void bs_vk_sess_free(bs_vk_sess *s) { (void)s; }
int bs_vk_sess_rows(const bs_vk_sess *s) { (void)s; return 0; }
int bs_vk_sess_taps_read(bs_vk_sess *s, float *out, int n) {
    (void)s; (void)out; (void)n;
    return bs_error("Vulkan backend not built");
}
int bs_vk_sess_eval(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, int logits_mode,
                    float *logits, const int *taps, int n_taps, float *tap_out) {
    (void)s; (void)tokens; (void)n; (void)pos0; (void)rope; (void)logits_mode; (void)logits; (void)taps; (void)n_taps; (void)tap_out;
    return bs_error("no Vulkan backend");
}
int bs_vk_sess_eval_out(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, const bs_vk_out *o,
                        const int *taps, int n_taps, float *tap_out) {
    (void)s; (void)tokens; (void)n; (void)pos0; (void)rope; (void)o; (void)taps; (void)n_taps; (void)tap_out;
    return bs_error("no Vulkan backend");
}
int bs_vk_sess_sample_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, const bs_draw *p,
                            const float *u, int32_t *ids, float *vals, int *n_top) {
    (void)s; (void)tok; (void)pos0; (void)rope0; (void)rope1; (void)p; (void)u; (void)ids; (void)vals; (void)n_top;
    return bs_error("Vulkan backend not built");
}
int bs_vk_sess_decode_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, int32_t *next) {
    (void)s; (void)tok; (void)pos0; (void)rope0; (void)rope1; (void)next;
    return bs_error("no Vulkan backend");
}
int bs_vk_sess_eval_rows(bs_vk_sess *s, const float *embd, int n, int pos0, const float *rope, int logits_mode,
                         float *logits, const int *taps, int n_taps, float *tap_out) {
    (void)s; (void)embd; (void)n; (void)pos0; (void)rope; (void)logits_mode; (void)logits; (void)taps; (void)n_taps;
    (void)tap_out;
    return bs_error("no Vulkan backend");
}
int bs_vk_sess_snapshot(bs_vk_sess *s) { (void)s; return bs_error("no Vulkan backend"); }
int bs_vk_sess_restore(bs_vk_sess *s) { (void)s; return bs_error("no Vulkan backend"); }
int bs_vk_sess_replay(bs_vk_sess *s, int j) { (void)s, (void)j; return bs_error("no Vulkan backend"); }
int bs_vk_sess_reset(bs_vk_sess *s) { (void)s; return bs_error("no Vulkan backend"); }
int bs_vk_sess_state(bs_vk_sess *s, float *conv, float *ssm, size_t conv_stride, size_t ssm_stride, uint8_t *k,
                     uint8_t *v, size_t kv_stride, int n_pos, bool to_host) {
    (void)s; (void)conv; (void)ssm; (void)conv_stride; (void)ssm_stride; (void)k; (void)v; (void)kv_stride; (void)n_pos; (void)to_host;
    return bs_error("no Vulkan backend");
}
bs_vk_batch *bs_vk_batch_new(bs_vk_net *n, int max_rows, int max_logit_rows) {
    (void)n; (void)max_rows; (void)max_logit_rows;
    bs_error("no Vulkan backend");
    return NULL;
}
void bs_vk_batch_free(bs_vk_batch *b) { (void)b; }
int bs_vk_batch_rows(const bs_vk_batch *b) { (void)b; return 0; }
int bs_vk_batch_logit_rows(const bs_vk_batch *b) { (void)b; return 0; }
int bs_vk_batch_seqs(const bs_vk_batch *b) { (void)b; return 0; }
int bs_vk_batch_eval(bs_vk_batch *b, const bs_vk_seq *q, int n_seq) {
    (void)b; (void)q; (void)n_seq;
    return bs_error("no Vulkan backend");
}
bs_vk_dspark *bs_vk_dspark_new(bs_vk_ctx *c, const bs_vk_dspark_desc *d) {
    (void)c; (void)d;
    bs_error("this bitspark was built without the Vulkan backend (BS_VULKAN=OFF)");
    return NULL;
}
void bs_vk_dspark_free(bs_vk_dspark *d) { (void)d; }
bs_vk_dctx *bs_vk_dctx_new(bs_vk_dspark *d, int n_rows_max) { (void)d; (void)n_rows_max; return NULL; }
void bs_vk_dctx_free(bs_vk_dctx *c) { (void)c; }
int bs_vk_dctx_append(bs_vk_dctx *c, const float *taps, int n, int row0, const float *rope) {
    (void)c; (void)taps; (void)n; (void)row0; (void)rope;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_append_sess(bs_vk_dctx *c, const bs_vk_sess *s, int src0, int n, int row0, const float *rope) {
    (void)c; (void)s; (void)src0; (void)n; (void)row0; (void)rope;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_append_multi(const bs_vk_dappend *a, int n) {
    (void)a; (void)n;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_blocks(const bs_vk_dblock *b, int n, int32_t mask_id) {
    (void)b; (void)n; (void)mask_id;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dspark_max_blocks(const bs_vk_dspark *d) { (void)d; return 1; }
int bs_vk_dctx_logits(bs_vk_dctx *c, int first, int n, float *out) {
    (void)c; (void)first; (void)n; (void)out;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_slot_top(bs_vk_dctx *c, int slot, int32_t prev, int32_t mask_id, int k, int32_t *ids, float *vals) {
    (void)c; (void)slot; (void)prev; (void)mask_id; (void)k; (void)ids; (void)vals;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_draft_sampled(bs_vk_dctx *c, int32_t anchor, int32_t mask_id, int n, const bs_draw *p, const float *u,
                             int32_t *drafts, int32_t *ids, float *vals, int *counts) {
    (void)c; (void)anchor; (void)mask_id; (void)n; (void)p; (void)u; (void)drafts; (void)ids; (void)vals; (void)counts;
    return bs_error("Vulkan backend not built");
}
int bs_vk_dctx_draft_greedy(bs_vk_dctx *c, int32_t anchor, int32_t mask_id, int n, int32_t *drafts) {
    (void)c; (void)anchor; (void)mask_id; (void)n; (void)drafts;
    return bs_error("Vulkan backend not built");
}
bs_vk_vit *bs_vk_vit_new(bs_vk_ctx *c, const bs_vk_vit_desc *d) {
    (void)c; (void)d;
    bs_error("no Vulkan backend");
    return NULL;
}
void bs_vk_vit_free(bs_vk_vit *v) { (void)v; }
int bs_vk_vit_encode(bs_vk_vit *v, const float *patches, const float *pos, const float *rope, int n, float *out) {
    (void)v; (void)patches; (void)pos; (void)rope; (void)n; (void)out;
    return bs_error("no Vulkan backend");
}

/* The SPIR-V table and the KHR rewrite (vk_internal.h) for tests that link them and skip at run
 * time on a build without the backend. */
struct bs_vk_spirv;
const struct bs_vk_spirv *bs_vk_shader(const char *name) { (void)name; return NULL; }
int bs_vk_spirv_coop_khr(const uint32_t *in, size_t n_words, uint32_t **out, size_t *out_words) {
    (void)in; (void)n_words;
    *out = NULL;
    *out_words = 0;
    return bs_error("no Vulkan backend");
}
