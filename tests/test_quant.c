/* test_quant.c: the format table and every codec.
 *  - table: names, ids, sizes, bs_row_size / bs_tensor_size incl. bad shapes and overflow;
 *  - hand-computed blocks: bytes written out by reasoning from each layout (prism-fork.md §1-2,
 *    ggml's quantizers), both directions;
 *  - round trips within each format's stated error bound; idempotence where the format must be
 *    lossless (Q1_0 / Q2_0 / TQ on QAT-shaped ±s / {-s,0,s} blocks);
 *  - vec_dot against a float64 dot of the dequantized weights and dequantized activations;
 *  - PTQ1_0: blocks packed by a packer of this file, the transcoder to PQ2_0, and its dot bit for
 *    bit equal to PQ2_0's on the transcoded bytes. */
#include "formats/quant.h"
#include "io/util.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static const int ALL[] = {BS_F32, BS_F16, BS_BF16, BS_Q4_0, BS_Q4_1, BS_Q8_0, BS_Q8_1, BS_Q6_K,
                          BS_Q8_K, BS_TQ1_0, BS_TQ2_0, BS_Q1_0, BS_Q2_0, BS_Q2_0_G64, BS_PQ2_0,
                          BS_PTQ1_0};

static uint16_t h16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* --- table ------------------------------------------------------------------------------------ */
static void test_table(void) {
    static const struct { int type; const char *name; int id; int blck, size; } want[] = {
        {BS_F32, "f32", 0, 1, 4}, {BS_F16, "f16", 1, 1, 2}, {BS_BF16, "bf16", 30, 1, 2},
        {BS_Q4_0, "q4_0", 2, 32, 18}, {BS_Q4_1, "q4_1", 3, 32, 20}, {BS_Q8_0, "q8_0", 8, 32, 34},
        {BS_Q8_1, "q8_1", 9, 32, 36}, {BS_Q6_K, "q6_k", 14, 256, 210}, {BS_Q8_K, "q8_k", 15, 256, 292},
        {BS_TQ1_0, "tq1_0", 34, 256, 54}, {BS_TQ2_0, "tq2_0", 35, 256, 66},
        {BS_Q1_0, "q1_0", 41, 128, 18}, {BS_Q2_0, "q2_0", 42, 128, 34},
        {BS_Q2_0_G64, "q2_0_g64", 42, 64, 18}, {BS_PQ2_0, "pq2_0", 142, 128, 34},
        {BS_PTQ1_0, "ptq1_0", 143, 128, 28},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(want); i++) {
        const bs_type_traits *t = bs_type_get(want[i].type);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_STR(t->name, want[i].name);
        CHECK_EQ_INT(t->ggml_id, want[i].id);
        CHECK_EQ_INT(t->blck, want[i].blck);
        CHECK_EQ_INT(t->type_size, want[i].size);
        CHECK(t->to_float && t->from_float && t->vec_dot);
        CHECK_EQ_INT(bs_type_from_name(want[i].name), want[i].type);
        CHECK(bs_type_get(t->vec_dot_type) != NULL);
        CHECK((t->act_from_float != NULL) == (want[i].type != BS_F32));
    }
    CHECK_EQ_INT(bs_type_from_name("Q1_0"), BS_Q1_0);
    CHECK_EQ_INT(bs_type_from_name("nonsense"), BS_TYPE_INVALID);
    CHECK(bs_type_get(12345) == NULL);
    /* vec_dot_type pairs are ggml's CPU backend's. */
    CHECK_EQ_INT(bs_type_get(BS_Q1_0)->vec_dot_type, BS_Q8_0);
    CHECK_EQ_INT(bs_type_get(BS_Q2_0)->vec_dot_type, BS_Q8_0);
    CHECK_EQ_INT(bs_type_get(BS_Q4_0)->vec_dot_type, BS_Q8_0);
    CHECK_EQ_INT(bs_type_get(BS_Q4_1)->vec_dot_type, BS_Q8_1);
    CHECK_EQ_INT(bs_type_get(BS_Q6_K)->vec_dot_type, BS_Q8_K);
    CHECK_EQ_INT(bs_type_get(BS_TQ1_0)->vec_dot_type, BS_Q8_K);
    /* PTQ1_0 takes PQ2_0's activations (the x86 Q8_0 quantizer), so the two dot the same rows. */
    CHECK_EQ_INT(bs_type_get(BS_PTQ1_0)->vec_dot_type, BS_Q8_0);
    CHECK(bs_type_get(BS_PTQ1_0)->act_from_float == bs_type_get(BS_PQ2_0)->act_from_float);
    CHECK(bs_type_get(BS_PTQ1_0)->act_from_float == bs_type_get(BS_Q8_0)->act_from_float);
    CHECK_EQ_INT(bs_type_from_name("PTQ1_0"), BS_PTQ1_0);
    CHECK_EQ_INT(bs_type_get(BS_F16)->vec_dot_type, BS_F16);
    CHECK_EQ_INT(bs_type_get(BS_BF16)->vec_dot_type, BS_BF16);

    int ids[2];
    CHECK_EQ_INT(bs_types_for_ggml_id(42, ids), 2);
    CHECK(ids[0] == BS_Q2_0 && ids[1] == BS_Q2_0_G64);
    CHECK_EQ_INT(bs_types_for_ggml_id(41, ids), 1);
    CHECK_EQ_INT(ids[0], BS_Q1_0);
    CHECK_EQ_INT(bs_types_for_ggml_id(7, ids), 0);
    CHECK_EQ_INT(bs_types_for_ggml_id(143, ids), 1);
    CHECK_EQ_INT(ids[0], BS_PTQ1_0);

    /* Bonsai-27B: a 5120-wide Q1_0 row is 40 blocks = 720 bytes. */
    CHECK_EQ_INT(bs_row_size(BS_Q1_0, 5120), 720);
    CHECK_EQ_INT(bs_row_size(BS_Q2_0, 5120), 40 * 34);
    CHECK_EQ_INT(bs_row_size(BS_Q2_0_G64, 5120), 80 * 18);
    CHECK_EQ_INT(bs_row_size(BS_Q1_0, 100), 0);       /* not a multiple of 128 */
    CHECK_EQ_INT(bs_row_size(BS_Q1_0, -128), 0);
    CHECK_EQ_INT(bs_row_size(12345, 128), 0);
    CHECK_EQ_INT(bs_row_size(BS_F32, 3), 12);
    CHECK(bs_tensor_size(BS_Q1_0, 5120, 17408) == 720ull * 17408);
    CHECK(bs_tensor_size(BS_Q1_0, 100, 1) == UINT64_MAX);
    CHECK(bs_tensor_size(BS_Q1_0, 0, 1) == UINT64_MAX);
    CHECK(bs_tensor_size(12345, 128, 1) == UINT64_MAX);
    CHECK(bs_tensor_size(BS_F32, INT64_C(1) << 40, UINT64_C(1) << 30) == UINT64_MAX);
    CHECK(bs_tensor_size(BS_F32, INT64_C(1) << 62, 1) == UINT64_MAX);   /* 2^64 bytes */
    CHECK(bs_tensor_size(BS_F32, INT64_C(1) << 61, 1) == UINT64_C(1) << 63);
    CHECK(bs_tensor_size(BS_F32, 1, UINT64_MAX) == UINT64_MAX);
    CHECK(fabs(bs_type_bpw(BS_Q1_0) - 1.125) < 1e-12);
    CHECK(fabs(bs_type_bpw(BS_Q2_0) - 2.125) < 1e-12);
    CHECK(fabs(bs_type_bpw(BS_Q2_0_G64) - 2.25) < 1e-12);
    CHECK(fabs(bs_type_bpw(BS_PTQ1_0) - 1.75) < 1e-12);
    CHECK_EQ_INT(bs_row_size(BS_PTQ1_0, 5120), 40 * 28);
    CHECK_EQ_INT(bs_row_size(BS_PTQ1_0, 64), 0);

    float f[128] = {0};
    uint8_t buf[64];
    CHECK(bs_quantize(BS_Q1_0, f, buf, 100) == -1);   /* not a multiple of the block */
    CHECK(bs_dequantize(BS_Q1_0, buf, f, 100) == -1);
    CHECK(bs_quantize(BS_I8, f, buf, 4) == -1);       /* no codec */
    CHECK(bs_dequantize(12345, buf, f, 4) == -1);
}

