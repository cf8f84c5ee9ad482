/* vk_kernels.c: weights uploaded into the kernels' layouts (split by rows to respect
 * maxStorageBufferRange) and the step kernels as single operations: matrix products with the
 * activations quantized on the device, RMSNorm, the quantizer itself and the copy roofline. */
#include "vulkan/vk_internal.h"
#include "formats/quant.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

static int kernel_for(int type, int *bits, int *subs) {
    switch (type) {
    case BS_Q1_0: *bits = 1; *subs = 4; return BS_VK_K_MV_Q1;
    case BS_Q2_0: case BS_PQ2_0: case BS_PTQ1_0: *bits = 2; *subs = 4; return BS_VK_K_MV_Q2_128;   /* PTQ1_0 as PQ2_0 */
    case BS_Q2_0_G64: *bits = 2; *subs = 2; return BS_VK_K_MV_Q2_64;
    case BS_Q8_0: *bits = 8; *subs = 1; return BS_VK_K_MV_Q8;
    case BS_Q4_1: *bits = 4; *subs = 1; return BS_VK_K_MV_Q4_1;
    default: *bits = 32; *subs = 0; return BS_VK_K_MV_F32;
    }
}

/* Host images of rows [r0, r0+n) in the kernel's layout. Scales stay the file's fp16 (the
 * shaders widen them exactly), so a product reads the GGUF's bytes and no more. */
static void repack_int(const bs_vk_tensor *W, const bs_vk_matrix *m, int64_t r0, int64_t n, int64_t ld, int64_t roff,
                       uint32_t *codes, uint16_t *scales) {
    const int64_t n_sub = W->ne0 / 32, n_grp = n_sub / m->subs;
    const size_t hdr = W->type == BS_Q4_1 ? 4 : 2;   /* fp16 d (and Q4_1's fp16 m) */
    const size_t blk_bytes = hdr + (size_t)m->subs * (size_t)m->bits * 4;
    uint8_t *pq2 = W->type == BS_PTQ1_0 ? bs_xmalloc(bs_row_size(BS_PQ2_0, W->ne0)) : NULL;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)(r0 + r) * W->row_bytes;
        if (pq2) {   /* base-3 trits to the 2-bit codes the Q2 kernel reads (the same values) */
            bs_ptq1_0_to_pq2_0(row, pq2, W->ne0);
            row = pq2;
        }
        const int64_t o = roff + r;   /* its row in a layout of ld rows */
        for (int64_t g = 0; g < n_grp; g++) {
            const uint8_t *b = row + (size_t)g * blk_bytes;
            uint16_t h;
            memcpy(&h, b, 2);
            scales[g * ld + o] = h;
            if (hdr == 4) {
                memcpy(&h, b + 2, 2);
                scales[(n_grp + g) * ld + o] = h;
            }
            for (int k = 0; k < m->subs; k++)
                for (int w = 0; w < m->bits; w++) {
                    uint32_t v;
                    memcpy(&v, b + hdr + ((size_t)k * m->bits + w) * 4, 4);   /* little-endian host */
                    codes[(g * ld + o) * m->subs * m->bits + k * m->bits + w] = v;   /* mv_q.glsl's layout */
                }
        }
    }
    free(pq2);
}

static int repack_f32(const bs_vk_tensor *W, int64_t r0, int64_t n, float *out) {
    float *tmp = bs_xmalloc(sizeof *tmp * (size_t)W->ne0);
    int rc = 0;
    for (int64_t r = 0; r < n && !rc; r++) {
        rc = bs_dequantize(W->type, (const uint8_t *)W->data + (size_t)(r0 + r) * W->row_bytes, tmp, W->ne0);
        for (int64_t i = 0; i < W->ne0; i++) out[i * n + r] = tmp[i];
    }
    free(tmp);
    return rc;
}

/* How the CPU path rounds the activations of a float-layout product (act_round.comp's mode):
 * those formats' dot products take F16, BF16 or int8 activations, which a float kernel would
 * not see. 0 for the integer layouts (they quantize themselves) and F32. */
static int act_for(int type, int kernel, int64_t ne0) {
    const bs_type_traits *tt = bs_type_get(type);
    const int vdt = tt ? tt->vec_dot_type : BS_F32;
    const int act = kernel != BS_VK_K_MV_F32 ? 0 : vdt == BS_F16 ? 1 : vdt == BS_BF16 ? 2
                  : (vdt == BS_Q8_0 || vdt == BS_Q8_1) ? 3 : vdt == BS_Q8_K ? 4 : 0;
    return act == 4 && ne0 % 256 ? 0 : act;
}

bool bs_vk_rounds_input(int type, int64_t ne0) {
    int bits, subs;
    return act_for(type, kernel_for(type, &bits, &subs), ne0) != 0;
}

/* m's kernel and layout for W (no rows yet); false, with the error said, for a shape the
 * kernels do not take. */
static bool matrix_meta(bs_vk_matrix *m, const bs_vk_tensor *W) {
    if (!W->data || W->ne0 <= 0 || W->ne1 <= 0 || bs_row_size(W->type, W->ne0) != W->row_bytes || W->ne0 % 32) {
        bs_error("Vulkan: %s: unsupported shape or type", W->name ? W->name : "weight");
        return false;
    }
    m->kernel = kernel_for(W->type, &m->bits, &m->subs);
    m->act = act_for(W->type, m->kernel, W->ne0);
    m->ne0 = W->ne0;
    m->ne1 = W->ne1;
    if (m->kernel != BS_VK_K_MV_F32 && W->ne0 % (32 * m->subs)) {
        bs_error("Vulkan: %s: bad row length", W->name ? W->name : "weight");
        return false;
    }
    return true;
}

/* split-K: a GPU wants tens of thousands of invocations per product, decode has one per row;
 * slices of the columns make up the difference (never more than there are groups). Q1_0 and
 * Q2_0 (the Bonsai formats) only: Q8_0 and Q4_1 keep llama.cpp's x86 float order in one slice,
 * which their fixtures need to stay within bounds. BITSPARK_VK_SPLIT=N caps the slices (1:
 * none). From the layout's row count only. */
static int split_for(const bs_vk_matrix *m, int64_t rows) {
    const char *sp = getenv("BITSPARK_VK_SPLIT");
    const int64_t n_grp = m->kernel == BS_VK_K_MV_F32 ? 1 : m->ne0 / 32 / m->subs;
    int split = 1;
    if (m->kernel != BS_VK_K_MV_F32 && m->bits <= 2) {
        const int cap = sp && *sp ? atoi(sp) : 8;
        while (split * 2 <= cap && split * 2 <= n_grp && rows * split < 65536) split *= 2;
    }
    return split;
}

/* Bytes per row of m's codes and of its scales. */
static void row_bytes(const bs_vk_matrix *m, bool q4_1, uint64_t *code_bytes, uint64_t *scale_bytes) {
    const bool f32 = m->kernel == BS_VK_K_MV_F32;
    *code_bytes = f32 ? 4u * (uint64_t)m->ne0 : (uint64_t)m->ne0 / 32 * m->bits * 4;
    *scale_bytes = f32 ? 4 : 2u * (uint64_t)(m->ne0 / 32 / m->subs) * (q4_1 ? 2 : 1);
}

