/* attention.c: the gated full-attention mixer of qwen35 (qwen35-arch.md §3): attn_q carries query
 * and output gate interleaved per head, per-head RMSNorm of q and k, partial NeoX RoPE, causal
 * softmax attention over the KV cache with blocked GQA (query head h reads KV head
 * h / (n_head / n_head_kv)), sigmoid output gate, output matmul.
 *
 * The cache stores K after norm + RoPE and V raw, in f32 or f16. With f16 the query is rounded to
 * f16 before the K dot products, as llama.cpp's CPU paths do; sums stay in f32. */
#include "attn_simd.h"
#include "ops.h"
#include "profile.h"
#include "session.h"
#include "util.h"

#include <string.h>

static void store_row(uint8_t *dst, const float *src, int n, int kv_type) {
    if (kv_type == BS_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        uint16_t *h = (uint16_t *)dst;
        for (int i = 0; i < n; i++) h[i] = bs_f32_to_f16(src[i]);
    }
}

/* A head row of the cache as floats: the cache itself (f32) or converted into tmp (f16). */
static const float *load_row(const uint8_t *src, int n, int kv_type, float *tmp) {
    if (kv_type == BS_KV_F32) return (const float *)src;
    const uint16_t *h = (const uint16_t *)src;
    for (int i = 0; i < n; i++) tmp[i] = bs_f16_to_f32(h[i]);
    return tmp;
}

/* Attention of the `group` query heads sharing KV head kvh for one row that sees n_kv positions.
 * q: the group's normed, roped queries (stride 2*D in qg); out: their outputs (stride D);
 * scores: group * n_ctx floats and tmp: D floats of this thread's scratch. */
static void attend_group(const bs_session *s, const uint8_t *kc, const uint8_t *vc, int kvh, float *q,
                         int group, int n_kv, float *out, float *scores, float *tmp) {
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int D = hp->head_dim;
    const size_t esz = s->kv_type == BS_KV_F32 ? 4 : 2, head_off = (size_t)kvh * D * esz;
    const float scale = 1.0f / sqrtf((float)D);

    if (s->kv_type == BS_KV_F16)
        for (int g = 0; g < group; g++)
            for (int i = 0; i < D; i++) q[(size_t)g * 2 * D + i] = bs_f16_to_f32(bs_f32_to_f16(q[(size_t)g * 2 * D + i]));
    const bool f16 = s->kv_type == BS_KV_F16;
    const size_t ss = (size_t)s->n_ctx;
    if (!bs_attn_qk(q, (size_t)2 * D, group, kc + head_off, s->kv_row, f16, n_kv, D, scale, scores, ss))
        for (int p = 0; p < n_kv; p++) {
            const float *k = load_row(kc + (size_t)p * s->kv_row + head_off, D, s->kv_type, tmp);
            for (int g = 0; g < group; g++)
                scores[(size_t)g * ss + p] = bs_dot(q + (size_t)g * 2 * D, k, D) * scale;
        }
    for (int g = 0; g < group; g++) bs_softmax(scores + (size_t)g * ss, n_kv);
    if (bs_attn_av(scores, ss, group, vc + head_off, s->kv_row, f16, n_kv, D, out)) return;
    for (int g = 0; g < group; g++) memset(out + (size_t)g * D, 0, (size_t)D * sizeof(float));
    for (int p = 0; p < n_kv; p++) {
        const float *v = load_row(vc + (size_t)p * s->kv_row + head_off, D, s->kv_type, tmp);
        for (int g = 0; g < group; g++) {
            const float w = scores[(size_t)g * s->n_ctx + p];
            float *o = out + (size_t)g * D;
            for (int i = 0; i < D; i++) o[i] += w * v[i];
        }
    }
}

typedef struct attn_job {
    const bs_session *s;
    const uint8_t *kc, *vc;
    float *qg, *o;
    int n;
} attn_job;

/* Units (row t, KV head) of this thread; units are independent, so the split never changes a
 * result. Thread ith uses scratch slot ith. */
static void attend_units(void *ctx, int ith, int nth) {
    const attn_job *job = ctx;
    const bs_session *s = job->s;
    const bs_qwen35_hparams *hp = &s->m->hp;
    const int H = hp->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, G = H / Hkv;
    float *scores = s->scores + (size_t)ith * H * s->n_ctx, *tmp = s->qtmp + (size_t)ith * D;
    int64_t lo, hi;
    bs_pool_split((int64_t)job->n * Hkv, 1, ith, nth, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) {
        const int t = (int)(u / Hkv), kvh = (int)(u % Hkv);
        attend_group(s, job->kc, job->vc, kvh, job->qg + (size_t)t * 2 * H * D + (size_t)kvh * G * 2 * D, G,
                     s->n_past + t + 1, job->o + (size_t)t * H * D + (size_t)kvh * G * D, scores, tmp);
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
