/* backend.h: the Vulkan compute backend, and all that code outside src/vulkan/ may include
 * from it. The same binary runs with or without Vulkan: libvulkan.so.1 is opened at run time,
 * and a build without the Vulkan headers or glslc (CMake BS_VULKAN=OFF) keeps these entry
 * points, which then report that the backend is not built.
 *
 * What it offers: device discovery and the --device rule; a context per device; a network
 * (bs_vk_net_desc, filled by the model layer) uploaded with its weights repacked into layouts
 * where neighbouring invocations read neighbouring words; sessions that evaluate the whole
 * qwen35 forward on the device (state and KV cache stay there; logits and taps come back),
 * snapshot/restore their recurrent state for exact rollback and copy their state to and from
 * the CPU session's layouts; and the kernels alone (products, RMSNorm, the int8 quantizer, the
 * copy roofline) for the tests and bench. The model layer keeps positions and bookkeeping. */
#ifndef BS_VK_BACKEND_H
#define BS_VK_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bs_vk_dev_type { BS_VK_OTHER = 0, BS_VK_INTEGRATED = 1, BS_VK_DISCRETE = 2, BS_VK_VIRTUAL = 3, BS_VK_CPU = 4 };

typedef struct { uint32_t m, n, k; } bs_vk_coop_shape;   /* a cooperative matrix shape M x N x K */

/* What the backend uses of a device. */
typedef struct bs_vk_device_info {
    int index;                   /* position in the instance's list: --device vulkan:N */
    char name[256];
    int type;                    /* bs_vk_dev_type */
    uint32_t api_version;        /* VK_MAKE_API_VERSION */
    char driver[256];            /* driver name and info */
    uint32_t subgroup_size;
    uint32_t shared_mem;         /* maxComputeSharedMemorySize */
    uint32_t max_storage;        /* maxPerStageDescriptorStorageBuffers */
    uint32_t max_groups_y;       /* maxComputeWorkGroupCount[1] */
    uint64_t max_binding;        /* maxStorageBufferRange */
    uint32_t offset_align;       /* minStorageBufferOffsetAlignment */
    uint64_t heap_bytes;         /* largest device-local heap */
    uint64_t max_alloc;          /* maxMemoryAllocationSize (Maintenance3) */
    uint64_t max_buffer;         /* maxBufferSize (Maintenance4), or max_alloc without it */
    bool unified;                /* device memory is the host's (integrated GPU, CPU device):
                                    device buffers in host-visible device memory, mapped */
    bool memory_budget;          /* VK_EXT_memory_budget: heaps' free space from the driver */
    bool fake_memory;            /* the heaps and types of BITSPARK_VK_FAKE_MEMORY (tests) */
    int n_heaps, n_types;
    struct { uint64_t size, free; bool device_local; } heaps[16];
    struct { uint32_t flags; int heap; } types[32];   /* flags: VkMemoryPropertyFlags */
    bool int8, int16, fp16, storage8, storage16, bda;
    bool dot_product;            /* VK_KHR_shader_integer_dot_product's feature (dp4a) */
    bool coop_matrix;            /* VK_KHR_cooperative_matrix */
    /* the int8 x int8 -> int32 subgroup shapes mm_q_coop.comp takes (M and N dividing 32, K 32
       or 16), the largest of VK_NV_cooperative_matrix's and of VK_KHR_cooperative_matrix's;
       zeros where none */
    bs_vk_coop_shape coop_nv, coop_khr;
    bool timestamps;             /* timestamp queries on the compute queue */
    float timestamp_ns;          /* timestampPeriod */
} bs_vk_device_info;

/* Whether the backend was compiled in. */
bool bs_vk_built(void);
/* The devices of the Vulkan instance. Returns their count (<= max written), or -1 with
 * bs_error when there is no loader or no instance. */
int bs_vk_devices(bs_vk_device_info *out, int max);
const char *bs_vk_type_name(int type);

/* --device: "auto", "cpu", "vulkan" or "vulkan:N". Returns 0, or -1 with bs_error on a bad
 * spelling. kind: 0 CPU, 1 Vulkan; index -1 when not given; named: the user asked for it. */
enum { BS_DEVICE_CPU = 0, BS_DEVICE_VULKAN = 1, BS_DEVICE_AUTO = 2 };
int bs_vk_parse_device(const char *spec, int *kind, int *index);
/* The device `auto` takes: the first discrete, else integrated GPU (a CPU Vulkan device such
 * as lavapipe only with BITSPARK_VK_ALLOW_CPU=1), or -1 for none. For index -1 of a named
 * vulkan device: the same rule, but any device type. */
