/* kernels_avx512.c: AVX-512 (F/BW/VL/DQ/VNNI/VBMI) matmul kernels. Compiled with per-function
 * target attributes so the binary still runs on CPUs without AVX-512: nothing here is called
 * unless bs_cpu_level() says the CPU has it.
 *
 * Register tiles: MR weight rows x NR activation rows share each decoded weight block and
 * each activation load; every (weight row, activation row) pair owns one accumulator and
 * sees exactly the same operations whatever MR and NR are, so results never depend on the
 * tile (the invariance tests/test_kernels.c checks bit for bit).
 *
 * Per format (activations in the split Q8 layout of kernels.h unless noted):
 *   Q1_0  bits -> {0,2} bytes with a mask move; dpbusd seeded with -sum(q) gives sum(+-q).
 *   Q2_0  (g128 / g64 / PQ2_0) 2-bit codes unpacked with vpmultishiftqb; dpbusd seeded with
 *         -sum(q) gives sum((c-1) q).
 *   Q8_0  |w| (u8) x q negated where w < 0, dpbusd.
 *   F32/F16/BF16  activations in f32 (rounded to the weight type, exact products), FMA. */
#include "cpu/kernels.h"
#include "cpu/kernels_quant.h"

#include "cpu/cpu_features.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define T512B __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,fma,f16c,avx2"))) BS_AVX512_NOSAN
#define INL inline __attribute__((always_inline))

enum { FMT_Q1, FMT_Q2, FMT_Q2G64 };
#define PF_DIST 1024   /* software prefetch distance along a weight row, bytes */

static INL uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static INL uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static T512 INL float f16(const uint8_t *p) { return _cvtsh_ss(ld16(p)); }

/* 16 bytes of 2-bit codes (weight j in bits 2(j%4) of byte j/4) -> 64 code bytes in order. */
static T512 INL __m512i unpack2(const uint8_t *p) {
    const __m512i ctrl = _mm512_set1_epi64(0x0E0C0A0806040200LL);
    __m512i v = _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)p));
    return _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, v), _mm512_set1_epi8(3));
}

/* 64 sign bits -> bytes {0, 2} (2 * bit). */
static T512 INL __m512i unpack1(const uint8_t *p) {
    return _mm512_maskz_mov_epi8(_cvtu64_mask64(ld64(p)), _mm512_set1_epi8(2));
}

/* One MR x NR tile of the Q1_0 / Q2_0 family over a whole row. w: weight row o, rb: row
 * bytes, y: &y[a0 * ldy + o]. A step covers 128 elements (64 for g64), i.e. one block. */
static T512 INL void tile_q12(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                             int64_t ldy, const int fmt, const int MR, const int NR) {
    const int64_t n = A->n;
    const int S = fmt == FMT_Q2G64 ? 64 : 128;
    const size_t bsz = fmt == FMT_Q1 ? 18 : fmt == FMT_Q2 ? 34 : 18;
    const int64_t nsteps = n / S;
    __m512 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsteps; b++) {
        __m512i c0[4], c1[4];
        __m512 dw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * bsz;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            dw[m] = _mm512_set1_ps(f16(p));
            if (fmt == FMT_Q1) {
                c0[m] = unpack1(p + 2);
                c1[m] = unpack1(p + 10);
            } else if (fmt == FMT_Q2) {
                c0[m] = unpack2(p + 2);
                c1[m] = unpack2(p + 18);
            } else {
                c0[m] = unpack2(p + 2);
            }
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const int8_t *q = A->qs + row * n + b * S;
            const int32_t *ns = A->nsum + row * (n / 4) + b * (S / 4);
            const float *dl = A->dl + row * (n / 4) + b * (S / 4);
            const __m512i x0 = _mm512_loadu_si512(q);
            const __m512 d0 = _mm512_loadu_ps(dl);
            if (fmt != FMT_Q2G64) {
                const __m512i x1 = _mm512_loadu_si512(q + 64);
                const __m512 d1 = _mm512_loadu_ps(dl + 16);
                for (int m = 0; m < MR; m++) {
                    __m512i i0 = _mm512_dpbusd_epi32(_mm512_loadu_si512(ns), c0[m], x0);
                    __m512i i1 = _mm512_dpbusd_epi32(_mm512_loadu_si512(ns + 16), c1[m], x1);
                    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(i0), d0);
                    t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), d1, t);
                    acc[m][r] = _mm512_fmadd_ps(t, dw[m], acc[m][r]);
                }
            } else {
                for (int m = 0; m < MR; m++) {
                    __m512i i0 = _mm512_dpbusd_epi32(_mm512_loadu_si512(ns), c0[m], x0);
                    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(i0), d0);
                    acc[m][r] = _mm512_fmadd_ps(t, dw[m], acc[m][r]);
                }
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = _mm512_reduce_add_ps(acc[m][r]);
}

/* --- P128 kernels (need BITALG): activations in the P128 layout of kernels.h ---------------
 * Q1_0: the 16 bytes of sign bits are broadcast to [lo, hi, lo, hi, ..] qwords and
 * vpshufbitqmb picks, for mask byte j, 8 bits of qword j, giving the two 64-bit masks whose
 * bytes line up with the P128 quants. Q2_0: vpermw puts the 16-bit code word of each P128
 * qword in place, vpmultishiftqb + and extract the codes. Per (weight row, activation row)
 * and 128 weights: 2 dpbusd (the first seeded with -sum q), 1 cvt, 1 mul, 1 FMA. */
