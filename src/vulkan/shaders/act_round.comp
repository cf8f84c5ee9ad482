#version 450
#extension GL_GOOGLE_include_directive : require
// act_round.comp: activations rounded the way the CPU path feeds them to the weight formats
// that run here as F32 (float products of the rounded values): mode 1 F16 and mode 2 BF16
// (nearest even; F16/BF16 weights), mode 3 int8 32-blocks with the Q8_0 activation rounding
// (Q4_1's Q8_1 codes are the same), mode 4 Q8_K 256-blocks (quantize_row_q8_K_ref: the signed
// largest element sets iscale = -127/max, nearest int, clamped at 127; d = 1/iscale).
// One invocation per block (32 values; 256 in mode 4).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint mode, n_blocks; } p;

#include "f16.glsl"

#include "div_rn.glsl"

void main() {
    const uint b = gl_GlobalInvocationID.x;
    if (b >= p.n_blocks) return;
    if (p.mode <= 2u) {
        for (uint j = b * 32u; j < b * 32u + 32u; j++) y[j] = p.mode == 1u ? f16_round(x[j]) : bf16_round(x[j]);
    } else if (p.mode == 3u) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(x[b * 32u + j]));
        const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0, d = f16_round(div_rn(amax, 127.0));
        for (uint j = b * 32u; j < b * 32u + 32u; j++) {
            precise float v = x[j] * id;
            y[j] = roundEven(v) * d;
        }
    } else {
        float mx = 0.0, amax = 0.0;
        for (uint j = b * 256u; j < b * 256u + 256u; j++)
            if (abs(x[j]) > amax) { amax = abs(x[j]); mx = x[j]; }
        if (amax == 0.0) {
            for (uint j = b * 256u; j < b * 256u + 256u; j++) y[j] = 0.0;
            return;
        }
        const float is = div_rn(-127.0, mx), d = div_rn(1.0, is);
        for (uint j = b * 256u; j < b * 256u + 256u; j++) {
            precise float v = is * x[j];
            y[j] = min(127.0, roundEven(v)) * d;
        }
    }
}
