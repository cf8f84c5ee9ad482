#version 450
#extension GL_GOOGLE_include_directive : require
// delta.comp: the gated delta rule, one invocation per (V head h, state row j) over the batch's
// tokens in order: S_j *= exp(g); u = S_j . k; S_j += k * (v_j - u) * beta; o_j = S_j . q * scale,
// with the gates from the raw projections in the same step (no dispatch of their own):
// g = softplus(alpha + dt_bias[h]) * a[h] (a = -exp(A_log)), beta = sigmoid(beta).
// V head h reads K/Q head h % n_k. The state [n_v][d_k][d_v]: row j's element i at (h d_k + i)
// d_v + j, so the invocations of a workgroup (neighbouring j) read and write neighbouring words
// (the CPU's [n_v][d_v][d_k] is transposed at the host transfers, vk_forward.c).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };  // [T][cd]: q | k | v
layout(std430, binding = 1) readonly buffer G { float g[]; };      // [T][n_v] alpha projection
layout(std430, binding = 2) readonly buffer B { float beta[]; };   // [T][n_v] beta projection
layout(std430, binding = 3) buffer S { float st[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };     // [T][n_v*d_v]
layout(std430, binding = 5) readonly buffer GT { float gates[]; }; // dt_bias[n_v] | a[n_v]
layout(push_constant) uniform Push { uint nk, nv, dk, dv, T, cd; float scale; } p;

#include "fma_rn.glsl"

void main() {
    const uint j = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y;
    if (j >= p.dv) return;
    const uint kh = h % p.nk, sb = h * p.dk * p.dv + j;
    for (uint t = 0u; t < p.T; t++) {
        const uint qb = t * p.cd + kh * p.dk, kb = t * p.cd + (p.nk + kh) * p.dk;
        const float ga = g[t * p.nv + h] + gates[h];
        const float decay = exp((ga > 20.0 ? ga : log(1.0 + exp(ga))) * gates[p.nv + h]);
        const float bt = 1.0 / (1.0 + exp(-beta[t * p.nv + h]));
        precise float u = 0.0;
        for (uint i = 0u; i < p.dk; i++) {
            const float r = st[sb + i * p.dv] * decay;
            st[sb + i * p.dv] = r;
            u = fma_x(r, qkv[kb + i], u);
        }
        const float d = (qkv[t * p.cd + 2u * p.nk * p.dk + h * p.dv + j] - u) * bt;
        precise float y = 0.0;
        for (uint i = 0u; i < p.dk; i++) {
            const float r = fma_x(qkv[kb + i], d, st[sb + i * p.dv]);
            st[sb + i * p.dv] = r;
            y = fma_x(r, qkv[qb + i], y);
        }
        o[t * p.nv * p.dv + h * p.dv + j] = y * p.scale;
    }
}