int bs_vk_pick(bool named);

typedef struct bs_vk_ctx bs_vk_ctx;
/* A context (logical device, compute queue, pipelines) on device index. NULL with bs_error. */
bs_vk_ctx *bs_vk_open(int index);
void bs_vk_close(bs_vk_ctx *c);
const bs_vk_device_info *bs_vk_info(const bs_vk_ctx *c);
/* Whether the context's int8 products use dp4a (off with BITSPARK_VK_DP4A=0). */
bool bs_vk_uses_dp4a(const bs_vk_ctx *c);
/* whether mv_q stages the activation block sums per workgroup (BITSPARK_VK_ASUM) */
bool bs_vk_asum_staged(const bs_vk_ctx *c);
/* the delta rule's lanes per state column: 8 (state in registers) or 1 (BITSPARK_VK_DELTA) */
int bs_vk_delta_spread(const bs_vk_ctx *c);
/* the state columns of a delta-rule workgroup: 32 with 8 lanes (256 invocations), 64 with one */
uint32_t bs_vk_delta_cols(const bs_vk_ctx *c);
/* How the context's integer products of more than 8 rows run: mv_q in groups of 8 (BS_VK_MM_OFF),
 * mm_q's tiles with plain integer sums (TILE) or with int8 cooperative matrices (COOP); the same
 * bits every way. BITSPARK_VK_MM=off|tile|coop|auto (auto: COOP where the device has the shape
 * and the kernel gave mv_q's bits on a check product when the context opened, else OFF). */
enum { BS_VK_MM_OFF = 0, BS_VK_MM_TILE = 1, BS_VK_MM_COOP = 2 };
int bs_vk_mm_mode(const bs_vk_ctx *c);
/* Whether its Q8_0 / Q4_1 products of more than 8 rows take mm_ql's tiles (vk_mm.c). */
bool bs_vk_mm_lanes(const bs_vk_ctx *c);
/* COOP's shape and extension: NV's where the device has it, else KHR's (BITSPARK_VK_COOP=nv|khr
 * picks one); khr is set for VK_KHR_cooperative_matrix (mm_q_coop's module rewritten: vk_spirv.c) */
bs_vk_coop_shape bs_vk_mm_coop(const bs_vk_ctx *c, bool *khr);
const char *bs_vk_mm_name(int mode);
/* Whether the device's fma() rounds once; else the shaders emulate it (fma_rn.glsl). */
bool bs_vk_fma_fused(const bs_vk_ctx *c);
/* What a context submitted since it was opened (or last reset): dispatches and full barriers
 * recorded in the command buffers submitted (a cached step's counted at every submission),
 * submissions, bytes the host read back (logits, taps, state), weight bytes the products read
 * and token rows evaluated by the target's forward. BITSPARK_PROFILE=1 prints them per token when the context closes. */
typedef struct bs_vk_stats {
    uint64_t dispatches, barriers, submits, read_bytes, tokens;
    uint64_t weight_bytes;       /* weight codes and scales bound by the products' workgroups */
    uint64_t ahead, discarded;   /* greedy steps submitted ahead (bs_vk_sess_decode_ahead), and
                                    those of them not wanted (their state put back) */
} bs_vk_stats;
void bs_vk_stats_get(const bs_vk_ctx *c, bs_vk_stats *out);
void bs_vk_stats_reset(bs_vk_ctx *c);
/* Messages the validation layer reported (BITSPARK_VK_VALIDATE=1) since the process began. */
int bs_vk_validation_messages(void);
/* Whether that validation checks synchronization too (hazards between commands; where the
 * layer offers VK_EXT_validation_features). */
bool bs_vk_sync_validation(void);
/* Whether the Vulkan loader offers instance layer `name` (false without a loader). */
bool bs_vk_has_layer(const char *name);
/* Which memory heap a device buffer goes to first and which types follow, in words ("heap 1
 * (device-local, 8.0 GiB, 7.9 GiB free)"), for `devices`. */
void bs_vk_memory_plan(const bs_vk_device_info *d, char *out, size_t n);

/* A weight matrix as the model holds it: ne1 rows of ne0 elements of ggml type `type`, rows of
 * row_bytes (formats/quant.h's layout), contiguous from data. */
