#version 450
#extension GL_GOOGLE_include_directive : require
// mv_qc.comp: the integer products with the causal conv in their epilogue, without dp4a (see
// mv_q.glsl, CONV).
#define BS_CONV 1
#include "mv_q.glsl"
