/* kernels_amx.c: AMX int8 tiles for prompts over BS_PACK_Q1_L128 and BS_PACK_Q2_X16 weights.
 *
 * A tile step multiplies 32 activation rows by 32 weight rows over 32 columns: two A tiles
 * (16 rows x 32 int8 quants, straight from bs_acts.qs), two B tiles (8 rows x 64 bytes: the 16
 * weight rows' values of 4 consecutive columns per 32-bit lane, "VNNI" order) and four C tiles
 * of int32 sums (tdpbssd, signed x signed). The weights are expanded to int8 once per 32 rows
 * and K chunk (Q1_0 signs to +-1 through a 16-entry dword table, Q2_0 codes c to c - 1) and
 * then serve every activation row. K = 32 per step because the activation scales are per 32
 * columns: the int32 sums are the same integers the AVX-512 kernels form, and AVX-512 applies
 * the same float steps in the same order (t = f * dx, then fma per 32 columns; fma with the
 * row scale per block), so results are bit-identical to theirs.
 *
 * The kernel body is written once and instantiated twice: for the hardware, and over a C
 * emulator of the tile registers (the tests run that one, and the start-up self-check compares
 * the two). bs_kernel_amx hands out the hardware path only once its checks passed: the CPU has AMX-INT8,
 * Linux granted the tile state (arch_prctl), and a forked child ran both instantiations on a
 * random product and got the same bits (so a faulty path cannot take the process down). */
#include "cpu/kernels.h"

#include "cpu/cpu_features.h"
#include "io/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TAMX __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,fma,f16c,avx2")))
#define INL inline __attribute__((always_inline))

enum {
    KC = 4,            /* blocks per K chunk: 16 KB of expanded weights per 32 rows, in L1 */
    STEP_B = 1024,     /* expanded bytes per block column group g: 2 B tiles x 8 rows x 64 */
};

/* --- the tile registers, emulated --------------------------------------------------------- */

typedef struct {
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t t[8][16][64];
} amx_emu;

typedef struct __attribute__((packed, aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* tmm0..3: C (16 x 16 int32); tmm4, 5: A (16 rows x 32 bytes); tmm6, 7: B (8 rows x 64 bytes) */
static void cfg_fill(amx_cfg *c) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int i = 0; i < 8; i++) {
        c->rows[i] = i < 6 ? 16 : 8;
        c->colsb[i] = i == 4 || i == 5 ? 32 : 64;
    }
}

static void emu_load(amx_emu *e, int t, const void *p, size_t stride) {
    for (int r = 0; r < e->rows[t]; r++) memcpy(e->t[t][r], (const uint8_t *)p + (size_t)r * stride, e->colsb[t]);
}

static void emu_store(amx_emu *e, int t, void *p, size_t stride) {
    for (int r = 0; r < e->rows[t]; r++) memcpy((uint8_t *)p + (size_t)r * stride, e->t[t][r], e->colsb[t]);
}

static void emu_dpbssd(amx_emu *e, int c, int a, int b) {
    for (int m = 0; m < e->rows[a]; m++)
        for (int n = 0; n < e->colsb[b] / 4; n++) {
            int32_t s;
            memcpy(&s, &e->t[c][m][4 * n], 4);
            for (int k = 0; k < e->colsb[a] / 4; k++)
                for (int j = 0; j < 4; j++) s += (int8_t)e->t[a][m][4 * k + j] * (int8_t)e->t[b][k][4 * n + j];
            memcpy(&e->t[c][m][4 * n], &s, 4);
        }
}

/* One tile operation (statements: GCC's AMX intrinsics are asm statements; tile numbers are
 * immediates). */
#define AMX_ZERO(i) do { if (HW) _tile_zero(i); else memset(emu->t[i], 0, sizeof emu->t[i]); } while (0)
#define AMX_LOAD(i, p, s) do { if (HW) _tile_loadd(i, p, (long)(s)); else emu_load(emu, i, p, (size_t)(s)); } while (0)
#define AMX_STORE(i, p, s) do { if (HW) _tile_stored(i, p, (long)(s)); else emu_store(emu, i, p, (size_t)(s)); } while (0)
#define AMX_DP(c, a, b) do { if (HW) _tile_dpbssd(c, a, b); else emu_dpbssd(emu, c, a, b); } while (0)

/* --- weights to int8 B tiles ----------------------------------------------------------------- */

