/* vk_exec.c: buffers, the pipelines of the embedded shaders, and one command buffer that is
 * recorded, submitted and waited for. Device-local memory is filled through a host-visible
 * staging buffer reused in chunks; where device memory is host visible (integrated GPUs,
 * lavapipe) buffers are mapped and written directly. */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <stdio.h>
#include <string.h>

enum { STAGING_BYTES = 16 << 20, MAX_SETS = 4096 };

static int mem_type(const bs_vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < c->memprops.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (c->memprops.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

int bs_vk_buf_new(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize size, bool host) {
    memset(b, 0, sizeof *b);
    if (size == 0) size = 16;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (c->fn->vkCreateBuffer(c->dev, &bi, NULL, &b->buf) != VK_SUCCESS)
        return bs_error("Vulkan: cannot create a buffer of %llu bytes", (unsigned long long)size);
    VkMemoryRequirements rq;
    c->fn->vkGetBufferMemoryRequirements(c->dev, b->buf, &rq);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int t = -1;
    if (host) {
        t = mem_type(c, rq.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        if (t < 0) t = mem_type(c, rq.memoryTypeBits, hv);
    } else {
        /* device-local, mapped when it is host visible as well */
        t = mem_type(c, rq.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | hv);
        if (t < 0) t = mem_type(c, rq.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        if (t < 0) t = mem_type(c, rq.memoryTypeBits, hv);
    }
    if (t < 0) {
        bs_vk_buf_free(c, b);
        return bs_error("Vulkan: no memory type for a buffer");
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = rq.size,
                               .memoryTypeIndex = (uint32_t)t};
    if (c->fn->vkAllocateMemory(c->dev, &ai, NULL, &b->mem) != VK_SUCCESS) {
        bs_vk_buf_free(c, b);
        return bs_error("Vulkan: out of device memory (%llu bytes)", (unsigned long long)size);
    }
    c->fn->vkBindBufferMemory(c->dev, b->buf, b->mem, 0);
    b->size = size;
    if ((c->memprops.memoryTypes[t].propertyFlags & hv) == hv &&
        c->fn->vkMapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
        b->map = NULL;
    return 0;
}

void bs_vk_buf_free(bs_vk_ctx *c, bs_vk_buf *b) {
    if (b->map) c->fn->vkUnmapMemory(c->dev, b->mem);
    if (b->buf) c->fn->vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) c->fn->vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

/* Copy through the staging buffer, one chunk per submit (to_dev: host -> b, else b -> host). */
static int staged(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *host, size_t n, bool to_dev) {
    if (!c->staging.buf && bs_vk_buf_new(c, &c->staging, STAGING_BYTES, true)) return -1;
    if (!c->staging.map) return bs_error("Vulkan: the staging buffer is not host visible");
    for (size_t done = 0; done < n;) {
        const size_t k = BS_MIN(n - done, (size_t)STAGING_BYTES);
        if (to_dev) memcpy(c->staging.map, (const char *)host + done, k);
        if (bs_vk_begin(c)) return -1;
        VkBufferCopy r = {.srcOffset = to_dev ? 0 : off + done, .dstOffset = to_dev ? off + done : 0, .size = k};
        c->fn->vkCmdCopyBuffer(c->cmd, to_dev ? c->staging.buf : b->buf, to_dev ? b->buf : c->staging.buf, 1, &r);
        if (bs_vk_submit(c)) return -1;
        if (!to_dev) memcpy((char *)host + done, c->staging.map, k);
        done += k;
    }
    return 0;
}

int bs_vk_buf_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: write past a buffer's end");
    if (b->map) { memcpy((char *)b->map + off, src, n); return 0; }
    return staged(c, b, off, (void *)src, n, true);
}

int bs_vk_buf_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: read past a buffer's end");
    if (b->map) { memcpy(dst, (const char *)b->map + off, n); return 0; }
    return staged(c, b, off, dst, n, false);
}

/* --- pipelines ------------------------------------------------------------------------------- */
typedef struct kernel_def {
    const char *shader;
    int n_bind;
    uint32_t push_bytes;
    int n_spec;
    uint32_t spec[2];
} kernel_def;

static const kernel_def KERNELS[BS_VK_K_COUNT] = {
    [BS_VK_K_COPY] = {"copy", 2, 4, 0, {0}},
    [BS_VK_K_RMSNORM] = {"rmsnorm", 3, 12, 0, {0}},
    [BS_VK_K_QUANT_Q8] = {"quant_q8", 4, 8, 0, {0}},
    /* mv_q: spec constants (bits per weight, 32-element sub-blocks per scale) */
    [BS_VK_K_MV_Q1] = {"mv_q", 6, 24, 2, {1, 4}},
    [BS_VK_K_MV_Q2_128] = {"mv_q", 6, 24, 2, {2, 4}},
    [BS_VK_K_MV_Q2_64] = {"mv_q", 6, 24, 2, {2, 2}},
    [BS_VK_K_MV_Q8] = {"mv_q", 6, 24, 2, {8, 1}},
    [BS_VK_K_MV_F32] = {"mv_f32", 3, 24, 0, {0}},
    [BS_VK_K_MV_Q4_1] = {"mv_q", 6, 24, 2, {4, 1}},
    [BS_VK_K_ROWS_Q4_1] = {"get_rows", 4, 16, 2, {4, 1}},
    [BS_VK_K_ROWS_Q1] = {"get_rows", 4, 16, 2, {1, 4}},
    [BS_VK_K_ROWS_Q2_128] = {"get_rows", 4, 16, 2, {2, 4}},
    [BS_VK_K_ROWS_Q2_64] = {"get_rows", 4, 16, 2, {2, 2}},
    [BS_VK_K_ROWS_Q8] = {"get_rows", 4, 16, 2, {8, 1}},
    [BS_VK_K_ROWS_F32] = {"get_rows", 4, 16, 2, {32, 1}},
    [BS_VK_K_NORM] = {"norm", 7, 40, 0, {0}},
    [BS_VK_K_EW] = {"ew", 3, 16, 0, {0}},
    [BS_VK_K_CONV] = {"conv", 4, 12, 0, {0}},
    [BS_VK_K_DELTA] = {"delta", 5, 28, 0, {0}},
    [BS_VK_K_ROPE] = {"rope", 2, 16, 0, {0}},
    [BS_VK_K_KV_STORE] = {"kv_store", 5, 8, 0, {0}},
    [BS_VK_K_ATTN] = {"attn", 6, 24, 0, {0}},
    [BS_VK_K_ACT_ROUND] = {"act_round", 2, 8, 0, {0}},
    [BS_VK_K_ATTN_NC] = {"attn_nc", 5, 28, 0, {0}},
};

static int pipe_new(bs_vk_ctx *c, bs_vk_pipe *p, const kernel_def *k) {
    const bs_vk_spirv *sp = bs_vk_shader(c->dp4a && !strcmp(k->shader, "mv_q") ? "mv_q_dp4a" : k->shader);
    if (!sp) return bs_error("Vulkan: shader %s is not embedded", k->shader);
    VkShaderModuleCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = sp->bytes, .pCode = sp->code};
    if (c->fn->vkCreateShaderModule(c->dev, &si, NULL, &p->mod) != VK_SUCCESS) return bs_error("Vulkan: shader %s rejected", k->shader);
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
    VkSpecializationMapEntry me[2] = {{0, 0, 4}, {1, 4, 4}};
    VkSpecializationInfo spec = {.mapEntryCount = (uint32_t)k->n_spec, .pMapEntries = me, .dataSize = 4u * (uint32_t)k->n_spec,
                                 .pData = k->spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = p->mod, .pName = "main", .pSpecializationInfo = k->n_spec ? &spec : NULL},
        .layout = p->layout};
    if (c->fn->vkCreateComputePipelines(c->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p->pipe) != VK_SUCCESS)
        return bs_error("Vulkan: cannot build the %s pipeline", k->shader);
    p->n_bind = k->n_bind;
    p->push_bytes = k->push_bytes;
    return 0;
}

int bs_vk_pool_new(bs_vk_ctx *c, VkDescriptorPool *pool) {
    VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = MAX_SETS * BS_VK_PIPE_MAX_BIND};
    VkDescriptorPoolCreateInfo dp = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = MAX_SETS,
                                     .poolSizeCount = 1, .pPoolSizes = &ps};
    if (c->fn->vkCreateDescriptorPool(c->dev, &dp, NULL, pool) != VK_SUCCESS) return bs_error("Vulkan: descriptor pool");
    return 0;
}

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
    if (bs_vk_pool_new(c, &c->dpool)) return -1;
    c->main_cmd = c->cmd;
    c->main_dpool = c->dpool;
    c->profiling = bs_env_flag("BITSPARK_PROFILE") && c->info.timestamps;
    if (c->profiling) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = MAX_SETS + 1};
        if (fn->vkCreateQueryPool(c->dev, &qi, NULL, &c->qpool) != VK_SUCCESS) c->profiling = false;
    }
    for (int k = 0; k < BS_VK_K_COUNT; k++)
        if (pipe_new(c, &c->pipes[k], &KERNELS[k])) return -1;
    return 0;
}

