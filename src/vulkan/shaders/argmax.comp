#version 450
// argmax.comp: greedy decoding on the device. Workgroup r finds, in row r of n logits, the
// lowest index holding the largest value (NaN never wins; a row of NaN gives 0), as a scan from
// index 0 keeping the first maximum would: comparisons only, so every device agrees bit for bit.
// ids[r] gets it, so a greedy step reads 4 bytes back instead of the row; with feed, row 0's
// also goes to the token the step submitted after this one embeds (vk_ahead.c).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { float lg[]; };
layout(std430, binding = 1) writeonly buffer I { uint ids[]; };
layout(std430, binding = 2) writeonly buffer F { uint next_tok[]; };
layout(push_constant) uniform Push { uint n, feed; } p;

const uint NONE = 0xffffffffu;
shared float sv[256];
shared uint si[256];

// (va, ia) or (vb, ib): the larger value, the lower index between equals; NONE loses.
void pick(inout float va, inout uint ia, float vb, uint ib) {
    if (ib == NONE) return;
    if (ia == NONE || vb > va || (vb == va && ib < ia)) { va = vb; ia = ib; }
}

void main() {
    const uint t = gl_LocalInvocationID.x, base = gl_WorkGroupID.x * p.n;
    float v = 0.0;
    uint i = NONE;
    for (uint k = t; k < p.n; k += 256u) {   // rising indices: a later equal value never wins
        const float x = lg[base + k];
        if (!isnan(x) && (i == NONE || x > v)) { v = x; i = k; }
    }
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
    if (t == 0u) {
        const uint id = si[0] == NONE ? 0u : si[0];
        ids[gl_WorkGroupID.x] = id;
        if (p.feed != 0u && gl_WorkGroupID.x == 0u) next_tok[0] = id;
    }
}
