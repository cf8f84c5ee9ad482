/* kernels.c: activation layout for the SIMD kernels, kernel dispatch, and the threaded driver
 * behind bs_matmul (see kernels.h for the layout and the bit-exactness rules). */
#include "cpu/kernels.h"

#include "cpu/cpu_features.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { QK = 32, Q8_0_SIZE = 34, Q8_1_SIZE = 36 };


bs_kernel_fn bs_kernel_get(int type, int level, int64_t ne0, int *perm) {
    *perm = 0;
#ifdef BS_CPU_ARM
    bs_kernel_fn k = level >= BS_CPU_I8MM ? bs_kernel_neon_i8mm(type) : NULL;
    if (!k && level >= BS_CPU_DOTPROD) k = bs_kernel_neon_dot(type);
    if (!k && level >= BS_CPU_NEON) k = bs_kernel_neon(type);
    (void)ne0;
    return k;
#endif
    if (level >= BS_CPU_AVX512) {
        bs_kernel_fn k = bs_kernel_avx512(type, ne0, perm);
        if (k) return k;
    }
    if (level >= BS_CPU_AVX2) return bs_kernel_avx2(type);
    return NULL;
}

void bs_acts_free(bs_acts *A) {
    if (A) bs_afree(A->mem);
    if (A) memset(A, 0, sizeof *A);
}

static float ld_f16(const uint8_t *p) { return bs_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Split layout from one row of standard Q8_0 / Q8_1 blocks. */
static void split_row(bs_acts *A, int64_t r, const uint8_t *blocks, int q8_1) {
    const int64_t n = A->n;
    const size_t bsz = q8_1 ? Q8_1_SIZE : Q8_0_SIZE, off = q8_1 ? 4 : 2;
    int8_t *qs = A->qs + r * n;
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4);
    for (int64_t g = 0; g < n / QK; g++) {
        const uint8_t *b = blocks + (size_t)g * bsz;
        float d = ld_f16(b);
        memcpy(qs + g * QK, b + off, QK);
        for (int l = 0; l < QK / 4; l++) {
            const int8_t *q = qs + g * QK + 4 * l;
            ns[g * 8 + l] = -(q[0] + q[1] + q[2] + q[3]);
            dl[g * 8 + l] = d;
        }
        if (q8_1) A->gs[r * (n / QK) + g] = ld_f16(b + 2);
    }
}

/* Reorder row r of a natural split layout into P128 (scalar; the SIMD quantizers write P128
 * directly). */
static void permute_row(bs_acts *A, int64_t r) {
    const int64_t n = A->n;
    int8_t *qs = A->qs + r * n, tmp[128];
    int32_t *ns = A->nsum + r * (n / 4);
    float *dl = A->dl + r * (n / 4), d[4];
    for (int64_t b = 0; b < n / 128; b++) {
        memcpy(tmp, qs + 128 * b, 128);
        for (int g = 0; g < 4; g++) d[g] = dl[32 * b + 8 * g];
        for (int p = 0; p < 128; p++) qs[128 * b + p] = tmp[bs_p128_perm[p]];
        for (int l = 0; l < 16; l++) {
            int s = 0;
            for (int k = 0; k < 4; k++) s += qs[128 * b + 4 * l + k] + qs[128 * b + 64 + 4 * l + k];
            ns[16 * b + l] = -s;
            dl[16 * b + l] = d[bs_p128_group[l]];
        }
    }
}

/* Round f32 activations to the weight's own float type, kept as f32 (exact). */
static void round_row(float *dst, const float *x, int64_t n, int type) {
    for (int64_t i = 0; i < n; i++) {
        if (type == BS_F16) dst[i] = bs_f16_to_f32(bs_f32_to_f16(x[i]));
        else if (type == BS_BF16) dst[i] = bs_bf16_to_f32(bs_f32_to_bf16(x[i]));
        else dst[i] = x[i];
    }
}

/* Per-thread scratch that only grows: a decode step makes a few hundred small matmuls, and a
 * malloc/free pair for each (glibc consolidating, mmap for big prompts) cost ~3% of a tiny
 * model's step. Memory from here is never freed by bs_acts_free (A->mem stays NULL), so it is
 * used only where no other scratch user can interleave: one bs_matmul_fast call. */
typedef struct { uint8_t *p[4]; size_t cap[4]; } scratch_buf;   /* [0] acts, [1] row blocks, [2] L128 tables, [3] L128 prompt tiles */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {   /* at thread exit */
    scratch_buf *b = v;
    for (int i = 0; i < 4; i++) bs_afree(b->p[i]);
    free(b);
}

static void scratch_init(void) {
    if (pthread_key_create(&scratch_key, scratch_free)) abort();
}

static void *scratch_get(int slot, size_t n) {
    pthread_once(&scratch_once, scratch_init);
    scratch_buf *b = pthread_getspecific(scratch_key);
    if (!b) {
        b = bs_xcalloc(1, sizeof *b);
        pthread_setspecific(scratch_key, b);
    }
    n = (n + 63) & ~(size_t)63;
    if (n > b->cap[slot]) {
        bs_afree(b->p[slot]);
        b->cap[slot] = n + n / 2;
        b->p[slot] = bs_amalloc(b->cap[slot]);
    }
    return b->p[slot];
}

/* Memory for acts: owned (freed by bs_acts_free) or the thread's scratch. */
static void *acts_mem(bs_acts *A, size_t n, bool scratch) {
    if (scratch) return scratch_get(0, n);
    return A->mem = bs_amalloc(n);
}

/* Allocate A's arrays for `n_rows` rows of n activations of vec_dot_type vt; generic: rows in
 * the scalar vec_dot's own format (for types without a SIMD kernel); scratch: in the thread's
 * scratch rather than owned by A. */
static int acts_alloc(bs_acts *A, const bs_type_traits *t, int64_t n, int64_t n_rows, int generic, bool scratch) {
    const int vt = t->vec_dot_type;
    memset(A, 0, sizeof *A);
    A->type = vt;
    A->n = n;
    A->nrows = n_rows;
    A->generic = generic;
    size_t rows = (size_t)n_rows, un = (size_t)n;
    if (generic) {
        A->raw_row = t->act_from_float ? bs_row_size(vt, n) : un * sizeof(float);
        if (!A->raw_row) return -1;
        A->raw = acts_mem(A, A->raw_row * rows, scratch);
        return 0;
    }
    if (vt == BS_Q8_0 || vt == BS_Q8_1) {
        if (n % QK) return -1;
        size_t q = rows * un, lanes = rows * (un / 4) * 4, gs = rows * (un / QK) * 4;
        size_t q_al = (q + 63) & ~(size_t)63, l_al = (lanes + 63) & ~(size_t)63;
        size_t g_al = (gs + 63) & ~(size_t)63;
        uint8_t *m = acts_mem(A, q_al + 2 * l_al + 2 * g_al + 64, scratch);
        A->qs = (int8_t *)m;
        A->nsum = (int32_t *)(m + q_al);
        A->dl = (float *)(m + q_al + l_al);
        A->gs = (float *)(m + q_al + 2 * l_al);
        A->gsum = (int32_t *)(m + q_al + 2 * l_al + g_al);
        return 0;
    }
    if (vt == BS_Q8_K) {
        A->raw_row = bs_row_size(BS_Q8_K, n);
        if (!A->raw_row) return -1;
        A->raw = acts_mem(A, A->raw_row * rows, scratch);
        return 0;
    }
    if (vt == BS_F32 || vt == BS_F16 || vt == BS_BF16) {
        A->raw_row = un * sizeof(float);
        A->raw = acts_mem(A, A->raw_row * rows, scratch);
        return 0;
    }
    return -1;
}

