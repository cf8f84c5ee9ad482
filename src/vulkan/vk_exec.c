/* vk_exec.c: the pipelines of the embedded shaders, and one command buffer that is recorded,
 * submitted and waited for (buffers and uploads: vk_memory.c). */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SETS = BS_VK_MAX_SETS, NIL_SLOTS = 1024 };

/* --- pipelines ------------------------------------------------------------------------------- */
typedef struct kernel_def {
    const char *shader;
    int n_bind;
    uint32_t push_bytes;
    int n_spec;
    uint32_t spec[5];
} kernel_def;

static const kernel_def KERNELS[BS_VK_K_COUNT] = {
    [BS_VK_K_COPY] = {"copy", 2, 4, 0, {0}},
    [BS_VK_K_RMSNORM] = {"rmsnorm", 3, 12, 0, {0}},
    [BS_VK_K_QUANT_Q8] = {"quant_q8", 5, 16, 0, {0}},
    /* mv_q: spec constants (bits per weight, 32-element sub-blocks per scale) */
    [BS_VK_K_MV_Q1] = {"mv_q", 17, 60, 5, {1, 4, 0, 0, 0}},
    [BS_VK_K_MV_Q2_128] = {"mv_q", 17, 60, 5, {2, 4, 0, 0, 0}},
    [BS_VK_K_MV_Q2_64] = {"mv_q", 17, 60, 5, {2, 2, 0, 0, 0}},
    [BS_VK_K_MV_Q8] = {"mv_q", 17, 60, 5, {8, 1, 0, 0, 0}},
    [BS_VK_K_MV_F32] = {"mv_f32", 3, 24, 0, {0}},
    [BS_VK_K_MV_Q4_1] = {"mv_q", 17, 60, 5, {4, 1, 0, 0, 0}},
    [BS_VK_K_ROWS_Q4_1] = {"get_rows", 4, 16, 2, {4, 1}},
    [BS_VK_K_ROWS_Q1] = {"get_rows", 4, 16, 2, {1, 4}},
    [BS_VK_K_ROWS_Q2_128] = {"get_rows", 4, 16, 2, {2, 4}},
    [BS_VK_K_ROWS_Q2_64] = {"get_rows", 4, 16, 2, {2, 2}},
    [BS_VK_K_ROWS_Q8] = {"get_rows", 4, 16, 2, {8, 1}},
    [BS_VK_K_ROWS_F32] = {"get_rows", 4, 16, 2, {32, 1}},
    /* norm.comp without its rotation's shared memory (ROT_MAX 1), and with it (the default) */
    [BS_VK_K_NORM] = {"norm", 10, 52, 1, {1}},
    [BS_VK_K_NORM_ROT] = {"norm", 10, 52, 0, {0}},
    [BS_VK_K_EW] = {"ew", 3, 16, 0, {0}},
    [BS_VK_K_CONV] = {"conv", 5, 32, 0, {0}},
    [BS_VK_K_DELTA] = {"delta", 7, 36, 0, {0}},
    [BS_VK_K_ROPE] = {"rope", 2, 16, 0, {0}},
    [BS_VK_K_KV_STORE] = {"kv_store", 5, 12, 0, {0}},
    [BS_VK_K_ATTN] = {"attn", 14, 44, 0, {0}},
    [BS_VK_K_ACT_ROUND] = {"act_round", 2, 8, 0, {0}},
    /* mv_q with GLU: gate and up, then silu(gate) * up */
    [BS_VK_K_GLU_Q1] = {"mv_q", 17, 60, 5, {1, 4, 1, 0, 0}},
    [BS_VK_K_GLU_Q2_128] = {"mv_q", 17, 60, 5, {2, 4, 1, 0, 0}},
    [BS_VK_K_GLU_Q2_64] = {"mv_q", 17, 60, 5, {2, 2, 1, 0, 0}},
    [BS_VK_K_GLU_Q8] = {"mv_q", 17, 60, 5, {8, 1, 1, 0, 0}},
    [BS_VK_K_GLU_Q4_1] = {"mv_q", 17, 60, 5, {4, 1, 1, 0, 0}},
    /* mv_f32 without fma: LoRA factors, in the CPU's float order */
    [BS_VK_K_MV_F32_LORA] = {"mv_f32", 3, 24, 2, {0, 1}},   /* a LoRA factor B: no fma, added into y */
    [BS_VK_K_ATTN_NC] = {"attn_nc", 5, 32, 0, {0}},
    [BS_VK_K_ARGMAX] = {"argmax", 5, 12, 0, {0}},
    [BS_VK_K_TOPK] = {"topk", 4, 24, 0, {0}},
    [BS_VK_K_VIT_LN] = {"vit_ln", 4, 8, 0, {0}},
    [BS_VK_K_VIT_EW] = {"vit_ew", 5, 16, 0, {0}},
    [BS_VK_K_FMA_PROBE] = {"fma_probe", 2, 4, 0, {0}},
    /* GLU whose output is also quantized for the down projection */
    [BS_VK_K_GLUQ_Q1] = {"mv_q", 17, 60, 5, {1, 4, 1, 1, 0}},
    [BS_VK_K_GLUQ_Q2_128] = {"mv_q", 17, 60, 5, {2, 4, 1, 1, 0}},
    [BS_VK_K_GLUQ_Q2_64] = {"mv_q", 17, 60, 5, {2, 2, 1, 1, 0}},
    [BS_VK_K_GLUQ_Q8] = {"mv_q", 17, 60, 5, {8, 1, 1, 1, 0}},
    [BS_VK_K_GLUQ_Q4_1] = {"mv_q", 17, 60, 5, {4, 1, 1, 1, 0}},
    [BS_VK_K_QK] = {"qk", 9, 32, 0, {0}},
    /* mv_q adding into the residual stream, the last workgroup norming it (NORM_OUT) */
    [BS_VK_K_MVN_Q1] = {"mv_q", 17, 60, 5, {1, 4, 0, 0, 1}},
    [BS_VK_K_MVN_Q2_128] = {"mv_q", 17, 60, 5, {2, 4, 0, 0, 1}},
    [BS_VK_K_MVN_Q2_64] = {"mv_q", 17, 60, 5, {2, 2, 0, 0, 1}},
    [BS_VK_K_MVN_Q8] = {"mv_q", 17, 60, 5, {8, 1, 0, 0, 1}},
    [BS_VK_K_MVN_Q4_1] = {"mv_q", 17, 60, 5, {4, 1, 0, 0, 1}},
    /* mv_q with the DeltaNet conv in its epilogue (CONV: three more bindings, K pushed) */
    [BS_VK_K_MVC_Q1] = {"mv_qc", 21, 68, 5, {1, 4, 0, 0, 0}},
    [BS_VK_K_MVC_Q2_128] = {"mv_qc", 21, 68, 5, {2, 4, 0, 0, 0}},
    [BS_VK_K_MVC_Q2_64] = {"mv_qc", 21, 68, 5, {2, 2, 0, 0, 0}},
    [BS_VK_K_MVC_Q8] = {"mv_qc", 21, 68, 5, {8, 1, 0, 0, 0}},
    [BS_VK_K_MVC_Q4_1] = {"mv_qc", 21, 68, 5, {4, 1, 0, 0, 0}},
    [BS_VK_K_DELTA_NORM] = {"delta_norm", 16, 60, 1, {1}},
    [BS_VK_K_ATTN_SPLIT] = {"attn_split", 19, 64, 0, {0}},   /* 16-18, rblock..: a folded output's rotation */
    /* mm_q (vk_mm.c): mv_q's bindings, push constants and spec constants, tiles of 32 x 32 */
    [BS_VK_K_MM_Q1] = {"mm_q", 17, 60, 5, {1, 4, 0, 0, 0}},
    [BS_VK_K_MM_Q2_128] = {"mm_q", 17, 60, 5, {2, 4, 0, 0, 0}},
    [BS_VK_K_MM_Q2_64] = {"mm_q", 17, 60, 5, {2, 2, 0, 0, 0}},
    [BS_VK_K_MMG_Q1] = {"mm_q", 17, 60, 5, {1, 4, 1, 0, 0}},
    [BS_VK_K_MMG_Q2_128] = {"mm_q", 17, 60, 5, {2, 4, 1, 0, 0}},
    [BS_VK_K_MMG_Q2_64] = {"mm_q", 17, 60, 5, {2, 2, 1, 0, 0}},
    [BS_VK_K_MMGQ_Q1] = {"mm_q", 17, 60, 5, {1, 4, 1, 1, 0}},
    [BS_VK_K_MMGQ_Q2_128] = {"mm_q", 17, 60, 5, {2, 4, 1, 1, 0}},
    [BS_VK_K_MMGQ_Q2_64] = {"mm_q", 17, 60, 5, {2, 2, 1, 1, 0}},
    [BS_VK_K_MM_Q8] = {"mm_ql", 17, 60, 5, {8, 1, 0, 0, 0}},
    [BS_VK_K_MM_Q4_1] = {"mm_ql", 17, 60, 5, {4, 1, 0, 0, 0}},
    /* conv.glsl / delta.glsl for up to 8 sequences (workgroup z), a window / state binding each */
    [BS_VK_K_CONV_B] = {"conv_b", 19, 56, 0, {0}},
    [BS_VK_K_DELTA_B] = {"delta_b", 21, 60, 0, {0}},
    /* attn_split for up to 4 sequences (workgroup z), their caches, scores, positions, partials */
    [BS_VK_K_ATTN_SPLIT_B] = {"attn_split_b", 31, 68, 0, {0}},
    /* attn_split for the drafter's block: attn_nc's attention, attn_split's bindings */
    [BS_VK_K_ATTN_NC_SPLIT] = {"attn_nc_split", 16, 48, 0, {0}},
    [BS_VK_K_ROTATE] = {"rotate", 7, 48, 0, {0}},
    [BS_VK_K_MV_F32N] = {"mv_f32n", 5, 24, 0, {0}},
    [BS_VK_K_MV_F32N_LORA] = {"mv_f32n", 5, 24, 1, {0}},
    /* the sampled chain's draw from a slot's list (vk_dspark.c) */
    [BS_VK_K_DRAFT_DRAW] = {"draft_draw", 4, 28, 0, {0}},
    /* mv_q.glsl's ROT (mv_qr.comp): two more bindings (the rotated rows, the signs), three more
       push words (block, signs, scale) */
    [BS_VK_K_MVNR_Q1] = {"mv_qr", 19, 72, 5, {1, 4, 0, 0, 1}},
    [BS_VK_K_MVNR_Q2_128] = {"mv_qr", 19, 72, 5, {2, 4, 0, 0, 1}},
    [BS_VK_K_MVNR_Q2_64] = {"mv_qr", 19, 72, 5, {2, 2, 0, 0, 1}},
    [BS_VK_K_MVNR_Q8] = {"mv_qr", 19, 72, 5, {8, 1, 0, 0, 1}},
    [BS_VK_K_MVNR_Q4_1] = {"mv_qr", 19, 72, 5, {4, 1, 0, 0, 1}},
    [BS_VK_K_GLUR_Q1] = {"mv_qr", 19, 72, 5, {1, 4, 1, 1, 0}},
    [BS_VK_K_GLUR_Q2_128] = {"mv_qr", 19, 72, 5, {2, 4, 1, 1, 0}},
    [BS_VK_K_GLUR_Q2_64] = {"mv_qr", 19, 72, 5, {2, 2, 1, 1, 0}},
    [BS_VK_K_GLUR_Q8] = {"mv_qr", 19, 72, 5, {8, 1, 1, 1, 0}},
    [BS_VK_K_GLUR_Q4_1] = {"mv_qr", 19, 72, 5, {4, 1, 1, 1, 0}},
    [BS_VK_K_DELTA_NORM_ROT] = {"delta_norm", 16, 60, 0, {0}},   /* ROT_MAX 2048 */
};

