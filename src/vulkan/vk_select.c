/* vk_select.c: the spelling of --device (built with or without the backend). */
#include "vulkan/backend.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

int bs_vk_parse_device(const char *spec, int *kind, int *index) {
    *index = -1;
    if (!spec || !*spec || !strcmp(spec, "auto")) { *kind = BS_DEVICE_AUTO; return 0; }
    if (!strcmp(spec, "cpu")) { *kind = BS_DEVICE_CPU; return 0; }
    if (!strncmp(spec, "vulkan", 6)) {
        *kind = BS_DEVICE_VULKAN;
        if (!spec[6]) return 0;
        char *end = NULL;
        long v = spec[6] == ':' && spec[7] ? strtol(spec + 7, &end, 10) : -1;
        if (end && !*end && v >= 0 && v < 64) { *index = (int)v; return 0; }
    }
    return bs_error("--device %s: expected auto, cpu, vulkan or vulkan:N", spec);
}
