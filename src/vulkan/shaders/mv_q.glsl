// mv_q.glsl: the body of mv_q.comp and mv_q_dp4a.comp.
// mv_q: y[r][row] = sum_i W[row][i] x[r][i] for the formats whose products take int8
// activations, one invocation per weight row, up to 8 activation rows per workgroup
// (gl_WorkGroupID.x picks which 8).
// Weights repacked at upload: a scale group (SUBS sub-blocks of 32 elements) of a row is
// WPG = SUBS * BITS code words, word k * BITS + b for sub-block k, stored [group][rows][WPG]:
// WPG is a multiple of 4 in every format (Q1_0 4, Q2_0 8, Q2_0_G64 4, Q4_1 4, Q8_0 8), so an
// invocation reads its group in 16-byte loads and neighbouring invocations neighbouring 16
// bytes; one scale per group ([group][rows]; Q4_1's minimums follow as a second plane), the
// file's fp16 values two to a word. Codes: BITS 1: bit set = +1, clear = -1 (Q1_0); BITS 2: code - 1
// (Q2_0); BITS 4: nibble, low halves first (Q4_1); BITS 8: int8 (Q8_0). Integer sums by 4-byte
// dot products: dp4a (mv_q_dp4a.comp, where the device has integer dot products) or the same
// sums in plain code (mv_q.comp): the same integers, so the same bits.
// A workgroup is 256 / SPLIT rows x SPLIT slices of the groups (split-K: more invocations for
// the GPU than rows); slice partials are summed in slice order, ((p0 + p1) + p2) + ...; SPLIT
// is a property of the matrix (its row count), never of the number of activation rows.
// Workgroup (x, y) takes activation rows 8x..8x+7 and weight rows y*256/SPLIT..: with x the
// fastest-launched index, a prompt's row groups read one weight tile back to back (from the
// cache after the first), instead of streaming every weight once per 8 rows.
// GLU (spec constant 2): gate and up in one dispatch (bindings 0-1 gate, 6-7 up; the same shape,
// layout and split), y = silu(gate x) * up x, in the float order of ew.comp's SILU_MUL: the
// bits of the two products and the element-wise step run apart. Without GLU, bindings 6-7 are
// bound but never read.
// QOUT (spec constant 3, with GLU): the output rows also quantized to int8 32-blocks for the
// next product (q8.glsl, the bits of quant_q8.comp) into bindings 11-13; a workgroup holds whole
// blocks (256 / split >= 32 rows, the layout's rows a multiple of 32); with ROT, below, each
// rotation block's last workgroup makes them instead.
// NORM_OUT (spec constant 4): y is the residual stream: each product is added to its element
// (y + W x: norm.comp's residual add, the same bits), and the last workgroup of the 8 activation
// rows to finish (counter cnt, binding 16, left at 0) RMS-norms those rows with the weight nw
// (binding 14) into xn (binding 15) and quantizes them into bindings 11-13: norm.comp's flags
// ADD | QUANT over the whole row (rows of l0, no parts), in one dispatch instead of two.
// Rows: the dispatch computes layout rows [rbase, rbase + rcount) of a layout of `rows` rows
// (matrices that read one input are stored as one layout, vk_kernels.c's bs_vk_matrix_cat, and
// run as one dispatch). Output segment k holds layout rows [e_k, e_k+1) (e_0 = rbase; unused
// ends are ~0) and goes to Y_k (bindings 5, 8, 9, 10), row r of it at r * l_k + (row - e_k),
// plus row0 in segment 0 (a matrix split into parts writes its part's columns there).
// Float order within a slice, fixed per output whatever the number of rows (fma: fma_x, the
// CPU's single rounding on any driver):
//  BITS 1/2, per group: blk = d_a[0]*isum_0, then fma(d_a[k], isum_k, blk); acc = fma(d_w, blk, acc).
//  BITS 4/8 (llama.cpp's x86 order): 8 lanes of 4 elements, lane += fma(d_w*d_a, lane dot),
//  summed ((0+4)+(2+6))+((1+5)+(3+7)); Q4_1 adds sum_b fma(m_w, s_a) (s_a = fp16(d_a*sum q)).
// CONV (BS_CONV: mv_qc.comp, mv_qc_dp4a.comp): a Gated DeltaNet layer's causal depthwise conv
// + SiLU in the epilogue of its input products, for up to 8 rows (one row group): segment 0's
// row c is conv channel c (l0 = conv_dim channels). The invocation that stores channel c holds
// its n new values, so it convolves them with the window (binding 17, [K-1][l0], oldest first)
// and the weights (18, [l0][K]) into binding 19 ([n][l0]), then moves that channel's window on
// (no other invocation touches it): conv.comp's float operations in its order, so its bits,
// without its dispatch and barrier. K is a push constant after eps, then from_in: the window
// read from binding 20 and the moved one written to 17 (conv.comp's from_in), else 17 in place.
// ROT (BS_ROT: mv_qr.comp, mv_qr_dp4a.comp): a folded model's next products take their input
// rotated by its Hadamard fold (rblock, rsigns, rscale pushed after eps; the signs binding 18):
// the rotated rows go to xr (binding 17) and the int8 blocks are made from them. With NORM_OUT,
// the last workgroup rotates the normed rows it made (norm.comp's NORM_ROT); with QOUT (GLU),
// each rotation block's last workgroup to store its rows (a counter per row group and block,
// binding 16, left at 0) rotates and quantizes that block for every activation row. Both are
// rotate.comp's forward operations in its order (fwht.glsl's ROTATE_ROW), so its bits, without
// its dispatch and barrier. The host keeps rblock a power of two in [32, 2048] that tiles the
// rows and meets each workgroup's rows whole or in halves, quarters...
layout(local_size_x = 256) in;
#include "mvq_io.glsl"

