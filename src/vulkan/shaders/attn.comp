#version 450
#extension GL_GOOGLE_include_directive : require
// attn.comp: causal softmax attention of one query (row t, head h) per workgroup over the F16
// (or F32) cache: q rounded to f16 for an F16 cache (as the CPU path does), scores for positions
// 0..pos0+t, softmax, weighted sum of V. Query head h reads KV head h / (H / H_kv).
// quant != 0: the output gate and the int8 blocks for the output product in the epilogue, the
// bits of quant_q8.comp's mode 2 (o *= sigmoid(the head's gate half of q), then q8.glsl's
// blocks of the head, D % 32 == 0). qrow0: the sequence's first row in q, the raw k and v, y, the
// rope table and the blocks (a batch's rows: its shared scratch's).
// fused != 0 (up to 8 rows): the q/k RMSNorm, rope and KV store of qk.comp in the same dispatch:
// q and k come raw (q's head from binding 0, k's rows from 9, v's from 10); the workgroup norms
// and ropes its q head and every k row of the batch up to its own (qk.comp's operations, so
// the same bits), rounds them as the cache would, and reads the batch's positions from shared
// memory, older ones from the cache; the first query head of each KV group stores its row's k
// and v there (positions the others never read from the cache in this dispatch).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [T][2*H*D], q then gate per head
layout(std430, binding = 1) buffer KC { uint kc[]; };
layout(std430, binding = 2) buffer VC { uint vc[]; };
layout(std430, binding = 3) coherent buffer O { float y[]; };     // [T][H*D]
layout(std430, binding = 4) coherent buffer SC { float sc[]; };             // [T*H][n_ctx] scratch
layout(std430, binding = 5) readonly buffer P { uint pos0; } step;   // per-step values
layout(std430, binding = 6) writeonly buffer QO { uint qo[]; };
layout(std430, binding = 7) writeonly buffer S8 { float s8[]; };
layout(std430, binding = 8) writeonly buffer M8 { float m8[]; };
layout(std430, binding = 9) readonly buffer KR { float kr[]; };     // fused: [T][Hkv*D] raw k
layout(std430, binding = 10) readonly buffer VR { float vr[]; };    // fused: [T][Hkv*D] v
layout(std430, binding = 11) readonly buffer QN { float qn[]; };
layout(std430, binding = 12) readonly buffer KN { float kn[]; };
layout(std430, binding = 13) readonly buffer CS { float cs[]; };    // [rows][n_rot]: cos, sin
layout(push_constant) uniform Push { uint H, Hkv, D, n_ctx; float scale; uint f32, quant, qrow0, fused, n_rot; float eps; } p;

#include "fma_rn.glsl"

#include "f16.glsl"
#include "div_rn.glsl"
#define q qo
#include "q8.glsl"
#undef q

shared float qs[256];
shared float red[64];
shared float kvs[2][8][256];   // fused: the batch's k (normed, roped) and v rows, as the cache holds them
shared float hv[256];
shared float part[64], part_lo[64];

#include "norm_rn.glsl"

// fused: a q head (binding 0) or k head (binding 9) at base, normed and roped into hv
#define HEAD_IN(i) (is_q ? q[base + (i)] : kr[base + (i)])
#define HEAD_W(i) (is_q ? qn[i] : kn[i])
#include "head_rn.glsl"

