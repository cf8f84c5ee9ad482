// attn_split.glsl (attn_split.comp, one sequence; attn_split_b.comp, up to 4 sequences of a
// batch in one dispatch, workgroup z the sequence, each its own cache, scores, partials and
// positions; attn_nc_split.comp, the drafter's block, attn_nc.comp's attention): attn.comp's causal softmax attention split over the context (flash-decoding).
// Workgroup (chunk c, row t * Hkv + KV head) takes positions [c*C, c*C + C) of row t's
// 0..pos0+t for the G = H / Hkv query heads of the KV group, so each K/V row is read once per
// group: K rows staged in shared memory a tile at a time (the workgroup reads a row's elements
// together), V rows read by the invocations of consecutive elements. Per head it leaves the
// chunk's max m, sum of exp l and unnormalised V sum a in the partials; the last workgroup of
// (row, group) to finish (a counter per pair, left at 0) merges them: M = max m, weights
// w = exp(m - M) (1 where m == M), L = sum w l, out = (sum w a) / L in chunk order, then
// attn.comp's epilogue. Chunks start at multiples of C, so a row's bits never depend on the
// rows evaluated with it; workgroups past a row's last chunk return at once (the dispatch is
// sized for the batch's last row, whose context is the longest).
// Inside a chunk the float order is attn.comp's (a score's sum over d, the sum of exp by
// invocation j % 64 then a tree, V sums over j in order), and a single chunk's merge multiplies
// by 1 exactly, so with pos0 + t < C the bits are attn.comp's.
// fused != 0 (up to 8 rows): attn.comp's norms, rope and KV store in the dispatch: the batch's
// k rows are normed and roped as a tile takes them; the workgroup of row t whose chunk holds
// pos0 + t stores that row (k and v) in the cache, which no workgroup reads in this dispatch.
// qrow0: the sequence's first row in q, the raw k and v, y, the rope table and the blocks (a
// batch's rows: its shared scratch's); the scores, partials and counters are the sequence's own.
// rblock > 0 (attn_split.comp, with quant: a folded attn_output): the int8 blocks are made from
// the gated rows rotated by the output product's fold instead. Each rotation block's last (row,
// KV group) to be merged (a counter per row and block, binding 18, left at 0) rotates it into
// xr (binding 16; signs binding 17): rotate.comp's forward operations in its order, so its bits.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };      // [T][2*H*D], q then gate per head
layout(std430, binding = 1) buffer KC { uint kc[]; };
layout(std430, binding = 2) buffer VC { uint vc[]; };
layout(std430, binding = 3) coherent buffer O { float y[]; };     // [T][H*D]
layout(std430, binding = 4) coherent buffer SC { float sc[]; };   // [T*H][n_ctx] scratch
layout(std430, binding = 5) readonly buffer P { uint pos0; } step;
layout(std430, binding = 6) writeonly buffer QO { uint qo[]; };
layout(std430, binding = 7) writeonly buffer S8 { float s8[]; };
layout(std430, binding = 8) writeonly buffer M8 { float m8[]; };
layout(std430, binding = 9) readonly buffer KR { float kr[]; };     // fused: [T][Hkv*D] raw k
layout(std430, binding = 10) readonly buffer VR { float vr[]; };    // fused: [T][Hkv*D] v
layout(std430, binding = 11) readonly buffer QN { float qn[]; };
layout(std430, binding = 12) readonly buffer KN { float kn[]; };
layout(std430, binding = 13) readonly buffer CS { float cs[]; };    // [rows][n_rot]: cos, sin
layout(std430, binding = 14) coherent buffer PT { float pt[]; };   // [T*H][n_chunk][2 + D]: m, l, a
layout(std430, binding = 15) coherent buffer CNT { uint cnt[]; };  // [T*Hkv], 0 between dispatches
#ifdef BS_BATCH
// sequences 1..3's cache, scores, positions and partials (sequence 0's at 1, 2, 4, 5, 14); the
// counters are the batch's, a pair per row of its shared scratch ([rows*Hkv])
layout(std430, binding = 16) buffer KC1 { uint kc1[]; };
layout(std430, binding = 17) buffer KC2 { uint kc2[]; };
layout(std430, binding = 18) buffer KC3 { uint kc3[]; };
layout(std430, binding = 19) buffer VC1 { uint vc1[]; };
layout(std430, binding = 20) buffer VC2 { uint vc2[]; };
layout(std430, binding = 21) buffer VC3 { uint vc3[]; };
layout(std430, binding = 22) coherent buffer SC1 { float sc1[]; };
layout(std430, binding = 23) coherent buffer SC2 { float sc2[]; };
layout(std430, binding = 24) coherent buffer SC3 { float sc3[]; };
layout(std430, binding = 25) readonly buffer P1 { uint pos0; } step1;
layout(std430, binding = 26) readonly buffer P2 { uint pos0; } step2;
layout(std430, binding = 27) readonly buffer P3 { uint pos0; } step3;
layout(std430, binding = 28) coherent buffer PT1 { float pt1[]; };
layout(std430, binding = 29) coherent buffer PT2 { float pt2[]; };
layout(std430, binding = 30) coherent buffer PT3 { float pt3[]; };
// rt[s] = r0 | T << 16 (sequence s's rows), n_ctx[s] its context; flags: bit s an F32 cache,
// bit 8 + s its rows fused (as attn_split.comp's f32 and fused)
layout(push_constant) uniform Push {
    uint H, Hkv, D; float scale; uint quant, n_rot; float eps; uint chunk, flags, rt[4], n_ctx[4];
} p;
uint seq, A_F32, A_FUSED, A_QROW0, A_T, A_NCTX, A_NCHUNK, A_POS0;   // workgroup z's sequence (main)
#define SEQ_SWITCH(a0, a1, a2, a3) switch (seq) { case 0u: a0; break; case 1u: a1; break; case 2u: a2; break; default: a3; }
#define SEQ_GET(T_, name, b0, b1, b2, b3) T_ name(uint i) { SEQ_SWITCH(return b0[i], return b1[i], return b2[i], return b3[i]) }
#define SEQ_PUT(T_, name, b0, b1, b2, b3) void name(uint i, T_ v) { SEQ_SWITCH(b0[i] = v, b1[i] = v, b2[i] = v, b3[i] = v) }
SEQ_GET(uint, kc_at, kc, kc1, kc2, kc3)
SEQ_GET(uint, vc_at, vc, vc1, vc2, vc3)
SEQ_GET(float, sc_at, sc, sc1, sc2, sc3)
SEQ_GET(float, pt_at, pt, pt1, pt2, pt3)
SEQ_PUT(uint, kc_put, kc, kc1, kc2, kc3)
SEQ_PUT(uint, vc_put, vc, vc1, vc2, vc3)
SEQ_PUT(float, sc_put, sc, sc1, sc2, sc3)
SEQ_PUT(float, pt_put, pt, pt1, pt2, pt3)
void seq_select() {
    seq = gl_WorkGroupID.z;
    A_F32 = (p.flags >> seq) & 1u;
    A_FUSED = (p.flags >> (8u + seq)) & 1u;
    A_QROW0 = p.rt[seq] & 0xffffu;
    A_T = p.rt[seq] >> 16;
    A_NCTX = p.n_ctx[seq];
    A_NCHUNK = (A_NCTX + p.chunk - 1u) / p.chunk;
    SEQ_SWITCH(A_POS0 = step.pos0, A_POS0 = step1.pos0, A_POS0 = step2.pos0, A_POS0 = step3.pos0)
}
#define SEQ_PAST(t) ((t) >= A_T)
#define A_QUANT p.quant
#define CNT_AT(t, kvh) ((A_QROW0 + (t)) * p.Hkv + (kvh))
#elif defined(BS_NC)
// the drafter's block (attn_nc.comp's): every row attends to the F32 cache rows first..first+n_kv-1
// (no causal mask; q rows of H*D, no gate, nothing fused or quantized); n_rot and eps unused;
// qrow0: the block's first row in q and y (several blocks' rows one after another)
layout(push_constant) uniform Push { uint H, Hkv, D, first, n_kv, sc_stride; float scale; uint chunk, n_chunk, n_rot; float eps; uint qrow0; } p;
#define A_F32 1u
#define A_FUSED 0u
#define A_QROW0 p.qrow0
#define A_QUANT 0u
#define A_KV0 p.first
#define A_NCTX p.sc_stride
#define A_NCHUNK p.n_chunk
#define A_POS0 0u
#define ROW_NKV(t) p.n_kv
#define Q_BASE(t, h) ((A_QROW0 + (t)) * p.H * p.D + (h) * p.D)
#define SEQ_PAST(t) false
#define CNT_AT(t, kvh) gl_WorkGroupID.y
#else
layout(push_constant) uniform Push {
    uint H, Hkv, D, n_ctx; float scale; uint f32, quant, qrow0, fused, n_rot; float eps; uint chunk, n_chunk, rblock, rsigns;
    float rscale;
} p;
layout(std430, binding = 16) coherent buffer XR { float xr[]; };   // [T][H*D] the gated rows rotated
layout(std430, binding = 17) readonly buffer SG { float sg[]; };   // the fold's signs
layout(std430, binding = 18) coherent buffer BC { uint bcnt[]; };  // [T][H*D / rblock]
#define A_ROT 1
#define A_QUANT p.quant
#define A_F32 p.f32
#define A_FUSED p.fused
#define A_QROW0 p.qrow0
#define SEQ_PAST(t) false
#define A_NCTX p.n_ctx
#define A_NCHUNK p.n_chunk
#define A_POS0 step.pos0
#define CNT_AT(t, kvh) gl_WorkGroupID.y
#endif
#ifndef BS_BATCH   // one sequence: its own buffers
#define kc_at(i) kc[i]
#define vc_at(i) vc[i]
#define sc_at(i) sc[i]
#define pt_at(i) pt[i]
#define kc_put(i, v) kc[i] = (v)
#define vc_put(i, v) vc[i] = (v)
#define sc_put(i, v) sc[i] = (v)
#define pt_put(i, v) pt[i] = (v)
void seq_select() {}
#endif

