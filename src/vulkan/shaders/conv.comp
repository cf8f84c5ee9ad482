#version 450
#extension GL_GOOGLE_include_directive : require
// conv.comp: one sequence's causal conv (conv.glsl).
#include "conv.glsl"