// fused: k and v of batch row r (position pos0 + r) of KV head kvh into kvs, and, for the
// storing workgroup, into the cache (kv_store.comp's F16 or F32 rows)
void batch_kv(uint r, uint kvh, bool store, uint tid) {
    const uint kvw = p.Hkv * p.D, b = (p.qrow0 + r) * kvw + kvh * p.D;
    norm_rope_head(false, b, p.qrow0 + r, tid);
    for (uint d = tid; d < p.D; d += 64u) {
        kvs[0][r][d] = p.f32 != 0u ? hv[d] : f16_round(hv[d]);
        kvs[1][r][d] = p.f32 != 0u ? vr[b + d] : f16_round(vr[b + d]);
    }
    if (store) {
        const uint pos = step.pos0 + r;
        for (uint w = tid; w < p.D / 2u; w += 64u) {
            const uint i = 2u * w;
            if (p.f32 != 0u) {
                const uint d2 = pos * kvw + kvh * p.D + i;
                kc[d2] = floatBitsToUint(hv[i]);
                kc[d2 + 1u] = floatBitsToUint(hv[i + 1u]);
                vc[d2] = floatBitsToUint(vr[b + i]);
                vc[d2 + 1u] = floatBitsToUint(vr[b + i + 1u]);
            } else {
                const uint dst = pos * (kvw / 2u) + (kvh * p.D + i) / 2u;
                kc[dst] = f16_bits(hv[i]) | (f16_bits(hv[i + 1u]) << 16);
                vc[dst] = f16_bits(vr[b + i]) | (f16_bits(vr[b + i + 1u]) << 16);
            }
        }
    }
    barrier();   // hv is the next row's
}

// element d of cache row j (KV head at element kb2 of the row)
float kv_at(uint j, uint kvw, uint kb2, uint d, bool v) {
    if (p.fused != 0u && j >= step.pos0) return kvs[v ? 1 : 0][j - step.pos0][d];
    if (p.f32 != 0u) return uintBitsToFloat(v ? vc[j * kvw + kb2 + d] : kc[j * kvw + kb2 + d]);
    const vec2 f = unpackHalf2x16(v ? vc[(j * kvw + kb2 + d) / 2u] : kc[(j * kvw + kb2 + d) / 2u]);
    return (d & 1u) != 0u ? f.y : f.x;
}

void main() {
    const uint g = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint t = g / p.H, h = g % p.H, kvh = h / (p.H / p.Hkv), D = p.D, row = p.qrow0 + t;
    const uint nkv = step.pos0 + t + 1u, kvw = p.Hkv * D, kb2 = kvh * D, sb = g * p.n_ctx;
    if (p.fused != 0u) {
        for (uint r = 0u; r <= t; r++) batch_kv(r, kvh, r == t && h % (p.H / p.Hkv) == 0u, tid);
        norm_rope_head(true, row * 2u * p.H * D + h * 2u * D, row, tid);
    }
    for (uint d = tid; d < D; d += 64u) {
        const float qv = p.fused != 0u ? hv[d] : q[row * 2u * p.H * D + h * 2u * D + d];
        qs[d] = p.f32 != 0u ? qv : f16_round(qv);
    }
    barrier();
    float mx = -1.0 / 0.0;
    for (uint j = tid; j < nkv; j += 64u) {
        precise float s = 0.0;
        for (uint d = 0u; d < D; d++) s = fma_x(qs[d], kv_at(j, kvw, kb2, d, false), s);
        s = s * p.scale;
        sc[sb + j] = s;
        mx = max(mx, s);
    }
    red[tid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] = max(red[tid], red[tid + k]);
        barrier();
    }
    mx = red[0];
    barrier();
    float sum = 0.0;
    for (uint j = tid; j < nkv; j += 64u) {
        const float e = exp(sc[sb + j] - mx);
        sc[sb + j] = e;
        sum += e;
    }
    red[tid] = sum;
    memoryBarrierBuffer();
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] = red[tid] + red[tid + k];
        barrier();
    }
    const float inv = 1.0 / red[0];
    for (uint d = tid; d < D; d += 64u) {
        precise float acc = 0.0;
        for (uint j = 0u; j < nkv; j++) acc = fma_x(sc[sb + j], kv_at(j, kvw, kb2, d, true), acc);
        const float ov = acc * inv;
        y[row * p.H * D + h * D + d] = p.quant != 0u ? ov * (1.0 / (1.0 + exp(-q[row * 2u * p.H * D + h * 2u * D + D + d]))) : ov;
    }
    if (p.quant == 0u) return;
    memoryBarrierBuffer();
    barrier();
    const uint e = row * p.H * D + h * D;
    for (uint b = tid; b < D / 32u; b += 64u) quant_block(e + 32u * b, e / 32u + b);
}