static T512B INL void p128_masks(const uint8_t *bits, __mmask64 *m0, __mmask64 *m1) {
    /* control byte 8j+k: bit 16*(j/2) + k (+8 for the second mask) of qword j */
    const __m512i c0 = _mm512_set_epi64(0x3736353433323130LL, 0x3736353433323130LL, 0x2726252423222120LL,
                                        0x2726252423222120LL, 0x1716151413121110LL, 0x1716151413121110LL,
                                        0x0706050403020100LL, 0x0706050403020100LL);
    const __m512i c1 = _mm512_add_epi8(c0, _mm512_set1_epi8(8));
    __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bits));
    *m0 = _mm512_bitshuffle_epi64_mask(b, c0);
    *m1 = _mm512_bitshuffle_epi64_mask(b, c1);
}

/* 16 code words (32 bytes: words 0-7 = elements 0-63, 8-15 = 64-127) -> the two P128 halves. */
static T512B INL void p128_codes(__m512i words, __m512i *c0, __m512i *c1) {
    /* qword j of half h takes word 2*(j/2) + 8*(j%2) + h */
    const __m512i i0 = _mm512_set_epi64(14, 6, 12, 4, 10, 2, 8, 0);
    const __m512i i1 = _mm512_set_epi64(15, 7, 13, 5, 11, 3, 9, 1);
    const __m512i ctrl = _mm512_set1_epi64(0x0E0C0A0806040200LL);
    const __m512i three = _mm512_set1_epi8(3);
    /* word positions 4j of the result (qword j, low word) */
    __m512i w0 = _mm512_maskz_permutexvar_epi16(0x11111111, i0, words);
    __m512i w1 = _mm512_maskz_permutexvar_epi16(0x11111111, i1, words);
    *c0 = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, w0), three);
    *c1 = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, w1), three);
}

