/* test_cpu_features.c: BITSPARK_CPU lowers the dispatch level (never raises it), bs_cpu_set_level
 * clamps to the hardware, level names round-trip, the detected features are consistent with
 * the level, and the AMX permission request fails cleanly where there is no AMX. */
#include "cpu/cpu_features.h"
#include "test.h"

#include <stdlib.h>

int main(void) {
    setenv("BITSPARK_CPU", "scalar", 1);   /* read once, at the first query */
    const bs_cpu_features *f = bs_cpu_features_get();
    int max = bs_cpu_max_level();
    printf("cpu: %s, max level %s\n", bs_cpu_describe(), bs_cpu_level_name(max));
    CHECK_EQ_INT(bs_cpu_level(), BS_CPU_SCALAR);
    CHECK(max >= BS_CPU_SCALAR && max <= BS_CPU_TOP);
    CHECK_EQ_INT(bs_cpu_set_level(BS_CPU_TOP), BS_CPU_SCALAR);   /* env caps it */
    CHECK_EQ_INT(bs_cpu_set_level(-1), BS_CPU_SCALAR);
    CHECK_EQ_INT(bs_cpu_top_level(), BS_CPU_SCALAR);   /* what tests may use: the env's level */
#ifdef BS_CPU_ARM
    if (max >= BS_CPU_NEON) CHECK(f->neon);
    if (max >= BS_CPU_DOTPROD) CHECK(f->dotprod);
    if (max >= BS_CPU_I8MM) CHECK(f->i8mm);
    CHECK(!f->avx2 && !f->avx512f);
    CHECK_EQ_INT(bs_cpu_level_from_name("DotProd"), BS_CPU_DOTPROD);
    CHECK_EQ_INT(bs_cpu_level_from_name("avx2"), -1);   /* another architecture's level */
#else
    if (max >= BS_CPU_AVX2) CHECK(f->avx2 && f->fma && f->f16c);
    if (max >= BS_CPU_AVX512) CHECK(f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni && f->avx512vbmi);
    CHECK_EQ_INT(bs_cpu_level_from_name("AVX512"), BS_CPU_AVX512);
    CHECK(!f->neon && !f->dotprod);
#endif
    for (int lv = BS_CPU_SCALAR; lv <= BS_CPU_TOP; lv++)
        CHECK_EQ_INT(bs_cpu_level_from_name(bs_cpu_level_name(lv)), lv);
    CHECK_EQ_INT(bs_cpu_level_from_name("sse9"), -1);
    bool amx = bs_cpu_enable_amx();
    CHECK(!amx || (f->amx_tile && f->amx_int8 && f->amx_usable));
    CHECK_EQ_INT(bs_cpu_enable_amx(), amx);   /* idempotent */
    return test_summary("test_cpu_features");
}
