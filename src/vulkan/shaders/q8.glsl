// q8.glsl: one 32-block of y (from element e) to int8 codes the way the CPU path quantizes
// activations for Q8_0 products (x86 llama.cpp rounding): d = amax/127 at fp16 precision,
// q = round half to even of x * (127/amax), plus Q8_1's s = fp16(d * sum q) (d before its fp16
// rounding). Both divisions correctly rounded by integer long division (div_rn.glsl: a
// driver's own division or an unfused fma may be off by an ulp), so the codes match the CPU's
// bit for bit on any conformant driver. Needs f16.glsl and div_rn.glsl, and the buffers y,
// q (codes, 4 per word), s8 (scales) and m8 (Q8_1 sums) of the including shader; Q8_AT(i),
// where the includer defines it, reads the values from elsewhere (norm.comp: its rotated rows).
#ifndef Q8_AT
#define Q8_AT(i) y[i]
#endif
void quant_block(uint e, uint blk) {
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(Q8_AT(e + j)));
    const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    int sum = 0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint k = 0u; k < 4u; k++) {
            precise float v = Q8_AT(e + w * 4u + k) * id;
            const int qi = int(roundEven(v));
            sum += qi;
            word |= (uint(qi) & 0xffu) << (8u * k);
        }
        q[blk * 8u + w] = word;
    }
    const float d = div_rn(amax, 127.0);
    s8[blk] = f16_round(d);
    m8[blk] = f16_round(d * float(sum));
}