// (also ROT's rotation buffer, once the reductions are done: 2048 floats)
shared float spart[8u * 256u];
// BITS 1/2 with ASUM_STAGE (spec constant 21, the device's choice): sum_i q_i of each activation
// 32-block the workgroup's products read, worked out once per workgroup (not once per weight row:
// half the integer dot products), int16 two to a word, entry r * n_sub + s; past ASUM_CAP entries
// (8 rows of > 24576 columns), or without ASUM_STAGE, each row sums its own. Exact integers: the
// same bits either way.
layout(constant_id = 21) const uint ASUM_STAGE = 1;
const uint ASUM_CAP = 6144u;
shared uint asum_s[ASUM_CAP / 2u];

#include "fma_rn.glsl"
#include "div_rn.glsl"
#include "q8.glsl"
#define quant_block quant_block_xn
#define y xn
#include "q8.glsl"
#undef y
#undef quant_block
#ifdef BS_ROT
#define quant_block quant_block_xr
#define y xr
#include "q8.glsl"
#undef y
#undef quant_block
#include "fwht.glsl"
shared bool blk_last[8];
#endif

shared float part[64], part_lo[64];
shared bool last_wg;
#include "norm_rn.glsl"

// matrix m's code words and scales (m = 1: GLU's up)
const uint WPG = SUBS * BITS;
// The WPG code words of matrix m's group g of layout row `row`, 16 bytes at a time
void group_words(uint m, uint g, uint row, out uint gw[8]) {
    for (uint j = 0u; j < WPG / 4u; j++) {
        const uint i = (g * p.rows + row) * (WPG / 4u) + j;
        const uvec4 v = m == 0u ? wc[i] : wc2[i];
        gw[4u * j] = v.x;
        gw[4u * j + 1u] = v.y;
        gw[4u * j + 2u] = v.z;
        gw[4u * j + 3u] = v.w;
    }
}

// The weights of lane l (elements 4l..4l+3) as four bytes: Q1_0 bits as 0/1 (value 2b - 1),
// Q2_0 codes 0..3 (value c - 1), Q4_1 nibbles, Q8_0 bytes as they are.
void packed_weights(uint wv[8], out uint pw[8]) {
    for (uint l = 0u; l < 8u; l++) {
        if (BITS == 1u) {
            pw[l] = (((wv[0] >> (4u * l)) & 15u) * 0x00204081u) & 0x01010101u;
        } else if (BITS == 2u) {
            const uint v = (wv[l >> 2] >> (8u * (l & 3u))) & 0xffu;
            pw[l] = (v & 3u) | ((v & 0xcu) << 6) | ((v & 0x30u) << 12) | ((v & 0xc0u) << 18);
        } else if (BITS == 4u) {
            pw[l] = l < 4u ? wv[l] & 0x0f0f0f0fu : (wv[l - 4u] >> 4) & 0x0f0f0f0fu;
        } else {
            pw[l] = wv[l];
        }
    }
}

