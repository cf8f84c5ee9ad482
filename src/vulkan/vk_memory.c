/* vk_memory.c: buffers, and host <-> device-local copies through a ring of host-visible chunks.
 *
 * Device buffers (weights, KV cache, recurrent state, activations) take device-local memory.
 * On a discrete GPU that is memory the host cannot see: host-visible device memory is a small
 * BAR window there (about 256 MiB on most cards), or, with resizable BAR, VRAM that the host
 * reads uncached over PCIe; uploads and read-backs go through the staging ring. On unified
 * memory (integrated GPUs, CPU devices such as lavapipe) device-local memory is host visible and
 * mapped. When a heap is full the next type in bs_vk_mem_order's list takes the buffer. Host
 * buffers (host=true: step parameters, logits, taps, the ring) are host visible, cached where
 * the device offers it. Every allocation is counted against its heap (bs_vk_heap_free).
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_DEFAULT = 8 << 20 };

/* Flags a buffer's memory must not have: protected and lazily allocated memory, and AMD's
 * device-coherent / uncached types (meant for other uses, slower for these). */
static const uint32_t AVOID = VK_MEMORY_PROPERTY_PROTECTED_BIT | VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT | 0x40u | 0x80u;

/* A type's rank for a buffer (lower first; -1: never). */
static int rank(const bs_vk_device_info *d, uint32_t f, bool host) {
    const uint32_t DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                   HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    if (f & AVOID) return -1;
    if (host) {
        /* host buffers are mapped for their life and never flushed: coherent; cached reads
         * (logits, taps, read-backs); on a discrete GPU system memory before the BAR window */
        if ((f & (HV | HC)) != (HV | HC)) return -1;
        return ((f & CA) ? 0 : 2) + ((f & DL) && !d->unified ? 1 : 0);
    }
    if (d->unified) {
        /* the device's memory is the host's: host-visible device memory mapped, no copies */
        if ((f & (DL | HV | HC)) == (DL | HV | HC)) return 0;
        if (f & DL) return 1;
        return (f & (HV | HC)) == (HV | HC) ? 2 : -1;
    }
    /* discrete: VRAM that the host cannot see (the host-visible part is a small BAR window, or
     * uncached PCIe reads with resizable BAR), then any device-local type, then system memory */
    if ((f & DL) && !(f & HV)) return 0;
    if (f & DL) return 1;
    return (f & HV) ? 2 : -1;
}

int bs_vk_mem_order(const bs_vk_device_info *d, bool host, int *types) {
    int n = 0;
    for (int r = 0; r <= 3; r++)
        for (int t = 0; t < d->n_types; t++) {
            if (rank(d, d->types[t].flags, host) != r) continue;
            /* the larger heap first among types of one rank */
            int k = n++;
            for (; k > 0 && rank(d, d->types[types[k - 1]].flags, host) == r &&
                   d->heaps[d->types[types[k - 1]].heap].size < d->heaps[d->types[t].heap].size; k--)
                types[k] = types[k - 1];
            types[k] = t;
        }
    return n;
}

uint64_t bs_vk_bytes_held(const bs_vk_ctx *c) {
    uint64_t t = 0;
    for (int h = 0; h < c->info.n_heaps; h++) t += c->heap_used[h];
    return t;
}

uint64_t bs_vk_heap_free(bs_vk_ctx *c, int h) {
    const uint64_t size = c->info.heaps[h].size, used = c->heap_used[h];
    if (!c->info.memory_budget) return size > used ? size - used : 0;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bud = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &bud};
    c->fn->vkGetPhysicalDeviceMemoryProperties2(c->phys, &m2);
    const uint64_t budget = BS_MIN(bud.heapBudget[h], size);
    return budget > bud.heapUsage[h] ? budget - bud.heapUsage[h] : 0;
}

