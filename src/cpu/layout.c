/* layout.c: the bit and table layouts the SIMD kernels share (kernels.h): the P128 sign-bit
 * order of packed Q1_0 masks, the L128 slot of a row and its 4-activation lookup tables. Kept
 * apart from the dispatcher so that the ISA kernels depend on these alone. */
#include "cpu/kernels.h"

/* P128: byte j of each 64-bit mask takes bits from the low (j even) or high (j odd) half of
 * the 128 sign bits; see kernels.h. Position p = 64h + 8j + k holds element
 * 16*(j/2) + 64*(j%2) + 8h + k. */
#define P128(h, j, k) (16 * ((j) / 2) + 64 * ((j) % 2) + 8 * (h) + (k))
#define P128_8(h, j) P128(h, j, 0), P128(h, j, 1), P128(h, j, 2), P128(h, j, 3), \
                     P128(h, j, 4), P128(h, j, 5), P128(h, j, 6), P128(h, j, 7)
#define P128_64(h) P128_8(h, 0), P128_8(h, 1), P128_8(h, 2), P128_8(h, 3), \
                   P128_8(h, 4), P128_8(h, 5), P128_8(h, 6), P128_8(h, 7)
const uint8_t bs_p128_perm[128] = {P128_64(0), P128_64(1)};
const uint8_t bs_p128_group[16] = {0, 0, 2, 2, 0, 0, 2, 2, 1, 1, 3, 3, 1, 1, 3, 3};

int bs_l128_chunk_blocks = 0;   /* tests: blocks per K chunk and one group per tile; 0 = the kernel's */

/* Row R = 16q + l is float lane l of the kernel's vector q = 2i + h, which takes nibble i of
 * the 16-bit lanes in half h of the chunk: 128-bit lane L = 2h + l / 8, 16-bit lane m = l % 8. */
int bs_l128_slot(int R) {
    const int q = R / 16, l = R % 16, i = q >> 1, h = q & 1;
    return 32 * (2 * h + l / 8) + 4 * (l % 8) + i;
}

/* Per 4 activations a: T[idx] = sum_i (bit i of idx ? a_i : -a_i), low bytes then high bytes. */
void bs_l128_tables(const int8_t *qs, int64_t n, uint8_t *lut) {
    for (int64_t c = 0; c < n / 4; c++) {
        const int8_t *a = qs + 4 * c;
        int16_t T[16];
        T[0] = (int16_t)(-a[0] - a[1] - a[2] - a[3]);
        for (int idx = 1; idx < 16; idx++) {
            const int low = idx & -idx, bit = low == 1 ? 0 : low == 2 ? 1 : low == 4 ? 2 : 3;
            T[idx] = (int16_t)(T[idx & (idx - 1)] + 2 * a[bit]);
        }
        uint8_t *o = lut + 32 * c;
        for (int idx = 0; idx < 16; idx++) {   /* little-endian int16, as the kernel loads them */
            o[2 * idx] = (uint8_t)((uint16_t)T[idx] & 0xFF);
            o[2 * idx + 1] = (uint8_t)((uint16_t)T[idx] >> 8);
        }
    }
}

