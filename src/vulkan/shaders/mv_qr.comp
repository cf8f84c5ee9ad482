#version 450
#extension GL_GOOGLE_include_directive : require
// mv_qr.comp: the integer products whose epilogue rotates their output by the next products'
// Hadamard fold, without dp4a (see mv_q.glsl, ROT).
#define BS_ROT 1
#include "mv_q.glsl"