static T512B INL void tile_p128(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                               int64_t ldy, const int fmt, const int MR, const int NR) {
    const int64_t n = A->n, nsteps = n / 128;
    const size_t step = fmt == FMT_Q1 ? 18 : fmt == FMT_Q2 ? 34 : 36;
    __m512 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm512_setzero_ps();
    const __m512i two = _mm512_set1_epi8(2);
    for (int64_t b = 0; b < nsteps; b++) {
        __m512i c0[4], c1[4];
        __m512 dw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)b * step;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            if (fmt == FMT_Q1) {
                __mmask64 k0, k1;
                p128_masks(p + 2, &k0, &k1);
                c0[m] = _mm512_maskz_mov_epi8(k0, two);
                c1[m] = _mm512_maskz_mov_epi8(k1, two);
                dw[m] = _mm512_set1_ps(f16(p));
            } else if (fmt == FMT_Q2) {
                p128_codes(_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2))), &c0[m], &c1[m]);
                dw[m] = _mm512_set1_ps(f16(p));
            } else {   /* two g64 blocks: elements 0-63 (lanes of even qword pairs) and 64-127 */
                __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 2))),
                                                    _mm_loadu_si128((const __m128i *)(p + 20)), 1);
                p128_codes(_mm512_zextsi256_si512(v), &c0[m], &c1[m]);
                dw[m] = _mm512_mask_blend_ps(0xCCCC, _mm512_set1_ps(f16(p)), _mm512_set1_ps(f16(p + 18)));
            }
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const int8_t *q = A->qs + row * n + b * 128;
            const int32_t *ns = A->nsum + row * (n / 4) + b * 16;   /* row stride n/4, 16 lanes used per 128 */
            const __m512 dl = _mm512_loadu_ps(A->dl + row * (n / 4) + b * 16);
            const __m512i x0 = _mm512_loadu_si512(q), x1 = _mm512_loadu_si512(q + 64);
            for (int m = 0; m < MR; m++) {
                __m512i i = _mm512_dpbusd_epi32(_mm512_loadu_si512(ns), c0[m], x0);
                i = _mm512_dpbusd_epi32(i, c1[m], x1);
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(dl, dw[m]), acc[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = _mm512_reduce_add_ps(acc[m][r]);
}

/* Q8_0 weights: a step is two 32-blocks (64 elements); an odd last block is masked. */
static T512 INL void tile_q8(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                            int64_t ldy, const int MR, const int NR) {
    const int64_t n = A->n, nb = n / 32;
    __m512 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < (nb + 1) / 2; s++) {
        const int full = 2 * s + 1 < nb;
        const __mmask64 bm = full ? ~(__mmask64)0 : 0xFFFFFFFFull;
        const __mmask16 lm = full ? 0xFFFF : 0x00FF;
        __m512i aw[4];
        __mmask64 neg[4];
        __m512 dw[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)s * 68;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            __m256i lo = _mm256_loadu_si256((const __m256i *)(p + 2));
            __m256i hi = full ? _mm256_loadu_si256((const __m256i *)(p + 36)) : _mm256_setzero_si256();
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            neg[m] = _mm512_movepi8_mask(v);
            aw[m] = _mm512_abs_epi8(v);
            __m256 dlo = _mm256_set1_ps(f16(p)), dhi = _mm256_set1_ps(full ? f16(p + 34) : 0.0f);
            dw[m] = _mm512_insertf32x8(_mm512_castps256_ps512(dlo), dhi, 1);
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const __m512i x = _mm512_maskz_loadu_epi8(bm, A->qs + row * n + s * 64);
            const __m512 d = _mm512_maskz_loadu_ps(lm, A->dl + row * (n / 4) + s * 16);
            for (int m = 0; m < MR; m++) {
                __m512i xs = _mm512_mask_sub_epi8(x, neg[m], _mm512_setzero_si512(), x);
                __m512i i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw[m], xs);
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(d, dw[m]), acc[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = _mm512_reduce_add_ps(acc[m][r]);
}

/* Float weights against f32 activations; a step is 16 elements, the tail is masked. */
static T512 INL __m512 load_w(const uint8_t *p, int type, __mmask16 k) {
    if (type == BS_F32) return _mm512_maskz_loadu_ps(k, p);
    __m256i h = _mm256_maskz_loadu_epi16(k, p);
    if (type == BS_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static T512 INL void tile_f(const uint8_t *w, size_t rb, const bs_acts *A, int64_t a0, float *y,
                           int64_t ldy, const int type, const int MR, const int NR) {
    const int64_t n = A->n;
    const size_t es = type == BS_F32 ? 4 : 2;
    __m512 acc[4][BS_KMAX_ROWS];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[4];
        for (int m = 0; m < MR; m++) {
            const uint8_t *p = w + (size_t)m * rb + (size_t)i * es;
            _mm_prefetch((const char *)p + PF_DIST, _MM_HINT_T0);
            wv[m] = load_w(p, type, k);
        }
        for (int r = 0; r < NR; r++) {
            const float *x = (const float *)((const uint8_t *)A->raw + (size_t)(a0 + r) * A->raw_row) + i;
            const __m512 xv = _mm512_maskz_loadu_ps(k, x);
            for (int m = 0; m < MR; m++) acc[m][r] = _mm512_fmadd_ps(wv[m], xv, acc[m][r]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) y[r * ldy + m] = _mm512_reduce_add_ps(acc[m][r]);
}

/* --- BS_PACK_Q1_X16 (kernels.h): 16 weight rows per vector, lanes = rows ---------------------
 * Per activation row and 64 weights of 16 rows: one mask move (shared by all activation rows)
 * and one vpdpbusd with the 4 activation bytes broadcast. Each 32-column group is seeded with
 * -sum(q) (so 2*bit - 1 signs come out), converted once and scaled by the group's activation
 * scale; the 16 rows' block scales multiply once per 128 columns. */
static T512 INL void tile_x16(const uint8_t *pk, const bs_acts *A, int64_t a0, float *y, int64_t ldy,
                             const int NR) {
    const int64_t n = A->n, nb = n / 128, ng = n / 32;
    const __m512i two = _mm512_set1_epi8(2);
    __m512 acc[BS_KMAX_ROWS];
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *base = pk + (size_t)b * 288;
        _mm_prefetch((const char *)base + PF_DIST, _MM_HINT_T0);
        _mm_prefetch((const char *)base + PF_DIST + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)base + PF_DIST + 128, _MM_HINT_T0);
        _mm_prefetch((const char *)base + PF_DIST + 192, _MM_HINT_T0);
        _mm_prefetch((const char *)base + PF_DIST + 256, _MM_HINT_T0);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)base));
        __m512 t[BS_KMAX_ROWS];
        for (int g = 0; g < 4; g++) {
            /* U independent integer chains per row hide the vpdpbusd latency when NR is small;
             * integer sums are exact, so the split never changes a result */
            const int U = NR <= 2 ? 4 : NR <= 4 ? 2 : 1;
            __m512i i[BS_KMAX_ROWS], i2[BS_KMAX_ROWS][4];
            for (int r = 0; r < NR; r++) {
                i2[r][0] = _mm512_set1_epi32(A->gsum[(a0 + r) * ng + 4 * b + g]);
                for (int u = 1; u < U; u++) i2[r][u] = _mm512_setzero_si512();
            }
            for (int w = 0; w < 8; w++) {
                const __m512i c = _mm512_maskz_mov_epi8(_cvtu64_mask64(ld64(base + 32 + 8 * (8 * g + w))), two);
                for (int r = 0; r < NR; r++) {
                    int32_t x4;
                    memcpy(&x4, A->qs + (a0 + r) * n + 128 * b + 32 * g + 4 * w, 4);
                    i2[r][w % U] = _mm512_dpbusd_epi32(i2[r][w % U], c, _mm512_set1_epi32(x4));
                }
            }
            for (int r = 0; r < NR; r++) {
                i[r] = i2[r][0];
                for (int u = 1; u < U; u++) i[r] = _mm512_add_epi32(i[r], i2[r][u]);
            }
            for (int r = 0; r < NR; r++) {
                const __m512 dx = _mm512_set1_ps(A->dl[(a0 + r) * (n / 4) + 8 * (4 * b + g)]);
                t[r] = g == 0 ? _mm512_mul_ps(_mm512_cvtepi32_ps(i[r]), dx)
                              : _mm512_fmadd_ps(_mm512_cvtepi32_ps(i[r]), dx, t[r]);
            }
        }
        for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(t[r], dw, acc[r]);
    }
    for (int r = 0; r < NR; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);
}

