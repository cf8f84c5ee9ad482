// conv.glsl (conv.comp, one sequence; conv_b.comp, a batch's sequences in one dispatch, workgroup
// z the sequence, each its own window buffer): the causal depthwise conv + SiLU of a Gated DeltaNet layer over the batch's tokens
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
#ifdef BS_BATCH
layout(std430, binding = 5) buffer S1 { float win1[]; };
layout(std430, binding = 6) buffer S2 { float win2[]; };
layout(std430, binding = 7) buffer S3 { float win3[]; };
layout(std430, binding = 8) buffer S4 { float win4[]; };
layout(std430, binding = 9) buffer S5 { float win5[]; };
layout(std430, binding = 10) buffer S6 { float win6[]; };
layout(std430, binding = 11) buffer S7 { float win7[]; };
layout(std430, binding = 12) readonly buffer SI1 { float win_in1[]; };
layout(std430, binding = 13) readonly buffer SI2 { float win_in2[]; };
layout(std430, binding = 14) readonly buffer SI3 { float win_in3[]; };
layout(std430, binding = 15) readonly buffer SI4 { float win_in4[]; };
layout(std430, binding = 16) readonly buffer SI5 { float win_in5[]; };
layout(std430, binding = 17) readonly buffer SI6 { float win_in6[]; };
layout(std430, binding = 18) readonly buffer SI7 { float win_in7[]; };
layout(push_constant) uniform Push { uint cd, K, nqk, dk; float eps; uint from_mask; uint rt[8]; } p;
// a batch (BS_BATCH): workgroup z is sequence qs; its rows r0..r0+T-1 and whether it reads its
// state from the pair's other buffer in the push constants (rt[q] = r0 | T << 16, from_mask bit q)
uint qs;
float win_get(uint e) {
    switch (qs) { case 0u: return win[e]; case 1u: return win1[e]; case 2u: return win2[e]; case 3u: return win3[e]; case 4u: return win4[e]; case 5u: return win5[e]; case 6u: return win6[e]; default: return win7[e]; }
}
void win_put(uint e, float v) {
    switch (qs) { case 0u: win[e] = v; break; case 1u: win1[e] = v; break; case 2u: win2[e] = v; break; case 3u: win3[e] = v; break; case 4u: win4[e] = v; break; case 5u: win5[e] = v; break; case 6u: win6[e] = v; break; default: win7[e] = v; }
}
float win_in_get(uint e) {
    switch (qs) { case 0u: return win_in[e]; case 1u: return win_in1[e]; case 2u: return win_in2[e]; case 3u: return win_in3[e]; case 4u: return win_in4[e]; case 5u: return win_in5[e]; case 6u: return win_in6[e]; default: return win_in7[e]; }
}
bool from_in() { return ((p.from_mask >> qs) & 1u) != 0u; }
uint seq_r0() { return p.rt[qs] & 0xffffu; }
uint seq_T() { return p.rt[qs] >> 16; }
#else
layout(push_constant) uniform Push { uint cd, K, T, nqk, dk; float eps; uint r0, from_in; } p;
float win_get(uint e) { return win[e]; }
void win_put(uint e, float v) { win[e] = v; }
float win_in_get(uint e) { return win_in[e]; }
bool from_in() { return p.from_in != 0u; }
uint seq_r0() { return p.r0; }
uint seq_T() { return p.T; }
#endif
uint T_, r0_;   // this workgroup's sequence's rows

shared float part[64], part_lo[64];

#include "div_rn.glsl"
#include "fma_rn.glsl"
#include "norm_rn.glsl"

float ext(uint r, uint c) {
    if (r >= p.K - 1u) return mixed[(r0_ + r - (p.K - 1u)) * p.cd + c];
    return from_in() ? win_in_get(r * p.cd + c) : win_get(r * p.cd + c);
}

float conv_at(uint t, uint c) {
    precise float s = 0.0;
    for (uint i = 0u; i < p.K; i++) s = s + ext(t + i, c) * w[c * p.K + i];
    return s / (1.0 + exp(-s));
}

void move_window(uint c) {
    float keep[8];
    for (uint r = 0u; r + 1u < p.K; r++) keep[r] = ext(T_ + r, c);
    for (uint r = 0u; r + 1u < p.K; r++) win_put(r * p.cd + c, keep[r]);
}

// one q or k head: each token's conv, then its L2 norm (sum of squares as norm.comp sums them)
void head(uint c0, uint lt) {
    for (uint t = 0u; t < T_; t++) {
        float hi = 0.0, lo = 0.0;
        for (uint c = lt; c < p.dk; c += 64u) {
            const float v = conv_at(t, c0 + c);
            o[(r0_ + t) * p.cd + c0 + c] = v;
            precise float sq = v * v;
            ff_add(hi, lo, sq, 0.0);
        }
        ff_reduce64(lt, hi, lo);
        const float scale = norm_scale(1u, part[0], part_lo[0], float(p.dk), p.eps);
        barrier();   // part is read before the next token writes it
        for (uint c = lt; c < p.dk; c += 64u) {
            precise float v = o[(r0_ + t) * p.cd + c0 + c] * scale;
            o[(r0_ + t) * p.cd + c0 + c] = v;
        }
    }
    for (uint c = lt; c < p.dk; c += 64u) move_window(c0 + c);
}

void main() {
#ifdef BS_BATCH
    qs = gl_WorkGroupID.z;
#endif
    T_ = seq_T();
    r0_ = seq_r0();
    const uint wg = gl_WorkGroupID.x, lt = gl_LocalInvocationID.x;
    if (wg < p.nqk) {
        head(wg * p.dk, lt);
        return;
    }
    const uint c = p.nqk * p.dk + (wg - p.nqk) * 64u + lt;
    if (c >= p.cd) return;
    for (uint t = 0u; t < T_; t++) o[(r0_ + t) * p.cd + c] = conv_at(t, c);
    move_window(c);
}