/* The Hadamard fold a tensor's rows carry (PrismML's Bonsai 2; cpu/matmul.h's bs_rotation:
 * block 0 = none): its products take x rotated, an embedding's rows are rotated back. */
typedef struct bs_vk_fold {
    int block;
    int64_t width;
    const float *signs;      /* width values of +-1, or NULL */
    int perm_hd, perm_nk, perm_rep;
    bool inverse;
} bs_vk_fold;

typedef struct bs_vk_tensor {
    int type;
    int64_t ne0, ne1;
    const void *data;
    size_t row_bytes;
    const char *name;
    bs_vk_fold fold;
} bs_vk_tensor;

/* What the model layer hands the backend to put a network on the device (the forward that will
 * consume it is the next part): hyper-parameters and each layer's tensors. Vectors (norms,
 * conv taps, gates' biases) are F32 arrays of the sizes the hyper-parameters give. */
typedef struct bs_vk_layer_desc {
    bool recurrent;
    const float *attn_norm, *post_norm;
    bs_vk_tensor ffn_gate, ffn_up, ffn_down;
    bs_vk_tensor qkv, gate, beta, alpha, ssm_out;
    const float *conv1d, *dt_bias, *ssm_a, *ssm_norm;
    bs_vk_tensor wq, wk, wv, wo;
    const float *q_norm, *k_norm;
} bs_vk_layer_desc;

typedef struct bs_vk_net_desc {
    int n_layer, n_embd, n_ff, n_vocab;
    float eps;
    int n_head, n_head_kv, head_dim, n_rot;
    float rope_base;
    int conv_kernel, n_k_heads, n_v_heads, d_k, d_v, conv_dim;
    bs_vk_tensor tok_embd, output;
    const float *output_norm;
    const bs_vk_layer_desc *layers;
} bs_vk_net_desc;

/* --- the network on the device ------------------------------------------------------------- */
typedef struct bs_vk_net bs_vk_net;
/* Upload every weight (repacked as bs_vk_matrix_new does) and vector of the network. NULL with
 * bs_error (e.g. out of device memory, or a shape the kernels do not take). */
bs_vk_net *bs_vk_net_new(bs_vk_ctx *c, const bs_vk_net_desc *d);
void bs_vk_net_free(bs_vk_net *n);
/* Sleep: the weights' device memory given back (every session and batch of the net freed first,
 * no adapters attached; the matrices keep their shapes, so a drafter that shares them keeps
 * them); wake: uploaded again from d, the same tensors as at bs_vk_net_new. 0 or -1 + error
 * (wake: still asleep). */
int bs_vk_net_sleep(bs_vk_net *n);
int bs_vk_net_wake(bs_vk_net *n, const bs_vk_net_desc *d);
bool bs_vk_net_asleep(const bs_vk_net *n);
/* Bytes of device memory the context holds (all heaps). */
uint64_t bs_vk_bytes_held(const bs_vk_ctx *c);
/* LoRA on the device: y += scale * B (A x) on the matrix of that tensor name (a [r][in], b
 * [out][r], row-major F32; copied), in the order attached; clear drops every adapter. Sessions
 * pick the change up at their next evaluation. */
int bs_vk_net_lora(bs_vk_net *n, const char *name, int r, const float *a, const float *b, float scale);
void bs_vk_net_lora_clear(bs_vk_net *n);

/* One sequence on the device: residual stream and scratch, the KV cache (F16, or F32 when
 * kv_f32), the conv windows
 * and delta-rule states, and a snapshot of the recurrent state for exact rollback. */
typedef struct bs_vk_sess bs_vk_sess;
bs_vk_sess *bs_vk_sess_new(bs_vk_net *n, int n_ctx, int n_batch, bool kv_f32);
void bs_vk_sess_free(bs_vk_sess *s);
/* Evaluate n tokens at positions pos0..pos0+n-1 (rope: the host's [n][n_rot] cos/sin table of
 * those positions). logits_mode 0: none, 1: the last row's, 2: every row's ([n][n_vocab]).
 * taps: n_taps layer indices; tap_out gets [n][n_taps][n_embd] (the residual after each), or
 * NULL: the taps of the last chunk stay on the device for bs_vk_dctx_append_sess. */
int bs_vk_sess_eval(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, int logits_mode,
                    float *logits, const int *taps, int n_taps, float *tap_out);
