/* kernels_l128_avx2.c: the BS_PACK_Q1_L128 kernel for CPUs with AVX2 but not AVX-512.
 *
 * The layout (kernels.h) is the AVX-512 one; only the lookup changes. vpshufb looks up 16
 * bytes, so a row's 16-entry int16 table is kept planar (bs_l128_tables_avx2: the 16 low bytes,
 * then the 16 high bytes) and each 32-byte half of a chunk's slots gives two index vectors, its
 * low and its high nibbles. Per index vector two byte lookups and two byte interleaves (low,
 * high) make the int16 sums of 32 slots; they add up over a 32-column group (at most
 * 32 * 128 in size). Widening with shifts (the even and odd words of each 32-bit lane) keeps
 * that step off the shuffle ports, and leaves each float vector 8 rows of one 16-row run in a
 * fixed order that one lane swap per pair of vectors puts back in row order at the block's end.
 *
 * Per row the float steps are the AVX-512 kernel's, in the same order (t = f * dx for the first
 * 32 columns, then fma; acc = fma(t, row scale, acc) per block), and the integer sums are the
 * same exact integers, so results are bit-identical to it (tests/test_kernels.c). Against the
 * native-layout AVX2 kernel (exact to the scalar oracle) this does about a third of the
 * operations per weight: ~40 multiply-adds per cycle on one Zen 5 core against ~10, and 27B on
 * 2 threads decodes at 9.6 tok/s instead of 3.1 (pp64 13.3 instead of 3.5). */
#include "cpu/kernels.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))

/* Entry idx of a 4-column group's table: sum_i (bit i of idx ? a_i : -a_i), formed as
 * sum_i 2 bit_i a_i - sum_i a_i with maddubs (u8 x s8 pairs; at most 2 * 2 * 128 in size, so
 * exact for any int8, -128 included). Byte pair idx of l128_bits[0] holds 2 * bits 0, 1 of idx,
 * of l128_bits[1] 2 * bits 2, 3. */
#define B2(idx, b) (((idx) >> (b)) & 1 ? 2 : 0)
#define BP(idx, b) B2(idx, b), B2(idx, b + 1)
#define BP16(b) BP(0, b), BP(1, b), BP(2, b), BP(3, b), BP(4, b), BP(5, b), BP(6, b), BP(7, b), \
                BP(8, b), BP(9, b), BP(10, b), BP(11, b), BP(12, b), BP(13, b), BP(14, b), BP(15, b)
static const uint8_t l128_bits[2][32] = {{BP16(0)}, {BP16(2)}};

T2 void bs_l128_tables_avx2(const int8_t *qs, int64_t n, uint8_t *lut) {
    const __m256i c01 = _mm256_loadu_si256((const __m256i *)l128_bits[0]);
    const __m256i c23 = _mm256_loadu_si256((const __m256i *)l128_bits[1]);
    const __m256i ones = _mm256_set1_epi8(1);
    /* per 128-bit lane: the 8 entries' low bytes, then their high bytes */
    const __m256i deint = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                           0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int64_t c = 0; c < n / 4; c++) {
        int16_t p01, p23;
        memcpy(&p01, qs + 4 * c, 2);
        memcpy(&p23, qs + 4 * c + 2, 2);
        const __m256i a01 = _mm256_set1_epi16(p01), a23 = _mm256_set1_epi16(p23);
        const __m256i sel = _mm256_add_epi16(_mm256_maddubs_epi16(c01, a01), _mm256_maddubs_epi16(c23, a23));
        const __m256i sum = _mm256_add_epi16(_mm256_maddubs_epi16(ones, a01), _mm256_maddubs_epi16(ones, a23));
        const __m256i t = _mm256_shuffle_epi8(_mm256_sub_epi16(sel, sum), deint);
        _mm256_storeu_si256((__m256i *)(lut + 32 * c), _mm256_permute4x64_epi64(t, 0xD8));
    }
}

/* One activation row over blocks [b0, b1) of one 128-row group: y[0..127] (rows in order). t
 * vector v = 8 * o + 4 * h + 2 * e + u holds rows base + 8 (p / 4) + 4 u + p % 4 in lane p,
 * base = 64 o + 16 (2 e + h): h the chunk half, e the nibble (low, high) of the byte, u the
 * byte interleave (low, high), o the word of the 32-bit lane (even, odd). */