#ifndef BS_NC   // a target's step: causal, rows of q then gate per head
#define A_KV0 0u
#define ROW_NKV(t) (A_POS0 + (t) + 1u)
#define Q_BASE(t, h) ((A_QROW0 + (t)) * 2u * p.H * p.D + (h) * 2u * p.D)
#endif

#include "fma_rn.glsl"

#include "f16.glsl"
#include "div_rn.glsl"
#define q qo
#include "q8.glsl"
#ifdef A_ROT
#define quant_block quant_block_xr
#define y xr
#include "q8.glsl"
#undef y
#undef quant_block
#include "fwht.glsl"
#endif
#undef q

const uint TJ = 16u;          // K rows per shared tile
const uint MAXG = 8u;         // query heads whose V sums one pass keeps in registers
shared float qs[2048];        // the group's q heads (G * D <= 2048), rounded as the cache is
shared float kt[TJ * 257u];   // a tile of K rows, rows padded to D + 1 against bank conflicts
shared float red[64];
shared float hv[256];
shared float part[64], part_lo[64];
shared bool last_wg;

#include "norm_rn.glsl"

#define HEAD_IN(i) (is_q ? q[base + (i)] : kr[base + (i)])
#define HEAD_W(i) (is_q ? qn[i] : kn[i])
#include "head_rn.glsl"