/* What comes back of the logits rows of an evaluation (mode 1: the last row; 2: every row):
 * with next, each row's greedy token (the lowest id of the largest logit, NaN never), 4 bytes a
 * row; with top_k (<= BS_VK_TOP_MAX), each row's k best, their ids and values best first in the
 * sampler's order (higher logit, then lower id; NaN and -inf never, +inf as FLT_MAX) at
 * [row][top_k] and their count (fewer than k when fewer are candidates) at n_top[row], 8 bytes
 * each; else the rows themselves. Ids and lists are found on the device (argmax.comp, topk.comp). */
enum { BS_VK_TOP_MAX = 64 };
/* A sampler's steps after its top-k (top_k: the lists' length), which draft_draw.comp redoes to
 * predict a draw: sampled decoding ahead (bs_vk_out.draw) and the drafter's sampled chain. The
 * one definition for every layer that passes them on (model, dspark). */
typedef struct bs_draw { int top_k, min_keep; float top_p, min_p, temp; } bs_draw;
typedef struct bs_vk_out {
    int mode;
    float *logits;
    int32_t *next;
    int top_k;
    int32_t *top_ids;
    float *top_vals;
    int *n_top;
    const bs_draw *draw;             /* with top_k, one row, undo off: sampled decoding ahead */
    const float *u;                  /* (bs_vk_sess_sample_ahead's draw and uniforms) */
} bs_vk_out;
int bs_vk_sess_eval_out(bs_vk_sess *s, const int32_t *tokens, int n, int pos0, const float *rope, const bs_vk_out *o,
                        const int *taps, int n_taps, float *tap_out);
/* The same with embedding rows ([n][n_embd] floats, e.g. an image's) in place of token ids. */
int bs_vk_sess_eval_rows(bs_vk_sess *s, const float *embd, int n, int pos0, const float *rope, int logits_mode,
                         float *logits, const int *taps, int n_taps, float *tap_out);
/* Greedy decoding one step ahead: token tok at pos0 (rope0: its table row), *next its greedy
 * token, as bs_vk_sess_eval_out's next gives it; but before waiting for it, the step after is
 * submitted too (at pos0 + 1, rope1), its token fed on the device by this one's argmax, so the
 * device never waits for the host between steps. When the next call asks for that very token
 * and position, it is already under way; any other use of the session first puts back the
 * state from before it (as a rollback does), so what the session holds is only ever what its
 * caller evaluated. Evaluations of one row only, without taps, and undo off (the last step
 * cannot be rolled back). rope1 NULL: no step after this one (the caller stops here). */
int bs_vk_sess_decode_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, int32_t *next);
/* Sampled decoding one step ahead, the same way: the step's k best (p->top_k; their count into
 * *n_top, as bs_vk_out's lists), and the host's draw from them predicted on the device with
 * uniform u[0] (draft_draw.comp) fed to the step after, which predicts its own with u[1]. The
 * caller draws the token itself from the list with u[0]; where it is another than the
 * prediction, its next call's token differs and the step ahead is undone. */
int bs_vk_sess_sample_ahead(bs_vk_sess *s, int32_t tok, int pos0, const float *rope0, const float *rope1, const bs_draw *p,
                            const float *u, int32_t *ids, float *vals, int *n_top);
/* Rows one submission holds (the taps kept on the device are those of the last one's), and the
 * first n of those tap rows copied to the host. */
int bs_vk_sess_rows(const bs_vk_sess *s);
int bs_vk_sess_taps_read(bs_vk_sess *s, float *out, int n);
/* The recurrent state now becomes the snapshot / goes back to it (rollback then replays the
 * kept rows' recurrence, or re-evaluates them: the same kernels on the same inputs, so the same
 * bits). */
int bs_vk_sess_snapshot(bs_vk_sess *s);
int bs_vk_sess_restore(bs_vk_sess *s);
/* After bs_vk_sess_restore: the state the last step's first j rows left, from that step's
 * recorded recurrence inputs (one submission with no weight reads: each recurrent layer's conv
 * and delta rule over j rows). 0; 1 where the step left no record of j rows (more rows than
 * recorded, a state loaded since, other adapters): then re-evaluate; -1 + bs_error. */