/* L128: rows r0..r0+31 (r0 % 32 == 0) of the group at grp, blocks [b0, b1) -> per block and
 * 32-column group g, two B tiles (rows r0.., r0 + 16..) of 8 x 64 bytes; row scales -> ws.
 * Row 16q + l's nibble of a 4-column group sits in word 16(q % 2) + l of the chunk shifted by
 * 4(q / 2) (bs_l128_slot); a masked vpermw moves it to dword l, and vpermd maps it to the four
 * +-1 bytes of its columns. */
static TAMX void expand_l128(const uint8_t *grp, int r0, int64_t b0, int64_t b1, uint8_t *B, float *ws) {
    int32_t signs[16];
    for (int v = 0; v < 16; v++) {
        uint32_t d = 0;
        for (int j = 0; j < 4; j++) d |= (uint32_t)(uint8_t)((v >> j) & 1 ? 1 : -1) << (8 * j);
        signs[v] = (int32_t)d;
    }
    const __m512i tab = _mm512_loadu_si512(signs), lo4 = _mm512_set1_epi16(0x000F);
    __m512i gather[2];
    for (int h = 0; h < 2; h++) {
        int16_t w[32] = {0};
        for (int l = 0; l < 16; l++) w[2 * l] = (int16_t)(16 * h + l);
        gather[h] = _mm512_loadu_si512(w);
    }
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *base = grp + (size_t)b * BS_L128_BLOCK;
        for (int i = 0; i < 32; i++) ws[(b - b0) * 32 + i] = bs_f16_to_f32((uint16_t)(base[2 * (r0 + i)] | base[2 * (r0 + i) + 1] << 8));
        for (int c = 0; c < 32; c++) {
            const __m512i v = _mm512_loadu_si512(base + 256 + 64 * c);
            for (int half = 0; half < 2; half++) {
                const int q = r0 / 16 + half;
                const __m512i x = _mm512_and_si512(_mm512_srli_epi16(v, (unsigned)(4 * (q / 2))), lo4);
                const __m512i d = _mm512_maskz_permutexvar_epi16(0x55555555u, gather[q % 2], x);
                uint8_t *dst = B + (size_t)(b - b0) * 4 * STEP_B + (size_t)(c / 8) * STEP_B + (size_t)half * 512 + (size_t)(c % 8) * 64;
                _mm512_storeu_si512(dst, _mm512_permutexvar_epi32(d, tab));
            }
        }
    }
}

/* Q2_0 X16: the two 16-row groups at g0 and g0 + gbytes (nb blocks each), blocks [b0, b1).
 * (chunk >> 2p) & 3 is a B tile row as it stands (lane i = row i's codes of 4 columns). */
static TAMX void expand_q2(const uint8_t *g0, size_t gbytes, int64_t nb, int64_t b0, int64_t b1, uint8_t *B, float *ws) {
    const size_t bsz = gbytes / (size_t)nb;   /* 16 scales and 8 chunks */
    const __m512i three = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    for (int half = 0; half < 2; half++) {
        const uint8_t *grp = g0 + (size_t)half * gbytes;
        for (int64_t b = b0; b < b1; b++) {
            const uint8_t *blk = grp + (size_t)b * bsz;
            for (int i = 0; i < 16; i++) ws[(b - b0) * 32 + 16 * half + i] = bs_f16_to_f32((uint16_t)(blk[2 * i] | blk[2 * i + 1] << 8));
            for (int c = 0; c < 8; c++) {
                const __m512i v = _mm512_loadu_si512(blk + 32 + 64 * c);
                for (int p = 0; p < 4; p++) {
                    const int k = 4 * c + p;   /* columns 4k..4k+3 of the block: g = k / 8, row k % 8 */
                    uint8_t *dst = B + (size_t)(b - b0) * 4 * STEP_B + (size_t)(k / 8) * STEP_B + (size_t)half * 512 + (size_t)(k % 8) * 64;
                    _mm512_storeu_si512(dst, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, (unsigned)(2 * p)), three), one));
                }
            }
        }
    }
}

/* --- the kernel ------------------------------------------------------------------------------ */

/* 32 activation rows from a x the 32 expanded weight rows (B, ws at block b0) over blocks
 * [b0, b1); y at the rows' first output. */
