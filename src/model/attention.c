/* attention.c: the gated full-attention mixer of qwen35 (qwen35-arch.md §3): attn_q carries query
 * and output gate interleaved per head, per-head RMSNorm of q and k, partial NeoX RoPE, causal
 * softmax attention over the KV cache with blocked GQA (query head h reads KV head
 * h / (n_head / n_head_kv)), sigmoid output gate, output matmul.
 *
 * The cache stores K after norm + RoPE and V raw, in f32 or f16. With f16 the query is rounded to
 * f16 before the K dot products, as llama.cpp's CPU paths do; sums stay in f32. */
#include "cpu/compute.h"
#include "model/profile.h"
#include "model/session.h"
#include "io/util.h"

#include <string.h>

static void store_row(uint8_t *dst, const float *src, int n, int kv_type) {
    if (kv_type == BS_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *h = (uint16_t *)dst;
        if (!bs_simd_f32_to_f16(h, src, (size_t)n))
            for (int i = 0; i < n; i++) h[i] = bs_f32_to_f16(src[i]);
    }
}

/* dst = src rounded to half precision, as the F16 cache holds keys (the same bits either way). */
static void round_f16(float *dst, const float *src, int n) {
    uint16_t h[64];
    for (int i = 0; i < n; i += 64) {
        const int m = BS_MIN(64, n - i);
        if (bs_simd_f32_to_f16(h, src + i, (size_t)m) && bs_simd_f16_to_f32(dst + i, h, (size_t)m)) continue;
        for (int e = i; e < i + m; e++) dst[e] = bs_f16_to_f32(bs_f32_to_f16(src[e]));
    }
}

typedef struct attn_job {
    const bs_session *s;
    const uint8_t *kc, *vc;
    float *qg, *o;
    int n;
} attn_job;

/* Units: (KV head, up to BS_ATTN_MAX_GROUP of the batch's queries on it, row-major over (row,
 * head)): a unit reads the head's cache once for all its rows, so verifying w tokens does not
 * read the cache w times. Queries are independent, so neither the split nor the grouping changes
 * a result. Thread ith uses scratch slot ith. */
static void attend_units(void *ctx, int ith, int nth) {
    const attn_job *job = ctx;
    const bs_session *s = job->s;
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, G = H / Hkv;
    const int nq = job->n * G, parts = (nq + BS_ATTN_MAX_GROUP - 1) / BS_ATTN_MAX_GROUP;
    float *scores = s->scores + (size_t)ith * BS_MAX(H, BS_ATTN_MAX_GROUP) * s->n_ctx;
    float *qb = s->qtmp + (size_t)ith * (2 * BS_ATTN_MAX_GROUP + 1) * D, *ob = qb + (size_t)BS_ATTN_MAX_GROUP * D;
    float *tmp = ob + (size_t)BS_ATTN_MAX_GROUP * D;
    int64_t lo, hi;
    bs_pool_split((int64_t)Hkv * parts, 1, ith, nth, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int kvh = (int)(u / parts), q0 = (int)(u % parts) * BS_ATTN_MAX_GROUP;
        const int gn = BS_MIN(BS_ATTN_MAX_GROUP, nq - q0);
        int nkv[BS_ATTN_MAX_GROUP];
        size_t oat[BS_ATTN_MAX_GROUP];
        for (int i = 0; i < gn; i++) {
            const int t = (q0 + i) / G, h = kvh * G + (q0 + i) % G;
            const float *src = job->qg + (size_t)t * 2 * H * D + (size_t)h * 2 * D;
            float *dst = qb + (size_t)i * D;
            if (s->kv_type == BS_KV_F16)
                round_f16(dst, src, D);
            else
                memcpy(dst, src, (size_t)D * sizeof(float));
            nkv[i] = s->n_past + t + 1;
            oat[i] = (size_t)t * H * D + (size_t)h * D;
        }
        const size_t head_off = (size_t)kvh * D * (s->kv_type == BS_KV_F32 ? 4 : 2);
        bs_attn_queries(qb, gn, nkv, job->kc + head_off, job->vc + head_off, s->kv_row, s->kv_type == BS_KV_F16, D, ob,
                        scores, (size_t)s->n_ctx, tmp);
        for (int i = 0; i < gn; i++) memcpy(job->o + oat[i], ob + (size_t)i * D, (size_t)D * sizeof(float));
    }
}

void bs_attention_forward(bs_session *s, const bs_qwen35_layer *L, int n) {
    bs_prof_matmul(BS_PROF_MM_ATT_IN, &L->wq, s->xn, n, s->a, s->pool);
    bs_prof_matmul(BS_PROF_MM_ATT_IN, &L->wk, s->xn, n, s->b, s->pool);
    bs_prof_matmul(BS_PROF_MM_ATT_IN, &L->wv, s->xn, n, s->c, s->pool);
    bs_attention_mix(s, L, n, s->a, s->b, s->c);
    bs_prof_matmul(BS_PROF_MM_ATT_OUT, &L->wo, s->d, n, s->y, s->pool);
}

void bs_attention_mix(bs_session *s, const bs_qwen35_layer *L, int n, float *qg, float *kb,
                      const float *vb) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim;
    const size_t kv_w = (size_t)Hkv * D, slot_bytes = (size_t)s->n_ctx * s->kv_row;
    uint8_t *kc = s->k + (size_t)L->slot * slot_bytes, *vc = s->v + (size_t)L->slot * slot_bytes;
    float *o = s->d;

    uint64_t t0 = bs_prof_begin();
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * hp->n_rot;
        float *kr = kb + (size_t)t * kv_w;
        for (int h = 0; h < Hkv; h++) {
            bs_rmsnorm(kr + (size_t)h * D, kr + (size_t)h * D, L->k_norm, D, hp->eps);
            bs_rope_neox(kr + (size_t)h * D, cs, hp->n_rot);
        }
        const size_t pos = (size_t)(s->n_past + t);
        store_row(kc + pos * s->kv_row, kr, (int)kv_w, s->kv_type);
        store_row(vc + pos * s->kv_row, vb + (size_t)t * kv_w, (int)kv_w, s->kv_type);
    }
    for (int t = 0; t < n; t++) {
        const float *cs = s->rope + (size_t)t * hp->n_rot;
        float *row = qg + (size_t)t * 2 * H * D;
        for (int h = 0; h < H; h++) {
            bs_rmsnorm(row + (size_t)h * 2 * D, row + (size_t)h * 2 * D, L->q_norm, D, hp->eps);
            bs_rope_neox(row + (size_t)h * 2 * D, cs, hp->n_rot);
        }
    }
    bs_prof_end(BS_PROF_ATT_PREP, t0);
    attn_job job = {s, kc, vc, qg, o, n};
    bs_prof_pool_run(BS_PROF_ATT_CORE, s->pool, attend_units, &job);
    t0 = bs_prof_begin();
    for (int t = 0; t < n; t++) {
        const float *row = qg + (size_t)t * 2 * H * D;
        float *out = o + (size_t)t * H * D;
        for (int h = 0; h < H; h++) bs_sigmoid_mul(out + (size_t)h * D, row + (size_t)h * 2 * D + D, (size_t)D);
    }
    bs_prof_end(BS_PROF_ATT_GATE, t0);
}
