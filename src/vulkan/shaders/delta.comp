#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// delta.comp: the gated delta rule over the batch's tokens in order, a workgroup per (DL_COLS
// state columns j, V head h: 32 on GPUs, 64 on CPU devices; delta_lanes.glsl):
// S_j *= exp(g); u = S_j . k; S_j += k * (v_j - u) * beta; o_j = S_j . q * scale,
// with the gates from the raw projections in the same step (no dispatch of their own):
// g = softplus(alpha + dt_bias[h]) * a[h] (a = -exp(A_log)), beta = sigmoid(beta).
// V head h reads K/Q head h % n_k. The state [n_v][d_k][d_v]: row j's element i at (h d_k + i)
// d_v + j, so the invocations of a workgroup (neighbouring j) read and write neighbouring words
// (the CPU's [n_v][d_v][d_k] is transposed at the host transfers, vk_forward.c).
// r0: the sequence's first row in qkv, g, beta and o (a batch's rows).
layout(local_size_x_id = 23) in;   // DL_INV (delta_lanes.glsl)
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };  // [T][cd]: q | k | v
layout(std430, binding = 1) readonly buffer G { float g[]; };      // [T][n_v] alpha projection
layout(std430, binding = 2) readonly buffer B { float beta[]; };   // [T][n_v] beta projection
layout(std430, binding = 3) buffer S { float st[]; };
layout(std430, binding = 6) readonly buffer SI { float st_in[]; };   // from_in: the state before the step
layout(std430, binding = 4) writeonly buffer O { float o[]; };     // [T][n_v*d_v]
layout(std430, binding = 5) readonly buffer GT { float gates[]; }; // dt_bias[n_v] | a[n_v]
layout(push_constant) uniform Push { uint nk, nv, dk, dv, T, cd; float scale; uint r0, from_in; } p;

uint qb, kb;   // the token's q and k heads in qkv
#define DL_K(i) qkv[kb + (i)]
#define DL_Q(i) qkv[qb + (i)]
#include "delta_lanes.glsl"

void main() {
    const uint lt = gl_LocalInvocationID.x, l = dl_lane(lt), jj = dl_col(lt);
    const uint j = gl_WorkGroupID.x * DL_COLS + jj, h = gl_WorkGroupID.y;
    const bool on = j < p.dv;
    const uint kh = h % p.nk, sb = h * p.dk * p.dv + j;
    dl_load(sb, l, on);
    for (uint tt = 0u; tt < p.T; tt++) {
        const uint t = p.r0 + tt;
        qb = t * p.cd + kh * p.dk;
        kb = t * p.cd + (p.nk + kh) * p.dk;
        float decay, bt;
        dl_gates(g[t * p.nv + h], gates[h], gates[p.nv + h], beta[t * p.nv + h], decay, bt);
        const float v = on ? qkv[t * p.cd + 2u * p.nk * p.dk + h * p.dv + j] : 0.0;
        const float y = dl_token(l, jj, sb, on, decay, bt, v, tt == 0u);
        if (l == 0u && on) o[t * p.nv * p.dv + h * p.dv + j] = y * p.scale;
    }
    dl_store(sb, l, on);
}