/* fma_rn.glsl's FMA_FUSED: one more specialization constant for every pipeline (a map entry for
 * an id a shader does not declare changes nothing, so all take it) */
/* and mv_q's ASUM_STAGE, delta_lanes' DL_SPREAD and workgroup size DL_INV, mm_q_coop's
 * cooperative matrix shape CM x CN x CK (ignored by the others) */
enum { SPEC_FMA_ID = 20, SPEC_ASUM_ID = 21, SPEC_DELTA_ID = 22, SPEC_DELTA_INV_ID = 23, SPEC_CM_ID = 24, SPEC_CN_ID = 25,
       SPEC_CK_ID = 26, N_SHARED_SPEC = 7 };

/* the shader a kernel runs on this context: mv_q's and mm_ql's with dp4a, mm_q's with cooperative
 * matrices */
static const char *shader_of(const bs_vk_ctx *c, const kernel_def *k) {
    if (c->dp4a && !strcmp(k->shader, "mv_q")) return "mv_q_dp4a";
    if (c->dp4a && !strcmp(k->shader, "mv_qc")) return "mv_qc_dp4a";
    if (c->dp4a && !strcmp(k->shader, "mv_qr")) return "mv_qr_dp4a";
    if (c->dp4a && !strcmp(k->shader, "mm_ql")) return "mm_ql_dp4a";
    if (c->mm == BS_VK_MM_COOP && !strcmp(k->shader, "mm_q")) return "mm_q_coop";
    return k->shader;
}

