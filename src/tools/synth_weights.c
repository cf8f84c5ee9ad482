/* synth_weights.c: the weight generator behind `bitspark synth`.
 *
 * Matrices are drawn one 128-element group at a time from the tensor's own RNG stream: one word
 * for the group's magnitude s, then 2 words of sign bits (binary) or 4 words of 2-bit codes
 * (ternary). Q1_0 and the Q2_0 family store exactly those bits, so their blocks are written
 * directly without going through floats (this is what makes the 27B preset fast); every other
 * type expands the group to floats and goes through the format table's quantizer. s is rounded
 * to 8 significant bits, so it is exact in fp16, bf16 and f32 and the quantizers reproduce it:
 * a q1_0 file dequantizes to exactly the f32 file of the same seed. */
#include "tools/synth_impl.h"
#include "cpu/compute.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 128
#define CHUNK_BYTES ((size_t)4 << 20)

typedef struct group {
    float s;
    uint8_t q[32];   /* binary: 16 bytes of sign bits (1 = +s), LSB first; ternary: 32 bytes of
                        Q2_0 codes (c - 1) * s, element j in bits 2*(j%4) of byte j/4 */
} group;

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h ^ (seed * 0x9e3779b97f4a7c15ull);
}

/* Random byte -> 4 ternary codes. 2-bit draws 0, 1, 2 give -s, 0, +s; draw 3 gives -s or +s by
 * position, so P(0) = 1/4 and the signs stay balanced. */
static uint8_t ternary_lut[256];
static void init_ternary_lut(void) {
    if (ternary_lut[255]) return;
    for (int b = 0; b < 256; b++) {
        uint8_t out = 0;
        for (int k = 0; k < 4; k++) {
            int v = (b >> (2 * k)) & 3;
            int code = v < 3 ? v : (k & 1 ? 2 : 0);
            out |= (uint8_t)(code << (2 * k));
        }
        ternary_lut[b] = out;
    }
}

/* 8 significant bits and a normal fp16 exponent: exact in f32, f16 and bf16. */
static float round_scale(float s) {
    if (s < 0x1p-14f) s = 0x1p-14f;
    if (s > 60000.0f) s = 60000.0f;
    return bs_bf16_to_f32(bs_f32_to_bf16(s));
}

static void put_words(uint8_t *dst, bs_rng *r, int n_words) {
    for (int i = 0; i < n_words; i++) {
        uint64_t x = bs_rng_next(r);
        for (int k = 0; k < 8; k++) dst[8 * i + k] = (uint8_t)(x >> (8 * k));
    }
}

/* rms: the RMS the group's entries should have (ternary entries are zero a quarter of the time,
 * so s is larger by 1/sqrt(3/4)). */
static void draw_group(bs_rng *r, float rms, enum bs_synth_values v, group *g) {
    float u = (float)bs_rng_uniform(r);
    float s = rms * (0.75f + 0.5f * u);
    if (v == BS_SYNTH_TERNARY) {
        g->s = round_scale(s * 1.1547005f);
        put_words(g->q, r, 4);
        for (int i = 0; i < 32; i++) g->q[i] = ternary_lut[g->q[i]];
    } else {
        g->s = round_scale(s);
        put_words(g->q, r, 2);
    }
}

static float group_value(const group *g, enum bs_synth_values v, int j) {
    if (v == BS_SYNTH_TERNARY) return (float)(((g->q[j / 4] >> (2 * (j % 4))) & 3) - 1) * g->s;
    return (g->q[j / 8] >> (j % 8)) & 1 ? g->s : -g->s;
}