int bs_vk_sess_replay(bs_vk_sess *s, int j);
/* Zero the recurrent state (the KV cache needs no clearing: positions are rewritten). */
int bs_vk_sess_reset(bs_vk_sess *s);
/* The state in the CPU session's layouts (conv windows [K-1][conv_dim] and delta-rule states
 * [n_v][d_v][d_k] per recurrent layer; F16/F32 KV rows [pos][n_head_kv*head_dim] per attention
 * layer, n_pos positions): to the host (to_host) or from it. */
int bs_vk_sess_state(bs_vk_sess *s, float *conv, float *ssm, size_t conv_stride, size_t ssm_stride, uint8_t *k,
                     uint8_t *v, size_t kv_stride, int n_pos, bool to_host);

/* --- several sessions in one pass (continuous batching) -------------------------------------- */
/* Every weight product runs once over the rows of all sequences together (one pass over the
 * weights), the per-sequence kernels (conv and delta rule, KV store and attention) per session
 * on its own state, so a sequence's logits and taps are those of bs_vk_sess_eval, bit for bit. */
enum { BS_VK_BATCH_SEQS = 32, BS_VK_BATCH_ROWS = 256 };
typedef struct bs_vk_batch bs_vk_batch;
/* Shared scratch for up to min(max_rows, BS_VK_BATCH_ROWS) rows, max_logit_rows of them (at
 * most that) with logits. NULL with bs_error. */
bs_vk_batch *bs_vk_batch_new(bs_vk_net *n, int max_rows, int max_logit_rows);
void bs_vk_batch_free(bs_vk_batch *b);
int bs_vk_batch_rows(const bs_vk_batch *b);
int bs_vk_batch_logit_rows(const bs_vk_batch *b);
/* Sequences one pass takes (<= BS_VK_BATCH_SEQS: fewer where a submission could not hold the
 * dispatches of that many, e.g. a deep network with LoRA adapters). */
int bs_vk_batch_seqs(const bs_vk_batch *b);

/* One sequence of a pass: n <= bs_vk_sess_rows(s) tokens at positions pos0.. (rope: their
 * [n][n_rot] table); logits gets the last logit_rows rows' ([logit_rows][n_vocab]); taps as
 * bs_vk_sess_eval (tap_out NULL: they stay on the device for the drafter); snapshot: first
 * bs_vk_sess_snapshot, in the pass's submission. */
typedef struct bs_vk_seq {
    bs_vk_sess *s;
    bool snapshot;
    const int32_t *tokens;
    int n, pos0;
    const float *rope;
    int logit_rows;
    float *logits;
    int32_t *next;                /* NULL, or where the rows' argmaxes go (logit_rows of them) when
                                     every sequence of the pass with logits has next or top_k (only
                                     the ids come back, the rows stay unread; else the rows come
                                     back, next is left as it was and the caller takes the argmax) */
    int top_k;                    /* 0, or the rows' top_k best (bs_vk_out's lists) into top_ids /
                                     top_logits ([logit_rows][top_k]) and their counts into
                                     n_top[logit_rows], on the same condition (else the rows come
                                     back and n_top is left as it was) */
    int32_t *top_ids;
    float *top_logits;
    int *n_top;
    const int *taps;
    int n_taps;
    float *tap_out;
} bs_vk_seq;
/* Evaluate 1..bs_vk_batch_seqs(b) sequences of distinct sessions of b's network in one
 * submission. 0 or -1 with bs_error (nothing is evaluated when the request does not fit). */
int bs_vk_batch_eval(bs_vk_batch *b, const bs_vk_seq *q, int n_seq);

/* --- the DSpark drafter on the device (vk_dspark.c) ----------------------------------------- */
typedef struct bs_vk_dspark_layer_desc {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    bs_vk_tensor wq, wk, wv, wo, gate, up, down;
} bs_vk_dspark_layer_desc;

/* The drafter's numbers and tensors (dspark/dspark.h's bs_dspark). share: the target's network
 * on the same context, whose embedding / LM head are used instead of tok_embd / output when
 * share_embd / share_output (the drafter borrows them: the same values). */
typedef struct bs_vk_dspark_desc {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_taps, block_size;
    float eps;
    bs_vk_tensor tok_embd, output, fc;
    const float *output_norm, *hidden_norm;
    const float *snr_anchor, *snr_mask;   /* log-SNR addends [n_embd]; NULL when off */
    const bs_vk_dspark_layer_desc *layers;
    const bs_vk_net *share;
    bool share_embd, share_output;
    int markov_rank;                      /* 0: no Markov head */
    bs_vk_tensor markov_a, markov_b;      /* [n_vocab][rank] rows by the previous token; rank -> n_vocab */
} bs_vk_dspark_desc;

