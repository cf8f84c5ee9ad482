/* cpu_features.c: CPUID/XGETBV (x86-64), HWCAP or sysctl (aarch64) detection and the dispatch
 * level (see cpu_features.h). */
#include "cpu/cpu_features.h"
#include "io/util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define BS_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static bs_cpu_features g_feat;
static int g_max_level;
static int g_env_level = -1;      /* from BITSPARK_CPU, -1 = not set */
static int g_forced_level = -1;   /* from bs_cpu_set_level */
static char g_desc[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef BS_X86
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect_x86(bs_cpu_features *f) {
    unsigned r[4], max_leaf;
    __cpuid(0, r[0], r[1], r[2], r[3]);
    max_leaf = r[0];
    cpuid(1, 0, r);
    bool osxsave = (r[2] >> 27) & 1;
    f->sse42 = (r[2] >> 20) & 1;
    f->fma = (r[2] >> 12) & 1;
    f->avx = (r[2] >> 28) & 1;
    f->f16c = (r[2] >> 29) & 1;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;                 /* XMM and YMM state */
    f->os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;    /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!os_avx) f->avx = f->fma = f->f16c = false;
    if (max_leaf < 7) return;
    cpuid(7, 0, r);
    unsigned b = r[1], c = r[2], d = r[3];
    f->avx2 = os_avx && ((b >> 5) & 1);
    f->bmi2 = (b >> 8) & 1;
    if (f->os_avx512) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vbmi = (c >> 1) & 1;
        f->avx512bitalg = (c >> 12) & 1;
        f->avx512vnni = (c >> 11) & 1;
    }
    bool os_amx = (xcr0 & 0x60000) == 0x60000;        /* XTILECFG and XTILEDATA */
    f->amx_bf16 = os_amx && ((d >> 22) & 1);
    f->amx_tile = os_amx && ((d >> 24) & 1);
    f->amx_int8 = os_amx && ((d >> 25) & 1);
    cpuid(7, 1, r);
    f->avx_vnni = os_avx && ((r[0] >> 4) & 1);
    f->avx512bf16 = f->os_avx512 && ((r[0] >> 5) & 1);
}
#endif

#if defined(__aarch64__) && defined(__linux__)
/* Bits of the Linux arm64 HWCAP words (arch/arm64/include/uapi/asm/hwcap.h), spelled out so an
 * older libc's headers do not matter. */
enum {
    HWCAP_ASIMD_ = 1 << 1, HWCAP_ASIMDHP_ = 1 << 10, HWCAP_ASIMDDP_ = 1 << 20, HWCAP_SVE_ = 1 << 22,
    HWCAP2_I8MM_ = 1 << 13, HWCAP2_BF16_ = 1 << 14,
};
static void detect_arm(bs_cpu_features *f) {
    const unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    f->neon = (h & HWCAP_ASIMD_) != 0;
    f->asimdhp = (h & HWCAP_ASIMDHP_) != 0;
    f->dotprod = (h & HWCAP_ASIMDDP_) != 0;
    f->sve = (h & HWCAP_SVE_) != 0;
    f->i8mm = (h2 & HWCAP2_I8MM_) != 0;
    f->bf16 = (h2 & HWCAP2_BF16_) != 0;
}
#elif defined(__aarch64__) && defined(__APPLE__)
static bool sysctl_flag(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v != 0;
}
static void detect_arm(bs_cpu_features *f) {
    f->neon = true;   /* every Apple arm64 CPU */
    f->asimdhp = sysctl_flag("hw.optional.arm.FEAT_FP16");
    f->dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    f->i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
    f->bf16 = sysctl_flag("hw.optional.arm.FEAT_BF16");
}
#elif defined(__aarch64__)
static void detect_arm(bs_cpu_features *f) { f->neon = true; }   /* Advanced SIMD is baseline */
#endif

