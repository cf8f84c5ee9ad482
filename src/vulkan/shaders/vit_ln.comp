#version 450
// vit_ln.comp: the vision encoder's LayerNorm, one workgroup per row of d values:
// y = (x - mean) / sqrt(var + eps) * w + b, the variance from the centred values (two passes,
// as the CPU encoder computes it). A fixed reduction tree: a row does not depend on the others.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint d; float eps; } p;

shared float part[64];

float row_sum(float v) {
    const uint t = gl_LocalInvocationID.x;
    part[t] = v;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (t < k) part[t] += part[t + k];
        barrier();
    }
    const float s = part[0];
    barrier();
    return s;
}

void main() {
    const uint t = gl_LocalInvocationID.x, base = gl_WorkGroupID.x * p.d;
    float s = 0.0;
    for (uint i = t; i < p.d; i += 64u) s += x[base + i];
    const float mean = row_sum(s) / float(p.d);
    float ss = 0.0;
    for (uint i = t; i < p.d; i += 64u) {
        const float c = x[base + i] - mean;
        ss += c * c;
    }
    const float inv = 1.0 / sqrt(row_sum(ss) / float(p.d) + p.eps);
    for (uint i = t; i < p.d; i += 64u) y[base + i] = (x[base + i] - mean) * inv * w[i] + b[i];
}