typedef struct bs_vk_dspark bs_vk_dspark;
bs_vk_dspark *bs_vk_dspark_new(bs_vk_ctx *c, const bs_vk_dspark_desc *d);
void bs_vk_dspark_free(bs_vk_dspark *d);

/* A drafter context on the device: per layer the K/V of up to n_rows_max context rows (F32,
 * normed and roped) and the block's scratch. Row bookkeeping (positions, crops, skips) is the
 * caller's: rows are addressed by index. */
typedef struct bs_vk_dctx bs_vk_dctx;
bs_vk_dctx *bs_vk_dctx_new(bs_vk_dspark *d, int n_rows_max);
void bs_vk_dctx_free(bs_vk_dctx *c);
/* Project n tap rows ([n][n_taps*n_embd] on the host) into K/V rows row0..row0+n-1; rope:
 * [n][head_dim] cos/sin of their positions. */
int bs_vk_dctx_append(bs_vk_dctx *c, const float *taps, int n, int row0, const float *rope);
/* The same from the taps a device session just evaluated (rows src0..src0+n-1 of its last
 * chunk, bs_vk_sess_eval with tap_out NULL): the taps never leave the device. */
int bs_vk_dctx_append_sess(bs_vk_dctx *c, const bs_vk_sess *s, int src0, int n, int row0, const float *rope);
/* Several distinct contexts' appends of their sessions' tap rows (rows 0..n-1 of each session's
 * last chunk, as bs_vk_dctx_append_sess with src0 0) in one pass (the server's slots after a
 * batch pass): fc and the K/V products once over all their rows, each context's rows stored in
 * its own cache; the bits of each context's own append. Not waited for. */
typedef struct bs_vk_dappend {
    bs_vk_dctx *s;
    const bs_vk_sess *sess;
    int n, row0;
    const float *rope;   /* [n][head_dim] of the rows' positions */
} bs_vk_dappend;
int bs_vk_dctx_append_multi(const bs_vk_dappend *a, int n);
/* Blocks of up to bs_vk_dspark_max_blocks distinct contexts of one drafter in one submission (one
 * alone, or the server's slots drafting together; their layers and LM head run once over all
 * their rows, the attention a block at a time). Each: [anchor, mask_id x (nb-1)] attending to its context
 * rows first..first+n_ctx-1 and itself; rope: [nb][head_dim] of its positions. hidden gets
 * [nb][n_embd] final-normed states; the base logits of slots 0..n_logits-1 stay on the device
 * for bs_vk_dctx_logits, bs_vk_dctx_draft_greedy and bs_vk_dctx_slot_top. A greedy round's drafts
 * come with the block (drafts), a sampled round's chain too (chain): one wait on the device
 * instead of two. */
/* A sampled chain recorded with a block (bs_vk_dblock.chain: bs_vk_dctx_draft_sampled's over the
 * block's n_logits slots): its steps and uniforms, where its lists and predicted drafts go, and
 * done = 1 once they came back (0 where it could not run: the caller runs it apart). */
typedef struct bs_vk_chain {
    bs_draw p;
    const float *u;
    int32_t *pred, *ids;
    float *vals;
    int *counts;
    int done;
} bs_vk_chain;
typedef struct bs_vk_dblock {
    bs_vk_dctx *s;
    int32_t anchor;
    int nb, first, n_ctx;
    const float *rope;
    float *hidden;
    int n_logits;
    int32_t *drafts;   /* non-NULL: the greedy drafts of slots 0..n_logits-1 too, as
                          bs_vk_dctx_draft_greedy takes them, in the same submission; drafts[0]
                          is -1 where they cannot be (the Markov head stayed on the host) */
    bs_vk_chain *chain;   /* non-NULL (and drafts NULL): a sampled chain in the same submission */
} bs_vk_dblock;
int bs_vk_dctx_blocks(const bs_vk_dblock *b, int n, int32_t mask_id);
/* Blocks one bs_vk_dctx_blocks takes: BS_VK_DRAFT_BLOCKS (the server's slots in one batch pass),
 * fewer where a deep drafter's dispatches could pass a submission's. */