/* The shader module of a kernel: the embedded SPIR-V, or for KHR cooperative matrices the NV
 * module rewritten (vk_spirv.c). */
static int module_new(bs_vk_ctx *c, const kernel_def *k, VkShaderModule *mod) {
    const char *name = shader_of(c, k);
    const bs_vk_spirv *sp = bs_vk_shader(name);
    if (!sp) return bs_error("Vulkan: shader %s is not embedded", name);
    uint32_t *khr = NULL;
    size_t words = sp->bytes / 4;
    if (c->coop_khr && !strcmp(name, "mm_q_coop") && bs_vk_spirv_coop_khr(sp->code, words, &khr, &words))
        return bs_error_prefix("Vulkan: mm_q_coop for VK_KHR_cooperative_matrix: ");
    VkShaderModuleCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = 4 * words,
                                   .pCode = khr ? khr : sp->code};
    const VkResult r = c->fn->vkCreateShaderModule(c->dev, &si, NULL, mod);
    free(khr);
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: shader %s rejected", name);
}

static int pipe_new(bs_vk_ctx *c, bs_vk_pipe *p, const kernel_def *k) {
    TRY(module_new(c, k, &p->mod));
    VkDescriptorSetLayoutBinding b[BS_VK_PIPE_MAX_BIND];
    for (int i = 0; i < k->n_bind; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = (uint32_t)k->n_bind, .pBindings = b};
    if (c->fn->vkCreateDescriptorSetLayout(c->dev, &li, NULL, &p->dsl) != VK_SUCCESS) return bs_error("Vulkan: descriptor layout");
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = k->push_bytes};
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                     .pSetLayouts = &p->dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    if (c->fn->vkCreatePipelineLayout(c->dev, &pl, NULL, &p->layout) != VK_SUCCESS) return bs_error("Vulkan: pipeline layout");
    VkSpecializationMapEntry me[5 + N_SHARED_SPEC];   /* spec[5] and the shared ones */
    uint32_t data[5 + N_SHARED_SPEC];
    for (int i = 0; i < k->n_spec; i++) {
        me[i] = (VkSpecializationMapEntry){(uint32_t)i, 4u * (uint32_t)i, 4};
        data[i] = k->spec[i];
    }
    me[k->n_spec] = (VkSpecializationMapEntry){SPEC_FMA_ID, 4u * (uint32_t)k->n_spec, 4};
    data[k->n_spec] = c->fma_fused;
    me[k->n_spec + 1] = (VkSpecializationMapEntry){SPEC_ASUM_ID, 4u * ((uint32_t)k->n_spec + 1), 4};
    data[k->n_spec + 1] = c->asum_staged;
    me[k->n_spec + 2] = (VkSpecializationMapEntry){SPEC_DELTA_ID, 4u * ((uint32_t)k->n_spec + 2), 4};
    data[k->n_spec + 2] = c->delta_spread;
    me[k->n_spec + 3] = (VkSpecializationMapEntry){SPEC_DELTA_INV_ID, 4u * ((uint32_t)k->n_spec + 3), 4};
    data[k->n_spec + 3] = c->delta_cols * c->delta_spread;
    me[k->n_spec + 4] = (VkSpecializationMapEntry){SPEC_CM_ID, 4u * ((uint32_t)k->n_spec + 4), 4};
    data[k->n_spec + 4] = c->coop.m ? c->coop.m : 16;
    me[k->n_spec + 5] = (VkSpecializationMapEntry){SPEC_CN_ID, 4u * ((uint32_t)k->n_spec + 5), 4};
    data[k->n_spec + 5] = c->coop.n ? c->coop.n : 8;
    me[k->n_spec + 6] = (VkSpecializationMapEntry){SPEC_CK_ID, 4u * ((uint32_t)k->n_spec + 6), 4};
    data[k->n_spec + 6] = c->coop.k ? c->coop.k : 32;
    VkSpecializationInfo spec = {.mapEntryCount = (uint32_t)k->n_spec + N_SHARED_SPEC, .pMapEntries = me,
                                 .dataSize = 4u * ((uint32_t)k->n_spec + N_SHARED_SPEC), .pData = data};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = p->mod, .pName = "main", .pSpecializationInfo = &spec},
        .layout = p->layout};
    if (c->fn->vkCreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p->pipe) != VK_SUCCESS)
        return bs_error("Vulkan: cannot build the %s pipeline", k->shader);
    p->n_bind = k->n_bind;
    p->push_bytes = k->push_bytes;
    return 0;
}