// elements d, d + 1 (d even) of cache row j's KV head at kb2: one word of an F16 cache
vec2 cache_pair(uint j, uint kvw, uint kb2, uint d, bool v) {
    const uint i = (A_KV0 + j) * kvw + kb2 + d;
    if (A_F32 != 0u) return v ? vec2(uintBitsToFloat(vc_at(i)), uintBitsToFloat(vc_at(i + 1u))) : vec2(uintBitsToFloat(kc_at(i)), uintBitsToFloat(kc_at(i + 1u)));
    return unpackHalf2x16(v ? vc_at(i / 2u) : kc_at(i / 2u));
}

float rounded(float x) { return A_F32 != 0u ? x : f16_round(x); }

// V row j's pair at d: the batch's rows (fused) from the raw rows, rounded as the cache holds them
vec2 v_pair(uint j, uint kvw, uint kb2, uint d) {
    if (A_FUSED == 0u || j < A_POS0) return cache_pair(j, kvw, kb2, d, true);
    const uint b = (A_QROW0 + j - A_POS0) * kvw + kb2 + d;
    return vec2(rounded(vr[b]), rounded(vr[b + 1u]));
}

// fused: k of batch row r normed and roped into hv (all invocations); stored with its v when asked
void batch_k(uint r, uint kvh, bool store, uint tid) {
    const uint kvw = p.Hkv * p.D, b = (A_QROW0 + r) * kvw + kvh * p.D;
    norm_rope_head(false, b, A_QROW0 + r, tid);
    if (!store) return;
    const uint pos = A_POS0 + r;
    for (uint w = tid; w < p.D / 2u; w += 64u) {
        const uint i = 2u * w;
        if (A_F32 != 0u) {
            const uint d2 = pos * kvw + kvh * p.D + i;
            kc_put(d2, floatBitsToUint(hv[i]));
            kc_put(d2 + 1u, floatBitsToUint(hv[i + 1u]));
            vc_put(d2, floatBitsToUint(vr[b + i]));
            vc_put(d2 + 1u, floatBitsToUint(vr[b + i + 1u]));
        } else {
            const uint dst = pos * (kvw / 2u) + (kvh * p.D + i) / 2u;
            kc_put(dst, f16_bits(hv[i]) | (f16_bits(hv[i + 1u]) << 16));
            vc_put(dst, f16_bits(vr[b + i]) | (f16_bits(vr[b + i + 1u]) << 16));
        }
    }
}

