/* test_fp16.c: util.c's half-precision conversions against numpy's float16 (IEEE binary16,
 * round to nearest even), run as /usr/bin/python3 on files in BS_TMP:
 *  - all 65536 halves -> f32, bit for bit (NaN payloads included: both shift the payload up);
 *  - a sweep of floats -> f16: every half's value, the midpoints between neighbouring halves
 *    (ties) and one f32 ulp either side of them, the subnormal range, the overflow boundary
 *    (65504, 65519.99, 65520, inf), zeros, infinities and ~1M floats spread over all
 *    exponents. NaN inputs only need to stay NaN (numpy and F16C differ on signalling-NaN
 *    payloads; a quiet NaN is checked exactly).
 * The F16C row converters of ops_simd.c against the same references (and every tail length).
 * Also the bf16 conversion against its definition (round to nearest even on the top 16 bits). */
#include "cpu/cpu_features.h"
#include "cpu/ops_simd.h"
#include "test.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int read_file(const char *path, void *p, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t r = fread(p, 1, n, f);
    fclose(f);
    return r == n ? 0 : -1;
}

int main(void) {
    const char *tmp = getenv("BS_TMP") ? getenv("BS_TMP") : "/tmp";
    char in[512], out16[512], outh[512], cmd[2048];
    snprintf(in, sizeof in, "%s/fp16_in.f32", tmp);
    snprintf(out16, sizeof out16, "%s/fp16_ref.u16", tmp);
    snprintf(outh, sizeof outh, "%s/fp16_halves.f32", tmp);

    /* Build the sweep. */
    size_t cap = 1 << 21, n = 0;
    float *x = malloc(cap * sizeof *x);
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;            /* inf / nan handled below */
        float v = bs_f16_to_f32((uint16_t)h), next = bs_f16_to_f32((uint16_t)(h + 1));
        x[n++] = v;
        if ((h & 0x7fff) < 0x7bff) {                     /* midpoint to the next half away from 0 */
            float mid = (float)(((double)v + next) / 2);
            x[n++] = mid;
            x[n++] = u2f(f2u(mid) + 1);
            x[n++] = u2f(f2u(mid) - 1);
        }
    }
    const float special[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 70000.0f,
                             1e30f, -1e30f, 0x1p-24f, 0x1p-25f, u2f(0x33000001), 0x1p-26f,
                             0x1.8p-24f, 0x1.8p-25f, 1e-10f, -1e-10f, INFINITY, -INFINITY,
                             u2f(0x00000001), u2f(0x807fffff), 0x1.ffcp15f, 0x1.ffep15f};
    for (size_t i = 0; i < BS_ARRAY_LEN(special); i++) x[n++] = special[i];
    for (uint64_t u = 0; u < 0x100000000ull && n < cap; u += 4099) {
        float v = u2f((uint32_t)u);
        if (!isnan(v)) x[n++] = v;
    }
    CHECK(write_file(in, x, n * 4) == 0);

    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np, sys\n"
             "x = np.fromfile('%s', dtype='<f4')\n"
             "with np.errstate(over='ignore'):\n"
             "    x.astype('<f2').view('<u2').tofile('%s')\n"
             "np.arange(65536, dtype='<u2').view('<f2').astype('<f4').tofile('%s')\n\"",
             in, out16, outh);
    int rc = system(cmd);
    CHECKF(rc == 0, "numpy reference failed (rc %d): needs /usr/bin/python3 with numpy", rc);
    if (rc != 0) return test_summary("test_fp16");

    uint16_t *ref16 = malloc(n * 2);
    float *refh = malloc(65536 * 4);
    CHECK(read_file(out16, ref16, n * 2) == 0);
    CHECK(read_file(outh, refh, 65536 * 4) == 0);

    int bad_h2f = 0, bad_f2h = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (f2u(bs_f16_to_f32((uint16_t)h)) != f2u(refh[h])) {
            if (bad_h2f++ < 5) fprintf(stderr, "half 0x%04x: %a, numpy %a\n", h, bs_f16_to_f32((uint16_t)h), refh[h]);
        }
    for (size_t i = 0; i < n; i++)
        if (bs_f32_to_f16(x[i]) != ref16[i]) {
            if (bad_f2h++ < 5) fprintf(stderr, "float %a (0x%08x): 0x%04x, numpy 0x%04x\n", x[i], f2u(x[i]), bs_f32_to_f16(x[i]), ref16[i]);
        }
    CHECKF(bad_h2f == 0, "%d of 65536 halves convert differently", bad_h2f);
    CHECKF(bad_f2h == 0, "%d of %zu floats convert differently", bad_f2h, n);
    printf("compared %zu floats and 65536 halves with numpy\n", n);

    /* The F16C row converters (ops_simd.c) give the same bits on the whole sweep, at every
     * length (the padded tails), and NaN stays NaN. */
    if (bs_cpu_level() >= BS_CPU_AVX2) {
        uint16_t *h16 = malloc(n * 2);
        float *hf = malloc(65536 * 4);
        uint16_t all[65536];
        for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
        CHECK(bs_simd_f32_to_f16(h16, x, n) && bs_simd_f16_to_f32(hf, all, 65536));
        int bad_simd = 0;
        for (size_t i = 0; i < n; i++) bad_simd += h16[i] != ref16[i];
        for (uint32_t h = 0; h < 65536; h++)
            bad_simd += isnan(refh[h]) ? !isnan(hf[h]) : f2u(hf[h]) != f2u(refh[h]);
        for (size_t len = 1; len <= 19; len++) {   /* tails: each length against the scalar */
            CHECK(bs_simd_f32_to_f16(h16, x + 1000, len) && bs_simd_f16_to_f32(hf, all + 0x3a00, len));
            for (size_t i = 0; i < len; i++)
                bad_simd += h16[i] != bs_f32_to_f16(x[1000 + i]) || f2u(hf[i]) != f2u(bs_f16_to_f32(all[0x3a00 + i]));
        }
        const float nans[2] = {u2f(0x7fc00000), u2f(0x7f800001)};
        CHECK(bs_simd_f32_to_f16(h16, nans, 2) && (h16[0] & 0x7fff) > 0x7c00 && (h16[1] & 0x7fff) > 0x7c00);
        CHECKF(bad_simd == 0, "F16C row conversions: %d values differ", bad_simd);
        free(h16);
        free(hf);
    }

    /* NaN stays NaN; the canonical quiet NaN maps to 0x7e00 (numpy and F16C agree on it). */
    CHECK_EQ_INT(bs_f32_to_f16(u2f(0x7fc00000)), 0x7e00);
    CHECK_EQ_INT(bs_f32_to_f16(u2f(0xffc00000)), 0xfe00);
    CHECK((bs_f32_to_f16(u2f(0x7f800001)) & 0x7fff) > 0x7c00);
    CHECK(isnan(bs_f16_to_f32(bs_f32_to_f16(u2f(0x7fa00000)))));

    /* bf16: truncation of the low 16 bits with round to nearest even. */
    CHECK_EQ_INT(bs_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(bs_f32_to_bf16(u2f(0x3f808000)), 0x3f80);   /* tie, even stays */
    CHECK_EQ_INT(bs_f32_to_bf16(u2f(0x3f818000)), 0x3f82);   /* tie, odd rounds up */
    CHECK_EQ_INT(bs_f32_to_bf16(u2f(0x3f808001)), 0x3f81);
    CHECK_EQ_INT(bs_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80);   /* FLT_MAX rounds to inf */
    CHECK(isnan(bs_bf16_to_f32(bs_f32_to_bf16(NAN))));
    int bad_bf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = bs_bf16_to_f32((uint16_t)h);
        if (f2u(v) != h << 16) bad_bf++;
        else if (!isnan(v) && bs_f32_to_bf16(v) != h) bad_bf++;
    }
    CHECK_EQ_INT(bad_bf, 0);
    free(x);
    free(ref16);
    free(refh);
    return test_summary("test_fp16");
}
