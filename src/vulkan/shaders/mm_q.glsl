// mm_q.glsl: the body of mm_q.comp and mm_q_coop.comp: mv_q's products (mv_q.glsl) for many
// activation rows (prompts, batches of more than 8 rows), with the same bindings, push
// constants, grid order and results, bit for bit, for the int8 formats of 1 and 2 bits (Q1_0,
// Q2_0, Q2_0_G64): plain, GLU and GLU + QOUT. A workgroup takes a tile of TM = 32 activation
// rows by TN = 32 layout rows. Per scale group it stages the activations' int8 codes and the
// weights expanded to int8 values (Q1_0 -1/+1, Q2_0 code - 1) in shared memory; the integer sum
// of every (row, weight row, 32-element sub-block) goes to shared c_s, by cooperative matrices
// (mm_q_coop.comp: one int8 multiply-add of CM x 32 by 32 x CN per subgroup tile, the tensor
// cores of a GPU) or by plain loops (mm_q.comp: the lavapipe-testable form). With the weights
// expanded, a sum is mv_q's 2 * sum(bit * a) - sum(a) (Q1_0) or sum(code * a) - sum(a) (Q2_0)
// directly: the same integers. Each invocation then keeps the float sums of one weight row for 8
// activation rows and runs mv_q's float operations on them in mv_q's order: per group
// blk = d_a[0] * isum_0, fma(d_a[k], isum_k, blk); acc = fma_x(d_w, blk, acc); the split-K
// slices of the matrix (group ranges n_grp * s / split) restart acc and are summed in slice
// order. So a row's result is the same whichever kernel (and how many rows) computed it.
layout(local_size_x = 128) in;
#include "mvq_io.glsl"

#include "fma_rn.glsl"
#include "div_rn.glsl"
#include "q8.glsl"

const uint TM = 32u, TN = 32u, NI = 128u, PER = TM * TN / NI;
const uint KS = SUBS * 32u, ST = KS + 16u;   // a group's elements; shared row stride (16-byte multiple)
shared int8_t a_s[TM * ST];    // activation codes, row m at m * ST (A: TM x KS, row-major)
shared int8_t b_s[TN * ST];    // weight values, layout row j at j * ST (B: KS x TN, column-major)
shared int c_s[SUBS * TM * TN];   // sum of sub-block k for (m, j) at (k * TM + m) * TN + j

const uint WPG = SUBS * BITS;

// Activation rows r0.. of group g into a_s (zeros past the last row).
void stage_a(uint lid, uint g, uint r0, uint nr) {
    const uint n_sub = p.cols / 32u;
    for (uint i = lid; i < TM * SUBS * 8u; i += NI) {
        const uint m = i / (SUBS * 8u), w = i % (SUBS * 8u);
        const uint v = m < nr ? aq[((r0 + m) * n_sub + g * SUBS) * 8u + w] : 0u;
        for (uint t = 0u; t < 4u; t++) a_s[m * ST + 4u * w + t] = int8_t(bitfieldExtract(int(v), int(8u * t), 8));
    }
}

uint code_word(uint mat, uint g, uint row, uint w) {
    const uint i = (g * p.rows + row) * (WPG / 4u) + w / 4u;
    const uvec4 v = mat == 0u ? wc[i] : wc2[i];
    const uint c = w % 4u;
    return c == 0u ? v.x : c == 1u ? v.y : c == 2u ? v.z : v.w;
}

// Matrix mat's layout rows of this tile, group g, expanded into b_s (zeros past the last row).
void stage_b(uint lid, uint mat, uint g, uint t0) {
    for (uint i = lid; i < TN * SUBS; i += NI) {
        const uint j = i % TN, k = i / TN;
        const bool live = t0 + j < p.rcount;
        const uint row = p.rbase + t0 + j;
        const uint w0 = live ? code_word(mat, g, row, k * BITS) : 0u;
        const uint w1 = live && BITS == 2u ? code_word(mat, g, row, k * BITS + 1u) : 0u;
        for (uint e = 0u; e < 32u; e++) {
            int v = 0;
            if (live && BITS == 1u) v = int((w0 >> e) & 1u) * 2 - 1;
            else if (live) v = int(((e < 16u ? w0 >> (2u * e) : w1 >> (2u * e - 32u))) & 3u) - 1;
            b_s[j * ST + k * 32u + e] = int8_t(v);
        }
    }
}

