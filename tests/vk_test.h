/* vk_test.h: how every Vulkan test starts. Where this build has no Vulkan backend, the machine
 * no loader, or the loader no device, the test says so and is skipped (exit 77); otherwise the
 * validation layer is on where it is installed (any message fails the test; without it the test
 * says so and runs the rest; BS_VK_NO_VALIDATE=1 turns it off by hand). */
#ifndef BS_VK_TEST_H
#define BS_VK_TEST_H

#include "formats/quant.h"
#include "io/util.h"
#include "vulkan/backend.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* qk.comp's push constants, as the shader declares them (test_vulkan_ops, test_vulkan_attn) */
typedef struct qk_push { uint32_t H, Hkv, D, n_rot, cs_row0, f32; float eps; uint32_t gated; } qk_push;

/* The devices into info[0..cap): their number, or minus the exit code the test ends with. */
static inline int vk_test_devices(bs_vk_device_info *info, int cap) {
    if (!bs_vk_built()) { printf("skipped: this build has no Vulkan backend\n"); return -77; }
    if (!getenv("BS_VK_NO_VALIDATE")) {
        if (bs_vk_has_layer("VK_LAYER_KHRONOS_validation")) setenv("BITSPARK_VK_VALIDATE", "1", 1);
        else printf("note: VK_LAYER_KHRONOS_validation is not installed: the validation checks are skipped\n");
    }
    const int nd = bs_vk_devices(info, cap);
    if (nd < 0 && strstr(bs_last_error(), "no Vulkan loader")) { printf("skipped: %s\n", bs_last_error()); return -77; }
    if (nd == 0) { printf("skipped: no Vulkan device\n"); return -77; }
    if (nd < 0) { fprintf(stderr, "listing Vulkan devices: %s\n", bs_last_error()); return -1; }
    return nd;
}

/* The best device opened for a test of kernels (*ctx; NULL where it cannot be, a failed check),
 * its name printed. Returns 0 to go on, else the exit code the test ends with (77: skipped). */
static inline int vk_test_open(const char *name, bs_vk_ctx **ctx) {
    bs_vk_device_info info[8];
    const int nd = vk_test_devices(info, 8);
    if (nd < 0) return -nd;
    *ctx = bs_vk_open(bs_vk_pick(true));
    CHECKF(*ctx != NULL, "%s", bs_last_error());
    if (!*ctx) return test_summary(name);
    printf("device: %s\n", bs_vk_info(*ctx)->name);
    return 0;
}

/* A whole test over fixture models: check(path) for each of them, then no validation message
 * may have come. Returns the exit code (77: skipped). */
static inline int vk_test_models(const char *name, const char *const *models, int n, void (*check)(const char *path)) {
    bs_vk_device_info info[4];
    const int nd = vk_test_devices(info, 4);
    if (nd < 0) return -nd;
    const char *fx = getenv("BS_FIXTURES");
    if (!fx) { printf("BS_FIXTURES is not set\n"); return 1; }
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", fx, models[i]);
        check(path);
    }
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary(name);
}

/* The int8 blocks a kernel made of n values (codes 32 bytes a block, scales and Q8_1 sums a
 * float each) against the CPU quantizer's of v (Q8_0's, Q4_1's activation sums): how many
 * blocks differ (test_vulkan_kernels, test_vulkan_attn: the rotating epilogues). */
static inline int vk_test_blocks_differ(const float *v, size_t n, const void *codes, const float *s8, const float *m8) {
    const size_t nb = n / 32;
    uint8_t *cq = malloc(nb * 34), *c1 = malloc(nb * 36);
    bs_type_get(BS_Q8_0)->act_from_float(v, cq, (int64_t)n);
    bs_type_get(BS_Q4_1)->act_from_float(v, c1, (int64_t)n);
    int d = 0;
    for (size_t b = 0; b < nb; b++) {
        uint16_t h, h1;
        memcpy(&h, cq + b * 34, 2);
        memcpy(&h1, c1 + b * 36 + 2, 2);
        d += bs_f16_to_f32(h) != s8[b] || memcmp(cq + b * 34 + 2, (const uint8_t *)codes + b * 32, 32) != 0 ||
             bs_f16_to_f32(h1) != m8[b];
    }
    free(cq);
    free(c1);
    return d;
}

#endif
