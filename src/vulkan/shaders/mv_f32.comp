#version 450
#extension GL_GOOGLE_include_directive : require
// mv_f32.comp: y[r][row] = sum_i W[row][i] x[r][i] on F32 weights (every format without an
// integer kernel is converted to F32 at upload), stored column-major ([col][rows]) so
// neighbouring invocations read neighbouring words. Fixed fma order per output; with FMA = 0
// (a LoRA factor B: rank-long sums) a product then a sum per step, the CPU's order for its LoRA
// terms, so the terms come out with the CPU's bits (factor A: mv_f32n.comp); with ADD (B) added
// into y as the CPU adds them, y += scale * (B t) with the scale's bits in pad (ew.comp's mode 4,
// unfused), in the product's dispatch instead of a scratch and an element-wise step after it.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint FMA = 1;
layout(constant_id = 1) const uint ADD = 0;
layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Push { uint rows, cols, n, ldy, row0, pad; } p;

#include "fma_rn.glsl"

void main() {
    const uint row = gl_GlobalInvocationID.x;
    if (row >= p.rows) return;
    const uint r0 = gl_WorkGroupID.y * 8u, nr = min(8u, p.n - r0);
    float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (uint i = 0u; i < p.cols; i++) {
        const float wv = w[i * p.rows + row];
        for (uint r = 0u; r < nr; r++) {
            const float xv = x[(r0 + r) * p.cols + i];
            if (FMA != 0u) {
                precise float v = fma_x(wv, xv, acc[r]);
                acc[r] = v;
            } else {
                precise float prod = wv * xv;
                precise float v = acc[r] + prod;
                acc[r] = v;
            }
        }
    }
    for (uint r = 0u; r < nr; r++) {
        const uint i = (r0 + r) * p.ldy + p.row0 + row;
        if (ADD != 0u) {
            precise float t = uintBitsToFloat(p.pad) * acc[r];
            precise float v = y[i] + t;
            y[i] = v;
        } else {
            y[i] = acc[r];
        }
    }
}
