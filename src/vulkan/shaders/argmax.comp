#version 450
// argmax.comp: greedy decoding on the device. Row r of n logits gets, in ids[r], the lowest index
// holding the largest value (NaN never wins; a row of NaN gives 0), as a scan from index 0
// keeping the first maximum would: comparisons only, whose order does not matter, so every
// device and every chunking agree bit for bit. A greedy step reads 4 bytes back instead of the
// row; with feed, row 0's id also goes to the token the step submitted after this one embeds
// (vk_ahead.c).
// Workgroup (c, r) takes chunk c of `chunk` logits of row r (the 27B's 248320: 61 workgroups of
// 4096, where one workgroup per row would read 1 MB alone); with more than one chunk it leaves
// its best in part[r][c] and the last of the row's workgroups to finish (a counter per row,
// which it resets, as attn_split.comp's) picks among them.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) writeonly buffer I { uint ids[]; };
layout(std430, binding = 2) writeonly buffer F { uint next_tok[]; };
layout(std430, binding = 3) coherent buffer P { uvec2 part[]; };   // [rows][64]: value bits, index
layout(std430, binding = 4) coherent buffer C { uint cnt[]; };     // [rows], 0 between dispatches
layout(push_constant) uniform Push { uint n, feed, chunk; } p;

const uint NONE = 0xffffffffu, MAX_CHUNKS = 64u;
shared float sv[256];
shared uint si[256];
shared bool last_wg;

// (va, ia) or (vb, ib): the larger value, the lower index between equals; NONE loses.
void pick(inout float va, inout uint ia, float vb, uint ib) {
    if (ib == NONE) return;
    if (ia == NONE || vb > va || (vb == va && ib < ia)) { va = vb; ia = ib; }
}

// the workgroup's candidates (v, i) of invocation t reduced into sv[0], si[0]
void reduce(float v, uint i, uint t) {
    sv[t] = v;
    si[t] = i;
    barrier();
    for (uint h = 128u; h > 0u; h >>= 1) {
        if (t < h) {
            float a = sv[t];
            uint ia = si[t];
            pick(a, ia, sv[t + h], si[t + h]);
            sv[t] = a;
            si[t] = ia;
        }
        barrier();
    }
}

void main() {
    const uint t = gl_LocalInvocationID.x, c = gl_WorkGroupID.x, r = gl_WorkGroupID.y, nc = gl_NumWorkGroups.x;
    const uint base = r * p.n, k0 = c * p.chunk, k1 = min(p.n, k0 + p.chunk);
    float v = 0.0;
    uint i = NONE;
    for (uint k = k0 + t; k < k1; k += 256u) {   // rising indices: a later equal value never wins
        const float x = lg[base + k];
        if (!isnan(x) && (i == NONE || x > v)) { v = x; i = k; }
    }
    reduce(v, i, t);
    if (nc > 1u) {   // the chunk's best to part; the row's last workgroup picks among them
        if (t == 0u) part[r * MAX_CHUNKS + c] = uvec2(floatBitsToUint(sv[0]), si[0]);
        memoryBarrierBuffer();
        barrier();
        if (t == 0u) last_wg = atomicAdd(cnt[r], 1u) == nc - 1u;
        barrier();
        if (!last_wg) return;
        memoryBarrierBuffer();
        v = 0.0;
        i = NONE;
        if (t < nc) {
            const uvec2 e = part[r * MAX_CHUNKS + t];
            v = uintBitsToFloat(e.x);
            i = e.y;
        }
        barrier();   // sv, si are read again below
        reduce(v, i, t);
        if (t == 0u) cnt[r] = 0u;
    }
    if (t == 0u) {
        const uint id = si[0] == NONE ? 0u : si[0];
        ids[r] = id;
        if (p.feed != 0u && r == 0u) next_tok[0] = id;
    }
}
