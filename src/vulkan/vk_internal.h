/* vk_internal.h: what the files of src/vulkan/ share and nothing outside them sees: the Vulkan
 * entry points loaded at run time (libvulkan.so.1 through dlopen, so a binary built with the
 * backend still runs where there is no Vulkan), the device context and the buffer helpers. */
#ifndef BS_VK_INTERNAL_H
#define BS_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "vulkan/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Entry points, by the level they are looked up at. */
#define BS_VK_GLOBAL_FNS(X) \
    X(vkCreateInstance) X(vkEnumerateInstanceLayerProperties) X(vkEnumerateInstanceExtensionProperties)
#define BS_VK_INSTANCE_FNS(X) \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties) \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties) \
    X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr) \
    X(vkGetPhysicalDeviceMemoryProperties2)
#define BS_VK_DEVICE_FNS(X) \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) \
    X(vkMapMemory) X(vkUnmapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule) \
    X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) \
    X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline) \
    X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool) X(vkResetDescriptorPool) \
    X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool) \
    X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkResetCommandBuffer) X(vkFreeCommandBuffers) \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) \
    X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) \
    X(vkQueueSubmit) X(vkQueueWaitIdle) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences) \
    X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkCmdResetQueryPool) X(vkCmdWriteTimestamp) \
    X(vkGetQueryPoolResults) X(vkCmdDispatchIndirect)

typedef struct bs_vk_fns {
#define BS_VK_DECL(f) PFN_##f f;
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    BS_VK_GLOBAL_FNS(BS_VK_DECL)
    BS_VK_INSTANCE_FNS(BS_VK_DECL)
    PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT;
    PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
    BS_VK_DEVICE_FNS(BS_VK_DECL)
#undef BS_VK_DECL
} bs_vk_fns;

/* One instance for the process (created on first use, with the validation layer when
 * BITSPARK_VK_VALIDATE=1). Returns NULL with bs_error when there is no loader or instance. */
typedef struct bs_vk_instance {
    bs_vk_fns fn;
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice *phys;
    int n_phys;
    bool validating, sync_validating;
} bs_vk_instance;
bs_vk_instance *bs_vk_instance_get(void);

/* A buffer and its memory; map != NULL when the memory is host visible (mapped for its life). */
typedef struct bs_vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceSize size;
    void *map;
    VkDeviceSize bytes;          /* the allocation's size, counted against its heap */
    int heap;
} bs_vk_buf;

/* The widest kernel's bindings (attn_split_b), and the most a kernel every device must take
 * has: a device allowing fewer than BS_VK_PIPE_MAX_BIND runs a batch's attention a sequence at
 * a time (bs_vk_attn_batch). */
enum { BS_VK_PIPE_MAX_BIND = 31, BS_VK_PIPE_NEED_BIND = 21 };

/* A recording's descriptor sets: a chain of pools of BS_VK_POOL_SETS sets (each room for the
 * widest kernel's), made as the recording needs them, so a recorded step holds what it uses
 * and a pass of many sequences may take up to BS_VK_MAX_SETS dispatches. */
enum { BS_VK_POOL_SETS = 1024, BS_VK_MAX_POOLS = 8, BS_VK_MAX_SETS = BS_VK_POOL_SETS * BS_VK_MAX_POOLS };
typedef struct bs_vk_pools {
    VkDescriptorPool p[BS_VK_MAX_POOLS];
    int n;                        /* pools made */
    int cur, sets;                /* the pool sets come from now, and the sets taken from it */
} bs_vk_pools;

/* A compute pipeline of one shader: n_bind storage buffers, push constants of push_bytes. */
typedef struct bs_vk_pipe {
    VkShaderModule mod;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipeline pipe;
    int n_bind;
    uint32_t push_bytes;
} bs_vk_pipe;

/* What one recorded command buffer does (counted while recording). */
typedef struct bs_vk_rec {
    uint32_t dispatches, barriers;
    uint64_t weight_bytes;            /* weight codes and scales the products read */
} bs_vk_rec;

/* Shaders embedded at build time (vk_shaders.c, generated). */
typedef struct bs_vk_spirv {
    const char *name;
    const uint32_t *code;
    size_t bytes;
} bs_vk_spirv;
const bs_vk_spirv *bs_vk_shader(const char *name);
/* The NV cooperative-matrix module in[n_words] rewritten for VK_KHR_cooperative_matrix
 * (vk_spirv.c): *out (malloc'd, *out_words words), or -1 with the error set. */
int bs_vk_spirv_coop_khr(const uint32_t *in, size_t n_words, uint32_t **out, size_t *out_words);

