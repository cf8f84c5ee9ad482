/* vk_memory.c: buffers, and host <-> device-local copies through a ring of host-visible chunks.
 *
 * Buffers are device-local and mapped where that memory is host visible (integrated GPUs,
 * lavapipe); host buffers (host=true) are host visible, cached where the device offers it.
 *
 * Loading a 27B model writes ~4 GB to device-local memory. Copying each chunk and waiting for
 * it would leave the host idle while the GPU copies and the GPU idle while the host fills the
 * next chunk; with a ring, the host fills chunk i+1 while the GPU copies chunk i, and a write
 * returns as soon as its bytes are in the ring (the caller may free its source at once). A
 * chunk is reused only after its fence has signalled. Everything still in flight is waited for
 * before any other submission, read or buffer release (bs_vk_staging_flush), and each copy ends
 * with a barrier, so later work sees the data whatever the submission order.
 *
 * Reads go through the ring too, one chunk at a time, synchronously. On devices whose memory is
 * host visible (integrated GPUs, lavapipe) buffers are mapped and none of this runs, unless
 * BITSPARK_VK_STAGED=1 (tests: take this path on lavapipe; BITSPARK_VK_STAGING_KB sets the
 * chunk size, to exercise many chunks with small buffers). */
#include "vulkan/vk_internal.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

enum { CHUNK_DEFAULT = 8 << 20 };

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
    if ((c->memprops.memoryTypes[t].propertyFlags & hv) == hv && (host || !c->staged) &&
        c->fn->vkMapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
        b->map = NULL;
    return 0;
}

int bs_vk_upload_vec(bs_vk_ctx *c, bs_vk_buf *b, const float *v, size_t n) {
    if (bs_vk_buf_new(c, b, 4 * n, false)) return -1;
    return v ? bs_vk_buf_write(c, b, 0, v, 4 * n) : 0;
}

void bs_vk_buf_free(bs_vk_ctx *c, bs_vk_buf *b) {
    if (b->buf && b != &c->stage.buf) bs_vk_staging_flush(c);   /* no copy into it may be in flight */
    if (b->map) c->fn->vkUnmapMemory(c->dev, b->mem);
    if (b->buf) c->fn->vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) c->fn->vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

int bs_vk_buf_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: write past a buffer's end");
    if (b->map) { memcpy((char *)b->map + off, src, n); return 0; }
    return bs_vk_staging_write(c, b, off, src, n);
}

int bs_vk_buf_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: read past a buffer's end");
    if (b->map) { memcpy(dst, (const char *)b->map + off, n); return 0; }
    return bs_vk_staging_read(c, b, off, dst, n);
}


static int ring_init(bs_vk_ctx *c) {
    bs_vk_staging *r = &c->stage;
    if (r->buf.buf) return 0;
    const char *e = getenv("BITSPARK_VK_STAGING_KB");
    const long kb = e ? strtol(e, NULL, 10) : 0;
    r->chunk = kb > 0 && kb <= (1 << 20) ? (size_t)kb << 10 : (size_t)CHUNK_DEFAULT;
    if (bs_vk_buf_new(c, &r->buf, (VkDeviceSize)r->chunk * BS_VK_RING, true)) return -1;
    if (!r->buf.map) {
        bs_vk_buf_free(c, &r->buf);
        return bs_error("Vulkan: the staging buffer is not host visible");
    }
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->cpool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = BS_VK_RING};
    if (c->fn->vkAllocateCommandBuffers(c->dev, &ai, r->cmd) != VK_SUCCESS) {
        memset(r->cmd, 0, sizeof r->cmd);
        bs_vk_buf_free(c, &r->buf);
        return bs_error("Vulkan: cannot allocate the staging command buffers");
    }
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    for (int i = 0; i < BS_VK_RING; i++)
        if (c->fn->vkCreateFence(c->dev, &fi, NULL, &r->fence[i]) != VK_SUCCESS) {
            bs_vk_staging_free(c);
            return bs_error("Vulkan: cannot create the staging fences");
        }
    return 0;
}

