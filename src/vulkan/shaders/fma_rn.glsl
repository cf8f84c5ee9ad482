// fma_rn.glsl: a * b + c rounded once, as the CPU's fmaf, on any conformant driver. GLSL's fma()
// may be a rounded multiply then a rounded add (Vulkan lets it "inherit" that precision), and
// then a product's float sums differ from the CPU's by an ulp here and there, which can move an
// activation code across a rounding step. The context probes the device once (fma_probe.comp):
// where fma() is fused, FMA_FUSED = 1 and fma_x is fma() itself; elsewhere it is computed from
// error-free transformations, which use only the exactly rounded +, - and *: the exact product
// p + e (Dekker), the exact sum s + t of p and c (Knuth), then s + (t + e). That last sum rounds
// twice only where t + e is inexact, which is rare; the result is then at most an ulp off.
layout(constant_id = 20) const uint FMA_FUSED = 1u;

// s + e = a + b exactly
void two_sum(float a, float b, out float s, out float e) {
    precise float ss = a + b;
    precise float bb = ss - a;
    precise float err = (a - (ss - bb)) + (b - bb);
    s = ss;
    e = err;
}

// p + e = a * b exactly (12-bit halves; for |a|, |b| far from overflow)
void two_prod(float a, float b, out float p, out float e) {
    precise float pp = a * b;
    precise float ca = 4097.0 * a;
    precise float ah = ca - (ca - a);
    precise float al = a - ah;
    precise float cb = 4097.0 * b;
    precise float bh = cb - (cb - b);
    precise float bl = b - bh;
    precise float err = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = err;
}

float fma_x(float a, float b, float c) {
    if (FMA_FUSED != 0u) {
        precise float r = fma(a, b, c);
        return r;
    }
    float p, e, s, t;
    two_prod(a, b, p, e);
    two_sum(p, c, s, t);
    precise float te = t + e;
    precise float r = s + te;
    return r;
}
