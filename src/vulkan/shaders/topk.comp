#version 450
// topk.comp: the k best logits of each row (k <= 64; rows along y), for sampling: only their ids and values
// come back to the host, not the row. "Best" is the sampler's order (sampler.c's `better`):
// higher logit first, then lower id; NaN and -inf are never candidates, +inf counts as FLT_MAX,
// -0 as +0. A workgroup sorts 2048 candidates in shared memory (bitonic, 16 KiB: the least any
// device has) and keeps its k best; levels of this kernel reduce the row's chunks to one list
// (the 27B's 248320 logits: 122 workgroups, then 4, then 1). Comparisons only: every device
// gives the CPU's list.
//   mode 0: the candidates are row r's logits lg[r * n..][0..n); else the (key, id) pairs
//   cand_in[r * stride..][0..n) of the level before. Workgroup (g, r) writes its k best to
//   cand_out[r * stride + g * k..] or, with last, row r's list at out[r * 129..]: the count (< k
//   where fewer are candidates), then 64 ids, then 64 logits' bits.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) readonly buffer CI { uvec2 cand_in[]; };
layout(std430, binding = 2) writeonly buffer CO { uvec2 cand_out[]; };
layout(std430, binding = 3) writeonly buffer O { uint out_[]; };
layout(push_constant) uniform Push { uint n, k, mode, last, stride, V; } p;

const uint N = 2048u, NONE = 0xffffffffu;
shared uint sk[N], si[N];

// An order-preserving key of a logit (0: not a candidate).
uint key_of(float x) {
    if (isnan(x) || (isinf(x) && x < 0.0)) return 0u;
    if (x == 0.0) x = 0.0;                    // -0 ties with +0, as float comparison has it
    const uint u = floatBitsToUint(min(x, 3.40282347e38));
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

// Whether a comes before b: the larger key, then the lower id.
bool before(uint ka, uint ia, uint kb, uint ib) { return ka > kb || (ka == kb && ia < ib); }

void main() {
    const uint lid = gl_LocalInvocationID.x, base = gl_WorkGroupID.x * N, row = gl_WorkGroupID.y;
    const uint lrow = row * p.V, crow = row * p.stride, orow = row * 129u;
    for (uint t = lid; t < N; t += 256u) {
        const uint i = base + t;
        uint key = 0u, id = NONE;
        if (i < p.n) {
            if (p.mode == 0u) {
                key = key_of(lg[lrow + i]);
                id = i;
            } else {
                key = cand_in[crow + i].x;
                id = cand_in[crow + i].y;
            }
        }
        sk[t] = key;
        si[t] = key == 0u ? NONE : id;
    }
    barrier();
    for (uint size = 2u; size <= N; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint t = lid; t < N / 2u; t += 256u) {
                const uint i = 2u * t - (t & (stride - 1u)), j = i + stride;
                const bool best_first = (i & size) == 0u;
                if (before(sk[j], si[j], sk[i], si[i]) == best_first) {
                    const uint k0 = sk[i], i0 = si[i];
                    sk[i] = sk[j]; si[i] = si[j];
                    sk[j] = k0; si[j] = i0;
                }
            }
            barrier();
        }
    }
    if (p.last == 0u) {
        for (uint t = lid; t < p.k; t += 256u) cand_out[crow + gl_WorkGroupID.x * p.k + t] = uvec2(sk[t], si[t]);
        return;
    }
    if (lid < p.k) {
        const bool real = sk[lid] != 0u;
        out_[orow + 1u + lid] = real ? si[lid] : 0u;
        out_[orow + 65u + lid] = real ? floatBitsToUint(lg[lrow + si[lid]]) : 0u;
    }
    if (lid == 0u) {
        uint c = 0u;
        while (c < p.k && sk[c] != 0u) c++;
        out_[orow] = c;
    }
}