enum bs_vk_kernel {
    BS_VK_K_COPY, BS_VK_K_RMSNORM, BS_VK_K_QUANT_Q8, BS_VK_K_MV_Q1, BS_VK_K_MV_Q2_128,
    BS_VK_K_MV_Q2_64, BS_VK_K_MV_Q8, BS_VK_K_MV_F32, BS_VK_K_MV_Q4_1, BS_VK_K_ROWS_Q4_1,
    BS_VK_K_ROWS_Q1, BS_VK_K_ROWS_Q2_128, BS_VK_K_ROWS_Q2_64, BS_VK_K_ROWS_Q8, BS_VK_K_ROWS_F32,
    BS_VK_K_NORM, BS_VK_K_EW, BS_VK_K_CONV, BS_VK_K_DELTA, BS_VK_K_ROPE, BS_VK_K_KV_STORE, BS_VK_K_ATTN, BS_VK_K_ACT_ROUND,
    BS_VK_K_GLU_Q1, BS_VK_K_GLU_Q2_128, BS_VK_K_GLU_Q2_64, BS_VK_K_GLU_Q8, BS_VK_K_GLU_Q4_1, BS_VK_K_MV_F32_LORA,
    BS_VK_K_ATTN_NC, BS_VK_K_ARGMAX, BS_VK_K_TOPK,
    BS_VK_K_VIT_LN, BS_VK_K_VIT_EW,   /* the vision encoder's (vk_vision.c) */
    BS_VK_K_FMA_PROBE,                /* is fma() fused here (vk_exec.c) */
    BS_VK_K_GLUQ_Q1, BS_VK_K_GLUQ_Q2_128, BS_VK_K_GLUQ_Q2_64, BS_VK_K_GLUQ_Q8, BS_VK_K_GLUQ_Q4_1,   /* GLU + int8 out */
    BS_VK_K_QK,                       /* q/k norms, rope and the KV store in one */
    BS_VK_K_MVN_Q1, BS_VK_K_MVN_Q2_128, BS_VK_K_MVN_Q2_64, BS_VK_K_MVN_Q8, BS_VK_K_MVN_Q4_1,   /* + residual, norm */
    BS_VK_K_MVC_Q1, BS_VK_K_MVC_Q2_128, BS_VK_K_MVC_Q2_64, BS_VK_K_MVC_Q8, BS_VK_K_MVC_Q4_1,   /* + DeltaNet conv */
    BS_VK_K_DELTA_NORM,               /* q/k L2 norms, delta rule, gated norm and int8 blocks in one */
    BS_VK_K_ATTN_SPLIT,               /* attention split over the context, chunks merged */
    /* mv_q's products for more than 8 rows in tiles (mm_q.glsl): plain, GLU, GLU + int8 out */
    BS_VK_K_MM_Q1, BS_VK_K_MM_Q2_128, BS_VK_K_MM_Q2_64, BS_VK_K_MMG_Q1, BS_VK_K_MMG_Q2_128, BS_VK_K_MMG_Q2_64,
    BS_VK_K_MMGQ_Q1, BS_VK_K_MMGQ_Q2_128, BS_VK_K_MMGQ_Q2_64,
    BS_VK_K_MM_Q8, BS_VK_K_MM_Q4_1,   /* ... and the lane-order formats' (mm_ql.glsl) */
    BS_VK_K_CONV_B, BS_VK_K_DELTA_B,  /* a batch's convs / delta rules, one dispatch for all its sequences */
    BS_VK_K_ATTN_SPLIT_B,             /* up to 4 sequences' split attention in one dispatch */
    BS_VK_K_ATTN_NC_SPLIT,            /* the drafter block's attention split over the context */
    BS_VK_K_DRAFT_DRAW,               /* a sampled draft predicted from its slot's list */
    BS_VK_K_ROTATE,                   /* the Hadamard fold's rotation of activations (vk_rotate.c) */
    BS_VK_K_MV_F32N,                  /* F32 products of few rows: a workgroup per row (mv_f32n.comp) */
    BS_VK_K_NORM_ROT,                 /* norm.comp with the shared memory of its rotation (NORM_ROT) */
    BS_VK_K_MV_F32N_LORA,             /* a LoRA factor A's rows on mv_f32n, the CPU's float order */
    /* mv_qr (mv_q.glsl's ROT): + residual, norm and the next products' Hadamard fold; GLU whose
       output is rotated by the down product's fold and quantized */
    BS_VK_K_MVNR_Q1, BS_VK_K_MVNR_Q2_128, BS_VK_K_MVNR_Q2_64, BS_VK_K_MVNR_Q8, BS_VK_K_MVNR_Q4_1,
    BS_VK_K_GLUR_Q1, BS_VK_K_GLUR_Q2_128, BS_VK_K_GLUR_Q2_64, BS_VK_K_GLUR_Q8, BS_VK_K_GLUR_Q4_1,
    BS_VK_K_DELTA_NORM_ROT,           /* delta_norm.comp with the shared memory of its rotation */
    BS_VK_K_COUNT
};