/* --- hand-computed blocks --------------------------------------------------------------------- */
static void test_q1_0_block(void) {
    float x[128], y[128];
    uint8_t b[18];
    /* +0.5 on even, -0.5 on odd elements: d = mean|w| = 0.5 = fp16 0x3800; bit j set for even j,
     * i.e. 0b01010101 in every byte (LSB = element 8k). */
    for (int j = 0; j < 128; j++) x[j] = j % 2 ? -0.5f : 0.5f;
    bs_quantize(BS_Q1_0, x, b, 128);
    CHECK_EQ_INT(h16(b), 0x3800);
    for (int k = 0; k < 16; k++) CHECK_EQ_INT(b[2 + k], 0x55);
    bs_dequantize(BS_Q1_0, b, y, 128);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* 0.0 counts as positive; d = (1 + 3 + 0*126) / 128 = 1/32 = fp16 0x2800. */
    memset(x, 0, sizeof x);
    x[0] = -1.0f; x[9] = 3.0f;
    bs_quantize(BS_Q1_0, x, b, 128);
    CHECK_EQ_INT(h16(b), 0x2800);
    CHECK_EQ_INT(b[2], 0xfe);      /* element 0 negative, 1..7 zero -> set */
    CHECK_EQ_INT(b[3], 0xff);
    bs_dequantize(BS_Q1_0, b, y, 128);
    CHECK(y[0] == -1.0f / 32 && y[1] == 1.0f / 32 && y[9] == 1.0f / 32);
}

static void test_q2_0_block(int type, int qk) {
    float x[128], y[128];
    uint8_t b[34];
    size_t nq = (size_t)qk / 4;
    /* Codes written by hand: byte 0xE4 = 0b11_10_01_00 holds codes 0,1,2,3 for elements 0..3,
     * which decode to -d, 0, +d, +2d. */
    memset(b, 0, sizeof b);
    b[0] = 0x00; b[1] = 0x3c;      /* d = 1.0 */
    memset(b + 2, 0xE4, nq);
    bs_dequantize(type, b, y, qk);
    for (int j = 0; j < qk; j++) CHECKF(y[j] == (float)(j % 4) - 1.0f, "%s element %d = %g", bs_type_name(type), j, y[j]);
    /* Ternary {-s, 0, s, 0} with s = 0.25 (fp16 0x3400): codes 0,1,2,1 = 0b01_10_01_00 = 0x64. */
    for (int j = 0; j < qk; j++) x[j] = (float)((j % 4 == 0) ? -1 : (j % 4 == 2) ? 1 : 0) * 0.25f;
    bs_quantize(type, x, b, qk);
    CHECK_EQ_INT(h16(b), 0x3400);
    for (size_t k = 0; k < nq; k++) CHECK_EQ_INT(b[2 + k], 0x64);
    bs_dequantize(type, b, y, qk);
    CHECK(memcmp(x, y, (size_t)qk * 4) == 0);
    /* Rounding: d = max|w| = 1; w = 0.5 -> roundf(0.5) = 1 (half away from zero) -> code 2,
     * w = -0.5 -> -1 -> code 0, w = 0.49 -> 0 -> code 1. */
    memset(x, 0, sizeof x);
    x[0] = 1.0f; x[1] = 0.5f; x[2] = -0.5f; x[3] = 0.49f;
    bs_quantize(type, x, b, qk);
    CHECK_EQ_INT(b[2], 2 | 2 << 2 | 0 << 4 | 1 << 6);
}