/* Quantize row r of x into A (scratch: one row of vec_dot_type blocks, or NULL). */
static void acts_row_(bs_acts *A, const bs_type_traits *t, int64_t r, const float *x, int level,
                      uint8_t *scratch);

static void acts_row(bs_acts *A, const bs_type_traits *t, int64_t r, const float *x, int level,
                     uint8_t *scratch) {
    acts_row_(A, t, r, x, level, scratch);
    if (A->want_lut == BS_LUT_INT16)   /* only L128 matrices want tables */
        bs_l128_tables_avx512(A->qs + r * A->n, A->n, A->lut + (size_t)r * bs_l128_lut_stride(A->n));
    else if (A->want_lut == BS_LUT_PLANAR)
        bs_l128_tables_avx2(A->qs + r * A->n, A->n, A->lut + (size_t)r * bs_l128_lut_stride(A->n));
    else if (A->want_lut == BS_LUT_NEON_Q1 || A->want_lut == BS_LUT_NEON_Q2)
        bs_neon_tables(A->want_lut, A->qs + r * A->n, A->n, A->lut + (size_t)r * bs_neon_lut_stride(A->want_lut, A->n));
    if (A->want_gsum && !A->perm && A->type == BS_Q8_0) {
        const int32_t *ns = A->nsum + r * (A->n / 4);
        for (int64_t g = 0; g < A->n / QK; g++) {
            int32_t s = 0;
            for (int l = 0; l < 8; l++) s += ns[8 * g + l];
            A->gsum[r * (A->n / QK) + g] = s;
        }
    }
}

static void acts_row_(bs_acts *A, const bs_type_traits *t, int64_t r, const float *x, int level,
                      uint8_t *scratch) {
    const int64_t n = A->n;
    if (A->generic) {
        uint8_t *dst = (uint8_t *)A->raw + (size_t)r * A->raw_row;
        if (t->act_from_float) t->act_from_float(x, dst, n);
        else memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    }
    switch (A->type) {
    case BS_Q8_0:
#ifdef BS_CPU_ARM
        if (level >= BS_CPU_DOTPROD && bs_acts_q8_0_neon_dot(A, r, x) == 0) return;
        if (level >= BS_CPU_NEON && bs_acts_q8_0_neon(A, r, x) == 0) return;
#else
        if (level >= BS_CPU_AVX512 && bs_acts_q8_0_avx512(A, r, x) == 0) return;
        if (level >= BS_CPU_AVX2 && !A->perm && bs_acts_q8_0_avx2(A, r, x) == 0) return;
#endif
        t->act_from_float(x, scratch, n);
        split_row(A, r, scratch, 0);
        if (A->perm) permute_row(A, r);
        return;
    case BS_Q8_1:
        t->act_from_float(x, scratch, n);
        split_row(A, r, scratch, 1);
        return;
    case BS_Q8_K:
        t->act_from_float(x, (uint8_t *)A->raw + (size_t)r * A->raw_row, n);
        return;
    default:
        round_row((float *)((uint8_t *)A->raw + (size_t)r * A->raw_row), x, n, A->type);
        return;
    }
}

int bs_acts_prepare(bs_acts *A, int type, const float *x, int64_t n, int64_t n_rows, int perm,
                    int level) {
    const bs_type_traits *t = bs_type_get(type);
    if (!t || acts_alloc(A, t, n, n_rows, 0, false) != 0) return -1;
    if (perm && (A->type != BS_Q8_0 || n % 128)) {
        bs_acts_free(A);
        return -1;
    }
    A->perm = perm;
    if ((A->type == BS_Q8_0 || A->type == BS_Q8_1 || A->type == BS_Q8_K) && !t->act_from_float) {
        bs_acts_free(A);
        return -1;
    }
    uint8_t *scratch = bs_xmalloc(n / QK * Q8_1_SIZE + 64);
    for (int64_t r = 0; r < n_rows; r++) acts_row(A, t, r, x + r * n, level, scratch);
    free(scratch);
    return 0;
}

/* Types without a SIMD kernel: the scalar vec_dot per output, still threaded. */
static void kernel_generic(const bs_weight *W, int64_t o0, int64_t o1, const bs_acts *A,
                           int64_t a0, int na, float *y, int64_t ldy) {
    const bs_type_traits *t = bs_type_get(W->type);
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = (const uint8_t *)W->data + (size_t)o * W->row_bytes;
        for (int r = 0; r < na; r++)
            t->vec_dot(A->n, &y[(a0 + r) * ldy + o], w, (const uint8_t *)A->raw + (size_t)(a0 + r) * A->raw_row);
    }
}

/* --- threaded driver ------------------------------------------------------------------------ */

typedef struct {
    const bs_weight *W;
    const bs_type_traits *t;
    const float *x;
    bs_acts *A;
    float *y;
    bs_kernel_fn k;
    bs_l128_range_fn l128;  /* BS_PACK_Q1_L128 for a prompt: K cut into chunks (job_l128) */
    bs_l128_prompt_fn l128p;   /* ... for BS_L128_PROMPT_ROWS rows and more */
    int l128_rows, l128_kc;    /* activation rows per l128 call, blocks per K chunk */
    int64_t n_rows, tile;
    int level;
    uint8_t *qscratch;      /* job_quantize: one row's blocks per thread */
    size_t qscratch_row;
    int64_t grain;          /* output rows a thread's share is a multiple of (a packed group) */
    bs_amx_range_fn amx;    /* AMX tiles for a prompt (bs_kernel_amx) */
} job;

