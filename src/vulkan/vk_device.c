/* vk_device.c: the Vulkan loader opened at run time, the process's instance (with the
 * validation layer and a message counter when BITSPARK_VK_VALIDATE=1), what each physical
 * device offers, the --device rule and contexts (logical device + one compute queue). */
#include "vulkan/vk_internal.h"
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
    const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "bitspark",
                             .pEngineName = "bitspark", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app,
                               .enabledLayerCount = validate, .ppEnabledLayerNames = &layer,
                               .enabledExtensionCount = validate, .ppEnabledExtensionNames = &ext};
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

static void describe(const bs_vk_fns *fn, VkPhysicalDevice p, int index, bs_vk_device_info *o) {
    memset(o, 0, sizeof *o);
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &drv};
    VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    VkPhysicalDeviceProperties base;
    fn->vkGetPhysicalDeviceProperties(p, &base);
    const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
    if (v12) fn->vkGetPhysicalDeviceProperties2(p, &pr);
    else pr.properties = base;
    o->index = index;
    snprintf(o->name, sizeof o->name, "%s", base.deviceName);
    o->type = type_of(base.deviceType);
    o->api_version = base.apiVersion;
    if (v12) snprintf(o->driver, sizeof o->driver, "%.120s %.120s", drv.driverName, drv.driverInfo);
    o->subgroup_size = v12 ? sub.subgroupSize : 0;
    o->shared_mem = base.limits.maxComputeSharedMemorySize;
    o->max_binding = base.limits.maxStorageBufferRange;
    o->timestamp_ns = base.limits.timestampPeriod;
    VkPhysicalDeviceMemoryProperties mp;
    fn->vkGetPhysicalDeviceMemoryProperties(p, &mp);
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[i].size > o->heap_bytes)
            o->heap_bytes = mp.memoryHeaps[i].size;
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
    o->coop_matrix = has_ext(fn, p, "VK_KHR_cooperative_matrix");
    bool ts = false;
    compute_family(fn, p, &ts);
    o->timestamps = ts && base.limits.timestampComputeAndGraphics;
}

int bs_vk_devices(bs_vk_device_info *out, int max) {
    bs_vk_instance *vi = bs_vk_instance_get();
    if (!vi) return -1;
    for (int i = 0; i < vi->n_phys && i < max; i++) describe(&vi->fn, vi->phys[i], i, &out[i]);
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
    describe(c->fn, c->phys, index, &c->info);
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
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = c->qfam,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    /* integer dot products (dp4a) for the int8 products where the device has them;
     * BITSPARK_VK_DP4A=0 keeps the plain shader (the same integers, so the same bits) */
    const char *dp_env = getenv("BITSPARK_VK_DP4A");
    c->dp4a = c->info.dot_product && !(dp_env && !strcmp(dp_env, "0"));
    VkPhysicalDeviceShaderIntegerDotProductFeatures dpf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
                                                           .shaderIntegerDotProduct = VK_TRUE};
    const char *dp_ext = "VK_KHR_shader_integer_dot_product";
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = c->dp4a ? &dpf : NULL,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = c->dp4a, .ppEnabledExtensionNames = &dp_ext};
    VkResult r = c->fn->vkCreateDevice(c->phys, &di, NULL, &c->dev);
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
    fn->vkGetPhysicalDeviceMemoryProperties(c->phys, &c->memprops);
    c->max_binding = c->max_weight_binding = c->info.max_binding;
    const char *mb = getenv("BITSPARK_VK_MAX_BINDING");   /* tests: force split tensors */
    if (mb && *mb) {
        uint64_t v = strtoull(mb, NULL, 10);
        if (v >= 1024 && v < c->max_binding) c->max_weight_binding = v;
    }
    if (bs_vk_pipes_init(c)) goto fail;
    return c;
fail:
    bs_vk_close(c);
    return NULL;
}

void bs_vk_close(bs_vk_ctx *c) {
    if (!c) return;
    if (c->dev) {
        bs_vk_profile_print(c);
        bs_vk_pipes_free(c);
        c->fn->vkDestroyDevice(c->dev, NULL);
    }
    free(c);
}

const bs_vk_device_info *bs_vk_info(const bs_vk_ctx *c) { return &c->info; }
bool bs_vk_uses_dp4a(const bs_vk_ctx *c) { return c->dp4a; }

