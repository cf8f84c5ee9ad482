#version 450
// rotate.comp: the activation side of PrismML's Hadamard fold (cpu/rotation.c, the same
// operations in the same order, so the same bits): a workgroup per (block, row). Forward: the
// V heads regrouped (hd > 0: the tiled [rep][nk][hd] order to [nk][rep][hd]), the signs, the
// butterflies of the Walsh-Hadamard transform, the scale. Inverse: butterflies, scale, signs.
// In place only without the regrouping (a workgroup reads its block before writing it).
// quant: the block's int8 32-blocks too, as quant_q8.comp makes them (q8.glsl), for the product;
// gate: the step before's element-wise gate applied to x as it is read (its rows stay ungated).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) coherent buffer Y { float y[]; };   // (read back by other invocations: quant)
layout(std430, binding = 2) readonly buffer S { float sg[]; };
layout(std430, binding = 3) writeonly buffer Q { uint q[]; };
layout(std430, binding = 4) writeonly buffer S8 { float s8[]; };
layout(std430, binding = 5) writeonly buffer M8 { float m8[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(push_constant) uniform Push { uint width, block, hd, nk, rep, inverse, signs; float scale; uint quant, gate, H, D; } p;

#include "f16.glsl"
#include "div_rn.glsl"
#include "q8.glsl"
#include "fwht.glsl"

shared float v[4096];

float sigm(float v) { return 1.0 / (1.0 + exp(-v)); }

// The gate of the step before the product (ew.comp's expressions): 1 x = silu(g) * x (the gated
// norm's SiLU(z)); 2 x *= sigmoid(g[t][h][D + d]) (attention's output gate, g rows of 2*H*D).
float gated(uint i, float a) {
    if (p.gate == 1u) {
        const float z = g[i];
        return z / (1.0 + exp(-z)) * a;
    }
    const uint hd = p.H * p.D, t = i / hd, h = (i / p.D) % p.H, d = i % p.D;
    return a * sigm(g[t * 2u * hd + h * 2u * p.D + p.D + d]);
}

void main() {
    const uint b0 = gl_WorkGroupID.x * p.block, base = gl_WorkGroupID.y * p.width, t = gl_LocalInvocationID.x;
    for (uint j = t; j < p.block; j += 256u) {
        const uint e = b0 + j;
        uint src = e;
        if (p.hd > 0u) {
            const uint g = e / p.hd, k = g / p.rep, i = g % p.rep;
            src = (i * p.nk + k) * p.hd + e % p.hd;
        }
        float a = x[base + src];
        if (p.gate != 0u) a = gated(base + src, a);
        if (p.inverse == 0u && p.signs != 0u) a *= sg[e];
        v[j] = a;
    }
    barrier();
    FWHT_BLOCKS(v, p.block, p.block, t, 256u)
    for (uint j = t; j < p.block; j += 256u) {
        precise float a = v[j] * p.scale;
        if (p.inverse != 0u && p.signs != 0u) a *= sg[b0 + j];
        y[base + b0 + j] = a;
    }
    if (p.quant == 0u) return;
    memoryBarrierBuffer();
    barrier();
    for (uint k = t; k < p.block / 32u; k += 256u) quant_block(base + b0 + 32u * k, (base + b0) / 32u + k);
}