static int fill_parts(bs_vk_ctx *c, bs_vk_matrix *m, const bs_vk_tensor *W);

bs_vk_matrix *bs_vk_matrix_new(bs_vk_ctx *c, const bs_vk_tensor *W) {
    bs_vk_matrix *m = bs_xcalloc(1, sizeof *m);
    if (!matrix_meta(m, W)) { free(m); return NULL; }
    m->name = W->name ? bs_xstrdup(W->name) : NULL;
    m->split = split_for(m, W->ne1);
    uint64_t code_bytes, scale_bytes;
    row_bytes(m, W->type == BS_Q4_1, &code_bytes, &scale_bytes);
    /* rows per part: whole workgroups of 64 where that many fit */
    int64_t per = (int64_t)(c->max_weight_binding / code_bytes);
    if (per >= 64) per = per / 64 * 64;
    if (per < 1) {
        bs_error("Vulkan: %s: a row of %lld elements is too long for one binding", W->name ? W->name : "weight", (long long)W->ne0);
        bs_vk_matrix_free(c, m);
        return NULL;
    }
    m->n_parts = (int)((W->ne1 + per - 1) / per);
    m->parts = bs_xcalloc((size_t)m->n_parts, sizeof *m->parts);
    for (int i = 0; i < m->n_parts; i++) {
        m->parts[i].row0 = (int64_t)i * per;
        m->parts[i].rows = BS_MIN(per, W->ne1 - m->parts[i].row0);
    }
    if (fill_parts(c, m, W)) { bs_vk_matrix_free(c, m); return NULL; }
    return m;
}

/* m's parts' buffers made and filled from W (their rows set). */
static int fill_parts(bs_vk_ctx *c, bs_vk_matrix *m, const bs_vk_tensor *W) {
    const bool f32 = m->kernel == BS_VK_K_MV_F32;
    uint64_t code_bytes, scale_bytes;
    row_bytes(m, W->type == BS_Q4_1, &code_bytes, &scale_bytes);
    for (int i = 0; i < m->n_parts; i++) {
        bs_vk_mat_part *p = &m->parts[i];
        /* (fp16 scales: a part's plane rounded up to whole 32-bit words) */
        const size_t cb = (size_t)(code_bytes * (uint64_t)p->rows), sb = ((size_t)(scale_bytes * (uint64_t)p->rows) + 3) & ~(size_t)3;
        void *hc = bs_xmalloc(cb), *hs = bs_xcalloc(1, sb);
        int rc = 0;
        if (f32) rc = repack_f32(W, p->row0, p->rows, hc);
        else repack_int(W, m, p->row0, p->rows, p->rows, 0, hc, hs);
        if (!rc) rc = bs_vk_buf_new(c, &p->codes, cb, false) || bs_vk_buf_new(c, &p->scales, sb, false) ||
                      bs_vk_buf_write(c, &p->codes, 0, hc, cb) || bs_vk_buf_write(c, &p->scales, 0, hs, sb);
        free(hc);
        free(hs);
        if (rc) return -1;
    }
    return 0;
}

/* The layout L's buffers made and filled from its n matrices W (in order); m[k], when given,
 * borrow them again. */
static int fill_cat(bs_vk_ctx *c, bs_vk_matrix *L, const bs_vk_tensor *const *W, int n, bs_vk_matrix *const *m) {
    const int64_t total = L->ne1;
    uint64_t code_bytes, scale_bytes;
    row_bytes(L, W[0]->type == BS_Q4_1, &code_bytes, &scale_bytes);
    const size_t cb = (size_t)(code_bytes * (uint64_t)total), sb = ((size_t)(scale_bytes * (uint64_t)total) + 3) & ~(size_t)3;
    uint32_t *hc = bs_xmalloc(cb);
    uint16_t *hs = bs_xcalloc(1, sb);
    for (int64_t k = 0, off = 0; k < n; off += W[k]->ne1, k++) repack_int(W[k], L, 0, W[k]->ne1, total, off, hc, hs);
    int rc = bs_vk_buf_new(c, &L->parts[0].codes, cb, false) || bs_vk_buf_new(c, &L->parts[0].scales, sb, false) ||
             bs_vk_buf_write(c, &L->parts[0].codes, 0, hc, cb) || bs_vk_buf_write(c, &L->parts[0].scales, 0, hs, sb);
    free(hc);
    free(hs);
    for (int k = 0; k < n && m && !rc; k++) {
        m[k]->parts[0].codes = L->parts[0].codes;
        m[k]->parts[0].scales = L->parts[0].scales;
    }
    return rc ? -1 : 0;
}

/* Matrices that read one input, in one layout (their rows one after another), so one dispatch
 * computes them all (bs_vk_record_mv_cat): out[k] is W[k]'s matrix, whose rows live in the
 * layout. 1 made, 0 when they do not fit one layout (same integer format and row length, one
 * binding: nothing made), -1 on an error. The layout's split-K is its total row count's. */
int bs_vk_matrix_cat(bs_vk_ctx *c, const bs_vk_tensor *const *W, int n, bs_vk_matrix **lay, bs_vk_matrix **out) {
    bs_vk_matrix m0 = {0}, mk = {0};
    if (n < 2 || n > BS_VK_CAT_MAX || !matrix_meta(&m0, W[0]) || m0.kernel == BS_VK_K_MV_F32) return bs_clear_error(), 0;
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (!matrix_meta(&mk, W[k])) return bs_clear_error(), 0;
        if (W[k]->type != W[0]->type || mk.ne0 != m0.ne0) return 0;
        total += mk.ne1;
    }
    uint64_t code_bytes, scale_bytes;
    row_bytes(&m0, W[0]->type == BS_Q4_1, &code_bytes, &scale_bytes);
    const size_t cb = (size_t)(code_bytes * (uint64_t)total);
    if (cb > c->max_weight_binding || total >= (1 << 30)) return 0;
    bs_vk_matrix *L = bs_xcalloc(1, sizeof *L);
    *L = m0;
    L->ne1 = total;
    L->split = split_for(L, total);
    L->n_parts = 1;
    L->parts = bs_xcalloc(1, sizeof *L->parts);
    L->parts[0].rows = total;
    if (fill_cat(c, L, W, n, NULL)) { bs_vk_matrix_free(c, L); return -1; }
    for (int64_t k = 0, off = 0; k < n; off += W[k]->ne1, k++) {
        bs_vk_matrix *m = bs_xcalloc(1, sizeof *m);
        matrix_meta(m, W[k]);
        m->name = W[k]->name ? bs_xstrdup(W[k]->name) : NULL;
        m->split = L->split;
        m->n_parts = 1;
        m->parts = bs_xcalloc(1, sizeof *m->parts);
        m->parts[0] = (bs_vk_mat_part){.rows = m->ne1, .codes = L->parts[0].codes, .scales = L->parts[0].scales};
        m->lay_rows = total;
        m->rbase = off;
        m->borrowed = true;
        out[k] = m;
    }
    *lay = L;
    return 1;
}