static void store_f16(uint8_t *p, float v) {
    uint16_t h = bs_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static bool is_direct(int type) {
    return type == BS_Q1_0 || type == BS_Q2_0 || type == BS_PQ2_0 || type == BS_Q2_0_G64;
}

bool synth_can_generate(int type) {
    const bs_type_traits *tt = bs_type_get(type);
    return tt && (is_direct(type) || tt->from_float);
}

/* One row of a direct type into out. */
static void direct_row(bs_rng *r, const synth_tensor *t, uint8_t *out) {
    const int64_t ne0 = t->ne[0];
    group g;
    for (int64_t j = 0; j < ne0; j += GROUP) {
        draw_group(r, t->a, t->values, &g);
        if (t->type == BS_Q1_0) {
            store_f16(out, g.s);
            memcpy(out + 2, g.q, 16);
            out += 18;
        } else if (t->type == BS_Q2_0_G64) {
            int64_t n64 = BS_MIN(GROUP, ne0 - j) / 64;   /* rows may end with half a group */
            for (int64_t k = 0; k < n64; k++) {
                store_f16(out, g.s);
                memcpy(out + 2, g.q + 16 * k, 16);
                out += 18;
            }
        } else {
            store_f16(out, g.s);
            memcpy(out + 2, g.q, 32);
            out += 34;
        }
    }
}

/* One row through floats (tail groups shorter than 128 still draw a whole group, so the stream
 * does not depend on the type). */
static void float_row(bs_rng *r, const synth_tensor *t, float *row) {
    group g;
    for (int64_t j = 0; j < t->ne[0]; j += GROUP) {
        draw_group(r, t->a, t->values, &g);
        int64_t n = BS_MIN(GROUP, t->ne[0] - j);
        for (int64_t k = 0; k < n; k++) row[j + k] = group_value(&g, t->values, (int)k);
    }
}

static int write_matrix(gguf_writer *w, const bs_synth_config *c, const synth_tensor *t, bs_rng *r) {
    const size_t row_bytes = bs_row_size(t->type, t->ne[0]);
    const int64_t rows_per_chunk = BS_MAX(1, (int64_t)(CHUNK_BYTES / row_bytes));
    uint8_t *buf = bs_xmalloc((size_t)rows_per_chunk * row_bytes);
    bs_rotation rot;   /* rotated rows go through floats */
    float *signs = synth_folded(c, t) ? synth_fold_rotation(c, t, &rot) : NULL;
    float *row = is_direct(t->type) && !signs ? NULL : bs_xmalloc((size_t)t->ne[0] * sizeof *row);
    int rc = 0;
    for (int64_t r0 = 0; r0 < t->ne[1] && !rc; r0 += rows_per_chunk) {
        int64_t nr = BS_MIN(rows_per_chunk, t->ne[1] - r0);
        for (int64_t i = 0; i < nr && !rc; i++) {
            uint8_t *dst = buf + (size_t)i * row_bytes;
            if (row) {
                float_row(r, t, row);
                if (signs) bs_rotate_rows(&rot, row, row, 1, NULL);
                rc = bs_quantize(t->type, row, dst, t->ne[0]);
            } else {
                direct_row(r, t, dst);
            }
        }
        if (!rc) rc = gguf_w_write(w, buf, (size_t)nr * row_bytes);
    }
    free(signs);
    free(row);
    free(buf);
    return rc;
}

static float draw_scalar(bs_rng *r, const synth_tensor *t) {
    switch (t->fill) {
    case SYNTH_NORMAL: return t->a + t->b * bs_rng_normal(r);
    case SYNTH_UNIFORM: return t->a + (t->b - t->a) * (float)bs_rng_uniform(r);
    case SYNTH_NEG_EXP: return -expf(t->a + (t->b - t->a) * (float)bs_rng_uniform(r));
    default: return 0.0f;
    }
}

/* Vectors and small tensors (norms, biases, conv, ssm_a): whole tensor at once. */
static int write_small(gguf_writer *w, const synth_tensor *t, bs_rng *r) {
    int64_t n = t->ne[0] * t->ne[1];
    float *v = bs_xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = draw_scalar(r, t);
    size_t nb = (size_t)bs_tensor_size(t->type, t->ne[0], (uint64_t)t->ne[1]);
    uint8_t *out = bs_xmalloc(nb);
    int rc = bs_quantize(t->type, v, out, n);
    if (!rc) rc = gguf_w_write(w, out, nb);
    free(out);
    free(v);
    return rc;
}

int synth_write_tensor(gguf_writer *w, const bs_synth_config *c, const synth_tensor *t) {
    bs_rng r;
    bs_rng_seed(&r, tensor_seed(c->seed, t->name));
    init_ternary_lut();
    return t->fill == SYNTH_MATRIX ? write_matrix(w, c, t, &r) : write_small(w, t, &r);
}
