#version 450
#extension GL_GOOGLE_include_directive : require
// attn_split_b.comp: up to 4 sequences' attention split over the context in one dispatch
// (attn_split.glsl; 31 bindings, within the 32 storage buffers lavapipe allows a kernel).
#define BS_BATCH 1
#include "attn_split.glsl"