enum { BS_VK_DRAFT_BLOCKS = 32 };
int bs_vk_dspark_max_blocks(const bs_vk_dspark *d);
/* Rows first..first+n-1 of those kept on the device into out. */
int bs_vk_dctx_logits(bs_vk_dctx *c, int first, int n, float *out);
/* The greedy drafts of slots 0..n-1 from those rows, on the device: slot k's draft is the lowest
 * id of the largest base logit plus Markov term of the draft before (the anchor for slot 0),
 * the mask id never (dspark.c's bs_dspark_draft_greedy, the same products); n ids come back,
 * not the rows. */
int bs_vk_dctx_draft_greedy(bs_vk_dctx *c, int32_t anchor, int32_t mask_id, int n, int32_t *drafts);
/* Slot `slot`'s scores (its base logits plus the Markov term of prev, the mask id never) reduced
 * on the device to their k best (bs_vk_out's lists: the sampler's order): their count, or -1.
 * Sampled drafts: a slot's draw then needs its list, not its row. */
int bs_vk_dctx_slot_top(bs_vk_dctx *c, int slot, int32_t prev, int32_t mask_id, int k, int32_t *ids, float *vals);
/* A chain of n sampled drafts in one submission: slot k's list (bs_vk_dctx_slot_top's, of the
 * draft before it, the anchor's for slot 0) into ids/vals + k * top_k (counts[k] long), and its
 * draft predicted from that list with uniform u[k] into drafts[k] (draft_draw.comp: the host
 * sampler's top-k, top-p, min-p, temperature and draw redone in float). A prediction: the
 * caller draws again from the list and keeps the chain only as far as the two agree. */
int bs_vk_dctx_draft_sampled(bs_vk_dctx *c, int32_t anchor, int32_t mask_id, int n, const bs_draw *p, const float *u,
                             int32_t *drafts, int32_t *ids, float *vals, int *counts);

/* --- the vision encoder on the device (vk_vision.c) ----------------------------------------- */
/* A qwen3vl_merger ViT (vision/encoder.c's network): matrices as the projector holds them (ne0
 * inputs, ne1 outputs), vectors F32. */
typedef struct bs_vk_vit_block_desc {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b, *qkv_b, *out_b, *up_b, *down_b;
    bs_vk_tensor qkv, out, up, down;
} bs_vk_vit_block_desc;

typedef struct bs_vk_vit_desc {
    int n_embd, n_ff, n_layer, n_head, patch_k, proj_dim;   /* patch_k: inputs of a patch, 3 P P */
    float eps;                                              /* LayerNorm */
    bs_vk_tensor patch, mm0, mm2;
    const float *patch_b, *post_w, *post_b, *mm0_b, *mm2_b;
    const bs_vk_vit_block_desc *blocks;
} bs_vk_vit_desc;

typedef struct bs_vk_vit bs_vk_vit;
bs_vk_vit *bs_vk_vit_new(bs_vk_ctx *c, const bs_vk_vit_desc *d);
void bs_vk_vit_free(bs_vk_vit *v);
/* One image of n patches (n % 4 == 0, in 2x2-block order): patches [n][patch_k] unrolled, pos
 * [n][n_embd] their position rows, rope [n][head_dim/2][2] cos/sin of each rotated pair; out
 * gets [n/4][proj_dim]. 0, or -1 with bs_error. */
int bs_vk_vit_encode(bs_vk_vit *v, const float *patches, const float *pos, const float *rope, int n, float *out);

/* --- kernels (the pieces of a step; the tests hold them against the CPU oracle) ------------ */
typedef struct bs_vk_matrix bs_vk_matrix;
/* Upload W, repacked: Q1_0, Q2_0 and Q2_0_G64, Q8_0 keep their bits (codes and scales in
 * separate, row-interleaved arrays); other formats are converted to F32. Split into parts by
 * rows so that no binding exceeds maxStorageBufferRange. NULL with bs_error. */
bs_vk_matrix *bs_vk_matrix_new(bs_vk_ctx *c, const bs_vk_tensor *W);
void bs_vk_matrix_free(bs_vk_ctx *c, bs_vk_matrix *m);
int bs_vk_matrix_parts(const bs_vk_matrix *m);
/* Column slices per row of the integer kernels (split-K; BITSPARK_VK_SPLIT=N caps it). */
int bs_vk_matrix_split(const bs_vk_matrix *m);
/* Whether a product of a weight of this type and row length rounds its float input first on the
 * device (F16, BF16, Q6_K, ...: a float layout standing for the CPU's activation format). */
