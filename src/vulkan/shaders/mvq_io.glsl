// mvq_io.glsl: what mv_q.glsl and mm_q.glsl share: the specialization constants, bindings and
// push constants of the integer products (mv_q.glsl's header says what each is), a matrix's
// scales (f16.glsl, included here), and where an output goes.
layout(constant_id = 0) const uint BITS = 1;
layout(constant_id = 1) const uint SUBS = 4;
layout(constant_id = 2) const uint GLU = 0;
layout(constant_id = 3) const uint QOUT = 0;
layout(constant_id = 4) const uint NORM_OUT = 0;
layout(std430, binding = 0) readonly buffer WC { uvec4 wc[]; };
layout(std430, binding = 1) readonly buffer WS { uint ws[]; };
layout(std430, binding = 2) readonly buffer AQ { uint aq[]; };
layout(std430, binding = 3) readonly buffer AS { float as_[]; };
layout(std430, binding = 4) readonly buffer AM { float am[]; };
layout(std430, binding = 5) coherent buffer Y { float y[]; };   // coherent: NORM_OUT reads others' rows
layout(std430, binding = 6) readonly buffer WC2 { uvec4 wc2[]; };
layout(std430, binding = 7) readonly buffer WS2 { uint ws2[]; };
layout(std430, binding = 8) buffer Y1 { float y1[]; };
layout(std430, binding = 9) buffer Y2 { float y2[]; };
layout(std430, binding = 10) buffer Y3 { float y3[]; };
layout(std430, binding = 11) writeonly buffer Q { uint q[]; };
layout(std430, binding = 12) writeonly buffer S8 { float s8[]; };
layout(std430, binding = 13) writeonly buffer M8 { float m8[]; };
layout(std430, binding = 14) readonly buffer NW { float nw[]; };
layout(std430, binding = 15) coherent buffer XN { float xn[]; };
layout(std430, binding = 16) coherent buffer CNT { uint cnt[]; };
#ifdef BS_CONV
layout(std430, binding = 17) buffer WIN { float win[]; };
layout(std430, binding = 18) readonly buffer CW { float cw[]; };
layout(std430, binding = 19) writeonly buffer CO { float co[]; };
layout(std430, binding = 20) readonly buffer WIN_IN { float win_in[]; };
layout(push_constant) uniform Push { uint rows, cols, n, split, rbase, rcount, row0, e1, e2, e3, l0, l1, l2, l3; float eps; uint K, from_in; } p;
#elif defined(BS_ROT)
layout(std430, binding = 17) coherent buffer XR { float xr[]; };
layout(std430, binding = 18) readonly buffer SG { float sg[]; };
layout(push_constant) uniform Push { uint rows, cols, n, split, rbase, rcount, row0, e1, e2, e3, l0, l1, l2, l3; float eps; uint rblock, rsigns; float rscale; } p;
#else
layout(push_constant) uniform Push { uint rows, cols, n, split, rbase, rcount, row0, e1, e2, e3, l0, l1, l2, l3; float eps; } p;
#endif

#include "f16.glsl"

// matrix m's scale i (m = 1: GLU's up), the file's fp16 values two to a word
float wscale(uint m, uint i) { return f16_half(m == 0u ? ws[i >> 1] : ws2[i >> 1], i); }

// Row r's output of layout row `row` into its segment.
void store(uint row, uint r, float v) {
    if (row >= p.e3) y3[r * p.l3 + row - p.e3] = v;
    else if (row >= p.e2) y2[r * p.l2 + row - p.e2] = v;
    else if (row >= p.e1) y1[r * p.l1 + row - p.e1] = v;
    else {
        const uint i = p.row0 + r * p.l0 + row - p.rbase;
        y[i] = NORM_OUT != 0u ? y[i] + v : v;
    }
}