#define X16_CASE(NR) \
    case NR: for (int64_t o = o0; o < o1; o += 16) tile_x16(pk + (size_t)(o / 16) * gbytes, A, a0, yy + o, ldy, NR); break;

static T512 void k_x16_q1_0(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0,
                            int na, float *y, int64_t ldy) {
    const uint8_t *pk = W->packed;
    const size_t gbytes = (size_t)(W->ne0 / 128) * 288;
    float *yy = y + a0 * ldy;
    switch (na) {
    X16_CASE(1) X16_CASE(2) X16_CASE(3) X16_CASE(4) X16_CASE(5) X16_CASE(6) X16_CASE(7)
    default:   /* 8 rows as 4 + 4 tiles: ~8% faster than one 8-row tile, whose working set
                * outgrows the registers; a row's operations are the same in any tile */
        for (int64_t o = o0; o < o1; o += 16) {
            const uint8_t *g = pk + (size_t)(o / 16) * gbytes;
            tile_x16(g, A, a0, yy + o, ldy, 4);
            tile_x16(g, A, a0 + 4, yy + 4 * ldy + o, ldy, 4);
        }
        break;
    }
}

/* --- BS_PACK_Q1_L128 (kernels.h): 128 rows per group, nibble lookups ----------------------
 * One activation row over one 128-row group. Per 4-column group the 64-byte chunk's nibbles
 * index the group's 16-entry int16 table of signed sums (vpermw, the table in both halves of
 * the vector), 4 lookups per chunk, one per nibble position i of a 16-bit lane; per 32-column
 * group the 8 chunks' sums (at most 32 * 128 in size) are widened, half h of sum i giving rows
 * 16q..16q+15 for q = 2i + h (the layout's slots), and go through the same int -> float steps
 * as tile_x16. Rows of a batch run one after another over the group (it stays in L1/L2):
 * measured faster than two rows per pass, whose accumulators do not fit the registers. */
static T512 INL void tile_l128(const uint8_t *pk, const bs_acts *A, int64_t r0, float *y, int64_t b0, int64_t b1,
                               const uint8_t *pf, int pfl) {
    const int64_t n = A->n;
    const uint8_t *lut = A->lut + (size_t)r0 * bs_l128_lut_stride(n);
    const float *dl = A->dl + r0 * (n / 4);
    __m512 acc[8], t[8];
    for (int q = 0; q < 8; q++) {   /* blocks before b0 left their sums in y (floats reload exactly) */
        t[q] = _mm512_setzero_ps();
        acc[q] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(y + 16 * q);
    }
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *base = pk + (size_t)b * BS_L128_BLOCK;
        for (int l = 0; l < pfl; l++) _mm_prefetch((const char *)pf + 64 * l, _MM_HINT_T0);
        pf += 64 * pfl;
        for (int g = 0; g < 4; g++) {
            __m512i P[4];
            for (int i = 0; i < 4; i++) P[i] = _mm512_setzero_si512();
            for (int c = 0; c < 8; c++) {
                const int cg = 8 * g + c;
                const __m512i v = _mm512_loadu_si512(base + 256 + 64 * cg);
                const __m512i tab = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(lut + (size_t)(32 * b + cg) * 32)));
                /* vpermw reads 5 index bits, and bit 4 picks a copy of the same table, so a
                 * shift is all the index work (vpshufb would need masks and two byte planes) */
                P[0] = _mm512_add_epi16(P[0], _mm512_permutexvar_epi16(v, tab));
                P[1] = _mm512_add_epi16(P[1], _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), tab));
                P[2] = _mm512_add_epi16(P[2], _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), tab));
                P[3] = _mm512_add_epi16(P[3], _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), tab));
            }
            const __m512 dx = _mm512_set1_ps(dl[8 * (4 * b + g)]);
            for (int i = 0; i < 4; i++) {   /* vectors 2i, 2i + 1: the halves of P[i] */
                const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(P[i])));
                const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(P[i], 1)));
                t[2 * i] = g == 0 ? _mm512_mul_ps(f0, dx) : _mm512_fmadd_ps(f0, dx, t[2 * i]);
                t[2 * i + 1] = g == 0 ? _mm512_mul_ps(f1, dx) : _mm512_fmadd_ps(f1, dx, t[2 * i + 1]);
            }
        }
        for (int q = 0; q < 8; q++)
            acc[q] = _mm512_fmadd_ps(t[q], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(base + 32 * q))), acc[q]);
    }
    for (int q = 0; q < 8; q++) _mm512_storeu_ps(y + 16 * q, acc[q]);
}

/* bs_l128_tables for two 4-column groups per step: lane l of 32 int16 lanes is entry l % 16 of
 * group l / 16, T = -sum(a) + 2 * (the a_i whose bit i of the entry is set), exact like the
 * scalar version and stored as is: the two groups' tables. */
