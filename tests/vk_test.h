/* vk_test.h: how every Vulkan test starts. Where this build has no Vulkan backend, the machine
 * no loader, or the loader no device, the test says so and is skipped (exit 77); otherwise the
 * validation layer is on (any message fails the test; BS_VK_NO_VALIDATE=1 turns it off by hand). */
#ifndef BS_VK_TEST_H
#define BS_VK_TEST_H

#include "io/util.h"
#include "vulkan/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The devices into info[0..cap): their number, or minus the exit code the test ends with. */
static inline int vk_test_devices(bs_vk_device_info *info, int cap) {
    if (!bs_vk_built()) { printf("skipped: this build has no Vulkan backend\n"); return -77; }
    if (!getenv("BS_VK_NO_VALIDATE")) setenv("BITSPARK_VK_VALIDATE", "1", 1);
    const int nd = bs_vk_devices(info, cap);
    if (nd < 0 && strstr(bs_last_error(), "no Vulkan loader")) { printf("skipped: %s\n", bs_last_error()); return -77; }
    if (nd == 0) { printf("skipped: no Vulkan device\n"); return -77; }
    if (nd < 0) { fprintf(stderr, "listing Vulkan devices: %s\n", bs_last_error()); return -1; }
    return nd;
}

#endif
