#version 450
#extension GL_GOOGLE_include_directive : require
// conv.comp: the causal depthwise conv + SiLU of a Gated DeltaNet layer over the batch's tokens
// in order, then the window (last K-1 pre-conv rows) moved on. Sums in tap order from 0, as the
// CPU path. The first nqk workgroups are the q and k heads (dk channels each): after each
// token's conv they L2-norm it, as norm.comp's mode 1 does (the same sum tree and scale, so the
// same bits), which saves that dispatch and its barrier; the other workgroups take 64 of the
// remaining (v) channels each. r0: the sequence's first row in mixed and o (a batch's rows).
// from_in: the window is read from win_in and the moved one written to win (the step after a
// rollback snapshot: the window pair's other buffer keeps the snapshot); else win in place.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer M { float mixed[]; };   // [T][cd] pre-conv rows
layout(std430, binding = 1) buffer S { float win[]; };              // [K-1][cd], oldest first
layout(std430, binding = 2) readonly buffer W { float w[]; };       // [cd][K]
layout(std430, binding = 3) buffer O { float o[]; };                // [T][cd]
layout(std430, binding = 4) readonly buffer SI { float win_in[]; };  // from_in: the window read
layout(push_constant) uniform Push { uint cd, K, T, nqk, dk; float eps; uint r0, from_in; } p;

shared float part[64], part_lo[64];

#include "div_rn.glsl"
#include "fma_rn.glsl"
#include "norm_rn.glsl"

float ext(uint r, uint c) {
    if (r >= p.K - 1u) return mixed[(p.r0 + r - (p.K - 1u)) * p.cd + c];
    return p.from_in != 0u ? win_in[r * p.cd + c] : win[r * p.cd + c];
}

float conv_at(uint t, uint c) {
    precise float s = 0.0;
    for (uint i = 0u; i < p.K; i++) s = s + ext(t + i, c) * w[c * p.K + i];
    return s / (1.0 + exp(-s));
}

void move_window(uint c) {
    float keep[8];
    for (uint r = 0u; r + 1u < p.K; r++) keep[r] = ext(p.T + r, c);
    for (uint r = 0u; r + 1u < p.K; r++) win[r * p.cd + c] = keep[r];
}

// one q or k head: each token's conv, then its L2 norm (sum of squares as norm.comp sums them)
void head(uint c0, uint lt) {
    for (uint t = 0u; t < p.T; t++) {
        float hi = 0.0, lo = 0.0;
        for (uint c = lt; c < p.dk; c += 64u) {
            const float v = conv_at(t, c0 + c);
            o[(p.r0 + t) * p.cd + c0 + c] = v;
            precise float sq = v * v;
            ff_add(hi, lo, sq, 0.0);
        }
        ff_reduce64(lt, hi, lo);
        const float scale = norm_scale(1u, part[0], part_lo[0], float(p.dk), p.eps);
        barrier();   // part is read before the next token writes it
        for (uint c = lt; c < p.dk; c += 64u) {
            precise float v = o[(p.r0 + t) * p.cd + c0 + c] * scale;
            o[(p.r0 + t) * p.cd + c0 + c] = v;
        }
    }
    for (uint c = lt; c < p.dk; c += 64u) move_window(c0 + c);
}

void main() {
    const uint wg = gl_WorkGroupID.x, lt = gl_LocalInvocationID.x;
    if (wg < p.nqk) {
        head(wg * p.dk, lt);
        return;
    }
    const uint c = p.nqk * p.dk + (wg - p.nqk) * 64u + lt;
    if (c >= p.cd) return;
    for (uint t = 0u; t < p.T; t++) o[(p.r0 + t) * p.cd + c] = conv_at(t, c);
    move_window(c);
}