bool bs_vk_rounds_input(int type, int64_t ne0);
/* y[r][o] = sum_i W[o][i] x[r][i] for r < n: activations quantized on the device to int8
 * 32-blocks exactly as the CPU path does (Q8_0, x86 rounding) for formats whose products take
 * Q8_0; F32 otherwise. A row's result does not depend on n (same code, same order). */
int bs_vk_matvec(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y);
/* bs_vk_matvec (an integer matrix of one part, n <= 8) with the DeltaNet conv in the product's
 * epilogue (mv_q.glsl's CONV): y's channels convolved with the window win ([K-1][ne1], moved
 * on in place) and the weights w ([ne1][K]) + SiLU into out ([n][ne1]). from_in: the window read
 * from a buffer of its own and the moved one written to another (zeroed first), as the step
 * after a rollback snapshot does. */
int bs_vk_matvec_conv(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y, float *win, const float *w, int K,
                      float *out, bool from_in);
/* The integer products' epilogues alone (tests; an integer matrix of one part, n <= 8 rows of d,
 * the outputs' rows of E = m->ne1, a multiple of 32): bs_vk_matvec_norm adds m d into the
 * residual rows x (in place), RMS-norms them with nw into out; bs_vk_matvec_glu makes out =
 * silu(gate d) * (up d). With fold (NULL: none), out is then rotated by it into xr. The int8
 * blocks the next products read (of xr, else out) come back as codes (32 a block), scales and
 * Q8_1 sums (a float each). The kernels are the forward's (mv_q.glsl's NORM_OUT, QOUT, ROT). */
typedef struct bs_vk_epilogue {
    const bs_vk_fold *fold;
    float *x;                /* (norm) the residual rows, added into */
    const float *nw;         /* (norm) the norm's weight, E values */
    float eps;
    float *out, *xr;
    int8_t *codes;
    float *scales, *sums;
} bs_vk_epilogue;
int bs_vk_matvec_norm(bs_vk_ctx *c, const bs_vk_matrix *m, const float *d, int n, const bs_vk_epilogue *e);
int bs_vk_matvec_glu(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const float *d, int n,
                     const bs_vk_epilogue *e);
/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of d (w may be NULL: no weight). */
int bs_vk_rmsnorm(bs_vk_ctx *c, const float *x, const float *w, int d, int n, float eps, float *y);
/* The int8 activations of x (n rows of d, d % 32 == 0) in Q8_0 blocks {f16 d; i8 q[32]}: what
 * the matrix products read, for comparing with the CPU's quantizer. */
int bs_vk_quantize_q8(bs_vk_ctx *c, const float *x, int d, int n, void *out);
/* out[t] = row tokens[t] of m as the embedding kernel reads it (n rows of m->ne0 floats). */
int bs_vk_embed(bs_vk_ctx *c, const bs_vk_matrix *m, const int32_t *tokens, int n, float *out);
/* Every kernel's pipeline built now (a context builds each when first dispatched): 0, or -1
 * naming the kernel whose pipeline the driver would not build. */
int bs_vk_pipes_build(bs_vk_ctx *c);
/* argmax.comp's chunking (vk_top.c): logits per workgroup for rows of V, a multiple of 256 and
 * at most BS_VK_AMAX_CHUNKS chunks a row. */
enum { BS_VK_AMAX_CHUNKS = 64 };
uint32_t bs_vk_amax_chunk(uint32_t V);
/* One step kernel alone, for the tests: the shader `kernel` (the name of its .comp without
 * options: norm, ew, conv, delta, rope, kv_store, attn, act_round) dispatched over (gx, gy, gz)
 * groups on n_bind buffers filled from data[i] (bytes[i] each; NULL data: zeros) and read back
 * into data[i] afterwards; push_bytes must be the shader's push-constant size. */
int bs_vk_kernel_run(bs_vk_ctx *c, const char *kernel, void *const *data, const size_t *bytes, int n_bind, const void *push,
                     size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz);
/* Device memory bandwidth from a copy kernel over `bytes` (read + write), GB/s; -1 on error. */
double bs_vk_copy_bandwidth(bs_vk_ctx *c, size_t bytes, int reps);
/* The tests of the validation itself: `in` copied by the copy kernel to a buffer, from it to
 * another (with a barrier between the two dispatches, or none: a race the synchronization
 * validation must report) and read back into out. */
int bs_vk_copy_chain(bs_vk_ctx *c, const void *in, void *out, size_t bytes, bool barrier);

#endif
