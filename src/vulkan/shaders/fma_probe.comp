#version 450
// fma_probe.comp: fma() on inputs where a fused multiply-add and a rounded multiply then add
// differ; the context compares the results with the single-rounding values to set fma_rn.glsl's
// FMA_FUSED for every other pipeline.
layout(local_size_x = 1) in;
layout(std430, binding = 0) readonly buffer I { float v[]; };   // n triples a, b, c
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform Push { uint n; } p;

void main() {
    for (uint i = 0u; i < p.n; i++) {
        precise float r = fma(v[3u * i], v[3u * i + 1u], v[3u * i + 2u]);
        o[i] = r;
    }
}