void bs_vk_matrix_release(bs_vk_ctx *c, bs_vk_matrix *m) {
    for (int i = 0; m && i < m->n_parts; i++) {
        if (!m->borrowed) {
            bs_vk_buf_free(c, &m->parts[i].codes);
            bs_vk_buf_free(c, &m->parts[i].scales);
        }
        memset(&m->parts[i].codes, 0, sizeof m->parts[i].codes);
        memset(&m->parts[i].scales, 0, sizeof m->parts[i].scales);
    }
}

int bs_vk_matrix_refill(bs_vk_ctx *c, bs_vk_matrix *m, const bs_vk_tensor *W) {
    if (W->ne0 != m->ne0 || W->ne1 != m->ne1) return bs_error("Vulkan: %s changed shape", m->name ? m->name : "a matrix");
    return fill_parts(c, m, W);
}

int bs_vk_matrix_cat_refill(bs_vk_ctx *c, bs_vk_matrix *lay, const bs_vk_tensor *const *W, int n, bs_vk_matrix *const *m) {
    int64_t total = 0;
    for (int k = 0; k < n; k++) total += W[k]->ne1;
    if (total != lay->ne1) return bs_error("Vulkan: a layout's matrices changed shape");
    return fill_cat(c, lay, W, n, m);
}

int bs_vk_upload_mat(bs_vk_ctx *c, bs_vk_matrix **m, const bs_vk_tensor *t) {
    return (*m = bs_vk_matrix_new(c, t)) ? 0 : -1;
}

/* Those of t that share t[0]'s format and fold go into one layout (*lay), the rest are uploaded alone:
 * the target's mixer inputs and the drafter's q, k, v. BITSPARK_VK_NO_CAT=1: all alone. */
int bs_vk_upload_inputs(bs_vk_ctx *c, bs_vk_matrix **lay, const bs_vk_tensor *const *t, bs_vk_matrix **const *m, int n) {
    const bs_vk_tensor *ct[BS_VK_CAT_MAX] = {0};
    bs_vk_matrix *cm[BS_VK_CAT_MAX] = {0};
    int idx[BS_VK_CAT_MAX] = {0}, nc = 0;
    for (int k = 0; k < n && nc < BS_VK_CAT_MAX; k++)
        if (t[k]->type == t[0]->type && bs_vk_fold_same(&t[k]->fold, &t[0]->fold)) ct[nc] = t[k], idx[nc++] = k;
    const int rc = bs_env_flag("BITSPARK_VK_NO_CAT") ? 0 : bs_vk_matrix_cat(c, ct, nc, lay, cm);
    if (rc < 0) return -1;
    for (int k = 0; k < nc && rc; k++) *m[idx[k]] = cm[k];
    for (int k = 0; k < n; k++)
        if (!*m[k] && bs_vk_upload_mat(c, m[k], t[k])) return -1;
    return 0;
}

void bs_vk_matrix_free(bs_vk_ctx *c, bs_vk_matrix *m) {
    if (!m) return;
    bs_vk_matrix_lora_clear(c, m);
    free(m->name);
    for (int i = 0; i < m->n_parts && !m->borrowed; i++) {
        bs_vk_buf_free(c, &m->parts[i].codes);
        bs_vk_buf_free(c, &m->parts[i].scales);
    }
    free(m->parts);
    free(m);
}

int bs_vk_matrix_parts(const bs_vk_matrix *m) { return m->n_parts; }
int bs_vk_matrix_split(const bs_vk_matrix *m) { return m->split; }

typedef struct mv_push { uint32_t rows, cols, n, ldy, row0, pad; } mv_push;
typedef struct q8_push { uint32_t n_blocks, mode, H, D; } q8_push;


int bs_vk_rows_kernel(const bs_vk_matrix *m) {
    switch (m->kernel) {
    case BS_VK_K_MV_Q1: return BS_VK_K_ROWS_Q1;
    case BS_VK_K_MV_Q2_128: return BS_VK_K_ROWS_Q2_128;
    case BS_VK_K_MV_Q2_64: return BS_VK_K_ROWS_Q2_64;
    case BS_VK_K_MV_Q8: return BS_VK_K_ROWS_Q8;
    case BS_VK_K_MV_Q4_1: return BS_VK_K_ROWS_Q4_1;
    default: return BS_VK_K_ROWS_F32;
    }
}

int bs_vk_record_quant(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am,
                       uint64_t n_blocks) {
    return bs_vk_record_quant_gated(c, x, NULL, 0, 0, 0, aq, as, am, n_blocks);
}

int bs_vk_record_quant_gated(bs_vk_ctx *c, const bs_vk_buf *x, const bs_vk_buf *g, int mode, uint32_t H, uint32_t D,
                             const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am, uint64_t n_blocks) {
    q8_push qp = {(uint32_t)n_blocks, (uint32_t)mode, H, D};
    const bs_vk_buf *b[5] = {x, aq, as, am, g};   /* NULL: unused (bs_vk_dispatch) */
    if (bs_vk_groups(n_blocks, 64) > 65535) return bs_error("Vulkan: too many activation blocks in one dispatch");
    return bs_vk_dispatch(c, BS_VK_K_QUANT_Q8, b, &qp, bs_vk_groups(n_blocks, 64), 1, 1);
}

int bs_vk_record_act(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, const bs_vk_buf *xr, int n) {
    const uint64_t nb = (uint64_t)n * m->ne0 / (m->act == 4 ? 256 : 32);
    uint32_t push[2] = {(uint32_t)m->act, (uint32_t)nb};
    const bs_vk_buf *b[2] = {x, xr};
    if (bs_vk_groups(nb, 64) > 65535) return bs_error("Vulkan: too many activation blocks in one dispatch");
    return bs_vk_dispatch(c, BS_VK_K_ACT_ROUND, b, push, bs_vk_groups(nb, 64), 1, 1);
}

/* mv_q.glsl's push constants (its header says what each is) */
typedef struct mvq_push { uint32_t rows, cols, n, split, rbase, rcount, row0, e1, e2, e3, l0, l1, l2, l3; float eps; } mvq_push;

static mvq_push mvq_single(const bs_vk_matrix *m, const bs_vk_mat_part *p, int n) {
    return (mvq_push){.rows = (uint32_t)(m->borrowed ? m->lay_rows : p->rows), .cols = (uint32_t)m->ne0, .n = (uint32_t)n,
                      .split = (uint32_t)m->split, .rbase = (uint32_t)m->rbase, .rcount = (uint32_t)p->rows,
                      .row0 = (uint32_t)p->row0, .e1 = ~0u, .e2 = ~0u, .e3 = ~0u, .l0 = (uint32_t)m->ne1};
}

/* Products of more than 8 rows: mm_q's kernel for mv_q's (c->mm: vk_mm.c), mm_ql's for Q8_0 and
 * Q4_1 (c->mm_lanes) */