static void describe(void) {
    const bs_cpu_features *f = &g_feat;
    struct { bool on; const char *name; } list[] = {
        {f->avx2, "AVX2"}, {f->fma, "FMA"}, {f->f16c, "F16C"}, {f->avx512f, "AVX512F"},
        {f->avx512bw, "BW"}, {f->avx512vl, "VL"}, {f->avx512vnni, "VNNI"},
        {f->avx512vbmi, "VBMI"}, {f->avx512bitalg, "BITALG"}, {f->avx512bf16, "BF16"}, {f->avx_vnni, "AVX_VNNI"},
        {f->amx_int8, "AMX_INT8"}, {f->amx_bf16, "AMX_BF16"},
        {f->neon, "NEON"}, {f->asimdhp, "FP16"}, {f->dotprod, "DOTPROD"}, {f->i8mm, "I8MM"},
        {f->bf16, "BF16"}, {f->sve, "SVE"},
    };
    size_t len = 0;
    g_desc[0] = 0;
    for (size_t i = 0; i < BS_ARRAY_LEN(list); i++) {
        if (!list[i].on) continue;
        int k = snprintf(g_desc + len, sizeof g_desc - len, "%s%s", len ? " " : "", list[i].name);
        if (k < 0 || (size_t)k >= sizeof g_desc - len) break;
        len += (size_t)k;
    }
    if (!len) snprintf(g_desc, sizeof g_desc, "scalar");
}

static void init(void) {
    memset(&g_feat, 0, sizeof g_feat);
    const bs_cpu_features *f = &g_feat;
    g_max_level = BS_CPU_SCALAR;
#ifdef BS_X86
    detect_x86(&g_feat);
    if (f->avx2 && f->fma && f->f16c) g_max_level = BS_CPU_AVX2;
    if (g_max_level == BS_CPU_AVX2 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq &&
        f->avx512vnni && f->avx512vbmi)
        g_max_level = BS_CPU_AVX512;
#elif defined(__aarch64__)
    detect_arm(&g_feat);
    if (f->neon) g_max_level = BS_CPU_NEON;
    if (g_max_level == BS_CPU_NEON && f->dotprod) g_max_level = BS_CPU_DOTPROD;
    if (g_max_level == BS_CPU_DOTPROD && f->i8mm) g_max_level = BS_CPU_I8MM;
#endif
    const char *env = getenv("BITSPARK_CPU");
    if (env && *env) {
        int lv = bs_cpu_level_from_name(env);
        if (lv < 0) fprintf(stderr, "bitspark: ignoring unknown BITSPARK_CPU=%s\n", env);
        else g_env_level = lv;
    }
    describe();
}

const bs_cpu_features *bs_cpu_features_get(void) {
    pthread_once(&g_once, init);
    return &g_feat;
}

int bs_cpu_max_level(void) {
    pthread_once(&g_once, init);
    return g_max_level;
}

int bs_cpu_top_level(void) {
    pthread_once(&g_once, init);
    return g_env_level >= 0 && g_env_level < g_max_level ? g_env_level : g_max_level;
}

int bs_cpu_level(void) {
    pthread_once(&g_once, init);
    int lv = g_max_level;
    if (g_env_level >= 0 && g_env_level < lv) lv = g_env_level;
    if (g_forced_level >= 0 && g_forced_level < lv) lv = g_forced_level;
    return lv;
}

int bs_cpu_set_level(int level) {
    pthread_once(&g_once, init);
    g_forced_level = level < 0 ? -1 : level;
    return bs_cpu_level();
}

const char *bs_cpu_level_name(int level) {
#ifdef BS_CPU_ARM
    static const char *const names[] = {"scalar", "neon", "dotprod", "i8mm"};
#else
    static const char *const names[] = {"scalar", "avx2", "avx512"};
#endif
    return level >= 0 && level <= BS_CPU_TOP ? names[level] : "unknown";
}

int bs_cpu_level_from_name(const char *name) {
    for (int lv = BS_CPU_SCALAR; lv <= BS_CPU_TOP; lv++)
        if (strcasecmp(name, bs_cpu_level_name(lv)) == 0) return lv;
    return -1;
}

const char *bs_cpu_describe(void) {
    pthread_once(&g_once, init);
    return g_desc;
}

bool bs_cpu_enable_amx(void) {
    pthread_once(&g_once, init);
#if defined(BS_X86) && defined(__linux__) && defined(SYS_arch_prctl)
    static int state = -1;   /* benign race: the syscall is idempotent */
    if (state < 0) {
        const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
        state = g_feat.amx_tile && g_feat.amx_int8 &&
                syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        g_feat.amx_usable = state;
    }
    return state == 1;
#else
    return false;
#endif
}
