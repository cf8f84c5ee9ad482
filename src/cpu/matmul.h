/* matmul.h: the one entry point the models use to multiply activations by a weight matrix.
 * The model code only ever calls these; the kernels behind them (scalar reference, AVX2,
 * AVX-512, multi-row, threads) can change without touching any model. */
#ifndef BS_MATMUL_H
#define BS_MATMUL_H

#include <stdint.h>
#include <stddef.h>

struct gguf_tensor;
typedef struct bs_pool bs_pool;   /* thread pool (threadpool.h); NULL = calling thread only */

/* Low-rank terms a weight can carry (LoRA adapters, model/lora.h): y += scale * B (A x). */
typedef struct bs_lora_tensor {
    char *name;               /* base tensor, e.g. "blk.3.attn_q.weight" */
    int64_t in, out;
    int r;
    float scale;              /* alpha / r (or alpha / sqrt(r), or 1), without the user scale */
    float *a;                 /* [r][in] */
    float *b;                 /* [out][r] */
} bs_lora_tensor;

typedef struct bs_lora_ref {
    const bs_lora_tensor *t;
    float scale;              /* t->scale * user scale */
    struct bs_lora_ref *next;
} bs_lora_ref;

/* PrismML's Hadamard fold (`prism.hadamard.*`, Bonsai 2): a weight stored with every row
 * rotated, w' = H (s * P w), multiplies activations rotated the same way, x' = H (s * P x), and
 * gives the same products (H is orthogonal, s a +-1 vector, P a permutation). H is the
 * normalized Sylvester-Walsh-Hadamard matrix applied to each block of `block` inputs; P is the
 * identity, or for a DeltaNet output projection (perm_hd > 0) the V heads from the file's tiled
 * order [hd, nk, rep] to the grouped order [hd, rep, nk] the fold was computed in. An embedding
 * table stored rotated gives its rows back through the inverse, e = s * (H z) (`inverse`). */
typedef struct bs_rotation {
    int block;               /* a power of two dividing width */
    int64_t width;
    const float *signs;      /* width values of +-1, or NULL for all +1 */
    int perm_hd, perm_nk, perm_rep;   /* perm_hd * perm_nk * perm_rep == width, or perm_hd == 0 */
    int inverse;
} bs_rotation;

/* y = the rows of x rotated by r (r->inverse: the inverse rotation); x and y may be the same. */
void bs_rotate_rows(const bs_rotation *r, const float *x, float *y, int64_t n_rows, bs_pool *pool);

/* A 2-D weight: ne1 rows of ne0 elements, each row bs_row_size(type, ne0) bytes. */
typedef struct bs_weight {
    int type;
    int64_t ne0, ne1;
    const void *data;
    size_t row_bytes;
    const char *name;
    void *packed;        /* NULL, or W's data repacked by bs_weight_pack (owned by the weight) */
    int pack_kind;       /* layout of packed (kernels.h), 0 when none */
    const struct bs_lora_ref *lora;   /* NULL, or LoRA deltas added by bs_matmul (lora.h) */
    const bs_rotation *rot;  /* NULL, or the fold the stored rows carry: bs_matmul rotates x
                                (LoRA terms see x as given), bs_get_rows un-rotates rows */
} bs_weight;

/* Fill a bs_weight from a tensor (must be 1-D or 2-D). Returns 0 or -1 with bs_error. */
int bs_weight_from_tensor(bs_weight *w, const struct gguf_tensor *t);

/* y[r*ne1 + o] = sum_i W[o][i] * x[r*ne0 + i] for r < n_rows.
 * Activations are converted to the weight type's vec_dot_type the way llama.cpp's CPU backend
 * does (Q8_0 for Q1_0/Q2_0/Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for K-quants and TQ, F16/BF16 for
 * F16/BF16 weights, F32 as is).
 * A row's result never depends on n_rows (same accumulation order), so verifying k drafted
 * tokens in one call gives exactly the logits of k one-token calls. */
void bs_matmul(const bs_weight *W, const float *x, int64_t n_rows, float *y, bs_pool *pool);
/* y[i] = W[i] x for i < nw, products that share their input: where consecutive products want
 * the same quantized activations, x is quantized once for them. The same bits as bs_matmul. */
void bs_matmul_group(const bs_weight *const *W, int nw, const float *x, int64_t n_rows, float *const *y,
                     bs_pool *pool);

/* At load time: the layout of the fastest kernel for this CPU (today Q1_0 with AVX-512 and
 * rows % 16 == 0, columns % 128 == 0: 16 rows x 4 columns per 64-bit mask word), which bs_matmul
 * then uses. Results stay within the kernels' tolerance of the scalar oracle (not llama.cpp's
 * float order) and keep the row-count and thread invariance. Nothing is done (returns 0) when no
 * packed layout applies or BITSPARK_EXACT is set (bs_weight_exact).
 * bs_weight_pack makes a copy (W's size again, freed by bs_weight_release); W->data stays.
 * bs_weight_pack_in_place packs over W->data (must be writable; same size): W->packed ==
 * W->data then, and readers of raw rows must go through bs_weight_row.
 * Return 0 or -1 with bs_error. */
int bs_weight_pack(bs_weight *W, bs_pool *pool);
int bs_weight_pack_in_place(bs_weight *W, bs_pool *pool);
void bs_weight_release(bs_weight *W);
/* Whether bs_weight_pack / bs_weight_pack_in_place would pack W on this CPU now. */
int bs_weight_packable(const bs_weight *W);
/* BITSPARK_EXACT=1 (env): keep llama.cpp's x86 float order (no repacking), bit-identical to it. */
int bs_weight_exact(void);
/* Row r of W in its own type's block format: W->data + r * row_bytes, or, when W is packed in
 * place, the row unpacked into buf (row_bytes bytes). */
const uint8_t *bs_weight_row(const bs_weight *W, int64_t r, uint8_t *buf);

/* out[r*ne0 ..] = dequantized row ids[r] of W (embedding lookup). Returns -1 on a bad id. */
int bs_get_rows(const bs_weight *W, const int32_t *ids, int64_t n, float *out);

#endif
