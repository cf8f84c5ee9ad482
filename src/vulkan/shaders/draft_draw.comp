#version 450
// draft_draw.comp: a sampled token predicted on the device from its list (topk.comp's: the
// count, 64 ids, 64 logits' bits, best first), so that a chain of sampled drafts runs in one
// submission with no host between its slots, and a sampled decode step feeds the step after it
// (vk_ahead.c). It redoes the host's steps in float: apply_top's cut to top_k, top-p (weights
// exp(l - max)), min-p, then the temperature's softmax, and the scan of those probabilities
// with the uniform: in id order as bs_sampler_draw over a dense row has it (by_id: a draft), or
// in the list's as bs_sampler_pick (a decode step). The host draws again from the same list with
// the same uniform and keeps what follows only where the two agree: this is a prediction, never
// trusted (a miss at a rounding boundary costs work, not exactness). One invocation: a list is
// at most 64 long.
layout(local_size_x = 1) in;
layout(std430, binding = 0) readonly buffer L { uint lst[]; };    // [129]: count, ids, logits' bits
layout(std430, binding = 1) readonly buffer U { float u[]; };      // the slots' uniforms
layout(std430, binding = 2) writeonly buffer T { int prev; };      // the draft: the next slot's Markov token
layout(std430, binding = 3) writeonly buffer D { int drafts[]; };
layout(push_constant) uniform Push { uint slot, top_k, min_keep; float top_p, min_p, temp; uint by_id; } p;

const float FLT_MAX = 3.40282347e38;

void main() {
    float lg[64];
    uint id[64];
    uint n = min(min(lst[0], p.top_k), 64u);
    for (uint i = 0u; i < n; i++) {
        id[i] = lst[1u + i];
        lg[i] = min(uintBitsToFloat(lst[65u + i]), FLT_MAX);
    }
    if (n == 0u) {   // nothing to draw: the host finds the same (no draft here: -1); the next
        prev = 0;       // slot's Markov row still reads a row of the table
        drafts[p.slot] = -1;
        return;
    }
    float mx = lg[0];
    for (uint i = 1u; i < n; i++) mx = max(mx, lg[i]);
    if (p.top_p < 1.0) {
        float z = 0.0, cum = 0.0;
        for (uint i = 0u; i < n; i++) z += exp(lg[i] - mx);
        for (uint i = 0u; i < n; i++) {
            cum += exp(lg[i] - mx) / z;
            if (cum >= p.top_p && i + 1u >= p.min_keep) { n = i + 1u; break; }
        }
    }
    if (p.min_p > 0.0) {   // the list is best first: those that pass are a prefix
        const float lim = mx + log(p.min_p);
        uint pass = 0u;
        for (uint i = 0u; i < n; i++) pass += lg[i] >= lim ? 1u : 0u;
        n = pass < p.min_keep ? min(p.min_keep, n) : pass;
    }
    float pr[64], z = 0.0;
    for (uint i = 0u; i < n; i++) {
        pr[i] = exp((lg[i] - mx) / p.temp);
        z += pr[i];
    }
    float total = 0.0;
    for (uint i = 0u; i < n; i++) {
        pr[i] /= z;
        total += pr[i] > 0.0 ? pr[i] : 0.0;
    }
    // the scan: in id order (each step takes the next larger id) or in the list's
    const float x = u[p.slot] * total;
    float cum = 0.0;
    uint last = 0xffffffffu, at = 0u;
    for (uint s = 0u; s < n; s++) {
        uint best = 0xffffffffu, bi = s;
        if (p.by_id != 0u)
            for (uint i = 0u; i < n; i++)
                if ((s == 0u || id[i] > at) && id[i] < best) { best = id[i]; bi = i; }
        at = id[bi];
        if (!(pr[bi] > 0.0)) continue;
        last = id[bi];
        cum += pr[bi];
        if (x < cum) break;
    }
    prev = int(last);
    drafts[p.slot] = int(last);
}
