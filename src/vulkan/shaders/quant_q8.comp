#version 450
#extension GL_GOOGLE_include_directive : require
// quant_q8.comp: activations to int8 32-blocks (q8.glsl), one invocation per block; codes
// packed 4 per word, little-endian; scales and Q8_1 sums as floats.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float y[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer S { float s8[]; };
layout(std430, binding = 3) writeonly buffer M { float m8[]; };
layout(push_constant) uniform Push { uint n_blocks; uint pad; } p;

#include "f16.glsl"
#include "q8.glsl"

void main() {
    const uint b = gl_GlobalInvocationID.x;
    if (b < p.n_blocks) quant_block(b * 32u, b);
}