/* Uploads to device-local memory (vk_memory.c): BS_VK_RING host-visible chunks, each with a
 * command buffer and a fence, filled in turn while the GPU copies the previous ones. */
enum { BS_VK_RING = 4 };
typedef struct bs_vk_staging {
    bs_vk_buf buf;                    /* BS_VK_RING chunks of `chunk` bytes */
    size_t chunk;
    VkCommandBuffer cmd[BS_VK_RING];
    VkFence fence[BS_VK_RING];
    bool busy[BS_VK_RING];
    int next;
} bs_vk_staging;

struct bs_vk_ctx {
    bs_vk_instance *vi;
    const bs_vk_fns *fn;
    VkPhysicalDevice phys;
    bs_vk_device_info info;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties memprops;   /* as info describes them (faked or real) */
    uint32_t real_type[VK_MAX_MEMORY_TYPES];     /* the driver's type behind each of memprops' */
    uint64_t heap_used[VK_MAX_MEMORY_HEAPS];     /* bytes this context holds in each heap */
    int last_heap;                               /* where the last device buffer went (-1 none) */
    VkCommandPool cpool;
    VkCommandBuffer cmd;              /* what bs_vk_dispatch records into: main_cmd, or a */
    bs_vk_pools *dpools;              /* cached step's buffer and pools (bs_vk_record_into) */
    VkCommandBuffer main_cmd;
    bs_vk_pools main_pools;
    VkFence fence;
    bool in_flight;                   /* main_cmd submitted and not waited for (bs_vk_submit_nowait) */
    /* bindings a dispatch does not use (NULL in its list) get slots of nil in turn, so two
       dispatches between barriers never share one: the synchronization validation layer, which
       cannot know a binding is unused, then sees no hazard where there is none */
    bs_vk_buf nil;
    VkDeviceSize nil_stride;
    uint32_t nil_next;
    bool recording, caching;
    bool dp4a;                        /* integer products through mv_q_dp4a */
    bool glu;                         /* gate+up+SwiGLU in one dispatch (off: BITSPARK_VK_GLU=0) */
    bool f32n;                        /* F32 products of few rows on mv_f32n.comp (vk_device.c) */
    bool fma_fused;                   /* fma() rounds once (probed); else fma_rn.glsl emulates it */
    bool asum_staged;                 /* mv_q's activation block sums once per workgroup (ASUM_STAGE) */
    uint32_t delta_spread;            /* the delta rule's lanes per state column (DL_SPREAD): 8 or 1 */
    uint32_t delta_cols;              /* and its state columns per workgroup: 32 or 64 */
    int mm;                           /* products of more than 8 rows: BS_VK_MM_* (vk_mm.c) */
    bool mm_auto;                     /* cooperative matrices chosen, not asked for: checked at open */
    bool mm_lanes;                    /* Q8_0 / Q4_1 products of more than 8 rows in mm_ql's tiles */
    bs_vk_coop_shape coop;            /* COOP's shape (the device's NV or KHR one) */
    bool coop_khr;                    /* ... by VK_KHR_cooperative_matrix */
    /* BITSPARK_PROFILE=1: a timestamp after every dispatch, GPU time summed per kernel */
    bool profiling;
    VkQueryPool qpool;
    int n_queries;
    int q_kernel[BS_VK_MAX_SETS + 1];
    double prof_ms[BS_VK_K_COUNT];
    uint64_t prof_n[BS_VK_K_COUNT];
    /* what was submitted (bs_vk_stats; printed with BITSPARK_PROFILE=1): rec_* count the
     * recording under way, dirty says whether a command was recorded since the last barrier */
    bool counting;
    bs_vk_rec rec;
    bool dirty;
    bs_vk_stats stats;
    uint64_t max_binding;             /* maxStorageBufferRange */
    uint64_t max_weight_binding;      /* what a weight part may bind: the same, or less with
                                         BITSPARK_VK_MAX_BINDING (tests: force split tensors) */
    bs_vk_pipe pipes[BS_VK_K_COUNT];
    bs_vk_staging stage;
    bool staged;                      /* BITSPARK_VK_STAGED=1: device buffers never mapped */
};

/* The layout of a matrix on the device (vk_kernels.c): parts of consecutive rows. */
typedef struct bs_vk_mat_part {
    bs_vk_buf codes, scales;
    int64_t row0, rows;
} bs_vk_mat_part;

