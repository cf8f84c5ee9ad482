// delta_lanes.glsl: the gated delta rule's step for the state columns of a workgroup. The operations and their order are deltanet.c's (the CPU path): 8 sums per column,
// sum l taking the products of rows i = l (mod 8), multiply then add, added at the end as its
// reduce() tree ((0+1)+(2+3))+((4+5)+(6+7)); so a column's bits depend on d_k alone, never on how
// many tokens or sequences a dispatch holds, nor on how the sums are spread (DL_SPREAD):
//  - 8 (GPUs): 32 columns j per workgroup (neighbouring invocations take neighbouring columns,
//    so a state row is read 128 bytes at a time) by 8 lanes, lane l holding rows l, l + 8, ...
//    of its column in registers for the whole step: the state is read once and written once per
//    step whatever its tokens, and 8 times as many invocations keep loads in flight;
//  - 1 (CPU devices, where a barrier costs more than it saves, and an idle invocation as much as
//    a busy one): 64 columns per workgroup, an invocation per column walking its rows in memory
//    with the 8 sums in registers.
// The includer's workgroup is DL_INV invocations (local_size_x_id 23: 256 with 8 lanes, 64 with
// 1), DL_COLS columns.
// The registers are arrays indexed by loop counters, so the loops are unrolled ([[unroll]]: the
// includer enables GL_EXT_control_flow_attributes): a GPU compiler then keeps them in registers.
// The includer defines DL_K(i) and DL_Q(i) (the token's normed k and q), binds the state as st[]
// ([n_v][d_k][d_v]), and has push constants dk, dv and from_in: the step after a snapshot reads
// the state it starts from in st_in[], the other buffer of the session's pair, and leaves it
// there (the snapshot, at no cost); other steps leave st_in unbound and update st in place.
// (A batch's kernel, delta_b.comp, reads and writes its sequences' states through DL_ST,
// DL_ST_SET, DL_ST_IN and DL_FROM_IN instead: the same operations on another buffer.)
#ifndef DL_ST
#define DL_ST(e) st[e]
#define DL_ST_SET(e, v) st[e] = (v)
#define DL_ST_IN(e) st_in[e]
#define DL_FROM_IN (p.from_in != 0u)
#endif
float dl_first(uint e) { return DL_FROM_IN ? DL_ST_IN(e) : DL_ST(e); }
layout(constant_id = 22) const uint DL_SPREAD = 8u;
const uint DL_INV = gl_WorkGroupSize.x;
const uint DL_LANES = 8u, DL_ROWS = 32u;   // DL_ROWS * DL_LANES: d_k <= 256
const uint DL_COLS = DL_INV / DL_SPREAD;   // columns per workgroup
shared float dl_red[DL_LANES][32];
shared float dl_d[32];
float dl_r[DL_ROWS];   // spread 8: this invocation's rows of its column

// spread 8: column j's rows of lane l from the state (sb: the column's first element); zeros where off
void dl_load(uint sb, uint l, bool on) {
    if (DL_SPREAD == 1u) return;
    [[unroll]] for (uint a = 0u; a < DL_ROWS; a++) {
        const uint i = l + DL_LANES * a;
        dl_r[a] = on && i < p.dk ? dl_first(sb + i * p.dv) : 0.0;
    }
}

void dl_store(uint sb, uint l, bool on) {
    if (DL_SPREAD == 1u) return;
    [[unroll]] for (uint a = 0u; a < DL_ROWS; a++) {
        const uint i = l + DL_LANES * a;
        if (on && i < p.dk) DL_ST_SET(sb + i * p.dv, dl_r[a]);
    }
}

// The token's gates of a V head from the raw projections: decay = exp(softplus(alpha + dt_bias)
// * a), bt = sigmoid(beta). Every operation precise: a compiler may not reassociate or fuse them
// differently in the two kernels that include this (their bits must agree).
void dl_gates(float alpha, float dt_bias, float a, float braw, out float decay, out float bt) {
    precise float ga = alpha + dt_bias;
    precise float sp = ga > 20.0 ? ga : log(1.0 + exp(ga));
    precise float e = sp * a;
    decay = exp(e);
    precise float den = 1.0 + exp(-braw);
    bt = 1.0 / den;
}