int bs_vk_mm_kernel(const bs_vk_ctx *c, int k, int n) {
    if (n <= 8) return -1;
    if (c->mm_lanes && k == BS_VK_K_MV_Q8) return BS_VK_K_MM_Q8;
    if (c->mm_lanes && k == BS_VK_K_MV_Q4_1) return BS_VK_K_MM_Q4_1;
    if (c->mm == BS_VK_MM_OFF) return -1;
    switch (k) {
    case BS_VK_K_MV_Q1: return BS_VK_K_MM_Q1;
    case BS_VK_K_MV_Q2_128: return BS_VK_K_MM_Q2_128;
    case BS_VK_K_MV_Q2_64: return BS_VK_K_MM_Q2_64;
    case BS_VK_K_GLU_Q1: return BS_VK_K_MMG_Q1;
    case BS_VK_K_GLU_Q2_128: return BS_VK_K_MMG_Q2_128;
    case BS_VK_K_GLU_Q2_64: return BS_VK_K_MMG_Q2_64;
    case BS_VK_K_GLUQ_Q1: return BS_VK_K_MMGQ_Q1;
    case BS_VK_K_GLUQ_Q2_128: return BS_VK_K_MMGQ_Q2_128;
    case BS_VK_K_GLUQ_Q2_64: return BS_VK_K_MMGQ_Q2_64;
    default: return -1;   /* other formats, and the epilogues of at most 8 rows */
    }
}

uint64_t bs_vk_mvq_passes(const bs_vk_ctx *c, int k, int n) {
    return bs_vk_groups((uint64_t)n, bs_vk_mm_kernel(c, k, n) >= 0 ? 32 : 8);
}

/* An integer product's grid (mv_q.glsl): activation row groups along x, launched fastest, weight
 * tiles of 256 / split rows along y; more than 8 rows on mm_q: tiles of 32 x 32 (vk_mm.c). */
static int dispatch_mvq(bs_vk_ctx *c, int k, const bs_vk_buf *const *b, const void *push, uint64_t rows, uint32_t split, int n) {
    const int mk = bs_vk_mm_kernel(c, k, n);
    const uint64_t tiles = bs_vk_groups(rows, mk >= 0 ? 32 : 256 / split);
    if (tiles > c->info.max_groups_y) return bs_error("Vulkan: %llu weight tiles in one dispatch", (unsigned long long)tiles);
    return bs_vk_dispatch(c, mk >= 0 ? mk : k, b, push, (uint32_t)bs_vk_mvq_passes(c, k, n), (uint32_t)tiles, 1);
}

/* F32 products that give mv_f32.comp (an invocation per output row, 8 activation rows per
 * workgroup) fewer workgroups than this run mv_f32n.comp, a workgroup per output row: the
 * ternary files' 48-row alpha and beta, the drafter's fc, a tiny head; a vision encoder's
 * products of hundreds of patches fill the GPU the first way, with coalesced reads. */
enum { F32N_GROUPS = 256, F32N_ROWS = 8192 };

static bool f32_narrow(const bs_vk_ctx *c, const bs_vk_matrix *m, int n) {
    return c->f32n && m->kernel == BS_VK_K_MV_F32 && m->ne1 <= F32N_ROWS &&
           bs_vk_groups((uint64_t)m->ne1, 64) * bs_vk_groups((uint64_t)n, 8) < F32N_GROUPS;
}

bool bs_vk_act_inline(const bs_vk_ctx *c, const bs_vk_matrix *m, int n) {
    return f32_narrow(c, m, n) && (m->act == 1 || m->act == 2);
}

int bs_vk_record_mv(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, const bs_vk_buf *aq, const bs_vk_buf *as,
                    const bs_vk_buf *am, int n, const bs_vk_buf *y) {
    /* (a LoRA factor B adds into y with its scale: bs_vk_record_lora records it) */
    if (m->kernel == BS_VK_K_MV_F32_LORA) return bs_error("Vulkan: a LoRA factor B is recorded with its adapter");
    const bool lora_a = m->kernel == BS_VK_K_MV_F32N_LORA, narrow = lora_a || f32_narrow(c, m, n);
    const bool f32 = m->kernel == BS_VK_K_MV_F32 || lora_a;
    for (int i = 0; i < m->n_parts; i++) {
        const bs_vk_mat_part *p = &m->parts[i];
        /* (mv_f32n: the last word the rounding its input takes, F16 or BF16; mv_f32: split, unused) */
        mv_push pp = {(uint32_t)p->rows, (uint32_t)m->ne0, (uint32_t)n, (uint32_t)m->ne1, (uint32_t)p->row0,
                      narrow ? (uint32_t)(m->act == 1 || m->act == 2 ? m->act : 0) : (uint32_t)m->split};
        const mvq_push qp = mvq_single(m, p, n);
        const bs_vk_buf *bi[17] = {&p->codes, &p->scales, aq, as, am, y};   /* the rest NULL: unused */
        const bs_vk_buf *bf[5] = {&p->codes, x, y};   /* (mv_f32n: 3-4 a pair's second, unread) */
        if (narrow ? bs_vk_dispatch(c, lora_a ? BS_VK_K_MV_F32N_LORA : BS_VK_K_MV_F32N, bf, &pp, (uint32_t)p->rows,
                                    bs_vk_groups((uint64_t)n, 8), 1)
            : f32  ? bs_vk_dispatch(c, m->kernel, bf, &pp, bs_vk_groups((uint64_t)p->rows, 64), bs_vk_groups((uint64_t)n, 8), 1)
                   : dispatch_mvq(c, m->kernel, bi, &qp, (uint64_t)p->rows, (uint32_t)m->split, n))
            return -1;
        /* (a matrix in a shared layout reads its own rows of it) */
        c->rec.weight_bytes += (f32 ? p->codes.size : (p->codes.size + p->scales.size) * (uint64_t)p->rows / (m->borrowed ? m->lay_rows : p->rows)) *
                               (f32 ? bs_vk_groups((uint64_t)n, 8) : bs_vk_mvq_passes(c, m->kernel, n));
    }
    return 0;
}

bool bs_vk_mv_pairs(const bs_vk_ctx *c, const bs_vk_matrix *a, const bs_vk_matrix *b, int n) {
    return bs_vk_act_inline(c, a, n) && bs_vk_act_inline(c, b, n) && a->act == b->act && a->ne0 == b->ne0 && a->ne1 == b->ne1 &&
           a->n_parts == 1 && b->n_parts == 1 && !a->lora && !b->lora && !a->borrowed && !b->borrowed;
}

int bs_vk_record_mv_pair(bs_vk_ctx *c, const bs_vk_matrix *a, const bs_vk_matrix *b, const bs_vk_buf *x, int n,
                         const bs_vk_buf *ya, const bs_vk_buf *yb) {
    if (!bs_vk_mv_pairs(c, a, b, n)) return bs_error("Vulkan: %s and %s are not one dispatch's pair", a->name ? a->name : "a", b->name ? b->name : "b");
    const bs_vk_mat_part *p = &a->parts[0];
    const mv_push pp = {(uint32_t)p->rows, (uint32_t)a->ne0, (uint32_t)n, (uint32_t)a->ne1, 0, (uint32_t)a->act};
    const bs_vk_buf *bf[5] = {&p->codes, x, ya, &b->parts[0].codes, yb};
    c->rec.weight_bytes += (p->codes.size + b->parts[0].codes.size) * bs_vk_groups((uint64_t)n, 8);
    return bs_vk_dispatch(c, BS_VK_K_MV_F32N, bf, &pp, 2u * (uint32_t)p->rows, bs_vk_groups((uint64_t)n, 8), 1);
}