#include "dot4.glsl"

// Block sum of activation block ab (sum of its 32 int8 codes: exact in any order).
int block_sum(uint ab) {
    int asum = 0;
    for (uint w = 0u; w < 8u; w++) asum += dot4(0x01010101u, aq[ab * 8u + w]);
    return asum;
}

bool asums_staged(uint nr) { return ASUM_STAGE != 0u && BITS <= 2u && nr * (p.cols / 32u) <= ASUM_CAP; }

// Every invocation reaches the barrier, live or not.
void stage_asums(uint lid, uint r0, uint nr) {
    if (!asums_staged(nr)) return;
    const uint n_sub = p.cols / 32u, words = (nr * n_sub + 1u) / 2u;
    for (uint w = lid; w < words; w += 256u) {
        uint v = 0u;
        for (uint h = 0u; h < 2u; h++) {
            const uint j = 2u * w + h;
            if (j < nr * n_sub) v |= (uint(block_sum((r0 + j / n_sub) * n_sub + j % n_sub)) & 0xffffu) << (16u * h);
        }
        asum_s[w] = v;
    }
    barrier();
}

int staged_asum(uint j) { return bitfieldExtract(int(asum_s[j >> 1]), int(16u * (j & 1u)), 16); }

// This invocation's partial sums of matrix m for activation rows r0..r0+nr-1 (its slice).
void product(uint m, uint row, uint slice, uint r0, uint nr, out float res[8]) {
    const uint n_sub = p.cols / 32u, n_grp = n_sub / SUBS;
    for (uint r = 0u; r < 8u; r++) res[r] = 0.0;
    if (BITS >= 4u) {
        const uint s0 = n_sub * slice / p.split, s1 = n_sub * (slice + 1u) / p.split;
        float acc[8][8];
        float summ[8];
        for (uint r = 0u; r < 8u; r++) {
            summ[r] = 0.0;
            for (uint l = 0u; l < 8u; l++) acc[r][l] = 0.0;
        }
        for (uint s = s0; s < s1; s++) {
            uint wv[8];
            group_words(m, s, row, wv);   // SUBS 1: a group is a sub-block
            uint pw[8];
            packed_weights(wv, pw);
            const float dw = wscale(m, s * p.rows + row);
            for (uint r = 0u; r < nr; r++) {
                const uint ab = (r0 + r) * n_sub + s;
                precise float d = dw * as_[ab];
                for (uint l = 0u; l < 8u; l++) {
                    const int lane = dot4(pw[l], aq[ab * 8u + l]);
                    precise float v = fma_x(d, float(lane), acc[r][l]);
                    acc[r][l] = v;
                }
                if (BITS == 4u) {
                    precise float v = fma_x(wscale(m, (n_sub + s) * p.rows + row), am[ab], summ[r]);
                    summ[r] = v;
                }
            }
        }
        for (uint r = 0u; r < nr; r++) {
            precise float h = ((acc[r][0] + acc[r][4]) + (acc[r][2] + acc[r][6])) + ((acc[r][1] + acc[r][5]) + (acc[r][3] + acc[r][7]));
            if (BITS == 4u) h = h + summ[r];
            res[r] = h;
        }
    } else {
        const uint g0 = n_grp * slice / p.split, g1 = n_grp * (slice + 1u) / p.split;
        const bool staged = asums_staged(nr);
        for (uint g = g0; g < g1; g++) {
            float blk[8];
            uint gw[8];
            group_words(m, g, row, gw);
            for (uint k = 0u; k < SUBS; k++) {
                const uint s = g * SUBS + k;
                uint wv[8];
                for (uint b = 0u; b < BITS; b++) wv[b] = gw[k * BITS + b];
                uint pw[8];
                packed_weights(wv, pw);
                for (uint r = 0u; r < nr; r++) {
                    const uint ab = (r0 + r) * n_sub + s;
                    // sum of (code + off) * a = sum code * a + off * sum a: all integers, exact
                    int isum = 0;
                    for (uint w = 0u; w < 8u; w++) isum += dot4(pw[w], aq[ab * 8u + w]);
                    const int asum = staged ? staged_asum(r * n_sub + s) : block_sum(ab);
                    isum = BITS == 1u ? 2 * isum - asum : isum - asum;
                    precise float v = k == 0u ? as_[ab] * float(isum) : fma(as_[ab], float(isum), blk[r]);
                    blk[r] = v;
                }
            }
            const float dw = wscale(m, g * p.rows + row);
            for (uint r = 0u; r < nr; r++) {
                precise float v = fma_x(dw, blk[r], res[r]);
                res[r] = v;
            }
        }
    }
}