/* --- descriptor pools ------------------------------------------------------------------------ */
/* One pool of the chain: POOL_SETS sets with room for the widest kernel's bindings in each, so
 * sets, never descriptors, are what runs out (a recording's sets count its dispatches). */
static int pool_new(bs_vk_ctx *c, VkDescriptorPool *pool) {
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                               .descriptorCount = BS_VK_POOL_SETS * BS_VK_PIPE_MAX_BIND};
    VkDescriptorPoolCreateInfo dp = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = BS_VK_POOL_SETS,
                                     .poolSizeCount = 1, .pPoolSizes = &ps};
    if (c->fn->vkCreateDescriptorPool(c->dev, &dp, NULL, pool) != VK_SUCCESS) return bs_error("Vulkan: descriptor pool");
    return 0;
}

/* The pool the next set comes from: the current one while it has room, else the next of the
 * chain (made now if it is not yet). */
static int pools_take(bs_vk_ctx *c, bs_vk_pools *ps, VkDescriptorPool *out) {
    if (ps->n == 0 || ps->sets == BS_VK_POOL_SETS) {
        const int next = ps->n == 0 ? 0 : ps->cur + 1;
        if (next == BS_VK_MAX_POOLS) return bs_error("Vulkan: too many dispatches in one submission (%d)", BS_VK_MAX_SETS);
        if (next == ps->n) {
            TRY(pool_new(c, &ps->p[next]));
            ps->n++;
        }
        ps->cur = next;
        ps->sets = 0;
    }
    ps->sets++;
    *out = ps->p[ps->cur];
    return 0;
}

void bs_vk_pools_reset(bs_vk_ctx *c, bs_vk_pools *ps) {
    for (int i = 0; i < ps->n && i <= ps->cur; i++) c->fn->vkResetDescriptorPool(c->dev, ps->p[i], 0);
    ps->cur = ps->sets = 0;
}

void bs_vk_pools_free(bs_vk_ctx *c, bs_vk_pools *ps) {
    for (int i = 0; i < ps->n; i++) c->fn->vkDestroyDescriptorPool(c->dev, ps->p[i], NULL);
    *ps = (bs_vk_pools){0};
}

/* Whether fma() rounds once on this device: a * b + c for triples whose product's low bits
 * decide the result (a rounded product would lose them). BITSPARK_VK_FMA=emulate takes the
 * emulation anyway (tests: the path a device without a fused fma() takes). */
static int fma_probe(bs_vk_ctx *c) {
    static const float in[] = {
        1.0f + 0x1p-12f, 1.0f + 0x1p-12f, -(1.0f + 0x1p-11f),   /* fused: 2^-24; unfused: 0 */
        1.0f + 0x1p-23f, 1.0f - 0x1p-23f, -1.0f,                /* fused: -2^-46; unfused: 0 */
        3.0f + 0x1p-21f, 5.0f - 0x1p-20f, -15.0f,
        0.1f, 10.0f, -1.0f,
    };
    enum { N = sizeof in / sizeof in[0] / 3 };
    const char *env = getenv("BITSPARK_VK_FMA");
    c->fma_fused = false;
    bs_vk_buf bi = {0}, bo = {0};
    float out[N];
    uint32_t n = N;
    int rc = bs_vk_buf_new(c, &bi, sizeof in, true) || bs_vk_buf_new(c, &bo, sizeof out, true) ||
             bs_vk_buf_write(c, &bi, 0, in, sizeof in) || bs_vk_begin(c);
    if (!rc) {
        const bs_vk_buf *b[2] = {&bi, &bo};
        rc = bs_vk_dispatch(c, BS_VK_K_FMA_PROBE, b, &n, 1, 1, 1);
        rc = bs_vk_submit(c) || rc;
    }
    if (!rc) rc = bs_vk_buf_read(c, &bo, 0, out, sizeof out);
    bs_vk_buf_free(c, &bi);
    bs_vk_buf_free(c, &bo);
    if (rc) return -1;
    bool fused = true;
    for (int i = 0; i < N; i++) fused &= out[i] == fmaf(in[3 * i], in[3 * i + 1], in[3 * i + 2]);
    c->fma_fused = fused && !(env && !strcmp(env, "emulate"));
    c->stats = (bs_vk_stats){0};   /* the probe is not the caller's work */
    c->prof_ms[BS_VK_K_FMA_PROBE] = 0;
    c->prof_n[BS_VK_K_FMA_PROBE] = 0;
    return 0;
}

bool bs_vk_fma_fused(const bs_vk_ctx *c) { return c->fma_fused; }