static void job_quantize(void *ctx, int ith, int nth) {
    job *j = ctx;
    int64_t lo, hi;
    bs_pool_split(j->n_rows, 1, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    uint8_t *scratch = j->qscratch + (size_t)ith * j->qscratch_row;
    for (int64_t r = lo; r < hi; r++) acts_row(j->A, j->t, r, j->x + r * j->A->n, j->level, scratch);
}

/* L128 for a prompt (more than BS_KMAX_ROWS rows). A row's lookup tables take 8 bytes per
 * column (139 KB for a 17408-wide row), so passing every row's whole tables over each 128-row
 * group, as a few rows do, streams the tables from memory once per group. Here K is cut into
 * chunks of 24 blocks (24 KB of tables per row) and the slice into weight tiles of ~512 KB per
 * chunk; each group of BS_KMAX_ROWS rows passes over a tile from L2, and the rows' sums wait in
 * y between chunks. Measured on 27B pp512: 16.7 -> 23.3 tok/s (chunks of 4 to 64 blocks and
 * tiles of 256 KB to 1 MB tried; 12 to 32 blocks are within 5%). Up to 8 rows (verification)
 * the tables were measured not to be the bound, and rows run whole as before. */
static void job_l128(job *j, int64_t lo, int64_t hi) {
    const int64_t nb = j->W->ne0 / 128, nr = j->n_rows;
    const int64_t kc = BS_MIN(bs_l128_chunk_blocks > 0 ? bs_l128_chunk_blocks : j->l128_kc, nb);
    const int64_t tile = bs_l128_chunk_blocks > 0 ? 128 : BS_MAX(128, (512 * 1024) / (kc * 18) / 128 * 128);
    for (int64_t b0 = 0; b0 < nb; b0 += kc)
        for (int64_t o = lo; o < hi; o += tile)
            for (int64_t a = 0; a < nr; a += j->l128_rows)
                j->l128(j->W, o, BS_MIN(o + tile, hi), j->A, a, (int)BS_MIN(j->l128_rows, nr - a), j->y, j->W->ne1,
                        b0, BS_MIN(b0 + kc, nb));
}

/* AMX over the 32-row multiples of the thread's slice and of the prompt; the rest of either
 * through the AVX-512 kernel (the same bits). */
static void job_amx(job *j, int64_t lo, int64_t hi) {
    const int64_t nr = j->n_rows, hi32 = lo + (hi - lo) / 32 * 32, na32 = nr / 32 * 32, ne1 = j->W->ne1;
    if (hi32 > lo) j->amx(j->W, lo, hi32, j->A, na32, j->y, ne1);
    const int64_t part[2][4] = {{lo, hi32, na32, nr}, {hi32, hi, 0, nr}};   /* rows o0, o1 x a0, a1 */
    for (int i = 0; i < 2; i++)
        for (int64_t a = part[i][2]; part[i][0] < part[i][1] && a < part[i][3]; a += BS_KMAX_ROWS) {
            const int na = (int)BS_MIN(BS_KMAX_ROWS, part[i][3] - a);
            if (j->l128) j->l128(j->W, part[i][0], part[i][1], j->A, a, na, j->y, ne1, 0, j->W->ne0 / 128);
            else j->k(j->W, part[i][0], part[i][1], j->A, a, na, j->y, ne1);
        }
}

/* Each thread owns a contiguous slice of output rows (so it streams its own part of W). For
 * many activation rows, the slice is walked in tiles of weight rows small enough to stay in L2
 * while every group of BS_KMAX_ROWS activation rows passes over them. */
static void job_matmul(void *ctx, int ith, int nth) {
    job *j = ctx;
    const int64_t ne1 = j->W->ne1;
    int64_t lo, hi;
    bs_pool_split(ne1, j->grain, ith, nth, &lo, &hi);
    if (j->amx) {
        if (lo < hi) job_amx(j, lo, hi);
        return;
    }
    if (j->l128p) {
        if (lo < hi) j->l128p(j->W, lo, hi, j->A, j->n_rows, j->y, ne1, scratch_get(3, bs_l128_prompt_scratch(j->W)));
        return;
    }
    if (j->l128) {
        if (lo < hi) job_l128(j, lo, hi);
        return;
    }
    if (j->n_rows <= BS_KMAX_ROWS) {
        if (lo < hi) j->k(j->W, lo, hi, j->A, 0, (int)j->n_rows, j->y, ne1);
        return;
    }
    for (int64_t o = lo; o < hi; o += j->tile) {
        int64_t oe = BS_MIN(o + j->tile, hi);
        for (int64_t a = 0; a < j->n_rows; a += BS_KMAX_ROWS)
            j->k(j->W, o, oe, j->A, a, (int)BS_MIN(BS_KMAX_ROWS, j->n_rows - a), j->y, ne1);
    }
}

/* AVX2 L128 kernels by activation row count. The shared-index kernel (kernels_tbl_avx2.c)
 * saves the index extraction (3 of ~38 vector operations per column group and 128 rows per
 * row) but not the lookups' 4 shuffles per 32 slots, which bind the kernel on Zen 3's two
 * shuffle pipes, and it adds index loads and a reload of each row's sums per block. Measured
 * (bench --matmul --matmul-packed, 5120 x 17408 / 17408 x 5120 Q1_0, 2 threads, CPU time per
 * call, medians of 3 alternating runs, AMD EPYC AVX2, load 17-21): against the row kernel
 * 1.17 / 1.07x at 2 rows, 1.12 / 1.05x at 5, 1.24 / 1.05x at 8, 1.06 / 0.91x at 64. So every
 * row count keeps the row kernel (8 rows per call, prompts in K chunks); BITSPARK_TBL=1 takes
 * the shared-index kernel from L128_TBL_MIN_ROWS rows (comparisons on other CPUs), prompts
 * L128_TBL_PASS_ROWS rows per pass over K chunks of L128_TBL_CHUNK blocks (16 rows' tables,
 * 1 KB per block each, stay in L2 across a tile's groups). */
#define L128_TBL_MIN_ROWS 2
#define L128_TBL_PASS_ROWS 16
#define L128_TBL_CHUNK 16
/* The kernel-choice environment variables, read once whichever thread asks first (sessions on
 * one model plan their first products at once): BITSPARK_TBL, BITSPARK_Q2_SHARED and
 * BITSPARK_NEON_TBL (the last two: -1 unset, else 0 / 1). */
static struct { int tbl, q2_shared, neon_tbl; } kenv;

static int env_tri(const char *name) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) != 0 : -1;
}

static void read_env(void) {
    kenv.tbl = bs_env_flag("BITSPARK_TBL");
    kenv.q2_shared = env_tri("BITSPARK_Q2_SHARED");
    kenv.neon_tbl = env_tri("BITSPARK_NEON_TBL");
}

static void env_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_env);
}

static int tbl_on(void) {
    env_once();
    return kenv.tbl;
}

