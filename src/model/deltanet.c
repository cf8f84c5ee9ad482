/* deltanet.c: the Gated DeltaNet mixer of qwen35 (qwen35-arch.md §2), as llama.cpp's fused CPU
 * path runs it: four projections, causal depthwise conv + SiLU over a window of the last
 * kernel-1 pre-conv rows, L2-normed q/k, and the gated delta rule run token by token per V head
 * (V head h reads K/Q head h % n_k_heads), then a per-head gated RMSNorm and the output matmul. */
#include "cpu/compute.h"
#include "model/profile.h"
#include "model/session.h"

#include <string.h>

#define LANES 8

static float reduce(const float acc[LANES]) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* dst = src * decay; return dot(dst, k). dst and src are distinct rows (first token of a batch:
 * the old state is read from the other half) or the same row (see decay_dot_inplace); both do
 * the same operations in the same order. */
static float decay_dot_copy(float *restrict dst, const float *restrict src, float decay,
                            const float *restrict k, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            const float r = src[i + l] * decay;
            dst[i + l] = r;
            acc[l] += r * k[i + l];
        }
    for (int l = 0; i < n; i++, l++) {
        dst[i] = src[i] * decay;
        acc[l] += dst[i] * k[i];
    }
    return reduce(acc);
}

static float decay_dot_inplace(float *restrict row, float decay, const float *restrict k, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            const float r = row[i + l] * decay;
            row[i + l] = r;
            acc[l] += r * k[i + l];
        }
    for (int l = 0; i < n; i++, l++) {
        row[i] *= decay;
        acc[l] += row[i] * k[i];
    }
    return reduce(acc);
}

/* row += k * d; return dot(row, q). */
static float update_dot(float *restrict row, const float *restrict k, float d, const float *restrict q, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            const float r = row[i + l] + k[i + l] * d;
            row[i + l] = r;
            acc[l] += r * q[i + l];
        }
    for (int l = 0; i < n; i++, l++) {
        row[i] += k[i] * d;
        acc[l] += row[i] * q[i];
    }
    return reduce(acc);
}

/* One token of the gated delta rule for one V head. S: d_v rows of d_k (S[i][j] at j*d_k + i);
 * src: the state before this token (S itself, or the pre-batch half for a batch's first token).
 * Decay first, delta against the decayed state, read-out with the updated state (§2.5). */
static void gdn_step(float *S, const float *src, const float *q, const float *k, const float *v,
                     float decay, float beta, float scale, float *o, int dk, int dv) {
    for (int j = 0; j < dv; j++) {
        float *row = S + (size_t)j * dk;
        const float u = src == S ? decay_dot_inplace(row, decay, k, dk)
                                 : decay_dot_copy(row, src + (size_t)j * dk, decay, k, dk);
        const float d = (v[j] - u) * beta;
        o[j] = update_dot(row, k, d, q, dk) * scale;
    }
}

/* Pre-conv input row r of the extended sequence [window rows ; batch rows]. */
static inline const float *xe_row(const float *win, const float *mixed, size_t ms, int r, int km1, int cd) {
    return r < km1 ? win + (size_t)r * cd : mixed + (size_t)(r - km1) * ms;
}

typedef struct gdn_io {
    const float *win_in, *S_in;   /* state before the batch */
    float *win_out, *S_out;       /* state after it */
    const float *mixed, *g, *beta;/* per token t: mixed + t*ms, g + t*gs, beta + t*gs */
    size_t ms, gs;
    float *qkv, *o;               /* scratch [n][conv_dim], output [n][n_v*d_v] */
} gdn_io;

typedef struct gdn_heads_job {
    const bs_qwen35_hparams *hp;
    const gdn_io *io;
    int n;
} gdn_heads_job;

/* The recurrence of the V heads [lo, hi) of this thread over all n tokens. Heads are
 * independent, so the split never changes a result. */
