// fwht.glsl: the butterflies of the Walsh-Hadamard transform (unscaled) on each block of B
// values of the shared array ARR[0..M) (M a multiple of B), by invocation T of NT, with the
// workgroup's barrier after each stage: pair (i, i + len) of every stage made as cpu/rotation.c
// makes it, so its bits. A macro: GLSL passes no shared array to a function. rotate.comp takes
// one block a workgroup, norm.comp (NORM_ROT) a row's blocks as many at a time as it holds.
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
