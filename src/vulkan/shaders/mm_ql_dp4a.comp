#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// mm_ql_dp4a.comp: mm_ql.glsl's lane sums with dp4a; needs the device's shaderIntegerDotProduct.
#define BS_DP4A 1
#include "mm_ql.glsl"
