#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// delta_b.comp: a batch's sequences' gated delta rules in one dispatch (delta.glsl).
#define BS_BATCH 1
#include "delta.glsl"
