/* vk_device.c: the Vulkan loader opened at run time, the process's instance (with the
 * validation layer and a message counter when BITSPARK_VK_VALIDATE=1), what each physical
 * device offers, the --device rule and contexts (logical device + one compute queue). */
#include "vulkan/vk_internal.h"
#include "vulkan/vk_coop_khr.h"
#include "io/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bs_vk_instance g_vi;
static int g_state;               /* 0 not tried, 1 ready, -1 failed (g_err says why) */
static char g_err[512];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_messages;            /* validation messages seen */
static void *g_lib;

bool bs_vk_built(void) { return true; }
int bs_vk_validation_messages(void) { return __atomic_load_n(&g_messages, __ATOMIC_RELAXED); }
bool bs_vk_sync_validation(void) {
    const bs_vk_instance *vi = bs_vk_instance_get();
    return vi && vi->sync_validating;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *d, void *user) {
    (void)user;
    /* every validation message counts (the tests fail on any); loader chatter at INFO does not */
    if ((type & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) || sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        __atomic_add_fetch(&g_messages, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "vulkan validation: %s\n", d && d->pMessage ? d->pMessage : "(no text)");
    }
    return VK_FALSE;
}

static bool has_layer(const bs_vk_fns *fn, const char *name) {
    uint32_t n = 0;
    if (fn->vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n) return false;
    VkLayerProperties *p = bs_xcalloc(n, sizeof *p);
    bool found = false;
    if (fn->vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].layerName, name);
    free(p);
    return found;
}

