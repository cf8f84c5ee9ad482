#version 450
// ew.comp: element-wise steps, by mode:
//  0 ADD           a[i] = b[p0 + i] + a[i]                  (residual; the drafter's Markov term)
//  1 SILU_MUL      a[i] = silu(b[i]) * c[i]                 (SwiGLU; gated norm: a = c)
//  2 SIGMOID_GATE  a[t][h][d] *= sigmoid(b[t][h][D + d])    (b rows of 2*H*D; p0 = H, p1 = D)
//  4 ADD_SCALED    a[i] = a[i] + s * b[i]   (s: the float whose bits are p0; LoRA terms)
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) buffer B { float b[]; };
layout(std430, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform Push { uint mode, n, p0, p1; } p;

float sigm(float x) { return 1.0 / (1.0 + exp(-x)); }

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    if (p.mode == 0u) {
        a[i] = b[p.p0 + i] + a[i];
    } else if (p.mode == 1u) {
        const float x = b[i];
        a[i] = x / (1.0 + exp(-x)) * c[i];
    } else if (p.mode == 2u) {
        const uint hd = p.p0 * p.p1, t = i / hd, h = (i / p.p1) % p.p0, d = i % p.p1;
        a[i] = a[i] * sigm(b[t * 2u * hd + h * 2u * p.p1 + p.p1 + d]);
    } else if (p.mode == 4u) {
        precise float t = uintBitsToFloat(p.p0) * b[i];   // the CPU's y += scale * s, unfused
        precise float v = a[i] + t;
        a[i] = v;
    }
}
