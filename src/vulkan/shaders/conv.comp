#version 450
// conv.comp: the causal depthwise conv + SiLU of a Gated DeltaNet layer, one invocation per
// channel over the batch's tokens in order, then the window (last K-1 pre-conv rows) moved on.
// Sums in tap order from 0, as the CPU path.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer M { float mixed[]; };   // [T][cd] pre-conv rows
layout(std430, binding = 1) buffer S { float win[]; };              // [K-1][cd], oldest first
layout(std430, binding = 2) readonly buffer W { float w[]; };       // [cd][K]
layout(std430, binding = 3) writeonly buffer O { float o[]; };      // [T][cd]
layout(push_constant) uniform Push { uint cd, K, T; } p;

float ext(uint r, uint c) { return r < p.K - 1u ? win[r * p.cd + c] : mixed[(r - (p.K - 1u)) * p.cd + c]; }

void main() {
    const uint c = gl_GlobalInvocationID.x;
    if (c >= p.cd) return;
    for (uint t = 0u; t < p.T; t++) {
        precise float s = 0.0;
        for (uint i = 0u; i < p.K; i++) s = s + ext(t + i, c) * w[c * p.K + i];
        o[t * p.cd + c] = s / (1.0 + exp(-s));
    }
    float keep[8];
    for (uint r = 0u; r + 1u < p.K; r++) keep[r] = ext(p.T + r, c);
    for (uint r = 0u; r + 1u < p.K; r++) win[r * p.cd + c] = keep[r];
}