// K rows j0 .. j0 + n - 1 into kt: the cache's a word per invocation (D even), read together; the
// batch's (fused) normed and roped here
void load_tile(uint j0, uint n, uint t, uint kvh, uint tid) {
    const uint D = p.D, kvw = p.Hkv * D, kb2 = kvh * D;
    for (uint e = 2u * tid; e < n * D; e += 128u) {   // pairs: a word of an F16 cache each
        const uint jj = e / D, d = e % D;
        if (A_FUSED != 0u && j0 + jj >= A_POS0) continue;
        const vec2 f = cache_pair(j0 + jj, kvw, kb2, d, false);
        kt[jj * (D + 1u) + d] = f.x;
        kt[jj * (D + 1u) + d + 1u] = f.y;
    }
    if (A_FUSED == 0u) return;
    for (uint jj = 0u; jj < n; jj++) {   // uniform: every invocation takes the same rows
        if (j0 + jj < A_POS0) continue;
        const uint r = j0 + jj - A_POS0;
        batch_k(r, kvh, r == t, tid);
        for (uint d = tid; d < D; d += 64u) kt[jj * (D + 1u) + d] = rounded(hv[d]);
        barrier();   // hv is the next row's
    }
}

// this chunk's scores of every head of the group into sc (scaled, before the softmax)
void scores(uint t, uint kvh, uint G, uint c0, uint c1, uint tid) {
    const uint D = p.D;
    for (uint j0 = c0; j0 < c1; j0 += TJ) {
        const uint n = min(TJ, c1 - j0);
        load_tile(j0, n, t, kvh, tid);
        barrier();
        for (uint i = tid; i < G * n; i += 64u) {
            const uint g = i / n, jj = i % n;
            precise float s = 0.0;
            for (uint d = 0u; d < D; d++) s = fma_x(qs[g * D + d], kt[jj * (D + 1u) + d], s);
            s = s * p.scale;
            sc_put(((t * p.H) + kvh * G + g) * A_NCTX + j0 + jj, s);
        }
        barrier();   // the tile is the next one's
    }
}

