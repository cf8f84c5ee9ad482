#version 450
#extension GL_GOOGLE_include_directive : require
// attn_nc_split.comp: the DSpark block's attention (attn_nc.comp's: every row over the same
// context rows, no mask) split over the context (attn_split.glsl).
#define BS_NC 1
#include "attn_split.glsl"
