#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
// mm_q.comp: mm_q.glsl's integer sums by plain loops (tested on any device; see mm_q.glsl).
#include "mm_q.glsl"
