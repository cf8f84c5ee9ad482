#version 450
// rope.comp: NeoX RoPE on the first n_rot dims of each head, cos/sin per row from the host
// (the positions' table the CPU path uses): x[i], x[i+n_rot/2] rotated by (cs[2i], cs[2i+1]).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };    // [T][n_rot]
layout(push_constant) uniform Push { uint heads, head_stride, row_stride, n_rot; } p;

void main() {
    const uint i = gl_GlobalInvocationID.x, g = gl_WorkGroupID.y, half_ = p.n_rot / 2u;
    if (i >= half_) return;
    const uint t = g / p.heads, b = t * p.row_stride + (g % p.heads) * p.head_stride;
    const float c = cs[t * p.n_rot + 2u * i], s = cs[t * p.n_rot + 2u * i + 1u];
    const float x0 = x[b + i], x1 = x[b + i + half_];
    precise float a = x0 * c - x1 * s;
    precise float e = x0 * s + x1 * c;
    x[b + i] = a;
    x[b + i + half_] = e;
}
