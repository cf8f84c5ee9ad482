#version 450
#extension GL_GOOGLE_include_directive : require
// kv_store.comp: rows of K (normed, roped) and V into the cache at positions pos0..: F16, two
// halves per word, rounded to nearest even as the CPU's F16 cache, or F32 (f32 != 0). Rows from
// r0 of k and v (a batch's rows).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer KC { uint kc[]; };
layout(std430, binding = 3) writeonly buffer VC { uint vc[]; };
layout(std430, binding = 4) readonly buffer P { uint pos0; } step;   // per-step values
layout(push_constant) uniform Push { uint kvw, f32, r0; } p;

#include "f16.glsl"

void main() {
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y, hw = p.kvw / 2u;
    if (i >= hw) return;
    const uint s = (p.r0 + t) * p.kvw + 2u * i, dst = (step.pos0 + t) * hw + i;
    if (p.f32 != 0u) {   // F32 cache: the rows as they are
        const uint d2 = (step.pos0 + t) * p.kvw + 2u * i;
        kc[d2] = floatBitsToUint(k[s]);
        kc[d2 + 1u] = floatBitsToUint(k[s + 1u]);
        vc[d2] = floatBitsToUint(v[s]);
        vc[d2 + 1u] = floatBitsToUint(v[s + 1u]);
        return;
    }
    kc[dst] = f16_bits(k[s]) | (f16_bits(k[s + 1u]) << 16);
    vc[dst] = f16_bits(v[s]) | (f16_bits(v[s + 1u]) << 16);
}
