#version 450
// rmsnorm.comp: one workgroup per row: y = x / sqrt(mean(x^2) + eps) * w (w optional).
// The sum of squares is a fixed tree over the workgroup, so a row's result does not depend on
// how many rows run together.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint d; float eps; uint has_w; } p;

shared float part[64];

void main() {
    const uint row = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, base = row * p.d;
    precise float s = 0.0;
    for (uint i = t; i < p.d; i += 64u) s = fma(x[base + i], x[base + i], s);
    part[t] = s;
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1) {
        if (t < h) part[t] = part[t] + part[t + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(part[0] / float(p.d) + p.eps);
    for (uint i = t; i < p.d; i += 64u) y[base + i] = p.has_w != 0u ? x[base + i] * scale * w[i] : x[base + i] * scale;
}