// head h's softmax over the chunk: attn.comp's max and sum trees; m and l to its partial
void chunk_softmax(uint sb, uint pb, uint c0, uint c1, uint tid) {
    float mx = -1.0 / 0.0;
    for (uint j = c0 + tid; j < c1; j += 64u) mx = max(mx, sc_at(sb + j));
    red[tid] = mx;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] = max(red[tid], red[tid + k]);
        barrier();
    }
    mx = red[0];
    barrier();
    float sum = 0.0;
    for (uint j = c0 + tid; j < c1; j += 64u) {
        const float e = exp(sc_at(sb + j) - mx);
        sc_put(sb + j, e);
        sum += e;
    }
    red[tid] = sum;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] = red[tid] + red[tid + k];
        barrier();
    }
    if (tid == 0u) {
        pt_put(pb, mx);
        pt_put(pb + 1u, red[0]);
    }
    barrier();
}

// the V sums of heads g0 .. g0 + ng - 1 over the chunk, each V element read once for them all;
// loops of constant bounds (guarded) so that acc stays in registers
void chunk_v(uint t, uint kvh, uint G, uint g0, uint ng, uint ch, uint c0, uint c1, uint tid) {
    const uint D = p.D, kvw = p.Hkv * D, kb2 = kvh * D;
    vec2 acc[MAXG][2];   // heads g0.., element pairs 2 tid and 2 tid + 128 (D <= 256)
    for (uint g = 0u; g < MAXG; g++)
        for (uint k = 0u; k < 2u; k++) acc[g][k] = vec2(0.0);
    for (uint j = c0; j < c1; j++) {
        vec2 v[2];
        for (uint k = 0u; k < 2u; k++) {
            const uint d = 2u * tid + 128u * k;
            v[k] = d < D ? v_pair(j, kvw, kb2, d) : vec2(0.0);
        }
        for (uint g = 0u; g < MAXG; g++) {
            if (g >= ng) break;
            const float e = sc_at(((t * p.H) + kvh * G + g0 + g) * A_NCTX + j);
            for (uint k = 0u; k < 2u; k++) acc[g][k] = vec2(fma_x(e, v[k].x, acc[g][k].x), fma_x(e, v[k].y, acc[g][k].y));
        }
    }
    for (uint g = 0u; g < MAXG; g++) {
        if (g >= ng) break;
        const uint pb = (((t * p.H) + kvh * G + g0 + g) * A_NCHUNK + ch) * (2u + D) + 2u;
        for (uint k = 0u; k < 2u; k++) {
            const uint d = 2u * tid + 128u * k;
            if (d < D) {
                pt_put(pb + d, acc[g][k].x);
                pt_put(pb + d + 1u, acc[g][k].y);
            }
        }
    }
}

// the last workgroup of (t, kvh): the chunks' partials of head h merged into y, nc chunks
void merge_head(uint t, uint h, uint nc, uint tid) {
    const uint D = p.D, stride = 2u + D, pb = (t * p.H + h) * A_NCHUNK * stride, row = A_QROW0 + t;
    float M = -1.0 / 0.0;
    for (uint c = 0u; c < nc; c++) M = max(M, pt_at(pb + c * stride));
    barrier();   // every invocation has read the maxima
    for (uint c = tid; c < nc; c += 64u) {   // the weights over the maxima
        const float m = pt_at(pb + c * stride);
        pt_put(pb + c * stride, m == M ? 1.0 : exp(m - M));
    }
    memoryBarrierBuffer();
    barrier();
    precise float L = pt_at(pb + 1u) * pt_at(pb);
    for (uint c = 1u; c < nc; c++) L = fma_x(pt_at(pb + c * stride + 1u), pt_at(pb + c * stride), L);
    const float inv = 1.0 / L;
    for (uint d = tid; d < D; d += 64u) {
        precise float acc = pt_at(pb + 2u + d) * pt_at(pb);
        for (uint c = 1u; c < nc; c++) acc = fma_x(pt_at(pb + c * stride + 2u + d), pt_at(pb + c * stride), acc);
        const float ov = acc * inv;
        y[row * p.H * D + h * D + d] = A_QUANT != 0u ? ov * (1.0 / (1.0 + exp(-q[row * 2u * p.H * D + h * 2u * D + D + d]))) : ov;
    }
}

