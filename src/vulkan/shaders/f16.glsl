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