#define L128_SEL16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const int16_t l128_sel[4][32] = {   /* lane l: activation i of group l / 16 */
    {L128_SEL16(0), L128_SEL16(4)}, {L128_SEL16(1), L128_SEL16(5)},
    {L128_SEL16(2), L128_SEL16(6)}, {L128_SEL16(3), L128_SEL16(7)}};
static const uint32_t l128_bit[4] = {0xAAAAAAAAu, 0xCCCCCCCCu, 0xF0F0F0F0u, 0xFF00FF00u};   /* bit i of l % 16 */

T512 void bs_l128_tables_avx512(const int8_t *qs, int64_t n, uint8_t *lut) {
    __m512i sel[4];
    for (int i = 0; i < 4; i++) sel[i] = _mm512_loadu_si512(l128_sel[i]);
    const int64_t ng = n / 4;
    int64_t c = 0;
    for (; c + 2 <= ng; c += 2) {
        int64_t a8;
        memcpy(&a8, qs + 4 * c, 8);
        const __m512i a = _mm512_castsi128_si512(_mm_cvtepi8_epi16(_mm_cvtsi64_si128(a8)));
        __m512i ai[4], sum = _mm512_setzero_si512();
        for (int i = 0; i < 4; i++) {
            ai[i] = _mm512_permutexvar_epi16(sel[i], a);
            sum = _mm512_add_epi16(sum, ai[i]);
        }
        __m512i T = _mm512_sub_epi16(_mm512_setzero_si512(), sum);
        for (int i = 0; i < 4; i++)
            T = _mm512_mask_add_epi16(T, (__mmask32)l128_bit[i], T, _mm512_add_epi16(ai[i], ai[i]));
        _mm512_storeu_si512(lut + 32 * c, T);
    }
    if (c < ng) bs_l128_tables(qs + 4 * c, 4, lut + 32 * c);
}

static T512 void k_l128_range(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0,
                              int na, float *y, int64_t ldy, int64_t b0, int64_t b1) {
    const size_t gbytes = (size_t)(W->ne0 / 128) * BS_L128_BLOCK;
    for (int64_t o = o0; o < o1; o += 128) {
        const uint8_t *g = (const uint8_t *)W->packed + (size_t)(o / 128) * gbytes, *blk = g + (size_t)b0 * BS_L128_BLOCK;
        for (int r = 0; r < na; r++) {
            int pfl;
            const uint8_t *pf = bs_l128_prefetch_from(blk, gbytes, o + 128 >= o1, na, r, b1 - b0, &pfl);
            tile_l128(g, A, a0 + r, y + (a0 + r) * ldy + o, b0, b1, pf, pfl);
        }
    }
}

static T512 void k_l128_q1_0(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0,
                             int na, float *y, int64_t ldy) {
    k_l128_range(W, o0, o1, A, a0, na, y, ldy, 0, W->ne0 / 128);
}

bs_l128_range_fn bs_kernel_l128_range_avx512(void) { return k_l128_range; }

bs_kernel_fn bs_kernel_packed_avx512(int kind) {
    if (kind == BS_PACK_Q1_L128) return k_l128_q1_0;
    if (kind == BS_PACK_Q2_X16) return bs_kernel_q2_x16_avx512();
    if (kind == BS_PACK_Q4_X16) return bs_kernel_q4_x16_avx512();
    return kind == BS_PACK_Q1_X16 ? k_x16_q1_0 : NULL;
}

/* --- Q1_0 in llama.cpp's x86 float order (bit-identical to the scalar oracle) ----------------
 * The AVX2 kernel llama.cpp runs (and bs_q1_0_dot mirrors) keeps 8 float lanes per row, lane l
 * of 32-group k being the integer sum of elements 32k+4l..+3: block lanes = d_a[0]*L0, then
 * fma(d_a[k], Lk, .), then acc = fma(d_w, block, acc), reduced by bs_hsum8 at the end. Here the
 * two 256-bit halves of a vector carry two weight rows, so each operation does that for 2
 * rows: one vpdpbusd (seeded with -sum q) per group gives both rows' 8 lanes. */
static T512 INL __mmask64 pair_mask(const uint8_t *b0, const uint8_t *b1, int k) {
    uint32_t lo, hi;
    memcpy(&lo, b0 + 4 * k, 4);
    memcpy(&hi, b1 + 4 * k, 4);
    return _cvtu64_mask64((uint64_t)lo | (uint64_t)hi << 32);
}

static T512 INL float hsum8_half(__m512 v, int half) {
    __m256 h = half ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v);
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));   /* v0+v4 .. */
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));           /* (v0+v4)+(v2+v6), (v1+v5)+(v3+v7) */
    return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

