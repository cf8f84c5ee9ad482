#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// mv_qr_dp4a.comp: the integer products whose epilogue rotates their output by the next
// products' Hadamard fold, with dp4a (see mv_q.glsl, ROT).
#define BS_DP4A 1
#define BS_ROT 1
#include "mv_q.glsl"