static void human(uint64_t b, char *out, size_t n) {
    if (b >= (1ull << 30)) snprintf(out, n, "%.1f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(out, n, "%.1f MiB", b / 1048576.0);
    else snprintf(out, n, "%.1f KiB", b / 1024.0);
}

/* The heaps device buffers may go to: those of the device-local types (and, on unified
 * memory, the host-visible ones: the same memory). */
static int device_heaps(const bs_vk_device_info *d, bool *in) {
    int order[32], n = bs_vk_mem_order(d, false, order), k = 0;
    memset(in, 0, 16 * sizeof *in);
    for (int i = 0; i < n; i++) {
        const int h = d->types[order[i]].heap;
        if (!in[h] && (d->unified || (d->types[order[i]].flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))) in[h] = true, k++;
    }
    return k;
}

int bs_vk_mem_check(bs_vk_ctx *c, uint64_t bytes, const char *what) {
    /* a CPU device's heap is the host's memory, its size a nominal figure (lavapipe says 2 GiB
     * whatever the machine has, and allocates past it): the allocations themselves decide */
    if (c->info.type == BS_VK_CPU && !c->info.fake_memory) return 0;
    bool in[16];
    device_heaps(&c->info, in);
    uint64_t free_sum = 0;
    char names[128] = "", num[32], fs[32], need[32];
    int k = 0;
    for (int h = 0; h < c->info.n_heaps; h++) {
        if (!in[h]) continue;
        free_sum += bs_vk_heap_free(c, h);
        snprintf(num, sizeof num, "%s%d", k ? (k == 1 ? " and " : ", ") : "", h);
        strncat(names, num, sizeof names - strlen(names) - 1);
        k++;
    }
    if (bytes <= free_sum) return 0;
    human(bytes, need, sizeof need);
    human(free_sum, fs, sizeof fs);
    if (!k) return bs_error("Vulkan: %s needs %s of device memory, and the device has no heap for it", what, need);
    return bs_error("Vulkan: %s needs %s of device memory, heap%s %s %s %s free", what, need, k > 1 ? "s" : "", names,
                    k > 1 ? "have" : "has", fs);
}

static uint64_t tensor_bytes(const bs_vk_tensor *t) { return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne1 : 0; }

uint64_t bs_vk_desc_bytes(const bs_vk_net_desc *d) {
    uint64_t b = tensor_bytes(&d->tok_embd) + tensor_bytes(&d->output);
    for (int i = 0; i < d->n_layer; i++) {
        const bs_vk_layer_desc *L = &d->layers[i];
        const bs_vk_tensor *ts[] = {&L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->qkv, &L->gate, &L->beta,
                                    &L->alpha, &L->ssm_out, &L->wq, &L->wk, &L->wv, &L->wo};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) b += tensor_bytes(ts[k]);
    }
    return b;
}

void bs_vk_mem_report(bs_vk_ctx *c, const char *what) {
    char line[512];
    size_t w = (size_t)snprintf(line, sizeof line, "device memory: %s loaded:", what);
    for (int h = 0, k = 0; h < c->info.n_heaps && w < sizeof line; h++) {
        if (!c->heap_used[h]) continue;
        char u[32], f[32];
        human(c->heap_used[h], u, sizeof u);
        human(bs_vk_heap_free(c, h), f, sizeof f);
        w += (size_t)snprintf(line + w, sizeof line - w, "%s %s in heap %d (%s, %s free)", k++ ? ";" : "", u, h,
                              c->info.heaps[h].device_local ? "device-local" : "host memory", f);
    }
    bs_log(1, "%s\n", line);
}