static TAMX INL void tile_rows32(amx_emu *emu, const uint8_t *B, const float *ws, const bs_acts *A, int64_t a,
                                 float *y, int64_t ldy, int64_t b0, int64_t b1, const int HW) {
    const int64_t n = A->n;
    int32_t cb[4][16][16] __attribute__((aligned(64)));
    float t[32][2][16] __attribute__((aligned(64)));
    for (int64_t b = b0; b < b1; b++) {
        for (int g = 0; g < 4; g++) {
            const int8_t *q = A->qs + a * n + 128 * b + 32 * g;
            const uint8_t *bt = B + (size_t)(b - b0) * 4 * STEP_B + (size_t)g * STEP_B;
            AMX_ZERO(0);
            AMX_ZERO(1);
            AMX_ZERO(2);
            AMX_ZERO(3);
            AMX_LOAD(4, q, n);
            AMX_LOAD(5, q + 16 * n, n);
            AMX_LOAD(6, bt, 64);
            AMX_LOAD(7, bt + 512, 64);
            AMX_DP(0, 4, 6);
            AMX_DP(1, 4, 7);
            AMX_DP(2, 5, 6);
            AMX_DP(3, 5, 7);
            AMX_STORE(0, cb[0], 64);
            AMX_STORE(1, cb[1], 64);
            AMX_STORE(2, cb[2], 64);
            AMX_STORE(3, cb[3], 64);
            for (int m = 0; m < 32; m++) {
                const __m512 dx = _mm512_set1_ps(A->dl[(a + m) * (n / 4) + 8 * (4 * b + g)]);
                for (int h = 0; h < 2; h++) {
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(cb[2 * (m / 16) + h][m % 16]));
                    const __m512 r = g == 0 ? _mm512_mul_ps(f, dx) : _mm512_fmadd_ps(f, dx, _mm512_load_ps(t[m][h]));
                    _mm512_store_ps(t[m][h], r);
                }
            }
        }
        for (int m = 0; m < 32; m++)
            for (int h = 0; h < 2; h++) {
                float *yp = y + (a + m) * ldy + 16 * h;
                const __m512 prev = b == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(yp);
                _mm512_storeu_ps(yp, _mm512_fmadd_ps(_mm512_load_ps(t[m][h]), _mm512_loadu_ps(ws + (b - b0) * 32 + 16 * h), prev));
            }
    }
}

/* Weight rows [o0, o1) (multiples of 32) x activation rows [0, na) (a multiple of 32). */
static TAMX INL void amx_range(amx_emu *emu, const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na,
                               float *y, int64_t ldy, const int HW) {
    const int64_t nb = W->ne0 / 128;
    uint8_t B[KC * 4 * STEP_B] __attribute__((aligned(64)));
    float ws[KC * 32];
    amx_cfg cfg;
    cfg_fill(&cfg);
    if (HW) {
        _tile_loadconfig(&cfg);
    } else {
        memcpy(emu->rows, cfg.rows, 8);
        memcpy(emu->colsb, cfg.colsb, 8 * sizeof(uint16_t));
    }
    for (int64_t o = o0; o < o1; o += 32)
        for (int64_t b0 = 0; b0 < nb; b0 += KC) {
            const int64_t b1 = BS_MIN(b0 + KC, nb);
            if (W->pack_kind == BS_PACK_Q1_L128)
                expand_l128((const uint8_t *)W->packed + (size_t)(o / 128) * (size_t)nb * BS_L128_BLOCK, (int)(o % 128), b0, b1, B, ws);
            else
                expand_q2((const uint8_t *)W->packed + (size_t)(o / 16) * 16 * W->row_bytes, 16 * W->row_bytes, nb, b0, b1, B, ws);
            for (int64_t a = 0; a < na; a += 32) tile_rows32(emu, B, ws, A, a, y + o, ldy, b0, b1, HW);
        }
    if (HW) _tile_release();
}

static TAMX void amx_range_hw(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na, float *y,
                              int64_t ldy) {
    amx_range(NULL, W, o0, o1, A, na, y, ldy, 1);
}

static TAMX void amx_range_emu(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A, int64_t na, float *y,
                               int64_t ldy) {
    amx_emu *emu = bs_xcalloc(1, sizeof *emu);
    amx_range(emu, W, o0, o1, A, na, y, ldy, 0);
    free(emu);
}

bs_amx_range_fn bs_kernel_amx_hw(void) { return amx_range_hw; }
bs_amx_range_fn bs_kernel_amx_emulated(void) { return amx_range_emu; }

#else
bs_amx_range_fn bs_kernel_amx_hw(void) { return NULL; }
bs_amx_range_fn bs_kernel_amx_emulated(void) { return NULL; }
#endif
