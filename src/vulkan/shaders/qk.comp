#version 450
#extension GL_GOOGLE_include_directive : require
// qk.comp: attention's per-head steps between the products and the softmax, one workgroup per
// head of a row: q heads (of a's rows: 2*H*D wide with gated, each head's D values then its
// gate's D, as the target's gated attention has them; H*D without, the DSpark drafter's) are
// RMS-normed (q_norm) and roped in place; k heads (of b's rows, Hkv*D) normed (k_norm), roped
// and, with v's head (cc's rows), stored in the cache at position pos0 + t. The bits of
// norm.comp (mode 0), rope.comp and kv_store.comp run one after another: the same norm scale
// (norm_rn.glsl), y = (x * scale) * w, the rotation's products rounded before the sum, and
// the cache's F16 rounding. cs_row0: the sequence's first row in a, b, cc and the rope table
// (a batch's rows).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer A { float qa[]; };
layout(std430, binding = 1) buffer B { float kb[]; };
layout(std430, binding = 2) readonly buffer CC { float vr[]; };
layout(std430, binding = 3) readonly buffer QN { float qn[]; };
layout(std430, binding = 4) readonly buffer KN { float kn[]; };
layout(std430, binding = 5) readonly buffer CS { float cs[]; };      // [rows][n_rot]: cos, sin
layout(std430, binding = 6) writeonly buffer KC { uint kc[]; };
layout(std430, binding = 7) writeonly buffer VC { uint vc[]; };
layout(std430, binding = 8) readonly buffer P { uint pos0; } step;   // per-step values
layout(push_constant) uniform Push { uint H, Hkv, D, n_rot, cs_row0, f32; float eps; uint gated; } p;

#include "f16.glsl"
#include "div_rn.glsl"
#include "fma_rn.glsl"

shared float part[64], part_lo[64];
shared float hv[256];   // the head after its norm (MAX_HEAD_DIM)

#include "norm_rn.glsl"

#define HEAD_IN(i) (is_q ? qa[base + (i)] : kb[base + (i)])
#define HEAD_W(i) (is_q ? qn[i] : kn[i])
#include "head_rn.glsl"

void main() {
    const uint g = gl_WorkGroupID.x, lt = gl_LocalInvocationID.x, heads = p.H + p.Hkv;
    const uint t = g / heads, h = g % heads, row = p.cs_row0 + t;
    const bool is_q = h < p.H;
    const uint kvw = p.Hkv * p.D, j = h - p.H;
    const uint qw = p.gated != 0u ? 2u * p.D : p.D;   // a q head and, gated, its gate
    const uint base = is_q ? row * p.H * qw + h * qw : row * kvw + j * p.D;
    norm_rope_head(is_q, base, row, lt);
    for (uint i = lt; i < p.D; i += 64u) {   // (each invocation its own elements)
        if (is_q) qa[base + i] = hv[i]; else kb[base + i] = hv[i];
    }
    if (is_q) return;
    // the cache rows: this head's D values of k and v at position pos0 + t
    const uint pos = step.pos0 + t;
    for (uint w = lt; w < p.D / 2u; w += 64u) {
        const uint i = 2u * w, vs = row * kvw + j * p.D + i;
        if (p.f32 != 0u) {
            const uint d2 = pos * kvw + j * p.D + i;
            kc[d2] = floatBitsToUint(hv[i]);
            kc[d2 + 1u] = floatBitsToUint(hv[i + 1u]);
            vc[d2] = floatBitsToUint(vr[vs]);
            vc[d2 + 1u] = floatBitsToUint(vr[vs + 1u]);
        } else {
            const uint dst = pos * (kvw / 2u) + (j * p.D + i) / 2u;
            kc[dst] = f16_bits(hv[i]) | (f16_bits(hv[i + 1u]) << 16);
            vc[dst] = f16_bits(vr[vs]) | (f16_bits(vr[vs + 1u]) << 16);
        }
    }
}