static bs_kernel_fn l128_avx2_pick(int64_t n_rows) {
    if (n_rows >= L128_TBL_MIN_ROWS && bs_kernel_tbl_l128_avx2() && tbl_on()) return bs_kernel_tbl_l128_avx2();
    return bs_kernel_l128_avx2();
}

/* AVX2 Q2 X16 kernels by activation row count: the X16 kernel (codes shifted and masked out
 * of each chunk once per tile of up to three rows) or the shared-extraction one
 * (kernels_q2_shared_avx2.c: once per block for every row of the pass, through a 2 KB buffer in
 * L1), the same bits. Measured (bench --matmul --matmul-packed -t 1, CPU time per call, medians
 * of 3 alternating runs of one binary, AMD EPYC Zen 3 class AVX2, load 2.2-2.7):
 *   rows                    1     2     3     4     5     8    16
 *   Q2_0  5120 x 17408    0.74  0.72  0.74  0.86  0.82  0.87  0.85
 *         17408 x 5120    0.72  0.73  0.60  0.84  0.82  0.87  0.82
 *   G64   5120 x 17408    0.64  0.64  0.67  0.80  0.76  0.79  0.77
 *         17408 x 5120    0.63  0.65  0.65  0.79  0.80  0.78  0.72
 * (X16's CPU time over the shared kernel's: below 1, X16 is faster). The extraction X16
 * repeats per tile is ~2.3 of ~15 vector operations per 128 weight-row products per row at
 * three rows; the buffer's stores (four 32-byte stores per 128 weights, one store per cycle on
 * this core) cost more than that saves, and each row's multiply-adds (2 x (vpmaddubsw +
 * vpaddw) per 64 products, which bind: ~2.6 cycles per 128 in a micro-loop, against X16's ~3.9
 * at three rows) stay the same. So X16 takes every row count; BITSPARK_Q2_SHARED=1 takes the
 * shared kernel for every Q2 X16 product (comparisons on other CPUs: one with more store
 * bandwidth may differ), =0 never. docs/performance.md has the cycles per 128 products
 * (tools/q2_cycles.c). */
int bs_q2_shared_mode = BS_TBL_AUTO;

static int q2_shared_env(void) {
    env_once();
    return kenv.q2_shared;
}

static bs_kernel_fn q2_avx2_pick(int64_t n_rows) {
    const bs_kernel_fn shared = bs_kernel_q2_shared_avx2(), x16 = bs_kernel_q2_x16_avx2();
    const int env = bs_q2_shared_mode != BS_TBL_AUTO ? bs_q2_shared_mode == BS_TBL_ON : q2_shared_env();
    (void)n_rows;   /* measured: X16 at every row count (above) */
    return shared && env == 1 ? shared : x16;
}

/* aarch64: the table-lookup kernels (kernels_neon_tbl.c) against the sdot / smmla ones, per
 * type, level and activation row count. qemu's timings say nothing about a real core, so the
 * choice is by instructions executed per output (weight row x activation row) per 32 weights,
 * counted under qemu-aarch64 (tools/neon_count.sh, 1024 x 64 products; docs/performance.md):
 *   rows                 1     2     4     5     6     8
 *   Q1_0  tables       18.9  15.2  13.3              12.4
 *         plain NEON   43.0  34.0  27.2              23.2
 *         sdot         36.3  24.8  19.0              17.1
 *   Q2_0  tables       23.6  16.9  13.6  13.0  12.5  11.9
 *         plain NEON   40.5  34.7  27.4              21.8
 *         sdot         31.5  24.0  16.4              14.4
 *         smmla        41.1  21.7  14.2  13.8  11.2   9.9
 *   G64   tables       25.4  18.0  14.3  13.6  13.2  12.5
 *         smmla        35.7  19.8  13.6  12.7  12.0  10.6
 * So the tables take Q1_0 and Q2_0 everywhere, except that with FEAT_I8MM smmla takes Q2_0 from
 * 6 rows and Q2_0_G64 from 4 (its pairs of activation rows pay once several share the
 * unpacking). Counts are instructions, not cycles (tbl with two table registers may take more
 * than one issue slot on some cores): BITSPARK_NEON_TBL=1 takes the tables for every product
 * they serve, =0 never, so a real core can measure. */
int bs_neon_tbl_mode = BS_TBL_AUTO;

#ifdef BS_CPU_ARM
static int neon_tbl_env(void) {
    if (bs_neon_tbl_mode != BS_TBL_AUTO) return bs_neon_tbl_mode == BS_TBL_ON;
    env_once();
    return kenv.neon_tbl;
}
#endif

static bs_kernel_fn neon_tbl_pick(int type, int level, int64_t n_rows) {
#ifdef BS_CPU_ARM
    const bs_kernel_fn k = level >= BS_CPU_NEON ? bs_kernel_neon_tbl(type) : NULL;
    const int env = neon_tbl_env();
    if (!k || env == 0) return NULL;
    if (env == 1 || type == BS_Q1_0) return k;
    return level >= BS_CPU_I8MM && n_rows >= (type == BS_Q2_0_G64 ? 4 : 6) ? NULL : k;
#else
    (void)type, (void)level, (void)n_rows;
    return NULL;
#endif
}

/* A product's kernel choice and what it needs of its activations. */
typedef struct {
    const bs_type_traits *t;
    bs_kernel_fn k;
    int packed, l128, perm, generic, want_gsum, want_lut;
} plan;

/* -1 when W has no fast path at this level (the scalar path takes it). */
static int make_plan(const bs_weight *W, int64_t n_rows, int level, plan *p) {
    memset(p, 0, sizeof *p);
    p->t = bs_type_get(W->type);
    if (level <= BS_CPU_SCALAR || n_rows <= 0 || !p->t || !p->t->vec_dot) return -1;
    bs_kernel_fn k = NULL;
    p->l128 = W->packed && W->pack_kind == BS_PACK_Q1_L128;
    if (W->packed && level >= BS_CPU_AVX512) k = bs_kernel_packed_avx512(W->pack_kind);
    else if (p->l128 && level >= BS_CPU_AVX2) k = l128_avx2_pick(n_rows);
    else if (W->packed && W->pack_kind == BS_PACK_Q2_X16 && level >= BS_CPU_AVX2) k = q2_avx2_pick(n_rows);
    else if (W->packed && W->pack_kind == BS_PACK_Q4_X16 && level >= BS_CPU_AVX2) k = bs_kernel_q4_x16_avx2();
    p->packed = k != NULL;
    /* packed in place and no kernel for it at this level: the scalar path unpacks rows */
    if (!p->packed && W->packed && W->data == W->packed) return -1;
    if (!p->packed) k = bs_kernel_get(W->type, level, W->ne0, &p->perm);
    p->generic = k == NULL;
    p->k = p->generic ? kernel_generic : k;
    p->l128 = p->l128 && p->packed;
    p->want_gsum = p->packed && (W->pack_kind == BS_PACK_Q1_X16 || W->pack_kind == BS_PACK_Q2_X16);   /* seeds */
    p->want_lut = !p->l128 ? BS_LUT_NONE : level >= BS_CPU_AVX512 ? BS_LUT_INT16 : BS_LUT_PLANAR;
    bs_kernel_fn tk = p->packed || p->generic ? NULL : neon_tbl_pick(W->type, level, n_rows);
    if (tk) p->k = tk, p->want_lut = W->type == BS_Q1_0 ? BS_LUT_NEON_Q1 : BS_LUT_NEON_Q2;
    return 0;
}