int bs_vk_pipes_init(bs_vk_ctx *c) {
    const bs_vk_fns *fn = c->fn;
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = c->qfam};
    if (fn->vkCreateCommandPool(c->dev, &pi, NULL, &c->cpool) != VK_SUCCESS) return bs_error("Vulkan: command pool");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->cpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if (fn->vkAllocateCommandBuffers(c->dev, &ai, &c->cmd) != VK_SUCCESS) return bs_error("Vulkan: command buffer");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (fn->vkCreateFence(c->dev, &fi, NULL, &c->fence) != VK_SUCCESS) return bs_error("Vulkan: fence");
    c->nil_stride = BS_MAX(16, c->info.offset_align);
    if (bs_vk_buf_new(c, &c->nil, c->nil_stride * NIL_SLOTS, false)) return -1;
    c->main_cmd = c->cmd;
    c->dpools = &c->main_pools;
    c->counting = bs_env_flag("BITSPARK_PROFILE");
    c->profiling = c->counting && c->info.timestamps;
    c->staged = bs_env_flag("BITSPARK_VK_STAGED");
    const char *glu = getenv("BITSPARK_VK_GLU");
    c->glu = !(glu && !strcmp(glu, "0"));
    if (c->profiling) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = MAX_SETS + 1};
        if (fn->vkCreateQueryPool(c->dev, &qi, NULL, &c->qpool) != VK_SUCCESS) c->profiling = false;
    }
    /* the others are built when first dispatched (a model takes some 25 of them; building them
       all took most of a short run's time on a CPU device), or all at once: bs_vk_pipes_build */
    return fma_probe(c);
}

/* Kernel k's pipeline, built now if it is not yet (a failed build is not tried again). */
static const bs_vk_pipe *pipe_get(bs_vk_ctx *c, int k) {
    bs_vk_pipe *p = &c->pipes[k];
    if (p->pipe) return p;
    if (p->mod) {
        bs_error("Vulkan: the %s pipeline could not be built", KERNELS[k].shader);
        return NULL;
    }
    return pipe_new(c, p, &KERNELS[k]) ? NULL : p;
}

int bs_vk_pipes_build(bs_vk_ctx *c) {
    for (int k = 0; k < BS_VK_K_COUNT; k++)
        if (!pipe_get(c, k)) return -1;
    return 0;
}

void bs_vk_pipes_free(bs_vk_ctx *c) {
    const bs_vk_fns *fn = c->fn;
    bs_vk_buf_free(c, &c->nil);
    bs_vk_staging_free(c);
    for (int k = 0; k < BS_VK_K_COUNT; k++) {
        bs_vk_pipe *p = &c->pipes[k];
        if (p->pipe) fn->vkDestroyPipeline(c->dev, p->pipe, NULL);
        if (p->layout) fn->vkDestroyPipelineLayout(c->dev, p->layout, NULL);
        if (p->dsl) fn->vkDestroyDescriptorSetLayout(c->dev, p->dsl, NULL);
        if (p->mod) fn->vkDestroyShaderModule(c->dev, p->mod, NULL);
    }
    if (c->qpool) fn->vkDestroyQueryPool(c->dev, c->qpool, NULL);
    bs_vk_pools_free(c, &c->main_pools);
    if (c->fence) fn->vkDestroyFence(c->dev, c->fence, NULL);
    if (c->cpool) fn->vkDestroyCommandPool(c->dev, c->cpool, NULL);
}

/* --- recording ------------------------------------------------------------------------------- */
/* A new command buffer: nothing counted yet, and first a barrier. A fence tells the host that
 * the submission before has finished; only a barrier makes its writes visible to this one's
 * reads (and a submission may start while the one before still runs: vk_ahead.c). */
static void rec_start(bs_vk_ctx *c) {
    c->rec = (bs_vk_rec){0};
    c->dirty = true;
    bs_vk_barrier(c);
}

int bs_vk_begin(bs_vk_ctx *c) {
    if (c->recording) return bs_error("Vulkan: command buffer already recording");
    TRY(bs_vk_settle(c));
    bs_vk_pools_reset(c, &c->main_pools);   /* (the main buffer's last submission is done) */
    c->fn->vkResetCommandBuffer(c->cmd, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->fn->vkBeginCommandBuffer(c->cmd, &bi) != VK_SUCCESS) return bs_error("Vulkan: vkBeginCommandBuffer failed");
    c->recording = true;
    rec_start(c);
    if (c->profiling) {
        c->fn->vkCmdResetQueryPool(c->cmd, c->qpool, 0, MAX_SETS + 1);
        c->fn->vkCmdWriteTimestamp(c->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c->qpool, 0);
        c->n_queries = 1;
    }
    return 0;
}

int bs_vk_record_into(bs_vk_ctx *c, VkCommandBuffer cmd, bs_vk_pools *pools) {
    if (c->recording) return bs_error("Vulkan: command buffer already recording");
    c->cmd = cmd;
    c->dpools = pools;
    c->caching = true;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (c->fn->vkBeginCommandBuffer(c->cmd, &bi) != VK_SUCCESS) {
        c->cmd = c->main_cmd;
        c->dpools = &c->main_pools;
        c->caching = false;
        return bs_error("Vulkan: vkBeginCommandBuffer failed");
    }
    c->recording = true;
    rec_start(c);
    return 0;
}

/* the results go back to the host through mapped memory */
static void host_barrier(bs_vk_ctx *c) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    c->fn->vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

int bs_vk_record_end(bs_vk_ctx *c) {
    host_barrier(c);
    const VkResult r = c->fn->vkEndCommandBuffer(c->cmd);
    c->recording = false;
    c->caching = false;
    c->cmd = c->main_cmd;
    c->dpools = &c->main_pools;
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: vkEndCommandBuffer failed");
}

int bs_vk_submit_cmd_to(bs_vk_ctx *c, VkCommandBuffer cmd, VkFence f) {
    if ((f == c->fence && bs_vk_settle(c)) || bs_vk_staging_flush(c)) return -1;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
    if (c->fn->vkQueueSubmit(c->queue, 1, &si, f) != VK_SUCCESS) return bs_error("Vulkan: vkQueueSubmit failed");
    c->stats.submits++;
    return 0;
}