/* A LoRA term of a matrix: y += scale * B (A x), A r x in and B out x r as F32 matrices. */
typedef struct bs_vk_lora {
    bs_vk_matrix *a, *b;
    float scale;
    struct bs_vk_lora *next;
} bs_vk_lora;

struct bs_vk_matrix {
    int kernel;                  /* BS_VK_K_MV_* */
    int bits, subs;              /* integer layouts: bits per weight, sub-blocks per scale */
    int split;                   /* integer layouts: slices of the columns per row (split-K),
                                    1, 2, 4 or 8, from the row count only */
    int act;                     /* F32 layouts: how the CPU path rounds their activations
                                    (act_round.comp mode: 0 none, 1 F16, 2 BF16, 3 Q8, 4 Q8_K) */
    int64_t ne0, ne1;
    int n_parts;
    bs_vk_mat_part *parts;
    /* one of several matrices stored as one layout (bs_vk_matrix_cat): its rows are layout rows
     * [rbase, rbase + ne1) of lay_rows, in buffers the layout owns (borrowed) */
    int64_t lay_rows, rbase;
    bool borrowed;
    char *name;                  /* the model's tensor name (LoRA adapters find it by name) */
    bs_vk_lora *lora;            /* adapters, in the order given */
    const struct bs_vk_rot *rot; /* the fold its rows carry (vk_rotate.c), or NULL */
};

/* vk_rotate.c: a fold's rotation on the device (rotate.comp); the net keeps one per distinct
 * fold (key: the host's sign vector, width, regrouping and direction). */
typedef struct bs_vk_rot {
    bs_vk_buf signs;
    bool has_signs;
    uint32_t block, width, hd, nk, rep, inverse;
    float scale;                 /* 1 / sqrt(block), rounded as the CPU path rounds it */
    const float *key;
} bs_vk_rot;
enum { BS_VK_MAX_ROTS = 16, BS_VK_ROT_MAX_BLOCK = 4096 };
/* The rotation of fold f among rots[*n] (made and appended when new): NULL with bs_error (a block
 * rotate.comp does not take, too many folds, out of memory). */
const bs_vk_rot *bs_vk_rot_get(bs_vk_ctx *c, bs_vk_rot *rots, int *n, const bs_vk_fold *f);
void bs_vk_rots_free(bs_vk_ctx *c, bs_vk_rot *rots, int n);
/* Whether two tensors carry the same fold (the same rotation: bs_vk_rot_get's key), or none. */
bool bs_vk_fold_same(const bs_vk_fold *a, const bs_vk_fold *b);
/* Record: y = the n rows of x rotated by r (x == y only for a fold without regrouping). */
int bs_vk_record_rotate(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n);
/* ... and y's int8 32-blocks into aq / as / am in the same dispatch (bs_vk_record_quant's). */
int bs_vk_record_rotate_quant(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n,
                              const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am);
/* ... with the step before's gate applied to x as it is read (quant_q8.comp's modes 1 and 2, g
 * its other operand, H and D the heads of mode 2); x itself stays ungated. */
int bs_vk_record_rotate_gated(bs_vk_ctx *c, const bs_vk_rot *r, const bs_vk_buf *x, const bs_vk_buf *y, int n,
                              const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am, int gate,
                              const bs_vk_buf *g, uint32_t H, uint32_t D);

/* Record: activations x (n rows of m->ne0, from offset 0) quantized into aq / as, for the
 * integer kernels (bs_vk_record_mv with quantized = true then reads them). */
int bs_vk_record_quant(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am,
                       uint64_t n_blocks);
/* The same with the element-wise gate of the step before (quant_q8.comp's mode: 1 x = silu(g)
 * * x, 2 x *= sigmoid of the gate half of g's rows of 2*H*D) applied to x first, in place. */
int bs_vk_record_quant_gated(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *g, int mode, uint32_t H, uint32_t D,
                             const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am, uint64_t n_blocks);
/* The embedding kernel for m's layout. */
int bs_vk_rows_kernel(const bs_vk_matrix *m);
/* Record y[r][o] (row stride m->ne1) = W x[r] for r < n. Integer kernels read aq / as (filled
 * by bs_vk_record_quant from the same x), F32 ones x (rounded first into xr by
 * bs_vk_record_act when m->act is set: then pass xr as x; where bs_vk_act_inline, the product
 * rounds x as it reads it, and x itself may be passed). */
int bs_vk_record_act(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, const bs_vk_buf *xr, int n);
bool bs_vk_act_inline(const bs_vk_ctx *c, const bs_vk_matrix *m, int n);
int bs_vk_record_mv(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, const bs_vk_buf *aq, const bs_vk_buf *as,
                    const bs_vk_buf *am, int n, const bs_vk_buf *y);