static void gdn_heads(void *ctx, int ith, int nth) {
    const gdn_heads_job *job = ctx;
    const bs_qwen35_hparams *hp = job->hp;
    const gdn_io *io = job->io;
    const int nk = hp->n_k_heads, nv = hp->n_v_heads, dk = hp->d_k, dv = hp->d_v, cd = hp->conv_dim;
    const float scale = 1.0f / sqrtf((float)dk);
    int64_t lo, hi;
    bs_pool_split(nv, 1, ith, nth, &lo, &hi);
    for (int h = (int)lo; h < (int)hi; h++) {
        float *S = io->S_out + (size_t)h * dk * dv;
        const float *src = io->S_in + (size_t)h * dk * dv;
        const int kh = h % nk;
        const bs_gdn_head hd = {
            .S_in = src, .S_out = S, .q = io->qkv + (size_t)kh * dk, .k = io->qkv + (size_t)(nk + kh) * dk,
            .v = io->qkv + (size_t)2 * nk * dk + (size_t)h * dv, .qkv_stride = (size_t)cd,
            .g = io->g + h, .beta = io->beta + h, .gs = io->gs, .o = io->o + (size_t)h * dv,
            .o_stride = (size_t)nv * dv, .n = job->n, .dk = dk, .dv = dv, .scale = scale,
        };
        if (job->n > 0 && bs_gdn_head_simd(&hd)) continue;
        if (job->n == 0) memcpy(S, src, (size_t)dk * dv * sizeof(float));
        for (int t = 0; t < job->n; t++, src = S) {
            const float *row = io->qkv + (size_t)t * cd;
            gdn_step(S, src, row + (size_t)kh * dk, row + (size_t)(nk + kh) * dk,
                     row + (size_t)2 * nk * dk + (size_t)h * dv, expf(io->g[(size_t)t * io->gs + h]),
                     io->beta[(size_t)t * io->gs + h], scale, io->o + (size_t)t * nv * dv + (size_t)h * dv, dk, dv);
        }
    }
}

/* The causal conv for Qwen3.5's kernel of 4, written out so the compiler vectorizes across
 * channels; the same sums in the same order as the general loop below. */
static void conv4(float *restrict out, const float *const rows[], const float *restrict w, int cd) {
    const float *restrict r0 = rows[0], *restrict r1 = rows[1], *restrict r2 = rows[2], *restrict r3 = rows[3];
    for (int c = 0; c < cd; c++)
        out[c] = (((0.0f + r0[c] * w[4 * c]) + r1[c] * w[4 * c + 1]) + r2[c] * w[4 * c + 2]) + r3[c] * w[4 * c + 3];
}

typedef struct gdn_conv_job {
    const bs_qwen35_hparams *hp;
    const bs_qwen35_layer *L;
    const gdn_io *io;
    int n;
} gdn_conv_job;

/* Causal conv + SiLU over this thread's channels (a whole number of heads, so each thread also
 * L2-norms its own q/k heads). Channels are independent: the split never changes a result. */
static void gdn_conv(void *ctx, int ith, int nth) {
    enum { MAX_K = 64 };   /* the loader accepts conv kernels up to 64 */
    const gdn_conv_job *job = ctx;
    const bs_qwen35_hparams *hp = job->hp;
    const gdn_io *io = job->io;
    const int K = hp->conv_kernel, km1 = K - 1, cd = hp->conv_dim, dk = hp->d_k, nqk = 2 * hp->n_k_heads * dk;
    int64_t lo, hi;
    bs_pool_split(cd, dk, ith, nth, &lo, &hi);
    for (int t = 0; t < job->n; t++) {
        float *out = io->qkv + (size_t)t * cd;
        const float *rows[MAX_K];
        for (int i = 0; i < K; i++) rows[i] = xe_row(io->win_in, io->mixed, io->ms, t + i, km1, cd) + lo;
        if (K == 4) conv4(out + lo, rows, job->L->conv1d + (size_t)lo * K, (int)(hi - lo));
        else
            for (int64_t c = lo; c < hi; c++) {
                const float *w = job->L->conv1d + (size_t)c * K;
                float sum = 0.0f;
                for (int i = 0; i < K; i++) sum += rows[i][c - lo] * w[i];
                out[c] = sum;
            }
        bs_silu_mul(out + lo, out + lo, NULL, (size_t)(hi - lo));
        for (int64_t c = lo; c < hi && c < nqk; c += dk) bs_l2norm(out + c, dk, hp->eps);
    }
}

/* conv + SiLU, L2 norms and the recurrence over n tokens. Shared by the forward pass and the
 * rollback replay so that both produce the same bits. */
static void gdn_core(const bs_qwen35_hparams *hp, const bs_qwen35_layer *L, const gdn_io *io, int n,
                     bs_pool *pool) {
    const int km1 = hp->conv_kernel - 1, cd = hp->conv_dim;

    gdn_conv_job cj = {hp, L, io, n};
    if (n > 0) bs_prof_pool_run(BS_PROF_GDN_CONV, pool, gdn_conv, &cj);
    const uint64_t t0 = bs_prof_begin();
    for (int r = 0; r < km1; r++)
        memcpy(io->win_out + (size_t)r * cd, xe_row(io->win_in, io->mixed, io->ms, n + r, km1, cd),
               (size_t)cd * sizeof(float));
    bs_prof_end(BS_PROF_GDN_CONV, t0);

    gdn_heads_job job = {hp, io, n};
    bs_prof_pool_run(BS_PROF_GDN_REC, pool, gdn_heads, &job);
}