/* Whether activations prepared for (a, Wa) serve (b, Wb) as they are. */
static int same_acts(const plan *a, const bs_weight *Wa, const plan *b, const bs_weight *Wb) {
    return a->t->vec_dot_type == b->t->vec_dot_type && Wa->ne0 == Wb->ne0 && a->perm == b->perm &&
           a->generic == b->generic && (!a->generic || a->t == b->t) && a->want_gsum == b->want_gsum &&
           a->want_lut == b->want_lut;
}

/* Small products are not worth waking the pool (tiny models, the 48-row GDN gates). */
static bs_pool *pool_for(const bs_weight *W, int64_t n_rows, bs_pool *pool) {
    return (uint64_t)W->row_bytes * (uint64_t)W->ne1 * (uint64_t)n_rows < 64 * 1024 ? NULL : pool;
}

/* x quantized into A (the calling thread's scratch) as W's plan wants. */
static int prepare(const plan *p, const bs_weight *W, const float *x, int64_t n_rows, bs_acts *A, bs_pool *pool,
                   int level) {
    if (acts_alloc(A, p->t, W->ne0, n_rows, p->generic, true) != 0) return -1;
    A->perm = p->perm;
    A->want_gsum = p->want_gsum;
    A->want_lut = p->want_lut;
    if (p->want_lut) {
        const int neon = p->want_lut == BS_LUT_NEON_Q1 || p->want_lut == BS_LUT_NEON_Q2;
        A->lut = scratch_get(2, (neon ? bs_neon_lut_stride(p->want_lut, W->ne0) : bs_l128_lut_stride(W->ne0)) * (size_t)n_rows);
    }
    job j = {.W = W, .t = p->t, .x = x, .A = A, .n_rows = n_rows, .level = level};
    pool = pool_for(W, n_rows, pool);
    const bool par = n_rows >= 4 && bs_pool_size(pool) > 1;
    j.qscratch_row = ((size_t)(W->ne0 / QK) * Q8_1_SIZE + 127) & ~(size_t)63;
    j.qscratch = scratch_get(1, j.qscratch_row * (size_t)(par ? bs_pool_size(pool) : 1));
    if (par) bs_pool_run(pool, job_quantize, &j);
    else job_quantize(&j, 0, 1);
    return 0;
}

static void run(const plan *p, const bs_weight *W, bs_acts *A, int64_t n_rows, float *y, bs_pool *pool, int level) {
    const int avx512 = level >= BS_CPU_AVX512;
    job j = {.W = W, .t = p->t, .A = A, .y = y, .k = p->k, .n_rows = n_rows, .level = level};
    /* ~256 KiB of weights per tile, a multiple of the layout's row group */
    j.grain = p->l128 ? 128 : 16;
    j.l128_rows = BS_KMAX_ROWS, j.l128_kc = 24;
    if (p->l128 && n_rows > BS_KMAX_ROWS) j.l128 = avx512 ? bs_kernel_l128_range_avx512() : bs_kernel_l128_range_avx2();
    if (p->l128 && n_rows > BS_KMAX_ROWS && !avx512 && bs_kernel_tbl_l128_range_avx2() && tbl_on())
        j.l128 = bs_kernel_tbl_l128_range_avx2(), j.l128_rows = L128_TBL_PASS_ROWS, j.l128_kc = L128_TBL_CHUNK;
    if (j.l128 && avx512 && n_rows >= BS_L128_PROMPT_ROWS) j.l128p = bs_kernel_l128_prompt_avx512();
    if (p->packed && avx512 && n_rows >= BS_AMX_MIN_ROWS && bs_amx_fits(W)) j.amx = bs_kernel_amx();
    j.tile = (int64_t)((256 * 1024) / (W->row_bytes ? W->row_bytes : 1)) / j.grain * j.grain;
    if (j.tile < j.grain) j.tile = j.grain;
    bs_pool_run(pool_for(W, n_rows, pool), job_matmul, &j);
}

const char *bs_kernel_describe(const bs_weight *W, int64_t n_rows, int level) {
    plan p;
    if (make_plan(W, n_rows, level, &p)) return "scalar";
    if (p.generic) return "threaded scalar";
    if (p.want_lut == BS_LUT_NEON_Q1 || p.want_lut == BS_LUT_NEON_Q2) return "neon tbl";
#ifdef BS_CPU_ARM
    const int q2 = W->type == BS_Q2_0 || W->type == BS_PQ2_0 || W->type == BS_Q2_0_G64;
    if (!p.packed && p.t->is_quantized)
        return level >= BS_CPU_I8MM && q2 ? "neon smmla" : level >= BS_CPU_DOTPROD ? "neon sdot" : "neon";
#endif
    if (!p.packed) return "native";
    const int avx512 = level >= BS_CPU_AVX512;
    if (avx512 && n_rows >= BS_AMX_MIN_ROWS && bs_amx_fits(W) && bs_kernel_amx()) return "amx";
    if (p.l128 && avx512) return n_rows >= BS_L128_PROMPT_ROWS ? "l128 prompt" : n_rows > BS_KMAX_ROWS ? "l128 chunks" : "l128";
    if (p.l128) return p.k == bs_kernel_tbl_l128_avx2() ? (n_rows > BS_KMAX_ROWS ? "tbl chunks" : "tbl") : "l128 row";
    if (p.k == bs_kernel_q2_shared_avx2()) return "q2 shared";
    return W->pack_kind == BS_PACK_Q2_X16 ? "q2 x16" : W->pack_kind == BS_PACK_Q4_X16 ? "q4 x16" : "q1 x16";
}

int bs_matmul_fast(const bs_weight *W, const float *x, int64_t n_rows, float *y, bs_pool *pool,
                   int level) {
    plan p;
    bs_acts A;
    if (make_plan(W, n_rows, level, &p) || prepare(&p, W, x, n_rows, &A, pool, level)) return -1;
    run(&p, W, &A, n_rows, y, pool, level);
    bs_acts_free(&A);
    return 0;
}