/* Whether a and b (float products of the same shape and rounding, each bs_vk_act_inline, no
 * adapters: DeltaNet's BF16 beta and alpha) run as one mv_f32n dispatch, and that dispatch:
 * a x into ya, b x into yb, each the bits of its own bs_vk_record_mv. */
bool bs_vk_mv_pairs(const bs_vk_ctx *c, const bs_vk_matrix *a, const bs_vk_matrix *b, int n);
int bs_vk_record_mv_pair(bs_vk_ctx *c, const bs_vk_matrix *a, const bs_vk_matrix *b, const bs_vk_buf *x, int n,
                         const bs_vk_buf *ya, const bs_vk_buf *yb);
/* LoRA terms (vk_kernels.c): add one to m (a [r][ne0], b [ne1][r], row-major F32), drop them
 * all; record y += scale * B (A x) for each (x: m's float input; t: n x r, u: n x ne1 scratch). */
int bs_vk_matrix_lora_add(bs_vk_ctx *c, bs_vk_matrix *m, int r, const float *a, const float *b, float scale);
void bs_vk_matrix_lora_clear(bs_vk_ctx *c, bs_vk_matrix *m);
/* Matrices that read one input stored as one layout (at most BS_VK_CAT_MAX): *lay owns the
 * weights, out[k] is W[k]'s matrix (rows of the layout). 1 made, 0 not possible, -1 error. */
enum { BS_VK_CAT_MAX = 4 };
int bs_vk_matrix_cat(bs_vk_ctx *c, const bs_vk_tensor *const *W, int n, bs_vk_matrix **lay, bs_vk_matrix **out);
/* Record the products of the nm matrices of one layout (m[k] made with it, in its order: all of
 * them or a run of consecutive ones) in one dispatch: m[k]'s rows into y[k]. */
int bs_vk_record_mv_cat(bs_vk_ctx *c, const bs_vk_matrix *lay, const bs_vk_matrix *const *m, int nm, const bs_vk_buf *aq,
                        const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *const *y);
/* Whether m's product can add itself into the residual stream and norm it (one integer part,
 * no adapters), and that dispatch: x += m (activations aq..) for n rows of m->ne1, then x's rows
 * RMS-normed with the weight nw into xn and quantized into qout (codes, scales, Q8_1 sums) by
 * the last workgroup to finish (cnt: a zeroed counter per 8 rows, left zeroed): norm.comp's
 * ADD | QUANT bits. */
bool bs_vk_norm_fusable(const bs_vk_matrix *m);
/* Whether a layout's (or a matrix's) products can take the DeltaNet conv in their epilogue (an
 * integer layout of one part), and that dispatch (up to 8 rows): bs_vk_record_mv_cat's, then
 * the conv + SiLU of m[0]'s rows (the conv channels) over the window win ([K-1][m[0]->ne1],
 * moved on) with the weights cw ([ne1][K]) into co ([n][ne1]): conv.comp's bits. win_in: the
 * window read from there instead, the moved one written to win (NULL: win in place). */
bool bs_vk_conv_fusable(const bs_vk_matrix *lay);
int bs_vk_record_mv_conv(bs_vk_ctx *c, const bs_vk_matrix *lay, const bs_vk_matrix *const *m, int nm, const bs_vk_buf *aq,
                         const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *const *y, const bs_vk_buf *win,
                         const bs_vk_buf *cw, const bs_vk_buf *co, int K, const bs_vk_buf *win_in);
int bs_vk_record_mv_norm(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am,
                         int n, const bs_vk_buf *x, const bs_vk_buf *nw, float eps, const bs_vk_buf *xn,
                         const bs_vk_buf *const *qout, const bs_vk_buf *cnt, const bs_vk_rot *rot, const bs_vk_buf *xr);
/* With rot (bs_vk_norm_rotates for m's rows; NULL: none), the normed rows also rotated by that
 * fold into xr and the int8 blocks made from xr (norm.comp's NORM_ROT: mv_q.glsl's ROT).
 * bs_vk_glu_rotates: whether a GLU's output of n rows can be rotated by the down product's fold
 * rot in its epilogue, and bs_vk_record_glu_rot that dispatch: bs_vk_record_glu's, then the
 * rows rotated into xr and quantized into qout by each block's last workgroup (cnt: zeroed
 * counters, one per rotation block, left zeroed): rotate.comp's bits. */
bool bs_vk_glu_rotates(const bs_vk_matrix *gate, const bs_vk_rot *rot, int n);
/* the rows the last-workgroup epilogues take (one row group: their counters, the session's
   counter buffer sized for it) */
enum { BS_VK_EPI_ROWS = 8 };
int bs_vk_record_glu_rot(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const bs_vk_buf *aq,
                         const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *y, const bs_vk_buf *const *qout,
                         const bs_vk_rot *rot, const bs_vk_buf *xr, const bs_vk_buf *cnt);