/* P pairs of weight rows (rows w, w+rb; the second of a pair may repeat the first) x NR rows. */
static T512 INL void tile_q1x(const uint8_t *w, size_t rb, int single, const bs_acts *A, int64_t a0,
                             float *y, int64_t ldy, const int P, const int NR) {
    const int64_t n = A->n, nb = n / 128;
    const __m512i two = _mm512_set1_epi8(2);
    __m512 acc[2][BS_KMAX_ROWS];
    for (int p = 0; p < P; p++)
        for (int r = 0; r < NR; r++) acc[p][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i c[2][4];
        __m512 dw[2];
        for (int p = 0; p < P; p++) {
            const uint8_t *p0 = w + (size_t)(2 * p) * rb + (size_t)b * 18;
            const uint8_t *p1 = single ? p0 : p0 + rb;
            _mm_prefetch((const char *)p0 + PF_DIST, _MM_HINT_T0);
            _mm_prefetch((const char *)p1 + PF_DIST, _MM_HINT_T0);
            for (int k = 0; k < 4; k++) c[p][k] = _mm512_maskz_mov_epi8(pair_mask(p0 + 2, p1 + 2, k), two);
            dw[p] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(f16(p0))), _mm256_set1_ps(f16(p1)), 1);
        }
        for (int r = 0; r < NR; r++) {
            const int64_t row = a0 + r;
            const int8_t *q = A->qs + row * n + b * 128;
            const int32_t *ns = A->nsum + row * (n / 4) + b * 32;
            const float *dl = A->dl + row * (n / 4) + b * 32;
            __m512i x[4], s[4];
            for (int k = 0; k < 4; k++) {
                x[k] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(q + 32 * k)));
                s[k] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(ns + 8 * k)));
            }
            for (int p = 0; p < P; p++) {
                __m512 blk = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s[0], c[p][0], x[0])),
                                           _mm512_set1_ps(dl[0]));
                for (int k = 1; k < 4; k++)
                    blk = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(s[k], c[p][k], x[k])),
                                          _mm512_set1_ps(dl[8 * k]), blk);
                acc[p][r] = _mm512_fmadd_ps(blk, dw[p], acc[p][r]);
            }
        }
    }
    for (int p = 0; p < P; p++)
        for (int r = 0; r < NR; r++) {
            y[r * ldy + 2 * p] = hsum8_half(acc[p][r], 0);
            if (!single) y[r * ldy + 2 * p + 1] = hsum8_half(acc[p][r], 1);
        }
}

#define Q1X_RANGE(NR)                                                                         \
    do {                                                                                      \
        const int P_ = (NR) <= 2 ? 2 : 1;                                                     \
        int64_t o = o0;                                                                       \
        for (; o + 2 * P_ <= o1; o += 2 * P_)                                                 \
            tile_q1x(w0 + (size_t)o * rb, rb, 0, A, a0, yy + o, ldy, P_, NR);                 \
        for (; o + 2 <= o1; o += 2) tile_q1x(w0 + (size_t)o * rb, rb, 0, A, a0, yy + o, ldy, 1, NR); \
        if (o < o1) tile_q1x(w0 + (size_t)o * rb, rb, 1, A, a0, yy + o, ldy, 1, NR);          \
    } while (0)

static T512 void k_q1_0_exact(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0,
                              int na, float *y, int64_t ldy) {
    const uint8_t *w0 = W->data;
    const size_t rb = W->row_bytes;
    float *yy = y + a0 * ldy;
#define Q1X_STEP(unused, NR) Q1X_RANGE(NR)
    BS_FOR_NR(na, Q1X_STEP, 0)
#undef Q1X_STEP
}

/* One BS_PACK_Q1_X16 block (kernels.h) from 16 rows' Q1_0 blocks: a nibble transpose. Word t
 * byte u holds nibble t of rows 2u (low half) and 2u+1 (high half); the low / high nibble
 * bytes of each row pair are formed with shifts and masks, then vpermt2b puts byte j of pair u
 * at byte 8t + u (t = 2j or 2j + 1). */
/* byte 8t' + u of output chunk c (words 8c..8c+7) <- byte 16u + (8c + t') / 2 of [L0 L1] / [H0 H1] */
static const uint8_t x16_idx[4][64] = {
    {0, 16, 32, 48, 64, 80, 96, 112, 0, 16, 32, 48, 64, 80, 96, 112, 1, 17, 33, 49, 65, 81, 97, 113, 1, 17, 33, 49, 65, 81, 97, 113,
     2, 18, 34, 50, 66, 82, 98, 114, 2, 18, 34, 50, 66, 82, 98, 114, 3, 19, 35, 51, 67, 83, 99, 115, 3, 19, 35, 51, 67, 83, 99, 115},
    {4, 20, 36, 52, 68, 84, 100, 116, 4, 20, 36, 52, 68, 84, 100, 116, 5, 21, 37, 53, 69, 85, 101, 117, 5, 21, 37, 53, 69, 85, 101, 117,
     6, 22, 38, 54, 70, 86, 102, 118, 6, 22, 38, 54, 70, 86, 102, 118, 7, 23, 39, 55, 71, 87, 103, 119, 7, 23, 39, 55, 71, 87, 103, 119},
    {8, 24, 40, 56, 72, 88, 104, 120, 8, 24, 40, 56, 72, 88, 104, 120, 9, 25, 41, 57, 73, 89, 105, 121, 9, 25, 41, 57, 73, 89, 105, 121,
     10, 26, 42, 58, 74, 90, 106, 122, 10, 26, 42, 58, 74, 90, 106, 122, 11, 27, 43, 59, 75, 91, 107, 123, 11, 27, 43, 59, 75, 91, 107, 123},
    {12, 28, 44, 60, 76, 92, 108, 124, 12, 28, 44, 60, 76, 92, 108, 124, 13, 29, 45, 61, 77, 93, 109, 125, 13, 29, 45, 61, 77, 93, 109, 125,
     14, 30, 46, 62, 78, 94, 110, 126, 14, 30, 46, 62, 78, 94, 110, 126, 15, 31, 47, 63, 79, 95, 111, 127, 15, 31, 47, 63, 79, 95, 111, 127},
};

