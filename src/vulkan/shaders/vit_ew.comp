#version 450
// vit_ew.comp: the vision encoder's element-wise steps, by mode (rows of `width`, n values):
//  0 BIAS       a[r][i] += b[i]
//  1 BIAS_GELU  a[r][i] = gelu(a[r][i] + b[i])   (the tanh form, as the CPU encoder)
//  2 ADD        a[i] += b[i]                     (residual)
//  3 QKV        the fused rows a [n][3C] (C = width) split into c (Q), d (K), e (V) [n][C], Q and K
//               turned by the 2-D RoPE table b [n][D/2][2] (cos, sin of pair (j, j + D/2) of each
//               head, D = p0); one invocation per (row, head, pair).
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 3) writeonly buffer D { float d[]; };
layout(std430, binding = 4) writeonly buffer E { float e[]; };
layout(push_constant) uniform Push { uint mode, n, width, p0; } p;

// tanh that saturates instead of overflowing (exp(2u) may be inf: then 1)
float tanh_safe(float u) { return 1.0 - 2.0 / (exp(2.0 * u) + 1.0); }

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
    if (i >= p.n) return;
    if (p.mode == 0u) {
        a[i] += b[i % p.width];
    } else if (p.mode == 1u) {
        const float x = a[i] + b[i % p.width];
        a[i] = 0.5 * x * (1.0 + tanh_safe(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    } else if (p.mode == 2u) {
        a[i] += b[i];
    } else {
        // i = (row * H + head) * half + j
        const uint C = p.width, D = p.p0, half_ = D / 2u, H = C / D;
        const uint j = i % half_, h = (i / half_) % H, r = i / (half_ * H);
        const float cs = b[(r * half_ + j) * 2u], sn = b[(r * half_ + j) * 2u + 1u];
        const uint src = r * 3u * C + h * D + j, dst = r * C + h * D + j;
        float x0 = a[src], x1 = a[src + half_];
        c[dst] = x0 * cs - x1 * sn;
        c[dst + half_] = x0 * sn + x1 * cs;
        x0 = a[src + C]; x1 = a[src + C + half_];
        d[dst] = x0 * cs - x1 * sn;
        d[dst + half_] = x0 * sn + x1 * cs;
        e[dst] = a[src + 2u * C];
        e[dst + half_] = a[src + 2u * C + half_];
    }
}
