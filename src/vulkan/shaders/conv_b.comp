#version 450
#extension GL_GOOGLE_include_directive : require
// conv_b.comp: a batch's sequences' causal convs in one dispatch (conv.glsl).
#define BS_BATCH 1
#include "conv.glsl"
