// mm_ql.glsl: the body of mm_ql.comp and mm_ql_dp4a.comp: mv_q's products (mv_q.glsl) for many
// activation rows in the formats whose float order goes by 4-element lanes (BITS 8: Q8_0; BITS
// 4: Q4_1; one 32-element sub-block per scale), with mv_q's bindings, push constants, grid order
// and bits. A workgroup takes TM = 32 activation rows by TN = 32 layout rows, so each weight is
// read once per 32 activation rows where mv_q's row groups read it once per 8 (a drafter's
// block of 16 rows, its prompt's context rows). Per 32-block it stages the rows' activation code
// words and the weights' packed lanes (mv_q's packed_weights) in shared memory; each invocation
// holds, for one weight row and 8 activation rows, mv_q's 8 lane accumulators
// (lane = fma(d_w * d_a, dot4, lane)) and Q4_1's minimum term (fma(m_w, s_a, .)), and ends each
// split-K slice with mv_q's ((0+4)+(2+6))+((1+5)+(3+7)) (+ the minimums); slices are summed in
// slice order. Plain products only (no GLU, QOUT or NORM_OUT: those run on at most 8 rows).
layout(local_size_x = 128) in;
#include "mvq_io.glsl"

#include "fma_rn.glsl"
#include "dot4.glsl"

const uint TM = 32u, TN = 32u, NI = 128u, PER = TM * TN / NI;
const uint WPG = BITS;        // code words per row and 32-block (SUBS 1)
shared uint a_w[TM * 9u];     // activation row m's 8 code words at m * 9 (an odd stride: no bank conflicts)
shared uint b_w[TN * 9u];     // layout row j's 8 packed lanes at j * 9

// Block g of the tile's activation rows and weight rows into shared memory (zeros past the ends).
void stage(uint lid, uint g, uint r0, uint nr, uint t0) {
    const uint n_sub = p.cols / 32u;
    for (uint i = lid; i < TM * 8u; i += NI) {
        const uint m = i / 8u, w = i % 8u;
        a_w[m * 9u + w] = m < nr ? aq[((r0 + m) * n_sub + g) * 8u + w] : 0u;
    }
    for (uint i = lid; i < TN * (WPG / 4u); i += NI) {   // one 16-byte load: 4 lanes (Q8_0) or all 8 (Q4_1)
        const uint j = i / (WPG / 4u), h = i % (WPG / 4u);
        const uvec4 q = t0 + j < p.rcount ? wc[(g * p.rows + p.rbase + t0 + j) * (WPG / 4u) + h] : uvec4(0u);
        if (BITS == 8u) {
            for (uint l = 0u; l < 4u; l++) b_w[j * 9u + 4u * h + l] = q[l];
        } else {   // Q4_1: lanes 0-3 the low nibbles, 4-7 the high ones
            for (uint l = 0u; l < 4u; l++) {
                b_w[j * 9u + l] = q[l] & 0x0f0f0f0fu;
                b_w[j * 9u + 4u + l] = (q[l] >> 4) & 0x0f0f0f0fu;
            }
        }
    }
}

// Block g of weight row `row` (this invocation's column j) into the chains of its activation rows.
void chains(uint g, uint j, uint row, uint mi, uint r0, uint nr, inout float acc[PER][8], inout float summ[PER]) {
    const uint n_sub = p.cols / 32u;
    const float dw = wscale(0u, g * p.rows + row);
    const float mw = BITS == 4u ? wscale(0u, (n_sub + g) * p.rows + row) : 0.0;
    uint bw[8];
    for (uint l = 0u; l < 8u; l++) bw[l] = b_w[j * 9u + l];
    for (uint i = 0u; i < PER; i++) {
        const uint m = mi + 4u * i;
        if (m >= nr) break;
        const uint ab = (r0 + m) * n_sub + g;
        precise float d = dw * as_[ab];
        for (uint l = 0u; l < 8u; l++) {
            precise float v = fma_x(d, float(dot4(bw[l], a_w[m * 9u + l])), acc[i][l]);
            acc[i][l] = v;
        }
        if (BITS == 4u) {
            precise float v = fma_x(mw, am[ab], summ[i]);
            summ[i] = v;
        }
    }
}

// The slice just ended into the total, mv_q's tree and reduce() order; the chains restart.
void end_slice(uint s, inout float tot[PER], inout float acc[PER][8], inout float summ[PER]) {
    for (uint i = 0u; i < PER; i++) {
        precise float h = ((acc[i][0] + acc[i][4]) + (acc[i][2] + acc[i][6])) + ((acc[i][1] + acc[i][5]) + (acc[i][3] + acc[i][7]));
        if (BITS == 4u) h = h + summ[i];
        precise float v = s == 0u ? h : tot[i] + h;
        tot[i] = v;
        for (uint l = 0u; l < 8u; l++) acc[i][l] = 0.0;
        summ[i] = 0.0;
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x, j = lid % TN, mi = lid / TN;
    const uint r0 = gl_WorkGroupID.x * TM, nr = min(TM, p.n - r0), t0 = gl_WorkGroupID.y * TN;
    const uint row = p.rbase + t0 + j, n_grp = p.cols / 32u;
    const bool live = t0 + j < p.rcount;
    float acc[PER][8], summ[PER], tot[PER];
    for (uint i = 0u; i < PER; i++) {
        for (uint l = 0u; l < 8u; l++) acc[i][l] = 0.0;
        summ[i] = 0.0;
        tot[i] = 0.0;
    }
    uint s = 0u, gend = n_grp / p.split;   // the current slice and its end
    for (uint g = 0u; g < n_grp; g++) {
        for (; g >= gend; gend = n_grp * (++s + 1u) / p.split) end_slice(s, tot, acc, summ);
        barrier();   // the last block's reads of the shared words are done
        stage(lid, g, r0, nr, t0);
        barrier();
        if (live) chains(g, j, row, mi, r0, nr, acc, summ);
    }
    for (; s < p.split; s++) end_slice(s, tot, acc, summ);
    if (live) {
        for (uint i = 0u; i < PER; i++) {
            const uint m = mi + 4u * i;
            if (m >= nr) break;
            store(row, r0 + m, tot[i]);
        }
    }
}
