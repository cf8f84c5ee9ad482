#version 450
#extension GL_GOOGLE_include_directive : require
// mv_f32n.comp: y[r][row] = sum_i W[row][i] x[r][i] on F32 weights with few rows (DeltaNet's
// alpha and beta: 48 rows of 5120 inputs; mv_f32.comp's invocation per row would leave a GPU
// nearly idle, one invocation looping over every input): a workgroup per row, its 64 lanes
// striding along the row (the weights column-major, as mv_f32.comp reads them: the lanes of
// neighbouring workgroups share cache lines), then a fixed tree over the lanes, so a row's
// value does not depend on how many rows run together. act 1 / 2: x rounded to F16 / BF16 as it
// is read (act_round.comp's modes 1 and 2: idempotent, so an input rounded already is no matter).
// FMA = 0 (a LoRA factor A's rows): each product rounded, then added: the CPU's order for its
// LoRA terms (cpu/matmul.c lora_dot), so the terms come out with its bits.
// A pair (DeltaNet's beta and alpha): workgroups rows..2*rows-1 take a second matrix of the same
// shape (binding 3) into its own output (binding 4, the same layout); a single matrix's dispatch
// never reaches them (bound, unread).
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint FMA = 1;
layout(std430, binding = 0) readonly buffer W { float w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer W2 { float w2[]; };
layout(std430, binding = 4) buffer Y2 { float y2[]; };
layout(push_constant) uniform Push { uint rows, cols, n, ldy, row0, act; } p;

#include "f16.glsl"
#include "fma_rn.glsl"

shared float part[8][64];

float rounded(float v) { return p.act == 1u ? f16_round(v) : p.act == 2u ? bf16_round(v) : v; }

void main() {
    const bool second = gl_WorkGroupID.x >= p.rows;
    const uint row = second ? gl_WorkGroupID.x - p.rows : gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    const uint r0 = gl_WorkGroupID.y * 8u, nr = min(8u, p.n - r0);
    float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (uint i = t; i < p.cols; i += 64u) {
        const float wv = second ? w2[i * p.rows + row] : w[i * p.rows + row];
        for (uint r = 0u; r < nr; r++) {
            const float xv = rounded(x[(r0 + r) * p.cols + i]);
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
    for (uint r = 0u; r < 8u; r++) part[r][t] = acc[r];
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1u) {
        if (t < h)
            for (uint r = 0u; r < nr; r++) {
                precise float v = part[r][t] + part[r][t + h];
                part[r][t] = v;
            }
        barrier();
    }
    if (t < nr && second) y2[(r0 + t) * p.ldy + p.row0 + row] = part[t][0];
    else if (t < nr) y[(r0 + t) * p.ldy + p.row0 + row] = part[t][0];
}
