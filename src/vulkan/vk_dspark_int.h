/* vk_dspark_int.h: the drafter on the device, inside the backend: its network, a context, and
 * the steps vk_dspark.c (blocks, drafts) and vk_dappend.c (context rows) share. */
#ifndef BS_VK_DSPARK_INT_H
#define BS_VK_DSPARK_INT_H

#include "vulkan/vk_internal.h"

enum { APPEND_ROWS = 64, MAX_HEAD_DIM = 256, MAX_BLOCKS = BS_VK_DRAFT_BLOCKS, GROW_BLOCKS = 8 };

/* The rows a block's layers run in: the residual x, the normed h, the products' outputs and the
 * int8 blocks (or rounded rows) they read. A context has its own; the drafter has one for the
 * blocks of several contexts whose layers run as one (record_group). */
typedef struct dl_rows {
    bs_vk_buf x, h, q, kb, vb, att, f1, f2, aq, as, am, xr;
    bs_vk_buf aq2, as2, am2, ncnt;  /* the fused block (block_fusable): down's int8 blocks, mv_q's NORM_OUT counters */
} dl_rows;

typedef struct dl_layer {
    bs_vk_matrix *wq, *wk, *wv, *wo, *gate, *up, *down;
    bs_vk_matrix *qkv;              /* wq, wk, wv as one layout (they borrow its rows), or NULL */
    bs_vk_buf attn_norm, ffn_norm, q_norm, k_norm;
} dl_layer;

struct bs_vk_dspark {
    bs_vk_ctx *c;
    bs_vk_dspark_desc hp;           /* the description's numbers (its pointers are not kept) */
    dl_layer *L;
    const bs_vk_matrix *embd, *output;
    bs_vk_matrix *own_embd, *own_output, *fc;
    bs_vk_buf out_norm, hid_norm, snr;   /* snr: [block_size][n_embd] addends (anchor, masks) */
    bool snr_on;
    int attn_chunk;                 /* positions per chunk of the split attention (BITSPARK_VK_ATTN_CHUNK) */
    bool no_split;                  /* BITSPARK_VK_NO_SPLIT=1: attn_nc.comp, one workgroup per (row, head) */
    bool no_normo;                  /* BITSPARK_VK_NO_NORMO=1: the block's layers in steps apart (block_fusable) */
    bool no_qk;                     /* BITSPARK_VK_NO_QK=1: the block's q/k norms, RoPE and K/V rows apart */
    bs_vk_matrix *markov_a, *markov_b;   /* NULL without a Markov head */
    /* the LM head of several blocks' rows as one product (record_head): their hidden rows, its
       int8 blocks and rounded rows, its logits rows; made on first use, for h_rows rows */
    bs_vk_buf hx, haq, has, ham, hxr, hlogits;
    int h_rows;
    bool head_apart;                /* BITSPARK_VK_DRAFT_HEAD=apart: each block its own head product */
    /* the rows of several contexts' blocks or appends run as one (record_group, vk_dappend.c):
       their rows, final states and rope rows (host visible); made on first use, for g_rows rows */
    dl_rows gr;
    bs_vk_buf ghidden, grope;
    int g_rows;
    bool layers_apart;              /* BITSPARK_VK_DRAFT_LAYERS=apart: each block its own layers */
    bs_vk_buf ain;                  /* several contexts' appends: their tap rows, for a_rows rows */
    int a_rows;
    bool append_apart;              /* BITSPARK_VK_DRAFT_APPEND=apart: each context's append its own pass */
};

struct bs_vk_dctx {
    bs_vk_dspark *d;
    int n_rows_max, R;              /* R: scratch rows, max(APPEND_ROWS, block_size) */
    size_t kv_w;                    /* n_head_kv * head_dim */
    bs_vk_buf *k, *v;               /* per layer [n_rows_max + block_size][kv_w] */
    dl_rows r;
    bs_vk_buf scores;
    bs_vk_buf in, tok, rope, hidden, logits;   /* host visible */
    int n_logits;                   /* rows in logits from the last block */
    /* greedy drafting: the previous draft's Markov row, a slot's scores, their argmax, the
       token the Markov row is read by (host visible: the anchor goes in), the drafts */
    bs_vk_buf mrow, score, best, prev, drafts;
    bs_vk_top_bufs top;             /* a slot's k best (sampled drafts; made on first use) */
    bs_vk_buf unif, lists;          /* a sampled chain's uniforms and its slots' lists (host visible; first use) */
    bs_vk_amax_bufs amax;           /* a slot's argmax (greedy drafts) */
    int n_chunk;                    /* attn_nc_split.comp's chunks of the longest context (0: attn_nc.comp) */
    bs_vk_buf apart, acnt;          /* its partials per (row, head, chunk) and (row, KV head) counters */
    bs_vk_buf kvpos;                /* the block's first cache row (qk.comp's pos0), filled by the recording */
};

/* Rows for R rows of the drafter's layers, and their release (a buffer never made is left). */
int dl_rows_new(bs_vk_ctx *c, const bs_vk_dspark_desc *hp, dl_rows *r, size_t R);
void dl_rows_free(bs_vk_ctx *c, dl_rows *r);
/* Rows the drafter's shared buffers are made for: rows rounded up to GROW_BLOCKS blocks (the
 * server's slots drafting together grow them a step at a time, not a block at a time). */
int dl_grow_rows(const bs_vk_dspark *d, int rows);
/* The drafter's shared rows (d->gr) for at least `rows` rows, made or made again larger (the
 * device settled first); false where they cannot be (the caller goes a context at a time). */
bool dl_group_rows(bs_vk_dspark *d, int rows);
/* RMSNorm of n rows of x with w into y (a barrier after it). */
int dl_norm_rows(const bs_vk_dspark *d, const bs_vk_buf *x, const bs_vk_buf *w, const bs_vk_buf *y, int n);
/* The same with r's x into y, quantized into r's aq.. for the products that read it. */
int dl_norm_q(const bs_vk_dspark *d, const dl_rows *r, const bs_vk_buf *w, const bs_vk_buf *y, int n);
/* y = W x for n rows, the activations quantized (or rounded) in r's rows as the CPU path does. */
int dl_mv(const bs_vk_dspark *d, const dl_rows *r, const bs_vk_matrix *W, const bs_vk_buf *x, int n, const bs_vk_buf *y);
/* The products of r's h (its int8 blocks in aq..) for q, k and v (from = 0) or k and v (1). */
int dl_record_qkv(bs_vk_ctx *c, const dl_rows *r, const dl_layer *L, int from, int n);
/* Per-head RMSNorm with w, then NeoX RoPE (rope's rows), of n rows of nh heads. */
int dl_norm_rope(const bs_vk_dspark *d, const bs_vk_buf *rope, const bs_vk_buf *x, const bs_vk_buf *w, int n, int nh);
/* n rows of w floats: src's from row s0 into dst's from row d0. */
void dl_copy_w(bs_vk_ctx *c, const bs_vk_buf *src, int s0, const bs_vk_buf *dst, int d0, int n, size_t w);
/* qk.comp over n rows of r from row0 (rope's rows from row0): nq q heads and k normed and roped,
 * k and v stored at s's layer-L cache rows from its kvpos. No barrier after it. */
int dl_qk_dispatch(bs_vk_dctx *s, const dl_rows *r, int row0, const bs_vk_buf *rope, const dl_layer *L, int n, int nq);
/* Whether a product reads int8 blocks; whether every layer's K and V products do. */
bool dl_reads_int8(const bs_vk_matrix *m);
bool dl_kv_integer(const bs_vk_dspark *d);

#endif
