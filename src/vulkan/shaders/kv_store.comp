#version 450
#extension GL_GOOGLE_include_directive : require
// kv_store.comp: rows of K (normed, roped) and V into the F16 cache at positions pos0.., two
// halves per word, rounded to nearest even as the CPU's F16 cache.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer KC { uint kc[]; };
layout(std430, binding = 3) writeonly buffer VC { uint vc[]; };
layout(push_constant) uniform Push { uint kvw, pos0; } p;

#include "f16.glsl"

void main() {
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y, hw = p.kvw / 2u;
    if (i >= hw) return;
    const uint s = t * p.kvw + 2u * i, dst = (p.pos0 + t) * hw + i;
    kc[dst] = f16_bits(k[s]) | (f16_bits(k[s + 1u]) << 16);
    vc[dst] = f16_bits(v[s]) | (f16_bits(v[s + 1u]) << 16);
}
