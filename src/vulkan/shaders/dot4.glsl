// dot4.glsl: the integer dot product of 4 x int8 packed in 32 bits, as the integer products take
// it: OpSDotKHR (dp4a) where the module is built with BS_DP4A (the device's
// shaderIntegerDotProduct), else the same sum in plain code: the same integers either way.
#ifdef BS_DP4A
// SPV_KHR_integer_dot_product; Debian's glslc has no GL_EXT_integer_dot_product, so through
// GL_EXT_spirv_intrinsics
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint x, uint y, spirv_literal uint fmt);
int dot4(uint w, uint a) { return sdot4(w, a, 0); }
#else
int dot4(uint w, uint a) {
    int s = 0;
    for (uint t = 0u; t < 4u; t++) s += bitfieldExtract(int(w), int(8u * t), 8) * bitfieldExtract(int(a), int(8u * t), 8);
    return s;
}
#endif