float dl_tree(float s0, float s1, float s2, float s3, float s4, float s5, float s6, float s7) {
    precise float s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    return s;
}

// the 8 lane sums of column jj
float dl_sum(uint jj) {
    return dl_tree(dl_red[0][jj], dl_red[1][jj], dl_red[2][jj], dl_red[3][jj], dl_red[4][jj], dl_red[5][jj], dl_red[6][jj],
                   dl_red[7][jj]);
}

// spread 1: the token for column sb of the state in memory, the 8 sums in this invocation; first:
// the step's first token (the state in st_in where the step reads it there)
float dl_token_column(uint sb, float decay, float bt, float v, bool first) {
    float acc[8];
    [[unroll]] for (uint l = 0u; l < 8u; l++) acc[l] = 0.0;
    for (uint i0 = 0u; i0 < p.dk; i0 += 8u)
        [[unroll]] for (uint l = 0u; l < 8u; l++) {
            const uint i = i0 + l;
            if (i < p.dk) {
                precise float r = (first ? dl_first(sb + i * p.dv) : DL_ST(sb + i * p.dv)) * decay;
                DL_ST_SET(sb + i * p.dv, r);
                precise float pk = r * DL_K(i);
                precise float s = acc[l] + pk;
                acc[l] = s;
            }
        }
    precise float d = (v - dl_tree(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7])) * bt;
    [[unroll]] for (uint l = 0u; l < 8u; l++) acc[l] = 0.0;
    for (uint i0 = 0u; i0 < p.dk; i0 += 8u)
        [[unroll]] for (uint l = 0u; l < 8u; l++) {
            const uint i = i0 + l;
            if (i < p.dk) {
                precise float kd = DL_K(i) * d;
                precise float r = DL_ST(sb + i * p.dv) + kd;
                DL_ST_SET(sb + i * p.dv, r);
                precise float pq = r * DL_Q(i);
                precise float s = acc[l] + pq;
                acc[l] = s;
            }
        }
    return dl_tree(acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]);
}

// One token: S *= decay; u = S . k; d = (v - u) * beta; S += k d; returns S . q (spread 8: in
// lane 0, and every invocation of the workgroup calls it: it holds barriers). sb, on: the
// column's first element and whether it exists; first: the step's first token.
float dl_token(uint l, uint jj, uint sb, bool on, float decay, float bt, float v, bool first) {
    if (DL_SPREAD == 1u) return on ? dl_token_column(sb, decay, bt, v, first) : 0.0;
    precise float acc = 0.0;
    [[unroll]] for (uint a = 0u; a < DL_ROWS; a++) {
        const uint i = l + DL_LANES * a;
        if (i < p.dk) {
            precise float r = dl_r[a] * decay;
            dl_r[a] = r;
            precise float pk = r * DL_K(i);
            acc = acc + pk;
        }
    }
    dl_red[l][jj] = acc;
    barrier();
    if (l == 0u) {
        precise float d = (v - dl_sum(jj)) * bt;
        dl_d[jj] = d;
    }
    barrier();   // lane 0 has read dl_red: the lanes may write it again
    const float d = dl_d[jj];
    acc = 0.0;
    [[unroll]] for (uint a = 0u; a < DL_ROWS; a++) {
        const uint i = l + DL_LANES * a;
        if (i < p.dk) {
            precise float kd = DL_K(i) * d;
            precise float r = dl_r[a] + kd;
            dl_r[a] = r;
            precise float pq = r * DL_Q(i);
            acc = acc + pq;
        }
    }
    dl_red[l][jj] = acc;
    barrier();
    const float y = l == 0u ? dl_sum(jj) : 0.0;
    barrier();   // dl_red, dl_d and the includer's k and q are the next token's
    return y;
}

// this invocation's lane and column within the workgroup's columns
uint dl_lane(uint lt) { return DL_SPREAD == 1u ? 0u : lt / DL_COLS; }
uint dl_col(uint lt) { return DL_SPREAD == 1u ? lt : lt % DL_COLS; }