T512 void bs_pack_q1_x16_avx512(const uint8_t *const src[16], uint8_t *dst) {
    __m512i e[2], o[2];
#define LD(i) _mm_loadu_si128((const __m128i *)(src[i] + 2))
#define ROWS4(a, b, c, d) _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4( \
        _mm512_castsi128_si512(LD(a)), LD(b), 1), LD(c), 2), LD(d), 3)
    e[0] = ROWS4(0, 2, 4, 6);
    e[1] = ROWS4(8, 10, 12, 14);
    o[0] = ROWS4(1, 3, 5, 7);
    o[1] = ROWS4(9, 11, 13, 15);
#undef ROWS4
#undef LD
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8((char)0xF0);
    __m512i L[2], H[2];
    for (int h = 0; h < 2; h++) {
        L[h] = _mm512_or_si512(_mm512_and_si512(e[h], lo4), _mm512_slli_epi16(_mm512_and_si512(o[h], lo4), 4));
        H[h] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(e[h], 4), lo4), _mm512_and_si512(o[h], hi4));
    }
    for (int c = 0; c < 4; c++) {
        const __m512i ix = _mm512_loadu_si512(x16_idx[c]);
        __m512i pl = _mm512_permutex2var_epi8(L[0], ix, L[1]), ph = _mm512_permutex2var_epi8(H[0], ix, H[1]);
        _mm512_storeu_si512(dst + 32 + 64 * c, _mm512_mask_blend_epi8(0xFF00FF00FF00FF00ull, pl, ph));
    }
    for (int i = 0; i < 16; i++) memcpy(dst + 2 * i, src[i], 2);
}

/* Walk output rows [o0, o1) in tiles of MR (then single rows) for a constant NR. */
#define RANGE(CALL, NR)                                                                       \
    do {                                                                                      \
        const int MR_ = (NR) <= 2 ? 4 : 2;                                                    \
        int64_t o = o0;                                                                       \
        const uint8_t *w0 = (const uint8_t *)W->data;                                         \
        float *yy = y + a0 * ldy;                                                             \
        for (; o + MR_ <= o1; o += MR_) CALL(w0 + (size_t)o * W->row_bytes, yy + o, MR_, NR); \
        for (; o < o1; o++) CALL(w0 + (size_t)o * W->row_bytes, yy + o, 1, NR);              \
    } while (0)

#define SWITCH_NR(CALL) BS_FOR_NR(na, RANGE, CALL)

#define KERNEL(name, CALL)                                                                   \
    static T512B void name(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,      \
                          int64_t a0, int na, float *y, int64_t ldy) {                       \
        SWITCH_NR(CALL)                                                                      \
    }

#define C_Q1(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q1, mr, nr)
#define C_Q2(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2, mr, nr)
#define C_Q2G64(p, yo, mr, nr) tile_q12(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2G64, mr, nr)
#define C_Q8(p, yo, mr, nr) tile_q8(p, W->row_bytes, A, a0, yo, ldy, mr, nr)
#define C_F32(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F32, mr, nr)
#define C_F16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_F16, mr, nr)
#define C_BF16(p, yo, mr, nr) tile_f(p, W->row_bytes, A, a0, yo, ldy, BS_BF16, mr, nr)

#define C_P1(p, yo, mr, nr) tile_p128(p, W->row_bytes, A, a0, yo, ldy, FMT_Q1, mr, nr)
#define C_P2(p, yo, mr, nr) tile_p128(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2, mr, nr)
#define C_P2G64(p, yo, mr, nr) tile_p128(p, W->row_bytes, A, a0, yo, ldy, FMT_Q2G64, mr, nr)

KERNEL(k_p_q1_0, C_P1)
KERNEL(k_p_q2_0, C_P2)
KERNEL(k_p_q2_0_g64, C_P2G64)
KERNEL(k_q1_0, C_Q1)
KERNEL(k_q2_0, C_Q2)
KERNEL(k_q2_0_g64, C_Q2G64)
KERNEL(k_q8_0, C_Q8)
KERNEL(k_f32, C_F32)
KERNEL(k_f16, C_F16)
KERNEL(k_bf16, C_BF16)

bs_kernel_fn bs_kernel_avx512(int type, int64_t ne0, int *perm) {
    *perm = 0;
    if (type == BS_Q1_0 && !getenv("BITSPARK_FAST_Q1")) return k_q1_0_exact;
    if (bs_cpu_features_get()->avx512bitalg && ne0 % 128 == 0 && !getenv("BITSPARK_NO_P128")) {
        *perm = 1;
        switch (type) {
        case BS_Q1_0: return k_p_q1_0;
        case BS_Q2_0: case BS_PQ2_0: return k_p_q2_0;
        case BS_Q2_0_G64: return k_p_q2_0_g64;
        default: *perm = 0;
        }
    }
    switch (type) {
    case BS_Q1_0: return k_q1_0;
    case BS_Q2_0: case BS_PQ2_0: return k_q2_0;
    case BS_Q2_0_G64: return k_q2_0_g64;
    case BS_Q8_0: return k_q8_0;
    case BS_Q4_0: case BS_Q4_1: return bs_kernel_q4_avx512(type);   /* kernels_q4.c, exact */
    case BS_Q6_K: case BS_TQ1_0: case BS_TQ2_0: return bs_kernel_kquant_avx512(type);
    case BS_F32: return k_f32;
    case BS_F16: return k_f16;
    case BS_BF16: return k_bf16;
    default: return NULL;
    }
}

