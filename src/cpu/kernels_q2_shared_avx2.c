/* kernels_q2_shared_avx2.c: BS_PACK_Q2_X16 (Q2_0 / PQ2_0 / Q2_0_G64) for a pass of several
 * activation rows on AVX2, with each block's code extraction shared by all rows of the pass.
 *
 * The X16 AVX2 kernel (kernels_pack_q2.c) shifts and masks every 2-bit code plane out of the
 * packed chunks once per tile of at most three rows (more rows spill its registers), so a
 * verification or server pass of w rows repeats it ceil(w / 3) times. Here a 16-row group's
 * block is read from memory once, its QK / 2 code vectors (QK / 16 chunks x 2 halves x 4
 * planes, 2 KB for QK = 128) go to a buffer in L1, and every row of the pass multiplies them
 * (vpmaddubsw with the codes as a memory operand). A row's float accumulators wait in y between
 * blocks (stored floats reload exactly), so its registers hold only the int16 sums and t.
 *
 * Why not nibble-indexed tables (vpshufb on planar int16 tables of two weights' products, as
 * kernels_tbl_avx2.c does for Q1_0): a lookup of 32 weight rows x 2 columns costs two shuffles,
 * two unpacks and two adds (12 operations per 128 weight-row products), where vpmaddubsw on
 * the codes costs one multiply-add and one add per 32 products (8 per 128); the tables would
 * add work, not save it (docs/performance.md).
 *
 * Exactness: per row, the int16 sums of each 32-column group, their widening, the seed (minus
 * the group's activation sum), the conversion and every float step (t = f * dx for the first
 * group of a block, fma after; acc = fma(t, row scale, acc) per block, from zero) are the X16
 * kernel's, lane for lane, so each output has its bits (and the scalar oracle's) for any row
 * count and tiling (tests/test_kernels_q2pack.c). */
#include "cpu/kernels.h"

#include "formats/quant.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "cpu/kernels_q2_x16.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL inline __attribute__((always_inline))
#define PF_BYTES 8192   /* software prefetch distance along the packed stream, as X16's */
/* Keeps an int16 sum in its register after each add (see the X16 kernel: otherwise gcc
 * regroups the products into a tree and spills it). */
#define PIN(v) __asm__("" : "+x"(v))

static INL int32_t ld32(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* The block's code vectors: cb[8 c + 2 p + half] = plane p (codes of columns 16c+4p..+3) of
 * chunk c's half (weight rows 8 half .. 8 half + 7), values 0..3. */
static T2 INL void block_codes(const uint8_t *blk, const int QK, __m256i *cb) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int c = 0; c < QK / 16; c++)
        for (int half = 0; half < 2; half++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * c + 32 * half));
            for (int p = 0; p < 4; p++)
                _mm256_store_si256(cb + 8 * c + 2 * p + half, _mm256_and_si256(p ? _mm256_srli_epi16(v, 2 * p) : v, m3));
        }
}

/* NR (1 or 2) activation rows from a over block b (at blk, codes cb) of one 16-row group:
 * y[r * ldy + 0..15] += the block's products (first: y holds nothing yet). */
static T2 INL void rows_block(const __m256i *cb, const uint8_t *blk, const int QK, const bs_acts *A, int64_t a,
                              int64_t b, float *y, int64_t ldy, int first, const int NR) {
    const int64_t n = A->n, ng = n / 32;
    __m256 t[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
    for (int g = 0; g < QK / 32; g++) {
        __m256i s[2][2];
        for (int r = 0; r < NR; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const int c = 2 * g + h;
            for (int p = 0; p < 4; p++)
                for (int r = 0; r < NR; r++) {
                    const __m256i x = _mm256_set1_epi32(ld32(A->qs + (a + r) * n + b * QK + 16 * c + 4 * p));
                    for (int half = 0; half < 2; half++) {
                        s[r][half] = _mm256_add_epi16(s[r][half], _mm256_maddubs_epi16(cb[8 * c + 2 * p + half], x));
                        PIN(s[r][half]);
                    }
                }
        }
        for (int r = 0; r < NR; r++) {
            const int64_t k = (a + r) * ng + b * (QK / 32) + g;
            const __m256i seed = _mm256_set1_epi32(A->gsum[k]);
            const __m256 dx = _mm256_set1_ps(A->dl[8 * k]);
            for (int half = 0; half < 2; half++) t[r][half] = bs_q2x16_step(seed, s[r][half], dx, t[r][half], g == 0);
        }
    }
    for (int half = 0; half < 2; half++) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * half)));
        for (int r = 0; r < NR; r++) {
            float *yr = y + r * ldy + 8 * half;
            const __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(yr);
            _mm256_storeu_ps(yr, _mm256_fmadd_ps(t[r][half], dw, acc));
        }
    }
}

/* One 16-row group (nb blocks at pk) for activation rows a0 .. a0 + na - 1, in pairs. */
static T2 INL void group_shared(const uint8_t *pk, const int QK, const bs_acts *A, int64_t a0, int na, float *y,
                                int64_t ldy) {
    const int64_t nb = A->n / QK;
    const size_t bsz = 16 * (2 + (size_t)QK / 4);
    _Alignas(32) __m256i cb[64];   /* QK / 2 code vectors */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = pk + (size_t)b * bsz;
        for (size_t l = 0; l < bsz; l += 64) _mm_prefetch((const char *)blk + PF_BYTES + l, _MM_HINT_T0);
        block_codes(blk, QK, cb);
        int r = 0;
        for (; r + 2 <= na; r += 2) rows_block(cb, blk, QK, A, a0 + r, b, y + r * ldy, ldy, b == 0, 2);
        if (r < na) rows_block(cb, blk, QK, A, a0 + r, b, y + r * ldy, ldy, b == 0, 1);
    }
}

static T2 void k_q2_shared(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t a0, int na,
                           float *y, int64_t ldy) {
    const int qk = W->type == BS_Q2_0_G64 ? 64 : 128;
    const size_t gbytes = 16 * W->row_bytes;
    for (int64_t o = o0; o < o1; o += 16) {
        const uint8_t *pk = (const uint8_t *)W->packed + (size_t)(o / 16) * gbytes;
        float *yo = y + a0 * ldy + o;
        if (qk == 128) group_shared(pk, 128, A, a0, na, yo, ldy);
        else group_shared(pk, 64, A, a0, na, yo, ldy);
    }
}

bs_kernel_fn bs_kernel_q2_shared_avx2(void) { return k_q2_shared; }
#else
bs_kernel_fn bs_kernel_q2_shared_avx2(void) { return NULL; }
#endif