static void test_tq_blocks(void) {
    float x[256], y[256];
    uint8_t b[66];
    /* TQ1_0: element 0 = +1 (trit 2), element 32 = -1 (trit 0): they are trits 0 and 1 of
     * qs[0]; the other trits are 1 (zero). v = 2*81 + 0*27 + 9 + 3 + 1 = 175, stored as
     * ceil(175*256/243) = 185. Bytes with five zero trits: v = 121 -> ceil(127.47) = 128. qh
     * holds four trits shifted one place up: v = 40*3 = 120 -> ceil(126.42) = 127. d = 1. */
    memset(x, 0, sizeof x);
    x[0] = 1.0f; x[32] = -1.0f;
    bs_quantize(BS_TQ1_0, x, b, 256);
    CHECK_EQ_INT(b[0], 185);
    for (int m = 1; m < 48; m++) CHECK_EQ_INT(b[m], 128);
    for (int j = 48; j < 52; j++) CHECK_EQ_INT(b[j], 127);
    CHECK_EQ_INT(h16(b + 52), 0x3c00);
    bs_dequantize(BS_TQ1_0, b, y, 256);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* Element order through all three stages: element 160+16n+m is trit n of qs[32+m], element
     * 240+4n+j is trit n of qh[j]. Put -1 at 161 (n=0, m=1) and +1 at 247 (n=1, j=3):
     * qs[33] = ceil((0*81 + 27+9+3+1)*256/243) = ceil(42.14) = 43,
     * qh[3] = ceil((27 + 2*9 + 3 + 1)*3*256/243) = ceil(154.86) = 155. */
    memset(x, 0, sizeof x);
    x[161] = -2.0f; x[247] = 2.0f;
    bs_quantize(BS_TQ1_0, x, b, 256);
    CHECK_EQ_INT(b[33], 43);
    CHECK_EQ_INT(b[51], 155);
    CHECK_EQ_INT(h16(b + 52), 0x4000);
    bs_dequantize(BS_TQ1_0, b, y, 256);
    CHECK(memcmp(x, y, sizeof x) == 0);

    /* TQ2_0: element 128h + 32l + m is bits 2l of qs[32h + m]. +1 at 0, -1 at 32, +1 at 128:
     * qs[0] = 2 | 0<<2 | 1<<4 | 1<<6 = 0x52, qs[32] = 2 | 1<<2 | 1<<4 | 1<<6 = 0x56, rest 0x55. */
    memset(x, 0, sizeof x);
    x[0] = 0.5f; x[32] = -0.5f; x[128] = 0.5f;
    bs_quantize(BS_TQ2_0, x, b, 256);
    CHECK_EQ_INT(b[0], 0x52);
    CHECK_EQ_INT(b[32], 0x56);
    CHECK_EQ_INT(b[1], 0x55);
    CHECK_EQ_INT(b[63], 0x55);
    CHECK_EQ_INT(h16(b + 64), 0x3800);
    bs_dequantize(BS_TQ2_0, b, y, 256);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

static void test_q8_blocks(void) {
    const bs_type_traits *q80 = bs_type_get(BS_Q8_0), *q81 = bs_type_get(BS_Q8_1);
    float x[32] = {0};
    uint8_t b[36];
    /* amax = 127 -> d = 1 (0x3c00). llama-quantize (roundf) and the x86 activation path
     * (round half to even) differ on ties: 2.5 -> 3 vs 2, -2.5 -> -3 vs -2, 0.5 -> 1 vs 0,
     * 1.5 -> 2 both. */
    x[0] = 127.0f; x[1] = 2.5f; x[2] = -2.5f; x[3] = 0.5f; x[4] = 1.5f; x[5] = -127.0f;
    q80->from_float(x, b, 32);
    CHECK_EQ_INT(h16(b), 0x3c00);
    CHECK((int8_t)b[2] == 127 && (int8_t)b[3] == 3 && (int8_t)b[4] == -3 && (int8_t)b[5] == 1);
    CHECK((int8_t)b[6] == 2 && (int8_t)b[7] == -127 && b[8] == 0);
    q80->act_from_float(x, b, 32);
    CHECK_EQ_INT(h16(b), 0x3c00);
    CHECK((int8_t)b[2] == 127 && (int8_t)b[3] == 2 && (int8_t)b[4] == -2 && (int8_t)b[5] == 0);
    CHECK((int8_t)b[6] == 2 && (int8_t)b[7] == -127);
    /* Q8_1: same quants after the two halves of the header, s = d * sum(q). */
    q81->from_float(x, b, 32);
    CHECK_EQ_INT(h16(b), 0x3c00);
    CHECK_EQ_INT(h16(b + 2), bs_f32_to_f16(127 + 3 - 3 + 1 + 2 - 127));
    CHECK((int8_t)b[5] == 3);
    q81->act_from_float(x, b, 32);
    CHECK_EQ_INT(h16(b + 2), bs_f32_to_f16(127 + 2 - 2 + 0 + 2 - 127));
    CHECK((int8_t)b[5] == 2);
    /* The activation multiplier is 127/amax, not 1/d: d = fp16(0.3/127) and q = rint(x*127/0.3). */
    memset(x, 0, sizeof x);
    x[0] = 0.3f; x[1] = 0.15f;
    q80->act_from_float(x, b, 32);
    CHECK_EQ_INT(h16(b), bs_f32_to_f16(0.3f / 127.0f));
    CHECK((int8_t)b[2] == 127);
    CHECK((int8_t)b[3] == (int8_t)rintf(0.15f * (127.0f / 0.3f)));
    /* Find an (amax, x) whose quant differs between id = 127/amax and id = 1/(amax/127) and
     * check the activation path takes the first. */
    float am = 0, xs = 0;
    for (int k = 1; k < 2000 && xs == 0; k++) {
        float c_am = 0.1f + 0.001f * (float)k, ia = 127.0f / c_am, ir = 1.0f / (c_am / 127.0f);
        for (int i = 1; i < 2000 && xs == 0; i++) {
            float c = c_am * (float)i / 2000.0f;
            if (rintf(c * ia) != rintf(c * ir)) { am = c_am; xs = c; }
        }
    }
    CHECK(xs != 0);
    x[0] = am; x[1] = xs;
    q80->act_from_float(x, b, 32);
    CHECK((int8_t)b[3] == (int8_t)rintf(xs * (127.0f / am)));
    CHECK((int8_t)b[3] != (int8_t)rintf(xs * (1.0f / (am / 127.0f))));
    /* All-zero block: d = 0, quants 0. */
    memset(x, 0, sizeof x);
    q80->act_from_float(x, b, 32);
    CHECK(h16(b) == 0 && b[2] == 0 && b[33] == 0);

    /* Q8_K: the element of largest magnitude (-2) sets iscale = -127/-2 = 63.5, so -2 -> -127,
     * 1 -> nearest_int(63.5) = 64 (half to even), 2 -> 127,
     * 0.5 -> 31.75 -> 32. d = 1/63.5 as f32. bsums[0] = -127 + 64 + 127 + 32 = 96. */
    float k[256] = {0};
    uint8_t kb[292];
    k[0] = -2.0f; k[1] = 1.0f; k[2] = 2.0f; k[3] = 0.5f; k[16] = 1.0f;
    bs_quantize(BS_Q8_K, k, kb, 256);
    float d;
    memcpy(&d, kb, 4);
    CHECK(d == 1.0f / 63.5f);
    CHECK((int8_t)kb[4] == -127 && (int8_t)kb[5] == 64 && (int8_t)kb[6] == 127 && (int8_t)kb[7] == 32);
    int16_t bs0, bs1;
    memcpy(&bs0, kb + 4 + 256, 2);
    memcpy(&bs1, kb + 4 + 256 + 2, 2);
    CHECK_EQ_INT(bs0, 96);
    CHECK_EQ_INT(bs1, 64);
    /* A positive extremum: iscale = -127/2, so +2 -> -127 (d negative). */
    memset(k, 0, sizeof k);
    k[0] = 2.0f; k[1] = -1.0f;
    bs_quantize(BS_Q8_K, k, kb, 256);
    memcpy(&d, kb, 4);
    CHECK(d == -2.0f / 127.0f);
    CHECK((int8_t)kb[4] == -127 && (int8_t)kb[5] == 64);
}

static void test_q4_blocks(void) {
    float x[32], y[32];
    uint8_t b[20];
    /* Q4_0: x[j] = j%16 - 8; the first element of largest magnitude is x[0] = -8, so
     * d = -8 / -8 = 1 and nibble = trunc(x + 8.5) = j%16: byte j = j | j<<4 = 0x11*j. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16 - 8);
    bs_quantize(BS_Q4_0, x, b, 32);
    CHECK_EQ_INT(h16(b), 0x3c00);
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b[2 + j], 0x11 * j);
    bs_dequantize(BS_Q4_0, b, y, 32);
    CHECK(memcmp(x, y, sizeof x) == 0);
    /* A positive extremum gives a negative d: x = {8, -7, 0...}: d = -1, 8 -> 8*-1 + 8.5 -> 0,
     * -7 -> 15, 0 -> 8. */
    memset(x, 0, sizeof x);
    x[0] = 8.0f; x[1] = -7.0f;
    bs_quantize(BS_Q4_0, x, b, 32);
    CHECK_EQ_INT(h16(b), 0xbc00);
    CHECK_EQ_INT(b[2], 0x80);
    CHECK_EQ_INT(b[3], 0x8f);
    /* Q4_1: x[j] = j%16 - 2: min -2 (fp16 0xc000), d = 15/15 = 1, nibble = x + 2 = j%16. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16 - 2);
    bs_quantize(BS_Q4_1, x, b, 32);
    CHECK_EQ_INT(h16(b), 0x3c00);
    CHECK_EQ_INT(h16(b + 2), 0xc000);
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b[4 + j], 0x11 * j);
    bs_dequantize(BS_Q4_1, b, y, 32);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* Q6_K decoded from the layout description independently of the codec: element
 * 128h + l + 32k (l < 32, k < 4) has low nibble (ql[64h + l + 32*(k&1)] >> 4*(k>>1)) & 15, high
 * bits (qh[32h + l] >> 2k) & 3, scale scales[8h + l/16 + 2k]. */
static void test_q6_k_block(void) {
    uint8_t b[210];
    float y[256];
    bs_rng r;
    bs_rng_seed(&r, 6);
    for (int i = 0; i < 208; i++) b[i] = (uint8_t)bs_rng_next(&r);
    b[208] = 0x00; b[209] = 0x3c;     /* d = 1 */
    bs_dequantize(BS_Q6_K, b, y, 256);
    int bad = 0;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++)
            for (int k = 0; k < 4; k++) {
                int lo = (b[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
                int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
                int sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * k];
                float want = (float)sc * (float)((lo | hi << 4) - 32);
                bad += y[128 * h + l + 32 * k] != want;
            }
    CHECK_EQ_INT(bad, 0);
}

/* --- round trips ------------------------------------------------------------------------------ */
static void gauss(bs_rng *r, float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = bs_rng_normal(r) * scale;
}

static float max_abs(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Per-block error bounds (h = 2^-11, the fp16 relative rounding of stored scales):
 *  Q8_0/Q8_1: |e| <= d/2 + 127*d*h      (d = amax/127; q rounds x/d, d is then stored in fp16)
 *  Q4_0:      |e| <= |d| (1 + 8h)        (|e| <= d/2, except -max which clamps from 16 to 15)
 *  Q4_1:      |e| <= d/2 + 15*d*h + |min|*h
 *  Q8_K:      |e| <= |d|/2 (f32 scale)
 *  F16/BF16:  half an ulp: |e| <= |x| 2^-11 / |x| 2^-8 (normal range; subnormal f16: 2^-25). */
static void test_round_trips(void) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    bs_rng r;
    bs_rng_seed(&r, 42);
    const double h = 1.0 / 2048;
    gauss(&r, x, N, 0.05f);
    x[5] = 0.0f; x[77] = -0.3f;

    struct { int type, qk; } t32[] = {{BS_Q8_0, 32}, {BS_Q8_1, 32}, {BS_Q4_0, 32}, {BS_Q4_1, 32}, {BS_Q8_K, 256}};
    for (size_t k = 0; k < BS_ARRAY_LEN(t32); k++) {
        int type = t32[k].type, qk = t32[k].qk, bad = 0;
        bs_quantize(type, x, q, N);
        bs_dequantize(type, q, y, N);
        for (int b = 0; b < N / qk; b++) {
            const float *xb = x + b * qk;
            float amax = max_abs(xb, qk), mn = xb[0], mx = xb[0];
            for (int j = 0; j < qk; j++) { mn = fminf(mn, xb[j]); mx = fmaxf(mx, xb[j]); }
            double bound;
            if (type == BS_Q8_0 || type == BS_Q8_1) bound = amax / 127.0 * (0.5 + 127 * h);
            else if (type == BS_Q4_0) bound = amax / 8.0 * (1 + 8 * h);
            else if (type == BS_Q4_1) bound = (mx - mn) / 15.0 * (0.5 + 15 * h) + fabs(mn) * h;
            else bound = amax / 127.0 * 0.5;
            bound = bound * (1 + 1e-6) + 1e-12;
            for (int j = 0; j < qk; j++) bad += fabs((double)xb[j] - y[b * qk + j]) > bound;
        }
        CHECKF(bad == 0, "%s: %d elements beyond the bound", bs_type_name(type), bad);
    }
    /* Q6_K: no closed-form per-element bound (searched scales); relative RMS error of 6-bit
     * quantization of Gaussian data is about 1%; require < 2%. */
    bs_quantize(BS_Q6_K, x, q, N);
    bs_dequantize(BS_Q6_K, q, y, N);
    double e2 = 0, x2 = 0;
    for (int i = 0; i < N; i++) { e2 += (x[i] - y[i]) * (x[i] - y[i]); x2 += x[i] * x[i]; }
    CHECKF(sqrt(e2 / x2) < 0.02, "q6_k relative rms error %g", sqrt(e2 / x2));

    /* Float formats. */
    int bad16 = 0, badbf = 0;
    bs_quantize(BS_F16, x, q, N);
    bs_dequantize(BS_F16, q, y, N);
    for (int i = 0; i < N; i++) bad16 += fabs(x[i] - y[i]) > fmax(fabs(x[i]) * h, 0x1p-25);
    bs_quantize(BS_BF16, x, q, N);
    bs_dequantize(BS_BF16, q, y, N);
    for (int i = 0; i < N; i++) badbf += fabs(x[i] - y[i]) > fabs(x[i]) / 256.0;
    CHECK_EQ_INT(bad16, 0);
    CHECK_EQ_INT(badbf, 0);
    bs_quantize(BS_F32, x, q, N);
    bs_dequantize(BS_F32, q, y, N);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* QAT-shaped data must survive quantize -> dequantize -> quantize unchanged, byte for byte:
 * Q1_0 blocks of ±s, Q2_0 / TQ blocks of {-s, 0, +s} with at least one ±s, s an fp16 value. */
static void test_lossless(void) {
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N], q2[N];
    bs_rng r;
    bs_rng_seed(&r, 7);
    const int types[] = {BS_Q1_0, BS_Q2_0, BS_Q2_0_G64, BS_PQ2_0, BS_TQ1_0, BS_TQ2_0, BS_PTQ1_0};
    for (size_t k = 0; k < BS_ARRAY_LEN(types); k++) {
        int type = types[k], qk = (int)bs_type_get(type)->blck;
        for (int b = 0; b < N / qk; b++) {
            float s = bs_f16_to_f32(bs_f32_to_f16((float)(0.001 + 0.05 * bs_rng_uniform(&r))));
            for (int j = 0; j < qk; j++) {
                int v = type == BS_Q1_0 ? (bs_rng_next(&r) & 1 ? 1 : -1) : (int)(bs_rng_next(&r) % 3) - 1;
                x[b * qk + j] = (float)v * s;
            }
            x[b * qk + (int)(bs_rng_next(&r) % (uint64_t)qk)] = -s;
        }
        bs_quantize(type, x, q, N);
        bs_dequantize(type, q, y, N);
        CHECKF(memcmp(x, y, sizeof x) == 0, "%s: QAT data not reproduced", bs_type_name(type));
        bs_quantize(type, y, q2, N);
        CHECKF(memcmp(q, q2, bs_row_size(type, N)) == 0, "%s: requantization changed bytes", bs_type_name(type));
    }
    /* Q2_0 and PQ2_0 are the same bytes. */
    bs_quantize(BS_Q2_0, x, q, N);
    bs_quantize(BS_PQ2_0, x, q2, N);
    CHECK(memcmp(q, q2, bs_row_size(BS_Q2_0, N)) == 0);
}

/* --- PTQ1_0 ----------------------------------------------------------------------------------- */
/* The spec's packing, written here apart from the codec: `count` trits (0..2), the first most
 * significant, a 4-trit byte shifted up one more place, stored as the smallest q with
 * q * 243 >= v * 256. */
static uint8_t ptq_pack(const int *tr, int count) {
    int v = 0;
    for (int i = 0; i < count; i++) v = 3 * v + tr[i];
    if (count == 4) v *= 3;
    int q = v * 256 / 243;
    if (q * 243 < v * 256) q++;
    return (uint8_t)q;
}

/* The element held by trit n of block byte `byte` (0..25): the stages 16, 8, then qh. */
static int ptq_element(int byte, int n) {
    if (byte < 16) return 16 * n + byte;
    if (byte < 24) return 80 + 8 * n + (byte - 16);
    return 120 + 2 * n + (byte - 24);
}

/* A PTQ1_0 block of trits t[128] and the fp16 bits d (stored last). */
static void ptq_block(const int *t, uint16_t d, uint8_t b[28]) {
    for (int byte = 0; byte < 26; byte++) {
        int count = byte < 24 ? 5 : 4, tr[5];
        for (int n = 0; n < count; n++) tr[n] = t[ptq_element(byte, n)];
        b[byte] = ptq_pack(tr, count);
    }
    b[26] = (uint8_t)d;
    b[27] = (uint8_t)(d >> 8);
}

/* Code of element e of a PQ2_0 block: bits 2*(e%4) of byte 2 + e/4. */
static int pq2_code(const uint8_t *p, int e) { return (p[2 + e / 4] >> (2 * (e % 4))) & 3; }

static void test_ptq1_0_block(void) {
    float x[128], y[128];
    uint8_t b[28], p[34];
    /* The helper's order visits every element once. */
    int seen[128] = {0}, dup = 0;
    for (int byte = 0; byte < 26; byte++)
        for (int n = 0; n < (byte < 24 ? 5 : 4); n++) seen[ptq_element(byte, n)]++;
    for (int e = 0; e < 128; e++) dup += seen[e] != 1;
    CHECK_EQ_INT(dup, 0);

    /* Bytes by hand, d = 0.5 (fp16 0x3800, bytes 26..27). +1 at element 0 = trit 0 of qs[0]:
     * v = 2*81 + 27+9+3+1 = 202 -> ceil(202*256/243) = 213. -1 at 79 = trit 4 of qs[15]: v = 120
     * -> 127. -1 at 101 = 80 + 8*2 + 5, trit 2 of qs[21]: v = 81+27+0+3+1 = 112 -> 118. +1 at
     * 127 = 120 + 2*3 + 1, trit 3 of qh[1]: v = (27+9+3+2)*3 = 123 -> 130. Five zero trits:
     * v = 121 -> 128; qh's four: v = 40*3 = 120 -> 127. */
    memset(x, 0, sizeof x);
    x[0] = 0.5f; x[79] = -0.5f; x[101] = -0.5f; x[127] = 0.5f;
    bs_quantize(BS_PTQ1_0, x, b, 128);
    int off = 0;
    for (int m = 0; m < 24; m++)
        off += b[m] != (m == 0 ? 213 : m == 15 ? 127 : m == 21 ? 118 : 128);
    CHECK_EQ_INT(off, 0);
    CHECK_EQ_INT(b[24], 127);
    CHECK_EQ_INT(b[25], 130);
    CHECK_EQ_INT(h16(b + 26), 0x3800);
    bs_dequantize(BS_PTQ1_0, b, y, 128);
    CHECK(memcmp(x, y, sizeof x) == 0);

    /* Random trits through the spec's packer: decode, re-encode, transcode. */
    bs_rng r;
    bs_rng_seed(&r, 143);
    const uint16_t ds[] = {0x3c00, 0x2e66, 0x0400, 0x0001, 0x7bff, 0xb555, 0x1234, 0x4900};
    for (size_t k = 0; k < BS_ARRAY_LEN(ds); k++) {
        int t[128];
        for (int e = 0; e < 128; e++) t[e] = (int)(bs_rng_next(&r) % 3);
        t[bs_rng_next(&r) % 128] = 2;          /* at least one nonzero value */
        ptq_block(t, ds[k], b);
        bs_dequantize(BS_PTQ1_0, b, y, 128);
        float d = bs_f16_to_f32(ds[k]);
        int bad = 0;
        for (int e = 0; e < 128; e++) bad += y[e] != (float)(t[e] - 1) * d;
        CHECKF(bad == 0, "PTQ1_0 d 0x%04x: %d elements off the spec's order", ds[k], bad);
        bs_ptq1_0_to_pq2_0(b, p, 128);
        bad = h16(p) != ds[k];
        for (int e = 0; e < 128; e++) bad += pq2_code(p, e) != t[e];
        CHECKF(bad == 0, "PTQ1_0 d 0x%04x: transcoded codes differ", ds[k]);
        if (!(ds[k] & 0x8000)) {               /* positive d: the quantizer gives the bytes back */
            uint8_t b2[28];
            bs_quantize(BS_PTQ1_0, y, b2, 128);
            CHECKF(memcmp(b, b2, 28) == 0, "PTQ1_0 d 0x%04x: requantized bytes differ", ds[k]);
        }
    }
}

/* All-zero input and d = 0. */
static void test_ptq1_0_zero(void) {
    float x[128] = {0}, y[128], a[128];
    uint8_t b[28], p[34], aq[4 * 34];
    const bs_type_traits *t = bs_type_get(BS_PTQ1_0);
    /* zeros: d = 0 (id 0), every trit 1: qs bytes 128, qh bytes 127; decodes to +0 */
    bs_quantize(BS_PTQ1_0, x, b, 128);
    int bad = 0;
    for (int m = 0; m < 24; m++) bad += b[m] != 128;
    CHECK_EQ_INT(bad, 0);
    CHECK(b[24] == 127 && b[25] == 127 && h16(b + 26) == 0);
    memset(y, 0xff, sizeof y);
    bs_dequantize(BS_PTQ1_0, b, y, 128);
    CHECK(memcmp(x, y, sizeof x) == 0);
    bs_ptq1_0_to_pq2_0(b, p, 128);
    bad = h16(p) != 0;
    for (int k = 0; k < 32; k++) bad += p[2 + k] != 0x55;
    CHECK_EQ_INT(bad, 0);
    /* d = 0 with nonzero trits: every value is zero, the dot is 0, the codes survive transcoding */
    bs_rng r;
    bs_rng_seed(&r, 3);
    int tr[128];
    for (int e = 0; e < 128; e++) tr[e] = (int)(bs_rng_next(&r) % 3);
    ptq_block(tr, 0x0000, b);
    bs_dequantize(BS_PTQ1_0, b, y, 128);
    bad = 0;
    for (int e = 0; e < 128; e++) bad += y[e] != 0.0f;
    CHECK_EQ_INT(bad, 0);
    gauss(&r, a, 128, 1.0f);
    t->act_from_float(a, aq, 128);
    float s = 1.0f;
    t->vec_dot(128, &s, b, aq);
    CHECK(s == 0.0f);
    bs_ptq1_0_to_pq2_0(b, p, 128);
    bad = h16(p) != 0;
    for (int e = 0; e < 128; e++) bad += pq2_code(p, e) != tr[e];
    CHECK_EQ_INT(bad, 0);
    /* 28 zero bytes: every trit 0, i.e. -d = -0 everywhere, codes 0 */
    memset(b, 0, sizeof b);
    bs_dequantize(BS_PTQ1_0, b, y, 128);
    bad = 0;
    for (int e = 0; e < 128; e++) bad += y[e] != 0.0f;
    CHECK_EQ_INT(bad, 0);
    bs_ptq1_0_to_pq2_0(b, p, 128);
    bad = 0;
    for (int k = 0; k < 34; k++) bad += p[k] != 0;
    CHECK_EQ_INT(bad, 0);
}

/* PQ2_0 bytes (codes 0..2, d > 0, a nonzero code in each block) -> float -> PTQ1_0 -> PQ2_0 is
 * the identity, and both formats decode to the same floats. */
static void test_ptq1_0_from_pq2_0(void) {
    enum { N = 4096, NB = N / 128 };
    static uint8_t pq[NB * 34], pt[NB * 28], back[NB * 34];
    static float x[N], y[N];
    bs_rng r;
    bs_rng_seed(&r, 142);
    for (int i = 0; i < NB; i++) {
        uint8_t *blk = pq + 34 * i;
        uint16_t d = i == 0 ? 0x0001 : i == 1 ? 0x7bff : i == 2 ? 0x0400
                   : bs_f32_to_f16((float)(0.001 + 0.05 * bs_rng_uniform(&r)));
        blk[0] = (uint8_t)d;
        blk[1] = (uint8_t)(d >> 8);
        memset(blk + 2, 0, 32);
        int forced = (int)(bs_rng_next(&r) % 128);
        for (int e = 0; e < 128; e++) {
            int c = e == forced ? (bs_rng_next(&r) & 1 ? 2 : 0) : (int)(bs_rng_next(&r) % 3);
            blk[2 + e / 4] |= (uint8_t)(c << (2 * (e % 4)));
        }
    }
    bs_dequantize(BS_PQ2_0, pq, x, N);
    bs_quantize(BS_PTQ1_0, x, pt, N);
    bs_dequantize(BS_PTQ1_0, pt, y, N);
    CHECK(memcmp(x, y, sizeof x) == 0);
    bs_ptq1_0_to_pq2_0(pt, back, N);
    CHECK(memcmp(pq, back, sizeof pq) == 0);
}

/* dot(PTQ1_0 row) and dot(its PQ2_0 transcoding) give the same bits, for rows of ternary floats
 * quantized and for rows of random bytes (every byte decodes to trits), d of either sign. */
static void test_ptq1_0_dot(void) {
    enum { NMAX = 5120 };
    static float w[NMAX], a[NMAX];
    static uint8_t pt[NMAX / 128 * 28], pq[NMAX / 128 * 34], aq[NMAX / 32 * 34];
    const bs_type_traits *t = bs_type_get(BS_PTQ1_0), *q = bs_type_get(BS_PQ2_0);
    const int lens[] = {128, 256, 640, 5120};
    bs_rng r;
    bs_rng_seed(&r, 1430);
    int bad = 0, nonzero = 0, runs = 0;
    for (size_t li = 0; li < BS_ARRAY_LEN(lens); li++) {
        int n = lens[li];
        for (int trial = 0; trial < 8; trial++) {
            if (trial % 2 == 0) {
                for (int i = 0; i < n / 128; i++) {
                    float s = bs_f16_to_f32(bs_f32_to_f16((float)(0.002 + 0.1 * bs_rng_uniform(&r))));
                    for (int j = 0; j < 128; j++) w[128 * i + j] = (float)((int)(bs_rng_next(&r) % 3) - 1) * s;
                }
                bs_quantize(BS_PTQ1_0, w, pt, n);
            } else {
                for (int i = 0; i < n / 128; i++) {
                    uint8_t *blk = pt + 28 * i;
                    for (int k = 0; k < 26; k++) blk[k] = (uint8_t)bs_rng_next(&r);
                    uint16_t d = bs_f32_to_f16((float)((bs_rng_uniform(&r) - 0.5) * 0.2));
                    blk[26] = (uint8_t)d;
                    blk[27] = (uint8_t)(d >> 8);
                }
            }
            /* activations of very different sizes per 32-block, so the float order shows */
            for (int i = 0; i < n; i++) a[i] = bs_rng_normal(&r) * ldexpf(1.0f, (int)((i / 32) * 7 % 13) - 6);
            t->act_from_float(a, aq, n);
            bs_ptq1_0_to_pq2_0(pt, pq, n);
            float s1 = 0, s2 = 0;
            t->vec_dot(n, &s1, pt, aq);
            q->vec_dot(n, &s2, pq, aq);
            bad += memcmp(&s1, &s2, sizeof s1) != 0;
            nonzero += s1 != 0.0f;
            runs++;
        }
    }
    CHECKF(bad == 0, "PTQ1_0 vs PQ2_0 dot: %d of %d rows differ", bad, runs);
    CHECK_EQ_INT(nonzero, runs);
}

/* --- vec_dot ---------------------------------------------------------------------------------- */
/* Q4_1's dot uses the activation's stored s = fp16(d32 * sum q) for the m term, not
 * fp16(d) * sum q; the difference is part of llama.cpp's arithmetic. Its size per block. */
static double q8_1_s_slack(const uint8_t *wb, const uint8_t *ab, int64_t n) {
    double slack = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *w = wb + 20 * b, *a = ab + 36 * b;
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)a[4 + j];
        slack += fabs(bs_f16_to_f32(h16(w + 2))) * fabs(bs_f16_to_f32(h16(a + 2)) - (double)bs_f16_to_f32(h16(a)) * sum);
    }
    return slack;
}

