#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// delta.comp: one sequence's gated delta rule (delta.glsl).
#include "delta.glsl"
