#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// delta_norm.comp: a Gated DeltaNet layer's recurrence for a session's own step in one dispatch,
// a workgroup per (V head h, DL_COLS state columns: delta_lanes.glsl), token by token: the L2 norms of its K head's q
// and k (conv.comp's head(): norm.comp mode 1's sum tree and scale; each workgroup of a head
// recomputes them, 2 d_k squares), the delta rule (delta.comp's: delta_lanes.glsl), the
// outputs into y; then the last workgroup of the head to finish (a counter per head, left at 0)
// takes the gated RMSNorm of its d_v outputs per token, y = silu(z) * (rmsnorm(o) * ssm_norm),
// and their int8 blocks for ssm_out (norm.comp's NORM_GATE | NORM_QUANT: the same sum tree,
// scale and q8.glsl). That saves the conv's norm step and norm.comp's dispatch and barrier.
// With a fold (rblock > 0: a folded ssm_out), the int8 blocks are the rotated rows' instead:
// each rotation block's last head to be normed (a counter per block, binding 15, left at 0)
// rotates the block for every token into xr (binding 13), the V heads regrouped (rhd > 0),
// signed (rsigns: binding 14), butterflies, scaled: rotate.comp's forward operations in its
// order, so its bits, without its dispatch and barrier. Needs ROT_MAX >= rblock (the host
// checks; the plain pipeline sets 1 and holds no shared memory for it).
// The same bits as conv.comp (L2), delta.comp and norm.comp run apart (test_vulkan_ops).
layout(local_size_x_id = 23) in;   // DL_INV (delta_lanes.glsl)
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
layout(std430, binding = 11) coherent buffer CNT { uint cnt[]; };  // [n_v], 0 between dispatches
layout(std430, binding = 12) readonly buffer SI { float st_in[]; }; // from_in: the state before the step
layout(std430, binding = 13) coherent buffer XR { float xr[]; };   // [T][n_v*d_v] the rows rotated (rblock > 0)
layout(std430, binding = 14) readonly buffer SG { float sg[]; };   // the fold's signs
layout(std430, binding = 15) coherent buffer BC { uint bcnt[]; };  // a counter per rotation block, 0 between dispatches
layout(push_constant) uniform Push {
    uint nk, nv, dk, dv, T, cd; float scale, eps; uint from_in, rblock, rsigns; float rscale; uint rhd, rnk, rrep;
} p;

const uint MAXD = 256u;   // d_k, d_v at most (the host checks)
shared float qn[MAXD], kn[MAXD];
shared float part[64], part_lo[64];
shared bool last_wg;

#include "f16.glsl"
#include "div_rn.glsl"
#include "q8.glsl"
#include "fma_rn.glsl"
#include "norm_rn.glsl"
#include "fwht.glsl"
#define quant_block quant_block_xr
#define y xr
#include "q8.glsl"
#undef y
#undef quant_block

layout(constant_id = 0) const uint ROT_MAX = 2048u;
shared float rv[ROT_MAX];

#define DL_K(i) kn[i]
#define DL_Q(i) qn[i]
#include "delta_lanes.glsl"

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
    for (uint i = lt; i < p.dk; i += DL_INV) {
        precise float a = cc[qb + i] * sq_;
        precise float b = cc[kb + i] * sk_;
        qn[i] = a;
        kn[i] = b;
    }
}

// rotate.comp's regrouping: the product's input element e reads y's element src_of(e)
uint src_of(uint e) {
    if (p.rhd == 0u) return e;
    const uint g = e / p.rhd, k = g / p.rrep, i = g % p.rrep;
    return (i * p.rnk + k) * p.rhd + e % p.rhd;
}

