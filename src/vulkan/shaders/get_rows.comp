#version 450
#extension GL_GOOGLE_include_directive : require
// get_rows.comp: embedding rows out[t] = W[tokens[t]] from a matrix part in the product
// layout (see mv_q.comp; BITS 32: F32 column-major), for the tokens inside this part's rows.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint BITS = 1;
layout(constant_id = 1) const uint SUBS = 4;
layout(std430, binding = 0) readonly buffer WC { uint wc[]; };
layout(std430, binding = 1) readonly buffer WS { uint ws[]; };
layout(std430, binding = 2) readonly buffer T { uint tok[]; };
layout(std430, binding = 3) buffer O { float o[]; };
layout(push_constant) uniform Push { uint rows, cols, row0, n; } p;

#include "f16.glsl"

// scale i of the plane: the file's fp16, two to a word (BITS 32 has none)
float scale(uint i) { return f16_half(ws[i >> 1], i); }

// code word b of sub-block s of row r: [group][rows][SUBS * BITS words]
uint word(uint s, uint b, uint r) { return ((s / SUBS) * p.rows + r) * (SUBS * BITS) + (s % SUBS) * BITS + b; }

void main() {
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i >= p.cols) return;
    const uint id = tok[t];
    if (id < p.row0 || id >= p.row0 + p.rows) return;
    const uint r = id - p.row0;
    if (BITS == 32u) { o[t * p.cols + i] = uintBitsToFloat(wc[i * p.rows + r]); return; }
    const uint s = i / 32u, j = i % 32u;
    const float d = scale((s / SUBS) * p.rows + r);
    if (BITS == 4u) {   // Q4_1: nibble * d + m, the minimums a second plane of scales
        const uint b = j & 15u, w = wc[word(s, b / 4u, r)];
        const float q4 = float((w >> (8u * (b & 3u) + (j >= 16u ? 4u : 0u))) & 15u);
        precise float v = q4 * d;
        o[t * p.cols + i] = v + scale((p.cols / 32u + s) * p.rows + r);
        return;
    }
    int q;
    if (BITS == 1u) q = ((wc[word(s, 0u, r)] >> j) & 1u) != 0u ? 1 : -1;
    else if (BITS == 2u) q = int((wc[word(s, j / 16u, r)] >> (2u * (j % 16u))) & 3u) - 1;
    else q = bitfieldExtract(int(wc[word(s, j / 4u, r)]), int(8u * (j % 4u)), 8);
    o[t * p.cols + i] = float(q) * d;
}
