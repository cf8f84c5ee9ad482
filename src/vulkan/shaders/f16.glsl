// f16.glsl: float to fp16 bits rounded to nearest even (GLSL leaves packHalf2x16's rounding
// to the implementation; the CPU path rounds to nearest even), and that value back as a float.
uint f16_bits(float f) {
    const uint u = floatBitsToUint(f), sign = (u >> 16) & 0x8000u;
    const uint a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);
    if (a >= 0x477ff000u) return sign | 0x7c00u;            // rounds past 65504: inf
    if (a < 0x38800000u) {                                  // fp16 subnormal or zero
        precise float m = uintBitsToFloat(a) * 16777216.0;  // units of 2^-24, exact
        return sign | uint(roundEven(m));
    }
    const uint r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | ((r - 0x38000000u) >> 13);
}

float f16_round(float f) { return unpackHalf2x16(f16_bits(f)).x; }

// bf16 rounded to nearest even, as a float (NaN kept)
float bf16_round(float f) {
    const uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    return uintBitsToFloat(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

// fp16 bits to a float by integer arithmetic: exact, subnormals included, on any driver (a
// conversion instruction may flush fp16 subnormals to zero where the device does not preserve them).
float f16_value(uint h) {
    const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) {
        precise float v = float(m) * 5.9604644775390625e-8;   // m * 2^-24: exact
        return sign != 0u ? -v : v;
    }
    if (e == 31u) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// half i of a plane of fp16 values stored two to a 32-bit word (w: the word holding it)
float f16_half(uint w, uint i) { return f16_value((w >> (16u * (i & 1u))) & 0xffffu); }
