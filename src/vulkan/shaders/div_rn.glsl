// div_rn.glsl: a / b correctly rounded (the CPU's IEEE division), for the quantizers' scales.
// Vulkan allows 2.5 ulp for a division and need not fuse fma(), so the device's quotient is
// moved to the neighbour whose exact residual |a - r*b| is smallest. The residual is exact with
// only add and multiply (correctly rounded in Vulkan): Veltkamp's split and Dekker's product.
// For normal, finite a, b with a quotient far from overflow (act_round's scales; the
// fma-corrected quotient it replaces put 1 / iscale of Q8_K blocks an ulp off on lavapipe).
float resid_abs(float a, float r, float b) {
    precise float cr = 4097.0 * r, rh = cr - (cr - r), rl = r - rh;
    precise float cb = 4097.0 * b, bh = cb - (cb - b), bl = b - bh;
    precise float p = r * b;
    precise float err = ((rh * bh - p) + rh * bl + rl * bh) + rl * bl;
    precise float e = (a - p) - err;
    return abs(e);
}

float div_rn(float a, float b) {
    precise float r = a / b;
    for (int it = 0; it < 3; it++) {
        const float lo = uintBitsToFloat(floatBitsToUint(r) - 1u), hi = uintBitsToFloat(floatBitsToUint(r) + 1u);
        const float e0 = resid_abs(a, r, b), el = resid_abs(a, lo, b), eh = resid_abs(a, hi, b);
        if (el < e0 && el <= eh) r = lo;
        else if (eh < e0) r = hi;
        else break;
    }
    return r;
}