/* Wait for slot i's copy, if one is in flight. */
static int slot_wait(bs_vk_ctx *c, int i) {
    bs_vk_staging *r = &c->stage;
    if (!r->busy[i]) return 0;
    r->busy[i] = false;
    const VkResult v = c->fn->vkWaitForFences(c->dev, 1, &r->fence[i], VK_TRUE, UINT64_MAX);
    c->fn->vkResetFences(c->dev, 1, &r->fence[i]);
    return v == VK_SUCCESS ? 0 : bs_error("Vulkan: a staged copy did not finish (VkResult %d)", (int)v);
}

int bs_vk_staging_flush(bs_vk_ctx *c) {
    int rc = 0;
    for (int i = 0; i < BS_VK_RING; i++) rc |= slot_wait(c, i);
    return rc ? -1 : 0;
}

/* Record and submit one copy in slot i (from the ring to b, or from b to the ring). */
static int slot_copy(bs_vk_ctx *c, int i, bs_vk_buf *b, VkDeviceSize off, size_t n, bool to_dev) {
    bs_vk_staging *r = &c->stage;
    const bs_vk_fns *fn = c->fn;
    VkCommandBuffer cmd = r->cmd[i];
    fn->vkResetCommandBuffer(cmd, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (fn->vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS) return bs_error("Vulkan: vkBeginCommandBuffer failed");
    const VkDeviceSize ring_off = (VkDeviceSize)i * r->chunk;
    VkBufferCopy reg = {.srcOffset = to_dev ? ring_off : off, .dstOffset = to_dev ? off : ring_off, .size = n};
    fn->vkCmdCopyBuffer(cmd, to_dev ? r->buf.buf : b->buf, to_dev ? b->buf : r->buf.buf, 1, &reg);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                           VK_ACCESS_HOST_READ_BIT};
    fn->vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                             0, 1, &mb, 0, NULL, 0, NULL);
    if (fn->vkEndCommandBuffer(cmd) != VK_SUCCESS) return bs_error("Vulkan: vkEndCommandBuffer failed");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
    if (fn->vkQueueSubmit(c->queue, 1, &si, r->fence[i]) != VK_SUCCESS) return bs_error("Vulkan: vkQueueSubmit failed");
    r->busy[i] = true;
    return 0;
}

int bs_vk_staging_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n) {
    if (ring_init(c)) return -1;
    bs_vk_staging *r = &c->stage;
    for (size_t done = 0; done < n;) {
        const int i = r->next;
        r->next = (r->next + 1) % BS_VK_RING;
        if (slot_wait(c, i)) return -1;
        const size_t k = BS_MIN(n - done, r->chunk);
        memcpy((char *)r->buf.map + (size_t)i * r->chunk, (const char *)src + done, k);
        if (slot_copy(c, i, b, off + done, k, true)) return -1;
        done += k;
    }
    return 0;
}

int bs_vk_staging_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n) {
    if (ring_init(c) || bs_vk_staging_flush(c)) return -1;
    bs_vk_staging *r = &c->stage;
    for (size_t done = 0; done < n;) {
        const size_t k = BS_MIN(n - done, r->chunk);
        if (slot_copy(c, 0, b, off + done, k, false) || slot_wait(c, 0)) return -1;
        memcpy((char *)dst + done, r->buf.map, k);
        done += k;
    }
    return 0;
}

void bs_vk_staging_free(bs_vk_ctx *c) {
    bs_vk_staging *r = &c->stage;
    bs_vk_staging_flush(c);
    for (int i = 0; i < BS_VK_RING; i++)
        if (r->fence[i]) c->fn->vkDestroyFence(c->dev, r->fence[i], NULL);
    if (r->cmd[0]) c->fn->vkFreeCommandBuffers(c->dev, c->cpool, BS_VK_RING, r->cmd);
    bs_vk_buf_free(c, &r->buf);
    memset(r, 0, sizeof *r);
}
