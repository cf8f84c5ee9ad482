#version 450
#extension GL_GOOGLE_include_directive : require
// quant_q8.comp: activations to int8 32-blocks (q8.glsl), one invocation per block; codes
// packed 4 per word, little-endian; scales and Q8_1 sums as floats.
// The gate of the step before the product, in the same dispatch (mode; written back to y
// first, in ew.comp's float order, so the float rows stay what that step gave):
//  0 none; 1 y = silu(g) * y (the gated norm's SiLU(z)); 2 y[t][h][d] *= sigmoid(g[t][h][D + d])
//  (attention's output gate, g rows of 2*H*D).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float y[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer S { float s8[]; };
layout(std430, binding = 3) writeonly buffer M { float m8[]; };
layout(std430, binding = 4) readonly buffer G { float g[]; };
layout(push_constant) uniform Push { uint n_blocks, mode, H, D; } p;

#include "f16.glsl"
#include "div_rn.glsl"
#include "q8.glsl"

float sigm(float x) { return 1.0 / (1.0 + exp(-x)); }

void gate_block(uint e) {
    for (uint j = 0u; j < 32u; j++) {
        const uint i = e + j;
        if (p.mode == 1u) {
            const float x = g[i];
            y[i] = x / (1.0 + exp(-x)) * y[i];
        } else {
            const uint hd = p.H * p.D, t = i / hd, h = (i / p.D) % p.H, d = i % p.D;
            y[i] = y[i] * sigm(g[t * 2u * hd + h * 2u * p.D + p.D + d]);
        }
    }
}

void main() {
    const uint b = gl_GlobalInvocationID.x;
    if (b >= p.n_blocks) return;
    if (p.mode != 0u) gate_block(b * 32u);
    quant_block(b * 32u, b);
}