/* whether the layer offers an instance extension (the validation layer's own ones) */
static bool layer_has_ext(const bs_vk_fns *fn, const char *layer, const char *name) {
    uint32_t n = 0;
    if (fn->vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *p = bs_xcalloc(n, sizeof *p);
    bool found = false;
    if (fn->vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

bool bs_vk_has_layer(const char *name) {
    /* before (or without) the instance: the loader's global entry points only */
    const char *lib = getenv("BITSPARK_VK_LOADER");
    void *h = dlopen(lib && *lib ? lib : "libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return false;
    bs_vk_fns fn = {0};
    fn.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(h, "vkGetInstanceProcAddr");
    if (fn.vkGetInstanceProcAddr)
        fn.vkEnumerateInstanceLayerProperties =
            (PFN_vkEnumerateInstanceLayerProperties)fn.vkGetInstanceProcAddr(NULL, "vkEnumerateInstanceLayerProperties");
    const bool found = fn.vkEnumerateInstanceLayerProperties && has_layer(&fn, name);
    return found;   /* h stays open, as the instance's does (it is the same handle) */
}

static int fail(const char *fmt, const char *arg) {
    snprintf(g_err, sizeof g_err, fmt, arg);
    return -1;
}

static int instance_init(bs_vk_instance *vi) {
    const char *lib = getenv("BITSPARK_VK_LOADER");   /* tests: a loader that is not there */
    g_lib = dlopen(lib && *lib ? lib : "libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) return fail("no Vulkan loader (%s)", dlerror());
    bs_vk_fns *fn = &vi->fn;
    fn->vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(g_lib, "vkGetInstanceProcAddr");
    if (!fn->vkGetInstanceProcAddr) return fail("the Vulkan loader has no %s", "vkGetInstanceProcAddr");
#define BS_VK_LOAD_G(f) if (!(fn->f = (PFN_##f)fn->vkGetInstanceProcAddr(NULL, #f))) return fail("Vulkan: no %s", #f);
    BS_VK_GLOBAL_FNS(BS_VK_LOAD_G)
    const bool validate = bs_env_flag("BITSPARK_VK_VALIDATE");
    const char *layer = "VK_LAYER_KHRONOS_validation";
    if (validate && !has_layer(fn, layer)) return fail("BITSPARK_VK_VALIDATE=1 but %s is not installed", layer);
    /* Validation checks synchronization too where the layer can: on a CPU device every dispatch
       runs after the one before, so a missing barrier shows only on a GPU, or here */
    const char *ext[2] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    const bool sync = validate && layer_has_ext(fn, layer, ext[1]);
    const VkValidationFeatureEnableEXT en = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, .enabledValidationFeatureCount = 1,
                                  .pEnabledValidationFeatures = &en};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "bitspark",
                             .pEngineName = "bitspark", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pNext = sync ? &vf : NULL,
                               .pApplicationInfo = &app, .enabledLayerCount = validate, .ppEnabledLayerNames = &layer,
                               .enabledExtensionCount = validate + sync, .ppEnabledExtensionNames = ext};
    VkResult r = fn->vkCreateInstance(&ci, NULL, &vi->inst);
    if (r != VK_SUCCESS) {
        snprintf(g_err, sizeof g_err, "vkCreateInstance failed (VkResult %d)", (int)r);
        return -1;
    }
#define BS_VK_LOAD_I(f) if (!(fn->f = (PFN_##f)fn->vkGetInstanceProcAddr(vi->inst, #f))) return fail("Vulkan: no %s", #f);
    BS_VK_INSTANCE_FNS(BS_VK_LOAD_I)
    if (validate) {
        fn->vkCreateDebugUtilsMessengerEXT = (PFN_vkCreateDebugUtilsMessengerEXT)fn->vkGetInstanceProcAddr(vi->inst, "vkCreateDebugUtilsMessengerEXT");
        fn->vkDestroyDebugUtilsMessengerEXT = (PFN_vkDestroyDebugUtilsMessengerEXT)fn->vkGetInstanceProcAddr(vi->inst, "vkDestroyDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = on_message};
        if (!fn->vkCreateDebugUtilsMessengerEXT ||
            fn->vkCreateDebugUtilsMessengerEXT(vi->inst, &mi, NULL, &vi->messenger) != VK_SUCCESS)
            return fail("Vulkan: cannot install the validation %s", "message callback");
        vi->validating = true;
        vi->sync_validating = sync;
    }
    uint32_t n = 0;
    if (fn->vkEnumeratePhysicalDevices(vi->inst, &n, NULL) != VK_SUCCESS) return fail("Vulkan: %s failed", "vkEnumeratePhysicalDevices");
    vi->phys = bs_xcalloc(n ? n : 1, sizeof *vi->phys);
    if (n && fn->vkEnumeratePhysicalDevices(vi->inst, &n, vi->phys) < 0) return fail("Vulkan: %s failed", "vkEnumeratePhysicalDevices");
    vi->n_phys = (int)n;
    return 0;
}

static void instance_release(void) {
    bs_vk_instance *vi = &g_vi;
    if (vi->messenger) vi->fn.vkDestroyDebugUtilsMessengerEXT(vi->inst, vi->messenger, NULL);
    if (vi->inst) vi->fn.vkDestroyInstance(vi->inst, NULL);
    free(vi->phys);
    memset(vi, 0, sizeof *vi);
    /* the loader stays open: drivers register atexit handlers of their own */
}

bs_vk_instance *bs_vk_instance_get(void) {
    pthread_mutex_lock(&g_lock);
    if (g_state == 0) {
        if (instance_init(&g_vi) == 0) {
            g_state = 1;
            atexit(instance_release);
        } else {
            if (g_vi.inst) g_vi.fn.vkDestroyInstance(g_vi.inst, NULL);
            free(g_vi.phys);
            memset(&g_vi, 0, sizeof g_vi);
            g_state = -1;
        }
    }
    const int st = g_state;
    pthread_mutex_unlock(&g_lock);
    if (st < 0) {
        bs_error("%s", g_err);
        return NULL;
    }
    return &g_vi;
}

static bool has_ext(const bs_vk_fns *fn, VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (fn->vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *e = bs_xcalloc(n, sizeof *e);
    bool found = false;
    if (fn->vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) >= 0)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

/* Whether an int8 x int8 -> int32 subgroup shape fits mm_q_coop: M and N divide the 32 x 32 tile,
 * K is 32 or 16 (a 32-element sub-block's sum in one or two multiply-adds; its 16-byte offsets
 * keep the loads aligned), and it beats the shape so far (more of the tile per multiply-add,
 * then the larger K). The component types' values are the same in NV's and KHR's enums. */
static void coop_take(bs_vk_coop_shape *best, uint32_t m, uint32_t n, uint32_t k, const uint32_t ty[4], uint32_t scope) {
    if (ty[0] != VK_COMPONENT_TYPE_SINT8_NV || ty[1] != VK_COMPONENT_TYPE_SINT8_NV || ty[2] != VK_COMPONENT_TYPE_SINT32_NV ||
        ty[3] != VK_COMPONENT_TYPE_SINT32_NV || scope != VK_SCOPE_SUBGROUP_NV || (k != 32 && k != 16) || !m || !n || 32 % m || 32 % n)
        return;
    if (m * n > best->m * best->n || (m * n == best->m * best->n && k > best->k)) *best = (bs_vk_coop_shape){m, n, k};
}

/* VK_NV_cooperative_matrix's shapes, where its feature and the Vulkan memory model (the module
 * declares it) are on */
static void coop_shape_nv(const bs_vk_fns *fn, VkPhysicalDevice p, bs_vk_device_info *o) {
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &cf};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    fn->vkGetPhysicalDeviceFeatures2(p, &f);
    bs_vk_instance *vi = bs_vk_instance_get();
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV props =
        vi ? (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)fn->vkGetInstanceProcAddr(vi->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV")
           : NULL;
    uint32_t n = 0;
    if (!cf.cooperativeMatrix || !f12.vulkanMemoryModel || !props || props(p, &n, NULL) != VK_SUCCESS || !n) return;
    VkCooperativeMatrixPropertiesNV *cp = bs_xcalloc(n, sizeof *cp);
    for (uint32_t i = 0; i < n; i++) cp[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    if (props(p, &n, cp) >= 0)
        for (uint32_t i = 0; i < n; i++) {
            const VkCooperativeMatrixPropertiesNV *q = &cp[i];
            coop_take(&o->coop_nv, q->MSize, q->NSize, q->KSize, (const uint32_t[]){q->AType, q->BType, q->CType, q->DType}, q->scope);
        }
    free(cp);
}

/* VK_KHR_cooperative_matrix's (its declarations: vk_coop_khr.h), for compute shaders */
static void coop_shape_khr(const bs_vk_fns *fn, VkPhysicalDevice p, bs_vk_device_info *o) {
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cf = {.sType = BS_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &cf};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    fn->vkGetPhysicalDeviceFeatures2(p, &f);
    VkPhysicalDeviceCooperativeMatrixPropertiesKHR pp = {.sType = BS_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &pp};
    fn->vkGetPhysicalDeviceProperties2(p, &p2);
    bs_vk_instance *vi = bs_vk_instance_get();
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR props =
        vi ? (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)fn->vkGetInstanceProcAddr(vi->inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
           : NULL;
    uint32_t n = 0;
    if (!cf.cooperativeMatrix || !f12.vulkanMemoryModel || !(pp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
        !props || props(p, &n, NULL) != VK_SUCCESS || !n)
        return;
    VkCooperativeMatrixPropertiesKHR *cp = bs_xcalloc(n, sizeof *cp);
    for (uint32_t i = 0; i < n; i++) cp[i].sType = BS_VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    if (props(p, &n, cp) >= 0)
        for (uint32_t i = 0; i < n; i++) {
            const VkCooperativeMatrixPropertiesKHR *q = &cp[i];
            if (q->saturatingAccumulation) continue;   /* (the sums must wrap as the CPU's, never clamp) */
            coop_take(&o->coop_khr, q->MSize, q->NSize, q->KSize, (const uint32_t[]){q->AType, q->BType, q->CType, q->ResultType}, q->scope);
        }
    free(cp);
}

static int type_of(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return BS_VK_INTEGRATED;
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return BS_VK_DISCRETE;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return BS_VK_VIRTUAL;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return BS_VK_CPU;
    default: return BS_VK_OTHER;
    }
}

const char *bs_vk_type_name(int type) {
    static const char *names[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    return type >= 0 && type <= BS_VK_CPU ? names[type] : "?";
}

/* The compute queue family (prefer one without graphics: it is the dedicated one). */
static int compute_family(const bs_vk_fns *fn, VkPhysicalDevice p, bool *timestamps) {
    uint32_t n = 0;
    fn->vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties *q = bs_xcalloc(n ? n : 1, sizeof *q);
    fn->vkGetPhysicalDeviceQueueFamilyProperties(p, &n, q);
    int best = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (best < 0 || !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) best = (int)i;
        if (!(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) break;
    }
    *timestamps = best >= 0 && q[best].timestampValidBits > 0;
    free(q);
    return best;
}

/* A size in bytes, or with K, M or G; 0 when it is not one. */
static uint64_t parse_size(const char *s, const char **end) {
    char *e;
    const unsigned long long v = strtoull(s, &e, 10);
    uint64_t m = 1;
    if (*e == 'K' || *e == 'k') m = 1ull << 10;
    else if (*e == 'M' || *e == 'm') m = 1ull << 20;
    else if (*e == 'G' || *e == 'g') m = 1ull << 30;
    if (m > 1) e++;
    *end = e;
    return e == s ? 0 : (uint64_t)v * m;
}

static uint32_t parse_flags(const char *s) {
    static const struct { const char *name; uint32_t bit; } F[] = {
        {"dl", VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT}, {"hv", VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT},
        {"hc", VK_MEMORY_PROPERTY_HOST_COHERENT_BIT}, {"hca", VK_MEMORY_PROPERTY_HOST_CACHED_BIT}};
    uint32_t f = 0;
    while (*s) {
        const size_t n = strcspn(s, "+");
        size_t k = 0;
        while (k < 4 && !(strlen(F[k].name) == n && !strncmp(F[k].name, s, n))) k++;
        if (k == 4) return UINT32_MAX;
        f |= F[k].bit;
        s += n + (s[n] == '+');
    }
    return f;
}

/* BITSPARK_VK_FAKE_MEMORY (tests): heaps and types made up over the driver's, so that lavapipe
 * (one heap, one type with every flag) takes a discrete GPU's paths. Comma-separated entries:
 * "discrete" or "integrated" (which memory policy: see bs_vk_mem_order), SIZE:FLAGS (one heap
 * of SIZE holding one type; FLAGS dl, hv, hc, hca joined by '+'; the heap is device-local with
 * dl), maxalloc=SIZE, maxbuffer=SIZE. Each type is backed by the first real type that has its
 * host flags; allocations past a fake heap's size fail as the driver's would. */
static int fake_memory(const char *spec, const VkPhysicalDeviceMemoryProperties *real, bs_vk_device_info *o,
                       VkPhysicalDeviceMemoryProperties *mp, uint32_t *real_type) {
    const uint32_t host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                          VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    memset(mp, 0, sizeof *mp);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        const char *end;
        if (!strcmp(e, "discrete") || !strcmp(e, "integrated")) { o->unified = e[0] == 'i'; continue; }
        if (!strncmp(e, "maxalloc=", 9) || !strncmp(e, "maxbuffer=", 10)) {
            const uint64_t v = parse_size(strchr(e, '=') + 1, &end);
            if (!v || *end) return bs_error("BITSPARK_VK_FAKE_MEMORY: bad size in '%s'", e);
            *(e[3] == 'a' ? &o->max_alloc : &o->max_buffer) = v;
            continue;
        }
        const uint64_t size = parse_size(e, &end);
        const uint32_t f = *end == ':' ? parse_flags(end + 1) : UINT32_MAX;
        if (!size || f == UINT32_MAX || mp->memoryHeapCount >= 16)
            return bs_error("BITSPARK_VK_FAKE_MEMORY: bad entry '%s' (SIZE:dl+hv+hc+hca, discrete, integrated, "
                            "maxalloc=SIZE, maxbuffer=SIZE)", e);
        uint32_t t = 0;
        while (t < real->memoryTypeCount && (real->memoryTypes[t].propertyFlags & (f & host)) != (f & host)) t++;
        if (t == real->memoryTypeCount) return bs_error("BITSPARK_VK_FAKE_MEMORY: no real memory type has the host flags of '%s'", e);
        const uint32_t h = mp->memoryHeapCount++;
        mp->memoryHeaps[h].size = size;
        mp->memoryHeaps[h].flags = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) ? VK_MEMORY_HEAP_DEVICE_LOCAL_BIT : 0;
        mp->memoryTypes[h].propertyFlags = f;
        mp->memoryTypes[h].heapIndex = h;
        real_type[h] = t;
        mp->memoryTypeCount++;
    }
    if (!mp->memoryHeapCount) return bs_error("BITSPARK_VK_FAKE_MEMORY names no heap");
    if (o->max_buffer > o->max_alloc) o->max_buffer = o->max_alloc;
    o->fake_memory = true;
    return 0;
}

/* The heaps and types as the backend sees them (real, or faked), their free space, the
 * allocation limits and the memory policy (unified: integrated GPUs and CPU devices). */
static int memory_info(const bs_vk_fns *fn, VkPhysicalDevice p, bs_vk_device_info *o,
                       VkPhysicalDeviceMemoryProperties *mp, uint32_t *real_type) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bud = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                            .pNext = o->memory_budget ? &bud : NULL};
    fn->vkGetPhysicalDeviceMemoryProperties2(p, &m2);
    *mp = m2.memoryProperties;
    for (uint32_t i = 0; i < VK_MAX_MEMORY_TYPES; i++) real_type[i] = i;
    o->unified = o->type == BS_VK_INTEGRATED || o->type == BS_VK_CPU;
    const char *fake = getenv("BITSPARK_VK_FAKE_MEMORY");
    if (fake && *fake) {
        if (fake_memory(fake, &m2.memoryProperties, o, mp, real_type)) return -1;
        o->memory_budget = false;
    }
    o->n_heaps = (int)BS_MIN(mp->memoryHeapCount, 16u);
    o->n_types = (int)BS_MIN(mp->memoryTypeCount, 32u);
    o->heap_bytes = 0;
    for (int i = 0; i < o->n_heaps; i++) {
        const uint64_t size = mp->memoryHeaps[i].size, used = o->memory_budget ? bud.heapUsage[i] : 0;
        const uint64_t budget = o->memory_budget ? BS_MIN(bud.heapBudget[i], size) : size;
        o->heaps[i].size = size;
        o->heaps[i].free = budget > used ? budget - used : 0;
        o->heaps[i].device_local = mp->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
        if (o->heaps[i].device_local && size > o->heap_bytes) o->heap_bytes = size;
    }
    for (int i = 0; i < o->n_types; i++) {
        o->types[i].flags = mp->memoryTypes[i].propertyFlags;
        o->types[i].heap = (int)mp->memoryTypes[i].heapIndex;
    }
    return 0;
}

static int describe(const bs_vk_fns *fn, VkPhysicalDevice p, int index, bs_vk_device_info *o,
                    VkPhysicalDeviceMemoryProperties *mp, uint32_t *real_type) {
    memset(o, 0, sizeof *o);
    VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &drv};
    VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    VkPhysicalDeviceProperties base;
    fn->vkGetPhysicalDeviceProperties(p, &base);
    const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
    const bool maint4 = base.apiVersion >= VK_API_VERSION_1_3 || has_ext(fn, p, "VK_KHR_maintenance4");
    if (maint4) m3.pNext = &m4;
    if (v12) fn->vkGetPhysicalDeviceProperties2(p, &pr);
    else pr.properties = base;
    o->index = index;
    snprintf(o->name, sizeof o->name, "%s", base.deviceName);
    o->type = type_of(base.deviceType);
    o->api_version = base.apiVersion;
    if (v12) snprintf(o->driver, sizeof o->driver, "%.120s %.120s", drv.driverName, drv.driverInfo);
    o->subgroup_size = v12 ? sub.subgroupSize : 0;
    o->shared_mem = base.limits.maxComputeSharedMemorySize;
    o->max_storage = base.limits.maxPerStageDescriptorStorageBuffers;
    o->max_groups_y = base.limits.maxComputeWorkGroupCount[1];
    o->max_binding = base.limits.maxStorageBufferRange;
    o->offset_align = (uint32_t)base.limits.minStorageBufferOffsetAlignment;
    o->timestamp_ns = base.limits.timestampPeriod;
    /* without Maintenance3 (Vulkan 1.0 drivers) nothing bounds one allocation but its heap */
    o->max_alloc = v12 && m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : UINT64_MAX;
    o->max_buffer = maint4 && v12 && m4.maxBufferSize ? BS_MIN(m4.maxBufferSize, o->max_alloc) : o->max_alloc;
    o->memory_budget = has_ext(fn, p, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (memory_info(fn, p, o, mp, real_type)) return -1;
    if (v12) {
        VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
        VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
        VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
        fn->vkGetPhysicalDeviceFeatures2(p, &f);
        o->int16 = f.features.shaderInt16;
        o->int8 = f12.shaderInt8;
        o->fp16 = f12.shaderFloat16;
        o->storage8 = f12.storageBuffer8BitAccess;
        o->storage16 = f11.storageBuffer16BitAccess;
        o->bda = f12.bufferDeviceAddress;
    }
    if (has_ext(fn, p, "VK_KHR_shader_integer_dot_product")) {
        VkPhysicalDeviceShaderIntegerDotProductFeatures dp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
        VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &dp};
        fn->vkGetPhysicalDeviceFeatures2(p, &f);
        o->dot_product = dp.shaderIntegerDotProduct;
    }
    o->coop_matrix = has_ext(fn, p, BS_VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (o->int8 && has_ext(fn, p, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) coop_shape_nv(fn, p, o);
    if (o->int8 && o->coop_matrix) coop_shape_khr(fn, p, o);
    bool ts = false;
    compute_family(fn, p, &ts);
    o->timestamps = ts && base.limits.timestampComputeAndGraphics;
    return 0;
}

int bs_vk_devices(bs_vk_device_info *out, int max) {
    bs_vk_instance *vi = bs_vk_instance_get();
    if (!vi) return -1;
    VkPhysicalDeviceMemoryProperties mp;
    uint32_t real_type[VK_MAX_MEMORY_TYPES];
    for (int i = 0; i < vi->n_phys && i < max; i++)
        if (describe(&vi->fn, vi->phys[i], i, &out[i], &mp, real_type)) return -1;
    return vi->n_phys;
}

int bs_vk_pick(bool named) {
    bs_vk_device_info info[16];
    const int n = bs_vk_devices(info, 16);
    if (n <= 0) return -1;
    const bool allow_cpu = named || bs_env_flag("BITSPARK_VK_ALLOW_CPU");
    static const int order[] = {BS_VK_DISCRETE, BS_VK_INTEGRATED, BS_VK_VIRTUAL, BS_VK_CPU, BS_VK_OTHER};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        if (!named && !allow_cpu && order[k] != BS_VK_DISCRETE && order[k] != BS_VK_INTEGRATED) break;
        if (!named && allow_cpu && order[k] == BS_VK_OTHER) break;
        for (int i = 0; i < n && i < 16; i++)
            if (info[i].type == order[k] && info[i].api_version >= VK_API_VERSION_1_2) return i;
    }
    return -1;
}

bs_vk_ctx *bs_vk_open(int index) {
    bs_vk_instance *vi = bs_vk_instance_get();
    if (!vi) return NULL;
    if (index < 0 || index >= vi->n_phys) {
        bs_error("no Vulkan device %d (%d found; see 'bitspark devices')", index, vi->n_phys);
        return NULL;
    }
    bs_vk_ctx *c = bs_xcalloc(1, sizeof *c);
    c->vi = vi;
    c->fn = &vi->fn;
    c->phys = vi->phys[index];
    if (describe(c->fn, c->phys, index, &c->info, &c->memprops, c->real_type)) {
        free(c);
        return NULL;
    }
    c->last_heap = -1;
    if (c->info.api_version < VK_API_VERSION_1_2) {
        bs_error("Vulkan device %d (%s) has Vulkan %u.%u; the backend needs 1.2", index, c->info.name,
                 VK_API_VERSION_MAJOR(c->info.api_version), VK_API_VERSION_MINOR(c->info.api_version));
        free(c);
        return NULL;
    }
    bool ts;
    const int fam = compute_family(c->fn, c->phys, &ts);
    if (fam < 0) {
        bs_error("Vulkan device %d (%s) has no compute queue", index, c->info.name);
        free(c);
        return NULL;
    }
    c->qfam = (uint32_t)fam;
    if (c->info.max_storage < BS_VK_PIPE_NEED_BIND) {   /* the kernels' bindings, said plainly */
        bs_error("Vulkan device %d (%s) allows %u storage buffers per kernel; bitspark's kernels need %d", index,
                 c->info.name, c->info.max_storage, (int)BS_VK_PIPE_NEED_BIND);
        free(c);
        return NULL;
    }
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = c->qfam,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    /* integer dot products (dp4a) for the int8 products where the device has them;
     * BITSPARK_VK_DP4A=0 keeps the plain shader (the same integers, so the same bits) */
    const char *dp_env = getenv("BITSPARK_VK_DP4A");
    c->dp4a = c->info.dot_product && !(dp_env && !strcmp(dp_env, "0"));
    /* mv_q's activation block sums: staged once per workgroup on a GPU (a shared load instead of
     * 8 dot products per weight row and block), each row's own on a CPU device, where the barrier
     * costs more than the sums (lavapipe: 12% slower staged, docs/kernels.md); BITSPARK_VK_ASUM=stage|row */
    const char *as_env = getenv("BITSPARK_VK_ASUM");
    c->asum_staged = as_env ? strcmp(as_env, "row") != 0 : c->info.type != BS_VK_CPU;
    /* the delta rule: 8 lanes per state column holding it in registers on a GPU, an invocation
     * per column on a CPU device, where the barriers cost more (lavapipe: the tiny model's decode
     * 30% slower with lanes); the same bits either way; BITSPARK_VK_DELTA=lanes|column */
    const char *dl_env = getenv("BITSPARK_VK_DELTA");
    c->delta_spread = (dl_env ? strcmp(dl_env, "column") != 0 : c->info.type != BS_VK_CPU) ? 8u : 1u;
    c->delta_cols = c->delta_spread == 8 ? 32u : 64u;   /* workgroups of 256 / 64 invocations */
    /* F32 products of few rows (bf16 alpha and beta): a workgroup per row on a GPU, where an
     * invocation per row looping over 5120 inputs leaves all but one unit idle; an invocation
     * per row on a CPU device (lavapipe: the workgroup's tree ~10x slower); BITSPARK_VK_F32N=0|1 */
    const char *fn_env = getenv("BITSPARK_VK_F32N");
    c->f32n = fn_env ? strcmp(fn_env, "0") != 0 : c->info.type != BS_VK_CPU;
    /* the products of many rows (vk_mm.c): int8 in shared memory, and for cooperative matrices
     * the NV or KHR extension and the Vulkan memory model its shaders declare */
    if (bs_vk_mm_want(c)) {
        free(c);
        return NULL;
    }
    const bool coop = c->mm == BS_VK_MM_COOP;
    VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf_nv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
                                                          .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmf_khr = {.sType = BS_VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
                                                            .cooperativeMatrix = VK_TRUE};
    void *cmf = !coop ? NULL : c->coop_khr ? (void *)&cmf_khr : (void *)&cmf_nv;
    VkPhysicalDeviceShaderIntegerDotProductFeatures dpf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
                                                           .pNext = cmf, .shaderIntegerDotProduct = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = c->dp4a ? (void *)&dpf : cmf,
                                            .shaderInt8 = c->info.int8, .vulkanMemoryModel = coop};
    const char *exts[3];
    uint32_t n_ext = 0;
    if (c->dp4a) exts[n_ext++] = "VK_KHR_shader_integer_dot_product";
    if (c->info.memory_budget) exts[n_ext++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
    if (coop) exts[n_ext++] = c->coop_khr ? BS_VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME : VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f12,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = n_ext, .ppEnabledExtensionNames = exts};
    VkResult r = c->fn->vkCreateDevice(c->phys, &di, NULL, &c->dev);
    if (r != VK_SUCCESS && coop && c->mm_auto) {   /* chosen, not asked for: the device without them */
        bs_log(0, "bitspark: Vulkan %s: no device with cooperative matrices (VkResult %d); products of many rows use mv_q\n",
               c->info.name, (int)r);
        c->mm = BS_VK_MM_OFF;
        c->mm_auto = false;
        f12.vulkanMemoryModel = VK_FALSE;
        dpf.pNext = NULL;
        if (!c->dp4a) f12.pNext = NULL;
        di.enabledExtensionCount = --n_ext;   /* (the coop extension is the last one) */
        r = c->fn->vkCreateDevice(c->phys, &di, NULL, &c->dev);
    }
    if (r != VK_SUCCESS) {
        bs_error("Vulkan device %d (%s): vkCreateDevice failed (VkResult %d)", index, c->info.name, (int)r);
        free(c);
        return NULL;
    }
    bs_vk_fns *fn = &vi->fn;
#define BS_VK_LOAD_D(f) if (!fn->f && !(fn->f = (PFN_##f)fn->vkGetDeviceProcAddr(c->dev, #f))) { bs_error("Vulkan: no %s", #f); goto fail; }
    /* device-level pointers from the first device; with one driver per process they are the
     * same for every device of it, and the loader's trampolines otherwise */
    BS_VK_DEVICE_FNS(BS_VK_LOAD_D)
    fn->vkGetDeviceQueue(c->dev, c->qfam, 0, &c->queue);
    /* one buffer holds at most what one binding, one allocation and one buffer may: weights
     * larger than that are split into parts (bs_vk_matrix_new), other buffers refused */
    c->max_binding = c->max_weight_binding = BS_MIN(c->info.max_binding, c->info.max_buffer);
    const char *mb = getenv("BITSPARK_VK_MAX_BINDING");   /* tests: force split tensors */
    if (mb && *mb) {
        uint64_t v = strtoull(mb, NULL, 10);
        if (v >= 1024 && v < c->max_binding) c->max_weight_binding = v;
    }
    if (bs_vk_pipes_init(c) || bs_vk_mm_check(c)) goto fail;
    return c;
fail:
    bs_vk_close(c);
    return NULL;
}

void bs_vk_close(bs_vk_ctx *c) {
    if (!c) return;
    if (c->dev) {
        bs_vk_settle(c);
        bs_vk_profile_print(c);
        bs_vk_pipes_free(c);
        c->fn->vkDestroyDevice(c->dev, NULL);
    }
    free(c);
}

const bs_vk_device_info *bs_vk_info(const bs_vk_ctx *c) { return &c->info; }
bool bs_vk_uses_dp4a(const bs_vk_ctx *c) { return c->dp4a; }
bool bs_vk_asum_staged(const bs_vk_ctx *c) { return c->asum_staged; }
int bs_vk_delta_spread(const bs_vk_ctx *c) { return (int)c->delta_spread; }
uint32_t bs_vk_delta_cols(const bs_vk_ctx *c) { return c->delta_cols; }