void bs_matmul_group_fast(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                          bs_pool *pool, int level, bool *done) {
    plan cur, p;
    bs_acts A;
    const bs_weight *Wcur = NULL;   /* the product A was prepared for, NULL: none */
    for (int i = 0; i < nw; i++) {
        done[i] = true;
        if (!W[i]->lora && make_plan(W[i], n_rows, level, &p) == 0) {
            if (Wcur && same_acts(&cur, Wcur, &p, W[i])) {
                run(&p, W[i], &A, n_rows, y[i], pool, level);
                continue;
            }
            if (Wcur) bs_acts_free(&A);
            Wcur = NULL;
            if (prepare(&p, W[i], x, n_rows, &A, pool, level) == 0) {
                cur = p, Wcur = W[i];
                run(&p, W[i], &A, n_rows, y[i], pool, level);
                continue;
            }
        }
        /* the caller's bs_matmul: what this prepared is not shared past it */
        if (Wcur) bs_acts_free(&A);
        Wcur = NULL;
        done[i] = false;
    }
    if (Wcur) bs_acts_free(&A);
}

/* --- AMX (kernels_amx.c) ----------------------------------------------------------------------- */

int bs_amx_fits(const bs_weight *W) {
    return W->packed && (W->pack_kind == BS_PACK_Q1_L128 ||
                         (W->pack_kind == BS_PACK_Q2_X16 && (W->type == BS_Q2_0 || W->type == BS_PQ2_0)));
}

/* y = W x for 64 rows of x through fn (one thread). */
static int amx_product(const bs_weight *W, const float *x, float *y, bs_amx_range_fn fn) {
    bs_acts A;
    if (bs_acts_prepare(&A, W->type, x, W->ne0, 64, 0, BS_CPU_AVX512) != 0) return -1;
    fn(W, 0, W->ne1, &A, 64, y, W->ne1);
    bs_acts_free(&A);
    return 0;
}

int bs_amx_mode = BS_AMX_AUTO;

int bs_amx_compare(bs_amx_range_fn fa, bs_amx_range_fn fb) {
    if (!fa || !fb) return 0;
    const int64_t ne0 = 1024, ne1 = 1024;   /* a million weights: Q1_0 takes L128 */
    const int types[2] = {BS_Q1_0, BS_Q2_0};
    float *x = bs_xmalloc((size_t)(64 * ne0) * sizeof(float));
    float *ya = bs_xmalloc((size_t)(64 * ne1) * sizeof(float)), *yb = bs_xmalloc((size_t)(64 * ne1) * sizeof(float));
    bs_rng rng;
    bs_rng_seed(&rng, 7);
    for (int64_t i = 0; i < 64 * ne0; i++) x[i] = bs_rng_normal(&rng);
    int same = 1, compared = 0;
    for (int k = 0; k < 2 && same; k++) {
        const size_t rb = bs_row_size(types[k], ne0), bb = bs_type_get(types[k])->type_size;
        uint8_t *wd = bs_xmalloc(rb * (size_t)ne1);
        for (size_t i = 0; i < rb * (size_t)ne1; i++) wd[i] = (uint8_t)bs_rng_next(&rng);
        for (size_t b = 0; b < rb * (size_t)ne1 / bb; b++) {   /* a sane fp16 scale first in each block */
            const uint16_t h = bs_f32_to_f16(0.01f + (float)(b % 97) * 1e-4f);
            memcpy(wd + b * bb, &h, 2);
        }
        bs_weight W = {.type = types[k], .ne0 = ne0, .ne1 = ne1, .data = wd, .row_bytes = rb};
        if (bs_weight_pack(&W, NULL) == 0 && bs_amx_fits(&W)) {   /* (BITSPARK_Q1_X16 may keep Q1_0 out) */
            compared++;
            same = amx_product(&W, x, ya, fa) == 0 && amx_product(&W, x, yb, fb) == 0 &&
                   !memcmp(ya, yb, (size_t)(64 * ne1) * sizeof(float));
        }
        bs_weight_release(&W);
        free(wd);
    }
    free(x), free(ya), free(yb);
    return same && compared > 0;
}

/* Whether AMX is used (kernels_amx.c has the kernels; the choice is the dispatcher's). */
static bs_amx_range_fn g_amx_fn;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static const char *g_amx_status = "not available on this CPU";

int bs_amx_selfcheck(bs_amx_range_fn fn) {
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) _exit(bs_amx_compare(fn, bs_kernel_amx_emulated()) ? 0 : 1);
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
    return r == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;   /* (ECHILD where SIGCHLD is ignored: no) */
}

static void amx_pick(void) {
    const bs_amx_range_fn hw = bs_kernel_amx_hw();
    if (!hw) { g_amx_status = "not built in"; return; }
    const char *e = getenv("BITSPARK_AMX");
    if (e && !strcmp(e, "0")) { g_amx_status = "turned off (BITSPARK_AMX=0)"; return; }
    if (e && !strcmp(e, "emulate")) {   /* the whole engine over the emulator: tests */
        g_amx_fn = bs_kernel_amx_emulated();
        g_amx_status = "emulated (BITSPARK_AMX=emulate)";
        return;
    }
    const bs_cpu_features *f = bs_cpu_features_get();
    if (bs_cpu_max_level() < BS_CPU_AVX512 || !f->amx_tile || !f->amx_int8) return;
    if (!bs_cpu_enable_amx()) { g_amx_status = "present, but Linux refused the tile state (arch_prctl)"; return; }
    if (bs_amx_selfcheck(hw)) {
        g_amx_fn = hw;
        g_amx_status = "int8 tiles for Q1_0/Q2_0 prompts of 32+ rows (self-check passed)";
    } else {
        g_amx_status = "present, but the self-check failed: prompts use AVX-512";
        fprintf(stderr, "bitspark: the AMX self-check failed: prompts use AVX-512\n");
    }
}

const char *bs_amx_status(void) {
    if (!bs_kernel_amx_hw()) return "not built in";
    if (bs_amx_mode == BS_AMX_EMULATE) return "emulated (tests)";
    if (bs_amx_mode == BS_AMX_OFF) return "turned off";
    pthread_once(&g_amx_once, amx_pick);
    return g_amx_status;
}

bs_amx_range_fn bs_kernel_amx(void) {
    if (!bs_kernel_amx_hw()) return NULL;
    if (bs_amx_mode == BS_AMX_EMULATE) return bs_kernel_amx_emulated();   /* tests switch modes */
    if (bs_amx_mode == BS_AMX_OFF || bs_cpu_level() < BS_CPU_AVX512) return NULL;
    pthread_once(&g_amx_once, amx_pick);
    return g_amx_fn;
}

/* --- weight repacking ------------------------------------------------------------------------ */

int bs_weight_exact(void) { return bs_env_flag("BITSPARK_EXACT"); }

