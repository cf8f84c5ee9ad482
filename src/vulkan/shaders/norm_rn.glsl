// norm_rn.glsl: the scale of an RMS or L2 norm as the CPU path computes it (ops.c: float squares
// summed in double, mean = float(sum / d), 1 / sqrtf(mean + eps), all correctly rounded), from
// operations that are exact on any conformant Vulkan driver: +, -, * (correctly rounded) and
// integer division (div_rn.glsl). The sum is a float-float pair (hi + lo, error-free
// transformations), which carries more bits than the double's sum needs, so the float it rounds
// to is the CPU's except within ~1e-14 of a rounding midpoint. Needs div_rn.glsl and fma_rn.glsl, and (for ff_reduce64) the shared arrays part and part_lo.

// (h1 + l1) + (h2 + l2) as a normalized pair
void ff_add(inout float h1, inout float l1, float h2, float l2) {
    float s, e;
    two_sum(h1, h2, s, e);
    precise float l = (l1 + l2) + e;
    two_sum(s, l, h1, l1);
}

// The pairs (hi, lo) of invocations 0..63 summed in a fixed tree into part[0], part_lo[0] (the
// including shader declares shared float part[64], part_lo[64]); every invocation of the
// workgroup (64 or more) must call it.
void ff_reduce64(uint lt, float hi, float lo) {
    if (lt < 64u) {
        part[lt] = hi;
        part_lo[lt] = lo;
    }
    barrier();
    for (uint h = 32u; h > 0u; h >>= 1) {
        if (lt < h) {
            float a = part[lt], b = part_lo[lt];
            ff_add(a, b, part[lt + h], part_lo[lt + h]);
            part[lt] = a;
            part_lo[lt] = b;
        }
        barrier();
    }
}

// sqrt correctly rounded: the device's sqrt (a few ulp), then the neighbour whose square is
// nearest x (a float's square root is never a midpoint, so there are no ties)
float sqrt_rn(float x) {
    if (!(x > 0.0) || isinf(x) || x < 1e-30) return sqrt(x);
    const float y = sqrt(x);
    float best = y, bd = -1.0;
    for (int k = -3; k <= 3; k++) {
        const float c = uintBitsToFloat(uint(int(floatBitsToUint(y)) + k));
        float p, e;
        two_prod(c, c, p, e);
        precise float d = abs((x - p) - e);
        if (bd < 0.0 || d < bd) { bd = d; best = c; }
    }
    return best;
}

// float(hi + lo) / d correctly rounded (d > 0 an integer-valued float): the quotient of hi, then
// the remainder (exact) and lo moving it by what they are worth
float ff_div_rn(float hi, float lo, float d) {
    const float q = div_rn(hi, d);
    float p, e;
    two_prod(q, d, p, e);
    precise float r = ((hi - p) - e) + lo;
    precise float m = q + r / d;
    return m;
}

// The scale of a norm over the pair sum of squares: mode 0 RMS 1 / sqrt(mean + eps), mode 1
// L2 1 / max(sqrt(sum), eps).
float norm_scale(uint mode, float hi, float lo, float d, float eps) {
    if (mode == 0u) return div_rn(1.0, sqrt_rn(ff_div_rn(hi, lo, d) + eps));
    return div_rn(1.0, max(sqrt_rn(hi), eps));
}
