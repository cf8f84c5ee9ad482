/* cli_devices.c: `bitspark devices`: the CPU and each Vulkan device with what the backend uses
 * of it, and which one `--device auto` takes. */
#include "cli/cli.h"
#include "cpu/cpu_features.h"
#include "io/util.h"
#include "vulkan/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void help_devices(void) {
    printf("usage: bitspark devices\n\n"
           "Lists the devices models can run on, for --device (run, chat, serve, bench, logits):\n"
           "  cpu         the CPU kernels (always there)\n"
           "  vulkan:N    Vulkan device N (libvulkan.so.1 at run time; none without a loader)\n"
           "'auto' (the default) takes the first discrete, else integrated GPU, else the CPU; a CPU\n"
           "Vulkan device (Mesa's lavapipe) only when named or with BITSPARK_VK_ALLOW_CPU=1.\n"
           "For each Vulkan device: its memory heaps (free space from VK_EXT_memory_budget where the\n"
           "driver has it), the largest allocation and buffer, and the heaps device buffers take in\n"
           "order (the next when one is full).\n");
}

static const char *yes(bool b) { return b ? "yes" : "no"; }

static void size_str(uint64_t b, char *out, size_t n) {
    if (b == UINT64_MAX) snprintf(out, n, "unbounded");
    else if (b >= (1ull << 30)) snprintf(out, n, "%.1f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(out, n, "%.1f MiB", b / 1048576.0);
    else snprintf(out, n, "%.1f KiB", b / 1024.0);
}

/* The heaps, the allocation limits and where device buffers go (the first heap, then the
 * fallbacks when it is full). */
static void print_memory(const bs_vk_device_info *d) {
    char a[32], b[32];
    printf("  memory heaps:");
    for (int h = 0; h < d->n_heaps; h++) {
        size_str(d->heaps[h].size, a, sizeof a);
        size_str(d->heaps[h].free, b, sizeof b);
        printf("%s %d: %s %s, %s free", h ? ";" : "", h, a, d->heaps[h].device_local ? "device-local" : "host", b);
    }
    size_str(d->max_alloc, a, sizeof a);
    size_str(d->max_buffer, b, sizeof b);
    printf("\n  max allocation %s, max buffer %s, memory budget %s, %s memory%s\n", a, b, yes(d->memory_budget),
           d->unified ? "unified" : "discrete", d->fake_memory ? " (faked by BITSPARK_VK_FAKE_MEMORY)" : "");
    char plan[1024];
    bs_vk_memory_plan(d, plan, sizeof plan);
    printf("  device buffers: %s\n", plan);
}

int cmd_devices(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "bitspark devices: no options (got '%s')\n", argv[1]);
        return 2;
    }
    printf("cpu: %s (kernels: %s)\n", bs_cpu_describe(), bs_cpu_level_name(bs_cpu_level()));
    if (!bs_vk_built()) {
        printf("vulkan: not built into this binary (no glslc or Vulkan headers at build time)\n");
        return 0;
    }
    bs_vk_device_info info[16];
    const int n = bs_vk_devices(info, 16);
    if (n < 0) {
        printf("vulkan: unavailable (%s)\n", bs_last_error());
        return 0;
    }
    if (n == 0) printf("vulkan: no devices\n");
    for (int i = 0; i < n && i < 16; i++) {
        const bs_vk_device_info *d = &info[i];
        printf("vulkan:%d: %s (%s), Vulkan %u.%u.%u, %s\n", i, d->name, bs_vk_type_name(d->type),
               d->api_version >> 22, (d->api_version >> 12) & 0x3ff, d->api_version & 0xfff, d->driver);
        printf("  memory %.1f GiB, max binding %.0f MiB, shared %u KiB, subgroup %u\n", d->heap_bytes / 1073741824.0,
               d->max_binding / 1048576.0, d->shared_mem / 1024, d->subgroup_size);
        print_memory(d);
        char coop[96];   /* the int8 shapes prompts' products can take (vk_mm.c) */
        const bs_vk_coop_shape *nv = &d->coop_nv, *kh = &d->coop_khr;
        if (nv->m && kh->m) snprintf(coop, sizeof coop, "int8 %ux%ux%u (NV), %ux%ux%u (KHR)", nv->m, nv->n, nv->k, kh->m, kh->n, kh->k);
        else if (nv->m || kh->m) snprintf(coop, sizeof coop, "int8 %ux%ux%u (%s)", nv->m | kh->m, nv->n | kh->n, nv->k | kh->k, nv->m ? "NV" : "KHR");
        else snprintf(coop, sizeof coop, "%s", d->coop_matrix ? "KHR, no int8 shape mm_q takes" : "no");
        printf("  int8 %s, int16 %s, fp16 %s, 8-bit storage %s, 16-bit storage %s, buffer addresses %s,\n"
               "  integer dot product %s, cooperative matrix %s, timestamps %s\n",
               yes(d->int8), yes(d->int16), yes(d->fp16), yes(d->storage8), yes(d->storage16), yes(d->bda),
               yes(d->dot_product), coop, yes(d->timestamps));
    }
    const int pick = bs_vk_pick(false);
    if (pick >= 0) printf("auto: vulkan:%d\n", pick);
    else printf("auto: cpu%s\n", n > 0 ? " (no GPU; name a CPU Vulkan device or set BITSPARK_VK_ALLOW_CPU=1)" : "");
    return 0;
}
