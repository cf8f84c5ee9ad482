/* quant.c: the format table. One row per type; the codecs live in quant_<family>.c. */
#include "formats/quant.h"
#include "formats/quant_impl.h"
#include "io/util.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

/* Float types convert activations to their own format (F16 / BF16 round to nearest even, as
 * ggml's CPU backend does before ggml_vec_dot_f16 / _bf16); F32 uses them as they are. */
#define FLOATT(t, n, id, sz, pre, act) \
    {t, n, id, 1, sz, false, bs_##pre##_to_float, bs_##pre##_from_float, t, act, bs_##pre##_dot}
/* Quantized types: vec_dot_type and its x86 activation quantizer. */
#define QUANT(t, n, id, blck, sz, pre, vdt, act) \
    {t, n, id, blck, sz, true, bs_##pre##_to_float, bs_##pre##_from_float, vdt, act, bs_##pre##_dot}

static const bs_type_traits table[] = {
    FLOATT(BS_F32,  "f32",  0,  4, f32,  NULL),
    FLOATT(BS_F16,  "f16",  1,  2, f16,  bs_f16_from_float),
    FLOATT(BS_BF16, "bf16", 30, 2, bf16, bs_bf16_from_float),
    /*    type         name        ggml blck size  codec   vec_dot_type  act_from_float */
    QUANT(BS_Q4_0,     "q4_0",     2,   32,  18,  q4_0,   BS_Q8_0, bs_q8_0_act),
    QUANT(BS_Q4_1,     "q4_1",     3,   32,  20,  q4_1,   BS_Q8_1, bs_q8_1_act),
    QUANT(BS_Q8_0,     "q8_0",     8,   32,  34,  q8_0,   BS_Q8_0, bs_q8_0_act),
    QUANT(BS_Q8_1,     "q8_1",     9,   32,  36,  q8_1,   BS_Q8_1, bs_q8_1_act),
    QUANT(BS_Q6_K,     "q6_k",     14,  256, 210, q6_k,   BS_Q8_K, bs_q8_k_from_float),
    QUANT(BS_Q8_K,     "q8_k",     15,  256, 292, q8_k,   BS_Q8_K, bs_q8_k_from_float),
    {BS_I8,  "i8",  24, 1, 1, false, NULL, NULL, BS_I8,  NULL, NULL},
    {BS_I16, "i16", 25, 1, 2, false, NULL, NULL, BS_I16, NULL, NULL},
    {BS_I32, "i32", 26, 1, 4, false, NULL, NULL, BS_I32, NULL, NULL},
    QUANT(BS_TQ1_0,    "tq1_0",    34,  256, 54,  tq1_0,  BS_Q8_K, bs_q8_k_from_float),
    QUANT(BS_TQ2_0,    "tq2_0",    35,  256, 66,  tq2_0,  BS_Q8_K, bs_q8_k_from_float),
    QUANT(BS_Q1_0,     "q1_0",     41,  128, 18,  q1_0,   BS_Q8_0, bs_q8_0_act),
    QUANT(BS_Q2_0,     "q2_0",     42,  128, 34,  q2_0,   BS_Q8_0, bs_q8_0_act),
    QUANT(BS_Q2_0_G64, "q2_0_g64", 42,  64,  18,  q2_0_g64, BS_Q8_0, bs_q8_0_act),
    /* PQ2_0 is the legacy 128-group Q2_0 byte for byte under its own id. */
    QUANT(BS_PQ2_0,    "pq2_0",    142, 128, 34,  q2_0,   BS_Q8_0, bs_q8_0_act),
    /* PTQ1_0: PQ2_0's trits base-3 packed (TQ1_0's packing, 128-blocks), the same dot. */
    QUANT(BS_PTQ1_0,   "ptq1_0",   143, 128, 28,  ptq1_0, BS_Q8_0, bs_q8_0_act),
};
#undef FLOATT
#undef QUANT

const bs_type_traits *bs_type_get(int type) {
    for (size_t i = 0; i < BS_ARRAY_LEN(table); i++)
        if (table[i].type == type) return &table[i];
    return NULL;
}

const char *bs_type_name(int type) {
    const bs_type_traits *t = bs_type_get(type);
    return t ? t->name : "unknown";
}

int bs_type_from_name(const char *name) {
    for (size_t i = 0; i < BS_ARRAY_LEN(table); i++)
        if (strcasecmp(table[i].name, name) == 0) return table[i].type;
    return BS_TYPE_INVALID;
}

int bs_types_for_ggml_id(uint32_t id, int out[2]) {
    int n = 0;
    for (size_t i = 0; i < BS_ARRAY_LEN(table) && n < 2; i++)
        if ((uint32_t)table[i].ggml_id == id) out[n++] = table[i].type;
    return n;
}

size_t bs_row_size(int type, int64_t ne0) {
    const bs_type_traits *t = bs_type_get(type);
    if (!t || ne0 < 0 || ne0 % t->blck) return 0;
    return (size_t)(ne0 / t->blck) * t->type_size;
}

uint64_t bs_tensor_size(int type, int64_t ne0, uint64_t nrows) {
    const bs_type_traits *t = bs_type_get(type);
    uint64_t row, total;
    if (!t || ne0 <= 0 || ne0 % t->blck) return UINT64_MAX;
    if (bs_mul_overflow((uint64_t)(ne0 / t->blck), t->type_size, &row)) return UINT64_MAX;
    if (bs_mul_overflow(row, nrows, &total)) return UINT64_MAX;
    return total;
}

double bs_type_bpw(int type) {
    const bs_type_traits *t = bs_type_get(type);
    return t ? (double)t->type_size * 8.0 / (double)t->blck : 0.0;
}

int bs_dequantize(int type, const void *src, float *dst, int64_t n) {
    const bs_type_traits *t = bs_type_get(type);
    if (!t || !t->to_float) return bs_error("cannot dequantize type %s", bs_type_name(type));
    if (n % t->blck) return bs_error("%s: %lld values is not a multiple of the block size %lld",
                                     t->name, (long long)n, (long long)t->blck);
    t->to_float(src, dst, n);
    return 0;
}

int bs_quantize(int type, const float *src, void *dst, int64_t n) {
    const bs_type_traits *t = bs_type_get(type);
    if (!t || !t->from_float) return bs_error("cannot quantize to type %s", bs_type_name(type));
    if (n % t->blck) return bs_error("%s: %lld values is not a multiple of the block size %lld",
                                     t->name, (long long)n, (long long)t->blck);
    t->from_float(src, dst, n);
    return 0;
}