/* Q8_0 activation quantizer (x86 llama.cpp rounding: id = 127/amax, round half to even)
 * writing the split layout directly. */
/* One 32-group: quants (natural order) into q[0..31], returns the fp16-rounded scale. */
static T512 INL float quant_group(const float *x, int8_t *q) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    __m512 iv = _mm512_set1_ps(id);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, iv))));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, iv))));
    return bs_f16_to_f32(bs_f32_to_f16(amax / 127.0f));
}

/* P128 layout: quantize 4 groups, then reorder the 128 quants with vpermt2b. */
static T512 void acts_p128_avx512(bs_acts *A, int64_t r, const float *x) {
    const int64_t n = A->n;
    int8_t *qs = A->qs + r * n;
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4);
    const __m512i i0 = _mm512_loadu_si512(bs_p128_perm), i1 = _mm512_loadu_si512(bs_p128_perm + 64);
    const __m512i gidx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bs_p128_group));
    const __m512i ones = _mm512_set1_epi8(1);
    int8_t nat[128];
    float d[16] = {0};
    for (int64_t b = 0; b < n / 128; b++) {
        for (int g = 0; g < 4; g++) d[g] = quant_group(x + 128 * b + 32 * g, nat + 32 * g);
        __m512i lo = _mm512_loadu_si512(nat), hi = _mm512_loadu_si512(nat + 64);
        __m512i x0 = _mm512_permutex2var_epi8(lo, i0, hi), x1 = _mm512_permutex2var_epi8(lo, i1, hi);
        _mm512_storeu_si512(qs + 128 * b, x0);
        _mm512_storeu_si512(qs + 128 * b + 64, x1);
        __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x0), ones, x1);
        _mm512_storeu_si512(ns + 16 * b, _mm512_sub_epi32(_mm512_setzero_si512(), s));
        _mm512_storeu_ps(dl + 16 * b, _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(d)));
    }
}

T512 int bs_acts_q8_0_avx512(bs_acts *A, int64_t r, const float *x) {
    if (A->type != BS_Q8_0) return -1;
    if (A->perm) {
        acts_p128_avx512(A, r, x);
        return 0;
    }
    const int64_t n = A->n;
    int8_t *qs = A->qs + r * n;
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4);
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t g = 0; g < n / 32; g++) {
        __m512 v0 = _mm512_loadu_ps(x + 32 * g), v1 = _mm512_loadu_ps(x + 32 * g + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        float d = bs_f16_to_f32(bs_f32_to_f16(amax / 127.0f));
        __m512 iv = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
        __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(q0)),
                                            _mm512_cvtsepi32_epi8(q1), 1);
        _mm256_storeu_si256((__m256i *)(qs + 32 * g), q);
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
        _mm256_storeu_si256((__m256i *)(ns + 8 * g), _mm256_sub_epi32(_mm256_setzero_si256(), s));
        _mm256_storeu_ps(dl + 8 * g, _mm256_set1_ps(d));
    }
    return 0;
}

/* The vpdpbusd issue rate of the calling thread in multiply-adds per second (64 per
 * instruction): 12 independent accumulator chains so latency never limits it. bench uses it to
 * show the arithmetic ceiling next to the bandwidth roofline. */
T512 double bs_int8_peak_avx512(long iters) {
    __m512i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
    __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
    double t0 = bs_time();
    for (long n = 0; n < iters; n++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        __asm__ volatile("" : "+v"(a));   /* keeps the loop from being folded */
    }
    double dt = bs_time() - t0;
    for (int i = 0; i < 12; i++) __asm__ volatile("" : : "v"(acc[i]));   /* results are live */
    return dt > 0 ? (double)iters * 12.0 * 64.0 / dt : 0.0;
}

#else
bs_kernel_fn bs_kernel_avx512(int type, int64_t ne0, int *perm) { (void)type; (void)ne0; *perm = 0; return NULL; }
bs_kernel_fn bs_kernel_packed_avx512(int kind) { (void)kind; return NULL; }
bs_l128_range_fn bs_kernel_l128_range_avx512(void) { return NULL; }
void bs_l128_tables_avx512(const int8_t *qs, int64_t n, uint8_t *lut) { bs_l128_tables(qs, n, lut); }
void bs_pack_q1_x16_avx512(const uint8_t *const src[16], uint8_t *dst) { (void)src; (void)dst; }
int bs_acts_q8_0_avx512(bs_acts *A, int64_t r, const float *x) { (void)A; (void)r; (void)x; return -1; }
double bs_int8_peak_avx512(long iters) { (void)iters; return 0.0; }
#endif