/* --- BS_PACK_Q1_L128 (kernels.h) ---------------------------------------------------------- */

/* One 128-row group (rows at src, stride rb) -> its packed bytes at dst (nb blocks). Its 8
 * groups of 16 slots are packed as X16 first (SIMD): X16 word c of 16-slot group s is exactly
 * the low or high half of L128's 16 bytes for 4-column group c and slots 32(s/2)..+31. */
static void pack_l128_group(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst) {
    uint8_t x16[8][288];
    int row_of[128];
    for (int R = 0; R < 128; R++) row_of[bs_l128_slot(R)] = R;
    for (int64_t b = 0; b < nb; b++) {
        for (int s = 0; s < 8; s++) {
            const uint8_t *rows[16];
            for (int i = 0; i < 16; i++) rows[i] = src + (size_t)row_of[16 * s + i] * rb + (size_t)b * 18;
            bs_pack_q1_x16_avx512(rows, x16[s]);
        }
        uint8_t *o = dst + (size_t)b * BS_L128_BLOCK;
        for (int R = 0; R < 128; R++) {
            const int t = bs_l128_slot(R);
            memcpy(o + 2 * R, x16[t / 16] + 2 * (t % 16), 2);
        }
        for (int c = 0; c < 32; c++)
            for (int L = 0; L < 4; L++) {
                memcpy(o + 256 + 64 * c + 16 * L, x16[2 * L] + 32 + 8 * c, 8);
                memcpy(o + 256 + 64 * c + 16 * L + 8, x16[2 * L + 1] + 32 + 8 * c, 8);
            }
    }
}

/* pack_l128_group without AVX-512 (the AVX2 kernel's CPUs): per pair of slots 2k, 2k + 1 of
 * 32-slot block L, the two rows' bit bytes give the 16 output bytes of the even 4-column groups
 * (low nibbles) and of the odd ones (high nibbles), 8 bytes at a time. */
static void pack_l128_group_portable(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst) {
    const uint64_t lo4 = 0x0F0F0F0F0F0F0F0FULL;
    int row_of[128];
    for (int R = 0; R < 128; R++) row_of[bs_l128_slot(R)] = R;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * BS_L128_BLOCK;
        for (int R = 0; R < 128; R++) memcpy(o + 2 * R, src + (size_t)R * rb + (size_t)b * 18, 2);
        for (int t = 0; t < 128; t += 2) {
            const uint8_t *p0 = src + (size_t)row_of[t] * rb + (size_t)b * 18 + 2;
            const uint8_t *p1 = src + (size_t)row_of[t + 1] * rb + (size_t)b * 18 + 2;
            uint8_t *ob = o + 256 + 16 * (t / 32) + (t % 32) / 2;
            for (int half = 0; half < 2; half++) {
                uint64_t w0, w1;
                memcpy(&w0, p0 + 8 * half, 8);
                memcpy(&w1, p1 + 8 * half, 8);
                const uint64_t ev = (w0 & lo4) | (w1 & lo4) << 4, od = (w0 >> 4 & lo4) | (w1 & ~lo4);
                for (int u = 0; u < 8; u++) {   /* bit byte 8 half + u: 4-column groups 2 (8 half + u) + 0, 1 */
                    const int c = 2 * (8 * half + u);
                    ob[64 * c] = (uint8_t)(ev >> 8 * u);
                    ob[64 * (c + 1)] = (uint8_t)(od >> 8 * u);
                }
            }
        }
    }
}

/* Row R (0..127) of an L128 group back to Q1_0 blocks. */
static void unpack_l128_row(const uint8_t *grp, int64_t nb, int R, uint8_t *row) {
    const int t = bs_l128_slot(R), L = t / 32, k = (t % 32) / 2, sh = 4 * (t & 1);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pk = grp + (size_t)b * BS_L128_BLOCK;
        uint8_t *out = row + (size_t)b * 18;
        memcpy(out, pk + 2 * R, 2);
        for (int u = 0; u < 16; u++) {
            const int lo = (pk[256 + 64 * (2 * u) + 16 * L + k] >> sh) & 15;
            const int hi = (pk[256 + 64 * (2 * u + 1) + 16 * L + k] >> sh) & 15;
            out[2 + u] = (uint8_t)(lo | hi << 4);
        }
    }
}

#define L128_MIN_WEIGHTS ((int64_t)1 << 20)

/* Whether Q1_0 W takes the 128-row layout. L128 pays from about a million weights up (measured:
 * 1024-wide models on, one row); below, where the whole model sits in L2 (the 256-wide tiny
 * ones), X16 is as fast at one row and faster at several. BITSPARK_Q1_X16=1: Q1_0 in the
 * 16-row layout everywhere (AVX-512; none with AVX2); BITSPARK_Q1_L128=1: L128 wherever 128
 * rows fit, whatever the size (comparisons, tests). */
static int l128_fits(const bs_weight *W) {
    return W->type == BS_Q1_0 && W->ne1 % 128 == 0 && W->ne0 % 128 == 0 &&
           (W->ne0 * W->ne1 >= L128_MIN_WEIGHTS || bs_env_flag("BITSPARK_Q1_L128")) && !bs_env_flag("BITSPARK_Q1_X16");
}

/* Whether W gets a packed layout on this CPU (BS_PACK_NONE if not). */
static int pack_kind_for(const bs_weight *W) {
    if (W->packed || bs_weight_exact() || bs_cpu_level() < BS_CPU_AVX2) return BS_PACK_NONE;
#ifdef BS_CPU_ARM
    return BS_PACK_NONE;   /* the NEON kernels read the natural layouts */
#endif
    if (bs_cpu_level() < BS_CPU_AVX512) {   /* AVX2: Q1_0 L128, Q2 and Q4_1 X16 */
        if (l128_fits(W) && bs_kernel_l128_avx2()) return BS_PACK_Q1_L128;
        if (bs_q2_x16_fits(W) && bs_kernel_q2_x16_avx2()) return BS_PACK_Q2_X16;
        return bs_q4_x16_fits(W) && bs_kernel_q4_x16_avx2() ? BS_PACK_Q4_X16 : BS_PACK_NONE;
    }
    if (l128_fits(W) && bs_kernel_packed_avx512(BS_PACK_Q1_L128)) return BS_PACK_Q1_L128;
    if (W->type == BS_Q1_0 && W->ne1 % 16 == 0 && W->ne0 % 128 == 0 && bs_kernel_packed_avx512(BS_PACK_Q1_X16))
        return BS_PACK_Q1_X16;
    if (bs_q2_x16_fits(W) && bs_kernel_packed_avx512(BS_PACK_Q2_X16)) return BS_PACK_Q2_X16;
    if (bs_q4_x16_fits(W) && bs_kernel_packed_avx512(BS_PACK_Q4_X16)) return BS_PACK_Q4_X16;
    return BS_PACK_NONE;
}

