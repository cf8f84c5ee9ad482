// delta.glsl (delta.comp, one sequence; delta_b.comp, a batch's sequences in one dispatch,
// workgroup z the sequence, each its own state buffer): the gated delta rule over the batch's tokens in order, a workgroup per (DL_COLS
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
#ifdef BS_BATCH
layout(std430, binding = 7) buffer S1 { float st1[]; };
layout(std430, binding = 8) buffer S2 { float st2[]; };
layout(std430, binding = 9) buffer S3 { float st3[]; };
layout(std430, binding = 10) buffer S4 { float st4[]; };
layout(std430, binding = 11) buffer S5 { float st5[]; };
layout(std430, binding = 12) buffer S6 { float st6[]; };
layout(std430, binding = 13) buffer S7 { float st7[]; };
layout(std430, binding = 14) readonly buffer SI1 { float st_in1[]; };
layout(std430, binding = 15) readonly buffer SI2 { float st_in2[]; };
layout(std430, binding = 16) readonly buffer SI3 { float st_in3[]; };
layout(std430, binding = 17) readonly buffer SI4 { float st_in4[]; };
layout(std430, binding = 18) readonly buffer SI5 { float st_in5[]; };
layout(std430, binding = 19) readonly buffer SI6 { float st_in6[]; };
layout(std430, binding = 20) readonly buffer SI7 { float st_in7[]; };
layout(push_constant) uniform Push { uint nk, nv, dk, dv, cd; float scale; uint from_mask; uint rt[8]; } p;
// a batch (BS_BATCH): workgroup z is sequence qs; its rows r0..r0+T-1 and whether it reads its
// state from the pair's other buffer in the push constants (rt[q] = r0 | T << 16, from_mask bit q)
uint qs;
float st_get(uint e) {
    switch (qs) { case 0u: return st[e]; case 1u: return st1[e]; case 2u: return st2[e]; case 3u: return st3[e]; case 4u: return st4[e]; case 5u: return st5[e]; case 6u: return st6[e]; default: return st7[e]; }
}
void st_put(uint e, float v) {
    switch (qs) { case 0u: st[e] = v; break; case 1u: st1[e] = v; break; case 2u: st2[e] = v; break; case 3u: st3[e] = v; break; case 4u: st4[e] = v; break; case 5u: st5[e] = v; break; case 6u: st6[e] = v; break; default: st7[e] = v; }
}
float st_in_get(uint e) {
    switch (qs) { case 0u: return st_in[e]; case 1u: return st_in1[e]; case 2u: return st_in2[e]; case 3u: return st_in3[e]; case 4u: return st_in4[e]; case 5u: return st_in5[e]; case 6u: return st_in6[e]; default: return st_in7[e]; }
}
#define DL_ST(e) st_get(e)
#define DL_ST_SET(e, v) st_put(e, v)
#define DL_ST_IN(e) st_in_get(e)
#define DL_FROM_IN (((p.from_mask >> qs) & 1u) != 0u)
uint seq_r0() { return p.rt[qs] & 0xffffu; }
uint seq_T() { return p.rt[qs] >> 16; }
#else
layout(push_constant) uniform Push { uint nk, nv, dk, dv, T, cd; float scale; uint r0, from_in; } p;
uint seq_r0() { return p.r0; }
uint seq_T() { return p.T; }
#endif

uint qb, kb;   // the token's q and k heads in qkv
#define DL_K(i) qkv[kb + (i)]
#define DL_Q(i) qkv[qb + (i)]
#include "delta_lanes.glsl"

void main() {
#ifdef BS_BATCH
    qs = gl_WorkGroupID.z;
#endif
    const uint T = seq_T(), r0 = seq_r0();
    const uint lt = gl_LocalInvocationID.x, l = dl_lane(lt), jj = dl_col(lt);
    const uint j = gl_WorkGroupID.x * DL_COLS + jj, h = gl_WorkGroupID.y;
    const bool on = j < p.dv;
    const uint kh = h % p.nk, sb = h * p.dk * p.dv + j;
    dl_load(sb, l, on);
    for (uint tt = 0u; tt < T; tt++) {
        const uint t = r0 + tt;
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
