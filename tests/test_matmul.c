/* test_matmul.c: bs_matmul / bs_get_rows / bs_weight_from_tensor (the reference path).
 *  - every weight type: y = W x against a float64 dot of the dequantized weight rows and the
 *    activations as the type's vec_dot_type sees them (converted with act_from_float and
 *    dequantized again; F32 as is), within f32 accumulation error;
 *  - row-count invariance: row r of an 8-row call is bit-identical to a 1-row call on row r;
 *  - get_rows equals dequantizing the row; bad ids and bad tensors are refused. */
#include "cpu/matmul.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

static const int TYPES[] = {BS_F32, BS_F16, BS_BF16, BS_Q4_0, BS_Q4_1, BS_Q8_0, BS_Q8_1, BS_Q6_K,
                            BS_Q8_K, BS_TQ1_0, BS_TQ2_0, BS_Q1_0, BS_Q2_0, BS_Q2_0_G64, BS_PQ2_0};

static float h(const uint8_t *p) { return bs_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Q4_1 x Q8_1 takes the m term from the activation's stored s = fp16(d32 * sum q) rather than
 * fp16(d) * sum q: allowed slack per block |m_w| * |s - d * sum q|. */
static double q4_1_slack(const uint8_t *w, const uint8_t *a, int64_t n) {
    double slack = 0;
    for (int64_t b = 0; b < n / 32; b++, w += 20, a += 36) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (int8_t)a[4 + j];
        slack += fabs(h(w + 2)) * fabs(h(a + 2) - (double)h(a) * sum);
    }
    return slack;
}

static void test_type(int type) {
    enum { NE0 = 512, NE1 = 7, NR = 8 };
    const bs_type_traits *t = bs_type_get(type), *v = bs_type_get(t->vec_dot_type);
    static float wf[NE0 * NE1], wd[NE0 * NE1], x[NE0 * NR], xd[NE0], y8[NE1 * NR], y1[NE1];
    bs_rng r;
    bs_rng_seed(&r, (uint64_t)type + 1);
    for (int i = 0; i < NE0 * NE1; i++) wf[i] = bs_rng_normal(&r) * 0.05f;
    for (int i = 0; i < NE0 * NR; i++) x[i] = bs_rng_normal(&r) * (i < NE0 ? 40.0f : 1.0f);
    size_t row = bs_row_size(type, NE0);
    uint8_t *wq = malloc(row * NE1), *xq = malloc(bs_row_size(t->vec_dot_type, NE0) + 4 * NE0);
    CHECK(bs_quantize(type, wf, wq, NE0 * NE1) == 0);
    CHECK(bs_dequantize(type, wq, wd, NE0 * NE1) == 0);
    bs_weight W = {.type = type, .ne0 = NE0, .ne1 = NE1, .data = wq, .row_bytes = row, .name = "w"};

    bs_matmul(&W, x, NR, y8, NULL);
    int bad = 0, diff_rows = 0;
    for (int rr = 0; rr < NR; rr++) {
        if (t->act_from_float) {
            t->act_from_float(x + rr * NE0, xq, NE0);
            v->to_float(xq, xd, NE0);
        } else {
            memcpy(xd, x + rr * NE0, sizeof xd);
        }
        for (int o = 0; o < NE1; o++) {
            double ref = 0, mag = 0;
            for (int i = 0; i < NE0; i++) {
                ref += (double)wd[o * NE0 + i] * xd[i];
                mag += fabs((double)wd[o * NE0 + i] * xd[i]);
            }
            double tol = 4e-6 * mag + 1e-9;
            if (type == BS_Q4_1) tol += q4_1_slack(wq + o * row, xq, NE0);
            double got = y8[rr * NE1 + o];
            if (fabs(got - ref) > tol) {
                if (bad++ < 3) fprintf(stderr, "%s row %d out %d: %.9g vs float64 %.9g (tol %.3g)\n", t->name, rr, o, got, ref, tol);
            }
        }
        bs_matmul(&W, x + rr * NE0, 1, y1, NULL);
        diff_rows += memcmp(y1, y8 + rr * NE1, sizeof y1) != 0;
    }
    CHECKF(bad == 0, "%s: %d outputs outside tolerance", t->name, bad);
    CHECKF(diff_rows == 0, "%s: %d rows differ between 1-row and 8-row calls", t->name, diff_rows);

    /* get_rows */
    int32_t ids[3] = {6, 0, 6};
    float got[3 * NE0];
    CHECK(bs_get_rows(&W, ids, 3, got) == 0);
    CHECK(memcmp(got, wd + 6 * NE0, NE0 * 4) == 0);
    CHECK(memcmp(got + NE0, wd, NE0 * 4) == 0);
    CHECK(memcmp(got + 2 * NE0, wd + 6 * NE0, NE0 * 4) == 0);
    int32_t badid[2] = {0, NE1};
    CHECK(bs_get_rows(&W, badid, 2, got) == -1);
    badid[1] = -1;
    CHECK(bs_get_rows(&W, badid, 2, got) == -1);
    free(wq);
    free(xq);
}

static void test_weight_from_tensor(void) {
    static uint8_t data[36 * 3];   /* 3 rows of 2 Q1_0 blocks */
    gguf_tensor t = {.name = "blk.0.w", .n_dims = 2, .ne = {256, 3, 1, 1}, .type = BS_Q1_0,
                     .nbytes = sizeof data, .data = data};
    bs_weight w;
    CHECK(bs_weight_from_tensor(&w, &t) == 0);
    CHECK(w.type == BS_Q1_0 && w.ne0 == 256 && w.ne1 == 3 && w.row_bytes == 36 && w.data == data);
    t.nbytes = sizeof data - 1;
    CHECK(bs_weight_from_tensor(&w, &t) == -1);          /* data too short */
    t.nbytes = sizeof data;
    t.ne[0] = 200;
    CHECK(bs_weight_from_tensor(&w, &t) == -1);          /* not a multiple of the block */
    t.ne[0] = 256;
    t.n_dims = 3; t.ne[2] = 2;
    CHECK(bs_weight_from_tensor(&w, &t) == -1);          /* 3-D */
    t.n_dims = 2; t.ne[2] = 1;
    t.type = BS_I32;
    CHECK(bs_weight_from_tensor(&w, &t) == -1);          /* no dot product */
    t.type = BS_F32; t.n_dims = 1; t.ne[0] = 4; t.ne[1] = 1;
    CHECK(bs_weight_from_tensor(&w, &t) == 0);           /* 1-D: one row */
    CHECK(w.ne1 == 1 && w.row_bytes == 16);
}

int main(void) {
    for (size_t i = 0; i < BS_ARRAY_LEN(TYPES); i++) test_type(TYPES[i]);
    test_weight_from_tensor();
    return test_summary("test_matmul");
}