void bs_deltanet_forward(bs_session *s, const bs_qwen35_layer *L, int n, bool record) {
    const int nv = s->m->hp.n_v_heads;
    float *alpha = s->gb, *beta = s->gb + (size_t)n * nv;

    bs_prof_matmul(BS_PROF_MM_GDN_IN, &L->qkv, s->xn, n, s->a, s->pool);
    bs_prof_matmul(BS_PROF_MM_GDN_IN, &L->gate, s->xn, n, s->b, s->pool);
    bs_prof_matmul(BS_PROF_MM_GDN_IN, &L->beta, s->xn, n, beta, s->pool);
    bs_prof_matmul(BS_PROF_MM_GDN_IN, &L->alpha, s->xn, n, alpha, s->pool);
    bs_deltanet_mix(s, L, n, record, s->a, s->b, alpha, beta);
    bs_prof_matmul(BS_PROF_MM_GDN_OUT, &L->ssm_out, s->d, n, s->y, s->pool);
}

void bs_deltanet_mix(bs_session *s, const bs_qwen35_layer *L, int n, bool record, float *mixed,
                     const float *z, float *alpha, float *beta) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int nv = hp->n_v_heads, dv = hp->d_v, cd = hp->conv_dim;
    uint64_t t0 = bs_prof_begin();
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            float *a = &alpha[(size_t)t * nv + h], *b = &beta[(size_t)t * nv + h];
            *a = bs_softplus(*a + L->dt_bias[h]) * L->ssm_a[h];   /* log decay g <= 0 */
            *b = bs_sigmoid(*b);
        }
    if (record) {
        const size_t rs = (size_t)cd + 2 * (size_t)nv;
        float *rec = sess_rec(s, L->slot);
        for (int t = 0; t < n; t++) {
            memcpy(rec + t * rs, mixed + (size_t)t * cd, (size_t)cd * sizeof(float));
            memcpy(rec + t * rs + cd, alpha + (size_t)t * nv, (size_t)nv * sizeof(float));
            memcpy(rec + t * rs + cd + nv, beta + (size_t)t * nv, (size_t)nv * sizeof(float));
        }
    }
    const int out = s->in_place ? s->cur : 1 - s->cur;   /* in place: rows are read before written */
    gdn_io io = {
        .win_in = sess_conv(s, L->slot, s->cur), .S_in = sess_ssm(s, L->slot, s->cur),
        .win_out = sess_conv(s, L->slot, out), .S_out = sess_ssm(s, L->slot, out),
        .mixed = mixed, .ms = (size_t)cd, .g = alpha, .beta = beta, .gs = (size_t)nv,
        .qkv = s->c, .o = s->d,
    };
    bs_prof_end(BS_PROF_GDN_GATES, t0);
    gdn_core(hp, L, &io, n, s->pool);

    t0 = bs_prof_begin();
    /* per-head gated RMSNorm: silu(z) * (rmsnorm(o) * ssm_norm), ssm_norm stored raw */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            float *o = s->d + ((size_t)t * nv + h) * dv;
            const float *zh = z + ((size_t)t * nv + h) * dv;
            bs_rmsnorm(o, o, L->ssm_norm, dv, hp->eps);
            bs_silu_mul(o, zh, o, (size_t)dv);
        }
    bs_prof_end(BS_PROF_GDN_NORM, t0);
}

void bs_deltanet_replay(bs_session *s, const bs_qwen35_layer *L, int n) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const size_t rs = (size_t)hp->conv_dim + 2 * (size_t)hp->n_v_heads;
    const float *rec = sess_rec(s, L->slot);
    const int pre = 1 - s->cur;   /* the half holding the state before the last batch */
    gdn_io io = {
        .win_in = sess_conv(s, L->slot, pre), .S_in = sess_ssm(s, L->slot, pre),
        .win_out = sess_conv(s, L->slot, s->cur), .S_out = sess_ssm(s, L->slot, s->cur),
        .mixed = rec, .ms = rs, .g = rec + hp->conv_dim, .beta = rec + hp->conv_dim + hp->n_v_heads,
        .gs = rs, .qkv = s->c, .o = s->d,
    };
    gdn_core(hp, L, &io, n, s->pool);
}
