#version 450
#extension GL_GOOGLE_include_directive : require
// norm.comp: one workgroup per group of d values (a row, or one head of a row):
// mode 0 RMSNorm y = x / sqrt(mean(x^2) + eps) * w; mode 1 L2 norm y = x / max(|x|, eps).
// Group g sits at x_off + (g / per_row) * row_stride + (g % per_row) * head_stride (y alike,
// from y_off). x and y may be the same buffer. Fixed reduction tree: batch invariant. The scale
// is the CPU's (norm_rn.glsl), and y = (x * scale) * w as the CPU rounds it.
// Fused (flags): bit 0, the residual add first (x = r + x, written back, as the CPU's
// add_rows); bit 1, the normed rows quantized for the next products exactly as quant_q8.comp
// does (groups of d, d % 32 == 0, that tile whole rows, from y_off 0); bit 2, y = silu(z) * y
// before that (the gated norm of DeltaNet: quant_q8.comp's mode 1, the same float order);
// bit 3 (with bit 1, whole rows), the Hadamard fold of the products that read the row: the row
// rotated in blocks of rblock (rotate.comp's forward operations in its order, so its bits) into
// xr, and the int8 blocks made from xr instead of y (y stays as normed: the products without
// the fold and LoRA read it). Saves rotate.comp's dispatch and barrier.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) coherent buffer Y { float y[]; };   // coherent: the quantizer reads others' y
layout(std430, binding = 3) readonly buffer R { float r[]; };
layout(std430, binding = 4) writeonly buffer Q { uint q[]; };
layout(std430, binding = 5) writeonly buffer S { float s8[]; };
layout(std430, binding = 6) writeonly buffer M { float m8[]; };
layout(std430, binding = 7) readonly buffer Z { float z[]; };
layout(std430, binding = 8) coherent buffer XR { float xr[]; };   // bit 3: the rotated rows
layout(std430, binding = 9) readonly buffer SG { float sg[]; };   // bit 3: the fold's signs (rsigns)
layout(push_constant) uniform Push {
    uint d, mode, has_w, per_row, row_stride, head_stride, x_off, y_off; float eps; uint flags, rblock, rsigns; float rscale;
} p;

#define Q8_AT(i) ((p.flags & 8u) != 0u ? xr[i] : y[i])

#include "f16.glsl"
#include "div_rn.glsl"
#include "q8.glsl"
#include "fma_rn.glsl"
#include "fwht.glsl"

shared float part[64], part_lo[64];
// the largest block rotated here (8 KB; the host checks): the plain norms' pipeline sets 1, so
// that its workgroups do not hold the shared memory (BS_VK_K_NORM / BS_VK_K_NORM_ROT)
layout(constant_id = 0) const uint ROT_MAX = 2048u;
shared float rv[ROT_MAX];

// Row yb rotated into xr (ROTATE_ROW; invocation t wrote y[yb + i] for i = t modulo 64)
void rotate_row(uint yb) {
    const uint t = gl_LocalInvocationID.x;
    ROTATE_ROW(y, xr, sg, rv, ROT_MAX, yb, 0u, p.d, p.rblock, p.rsigns, p.rscale, t, 64u)
}

#include "norm_rn.glsl"

void main() {
    const uint g = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    const uint rel = (g / p.per_row) * p.row_stride + (g % p.per_row) * p.head_stride;
    const uint xb = p.x_off + rel, yb = p.y_off + rel;
    // squares rounded to float, summed as a float-float pair in a fixed tree (see norm_rn.glsl)
    float hi = 0.0, lo = 0.0;
    for (uint i = t; i < p.d; i += 64u) {
        float v = x[xb + i];
        if ((p.flags & 1u) != 0u) {
            v = r[xb + i] + v;
            x[xb + i] = v;
        }
        precise float sq = v * v;
        ff_add(hi, lo, sq, 0.0);
    }
    ff_reduce64(t, hi, lo);
    const float scale = norm_scale(p.mode, part[0], part_lo[0], float(p.d), p.eps);
    barrier();
    for (uint i = t; i < p.d; i += 64u) {
        precise float v = x[xb + i] * scale;
        float o = p.has_w != 0u ? v * w[i] : v;
        if ((p.flags & 4u) != 0u) {
            const float zi = z[xb + i];
            o = zi / (1.0 + exp(-zi)) * o;
        }
        y[yb + i] = o;
    }
    if ((p.flags & 2u) == 0u) return;
    if ((p.flags & 8u) != 0u) rotate_row(yb);
    memoryBarrierBuffer();
    barrier();
    for (uint b = t; b < p.d / 32u; b += 64u) {
        const uint blk = yb / 32u + b;
        quant_block(yb + b * 32u, blk);
    }
}
