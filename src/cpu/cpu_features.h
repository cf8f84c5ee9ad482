/* cpu_features.h: what this CPU can run, detected once at run time (x86-64: CPUID/XGETBV;
 * aarch64: getauxval(AT_HWCAP/AT_HWCAP2) on Linux, sysctlbyname("hw.optional.arm.FEAT_*") on
 * macOS), so one binary picks the fastest kernels on any machine. The dispatch level can be
 * lowered (never raised) with BITSPARK_CPU=scalar|avx2|avx512 (x86-64) or
 * scalar|neon|dotprod|i8mm (aarch64), or bs_cpu_set_level(), which is how the tests run every
 * available path against the scalar oracle. */
#ifndef BS_CPU_FEATURES_H
#define BS_CPU_FEATURES_H

#include <stdbool.h>

/* Kernel dispatch levels, ordered: a higher level implies every lower one. The numbers are
 * per architecture (x86-64 and aarch64 share 1 and 2); BS_CPU_TOP is this build's highest.
 * On aarch64 the x86 kernels are not built (their getters return NULL). */
enum bs_cpu_level {
    BS_CPU_SCALAR = 0,   /* portable C, the test oracle */
    BS_CPU_AVX2 = 1,     /* x86-64: AVX2 + FMA + F16C (Haswell / Zen 1 and later) */
    BS_CPU_AVX512 = 2,   /* x86-64: AVX-512 F/BW/VL/VNNI/VBMI (Ice Lake / Zen 4 and later) */
    BS_CPU_NEON = 1,     /* aarch64: Advanced SIMD (every ARMv8-A) */
    BS_CPU_DOTPROD = 2,  /* aarch64: + FEAT_DotProd sdot (Cortex-A76 / Neoverse N1 / Apple M1 up) */
    BS_CPU_I8MM = 3,     /* aarch64: + FEAT_I8MM smmla (Neoverse V1/N2, Graviton 3, Apple M2 up) */
};
#if defined(__aarch64__)
#define BS_CPU_TOP BS_CPU_I8MM
#define BS_CPU_ARM 1
#else
#define BS_CPU_TOP BS_CPU_AVX512
#endif

typedef struct bs_cpu_features {
    bool sse42, avx, avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512vbmi, avx512bf16, avx512bitalg;
    bool avx_vnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool amx_usable;       /* AMX present and the kernel granted XTILEDATA permission */
    bool os_avx512;        /* XCR0 says the OS saves ZMM / opmask state */
    bool neon, asimdhp, dotprod, i8mm, bf16, sve;   /* aarch64 */
} bs_cpu_features;

/* Detected features (cached; thread-safe after the first call). */
const bs_cpu_features *bs_cpu_features_get(void);
/* Highest level the hardware supports. */
int bs_cpu_max_level(void);
/* Highest level this process may use: min(hardware, BITSPARK_CPU). Tests loop up to it, so the
 * suite run with BITSPARK_CPU=avx2 behaves as on a CPU without AVX-512. */
int bs_cpu_top_level(void);
/* Level the kernels use: min(hardware, BITSPARK_CPU, bs_cpu_set_level). */
int bs_cpu_level(void);
/* Force a level for tests / benchmarks; clamped to the hardware maximum. Returns the level in
 * effect. Pass -1 to return to the default (environment or hardware). Not thread-safe against
 * concurrent matmuls. */
int bs_cpu_set_level(int level);
/* "scalar", "avx2", "avx512" (x86-64) or "scalar", "neon", "dotprod", "i8mm" (aarch64). */
const char *bs_cpu_level_name(int level);
/* Parse a level name; -1 if unknown. */
int bs_cpu_level_from_name(const char *name);
/* Short human-readable summary of the features ("AVX512 VNNI VBMI BF16 AVX_VNNI ..."). */
const char *bs_cpu_describe(void);
/* Request AMX tile permission from the kernel (Linux arch_prctl). True when AMX can be used. */
bool bs_cpu_enable_amx(void);

/* BS_AVX512_NOSAN follows the target attribute of every AVX-512 function. In a sanitizer build
 * on a machine without AVX-512 (CMake defines BS_SANITIZE_NO_AVX512) those functions can never
 * run, and instrumenting them was most of that build's compile time: they are left plain. */
#ifdef BS_SANITIZE_NO_AVX512
#define BS_AVX512_NOSAN __attribute__((no_sanitize("address", "undefined")))
#else
#define BS_AVX512_NOSAN
#endif

#endif
