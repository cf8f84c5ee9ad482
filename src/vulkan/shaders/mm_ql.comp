#version 450
#extension GL_GOOGLE_include_directive : require
// mm_ql.comp: mm_ql.glsl's lane sums without dp4a.
#include "mm_ql.glsl"