/* Sleep and wake (bs_vk_net_sleep): m's weight buffers freed, its shape and name kept; made
 * again from W (the same tensor: checked for shape) into the same matrix, or a layout and its
 * n matrices m (bs_vk_matrix_cat's, in order). */
void bs_vk_matrix_release(bs_vk_ctx *c, bs_vk_matrix *m);
int bs_vk_matrix_refill(bs_vk_ctx *c, bs_vk_matrix *m, const bs_vk_tensor *W);
int bs_vk_matrix_cat_refill(bs_vk_ctx *c, bs_vk_matrix *lay, const bs_vk_tensor *const *W, int n, bs_vk_matrix *const *m);
/* *m = bs_vk_matrix_new(c, t); 0 or -1 */
int bs_vk_upload_mat(bs_vk_ctx *c, bs_vk_matrix **m, const bs_vk_tensor *t);
/* Matrices that read one input (n <= BS_VK_CAT_MAX, *m[k] NULL on entry): those sharing t[0]'s
 * format as one layout *lay (borrowed rows, in t's order), the others alone; 0 or -1. */
int bs_vk_upload_inputs(bs_vk_ctx *c, bs_vk_matrix **lay, const bs_vk_tensor *const *t, bs_vk_matrix **const *m, int n);
/* y += scale * B (A x) for each adapter of m (after W x is in y; t: n x rank scratch). */
int bs_vk_record_lora(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, int n, const bs_vk_buf *t,
                      const bs_vk_buf *y);
/* Whether gate and up can go through one GLU dispatch (integer layouts alike, one part each;
 * BITSPARK_VK_GLU=0: never), and that dispatch: y = silu(gate x) * up x for n rows; with qout
 * (int8 codes, scales, Q8_1 sums: quant_q8.comp's buffers) y also quantized there, for a next
 * product that reads int8 (rows a multiple of 32). */
bool bs_vk_glu_fusable(const bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up);
int bs_vk_record_glu(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const bs_vk_buf *aq, const bs_vk_buf *as,
                     const bs_vk_buf *am, int n, const bs_vk_buf *y, const bs_vk_buf *const *qout);

/* vk_net.c, vk_session.c: what the drafter (vk_dspark.c) uses of a target network and session: its
 * embedding and LM head, and the tap rows of the session's last chunk ([rows][n_taps][n_embd]). */
const bs_vk_matrix *bs_vk_net_embd(const bs_vk_net *n);
const bs_vk_matrix *bs_vk_net_output(const bs_vk_net *n);
const bs_vk_buf *bs_vk_sess_taps(const bs_vk_sess *s, int *n_taps);

/* vk_memory.c: the memory types a buffer may take, best first (device buffers: device-local
 * memory that is not host visible on a discrete GPU, host-visible device memory on unified
 * memory; host buffers: host-visible, cached first). Returns their count. */
int bs_vk_mem_order(const bs_vk_device_info *d, bool host, int *types);
/* The free bytes of heap h now (the driver's budget where VK_EXT_memory_budget is there, else
 * its size less what this context holds; faked heaps: their size less that). */
uint64_t bs_vk_heap_free(bs_vk_ctx *c, int h);
/* 0 when `bytes` (at least what the weights take) fit the heaps device buffers go to; else
 * -1 with one line: "needs 4.1 GB of device memory, heap 0 has 3.2 GB free". */
int bs_vk_mem_check(bs_vk_ctx *c, uint64_t bytes, const char *what);
/* Logs (info) what this context holds in each heap: "<what> loaded: 1.2 GiB in heap 1 ...". */
void bs_vk_mem_report(bs_vk_ctx *c, const char *what);
/* What a network's weights take at least on the device (their size in the model file). */
uint64_t bs_vk_desc_bytes(const bs_vk_net_desc *d);

/* vk_memory.c: buffers; upload_vec: a device buffer of n floats, filled from v (zeros: v NULL) */
int bs_vk_buf_new(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize size, bool host);
int bs_vk_upload_vec(bs_vk_ctx *c, bs_vk_buf *b, const float *v, size_t n);
void bs_vk_buf_free(bs_vk_ctx *c, bs_vk_buf *b);
int bs_vk_buf_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n);
int bs_vk_buf_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n);
/* A device buffer of `bytes` set to zero: counters that kernels leave at 0 between dispatches. */
int bs_vk_counters_new(bs_vk_ctx *c, bs_vk_buf *b, size_t bytes);

/* vk_memory.c: a write returns once its bytes are in the ring (copies may still be in
 * flight: flush waits for them, and every submission, read and buffer release flushes first);
 * a read is synchronous. */
