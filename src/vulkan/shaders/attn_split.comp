#version 450
#extension GL_GOOGLE_include_directive : require
// attn_split.comp: one sequence's attention split over the context (attn_split.glsl).
#include "attn_split.glsl"
