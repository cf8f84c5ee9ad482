// fwht.glsl: the butterflies of the Walsh-Hadamard transform (unscaled) on each block of B
// values of the shared array ARR[0..M) (M a multiple of B), by invocation T of NT, with the
// workgroup's barrier after each stage: pair (i, i + len) of every stage made as cpu/rotation.c
// makes it, so its bits. A macro: GLSL passes no shared array to a function. rotate.comp takes
// one block a workgroup; ROTATE_ROW a row's blocks as many at a time as ARR holds.
#define FWHT_BLOCKS(ARR, M, B, T, NT)                                                             \
    for (uint len_ = 1u; len_ < (B); len_ <<= 1u) {                                              \
        for (uint q_ = (T); q_ < (M) / 2u; q_ += (NT)) {                                         \
            const uint h_ = q_ % ((B) / 2u);                                                     \
            const uint i_ = (q_ / ((B) / 2u)) * (B) + (h_ / len_) * 2u * len_ + h_ % len_;       \
            precise float a_ = ARR[i_], c_ = ARR[i_ + len_];                                     \
            precise float s0_ = a_ + c_;                                                         \
            precise float s1_ = a_ - c_;                                                         \
            ARR[i_] = s0_;                                                                       \
            ARR[i_ + len_] = s1_;                                                                \
        }                                                                                        \
        barrier();                                                                               \
    }

// The forward fold of D values SRC[BASE + OFF + i] into DST[BASE + OFF + i] (OFF a multiple of
// B): each value times its sign SG[OFF + i] (if SIGNS != 0), the butterflies of each block of B,
// times SCALE: rotate.comp's operations in its order, so its bits, through the shared ARR of CAP
// floats, as many blocks at a time as it holds (norm.comp's NORM_ROT, mv_q.glsl's ROT). Every
// invocation of the workgroup runs it; B and CAP powers of two, CAP a multiple of NT: with OFF 0,
// invocation T reads SRC[BASE + i] for i = T modulo NT only, so values it wrote itself that way
// need no barrier first. A block larger than CAP is skipped (never so dispatched: no hang).
#define ROTATE_ROW(SRC, DST, SG, ARR, CAP, BASE, OFF, D, B, SIGNS, SCALE, T, NT)                   \
    if ((B) >= 2u && (B) <= (CAP))                                                               \
        for (uint c0_ = (OFF), span_ = min(((CAP) / (B)) * (B), (D)); c0_ < (OFF) + (D); c0_ += span_) { \
            const uint m_ = min(span_, (OFF) + (D) - c0_);                                       \
            for (uint j_ = (T); j_ < m_; j_ += (NT)) {                                           \
                float a_ = SRC[(BASE) + c0_ + j_];                                               \
                if ((SIGNS) != 0u) a_ *= SG[c0_ + j_];                                           \
                ARR[j_] = a_;                                                                    \
            }                                                                                    \
            barrier();                                                                           \
            FWHT_BLOCKS(ARR, m_, B, T, NT)                                                       \
            for (uint j_ = (T); j_ < m_; j_ += (NT)) {                                           \
                precise float s_ = ARR[j_] * (SCALE);                                            \
                DST[(BASE) + c0_ + j_] = s_;                                                     \
            }                                                                                    \
            barrier();                                                                           \
        }
