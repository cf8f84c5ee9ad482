#version 450
#extension GL_GOOGLE_include_directive : require
// quant_q8.comp: activations to int8 32-blocks the way the CPU path quantizes them for Q8_0
// products (x86 llama.cpp rounding): d = amax/127 (kept at fp16 precision), q = round half to
// even of x * (127/amax). Divisions are corrected to the correctly rounded quotient (a Vulkan
// division may be off by an ulp or two), so the codes match the CPU's bit for bit.
// One invocation per block; q packed 4 per word, little-endian; scales as floats, and Q8_1's
// s = fp16(d * sum q) beside them (d before its fp16 rounding, as bs_q8_1_act).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Q { uint q[]; };
layout(std430, binding = 2) writeonly buffer S { float s[]; };
layout(std430, binding = 3) writeonly buffer M { float m[]; };   // fp16(d * sum q) (Q8_1's s)
layout(push_constant) uniform Push { uint n_blocks; uint pad; } p;

// a / b rounded correctly (one Newton step on the residual, exact with fma)
float div_rn(float a, float b) {
    precise float r = a / b;
    precise float e = fma(-r, b, a);
    return fma(e, 1.0 / b, r);
}

#include "f16.glsl"

void main() {
    const uint b = gl_GlobalInvocationID.x;
    if (b >= p.n_blocks) return;
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(x[b * 32u + j]));
    const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    int sum = 0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            precise float v = x[b * 32u + w * 4u + k] * id;
            int qi = int(roundEven(v));
            sum += qi;
            word |= (uint(qi) & 0xffu) << (8u * k);
        }
        q[b * 8u + w] = word;
    }
    const float d = div_rn(amax, 127.0);
    s[b] = f16_round(d);
    m[b] = f16_round(d * float(sum));
}