int bs_vk_staging_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n);
int bs_vk_staging_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n);
int bs_vk_staging_flush(bs_vk_ctx *c);
void bs_vk_staging_free(bs_vk_ctx *c);

/* Return -1 when x fails (x: an int call, 0 on success). */
#define TRY(x) do { if (x) return -1; } while (0)

/* Workgroups of `per` that cover n items. */
static inline uint32_t bs_vk_groups(uint64_t n, uint32_t per) { return (uint32_t)((n + per - 1) / per); }

/* vk_exec.c: one command buffer recorded, submitted and waited for; at most BS_VK_MAX_SETS
 * dispatches in it (descriptor sets of its pools). */
int bs_vk_begin(bs_vk_ctx *c);
/* Record one dispatch of kernel k over groups (gx, gy, gz) with the buffers and push values. */
int bs_vk_dispatch(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push, uint32_t gx,
                   uint32_t gy, uint32_t gz);
/* The same with the group counts read at run time from args at offset (three uint32: x, y, z). */
int bs_vk_dispatch_indirect(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push, const bs_vk_buf *args,
                            uint64_t offset);
/* A full compute/transfer barrier, unless nothing was recorded since the last one. */
void bs_vk_barrier(bs_vk_ctx *c);
/* Transfers recorded into the current command buffer (so that the next barrier is kept). */
void bs_vk_cmd_copy(bs_vk_ctx *c, const bs_vk_buf *src, const bs_vk_buf *dst, const VkBufferCopy *r);
void bs_vk_cmd_fill(bs_vk_ctx *c, const bs_vk_buf *b);
void bs_vk_cmd_fill_at(bs_vk_ctx *c, const bs_vk_buf *b, VkDeviceSize offset, VkDeviceSize size, uint32_t value);

/* vk_top.c: topk.comp's buffers (its levels' candidates and the lists, host visible) for rows
 * of V logits; the k best of rows 0..rows-1 of logits recorded into them; row r's list read
 * back (its count, at most k). */
typedef struct bs_vk_top_bufs { bs_vk_buf cand[2], topv; } bs_vk_top_bufs;
/* norm.comp's push constants (vk_forward.c, vk_dspark.c): groups of d (rows of row_stride,
 * per_row heads of head_stride), mode 0 RMS, 1 L2; flags: the residual added first, the result
 * quantized into int8 blocks, the gate silu(z) applied, the rows rotated by a fold (blocks of
 * rblock, signs if rsigns, scale rscale: bs_vk_norm_rotates) and the int8 blocks made from them. */
typedef struct norm_push {
    uint32_t d, mode, has_w, per_row, row_stride, head_stride, x_off, y_off;
    float eps;
    uint32_t flags, rblock, rsigns;
    float rscale;
} norm_push;
enum { NORM_ADD = 1, NORM_QUANT = 2, NORM_GATE = 4, NORM_ROT = 8 };
enum { BS_VK_NORM_ROT_MAX = 2048 };   /* norm.comp's ROT_MAX (BS_VK_K_NORM_ROT) */
/* Whether norm.comp can rotate rows of d by r in its epilogue (a forward fold without regrouping,
 * blocks it holds); the other epilogues' guards start from it. */
bool bs_vk_norm_rotates(const bs_vk_rot *r, uint32_t d);
/* Whether delta_norm.comp can rotate its nv heads of dv by r for the product after it (a forward
 * fold over them all, blocks of whole heads it holds, the V heads regrouped or not). */
bool bs_vk_heads_rotate(const bs_vk_rot *r, uint32_t nv, uint32_t dv);
/* qk.comp's push constants (vk_forward.c gated 1: each q head followed by its gate; vk_dspark.c
 * gated 0: packed q heads, no gates) */
typedef struct qk_push { uint32_t H, Hkv, D, n_rot, cs_row0, f32; float eps; uint32_t gated; } qk_push;

/* argmax.comp's scratch for `rows` logits rows: each chunk's best (part, BS_VK_AMAX_CHUNKS a row)
 * and a counter per row, zeroed when made (the kernel leaves it at 0). */
typedef struct bs_vk_amax_bufs { bs_vk_buf part, cnt; } bs_vk_amax_bufs;
int bs_vk_amax_bufs_new(bs_vk_ctx *c, bs_vk_amax_bufs *a, uint64_t rows);
void bs_vk_amax_bufs_free(bs_vk_ctx *c, bs_vk_amax_bufs *a);
/* Each of rows 0..rows-1 of logits (rows of V): its greedy id into ids[row] and, with feed, row
 * 0's into feed[0] (argmax.comp, a workgroup per chunk of a row). */
int bs_vk_record_argmax(bs_vk_ctx *c, const bs_vk_amax_bufs *a, const bs_vk_buf *logits, uint32_t V, uint32_t rows,
                        const bs_vk_buf *ids, const bs_vk_buf *feed);