static void test_vec_dot(void) {
    enum { N = 1024 };
    static float w[N], a[N], wd[N], ad[N];
    static uint8_t wq[N * 4], aq[N * 4];
    bs_rng r;
    bs_rng_seed(&r, 99);
    for (size_t k = 0; k < BS_ARRAY_LEN(ALL); k++) {
        const bs_type_traits *t = bs_type_get(ALL[k]), *v = bs_type_get(t->vec_dot_type);
        for (int trial = 0; trial < 4; trial++) {
            gauss(&r, w, N, 0.02f);
            gauss(&r, a, N, trial == 3 ? 30.0f : 1.0f);
            t->from_float(w, wq, N);
            t->to_float(wq, wd, N);
            if (t->act_from_float) t->act_from_float(a, aq, N);
            else memcpy(aq, a, sizeof a);
            v->to_float(aq, ad, N);
            double ref = 0, mag = 0;
            for (int i = 0; i < N; i++) { ref += (double)wd[i] * ad[i]; mag += fabs((double)wd[i] * ad[i]); }
            float got;
            t->vec_dot(N, &got, wq, aq);
            /* f32 accumulation over at most N/32 block terms (each exact or one rounding). */
            double tol = 4e-6 * mag + 1e-9;
            if (ALL[k] == BS_Q4_1) tol += q8_1_s_slack(wq, aq, N);
            CHECKF(fabs(got - ref) <= tol, "%s trial %d: dot %.9g, float64 %.9g, tol %.3g",
                   t->name, trial, got, ref, tol);
        }
    }
}

int main(void) {
    test_table();
    test_q1_0_block();
    test_q2_0_block(BS_Q2_0, 128);
    test_q2_0_block(BS_PQ2_0, 128);
    test_q2_0_block(BS_Q2_0_G64, 64);
    test_tq_blocks();
    test_q8_blocks();
    test_q4_blocks();
    test_q6_k_block();
    test_round_trips();
    test_lossless();
    test_vec_dot();
    test_ptq1_0_block();
    test_ptq1_0_zero();
    test_ptq1_0_from_pq2_0();
    test_ptq1_0_dot();
    return test_summary("test_quant");
}