#ifdef BS_COOP
// Cooperative matrix tiles of CM x CN (the device's int8 shape), spread over subgroups; a
// sub-block's 32 products in 32 / CK multiply-adds of the device's K (32, or 16: AMD's), whose
// integer sums are exact in any order. (VK_KHR_cooperative_matrix devices run this module
// rewritten to the KHR instructions: vk_spirv.c.)
layout(constant_id = 24) const uint CM = 16;
layout(constant_id = 25) const uint CN = 8;
layout(constant_id = 26) const uint CK = 32;
void sums(uint lid) {
    const uint tm = TM / CM, tn = TN / CN, tiles = SUBS * tm * tn;
    for (uint t = gl_SubgroupID; t < tiles; t += gl_NumSubgroups) {
        const uint k = t / (tm * tn), m0 = (t / tn) % tm * CM, j0 = t % tn * CN;
        icoopmatNV<8, gl_ScopeSubgroup, CM, CK> ma;
        icoopmatNV<8, gl_ScopeSubgroup, CK, CN> mb;
        icoopmatNV<32, gl_ScopeSubgroup, CM, CN> mc = icoopmatNV<32, gl_ScopeSubgroup, CM, CN>(0);
        for (uint kk = 0u; kk < 32u; kk += CK) {
            coopMatLoadNV(ma, a_s, m0 * ST + k * 32u + kk, ST, false);
            coopMatLoadNV(mb, b_s, j0 * ST + k * 32u + kk, ST, true);
            mc = coopMatMulAddNV(ma, mb, mc);
        }
        coopMatStoreNV(mc, c_s, (k * TM + m0) * TN + j0, TN, false);
    }
}
#else
void sums(uint lid) {
    for (uint i = lid; i < SUBS * TM * TN; i += NI) {
        const uint k = i / (TM * TN), m = (i / TN) % TM, j = i % TN;
        int s = 0;
        for (uint e = 0u; e < 32u; e++) s += int(a_s[m * ST + k * 32u + e]) * int(b_s[j * ST + k * 32u + e]);
        c_s[i] = s;
    }
}
#endif

// Group g's sums into this invocation's chains (weight row j, activation rows m = m_i + 4 i):
// mv_q.glsl's product() for BITS 1/2, the same operations in the same order.
void chains(uint mat, uint g, uint j, uint row, uint mi, uint r0, uint nr, inout float acc[PER]) {
    const uint n_sub = p.cols / 32u;
    const float dw = wscale(mat, g * p.rows + row);
    for (uint i = 0u; i < PER; i++) {
        const uint m = mi + 4u * i;
        if (m >= nr) break;
        float blk = 0.0;
        for (uint k = 0u; k < SUBS; k++) {
            const uint ab = (r0 + m) * n_sub + g * SUBS + k;
            const int isum = c_s[(k * TM + m) * TN + j];
            precise float v = k == 0u ? as_[ab] * float(isum) : fma(as_[ab], float(isum), blk);
            blk = v;
        }
        precise float v = fma_x(dw, blk, acc[i]);
        acc[i] = v;
    }
}

// The slice just ended into the total: ((p0 + p1) + p2) + ..., mv_q.glsl's reduce().
void end_slice(uint s, inout float tot[PER], inout float acc[PER]) {
    for (uint i = 0u; i < PER; i++) {
        precise float v = s == 0u ? acc[i] : tot[i] + acc[i];
        tot[i] = v;
        acc[i] = 0.0;
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x, j = lid % TN, mi = lid / TN;
    const uint r0 = gl_WorkGroupID.x * TM, nr = min(TM, p.n - r0), t0 = gl_WorkGroupID.y * TN;
    const uint row = p.rbase + t0 + j, n_grp = p.cols / 32u / SUBS;
    const bool live = t0 + j < p.rcount;
    float acc[2][PER], tot[2][PER];
    for (uint i = 0u; i < PER; i++) { acc[0][i] = 0.0; acc[1][i] = 0.0; tot[0][i] = 0.0; tot[1][i] = 0.0; }
    uint s = 0u, gend = n_grp / p.split;   // the current slice and its end
    for (uint g = 0u; g < n_grp; g++) {
        for (; g >= gend; gend = n_grp * (++s + 1u) / p.split) {
            end_slice(s, tot[0], acc[0]);
            if (GLU != 0u) end_slice(s, tot[1], acc[1]);
        }
        stage_a(lid, g, r0, nr);
        for (uint mat = 0u; mat <= GLU; mat++) {
            stage_b(lid, mat, g, t0);
            barrier();   // staged; the last chains' reads of c_s are done
            sums(lid);
            barrier();
            if (live) chains(mat, g, j, row, mi, r0, nr, acc[mat]);
        }
    }
    for (; s < p.split; s++) {
        end_slice(s, tot[0], acc[0]);
        if (GLU != 0u) end_slice(s, tot[1], acc[1]);
    }
    if (live) {
        for (uint i = 0u; i < PER; i++) {
            const uint m = mi + 4u * i;
            if (m >= nr) break;
            const float x = tot[0][i];
            store(row, r0 + m, GLU != 0u ? x / (1.0 + exp(-x)) * tot[1][i] : x);
        }
    }
    if (QOUT != 0u) {   // the tile's rows are written: one 32-block per activation row
        memoryBarrierBuffer();
        barrier();
        if (lid < nr && t0 < p.rcount) {
            const uint e = (r0 + lid) * p.l0 + t0;
            quant_block(e, e / 32u);
        }
    }
}