// The slices' partials summed in slice order (valid in slice 0's invocations).
void reduce(uint lid, uint per, uint nr, inout float res[8]) {
    barrier();   // the previous reduction's reads are done
    for (uint r = 0u; r < nr; r++) spart[r * 256u + lid] = res[r];
    barrier();
    if (lid >= per) return;
    for (uint r = 0u; r < nr; r++) {
        precise float v = spart[r * 256u + lid];
        for (uint k = 1u; k < p.split; k++) v = v + spart[r * 256u + k * per + lid];
        res[r] = v;
    }
}


// NORM_OUT: once every workgroup of these rows has added its products, the last one norms them.
void norm_rows_last(uint lid, uint r0, uint nr) {
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last_wg = atomicAdd(cnt[gl_WorkGroupID.x], 1u) == gl_NumWorkGroups.y - 1u;
    barrier();
    if (!last_wg) return;
    memoryBarrierBuffer();
    const uint E = p.l0;
    for (uint r = 0u; r < nr; r++) {
        const uint xb = (r0 + r) * E;
        float hi = 0.0, lo = 0.0;   // norm.comp's sum: invocation t takes t, t + 64, ...
        for (uint i = lid; lid < 64u && i < E; i += 64u) {
            const float v = y[xb + i];
            precise float sq = v * v;
            ff_add(hi, lo, sq, 0.0);
        }
        ff_reduce64(lid, hi, lo);
        const float scale = norm_scale(0u, part[0], part_lo[0], float(E), p.eps);
        barrier();
        for (uint i = lid; i < E; i += 256u) {
            precise float v = y[xb + i] * scale;
            xn[xb + i] = v * nw[i];
        }
    }
    memoryBarrierBuffer();
    barrier();
#ifdef BS_ROT
    // (invocation lid wrote xn[xb + i] for i = lid modulo 256: ROTATE_ROW reads those back)
    for (uint r = 0u; r < nr; r++) ROTATE_ROW(xn, xr, sg, spart, 2048u, (r0 + r) * E, 0u, E, p.rblock, p.rsigns, p.rscale, lid, 256u)
    memoryBarrierBuffer();
    barrier();
    for (uint b = lid; b < nr * E / 32u; b += 256u) quant_block_xr(r0 * E + 32u * b, r0 * E / 32u + b);
#else
    for (uint b = lid; b < nr * E / 32u; b += 256u) quant_block_xn(r0 * E + 32u * b, r0 * E / 32u + b);
#endif
    if (lid == 0u) cnt[gl_WorkGroupID.x] = 0u;
}

