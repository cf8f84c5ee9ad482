#version 450
#extension GL_GOOGLE_include_directive : require
// mv_q.comp: the integer products without dp4a (see mv_q.glsl).
#include "mv_q.glsl"