static T2 INL void row_l128(const uint8_t *grp, const uint8_t *lut, const float *dl, float *y, int64_t b0,
                            int64_t b1, const uint8_t *pf, int pfl) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[16], t[16];
    for (int q = 0; q < 16; q++) acc[q] = b0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8 * q);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *base = grp + (size_t)b * BS_L128_BLOCK;
        for (int l = 0; l < pfl; l++) _mm_prefetch((const char *)pf + 64 * l, _MM_HINT_T0);
        pf += 64 * pfl;
        for (int g = 0; g < 4; g++) {
            const __m256 dx = _mm256_set1_ps(dl[8 * (4 * b + g)]);
            __m256i s[8];
            for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_si256();
            for (int c = 8 * g; c < 8 * g + 8; c++) {
                const uint8_t *tab = lut + (size_t)(32 * b + c) * 32;
                const __m256i tl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab));
                const __m256i th = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(tab + 16)));
                for (int h = 0; h < 2; h++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(base + 256 + 64 * c + 32 * h));
                    for (int e = 0; e < 2; e++) {
                        const __m256i ix = _mm256_and_si256(e ? _mm256_srli_epi16(v, 4) : v, m4);
                        const __m256i rl = _mm256_shuffle_epi8(tl, ix), rh = _mm256_shuffle_epi8(th, ix);
                        s[4 * h + 2 * e] = _mm256_add_epi16(s[4 * h + 2 * e], _mm256_unpacklo_epi8(rl, rh));
                        s[4 * h + 2 * e + 1] = _mm256_add_epi16(s[4 * h + 2 * e + 1], _mm256_unpackhi_epi8(rl, rh));
                    }
                }
            }
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 4; k++)
                    for (int o = 0; o < 2; o++) {
                        const __m256i sk = s[4 * h + k];
                        const __m256i w = o ? _mm256_srai_epi32(sk, 16) : _mm256_srai_epi32(_mm256_slli_epi32(sk, 16), 16);
                        const __m256 f = _mm256_cvtepi32_ps(w);
                        const int v = 8 * o + 4 * h + k;
                        t[v] = g == 0 ? _mm256_mul_ps(f, dx) : _mm256_fmadd_ps(f, dx, t[v]);
                    }
        }
        for (int v = 0; v < 16; v += 2) {   /* vectors v, v + 1 (u = 0, 1): rows base .. base + 15 */
            const int o = v / 8, h = (v / 4) % 2, e = (v / 2) % 2, r = 64 * o + 16 * (2 * e + h);
            const __m256 lo = _mm256_permute2f128_ps(t[v], t[v + 1], 0x20);
            const __m256 hi = _mm256_permute2f128_ps(t[v], t[v + 1], 0x31);
            const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 2 * r)));
            const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 2 * r + 16)));
            acc[r / 8] = _mm256_fmadd_ps(lo, w0, acc[r / 8]);
            acc[r / 8 + 1] = _mm256_fmadd_ps(hi, w1, acc[r / 8 + 1]);
        }
    }
    for (int q = 0; q < 16; q++) _mm256_storeu_ps(y + 8 * q, acc[q]);
}

/* The bs_l128_range_fn: rows [o0, o1) (whole groups), activation rows a0 .. a0 + na - 1. */
static T2 void k_l128_range(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                            float *y, int64_t ldy, int64_t b0, int64_t b1) {
    const int64_t n = A->n;
    const size_t gbytes = (size_t)(W->ne0 / 128) * BS_L128_BLOCK;
    for (int64_t o = o0; o < o1; o += 128) {
        const uint8_t *g = (const uint8_t *)W->packed + (size_t)(o / 128) * gbytes, *blk = g + (size_t)b0 * BS_L128_BLOCK;
        for (int r = 0; r < na; r++) {
            const int64_t a = a0 + r;
            int pfl;
            const uint8_t *pf = bs_l128_prefetch_from(blk, gbytes, o + 128 >= o1, na, r, b1 - b0, &pfl);
            row_l128(g, A->lut + (size_t)a * bs_l128_lut_stride(n), A->dl + a * (n / 4), y + a * ldy + o, b0, b1, pf, pfl);
        }
    }
}

static T2 void k_l128(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                      int64_t ldy) {
    k_l128_range(W, o0, o1, A, a0, na, y, ldy, 0, W->ne0 / 128);
}

bs_kernel_fn bs_kernel_l128_avx2(void) { return k_l128; }
bs_l128_range_fn bs_kernel_l128_range_avx2(void) { return k_l128_range; }

#else
void bs_l128_tables_avx2(const int8_t *qs, int64_t n, uint8_t *lut) { (void)qs, (void)n, (void)lut; }
bs_kernel_fn bs_kernel_l128_avx2(void) { return NULL; }
bs_l128_range_fn bs_kernel_l128_range_avx2(void) { return NULL; }
#endif
