#version 450
#extension GL_GOOGLE_include_directive : require
// attn_nc.comp: the DSpark block's attention: every query (row t, head h; one per workgroup)
// attends to the same n_kv F32 rows from row `first` (the context rows, then the block's own),
// with no causal mask. Query head h reads KV head h / (H / H_kv); q rows of H*D, the block's
// from row qrow0 of q and o (several blocks' rows one after another).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [T][H*D]
layout(std430, binding = 1) readonly buffer KC { float kc[]; };    // [rows][Hkv*D]
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };     // [T][H*D]
layout(std430, binding = 4) coherent buffer SC { float sc[]; };             // [T*H][sc_stride] scratch
layout(push_constant) uniform Push { uint H, Hkv, D, first, n_kv, sc_stride; float scale; uint qrow0; } p;

#include "fma_rn.glsl"

shared float qs[256];
shared float red[64];

void main() {
    const uint g = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint t = g / p.H, h = g % p.H, D = p.D, kvw = p.Hkv * D;
    const uint kb = (h / (p.H / p.Hkv)) * D, sb = g * p.sc_stride;
    const uint row = p.qrow0 + t;
    for (uint d = tid; d < D; d += 64u) qs[d] = q[row * p.H * D + h * D + d];
    barrier();
    float mx = -1.0 / 0.0;
    for (uint j = tid; j < p.n_kv; j += 64u) {
        const uint r = (p.first + j) * kvw + kb;
        precise float s = 0.0;
        for (uint d = 0u; d < D; d++) s = fma_x(qs[d], kc[r + d], s);
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
    for (uint j = tid; j < p.n_kv; j += 64u) {
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
        for (uint j = 0u; j < p.n_kv; j++) acc = fma_x(sc[sb + j], vc[(p.first + j) * kvw + kb + d], acc);
        o[row * p.H * D + h * D + d] = acc * inv;
    }
}