int bs_vk_top_bufs_ready(bs_vk_ctx *c, bs_vk_top_bufs *t, uint32_t V, uint64_t rows);
void bs_vk_top_bufs_free(bs_vk_ctx *c, bs_vk_top_bufs *t);
int bs_vk_record_topk_in(bs_vk_ctx *c, const bs_vk_top_bufs *t, const bs_vk_buf *logits, uint32_t V, uint32_t k,
                         uint32_t rows);
int bs_vk_top_list(bs_vk_ctx *c, const bs_vk_top_bufs *t, size_t row, int k, int32_t *ids, float *vals);
/* The draw from list row 0 of t (k long) predicted with uniform u[slot] (draft_draw.comp: the
 * sampler's steps p, the scan in id order with by_id, else in the list's) into tok[0] and
 * out[slot]. */
int bs_vk_record_draw(bs_vk_ctx *c, const bs_vk_top_bufs *t, uint32_t k, const bs_draw *p, bool by_id, const bs_vk_buf *u,
                      uint32_t slot, const bs_vk_buf *tok, const bs_vk_buf *out);
/* Bytes the host read back from the device (into the stats). */
void bs_vk_count_read(bs_vk_ctx *c, size_t bytes);
int bs_vk_submit(bs_vk_ctx *c);
/* The same without waiting for it: the next use of the main command buffer, its fence or its
 * descriptor pool (bs_vk_begin, bs_vk_submit_cmd) and every buffer write, read and release wait
 * for it first (bs_vk_settle, vk_memory.c). The caller settles before it writes mapped memory
 * the submission reads; the queue's order and the barrier each recording begins with order
 * later device work after it. */
int bs_vk_submit_nowait(bs_vk_ctx *c);
int bs_vk_settle(bs_vk_ctx *c);
/* A step recorded once and submitted many times: record into cmd with descriptor sets from
 * pools (both owned by the caller; pools zeroed, or emptied by bs_vk_pools_free), end it;
 * submit it and wait. */
int bs_vk_record_into(bs_vk_ctx *c, VkCommandBuffer cmd, bs_vk_pools *pools);
int bs_vk_record_end(bs_vk_ctx *c);
int bs_vk_submit_cmd(bs_vk_ctx *c, VkCommandBuffer cmd);
/* The same without waiting: f signals when it is done (bs_vk_fence_wait waits and resets it).
 * The queue runs submissions in order; a recording that may start while its predecessor
 * still runs begins with a barrier. */
int bs_vk_submit_cmd_to(bs_vk_ctx *c, VkCommandBuffer cmd, VkFence f);
int bs_vk_fence_wait(bs_vk_ctx *c, VkFence f);
/* Everything submitted to the queue finished (before buffers a step in flight may bind go). */
void bs_vk_idle(bs_vk_ctx *c);
int bs_vk_fence_new(bs_vk_ctx *c, VkFence *f);
void bs_vk_fence_free(bs_vk_ctx *c, VkFence f);
/* c->rec: the counts of the recording bs_vk_record_end just closed (a cached step keeps them
 * and adds them to the stats with bs_vk_count_submit at each submission). */
void bs_vk_count_submit(bs_vk_ctx *c, const bs_vk_rec *r);
/* The pools' sets all free again (none of them bound by work in flight), or the pools gone. */
void bs_vk_pools_reset(bs_vk_ctx *c, bs_vk_pools *ps);
void bs_vk_pools_free(bs_vk_ctx *c, bs_vk_pools *ps);
/* The per-kernel GPU times (BITSPARK_PROFILE=1), printed on stderr. */
void bs_vk_profile_print(bs_vk_ctx *c);
int bs_vk_pipes_init(bs_vk_ctx *c);
/* vk_mm.c: c->mm from BITSPARK_VK_MM and the device (before the device is created: it decides
 * its features); -1 with bs_error for a way the device cannot take. */
int bs_vk_mm_want(bs_vk_ctx *c);
/* After the pipelines: cooperative matrices the context chose are checked against mv_q on two
 * products (mv_q is taken where they differ or fail, with a message). */
int bs_vk_mm_check(bs_vk_ctx *c);
/* vk_kernels.c: the mm kernel that computes mv_q kernel k's product of n rows, or -1 (mv_q's own). */
int bs_vk_mm_kernel(const bs_vk_ctx *c, int k, int n);
/* How many times kernel k's product of n rows reads its weights: row groups of 8 or tiles of 32. */
uint64_t bs_vk_mvq_passes(const bs_vk_ctx *c, int k, int n);
void bs_vk_pipes_free(bs_vk_ctx *c);

#endif