int bs_vk_fence_wait(bs_vk_ctx *c, VkFence f) {
    const VkResult r = c->fn->vkWaitForFences(c->dev, 1, &f, VK_TRUE, UINT64_MAX);
    c->fn->vkResetFences(c->dev, 1, &f);
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: the device did not finish (VkResult %d)", (int)r);
}

void bs_vk_idle(bs_vk_ctx *c) {
    bs_vk_settle(c);
    c->fn->vkQueueWaitIdle(c->queue);
}

int bs_vk_fence_new(bs_vk_ctx *c, VkFence *f) {
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    return c->fn->vkCreateFence(c->dev, &fi, NULL, f) == VK_SUCCESS ? 0 : bs_error("Vulkan: fence");
}

void bs_vk_fence_free(bs_vk_ctx *c, VkFence f) {
    if (f) c->fn->vkDestroyFence(c->dev, f, NULL);
}

int bs_vk_submit_cmd(bs_vk_ctx *c, VkCommandBuffer cmd) {
    return bs_vk_submit_cmd_to(c, cmd, c->fence) || bs_vk_fence_wait(c, c->fence) ? -1 : 0;
}

static const char *kernel_name(int k);

void bs_vk_count_submit(bs_vk_ctx *c, const bs_vk_rec *r) {
    c->stats.dispatches += r->dispatches;
    c->stats.barriers += r->barriers;
    c->stats.weight_bytes += r->weight_bytes;
}

void bs_vk_count_read(bs_vk_ctx *c, size_t bytes) { c->stats.read_bytes += bytes; }
void bs_vk_stats_get(const bs_vk_ctx *c, bs_vk_stats *out) { *out = c->stats; }
void bs_vk_stats_reset(bs_vk_ctx *c) { memset(&c->stats, 0, sizeof c->stats); }

/* Per token of the target's forward: what a step costs besides its kernels' time. */
static void stats_print(const bs_vk_ctx *c) {
    const bs_vk_stats *t = &c->stats;
    if (!t->tokens) return;
    const double n = (double)t->tokens;
    fprintf(stderr, "vulkan steps: %llu token rows, per row: %.1f dispatches, %.1f barriers, %.3f submissions, "
                    "%.0f bytes read back, %.0f weight bytes read\n",
            (unsigned long long)t->tokens, t->dispatches / n, t->barriers / n, t->submits / n, t->read_bytes / n,
            t->weight_bytes / n);
    if (t->ahead)
        fprintf(stderr, "vulkan steps submitted ahead: %llu, undone: %llu\n", (unsigned long long)t->ahead,
                (unsigned long long)t->discarded);
}

void bs_vk_profile_print(bs_vk_ctx *c) {
    if (c->counting) stats_print(c);
    if (!c->profiling) return;
    double total = 0;
    for (int k = 0; k < BS_VK_K_COUNT; k++) total += c->prof_ms[k];
    if (total <= 0) return;
    fprintf(stderr, "vulkan profile (%s, GPU time per kernel, timestamps):\n", c->info.name);
    for (int k = 0; k < BS_VK_K_COUNT; k++)
        if (c->prof_n[k])
            fprintf(stderr, "  %-14s %10.3f ms %5.1f%% %8llu dispatches\n", kernel_name(k), c->prof_ms[k],
                    100.0 * c->prof_ms[k] / total, (unsigned long long)c->prof_n[k]);
}

/* After a profiled submission: the time between consecutive timestamps goes to the kernel
 * recorded between them. */