static int glu_kernel(int mv);

/* mv_q's push constants and bindings 0-16 for the nm products of one layout (consecutive ones:
 * all of them, or a run, whose rows alone are read); kernel k, or with the conv (K > 0) its
 * CONV twin and bindings 17-19 */
static int record_cat(bs_vk_ctx *c, const bs_vk_matrix *lay, const bs_vk_matrix *const *m, int nm, const bs_vk_buf *aq,
                      const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *const *y, const bs_vk_buf *const *conv,
                      int K) {
    if (nm < 1 || nm > BS_VK_CAT_MAX) return bs_error("Vulkan: %d products in one layout", nm);
    for (int k = 1; k < nm; k++)
        if (m[k]->rbase != m[k - 1]->rbase + m[k - 1]->ne1) return bs_error("Vulkan: products of a layout not in its order");
    const bs_vk_mat_part *p = &lay->parts[0];
    const int64_t rbase = m[0]->rbase, rcount = m[nm - 1]->rbase + m[nm - 1]->ne1 - rbase;
    struct { mvq_push qp; uint32_t K, from_in; } push;
    mvq_push qp = {.rows = (uint32_t)p->rows, .cols = (uint32_t)lay->ne0, .n = (uint32_t)n, .split = (uint32_t)lay->split,
                   .rbase = (uint32_t)rbase, .rcount = (uint32_t)rcount, .e1 = ~0u, .e2 = ~0u, .e3 = ~0u,
                   .l0 = (uint32_t)m[0]->ne1};
    uint32_t *e = &qp.e1, *l = &qp.l0;
    const bs_vk_buf *bi[21] = {&p->codes, &p->scales, aq, as, am, y[0], [17] = conv ? conv[0] : NULL, conv ? conv[1] : NULL,
                              conv ? conv[2] : NULL, conv ? conv[3] : NULL};   /* NULL: unused (bs_vk_dispatch) */
    for (int k = 1; k < nm; k++) {
        e[k - 1] = (uint32_t)m[k]->rbase;
        l[k] = (uint32_t)m[k]->ne1;
        bi[7 + k] = y[k];
    }
    c->rec.weight_bytes += (p->codes.size + p->scales.size) * (uint64_t)rcount / (uint64_t)p->rows * bs_vk_mvq_passes(c, lay->kernel, n);
    push.qp = qp;
    push.K = (uint32_t)K;
    push.from_in = conv && conv[3];
    const int k = conv ? glu_kernel(lay->kernel) - BS_VK_K_GLU_Q1 + BS_VK_K_MVC_Q1 : lay->kernel;
    return dispatch_mvq(c, k, bi, &push, (uint64_t)rcount, (uint32_t)lay->split, n);
}

int bs_vk_record_mv_cat(bs_vk_ctx *c, const bs_vk_matrix *lay, const bs_vk_matrix *const *m, int nm, const bs_vk_buf *aq,
                        const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *const *y) {
    return record_cat(c, lay, m, nm, aq, as, am, n, y, NULL, 0);
}

bool bs_vk_conv_fusable(const bs_vk_matrix *lay) {
    return glu_kernel(lay->kernel) >= 0 && !lay->act && lay->n_parts == 1;
}

int bs_vk_record_mv_conv(bs_vk_ctx *c, const bs_vk_matrix *lay, const bs_vk_matrix *const *m, int nm, const bs_vk_buf *aq,
                         const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *const *y, const bs_vk_buf *win,
                         const bs_vk_buf *cw, const bs_vk_buf *co, int K, const bs_vk_buf *win_in) {
    if (!bs_vk_conv_fusable(lay) || n < 1 || n > 8 || K < 1 || K > 9)
        return bs_error("Vulkan: no conv in this product's epilogue (%d rows, K %d)", n, K);
    const bs_vk_buf *conv[4] = {win, cw, co, win_in};
    return record_cat(c, lay, m, nm, aq, as, am, n, y, conv, K);
}

/* --- LoRA terms ------------------------------------------------------------------------------ */

/* A small F32 matrix (ne1 rows of ne0, row-major) in mv_f32's column-major layout, one part:
 * LoRA factors, whose rank need not be a multiple of 32; kernel: A's rows (a rank's, of
 * thousands of inputs) a workgroup each (MV_F32N_LORA), B's an invocation each (MV_F32_LORA:
 * rank-long sums), both in the CPU's order. */
static bs_vk_matrix *f32_matrix(bs_vk_ctx *c, const float *w, int64_t ne0, int64_t ne1, int kernel) {
    const uint64_t bytes = 4u * (uint64_t)ne0 * ne1;
    if (ne0 <= 0 || ne1 <= 0 || bytes > c->max_binding) {
        bs_error("Vulkan: a LoRA factor of %lld x %lld does not fit one binding", (long long)ne1, (long long)ne0);
        return NULL;
    }
    bs_vk_matrix *m = bs_xcalloc(1, sizeof *m);
    *m = (bs_vk_matrix){.kernel = kernel, .split = 1, .ne0 = ne0, .ne1 = ne1, .n_parts = 1};
    m->parts = bs_xcalloc(1, sizeof *m->parts);
    m->parts[0].rows = ne1;
    float *t = bs_xmalloc((size_t)bytes);
    for (int64_t r = 0; r < ne1; r++)
        for (int64_t i = 0; i < ne0; i++) t[i * ne1 + r] = w[r * ne0 + i];
    int rc = bs_vk_buf_new(c, &m->parts[0].codes, bytes, false) || bs_vk_buf_new(c, &m->parts[0].scales, 4, false) ||
             bs_vk_buf_write(c, &m->parts[0].codes, 0, t, (size_t)bytes);
    free(t);
    if (rc) { bs_vk_matrix_free(c, m); return NULL; }
    return m;
}

int bs_vk_matrix_lora_add(bs_vk_ctx *c, bs_vk_matrix *m, int r, const float *a, const float *b, float scale) {
    bs_vk_lora *l = bs_xcalloc(1, sizeof *l);
    l->scale = scale;
    if (!(l->a = f32_matrix(c, a, m->ne0, r, BS_VK_K_MV_F32N_LORA)) || !(l->b = f32_matrix(c, b, r, m->ne1, BS_VK_K_MV_F32_LORA))) {
        bs_vk_matrix_free(c, l->a);
        free(l);
        return -1;
    }
    bs_vk_lora **p = &m->lora;
    while (*p) p = &(*p)->next;
    *p = l;
    return 0;
}

void bs_vk_matrix_lora_clear(bs_vk_ctx *c, bs_vk_matrix *m) {
    for (bs_vk_lora *l = m->lora, *next; l; l = next) {
        next = l->next;
        bs_vk_matrix_free(c, l->a);
        bs_vk_matrix_free(c, l->b);
        free(l);
    }
    m->lora = NULL;
}

