#version 450
#extension GL_GOOGLE_include_directive : require
// attn.comp: causal softmax attention of one query (row t, head h) per workgroup over the F16
// cache: q rounded to f16 (as the CPU path does for an F16 cache), scores for positions
// 0..pos0+t, softmax, weighted sum of V. Query head h reads KV head h / (H / H_kv).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [T][2*H*D], q then gate per head
layout(std430, binding = 1) readonly buffer KC { uint kc[]; };
layout(std430, binding = 2) readonly buffer VC { uint vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };     // [T][H*D]
layout(std430, binding = 4) buffer SC { float sc[]; };             // [T*H][n_ctx] scratch
layout(push_constant) uniform Push { uint H, Hkv, D, pos0, n_ctx; float scale; } p;

#include "f16.glsl"

shared float qs[256];
shared float red[64];

float kv_at(uint word, uint d) { vec2 f = unpackHalf2x16(word); return (d & 1u) != 0u ? f.y : f.x; }

void main() {
    const uint g = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint t = g / p.H, h = g % p.H, kvh = h / (p.H / p.Hkv), D = p.D;
    const uint nkv = p.pos0 + t + 1u, hw = p.Hkv * D / 2u, kb = kvh * D / 2u, sb = g * p.n_ctx;
    for (uint d = tid; d < D; d += 64u) qs[d] = f16_round(q[t * 2u * p.H * D + h * 2u * D + d]);
    barrier();
    float mx = -1.0 / 0.0;
    for (uint j = tid; j < nkv; j += 64u) {
        precise float s = 0.0;
        for (uint d = 0u; d < D; d += 2u) {
            const vec2 kk = unpackHalf2x16(kc[j * hw + kb + d / 2u]);
            s = fma(qs[d], kk.x, s);
            s = fma(qs[d + 1u], kk.y, s);
        }
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
        for (uint j = 0u; j < nkv; j++) acc = fma(sc[sb + j], kv_at(vc[j * hw + kb + d / 2u], d), acc);
        o[t * p.H * D + h * D + d] = acc * inv;
    }
}