void bs_vk_pipes_free(bs_vk_ctx *c) {
    const bs_vk_fns *fn = c->fn;
    bs_vk_buf_free(c, &c->staging);
    for (int k = 0; k < BS_VK_K_COUNT; k++) {
        bs_vk_pipe *p = &c->pipes[k];
        if (p->pipe) fn->vkDestroyPipeline(c->dev, p->pipe, NULL);
        if (p->layout) fn->vkDestroyPipelineLayout(c->dev, p->layout, NULL);
        if (p->dsl) fn->vkDestroyDescriptorSetLayout(c->dev, p->dsl, NULL);
        if (p->mod) fn->vkDestroyShaderModule(c->dev, p->mod, NULL);
    }
    if (c->qpool) fn->vkDestroyQueryPool(c->dev, c->qpool, NULL);
    if (c->main_dpool) fn->vkDestroyDescriptorPool(c->dev, c->main_dpool, NULL);
    else if (c->dpool) fn->vkDestroyDescriptorPool(c->dev, c->dpool, NULL);
    if (c->fence) fn->vkDestroyFence(c->dev, c->fence, NULL);
    if (c->cpool) fn->vkDestroyCommandPool(c->dev, c->cpool, NULL);
}

/* --- recording ------------------------------------------------------------------------------- */
int bs_vk_begin(bs_vk_ctx *c) {
    if (c->recording) return bs_error("Vulkan: command buffer already recording");
    c->fn->vkResetCommandBuffer(c->cmd, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (c->fn->vkBeginCommandBuffer(c->cmd, &bi) != VK_SUCCESS) return bs_error("Vulkan: vkBeginCommandBuffer failed");
    c->recording = true;
    if (c->profiling) {
        c->fn->vkCmdResetQueryPool(c->cmd, c->qpool, 0, MAX_SETS + 1);
        c->fn->vkCmdWriteTimestamp(c->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c->qpool, 0);
        c->n_queries = 1;
    }
    return 0;
}

int bs_vk_record_into(bs_vk_ctx *c, VkCommandBuffer cmd, VkDescriptorPool pool) {
    if (c->recording) return bs_error("Vulkan: command buffer already recording");
    c->cmd = cmd;
    c->dpool = pool;
    c->dsets_used = 0;
    c->caching = true;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (c->fn->vkBeginCommandBuffer(c->cmd, &bi) != VK_SUCCESS) {
        c->cmd = c->main_cmd;
        c->dpool = c->main_dpool;
        c->caching = false;
        return bs_error("Vulkan: vkBeginCommandBuffer failed");
    }
    c->recording = true;
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
    c->dpool = c->main_dpool;
    c->dsets_used = 0;
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: vkEndCommandBuffer failed");
}

int bs_vk_submit_cmd(bs_vk_ctx *c, VkCommandBuffer cmd) {
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
    if (c->fn->vkQueueSubmit(c->queue, 1, &si, c->fence) != VK_SUCCESS) return bs_error("Vulkan: vkQueueSubmit failed");
    const VkResult r = c->fn->vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    c->fn->vkResetFences(c->dev, 1, &c->fence);
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: the device did not finish (VkResult %d)", (int)r);
}

static const char *kernel_name(int k);

void bs_vk_profile_print(bs_vk_ctx *c) {
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
    uint64_t ts[MAX_SETS + 1];
    if (c->fn->vkGetQueryPoolResults(c->dev, c->qpool, 0, (uint32_t)c->n_queries, sizeof ts, ts, sizeof ts[0],
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    for (int i = 1; i < c->n_queries; i++) {
        const int k = c->q_kernel[i];
        c->prof_ms[k] += (double)(ts[i] - ts[i - 1]) * c->info.timestamp_ns * 1e-6;
        c->prof_n[k]++;
    }
    c->n_queries = 0;
}

int bs_vk_dispatch(bs_vk_ctx *c, int k, const bs_vk_buf *const *bufs, const void *push, uint32_t gx, uint32_t gy,
                   uint32_t gz) {
    const bs_vk_pipe *p = &c->pipes[k];
    if (c->dsets_used >= MAX_SETS) return bs_error("Vulkan: too many dispatches in one submission");
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = c->dpool,
                                      .descriptorSetCount = 1, .pSetLayouts = &p->dsl};
    VkDescriptorSet set;
    if (c->fn->vkAllocateDescriptorSets(c->dev, &ai, &set) != VK_SUCCESS) return bs_error("Vulkan: descriptor sets exhausted");
    c->dsets_used++;
    VkDescriptorBufferInfo bi[BS_VK_PIPE_MAX_BIND];
    VkWriteDescriptorSet w[BS_VK_PIPE_MAX_BIND];
    for (int i = 0; i < p->n_bind; i++) {
        bi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i]->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = set, .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    c->fn->vkUpdateDescriptorSets(c->dev, (uint32_t)p->n_bind, w, 0, NULL);
    c->fn->vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipe);
    c->fn->vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    c->fn->vkCmdPushConstants(c->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    c->fn->vkCmdDispatch(c->cmd, gx, gy, gz);
    if (c->profiling && !c->caching && c->n_queries > 0 && c->n_queries <= MAX_SETS) {
        c->fn->vkCmdWriteTimestamp(c->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->qpool, (uint32_t)c->n_queries);
        c->q_kernel[c->n_queries++] = k;
    }
    return 0;
}

void bs_vk_barrier(bs_vk_ctx *c) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT};
    c->fn->vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

int bs_vk_submit(bs_vk_ctx *c) {
    if (!c->recording) return bs_error("Vulkan: nothing recorded");
    c->recording = false;
    /* results go back to the host through mapped memory */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    c->fn->vkCmdPipelineBarrier(c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    int rc = 0;
    if (c->fn->vkEndCommandBuffer(c->cmd) != VK_SUCCESS) rc = bs_error("Vulkan: vkEndCommandBuffer failed");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &c->cmd};
    if (!rc && c->fn->vkQueueSubmit(c->queue, 1, &si, c->fence) != VK_SUCCESS) rc = bs_error("Vulkan: vkQueueSubmit failed");
    if (!rc) {
        VkResult r = c->fn->vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
        if (r != VK_SUCCESS) rc = bs_error("Vulkan: the device did not finish (VkResult %d)", (int)r);
        c->fn->vkResetFences(c->dev, 1, &c->fence);
    }
    c->fn->vkResetDescriptorPool(c->dev, c->dpool, 0);
    c->dsets_used = 0;
    if (!rc) profile_collect(c);
    return rc;
}

static const char *kernel_name(int k) {
    static const char *names[BS_VK_K_COUNT] = {
        [BS_VK_K_COPY] = "copy", [BS_VK_K_RMSNORM] = "rmsnorm", [BS_VK_K_QUANT_Q8] = "quantize",
        [BS_VK_K_MV_Q1] = "mv q1_0", [BS_VK_K_MV_Q2_128] = "mv q2_0", [BS_VK_K_MV_Q2_64] = "mv q2_0_g64",
        [BS_VK_K_MV_Q8] = "mv q8_0", [BS_VK_K_MV_F32] = "mv f32", [BS_VK_K_MV_Q4_1] = "mv q4_1",
        [BS_VK_K_ROWS_Q1] = "embed", [BS_VK_K_ROWS_Q2_128] = "embed", [BS_VK_K_ROWS_Q2_64] = "embed",
        [BS_VK_K_ROWS_Q8] = "embed", [BS_VK_K_ROWS_F32] = "embed", [BS_VK_K_ROWS_Q4_1] = "embed",
        [BS_VK_K_NORM] = "norm", [BS_VK_K_EW] = "elementwise", [BS_VK_K_CONV] = "gdn conv",
        [BS_VK_K_DELTA] = "gdn delta rule", [BS_VK_K_ROPE] = "rope", [BS_VK_K_KV_STORE] = "kv store",
        [BS_VK_K_ATTN] = "attention", [BS_VK_K_ACT_ROUND] = "act round",
        [BS_VK_K_ATTN_NC] = "drafter attention"};
    return names[k] ? names[k] : "?";
}

int bs_vk_kernel_run(bs_vk_ctx *c, const char *kernel, void *const *data, const size_t *bytes, int n_bind, const void *push,
                     size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    int k = -1;
    for (int i = 0; i < BS_VK_K_COUNT && k < 0; i++)
        if (!KERNELS[i].n_spec && !strcmp(KERNELS[i].shader, kernel)) k = i;
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
