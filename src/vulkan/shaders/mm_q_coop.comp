#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : require
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
// mm_q_coop.comp: mm_q.glsl's integer sums by int8 cooperative matrices (VK_NV_cooperative_matrix;
// Debian's glslang has no GL_KHR_cooperative_matrix). Needs the device's cooperativeMatrix,
// shaderInt8 and vulkanMemoryModel features.
#define BS_COOP 1
#include "mm_q.glsl"
