/* vkinfo.c: what the GPU check bundle (tools/gpu_bundle.sh) reports about each Vulkan device:
 * its memory heaps and types (with VK_EXT_memory_budget's figures where present), the limits
 * that bound buffer and dispatch sizes, and the shader features and integer dot-product support
 * the kernels care about. A standalone probe, not part of bitspark: it opens libvulkan.so.1 at
 * run time like the backend does, so it runs with whatever loader the machine (or the bundle)
 * provides. Build: cc -std=c11 -O2 tools/vkinfo.c -o vkinfo -ldl. Exit 0 when it listed at
 * least one device, 1 otherwise (with the reason on stdout). */
#define _GNU_SOURCE /* dladdr: which loader was opened */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static PFN_vkGetInstanceProcAddr gipa;
static VkInstance inst;

#define LOAD(name) PFN_##name name = (PFN_##name)gipa(inst, #name)

static double gib(VkDeviceSize b) { return (double)b / 1073741824.0; }

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static void flags_str(VkMemoryPropertyFlags f, char *out, size_t cap) {
    static const struct { VkMemoryPropertyFlags bit; const char *name; } names[] = {
        {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DEVICE_LOCAL"}, {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HOST_VISIBLE"},
        {VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HOST_COHERENT"}, {VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "HOST_CACHED"},
        {VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, "LAZY"}, {VK_MEMORY_PROPERTY_PROTECTED_BIT, "PROTECTED"},
    };
    out[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "|" : "", names[i].name);
    if (!out[0]) snprintf(out, cap, "(none)");
}

static int has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (!strcmp(e[i].extensionName, name)) return 1;
    return 0;
}

static void memory(VkPhysicalDevice pd, int budget_ext) {
    LOAD(vkGetPhysicalDeviceMemoryProperties2);
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                            .pNext = budget_ext ? &budget : NULL};
    vkGetPhysicalDeviceMemoryProperties2(pd, &mp);
    const VkPhysicalDeviceMemoryProperties *m = &mp.memoryProperties;
    for (uint32_t h = 0; h < m->memoryHeapCount; h++) {
        printf("  heap %u: %.2f GiB%s", h, gib(m->memoryHeaps[h].size),
               m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? " DEVICE_LOCAL" : " host");
        if (budget_ext) printf(", budget %.2f GiB, used %.2f GiB", gib(budget.heapBudget[h]), gib(budget.heapUsage[h]));
        printf("\n");
    }
    for (uint32_t t = 0; t < m->memoryTypeCount; t++) {
        char f[128];
        flags_str(m->memoryTypes[t].propertyFlags, f, sizeof f);
        printf("  type %u: heap %u %s\n", t, m->memoryTypes[t].heapIndex, f);
    }
    if (!budget_ext) printf("  (no VK_EXT_memory_budget)\n");
}