void bs_vk_memory_plan(const bs_vk_device_info *d, char *out, size_t n) {
    int order[32];
    const int k = bs_vk_mem_order(d, false, order);
    if (!k) { snprintf(out, n, "no memory type for device buffers"); return; }
    size_t w = 0;
    for (int i = 0; i < k && w < n; i++) {
        const int t = order[i], h = d->types[t].heap;
        const uint32_t f = d->types[t].flags;
        char sz[32], fr[32];
        human(d->heaps[h].size, sz, sizeof sz);
        human(d->heaps[h].free, fr, sizeof fr);
        w += (size_t)snprintf(out + w, n - w, "%sheap %d (type %d: %s%s, %s, %s free)", i ? ", then " : "", h, t,
                              (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? "device-local" : "host",
                              (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? ", host-visible" : "", sz, fr);
    }
}

/* Allocate b's memory: the types of bs_vk_mem_order in turn, the next when one is out of
 * memory (or a faked heap is full). Returns the type, or -1. */
static int allocate(bs_vk_ctx *c, bs_vk_buf *b, const VkMemoryRequirements *rq, bool host) {
    int order[32];
    const int n = bs_vk_mem_order(&c->info, host, order);
    for (int i = 0; i < n; i++) {
        const int t = order[i], h = c->info.types[t].heap;
        if (!(rq->memoryTypeBits & (1u << c->real_type[t]))) continue;
        if (c->info.fake_memory && c->heap_used[h] + rq->size > c->info.heaps[h].size) continue;
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = rq->size,
                                   .memoryTypeIndex = c->real_type[t]};
        if (c->fn->vkAllocateMemory(c->dev, &ai, NULL, &b->mem) != VK_SUCCESS) {
            b->mem = VK_NULL_HANDLE;
            continue;
        }
        b->heap = h;
        b->bytes = rq->size;
        c->heap_used[h] += rq->size;
        if (!host && h != c->last_heap) {
            /* say where device buffers go, and when they move on to another heap */
            char sz[32];
            human(c->info.heaps[h].size, sz, sizeof sz);
            bs_log(c->last_heap < 0 ? 2 : 1, "device memory: %sbuffers go to heap %d (%s, %s%s)\n",
                   c->last_heap < 0 ? "" : "a heap is full: ", h, sz,
                   c->info.heaps[h].device_local ? "device-local" : "host memory",
                   (c->info.types[t].flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? ", host-visible" : "");
            c->last_heap = h;
        }
        return t;
    }
    return -1;
}

int bs_vk_buf_new(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize size, bool host) {
    memset(b, 0, sizeof *b);
    if (size == 0) size = 16;
    char sz[32], lim[32];
    human(size, sz, sizeof sz);
    if (size > c->info.max_buffer) {
        human(c->info.max_buffer, lim, sizeof lim);
        return bs_error("Vulkan: a buffer of %s is larger than the device allows (%s in one buffer or allocation)", sz, lim);
    }
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if (c->fn->vkCreateBuffer(c->dev, &bi, NULL, &b->buf) != VK_SUCCESS)
        return bs_error("Vulkan: cannot create a buffer of %s", sz);
    VkMemoryRequirements rq;
    c->fn->vkGetBufferMemoryRequirements(c->dev, b->buf, &rq);
    int t = rq.size <= c->info.max_alloc ? allocate(c, b, &rq, host) : -1;
    if (t < 0) {
        bs_vk_buf_free(c, b);
        bool in[16];
        const int k = host ? 0 : device_heaps(&c->info, in);
        uint64_t best = 0;
        int hb = -1;
        for (int h = 0; h < c->info.n_heaps && k; h++)
            if (in[h] && (hb < 0 || bs_vk_heap_free(c, h) > best)) best = bs_vk_heap_free(c, h), hb = h;
        human(best, lim, sizeof lim);
        if (hb >= 0) return bs_error("Vulkan: out of device memory: a buffer of %s does not fit, heap %d has %s free", sz, hb, lim);
        return bs_error("Vulkan: out of %s memory: no memory type takes a buffer of %s", host ? "host-visible" : "device", sz);
    }
    c->fn->vkBindBufferMemory(c->dev, b->buf, b->mem, 0);
    b->size = size;
    /* mapped: host buffers, and device buffers where device memory is the host's */
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((c->info.types[t].flags & hv) == hv && (host || (c->info.unified && !c->staged)) &&
        c->fn->vkMapMemory(c->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map) != VK_SUCCESS)
        b->map = NULL;
    return 0;
}

int bs_vk_upload_vec(bs_vk_ctx *c, bs_vk_buf *b, const float *v, size_t n) {
    if (bs_vk_buf_new(c, b, 4 * n, false)) return -1;
    return v ? bs_vk_buf_write(c, b, 0, v, 4 * n) : 0;
}

/* The main command buffer's submission not waited for (vk_exec.c's bs_vk_submit_nowait): waited
 * for, its fence taken back (its descriptor sets: at the next bs_vk_begin). Here, with the staging ring's waits, because
 * every buffer write, read and release must come after it. */
int bs_vk_settle(bs_vk_ctx *c) {
    if (!c->in_flight) return 0;
    c->in_flight = false;
    const VkResult r = c->fn->vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    c->fn->vkResetFences(c->dev, 1, &c->fence);
    return r == VK_SUCCESS ? 0 : bs_error("Vulkan: the device did not finish (VkResult %d)", (int)r);
}

void bs_vk_buf_free(bs_vk_ctx *c, bs_vk_buf *b) {
    if (b->buf) bs_vk_settle(c);   /* no submission that binds it may be in flight */
    if (b->buf && b != &c->stage.buf) bs_vk_staging_flush(c);   /* nor a copy into it */
    if (b->map) c->fn->vkUnmapMemory(c->dev, b->mem);
    if (b->buf) c->fn->vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) {
        c->fn->vkFreeMemory(c->dev, b->mem, NULL);
        c->heap_used[b->heap] -= b->bytes;
    }
    memset(b, 0, sizeof *b);
}

int bs_vk_buf_write(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, const void *src, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: write past a buffer's end");
    TRY(bs_vk_settle(c));   /* (a submission in flight may read it) */
    if (b->map) { memcpy((char *)b->map + off, src, n); return 0; }
    return bs_vk_staging_write(c, b, off, src, n);
}

int bs_vk_counters_new(bs_vk_ctx *c, bs_vk_buf *b, size_t bytes) {
    uint32_t *z = bs_xcalloc(bytes / 4 + 1, 4);
    const int rc = bs_vk_buf_new(c, b, bytes, false) || bs_vk_buf_write(c, b, 0, z, bytes);
    free(z);
    return rc ? -1 : 0;
}

int bs_vk_buf_read(bs_vk_ctx *c, bs_vk_buf *b, VkDeviceSize off, void *dst, size_t n) {
    if (off + n > b->size) return bs_error("Vulkan: read past a buffer's end");
    TRY(bs_vk_settle(c));   /* (a submission in flight may write it) */
    if (b->map) { memcpy(dst, (const char *)b->map + off, n); return 0; }
    return bs_vk_staging_read(c, b, off, dst, n);
}


static int ring_init(bs_vk_ctx *c) {
    bs_vk_staging *r = &c->stage;
    if (r->buf.buf) return 0;
    const char *e = getenv("BITSPARK_VK_STAGING_KB");
    const long kb = e ? strtol(e, NULL, 10) : 0;
    r->chunk = kb > 0 && kb <= (1 << 20) ? (size_t)kb << 10 : (size_t)CHUNK_DEFAULT;
    /* the ring is one buffer: within the device's limit for one (at least 4 KiB a chunk) */
    r->chunk = (size_t)BS_MAX(4096, BS_MIN((uint64_t)r->chunk, c->info.max_buffer / BS_VK_RING / 4096 * 4096));
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