static void profile_collect(bs_vk_ctx *c) {
    if (!c->profiling || c->n_queries < 2) return;
    uint64_t *ts = bs_xmalloc(sizeof *ts * (size_t)c->n_queries);
    if (c->fn->vkGetQueryPoolResults(c->dev, c->qpool, 0, (uint32_t)c->n_queries, sizeof *ts * (size_t)c->n_queries, ts,
                                     sizeof *ts, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
        for (int i = 1; i < c->n_queries; i++) {
            const int k = c->q_kernel[i];
            c->prof_ms[k] += (double)(ts[i] - ts[i - 1]) * c->info.timestamp_ns * 1e-6;
            c->prof_n[k]++;
        }
    free(ts);
    c->n_queries = 0;
}

/* kernel k's pipeline, buffers and push constants bound for a dispatch */
static int bind_kernel(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push) {
    const bs_vk_pipe *p = pipe_get(c, k);
    if (!p) return -1;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorSetCount = 1, .pSetLayouts = &p->dsl};
    TRY(pools_take(c, c->dpools, &ai.descriptorPool));
    VkDescriptorSet set;
    if (c->fn->vkAllocateDescriptorSets(c->dev, &ai, &set) != VK_SUCCESS) return bs_error("Vulkan: descriptor sets exhausted");
    VkDescriptorBufferInfo bi[BS_VK_PIPE_MAX_BIND];
    VkWriteDescriptorSet w[BS_VK_PIPE_MAX_BIND];
    for (int i = 0; i < p->n_bind; i++) {
        if (bufs[i]) bi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i]->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        else bi[i] = (VkDescriptorBufferInfo){.buffer = c->nil.buf, .offset = c->nil_stride * (c->nil_next++ % NIL_SLOTS),
                                               .range = c->nil_stride};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set, .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    c->fn->vkUpdateDescriptorSets(c->dev, (uint32_t)p->n_bind, w, 0, NULL);
    c->fn->vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
    c->fn->vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    c->fn->vkCmdPushConstants(c->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    return 0;
}

/* after a dispatch: counted, and timed when profiling */
static void dispatched(bs_vk_ctx *c, int k) {
    c->rec.dispatches++;
    c->dirty = true;
    if (c->profiling && !c->caching && c->n_queries > 0 && c->n_queries <= MAX_SETS) {
        c->fn->vkCmdWriteTimestamp(c->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->qpool, (uint32_t)c->n_queries);
        c->q_kernel[c->n_queries++] = k;
    }
}

int bs_vk_dispatch(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push, uint32_t gx, uint32_t gy,
                   uint32_t gz) {
    if (bind_kernel(c, k, bufs, push)) return -1;
    c->fn->vkCmdDispatch(c->cmd, gx, gy, gz);
    dispatched(c, k);
    return 0;
}

int bs_vk_dispatch_indirect(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push, const bs_vk_buf *args,
                            uint64_t offset) {
    if (bind_kernel(c, k, bufs, push)) return -1;
    c->fn->vkCmdDispatchIndirect(c->cmd, args->buf, offset);
    dispatched(c, k);
    return 0;
}

void bs_vk_barrier(bs_vk_ctx *c) {
    if (!c->dirty) return;   /* the last barrier already orders everything recorded */
    c->dirty = false;
    c->rec.barriers++;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                                           VK_ACCESS_TRANSFER_WRITE_BIT};   /* a copy or fill over what a dispatch wrote, too */
    c->fn->vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

void bs_vk_cmd_copy(bs_vk_ctx *c, const bs_vk_buf *src, const bs_vk_buf *dst, const VkBufferCopy *r) {
    c->fn->vkCmdCopyBuffer(c->cmd, src->buf, dst->buf, 1, r);
    c->dirty = true;
}

void bs_vk_cmd_fill_at(bs_vk_ctx *c, const bs_vk_buf *b, VkDeviceSize offset, VkDeviceSize size, uint32_t value) {
    c->fn->vkCmdFillBuffer(c->cmd, b->buf, offset, size, value);
    c->dirty = true;
}

void bs_vk_cmd_fill(bs_vk_ctx *c, const bs_vk_buf *b) {
    c->fn->vkCmdFillBuffer(c->cmd, b->buf, 0, VK_WHOLE_SIZE, 0);
    c->dirty = true;
}

/* The main command buffer ended and submitted with c->fence: 0, or -1 (nothing in flight). */
static int submit_main(bs_vk_ctx *c) {
    if (!c->recording) return bs_error("Vulkan: nothing recorded");
    c->recording = false;
    host_barrier(c);   /* results go back to the host through mapped memory */
    int rc = bs_vk_staging_flush(c);
    if (c->fn->vkEndCommandBuffer(c->cmd) != VK_SUCCESS) rc = bs_error("Vulkan: vkEndCommandBuffer failed");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cmd};
    if (!rc && c->fn->vkQueueSubmit(c->queue, 1, &si, c->fence) != VK_SUCCESS) rc = bs_error("Vulkan: vkQueueSubmit failed");
    if (rc) return -1;   /* (its descriptor sets go back at the next bs_vk_begin) */
    c->in_flight = true;
    c->stats.submits++;
    bs_vk_count_submit(c, &c->rec);
    return 0;
}

int bs_vk_submit(bs_vk_ctx *c) {
    TRY(submit_main(c) || bs_vk_settle(c));
    profile_collect(c);
    return 0;
}

/* (profiling reads each submission's timestamps: it waits) */
int bs_vk_submit_nowait(bs_vk_ctx *c) { return c->profiling ? bs_vk_submit(c) : submit_main(c); }

static const char *kernel_name(int k) {
    static const char *names[BS_VK_K_COUNT] = {
        [BS_VK_K_COPY] = "copy", [BS_VK_K_RMSNORM] = "rmsnorm", [BS_VK_K_QUANT_Q8] = "quantize",
        [BS_VK_K_MV_Q1] = "mv q1_0", [BS_VK_K_MV_Q2_128] = "mv q2_0", [BS_VK_K_MV_Q2_64] = "mv q2_0_g64",
        [BS_VK_K_MV_Q8] = "mv q8_0", [BS_VK_K_MV_F32] = "mv f32", [BS_VK_K_MV_Q4_1] = "mv q4_1",
        [BS_VK_K_ROWS_Q1] = "embed", [BS_VK_K_ROWS_Q2_128] = "embed", [BS_VK_K_ROWS_Q2_64] = "embed",
        [BS_VK_K_ROWS_Q8] = "embed", [BS_VK_K_ROWS_F32] = "embed", [BS_VK_K_ROWS_Q4_1] = "embed",
        [BS_VK_K_NORM] = "norm", [BS_VK_K_EW] = "elementwise", [BS_VK_K_CONV] = "gdn conv",
        [BS_VK_K_DELTA] = "gdn delta rule", [BS_VK_K_ROPE] = "rope", [BS_VK_K_KV_STORE] = "kv store",
        [BS_VK_K_ATTN] = "attention", [BS_VK_K_ACT_ROUND] = "act round", [BS_VK_K_GLU_Q1] = "glu q1_0",
        [BS_VK_K_GLU_Q2_128] = "glu q2_0", [BS_VK_K_GLU_Q2_64] = "glu q2_0_g64", [BS_VK_K_GLU_Q8] = "glu q8_0",
        [BS_VK_K_GLU_Q4_1] = "glu q4_1", [BS_VK_K_MV_F32_LORA] = "lora B", [BS_VK_K_ATTN_NC] = "drafter attention",
        [BS_VK_K_ARGMAX] = "argmax", [BS_VK_K_TOPK] = "top-k", [BS_VK_K_VIT_LN] = "vision layer norm", [BS_VK_K_VIT_EW] = "vision element-wise", [BS_VK_K_FMA_PROBE] = "fma probe",
        [BS_VK_K_GLUQ_Q1] = "glu q1_0", [BS_VK_K_GLUQ_Q2_128] = "glu q2_0", [BS_VK_K_GLUQ_Q2_64] = "glu q2_0_g64",
        [BS_VK_K_GLUQ_Q8] = "glu q8_0", [BS_VK_K_GLUQ_Q4_1] = "glu q4_1", [BS_VK_K_QK] = "q/k norm+rope+store",
        [BS_VK_K_MVN_Q1] = "mv+norm q1_0", [BS_VK_K_MVN_Q2_128] = "mv+norm q2_0", [BS_VK_K_MVN_Q2_64] = "mv+norm q2_0_g64",
        [BS_VK_K_MVN_Q8] = "mv+norm q8_0", [BS_VK_K_MVN_Q4_1] = "mv+norm q4_1",
        [BS_VK_K_MVC_Q1] = "mv+conv q1_0", [BS_VK_K_MVC_Q2_128] = "mv+conv q2_0", [BS_VK_K_MVC_Q2_64] = "mv+conv q2_0_g64",
        [BS_VK_K_MVC_Q8] = "mv+conv q8_0", [BS_VK_K_MVC_Q4_1] = "mv+conv q4_1", [BS_VK_K_DELTA_NORM] = "gdn delta+norm",
        [BS_VK_K_ATTN_SPLIT] = "attention split", [BS_VK_K_MM_Q1] = "mm q1_0", [BS_VK_K_MM_Q2_128] = "mm q2_0",
        [BS_VK_K_MM_Q2_64] = "mm q2_0_g64", [BS_VK_K_MMG_Q1] = "mm glu q1_0", [BS_VK_K_MMG_Q2_128] = "mm glu q2_0",
        [BS_VK_K_MMG_Q2_64] = "mm glu q2_0_g64", [BS_VK_K_MMGQ_Q1] = "mm glu q1_0", [BS_VK_K_MMGQ_Q2_128] = "mm glu q2_0",
        [BS_VK_K_MMGQ_Q2_64] = "mm glu q2_0_g64", [BS_VK_K_CONV_B] = "gdn conv", [BS_VK_K_DELTA_B] = "gdn delta rule",
        [BS_VK_K_ATTN_SPLIT_B] = "attention split", [BS_VK_K_ATTN_NC_SPLIT] = "drafter attention split",
        [BS_VK_K_DRAFT_DRAW] = "draft draw", [BS_VK_K_MM_Q8] = "mm q8_0", [BS_VK_K_MM_Q4_1] = "mm q4_1",
        [BS_VK_K_ROTATE] = "rotate", [BS_VK_K_MV_F32N] = "mv f32 narrow",
        [BS_VK_K_NORM_ROT] = "norm+rotate", [BS_VK_K_MV_F32N_LORA] = "lora A",
        [BS_VK_K_MVNR_Q1] = "mv+norm+rotate q1_0", [BS_VK_K_MVNR_Q2_128] = "mv+norm+rotate q2_0",
        [BS_VK_K_MVNR_Q2_64] = "mv+norm+rotate q2_0_g64", [BS_VK_K_MVNR_Q8] = "mv+norm+rotate q8_0",
        [BS_VK_K_MVNR_Q4_1] = "mv+norm+rotate q4_1", [BS_VK_K_GLUR_Q1] = "glu+rotate q1_0",
        [BS_VK_K_GLUR_Q2_128] = "glu+rotate q2_0", [BS_VK_K_GLUR_Q2_64] = "glu+rotate q2_0_g64",
        [BS_VK_K_GLUR_Q8] = "glu+rotate q8_0", [BS_VK_K_GLUR_Q4_1] = "glu+rotate q4_1",
        [BS_VK_K_DELTA_NORM_ROT] = "gdn delta+norm+rotate"};
    return names[k] ? names[k] : "?";
}

int bs_vk_kernel_run(bs_vk_ctx *c, const char *kernel, void *const *data, const size_t *bytes, int n_bind, const void *push,
                     size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    /* "shader": its pipeline without specialization constants; "shader/name": the variant of
       that profile name (tests: "mv_f32n/lora A") */
    const char *slash = strchr(kernel, '/');
    const size_t sl = slash ? (size_t)(slash - kernel) : strlen(kernel);
    int k = -1;
    for (int i = 0; i < BS_VK_K_COUNT && k < 0; i++)
        if (KERNELS[i].shader && strlen(KERNELS[i].shader) == sl && !strncmp(KERNELS[i].shader, kernel, sl) &&
            (slash ? !strcmp(kernel_name(i), slash + 1) : !KERNELS[i].n_spec))
            k = i;
    if (k < 0) return bs_error("Vulkan: no step kernel %s", kernel);
    if (n_bind != KERNELS[k].n_bind || push_bytes != KERNELS[k].push_bytes)
        return bs_error("Vulkan: %s takes %d buffers and %u push bytes", kernel, KERNELS[k].n_bind, KERNELS[k].push_bytes);
    bs_vk_buf b[BS_VK_PIPE_MAX_BIND] = {{0}};
    const bs_vk_buf *bp[BS_VK_PIPE_MAX_BIND] = {0};
    int rc = 0;
    for (int i = 0; i < n_bind && !rc; i++) {
        bp[i] = &b[i];
        rc = bs_vk_buf_new(c, &b[i], bytes[i], true);
        if (!rc && b[i].map) memset(b[i].map, 0, b[i].size);
        if (!rc && data[i]) rc = bs_vk_buf_write(c, &b[i], 0, data[i], bytes[i]);
    }
    if (!rc) rc = bs_vk_begin(c);
    if (!rc) {
        rc = bs_vk_dispatch(c, k, bp, push, gx, gy, gz);
        rc = bs_vk_submit(c) || rc;
    }
    for (int i = 0; i < n_bind && !rc; i++)
        if (data[i]) rc = bs_vk_buf_read(c, &b[i], 0, data[i], bytes[i]);
    for (int i = 0; i < n_bind; i++) bs_vk_buf_free(c, &b[i]);
    return rc ? -1 : 0;
}
