// div_rn.glsl: a / b correctly rounded to nearest even (the CPU's IEEE division), for the
// quantizers' scales. Vulkan allows 2.5 ulp for a division and need not fuse fma(), so no float
// operation gives the exact quotient on every conformant driver; integer arithmetic is exact
// everywhere, so the quotient is computed by restoring long division of the 24-bit significands
// (24 quotient bits, the remainder deciding the rounding). For normal a, b whose quotient is
// normal: the scales' inputs (127, amax, an iscale) always are unless amax is below ~1e-36,
// where the device's own division is used (a device may flush such values anyway).
float div_rn(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const int ea = int((ua >> 23) & 0xffu), eb = int((ub >> 23) & 0xffu);
    if (ea == 0 || eb == 0 || ea == 255 || eb == 255) return a / b;
    uint ma = (ua & 0x7fffffu) | 0x800000u;
    const uint mb = (ub & 0x7fffffu) | 0x800000u;
    int e = ea - eb + 127;
    if (ma < mb) { ma <<= 1; e -= 1; }          // now mb <= ma < 2 mb: the first bit is 1
    uint q = 0u, r = ma;                          // r < 2^25 throughout
    for (int i = 0; i < 24; i++) {
        q <<= 1;
        if (r >= mb) { r -= mb; q |= 1u; }
        r <<= 1;                                  // r = 2 * remainder after the last step
    }
    if (r > mb || (r == mb && (q & 1u) != 0u)) q += 1u;
    if (q == 0x1000000u) { q >>= 1; e += 1; }
    if (e <= 0 || e >= 255) return a / b;
    return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(e) << 23) | (q & 0x7fffffu));
}