int bs_vk_record_lora(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *x, int n, const bs_vk_buf *t,
                      const bs_vk_buf *y) {
    for (const bs_vk_lora *l = m->lora; l; l = l->next) {
        bs_vk_barrier(c);   /* W x (and the adapter before's terms) are in y */
        if (bs_vk_record_mv(c, l->a, x, NULL, NULL, NULL, n, t)) return -1;
        bs_vk_barrier(c);
        /* y += scale * B t in B's own dispatch (mv_f32.comp ADD: the scale's bits in pad) */
        const bs_vk_mat_part *p = &l->b->parts[0];
        mv_push pp = {(uint32_t)p->rows, (uint32_t)l->b->ne0, (uint32_t)n, (uint32_t)l->b->ne1, 0, 0};
        memcpy(&pp.pad, &l->scale, 4);
        const bs_vk_buf *bf[3] = {&p->codes, t, y};
        if (bs_vk_dispatch(c, BS_VK_K_MV_F32_LORA, bf, &pp, bs_vk_groups((uint64_t)p->rows, 64), bs_vk_groups((uint64_t)n, 8), 1))
            return -1;
        c->rec.weight_bytes += p->codes.size * bs_vk_groups((uint64_t)n, 8);
    }
    bs_vk_barrier(c);
    return 0;
}

static int glu_kernel(int mv) {
    switch (mv) {
    case BS_VK_K_MV_Q1: return BS_VK_K_GLU_Q1;
    case BS_VK_K_MV_Q2_128: return BS_VK_K_GLU_Q2_128;
    case BS_VK_K_MV_Q2_64: return BS_VK_K_GLU_Q2_64;
    case BS_VK_K_MV_Q8: return BS_VK_K_GLU_Q8;
    case BS_VK_K_MV_Q4_1: return BS_VK_K_GLU_Q4_1;
    default: return -1;
    }
}

bool bs_vk_glu_fusable(const bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up) {
    return c->glu && !gate->lora && !up->lora && !gate->borrowed && !up->borrowed && glu_kernel(gate->kernel) >= 0 && gate->kernel == up->kernel && gate->ne0 == up->ne0 &&
           gate->ne1 == up->ne1 && gate->split == up->split && gate->n_parts == 1 && up->n_parts == 1;
}

int bs_vk_record_glu(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const bs_vk_buf *aq, const bs_vk_buf *as,
                     const bs_vk_buf *am, int n, const bs_vk_buf *y, const bs_vk_buf *const *qout) {
    const bs_vk_mat_part *g = &gate->parts[0], *u = &up->parts[0];
    const mvq_push qp = mvq_single(gate, g, n);
    if (qout && gate->ne1 % 32) return bs_error("Vulkan: GLU quantization needs rows in 32s (%lld)", (long long)gate->ne1);
    const bs_vk_buf *b[17] = {&g->codes, &g->scales, aq, as, am, y, &u->codes, &u->scales, NULL, NULL, NULL,
                              qout ? qout[0] : NULL, qout ? qout[1] : NULL, qout ? qout[2] : NULL};   /* NULL: unused */
    const int k = glu_kernel(gate->kernel) + (qout ? BS_VK_K_GLUQ_Q1 - BS_VK_K_GLU_Q1 : 0);
    /* the passes of the kernel dispatched (GLU of Q8_0 / Q4_1 stays on mv_q's row groups) */
    c->rec.weight_bytes += (g->codes.size + g->scales.size + u->codes.size + u->scales.size) * bs_vk_mvq_passes(c, k, n);
    return dispatch_mvq(c, k, b, &qp, (uint64_t)g->rows, (uint32_t)gate->split, n);
}

bool bs_vk_norm_fusable(const bs_vk_matrix *m) {
    return glu_kernel(m->kernel) >= 0 && !m->act && !m->lora && !m->borrowed && m->n_parts == 1;
}

/* mv_qr's push constants: mv_q's, then the fold's block, whether it has signs, its scale */
typedef struct mvqr_push { mvq_push q; uint32_t rblock, rsigns; float rscale; } mvqr_push;

int bs_vk_record_mv_norm(bs_vk_ctx *c, const bs_vk_matrix *m, const bs_vk_buf *aq, const bs_vk_buf *as, const bs_vk_buf *am,
                         int n, const bs_vk_buf *x, const bs_vk_buf *nw, float eps, const bs_vk_buf *xn,
                         const bs_vk_buf *const *qout, const bs_vk_buf *cnt, const bs_vk_rot *rot, const bs_vk_buf *xr) {
    if (!bs_vk_norm_fusable(m) || m->ne1 % 32) return bs_error("Vulkan: %s: no norm in this product's epilogue", m->name ? m->name : "matrix");
    if (rot && (n > BS_VK_EPI_ROWS || !bs_vk_norm_rotates(rot, (uint32_t)m->ne1) || !xr))
        return bs_error("Vulkan: %s: no rotation in this product's epilogue", m->name ? m->name : "matrix");
    if (!qout || !xn || !cnt || !nw) return bs_error("Vulkan: %s: the norm's epilogue needs its buffers", m->name ? m->name : "matrix");
    const bs_vk_mat_part *p = &m->parts[0];
    mvqr_push qp = {.q = mvq_single(m, p, n)};
    qp.q.eps = eps;
    if (rot) {
        qp.rblock = rot->block;
        qp.rsigns = rot->has_signs;
        qp.rscale = rot->scale;
    }
    const bs_vk_buf *b[19] = {&p->codes, &p->scales, aq, as, am, x, NULL, NULL, NULL, NULL, NULL, qout[0], qout[1], qout[2], nw, xn, cnt,
                              rot ? xr : NULL, rot && rot->has_signs ? &rot->signs : NULL};
    c->rec.weight_bytes += (p->codes.size + p->scales.size) * bs_vk_groups((uint64_t)n, 8);
    const int k = glu_kernel(m->kernel) - BS_VK_K_GLU_Q1 + (rot ? BS_VK_K_MVNR_Q1 : BS_VK_K_MVN_Q1);
    return dispatch_mvq(c, k, b, &qp, (uint64_t)p->rows, (uint32_t)m->split, n);
}

/* mv_q.glsl's ROT with QOUT: a block each workgroup's rows meet whole or in equal parts (256 /
 * split rows a workgroup, both powers of two), whole 32-blocks, one row group (the counters). */
bool bs_vk_glu_rotates(const bs_vk_matrix *gate, const bs_vk_rot *rot, int n) {
    const uint32_t per = 256u / (uint32_t)gate->split;
    return n <= BS_VK_EPI_ROWS && bs_vk_norm_rotates(rot, (uint32_t)gate->ne1) && rot->block >= 32 &&
           (per % rot->block == 0 || rot->block % per == 0);
}