static void device(int i, VkPhysicalDevice pd) {
    LOAD(vkGetPhysicalDeviceProperties2);
    LOAD(vkGetPhysicalDeviceFeatures2);
    LOAD(vkEnumerateDeviceExtensionProperties);
    VkExtensionProperties ext[512];
    uint32_t next = 512;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &next, ext) < 0) next = 0;
    VkPhysicalDeviceProperties base;
    VkPhysicalDeviceProperties2 p0 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    vkGetPhysicalDeviceProperties2(pd, &p0);
    base = p0.properties;
    const uint32_t api = base.apiVersion;
    const int v12 = api >= VK_API_VERSION_1_2, v13 = api >= VK_API_VERSION_1_3;
    const int dot_ext = v13 || has_ext(ext, next, "VK_KHR_shader_integer_dot_product");
    const int m4 = v13 || has_ext(ext, next, "VK_KHR_maintenance4");

    /* properties: only the structures this device's version or extensions define */
    VkPhysicalDeviceMaintenance3Properties m3p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceMaintenance4Properties m4p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceShaderIntegerDotProductProperties dpp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3p};
    m3p.pNext = &sg;
    void **tail = &sg.pNext;
    if (v12) { *tail = &drv; tail = &drv.pNext; }
    if (m4) { *tail = &m4p; tail = &m4p.pNext; }
    if (dot_ext) { *tail = &dpp; tail = &dpp.pNext; }
    vkGetPhysicalDeviceProperties2(pd, &p2);
    const VkPhysicalDeviceLimits *l = &base.limits;

    printf("device %d: %s (%s), vendor 0x%04x device 0x%04x, Vulkan %u.%u.%u", i, base.deviceName,
           type_name(base.deviceType), base.vendorID, base.deviceID, VK_API_VERSION_MAJOR(api),
           VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api));
    if (v12) printf(", driver %s %s", drv.driverName, drv.driverInfo);
    printf("\n");
    memory(pd, has_ext(ext, next, "VK_EXT_memory_budget"));
    printf("  limits: maxMemoryAllocationSize %.2f GiB, maxBufferSize %s%.2f GiB, maxStorageBufferRange %.2f GiB,\n"
           "    maxMemoryAllocationCount %u, maxComputeSharedMemorySize %u KiB, maxComputeWorkGroupInvocations %u,\n"
           "    maxComputeWorkGroupSize %u,%u,%u, maxComputeWorkGroupCount %u,%u,%u, maxPushConstantsSize %u,\n"
           "    minStorageBufferOffsetAlignment %llu, nonCoherentAtomSize %llu, timestampPeriod %.3f ns,\n"
           "    timestampComputeAndGraphics %s, subgroup size %u\n",
           gib(m3p.maxMemoryAllocationSize), m4 ? "" : "(no maintenance4) ", m4 ? gib(m4p.maxBufferSize) : 0.0,
           gib(l->maxStorageBufferRange), l->maxMemoryAllocationCount, l->maxComputeSharedMemorySize / 1024,
           l->maxComputeWorkGroupInvocations, l->maxComputeWorkGroupSize[0], l->maxComputeWorkGroupSize[1],
           l->maxComputeWorkGroupSize[2], l->maxComputeWorkGroupCount[0], l->maxComputeWorkGroupCount[1],
           l->maxComputeWorkGroupCount[2], l->maxPushConstantsSize,
           (unsigned long long)l->minStorageBufferOffsetAlignment, (unsigned long long)l->nonCoherentAtomSize,
           l->timestampPeriod, l->timestampComputeAndGraphics ? "yes" : "no", sg.subgroupSize);

    /* features */
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceShaderIntegerDotProductFeatures dpf = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    tail = &f2.pNext;
    if (v12) { *tail = &f11; f11.pNext = &f12; tail = &f12.pNext; }
    if (dot_ext) { *tail = &dpf; tail = &dpf.pNext; }
    vkGetPhysicalDeviceFeatures2(pd, &f2);
    printf("  features: int16 %s, int64 %s, int8 %s, fp16 %s, 8-bit storage %s, 16-bit storage %s, "
           "buffer addresses %s, cooperative matrix %s\n",
           f2.features.shaderInt16 ? "yes" : "no", f2.features.shaderInt64 ? "yes" : "no",
           v12 && f12.shaderInt8 ? "yes" : "no", v12 && f12.shaderFloat16 ? "yes" : "no",
           v12 && f12.storageBuffer8BitAccess ? "yes" : "no", v12 && f11.storageBuffer16BitAccess ? "yes" : "no",
           v12 && f12.bufferDeviceAddress ? "yes" : "no",
           has_ext(ext, next, "VK_KHR_cooperative_matrix") ? "yes" : "no");
    if (!dot_ext || !dpf.shaderIntegerDotProduct) {
        printf("  integer dot product: no\n");
        return;
    }
    printf("  integer dot product: yes; hardware-accelerated: 4x8-bit packed signed %s, unsigned %s, mixed %s;"
           " 8-bit signed %s; 16-bit signed %s; 32-bit signed %s\n",
           dpp.integerDotProduct4x8BitPackedSignedAccelerated ? "yes" : "no",
           dpp.integerDotProduct4x8BitPackedUnsignedAccelerated ? "yes" : "no",
           dpp.integerDotProduct4x8BitPackedMixedSignednessAccelerated ? "yes" : "no",
           dpp.integerDotProduct8BitSignedAccelerated ? "yes" : "no",
           dpp.integerDotProduct16BitSignedAccelerated ? "yes" : "no",
           dpp.integerDotProduct32BitSignedAccelerated ? "yes" : "no");
}

int main(void) {
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { printf("vkinfo: no Vulkan loader (%s)\n", dlerror()); return 1; }
    gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
    if (!gipa) { printf("vkinfo: libvulkan.so.1 has no vkGetInstanceProcAddr\n"); return 1; }
    Dl_info where;
    if (dladdr((void *)gipa, &where) && where.dli_fname) printf("loader: %s\n", where.dli_fname);
    uint32_t loader_api = VK_API_VERSION_1_0;
    PFN_vkEnumerateInstanceVersion eiv = (PFN_vkEnumerateInstanceVersion)gipa(NULL, "vkEnumerateInstanceVersion");
    if (eiv) eiv(&loader_api);
    printf("loader Vulkan %u.%u.%u\n", VK_API_VERSION_MAJOR(loader_api), VK_API_VERSION_MINOR(loader_api),
           VK_API_VERSION_PATCH(loader_api));
    if (loader_api < VK_API_VERSION_1_1) { printf("vkinfo: the loader is older than Vulkan 1.1\n"); return 1; }
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "vkinfo",
                             .apiVersion = loader_api >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader_api};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult r = create(&ci, NULL, &inst);
    if (r != VK_SUCCESS) { printf("vkinfo: vkCreateInstance failed (VkResult %d)\n", (int)r); return 1; }
    LOAD(vkEnumeratePhysicalDevices);
    LOAD(vkDestroyInstance);
    VkPhysicalDevice pds[16];
    uint32_t n = 16;
    r = vkEnumeratePhysicalDevices(inst, &n, pds);
    if (r < 0) { printf("vkinfo: vkEnumeratePhysicalDevices failed (VkResult %d)\n", (int)r); n = 0; }
    if (n == 0) printf("vkinfo: no Vulkan devices\n");
    for (uint32_t i = 0; i < n; i++) device((int)i, pds[i]);
    vkDestroyInstance(inst, NULL);
    return n > 0 ? 0 : 1;
}
