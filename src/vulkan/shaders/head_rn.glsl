// head_rn.glsl: one attention head's RMSNorm (with its weight) and NeoX RoPE on its first n_rot
// dimensions, as qk.comp and attn.comp's fused path do it: norm.comp's sum tree and scale
// (norm_rn.glsl), y = (x * scale) * w, then rope.comp's rotation (x[i], x[i + n_rot/2] by
// cs[2i], cs[2i+1], the products rounded before the sum). The includer declares shared float
// hv[256], part[64], part_lo[64], includes norm_rn.glsl first, has push constants D, n_rot, eps
// and a rope table cs[] (rows of n_rot), and defines HEAD_IN(i) and HEAD_W(i): the head's raw
// element i and the norm's weight i (they may use the arguments is_q and base). All 64
// invocations call it; the head ends in hv.
void norm_rope_head(bool is_q, uint base, uint csrow, uint tid) {
    float hi = 0.0, lo = 0.0;
    for (uint i = tid; i < p.D; i += 64u) {
        const float v = HEAD_IN(i);
        precise float sq = v * v;
        ff_add(hi, lo, sq, 0.0);
    }
    ff_reduce64(tid, hi, lo);
    const float scale = norm_scale(0u, part[0], part_lo[0], float(p.D), p.eps);
    for (uint i = tid; i < p.D; i += 64u) {
        precise float v = HEAD_IN(i) * scale;
        precise float o = v * HEAD_W(i);
        hv[i] = o;
    }
    barrier();
    const uint half_ = p.n_rot / 2u;
    float out_[4];   // this invocation's elements tid, tid + 64, ... (D <= 256)
    for (uint i = tid, k = 0u; i < p.D; i += 64u, k++) {
        float o = hv[i];
        if (i < p.n_rot) {
            const uint i0 = i < half_ ? i : i - half_;
            const float c = cs[csrow * p.n_rot + 2u * i0], s = cs[csrow * p.n_rot + 2u * i0 + 1u];
            const float x0 = hv[i0], x1 = hv[i0 + half_];
            precise float a = x0 * c - x1 * s;
            precise float e = x0 * s + x1 * c;
            o = i < half_ ? a : e;
        }
        out_[k] = o;
    }
    barrier();   // every rotation has read the normed head
    for (uint i = tid, k = 0u; i < p.D; i += 64u, k++) hv[i] = out_[k];
    barrier();
}