int bs_vk_record_glu_rot(bs_vk_ctx *c, const bs_vk_matrix *gate, const bs_vk_matrix *up, const bs_vk_buf *aq,
                         const bs_vk_buf *as, const bs_vk_buf *am, int n, const bs_vk_buf *y, const bs_vk_buf *const *qout,
                         const bs_vk_rot *rot, const bs_vk_buf *xr, const bs_vk_buf *cnt) {
    if (!bs_vk_glu_fusable(c, gate, up) || !bs_vk_glu_rotates(gate, rot, n) || !qout || !xr || !cnt)
        return bs_error("Vulkan: %s: no rotation in this GLU's epilogue", gate->name ? gate->name : "matrix");
    const bs_vk_mat_part *g = &gate->parts[0], *u = &up->parts[0];
    const mvqr_push qp = {mvq_single(gate, g, n), rot->block, rot->has_signs, rot->scale};
    const bs_vk_buf *b[19] = {&g->codes, &g->scales, aq, as, am, y, &u->codes, &u->scales, NULL, NULL, NULL,
                              qout[0], qout[1], qout[2], NULL, NULL, cnt, xr, rot->has_signs ? &rot->signs : NULL};
    const int k = glu_kernel(gate->kernel) - BS_VK_K_GLU_Q1 + BS_VK_K_GLUR_Q1;
    c->rec.weight_bytes += (g->codes.size + g->scales.size + u->codes.size + u->scales.size) * bs_vk_groups((uint64_t)n, 8);
    return dispatch_mvq(c, k, b, &qp, (uint64_t)g->rows, (uint32_t)gate->split, n);
}

/* bs_vk_matvec_conv's conv: window (moved on), weights, K, output (NULL: none), window read
 * from a buffer of its own */
typedef struct matvec_conv { float *win; const float *w; int K; float *out; bool from_in; } matvec_conv;

/* window (zeros with from_in), weights, output, and with from_in the window read */
static int conv_bufs(bs_vk_ctx *c, const bs_vk_matrix *m, int n, const matvec_conv *cv, bs_vk_buf *b) {
    const uint64_t wb = 4u * (uint64_t)(cv->K - 1 > 0 ? cv->K - 1 : 1) * m->ne1;
    const size_t used = 4u * (size_t)(cv->K - 1) * m->ne1;
    float *z = bs_xcalloc(used / 4 + 1, 4);
    const int rc = bs_vk_buf_new(c, &b[0], wb, true) || bs_vk_buf_new(c, &b[1], 4u * (uint64_t)cv->K * m->ne1, true) ||
                   bs_vk_buf_new(c, &b[2], 4u * (uint64_t)n * m->ne1, true) ||
                   bs_vk_buf_write(c, &b[0], 0, cv->from_in ? z : cv->win, used) ||
                   bs_vk_buf_write(c, &b[1], 0, cv->w, 4u * (size_t)cv->K * m->ne1) ||
                   (cv->from_in && (bs_vk_buf_new(c, &b[3], wb, true) || bs_vk_buf_write(c, &b[3], 0, cv->win, used)));
    free(z);
    return rc;
}

static int matvec_run(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y, const matvec_conv *cv) {
    if (n <= 0 || n > 65535 * 8) return bs_error("Vulkan matvec: bad row count %d", n);
    const uint64_t xb = 4u * (uint64_t)n * m->ne0, yb = 4u * (uint64_t)n * m->ne1;
    if (xb > c->max_binding || yb > c->max_binding) return bs_error("Vulkan matvec: %d rows do not fit one binding", n);
    bs_vk_buf bx, by, bq = {0}, bs = {0}, bm = {0}, br = {0}, bc[4] = {{0}};
    if (bs_vk_buf_new(c, &bx, xb, true)) return -1;
    if (bs_vk_buf_new(c, &by, yb, true)) { bs_vk_buf_free(c, &bx); return -1; }
    const bool f32 = m->kernel == BS_VK_K_MV_F32;
    const uint64_t nb = (uint64_t)n * m->ne0 / 32;
    int rc = bs_vk_buf_write(c, &bx, 0, x, xb);
    if (!rc && !f32) rc = bs_vk_buf_new(c, &bq, nb * 32, false) || bs_vk_buf_new(c, &bs, nb * 4, false) ||
                          bs_vk_buf_new(c, &bm, nb * 4, false);
    if (!rc && m->act) rc = bs_vk_buf_new(c, &br, xb, false);
    if (!rc && cv) rc = conv_bufs(c, m, n, cv, bc);
    if (!rc) rc = bs_vk_begin(c);
    if (!rc && !f32) {
        rc = bs_vk_record_quant(c, &bx, &bq, &bs, &bm, nb);
        bs_vk_barrier(c);
    }
    if (!rc && m->act) {
        rc = bs_vk_record_act(c, m, &bx, &br, n);
        bs_vk_barrier(c);
    }
    const bs_vk_buf *ys[1] = {&by};
    if (!rc) rc = cv ? bs_vk_record_mv_conv(c, m, &m, 1, &bq, &bs, &bm, n, ys, &bc[0], &bc[1], &bc[2], cv->K,
                                            cv->from_in ? &bc[3] : NULL)
                     : bs_vk_record_mv(c, m, m->act ? &br : &bx, &bq, &bs, &bm, n, &by);
    if (c->recording) rc = bs_vk_submit(c) || rc;
    if (!rc) rc = bs_vk_buf_read(c, &by, 0, y, yb);
    if (!rc && cv) rc = bs_vk_buf_read(c, &bc[0], 0, cv->win, 4u * (size_t)(cv->K - 1) * m->ne1) ||
                        bs_vk_buf_read(c, &bc[2], 0, cv->out, 4u * (size_t)n * m->ne1);
    bs_vk_buf_free(c, &bx);
    bs_vk_buf_free(c, &by);
    bs_vk_buf_free(c, &bq);
    bs_vk_buf_free(c, &bs);
    bs_vk_buf_free(c, &br);
    bs_vk_buf_free(c, &bm);
    for (int i = 0; i < 4; i++) bs_vk_buf_free(c, &bc[i]);
    return rc ? -1 : 0;
}

int bs_vk_matvec(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y) {
    return matvec_run(c, m, x, n, y, NULL);
}

int bs_vk_matvec_conv(bs_vk_ctx *c, const bs_vk_matrix *m, const float *x, int n, float *y, float *win, const float *w, int K,
                      float *out, bool from_in) {
    const matvec_conv cv = {win, w, K, out, from_in};
    return matvec_run(c, m, x, n, y, &cv);
}

typedef struct rms_push { uint32_t d; float eps; uint32_t has_w; } rms_push;

int bs_vk_rmsnorm(bs_vk_ctx *c, const float *x, const float *w, int d, int n, float eps, float *y) {
    if (d <= 0 || n <= 0 || n > 65535) return bs_error("Vulkan rmsnorm: bad shape");
    const uint64_t xb = 4u * (uint64_t)n * d;
    bs_vk_buf bx = {0}, bw = {0}, by = {0};
    int rc = bs_vk_buf_new(c, &bx, xb, true) || bs_vk_buf_new(c, &bw, 4u * (uint64_t)d, true) ||
             bs_vk_buf_new(c, &by, xb, true);
    if (!rc) rc = bs_vk_buf_write(c, &bx, 0, x, xb);
    if (!rc && w) rc = bs_vk_buf_write(c, &bw, 0, w, 4u * (size_t)d);
    if (!rc) rc = bs_vk_begin(c);
    if (!rc) {
        rms_push np = {(uint32_t)d, eps, w != NULL};
        const bs_vk_buf *b[3] = {&bx, &bw, &by};
        rc = bs_vk_dispatch(c, BS_VK_K_RMSNORM, b, &np, (uint32_t)n, 1, 1);
        rc = bs_vk_submit(c) || rc;
    }
    if (!rc) rc = bs_vk_buf_read(c, &by, 0, y, xb);
    bs_vk_buf_free(c, &bx);
    bs_vk_buf_free(c, &bw);
    bs_vk_buf_free(c, &by);
    return rc ? -1 : 0;
}