int bs_weight_packable(const bs_weight *W) { return pack_kind_for(W) != BS_PACK_NONE; }

typedef struct {
    const bs_weight *W;
    uint8_t *dst;
    int in_place;
    int rows;                                                                 /* per group */
    void (*group)(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst);   /* packs one */
} pack_job;

/* One 16-row group (rows at src, stride rb) -> BS_PACK_Q1_X16 at dst (nb blocks of 288). */
static void pack_x16_group(const uint8_t *src, size_t rb, int64_t nb, uint8_t *dst) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *rows[16];
        for (int i = 0; i < 16; i++) rows[i] = src + (size_t)i * rb + (size_t)b * 18;
        bs_pack_q1_x16_avx512(rows, dst + (size_t)b * 288);
    }
}

/* Q1_0 / Q4_1 -> a grouped layout (X16, L128) for the row groups of one thread's share. A group
 * holds exactly the bytes of its packed form (its rows' bytes), so in place each group is
 * copied aside and packed over itself. */
static void pack_groups(void *ctx, int ith, int nth) {
    pack_job *j = ctx;
    const bs_weight *W = j->W;
    const int64_t nb = W->ne0 / bs_type_get(W->type)->blck, ng = W->ne1 / j->rows;
    const size_t gbytes = W->row_bytes * (size_t)j->rows;
    int64_t g0, g1;
    bs_pool_split(ng, 1, ith, nth, &g0, &g1);
    uint8_t *tmp = j->in_place && g0 < g1 ? bs_xmalloc(gbytes) : NULL;
    for (int64_t G = g0; G < g1; G++) {
        const uint8_t *grp = (const uint8_t *)W->data + (size_t)G * gbytes;
        if (tmp) grp = memcpy(tmp, grp, gbytes);
        j->group(grp, W->row_bytes, nb, j->dst + (size_t)G * gbytes);
    }
    free(tmp);
}

static void run_pack(int kind, pack_job *j, bs_pool *pool) {
    if (kind == BS_PACK_Q2_X16) {
        bs_pack_q2_x16_weight(j->W, j->dst, pool);
        return;
    }
    j->rows = kind == BS_PACK_Q1_L128 ? 128 : 16;
    j->group = kind == BS_PACK_Q4_X16 ? bs_pack_q4_x16_group : kind == BS_PACK_Q1_X16 ? pack_x16_group
             : bs_cpu_level() >= BS_CPU_AVX512 ? pack_l128_group : pack_l128_group_portable;
    bs_pool_run(pool, pack_groups, j);
}

static int pack_size(const bs_weight *W, size_t *bytes) {
    uint64_t b;
    if (bs_mul_overflow((uint64_t)W->row_bytes, (uint64_t)W->ne1, &b) || b > SIZE_MAX / 2)
        return bs_error("%s: too large to repack", W->name ? W->name : "weight");
    *bytes = (size_t)b;
    return 0;
}

int bs_weight_pack(bs_weight *W, bs_pool *pool) {
    const int kind = pack_kind_for(W);
    size_t bytes = 0;
    if (kind == BS_PACK_NONE) return 0;
    if (pack_size(W, &bytes)) return -1;
    /* 2 MiB-aligned and transparent-huge-page backed: fewer page faults while packing and
     * fewer TLB misses while streaming */
    void *mem = NULL;
    if (posix_memalign(&mem, (size_t)2 << 20, bytes) != 0)
        return bs_error("%s: out of memory repacking %zu bytes", W->name ? W->name : "weight", bytes);
#ifdef MADV_HUGEPAGE
    madvise(mem, bytes, MADV_HUGEPAGE);
#endif
    pack_job j = {.W = W, .dst = mem};
    run_pack(kind, &j, pool);
    W->packed = mem;
    W->pack_kind = kind;
    return 0;
}

int bs_weight_pack_in_place(bs_weight *W, bs_pool *pool) {
    const int kind = pack_kind_for(W);
    size_t bytes = 0;
    if (kind == BS_PACK_NONE) return 0;
    if (pack_size(W, &bytes)) return -1;
    pack_job j = {.W = W, .dst = (uint8_t *)(uintptr_t)W->data, .in_place = 1};
    run_pack(kind, &j, pool);
    W->packed = (void *)(uintptr_t)W->data;
    W->pack_kind = kind;
    return 0;
}

/* Row i of a 16-row BS_PACK_Q1_X16 group back to Q1_0 blocks: the 4 bits of row i in word t
 * are columns 4t..4t+3, so byte u of a block's bits is word 2u's nibble | word 2u+1's << 4. */
static void unpack_q1_x16_row(const uint8_t *grp, int64_t nb, int i, uint8_t *row) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pk = grp + (size_t)b * 288;
        uint8_t *q = row + (size_t)b * 18;
        q[0] = pk[2 * i], q[1] = pk[2 * i + 1];
        for (int u = 0; u < 16; u++) {
            uint64_t w0, w1;
            memcpy(&w0, pk + 32 + 8 * (2 * u), 8);
            memcpy(&w1, pk + 32 + 8 * (2 * u + 1), 8);
            q[2 + u] = (uint8_t)(((w0 >> (4 * i)) & 15) | ((w1 >> (4 * i)) & 15) << 4);
        }
    }
}

const uint8_t *bs_weight_row(const bs_weight *W, int64_t r, uint8_t *buf) {
    if (W->packed && W->data == W->packed && W->pack_kind == BS_PACK_Q2_X16) {
        bs_unpack_q2_x16_row(W, r, buf);
        return buf;
    }
    if (W->packed && W->data == W->packed && W->pack_kind == BS_PACK_Q4_X16) {
        bs_unpack_q4_x16_row(W, r, buf);
        return buf;
    }
    const int64_t nb = W->ne0 / 128;
    if (W->packed && W->data == W->packed && W->pack_kind == BS_PACK_Q1_L128) {
        unpack_l128_row((const uint8_t *)W->packed + (size_t)(r / 128) * (size_t)nb * BS_L128_BLOCK, nb, (int)(r % 128), buf);
        return buf;
    }
    if (!W->packed || W->data != W->packed || W->pack_kind != BS_PACK_Q1_X16)
        return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    unpack_q1_x16_row((const uint8_t *)W->packed + (size_t)(r / 16) * (size_t)nb * 288, nb, (int)(r % 16), buf);
    return buf;
}

void bs_weight_release(bs_weight *W) {
    if (!W) return;
    if (W->packed && W->packed != W->data) free(W->packed);
    else if (W->packed) return;   /* in place: the data itself is packed, nothing to undo */
    W->packed = NULL;
    W->pack_kind = BS_PACK_NONE;
}
