#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// mv_q_dp4a.comp: the integer products with dp4a (see mv_q.glsl); needs the device's
// shaderIntegerDotProduct feature.
#define BS_DP4A 1
#include "mv_q.glsl"