int bs_vk_quantize_q8(bs_vk_ctx *c, const float *x, int d, int n, void *out) {
    if (d <= 0 || d % 32 || n <= 0) return bs_error("Vulkan quantize: bad shape");
    const uint64_t nb = (uint64_t)n * d / 32;
    bs_vk_buf bx = {0}, bq = {0}, bs = {0}, bm = {0};
    int rc = bs_vk_buf_new(c, &bx, nb * 128, true) || bs_vk_buf_new(c, &bq, nb * 32, true) || bs_vk_buf_new(c, &bs, nb * 4, true) ||
             bs_vk_buf_new(c, &bm, nb * 4, true);
    if (!rc) rc = bs_vk_buf_write(c, &bx, 0, x, nb * 128);
    if (!rc) rc = bs_vk_begin(c);
    if (!rc) {
        rc = bs_vk_record_quant(c, &bx, &bq, &bs, &bm, nb);
        rc = bs_vk_submit(c) || rc;
    }
    if (!rc) {
        uint8_t *q = bs_xmalloc(nb * 32);
        float *s = bs_xmalloc(nb * 4);
        rc = bs_vk_buf_read(c, &bq, 0, q, nb * 32) || bs_vk_buf_read(c, &bs, 0, s, nb * 4);
        for (uint64_t b = 0; b < nb && !rc; b++) {
            uint8_t *o = (uint8_t *)out + b * 34;
            const uint16_t h = bs_f32_to_f16(s[b]);
            memcpy(o, &h, 2);
            memcpy(o + 2, q + b * 32, 32);
        }
        free(q);
        free(s);
    }
    bs_vk_buf_free(c, &bx);
    bs_vk_buf_free(c, &bq);
    bs_vk_buf_free(c, &bs);
    bs_vk_buf_free(c, &bm);
    return rc ? -1 : 0;
}

typedef struct copy_push { uint32_t n; } copy_push;

double bs_vk_copy_bandwidth(bs_vk_ctx *c, size_t bytes, int reps) {
    size_t half = BS_MIN(bytes / 2, (size_t)c->max_binding) / 16 * 16;
    if (half < 4096 || reps < 1) { bs_error("Vulkan copy: too small"); return -1; }
    bs_vk_buf a = {0}, b = {0};
    if (bs_vk_buf_new(c, &a, half, false) || bs_vk_buf_new(c, &b, half, false)) {
        bs_vk_buf_free(c, &a);
        return -1;
    }
    copy_push cp = {(uint32_t)(half / 16)};
    const bs_vk_buf *bb[2] = {&a, &b};
    const uint32_t g = BS_MIN(bs_vk_groups(half / 16, 256), 65535u);
    double best = 0;
    for (int pass = 0; pass < 2; pass++) {   /* the first pass warms the pipeline and pages */
        if (bs_vk_begin(c)) break;
        int rc = 0;
        for (int r = 0; r < reps && !rc; r++) {
            rc = bs_vk_dispatch(c, BS_VK_K_COPY, bb, &cp, g, 1, 1);
            bs_vk_barrier(c);
        }
        const double t0 = bs_time();
        if (bs_vk_submit(c) || rc) break;
        const double dt = bs_time() - t0;
        if (pass == 1 && dt > 0) best = 2.0 * (double)half * reps / dt / 1e9;
    }
    bs_vk_buf_free(c, &a);
    bs_vk_buf_free(c, &b);
    return best > 0 ? best : -1;
}

int bs_vk_copy_chain(bs_vk_ctx *c, const void *in, void *out, size_t bytes, bool barrier) {
    if (bytes % 16 || !bytes || bytes / 16 > 65535u * 256) return bs_error("Vulkan copy: %zu bytes", bytes);
    bs_vk_buf b[3] = {{0}};
    int rc = bs_vk_buf_new(c, &b[0], bytes, true) || bs_vk_buf_new(c, &b[1], bytes, false) ||
             bs_vk_buf_new(c, &b[2], bytes, true) || bs_vk_buf_write(c, &b[0], 0, in, bytes) || bs_vk_begin(c);
    if (!rc) {
        const copy_push cp = {(uint32_t)(bytes / 16)};
        const bs_vk_buf *first[2] = {&b[0], &b[1]}, *second[2] = {&b[1], &b[2]};
        rc = bs_vk_dispatch(c, BS_VK_K_COPY, first, &cp, bs_vk_groups(bytes / 16, 256), 1, 1);
        if (barrier) bs_vk_barrier(c);
        rc = bs_vk_dispatch(c, BS_VK_K_COPY, second, &cp, bs_vk_groups(bytes / 16, 256), 1, 1) || rc;
        rc = bs_vk_submit(c) || rc;
    }
    if (!rc) rc = bs_vk_buf_read(c, &b[2], 0, out, bytes);
    for (int i = 0; i < 3; i++) bs_vk_buf_free(c, &b[i]);
    return rc ? -1 : 0;
}

int bs_vk_embed(bs_vk_ctx *c, const bs_vk_matrix *m, const int32_t *tokens, int n, float *out) {
    if (n <= 0 || n > 65535) return bs_error("Vulkan embed: bad token count %d", n);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->ne1) return bs_error("Vulkan embed: token %d out of range", tokens[t]);
    const uint64_t ob = 4u * (uint64_t)n * m->ne0;
    bs_vk_buf bt = {0}, bo = {0};
    int rc = bs_vk_buf_new(c, &bt, 4u * (uint64_t)n, true) || bs_vk_buf_new(c, &bo, ob, true);
    if (!rc) rc = bs_vk_buf_write(c, &bt, 0, tokens, 4u * (size_t)n);
    if (!rc) rc = bs_vk_begin(c);
    if (!rc) {
        const int k = bs_vk_rows_kernel(m);
        for (int i = 0; i < m->n_parts && !rc; i++) {
            const bs_vk_mat_part *p = &m->parts[i];
            uint32_t push[4] = {(uint32_t)p->rows, (uint32_t)m->ne0, (uint32_t)p->row0, (uint32_t)n};
            const bs_vk_buf *bb[4] = {&p->codes, &p->scales, &bt, &bo};
            rc = bs_vk_dispatch(c, k, bb, push, bs_vk_groups((uint64_t)m->ne0, 64), (uint32_t)n, 1);
        }
        rc = bs_vk_submit(c) || rc;
    }
    if (!rc) rc = bs_vk_buf_read(c, &bo, 0, out, ob);
    bs_vk_buf_free(c, &bt);
    bs_vk_buf_free(c, &bo);
    return rc ? -1 : 0;
}
