#version 450
#extension GL_GOOGLE_include_directive : require
// delta_norm.comp: a Gated DeltaNet layer's recurrence for a session's own step in one dispatch,
// one workgroup per V head h, token by token: the L2 norms of its K head's q and k (conv.comp's
// head(): norm.comp mode 1's sum tree and scale), the delta rule (delta.comp's operations in its
// order, one state column j per invocation), then the gated RMSNorm of the head's d_v outputs,
// y = silu(z) * (rmsnorm(o) * ssm_norm), and their int8 blocks for ssm_out (norm.comp's
// NORM_GATE | NORM_QUANT: the same sum tree, scale and q8.glsl). The q/k norms, the outputs and
// their norm never leave shared memory, which saves the conv's norm step and norm.comp's dispatch
// and barrier; each of the n_v / n_k V heads of a K head recomputes its norms (2 d_k squares).
// The same bits as conv.comp (L2), delta.comp and norm.comp run apart (test_vulkan_ops).
layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer CC { float cc[]; };    // [T][cd]: conv outputs q | k | v (q, k not normed)
layout(std430, binding = 1) readonly buffer G { float g[]; };      // [T][n_v] alpha projection
layout(std430, binding = 2) readonly buffer B { float beta[]; };   // [T][n_v] beta projection
layout(std430, binding = 3) buffer S { float st[]; };              // [n_v][d_k][d_v] (delta.comp's)
layout(std430, binding = 4) coherent buffer Y { float y[]; };      // [T][n_v*d_v]; coherent: the quantizer reads it back
layout(std430, binding = 5) readonly buffer GT { float gates[]; }; // dt_bias[n_v] | a[n_v]
layout(std430, binding = 6) readonly buffer W { float w[]; };      // ssm_norm [d_v]
layout(std430, binding = 7) readonly buffer Z { float z[]; };      // [T][n_v*d_v] the z projection
layout(std430, binding = 8) writeonly buffer Q { uint q[]; };      // int8 blocks of y for ssm_out
layout(std430, binding = 9) writeonly buffer S8 { float s8[]; };
layout(std430, binding = 10) writeonly buffer M8 { float m8[]; };
layout(push_constant) uniform Push { uint nk, nv, dk, dv, T, cd; float scale, eps; } p;

const uint MAXD = 256u;   // d_k, d_v at most (the host checks)
shared float qn[MAXD], kn[MAXD], ob[MAXD];
shared float part[64], part_lo[64];

#include "f16.glsl"
#include "div_rn.glsl"
#include "q8.glsl"
#include "fma_rn.glsl"
#include "norm_rn.glsl"

// The sum of squares of v[0..d) as norm.comp's invocations 0..63 take it (t, t + 64, ...) and
// its scale (mode 0 RMS, 1 L2); ends with a barrier so part can be written again.
#define NORM_SCALE(scale, v, d, mode)                                             \
    {                                                                              \
        float hi = 0.0, lo = 0.0;                                                  \
        for (uint i = lt; lt < 64u && i < (d); i += 64u) {                         \
            const float x_ = v;                                                    \
            precise float sq = x_ * x_;                                            \
            ff_add(hi, lo, sq, 0.0);                                               \
        }                                                                          \
        ff_reduce64(lt, hi, lo);                                                   \
        scale = norm_scale(mode, part[0], part_lo[0], float(d), p.eps);            \
        barrier();                                                                 \
    }

// token t's q and k head kh L2-normed into qn, kn
void qk_norms(uint t, uint kh, uint lt) {
    const uint qb = t * p.cd + kh * p.dk, kb = t * p.cd + (p.nk + kh) * p.dk;
    float sq_, sk_;
    NORM_SCALE(sq_, cc[qb + i], p.dk, 1u);
    NORM_SCALE(sk_, cc[kb + i], p.dk, 1u);
    for (uint i = lt; i < p.dk; i += 128u) {
        precise float a = cc[qb + i] * sq_;
        precise float b = cc[kb + i] * sk_;
        qn[i] = a;
        kn[i] = b;
    }
}

// delta.comp's step for state column j of V head h at token t: its output into ob[j]
void delta_column(uint t, uint h, uint j) {
    const uint sb = h * p.dk * p.dv + j;
    const float ga = g[t * p.nv + h] + gates[h];
    const float decay = exp((ga > 20.0 ? ga : log(1.0 + exp(ga))) * gates[p.nv + h]);
    const float bt = 1.0 / (1.0 + exp(-beta[t * p.nv + h]));
    precise float u = 0.0;
    for (uint i = 0u; i < p.dk; i++) {
        const float r = st[sb + i * p.dv] * decay;
        st[sb + i * p.dv] = r;
        u = fma_x(r, kn[i], u);
    }
    const float d = (cc[t * p.cd + 2u * p.nk * p.dk + h * p.dv + j] - u) * bt;
    precise float yv = 0.0;
    for (uint i = 0u; i < p.dk; i++) {
        const float r = fma_x(kn[i], d, st[sb + i * p.dv]);
        st[sb + i * p.dv] = r;
        yv = fma_x(r, qn[i], yv);
    }
    ob[j] = yv * p.scale;
}

void main() {
    const uint h = gl_WorkGroupID.x, lt = gl_LocalInvocationID.x, kh = h % p.nk;
    for (uint t = 0u; t < p.T; t++) {
        qk_norms(t, kh, lt);
        barrier();
        for (uint j = lt; j < p.dv; j += 128u) delta_column(t, h, j);
        barrier();
        float sc;
        NORM_SCALE(sc, ob[i], p.dv, 0u);
        const uint yb = t * p.nv * p.dv + h * p.dv;
        for (uint i = lt; i < p.dv; i += 128u) {
            precise float v = ob[i] * sc;
            float o = v * w[i];
            const float zi = z[yb + i];
            o = zi / (1.0 + exp(-zi)) * o;
            y[yb + i] = o;
        }
        memoryBarrierBuffer();
        barrier();
        for (uint b = lt; b < p.dv / 32u; b += 128u) quant_block(yb + b * 32u, yb / 32u + b);
        barrier();   // qn, kn and ob are the next token's
    }
}