// Head h is normed (its rows in y): the last of its rotation block's heads rotates the block.
void rotate_block_last(uint h, uint lt) {
    const uint B = p.rblock, W = p.nv * p.dv;
    if (B > ROT_MAX) return;   // (never so dispatched: not a hang if it were)
    // where head h's first element lands in the product's input order (the inverse regrouping)
    const uint g = p.rhd == 0u ? h : (h % p.rnk) * p.rrep + h / p.rnk, b = g * p.dv / B;
    memoryBarrierBuffer();
    barrier();
    if (lt == 0u) last_wg = atomicAdd(bcnt[b], 1u) == B / p.dv - 1u;
    barrier();
    if (!last_wg) return;
    memoryBarrierBuffer();
    for (uint t = 0u; t < p.T; t++) {
        const uint base = t * W, e0 = b * B;
        for (uint j = lt; j < B; j += DL_INV) {
            float a = y[base + src_of(e0 + j)];
            if (p.rsigns != 0u) a *= sg[e0 + j];
            rv[j] = a;
        }
        barrier();
        FWHT_BLOCKS(rv, B, B, lt, DL_INV)
        for (uint j = lt; j < B; j += DL_INV) {
            precise float a = rv[j] * p.rscale;
            xr[base + e0 + j] = a;
        }
        memoryBarrierBuffer();
        barrier();
        for (uint k = lt; k < B / 32u; k += DL_INV) quant_block_xr(base + e0 + 32u * k, (base + e0) / 32u + k);
        barrier();   // rv is the next token's
    }
    if (lt == 0u) bcnt[b] = 0u;
}

void main() {
    const uint nb = (p.dv + DL_COLS - 1u) / DL_COLS;   // workgroups per head
    const uint h = gl_WorkGroupID.x / nb, lt = gl_LocalInvocationID.x, l = dl_lane(lt), jj = dl_col(lt);
    const uint j = (gl_WorkGroupID.x % nb) * DL_COLS + jj, kh = h % p.nk, sb = h * p.dk * p.dv + j;
    const bool on = j < p.dv;
    dl_load(sb, l, on);
    for (uint t = 0u; t < p.T; t++) {
        qk_norms(t, kh, lt);
        barrier();
        float decay, bt;
        dl_gates(g[t * p.nv + h], gates[h], gates[p.nv + h], beta[t * p.nv + h], decay, bt);
        const float v = on ? cc[t * p.cd + 2u * p.nk * p.dk + h * p.dv + j] : 0.0;
        const float o = dl_token(l, jj, sb, on, decay, bt, v, t == 0u);
        if (l == 0u && on) y[t * p.nv * p.dv + h * p.dv + j] = o * p.scale;
        barrier();   // qn, kn are the next token's
    }
    dl_store(sb, l, on);
    // the head's last workgroup to finish norms, gates and quantizes its rows (the others' columns
    // are in y: each made them visible before counting itself)
    memoryBarrierBuffer();
    barrier();
    if (lt == 0u) last_wg = atomicAdd(cnt[h], 1u) == nb - 1u;
    barrier();
    if (!last_wg) return;
    memoryBarrierBuffer();
    for (uint t = 0u; t < p.T; t++) {
        const uint yb = t * p.nv * p.dv + h * p.dv;
        float sc;
        NORM_SCALE(sc, y[yb + i], p.dv, 0u);
        for (uint i = lt; i < p.dv; i += DL_INV) {
            precise float v = y[yb + i] * sc;
            float o = v * w[i];
            const float zi = z[yb + i];
            o = zi / (1.0 + exp(-zi)) * o;
            y[yb + i] = o;
        }
        if (p.rblock != 0u) continue;   // (blocks of the rotated rows: rotate_block_last)
        memoryBarrierBuffer();
        barrier();
        for (uint b = lt; b < p.dv / 32u; b += DL_INV) quant_block(yb + b * 32u, yb / 32u + b);
        barrier();   // y's next row is read after this one's blocks
    }
    if (lt == 0u) cnt[h] = 0u;
    if (p.rblock != 0u) rotate_block_last(h, lt);
}