#ifdef BS_ROT
// QOUT with ROT: once every workgroup whose rows meet a rotation block has stored them, the last
// one rotates the block into xr and makes its int8 blocks, for the nr activation rows.
void rotate_blocks_last(uint lid, uint r0, uint nr, uint per) {
    const uint B = p.rblock, nblk = p.l0 / B;
    const uint w0 = gl_WorkGroupID.y * per, w1 = min(w0 + per, p.rcount);
    const uint b0 = w0 / B, nb = w0 < w1 ? (w1 - 1u) / B - b0 + 1u : 0u;   // the blocks this workgroup's rows meet
    memoryBarrierBuffer();
    barrier();
    if (lid < min(nb, 8u)) {
        const uint b = b0 + lid, last = (min(b * B + B, p.rcount) - 1u) / per;
        blk_last[lid] = atomicAdd(cnt[gl_WorkGroupID.x * nblk + b], 1u) == last - (b * B) / per;
    }
    barrier();
    for (uint k = 0u; k < min(nb, 8u); k++) {
        if (!blk_last[k]) continue;   // (shared: the workgroup's branch is uniform)
        memoryBarrierBuffer();
        const uint off = (b0 + k) * B;
        for (uint r = 0u; r < nr; r++) ROTATE_ROW(y, xr, sg, spart, 2048u, (r0 + r) * p.l0, off, B, B, p.rsigns, p.rscale, lid, 256u)
        memoryBarrierBuffer();
        barrier();
        for (uint j = lid; j < nr * (B / 32u); j += 256u) {
            const uint e = (r0 + j / (B / 32u)) * p.l0 + off + 32u * (j % (B / 32u));
            quant_block_xr(e, e / 32u);
        }
        if (lid == 0u) cnt[gl_WorkGroupID.x * nblk + b0 + k] = 0u;
    }
}
#endif

#ifdef BS_CONV
// Channel c's conv over its window and the nr new values x (conv.comp's conv_at and
// move_window: sums in tap order from 0, then x / (1 + exp(-x))).
float win_at(uint i) { return p.from_in != 0u ? win_in[i] : win[i]; }

void conv_channel(uint c, uint nr, float x[8]) {
    const uint cd = p.l0, km1 = p.K - 1u;
    for (uint t = 0u; t < nr; t++) {
        precise float s = 0.0;
        for (uint i = 0u; i < p.K; i++) {
            const uint r = t + i;
            s = s + (r < km1 ? win_at(r * cd + c) : x[r - km1]) * cw[c * p.K + i];
        }
        co[t * cd + c] = s / (1.0 + exp(-s));
    }
    float keep[8];
    for (uint r = 0u; r < km1; r++) keep[r] = nr + r < km1 ? win_at((nr + r) * cd + c) : x[nr + r - km1];
    for (uint r = 0u; r < km1; r++) win[r * cd + c] = keep[r];
}
#endif

void main() {
    const uint per = 256u / p.split, lid = gl_LocalInvocationID.x;
    const uint local = gl_WorkGroupID.y * per + lid % per, slice = lid / per;
    const uint row = p.rbase + local;
    const bool live = local < p.rcount;
    const uint r0 = gl_WorkGroupID.x * 8u, nr = min(8u, p.n - r0);
    float res[8], up[8];
    stage_asums(lid, r0, nr);
    // dead invocations (past the last row) add zeros: they must still reach the barriers
    if (live) product(0u, row, slice, r0, nr, res); else for (uint r = 0u; r < 8u; r++) res[r] = 0.0;
    if (GLU != 0u) {
        if (live) product(1u, row, slice, r0, nr, up); else for (uint r = 0u; r < 8u; r++) up[r] = 0.0;
    }
    if (p.split > 1u) {
        reduce(lid, per, nr, res);
        if (GLU != 0u) reduce(lid, per, nr, up);
    }
    if (live && slice == 0u) {
        for (uint r = 0u; r < nr; r++) {
            const float x = res[r];
            store(row, r0 + r, GLU != 0u ? x / (1.0 + exp(-x)) * up[r] : x);
        }
#ifdef BS_CONV
        if (row < p.e1) conv_channel(p.row0 + row - p.rbase, nr, res);
#endif
    }
    if (NORM_OUT != 0u) norm_rows_last(lid, r0, nr);
#ifdef BS_ROT
    if (QOUT != 0u) {
        rotate_blocks_last(lid, r0, nr, per);
        return;
    }
#endif
    if (QOUT != 0u) {   // the workgroup's rows are written: its blocks, one per invocation
        memoryBarrierBuffer();
        barrier();
        const uint bpr = per / 32u, first = gl_WorkGroupID.y * per + (lid % bpr) * 32u;
        if (lid < nr * bpr && first < p.rcount) {
            const uint e = (r0 + lid / bpr) * p.l0 + first;
            quant_block(e, e / 32u);
        }
    }
}
