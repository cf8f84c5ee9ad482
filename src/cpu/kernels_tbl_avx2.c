/* kernels_tbl_avx2.c: BS_PACK_Q1_L128 for several activation rows on AVX2 (no AVX-512), with
 * each block's index extraction shared by all rows of the pass.
 *
 * The one-row kernel (kernels_l128_avx2.c) spends a fifth of its vector operations turning a
 * chunk's bytes into nibble index vectors (load, shift, mask), and a verification, server or
 * prompt pass repeated them for every activation row. Here a block (128 columns x 128 rows,
 * 2304 bytes) is read from memory once: its 128 index vectors go to a 4 KB buffer in L1, then
 * every row of the pass looks its tables up with them. The weights are read once per block
 * whatever the row count, so the stream is the one-row kernel's and prefetches 16 KB ahead
 * likewise.
 *
 * Per row the lookups, the int16 sums over 32 columns, their widening and every float step are
 * the one-row kernel's in the same order (t = f * dx for the first 32 columns, then fma; acc =
 * fma(t, row scale, acc) per block), so each output has the same bits as there and as the
 * AVX-512 kernels, for any number of rows (tests/test_kernels.c). A row's accumulators wait in
 * y between blocks (floats reload exactly). */
#include "cpu/kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))

/* The block's index vectors: ix[4 c + 2 h + e] = nibble e (low, high) of half h of column
 * group c's 64-byte chunk. */
static T2 INL void block_indices(const uint8_t *base, __m256i *ix) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 32; c++)
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(base + 256 + 64 * c + 32 * h));
            _mm256_store_si256(ix + 4 * c + 2 * h, _mm256_and_si256(v, m4));
            _mm256_store_si256(ix + 4 * c + 2 * h + 1, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        }
}

/* One activation row over one block (base) with its index vectors ix: y[0..127] (rows in
 * order) += the block's products; first: y holds nothing yet. lut and dl point at the row's
 * tables and lane scales of the block's first column. The lane order of s and t is the one-row
 * kernel's (see there). */
static T2 INL void row_block(const __m256i *ix, const uint8_t *base, const uint8_t *lut, const float *dl, float *y,
                             int first) {
    __m256 t[16];
    for (int g = 0; g < 4; g++) {
        const __m256 dx = _mm256_set1_ps(dl[8 * g]);
        __m256i s[8];
        for (int k = 0; k < 8; k++) s[k] = _mm256_setzero_si256();
        for (int c = 8 * g; c < 8 * g + 8; c++) {
            const uint8_t *tab = lut + (size_t)c * 32;
            const __m256i tl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab));
            const __m256i th = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(tab + 16)));
            for (int q = 0; q < 4; q++) {   /* q = 2 h + e */
                const __m256i x = _mm256_load_si256(ix + 4 * c + q);
                const __m256i rl = _mm256_shuffle_epi8(tl, x), rh = _mm256_shuffle_epi8(th, x);
                s[2 * q] = _mm256_add_epi16(s[2 * q], _mm256_unpacklo_epi8(rl, rh));
                s[2 * q + 1] = _mm256_add_epi16(s[2 * q + 1], _mm256_unpackhi_epi8(rl, rh));
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
    for (int v = 0; v < 16; v += 2) {   /* vectors v, v + 1: rows r .. r + 15 */
        const int o = v / 8, h = (v / 4) % 2, e = (v / 2) % 2, r = 64 * o + 16 * (2 * e + h);
        const __m256 lo = _mm256_permute2f128_ps(t[v], t[v + 1], 0x20);
        const __m256 hi = _mm256_permute2f128_ps(t[v], t[v + 1], 0x31);
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 2 * r)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(base + 2 * r + 16)));
        const __m256 a0 = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r);
        const __m256 a1 = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r + 8);
        _mm256_storeu_ps(y + r, _mm256_fmadd_ps(lo, w0, a0));
        _mm256_storeu_ps(y + r + 8, _mm256_fmadd_ps(hi, w1, a1));
    }
}

/* The bs_l128_range_fn for any number of rows na >= 1: rows [o0, o1) (whole groups), activation
 * rows a0 .. a0 + na - 1, blocks [b0, b1). */
static T2 void k_tbl_range(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                           float *y, int64_t ldy, int64_t b0, int64_t b1) {
    const int64_t n = A->n;
    const size_t gbytes = (size_t)(W->ne0 / 128) * BS_L128_BLOCK, stride = bs_l128_lut_stride(n);
    _Alignas(32) __m256i ix[128];
    for (int64_t o = o0; o < o1; o += 128) {
        const uint8_t *g = (const uint8_t *)W->packed + (size_t)(o / 128) * gbytes;
        for (int64_t b = b0; b < b1; b++) {
            const uint8_t *base = g + (size_t)b * BS_L128_BLOCK;
            for (int l = 0; l < BS_L128_BLOCK / 64; l++)
                _mm_prefetch((const char *)base + BS_L128_PF_BYTES + 64 * l, _MM_HINT_T0);
            block_indices(base, ix);
            for (int r = 0; r < na; r++) {
                const int64_t a = a0 + r;
                row_block(ix, base, A->lut + (size_t)a * stride + (size_t)b * 32 * 32, A->dl + a * (n / 4) + 32 * b,
                          y + a * ldy + o, b == 0);
            }
        }
    }
}

static T2 void k_tbl(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na, float *y,
                     int64_t ldy) {
    k_tbl_range(W, o0, o1, A, a0, na, y, ldy, 0, W->ne0 / 128);
}

bs_kernel_fn bs_kernel_tbl_l128_avx2(void) { return k_tbl; }
bs_l128_range_fn bs_kernel_tbl_l128_range_avx2(void) { return k_tbl_range; }

#else
bs_kernel_fn bs_kernel_tbl_l128_avx2(void) { return NULL; }
bs_l128_range_fn bs_kernel_tbl_l128_range_avx2(void) { return NULL; }
#endif