#ifdef A_ROT
// Row t's KV group kvh is merged and gated (G * D values of y from kvh * G * D): each rotation
// block it meets counts it; the group that completes a block rotates it (qs holds it: the
// scores are done) and makes its int8 blocks.
void rotate_blocks_last(uint t, uint kvh, uint G, uint tid) {
    const uint B = p.rblock, GD = G * p.D, W = p.H * p.D, row = A_QROW0 + t, nblk = W / B;
    const uint b0 = kvh * GD / B, b1 = (kvh * GD + GD - 1u) / B;
    memoryBarrierBuffer();
    barrier();
    for (uint b = b0; b <= b1; b++) {
        if (tid == 0u) last_wg = atomicAdd(bcnt[row * nblk + b], 1u) == (b * B + B - 1u) / GD - (b * B) / GD;
        barrier();
        if (last_wg) {   // (shared: the workgroup's branch is uniform)
            memoryBarrierBuffer();
            ROTATE_ROW(y, xr, sg, qs, 2048u, row * W, b * B, B, B, p.rsigns, p.rscale, tid, 64u)
            memoryBarrierBuffer();
            barrier();
            for (uint k = tid; k < B / 32u; k += 64u) quant_block_xr(row * W + b * B + 32u * k, (row * W + b * B) / 32u + k);
            if (tid == 0u) bcnt[row * nblk + b] = 0u;
        }
        barrier();   // last_wg is the next block's
    }
}
#endif

void main() {
    seq_select();
    const uint ch = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint t = gl_WorkGroupID.y / p.Hkv, kvh = gl_WorkGroupID.y % p.Hkv, G = p.H / p.Hkv, D = p.D;
    if (SEQ_PAST(t)) return;   // a batch: past this sequence's rows (the dispatch fits its longest)
    const uint nkv = ROW_NKV(t), c0 = ch * p.chunk;
    if (c0 >= nkv) return;   // past this row's positions: not counted
    const uint c1 = min(c0 + p.chunk, nkv), nc = (nkv + p.chunk - 1u) / p.chunk;
    for (uint g = 0u; g < G; g++) {
        const uint qb = Q_BASE(t, kvh * G + g);
        if (A_FUSED != 0u) norm_rope_head(true, qb, A_QROW0 + t, tid);
        for (uint d = tid; d < D; d += 64u) qs[g * D + d] = rounded(A_FUSED != 0u ? hv[d] : q[qb + d]);
        barrier();
    }
    scores(t, kvh, G, c0, c1, tid);
    memoryBarrierBuffer();
    barrier();
    for (uint g = 0u; g < G; g++) {
        const uint h = kvh * G + g;
        chunk_softmax((t * p.H + h) * A_NCTX, ((t * p.H + h) * A_NCHUNK + ch) * (2u + D), c0, c1, tid);
    }
    memoryBarrierBuffer();
    barrier();
    for (uint g0 = 0u; g0 < G; g0 += MAXG) chunk_v(t, kvh, G, g0, min(MAXG, G - g0), ch, c0, c1, tid);
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) last_wg = atomicAdd(cnt[CNT_AT(t, kvh)], 1u) == nc - 1u;
    barrier();
    if (!last_wg) return;
    memoryBarrierBuffer();
    for (uint g = 0u; g < G; g++) merge_head(t, kvh * G + g, nc, tid);
    if (tid == 0u) cnt[CNT_AT(t, kvh)] = 0u;
    if (A_QUANT == 0u) return;
#ifdef A_ROT
    if (p.rblock != 0u) {
        rotate_blocks_last(t, kvh, G, tid);
        return;
    }
#endif
    memoryBarrierBuffer();
    barrier();
    const uint e = (A_QROW0 + t) * p.H * D + kvh * G * D;
    for (uint b = tid; b < G * D / 32u; b += 64u) quant_block(e + 32u * b, e / 32u + b);
}
