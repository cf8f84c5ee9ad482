#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
// mv_qc_dp4a.comp: the integer products with the causal conv in their epilogue, with dp4a (see
// mv_q.glsl, CONV).
#define BS_DP4A 1
#define BS_CONV 1
#include "mv_q.glsl"
