/* test_hadamard.c: PrismML's Hadamard fold (Bonsai 2, prism.hadamard.*).
 *
 * - bs_rotate_rows against the matrix written out from its definition, H[r][c] =
 *   (-1)^popcount(r & c) / sqrt(B), the signs before it (forward) or after it (inverse), the V
 *   heads regrouped first; forward then inverse is the identity; rows do not depend on the batch.
 * - Products: a folded weight (rows stored rotated) gives the plain weight's products; grouped
 *   products with mixed folded and plain weights equal one product at a time, bit for bit; LoRA
 *   terms see x as given.
 * - A folded model (synth --hadamard) gives the plain model's logits; each broken key of the
 *   fold is refused with an error that names it. (Against an independent float64 reference:
 *   tests/test_ref_vs_engine.py; on the Vulkan device: tests/test_vulkan_model.py.) */
#include "bitspark.h"
#include "cpu/compute.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/threadpool.h"
#include "io/util.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "dspark/dspark.h"
#include "test.h"
#include "tools/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double hmat(int r, int c, int block) {
    return (__builtin_popcount((unsigned)(r & c)) & 1 ? -1.0 : 1.0) / sqrt((double)block);
}

/* The definition in float64: P, then signs, then H per block (or H, then signs). */
static void reference(const bs_rotation *r, const float *x, double *y) {
    const int64_t n = r->width;
    double *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = x[i];
    if (r->perm_hd)
        for (int i = 0; i < r->perm_rep; i++)
            for (int k = 0; k < r->perm_nk; k++)
                for (int d = 0; d < r->perm_hd; d++)
                    p[((int64_t)k * r->perm_rep + i) * r->perm_hd + d] = x[((int64_t)i * r->perm_nk + k) * r->perm_hd + d];
    if (!r->inverse && r->signs)
        for (int64_t i = 0; i < n; i++) p[i] *= r->signs[i];
    for (int64_t b = 0; b < n; b += r->block)
        for (int i = 0; i < r->block; i++) {
            double s = 0;
            for (int j = 0; j < r->block; j++) s += hmat(i, j, r->block) * p[b + j];
            y[b + i] = s;
        }
    if (r->inverse && r->signs)
        for (int64_t i = 0; i < n; i++) y[i] *= r->signs[i];
    free(p);
}

static float *random_vec(bs_rng *g, int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = bs_rng_normal(g);
    return v;
}

static float *random_signs(bs_rng *g, int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = bs_rng_next(g) & 1 ? -1.0f : 1.0f;
    return v;
}

static void test_rotation(void) {
    bs_rng g;
    bs_rng_seed(&g, 11);
    const struct { int block; int64_t width; int hd, nk, rep; } cases[] = {
        {2, 6, 0, 0, 0}, {8, 24, 0, 0, 0}, {64, 192, 0, 0, 0}, {32, 96, 16, 2, 3}, {128, 384, 64, 2, 3}, {16, 48, 8, 3, 2},
    };
    bs_pool *pool = bs_pool_new(2);
    for (size_t c = 0; c < BS_ARRAY_LEN(cases); c++)
        for (int inv = 0; inv < 2; inv++) {
            const int64_t n = cases[c].width, rows = 5;
            float *signs = random_signs(&g, n), *x = random_vec(&g, n * rows), *y = malloc((size_t)(n * rows) * sizeof *y);
            bs_rotation r = {cases[c].block, n, signs, inv ? 0 : cases[c].hd, cases[c].nk, cases[c].rep, inv};
            bs_rotate_rows(&r, x, y, rows, pool);
            double *want = malloc((size_t)n * sizeof *want), worst = 0;
            for (int64_t t = 0; t < rows; t++) {
                reference(&r, x + t * n, want);
                for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(want[i] - y[t * n + i]));
                float one[512];   /* a row alone: the same bits as in the batch */
                bs_rotate_rows(&r, x + t * n, one, 1, NULL);
                CHECKF(!memcmp(one, y + t * n, (size_t)n * sizeof *one), "case %zu inverse %d: row %lld depends on its batch",
                       c, inv, (long long)t);
            }
            CHECKF(worst < 1e-5, "case %zu inverse %d: %g from the definition", c, inv, worst);
            if (!inv) {   /* and back: the inverse undoes the forward rotation without P */
                bs_rotation ri = r;
                ri.perm_hd = 0;
                ri.inverse = 1;
                r.perm_hd = 0;
                bs_rotate_rows(&r, x, y, rows, NULL);
                bs_rotate_rows(&ri, y, y, rows, NULL);
                double e = 0;
                for (int64_t i = 0; i < n * rows; i++) e = fmax(e, fabs(y[i] - x[i]));
                CHECKF(e < 1e-5, "case %zu: inverse(forward(x)) is %g from x", c, e);
            }
            free(want), free(signs), free(x), free(y);
        }
    bs_pool_free(pool);
}

/* A weight whose rows are stored rotated multiplies like the plain one; in a group with plain
 * weights and a LoRA-carrying folded weight, each output is what bs_matmul alone gives. */
static void test_products(void) {
    enum { IN = 256, OUT = 48, ROWS = 3 };
    bs_rng g;
    bs_rng_seed(&g, 12);
    float *signs = random_signs(&g, IN), *w = random_vec(&g, IN * OUT), *wf = malloc(sizeof(float) * IN * OUT);
    bs_rotation r = {64, IN, signs, 0, 0, 0, 0};
    bs_rotate_rows(&r, w, wf, OUT, NULL);   /* the stored rows: w' = H (s * w) */
    bs_weight plain = {.type = BS_F32, .ne0 = IN, .ne1 = OUT, .data = w, .row_bytes = IN * 4, .name = "plain"};
    bs_weight folded = plain;
    folded.data = wf;
    folded.name = "folded";
    folded.rot = &r;
    float *x = random_vec(&g, IN * ROWS), yp[OUT * ROWS], yf[OUT * ROWS];
    bs_matmul(&plain, x, ROWS, yp, NULL);
    bs_matmul(&folded, x, ROWS, yf, NULL);
    double e = 0;
    for (int i = 0; i < OUT * ROWS; i++) e = fmax(e, fabs(yp[i] - yf[i]));
    CHECKF(e < 1e-4, "a folded weight's products are %g from the plain weight's", e);

    float la[2 * IN], lb[OUT * 2];
    for (int i = 0; i < 2 * IN; i++) la[i] = 0.01f * (float)(i % 7) - 0.03f;
    for (int i = 0; i < OUT * 2; i++) lb[i] = 0.02f * (float)(i % 5) - 0.04f;
    bs_lora_tensor lt = {.name = "folded", .in = IN, .out = OUT, .r = 2, .scale = 1, .a = la, .b = lb};
    bs_lora_ref ref = {&lt, 0.5f, NULL};
    bs_weight folded_lora = folded, plain_lora = plain;
    folded_lora.lora = plain_lora.lora = &ref;
    bs_matmul(&plain_lora, x, ROWS, yp, NULL);
    bs_matmul(&folded_lora, x, ROWS, yf, NULL);
    e = 0;
    for (int i = 0; i < OUT * ROWS; i++) e = fmax(e, fabs(yp[i] - yf[i]));
    CHECKF(e < 1e-4, "LoRA terms on a folded weight are %g from the plain weight's (x rotated for them?)", e);

    const bs_weight *ws[] = {&folded, &plain, &folded_lora, &folded};
    float out[4][OUT * ROWS], alone[OUT * ROWS];
    float *ys[] = {out[0], out[1], out[2], out[3]};
    bs_matmul_group(ws, 4, x, ROWS, ys, NULL);
    for (int k = 0; k < 4; k++) {
        bs_matmul(ws[k], x, ROWS, alone, NULL);
        CHECKF(!memcmp(alone, out[k], sizeof alone), "grouped product %d differs from bs_matmul alone", k);
    }
    free(signs), free(w), free(wf), free(x);
}

/* --- models ------------------------------------------------------------------------------------ */
static const char *tmpdir;

static int synth(const char *path, int hadamard) {
    bs_synth_config c;
    if (bs_synth_preset("tiny", &c)) return -1;
    c.seed = 5;
    c.matrix_type = c.embd_type = c.output_type = c.ssm_ab_type = BS_F32;
    c.hadamard = hadamard;
    bs_synth_derive(&c, false, false);
    return bs_synth_validate(&c) || bs_synth_write(&c, path) ? -1 : 0;
}

static float *logits_of(const char *path, const int32_t *toks, int n) {
    bs_model *m = bs_model_load(path, NULL);
    if (!m) return NULL;
    bs_session *s = bs_session_new(m, NULL);
    float *out = s ? malloc(sizeof(float) * (size_t)n * (size_t)bs_model_n_vocab(m)) : NULL;
    if (out && bs_eval(s, toks, n, BS_LOGITS_ALL, out, NULL)) { free(out); out = NULL; }
    bs_session_free(s);
    bs_model_free(m);
    return out;
}

static void test_model(const char *plain, const char *folded) {
    const int32_t toks[] = {3, 70, 511, 9, 200, 45};
    const int n = 6;
    float *a = logits_of(plain, toks, n), *b = logits_of(folded, toks, n);
    CHECKF(a && b, "evaluating: %s", bitspark_last_error());
    if (a && b) {
        double num = 0, den = 0;
        for (int i = 0; i < n * 1024; i++) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += a[i] * (double)a[i];
        CHECKF(sqrt(num / den) < 1e-5, "the folded model's logits are %g (relative L2) from the plain model's",
               sqrt(num / den));
    }
    free(a), free(b);
}

/* --- LoRA on a folded model: at run time (the terms see x as given) and merged (the deltas
 * stored rotated like the rows they join) --------------------------------------------------- */
static const char *const LORA_TARGETS[] = {"blk.0.ssm_out.weight", "blk.1.ffn_up.weight", "blk.3.attn_output.weight"};
enum { LORA_R = 2 };

static int write_adapter(const char *path, const char *base) {
    gguf_file *f = gguf_open(base, 0);
    if (!f) return -1;
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_str(w, "general.type", "adapter");
    gguf_w_set_str(w, "adapter.type", "lora");
    gguf_w_set_f32(w, "adapter.lora.alpha", 4.0f);
    int64_t ne[3][2];
    for (int t = 0; t < 3; t++) {
        const gguf_tensor *x = gguf_find_tensor(f, LORA_TARGETS[t]);
        ne[t][0] = x->ne[0], ne[t][1] = x->ne[1];
        char n[128];
        int64_t nea[2] = {ne[t][0], LORA_R}, neb[2] = {LORA_R, ne[t][1]};
        snprintf(n, sizeof n, "%s.lora_a", LORA_TARGETS[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, nea);
        snprintf(n, sizeof n, "%s.lora_b", LORA_TARGETS[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, neb);
    }
    bs_rng g;
    bs_rng_seed(&g, 31);
    for (int t = 0; t < 3; t++)
        for (int ab = 0; ab < 2; ab++) {
            const int64_t n = LORA_R * ne[t][ab];
            float *v = random_vec(&g, n);
            for (int64_t i = 0; i < n; i++) v[i] *= 0.05f;
            gguf_w_write(w, v, (size_t)n * sizeof *v);
            free(v);
        }
    gguf_close(f);
    return gguf_w_close(w);
}

static float *lora_logits(const char *model, const char *adapter, const int32_t *toks, int n) {
    bs_model *m = bs_model_load(model, NULL);
    bs_lora *l = m ? bs_lora_load(adapter, m->file) : NULL;
    float *out = NULL;
    if (l && !bs_lora_attach(m, l, 1.0f)) {
        bs_session *s = bs_session_new(m, NULL);
        out = s ? malloc(sizeof(float) * (size_t)n * (size_t)bs_model_n_vocab(m)) : NULL;
        if (out && bs_eval(s, toks, n, BS_LOGITS_ALL, out, NULL)) { free(out); out = NULL; }
        bs_session_free(s);
        bs_lora_detach(m);
    }
    bs_lora_free(l);
    bs_model_free(m);
    return out;
}

static int merge(const char *base, const char *adapter, const char *out) {
    gguf_file *f = gguf_open(base, 0);
    bs_lora *l = f ? bs_lora_load(adapter, f) : NULL;
    const bs_lora *ls[] = {l};
    const float scales[] = {1.0f};
    bs_lora_merge_params p = {.base = base, .out = out, .loras = ls, .scales = scales, .n_loras = 1,
                              .type = BS_TYPE_INVALID, .quiet = true};
    bs_lora_merge_stats st;
    const int rc = l ? bs_lora_merge(&p, &st) : -1;
    bs_lora_free(l);
    gguf_close(f);
    return rc;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (double)(a[i] - b[i]), den += a[i] * (double)a[i];
    return sqrt(num / den);
}

static void test_lora(const char *plain, const char *folded) {
    char adapter[1024], mp[1024], mf[1024];
    snprintf(adapter, sizeof adapter, "%s/hadamard_lora.gguf", tmpdir);
    snprintf(mp, sizeof mp, "%s/hadamard_merged_plain.gguf", tmpdir);
    snprintf(mf, sizeof mf, "%s/hadamard_merged_folded.gguf", tmpdir);
    const int32_t toks[] = {8, 300, 41, 1000, 7};
    const int n = 5;
    CHECKF(!write_adapter(adapter, plain), "adapter: %s", bitspark_last_error());
    CHECKF(!merge(plain, adapter, mp) && !merge(folded, adapter, mf), "merging: %s", bitspark_last_error());
    float *base = logits_of(plain, toks, n), *rp = lora_logits(plain, adapter, toks, n),
          *rf = lora_logits(folded, adapter, toks, n), *gp = logits_of(mp, toks, n), *gf = logits_of(mf, toks, n);
    CHECKF(base && rp && rf && gp && gf, "evaluating: %s", bitspark_last_error());
    if (base && rp && rf && gp && gf) {
        const size_t k = (size_t)n * 1024;
        CHECKF(rel_l2(base, rp, k) > 1e-3, "the adapter changes too little (%g) to tell anything", rel_l2(base, rp, k));
        CHECKF(rel_l2(rp, rf, k) < 1e-5, "run-time LoRA on the folded model: %g from the plain model's", rel_l2(rp, rf, k));
        CHECKF(rel_l2(rp, gp, k) < 1e-5, "merged into the plain model: %g from run-time LoRA", rel_l2(rp, gp, k));
        CHECKF(rel_l2(rp, gf, k) < 1e-5, "merged into the folded model: %g from run-time LoRA (deltas not rotated?)",
               rel_l2(rp, gf, k));
    }
    free(base), free(rp), free(rf), free(gp), free(gf);
}

typedef struct edit {
    const char *what, *key;
    enum { SET_U32, SET_STR, SET_BOOL, SET_NAMES, SET_I32S, SET_ARR, DROP } how;
    uint32_t u;
    const char *s;             /* SET_STR; SET_NAMES: comma-separated, "+x" appends x to the file's list */
    int32_t i32[4];            /* SET_I32S: [0] < 0 changes element -[0] - 1 of the file's array to [1],
                                  else keeps its first [1] elements; SET_ARR: the array [0], [1] */
    const char *expect;
} edit;

/* A copy of src with e's change (and without the tensor drop, if any). */
static int write_copy(const gguf_file *src, const edit *e, const char *path, const char *drop) {
    gguf_writer *w = gguf_w_open(path);
    if (!w) return -1;
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_w_set_value(w, src->kv[i].key.s, &src->kv[i].val);
    const gguf_kv *kv = gguf_find_kv(src, e->key);
    if (e->how == SET_U32) gguf_w_set_u32(w, e->key, e->u);
    if (e->how == SET_STR) gguf_w_set_str(w, e->key, e->s);
    if (e->how == SET_BOOL) gguf_w_set_bool(w, e->key, e->u != 0);
    if (e->how == DROP) gguf_w_remove(w, e->key);
    if (e->how == SET_ARR) gguf_w_set_arr_i32(w, e->key, e->i32, 2);
    if (e->how == SET_NAMES) {
        const char *names[512];
        uint64_t n = 0;
        if (e->s[0] == '+' && kv)
            for (; n < kv->val.n && n < 500; n++) names[n] = ((const gguf_str *)kv->val.arr)[n].s;
        names[n++] = e->s[0] == '+' ? e->s + 1 : e->s;
        gguf_w_set_arr_str(w, e->key, names, n);
    }
    if (e->how == SET_I32S && kv) {
        int32_t *v = malloc(kv->val.n * sizeof *v);
        for (uint64_t i = 0; i < kv->val.n; i++) { int64_t x; gguf_arr_elem_i64(&kv->val, i, &x); v[i] = (int32_t)x; }
        uint64_t n = kv->val.n;
        if (e->i32[0] < 0) v[-e->i32[0] - 1] = e->i32[1];
        else n = (uint64_t)e->i32[1];   /* [0] >= 0: keep the first [1] elements */
        gguf_w_set_arr_i32(w, e->key, v, n);
        free(v);
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) < 0) { gguf_w_abort(w); return -1; }
    }
    for (uint64_t i = 0; i < src->n_tensors; i++)
        if (!(drop && !strcmp(src->tensors[i].name, drop)) &&
            gguf_w_write(w, src->tensors[i].data, (size_t)src->tensors[i].nbytes)) {
            gguf_w_abort(w);
            return -1;
        }
    return gguf_w_close(w);
}

/* A tied output (version 2, or 1 without output.weight): the latent token table multiplies the
 * rotated final norm, and gives its rows back through the inverse. */
static void test_tied(const char *plain, const char *folded) {
    char tp[1024], tf[1024], t1[1024];
    snprintf(tp, sizeof tp, "%s/hadamard_tied_plain.gguf", tmpdir);
    snprintf(tf, sizeof tf, "%s/hadamard_tied_v2.gguf", tmpdir);
    snprintf(t1, sizeof t1, "%s/hadamard_tied_v1.gguf", tmpdir);
    const edit same = {"tied plain", "general.name", SET_STR, 0, "tied", {0}, NULL},
               v2 = {"tied v2", "prism.hadamard.version", SET_U32, 2, NULL, {0}, NULL},
               v1 = {"tied v1", "prism.hadamard.version", SET_U32, 1, NULL, {0}, NULL};
    const char *out = "output.weight";
    gguf_file *p = gguf_open(plain, 0), *f = gguf_open(folded, 0);
    CHECKF(p && f && !write_copy(p, &same, tp, out) && !write_copy(f, &v2, tf, out) && !write_copy(f, &v1, t1, out),
           "tied copies: %s", bitspark_last_error());
    gguf_close(p);
    gguf_close(f);
    const int32_t toks[] = {4, 90, 600, 31};
    float *a = logits_of(tp, toks, 4), *b = logits_of(tf, toks, 4), *c = logits_of(t1, toks, 4);
    CHECKF(a && b && c, "tied models: %s", bitspark_last_error());
    if (a && b && c) {
        CHECKF(rel_l2(a, b, 4 * 1024) < 1e-5, "tied, version 2: %g from the plain tied model", rel_l2(a, b, 4 * 1024));
        CHECKF(rel_l2(a, c, 4 * 1024) < 1e-5, "tied, version 1: %g from the plain tied model", rel_l2(a, c, 4 * 1024));
    }
    free(a), free(b), free(c);

    /* the same tied model in PTQ1_0: its table (the head too) runs as PQ2_0, the same bits */
    char pq[1024], pt[1024];
    snprintf(pq, sizeof pq, "%s/hadamard_tied_pq2_0.gguf", tmpdir);
    snprintf(pt, sizeof pt, "%s/hadamard_tied_ptq1_0.gguf", tmpdir);
    for (int k = 0; k < 2; k++) {
        bs_quantize_params qp;
        bs_quantize_params_init(&qp);
        qp.type = qp.output_type = qp.embd_type = k ? BS_PTQ1_0 : BS_PQ2_0;
        CHECKF(!bs_quantize_file(tf, k ? pt : pq, &qp), "quantizing: %s", bitspark_last_error());
        bs_quantize_params_free(&qp);
    }
    bs_model *m = bs_model_load(pt, NULL);
    CHECKF(m && m->tok_embd.type == BS_PQ2_0 && m->output.data == m->tok_embd.data && m->output.type == BS_PQ2_0,
           "a tied PTQ1_0 table: not transcoded for the head (%s)", m ? bs_type_name(m->output.type) : bitspark_last_error());
    bs_model_free(m);
    a = logits_of(pq, toks, 4), b = logits_of(pt, toks, 4);
    CHECKF(a && b && !memcmp(a, b, sizeof(float) * 4 * 1024), "tied: PTQ1_0 logits differ from PQ2_0's");
    free(a), free(b);
}

/* A drafter may fold its own LM head (output.weight only): its block's logits are the unfolded
 * drafter's; the rows of the head are stored rotated with the file's signs. */
static void test_drafter(void) {
    char plain[1024], folded[1024];
    snprintf(plain, sizeof plain, "%s/hadamard_drafter.gguf", tmpdir);
    snprintf(folded, sizeof folded, "%s/hadamard_drafter_folded.gguf", tmpdir);
    bs_synth_config c;
    bs_synth_preset("drafter-tiny", &c);
    c.seed = 6;
    bs_synth_derive(&c, false, false);
    CHECKF(!bs_synth_validate(&c) && !bs_synth_write(&c, plain), "drafter: %s", bitspark_last_error());
    gguf_file *src = gguf_open(plain, 0);
    const gguf_tensor *out = src ? gguf_find_tensor(src, "output.weight") : NULL;
    CHECKF(out && out->type == BS_F32, "the drafter preset's output.weight (f32) is missing");
    if (!out) { gguf_close(src); return; }
    bs_rng g;
    bs_rng_seed(&g, 77);
    const int64_t E = out->ne[0], V = out->ne[1];
    float *signs = random_signs(&g, E), *rows = malloc(sizeof(float) * (size_t)(E * V));
    bs_rotation r = {64, E, signs, 0, 0, 0, 0};
    bs_rotate_rows(&r, out->data, rows, V, NULL);
    gguf_writer *w = gguf_w_open(folded);
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_w_set_value(w, src->kv[i].key.s, &src->kv[i].val);
    int32_t *sv = malloc(sizeof(int32_t) * (size_t)E), wid = (int32_t)E;
    for (int64_t i = 0; i < E; i++) sv[i] = signs[i] > 0 ? 1 : -1;
    const char *names[] = {"output.weight"};
    gguf_w_set_u32(w, "prism.hadamard.block_size", 64);
    gguf_w_set_str(w, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
    gguf_w_set_str(w, "prism.hadamard.axis", "input-last-dimension");
    gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_widths", &wid, 1);
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_values", sv, (uint64_t)E);
    gguf_w_set_arr_str(w, "prism.hadamard.weight_names", names, 1);
    for (uint64_t i = 0; i < src->n_tensors; i++)
        gguf_w_add_tensor(w, src->tensors[i].name, src->tensors[i].type, src->tensors[i].n_dims, src->tensors[i].ne);
    for (uint64_t i = 0; i < src->n_tensors; i++)
        gguf_w_write(w, &src->tensors[i] == out ? (const void *)rows : src->tensors[i].data, (size_t)src->tensors[i].nbytes);
    CHECKF(!gguf_w_close(w), "writing the folded drafter: %s", bitspark_last_error());
    gguf_close(src);
    free(sv), free(rows), free(signs);

    float *lg[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        bs_dspark *d = bs_dspark_load(k ? folded : plain, NULL);
        CHECKF(d != NULL, "loading the drafter: %s", bitspark_last_error());
        if (!d) continue;
        CHECKF(!bs_dspark_to_device(d, NULL, "cpu"), "--device cpu for a folded drafter: %s", bitspark_last_error());
        bs_dspark_ctx *dc = bs_dspark_ctx_new(d, 64, NULL);
        const size_t row = (size_t)d->hp.n_taps * (size_t)d->hp.n_embd;
        float *taps = malloc(sizeof(float) * row * 3);
        bs_rng t;
        bs_rng_seed(&t, 5);
        for (size_t i = 0; i < row * 3; i++) taps[i] = bs_rng_normal(&t);
        const int B = d->hp.block_size;
        lg[k] = malloc(sizeof(float) * (size_t)B * (size_t)d->hp.n_vocab);
        CHECKF(dc && !bs_dspark_ctx_append(dc, taps, 3) && !bs_dspark_block(dc, 7, 3), "a drafter block: %s", bitspark_last_error());
        if (dc) bs_dspark_logits(dc, 0, B, lg[k]);
        if (k) {
            double num = 0, den = 0;
            for (size_t i = 0; i < (size_t)B * (size_t)d->hp.n_vocab; i++)
                num += (lg[0][i] - lg[1][i]) * (double)(lg[0][i] - lg[1][i]), den += lg[0][i] * (double)lg[0][i];
            CHECKF(sqrt(num / den) < 1e-5, "the folded drafter's block logits are %g from the plain drafter's", sqrt(num / den));
        }
        free(taps);
        bs_dspark_ctx_free(dc);
        bs_dspark_free(d);
    }
    free(lg[0]), free(lg[1]);
}

/* lora merge reads the V heads of ssm_out's regrouping from the metadata: ones that do not make
 * its rows' width are refused (they would regroup past the row). */
static void test_merge_hostile(const char *folded) {
    char path[1024], adapter[1024], out[1024];
    snprintf(path, sizeof path, "%s/hadamard_inner.gguf", tmpdir);
    snprintf(adapter, sizeof adapter, "%s/hadamard_lora.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/hadamard_inner_merged.gguf", tmpdir);
    const edit e = {"inner size", "qwen35.ssm.inner_size", SET_U32, 3840, NULL, {0}, NULL};
    gguf_file *src = gguf_open(folded, 0);
    CHECKF(src && !write_copy(src, &e, path, NULL), "copy: %s", bitspark_last_error());
    gguf_close(src);
    const int rc = merge(path, adapter, out);
    CHECKF(rc && strstr(bitspark_last_error(), "do not make an input width"), "merging with 6 V heads of 640: %s",
           rc ? bitspark_last_error() : "(merged)");
}

/* A drafter that stores a folded target's table and head (byte copies, no fold of its own, as
 * Bonsai 2 drafters carry them) borrows them with the target's fold: its blocks are the plain
 * pair's. One with the plain values borrows nothing from the folded target and uses its own. */
static float *pair_block(const char *target, const char *drafter, int want_borrowed) {
    bs_model *m = bs_model_load(target, NULL);
    bs_dspark *d = m ? bs_dspark_load(drafter, NULL) : NULL;
    float *out = NULL;
    if (d) {
        const int n = bs_dspark_share_embeddings(d, m, false);
        CHECKF(n == want_borrowed, "%s with %s: %d tensors borrowed, expected %d", drafter, target, n, want_borrowed);
        bs_dspark_ctx *dc = bs_dspark_ctx_new(d, 64, NULL);
        const size_t row = (size_t)d->hp.n_taps * (size_t)d->hp.n_embd, nl = (size_t)d->hp.block_size * (size_t)d->hp.n_vocab;
        float *taps = malloc(sizeof(float) * row * 3);
        bs_rng t;
        bs_rng_seed(&t, 8);
        for (size_t i = 0; i < row * 3; i++) taps[i] = bs_rng_normal(&t);
        out = malloc(sizeof(float) * nl);
        if (!dc || bs_dspark_ctx_append(dc, taps, 3) || bs_dspark_block(dc, 11, 3)) { free(out); out = NULL; }
        else bs_dspark_logits(dc, 0, d->hp.block_size, out);
        free(taps);
        bs_dspark_ctx_free(dc);
    }
    CHECKF(out != NULL, "a drafter block with %s: %s", target, bitspark_last_error());
    bs_dspark_free(d);
    bs_model_free(m);
    return out;
}

/* The drafter dp with the target's table and head (the target's types and bytes) into out. */
static void with_target_tensors(const char *dp, const char *target, const char *out) {
    gguf_file *src = gguf_open(dp, 0), *tf = gguf_open(target, 0);
    if (!src || !tf) { gguf_close(src); gguf_close(tf); CHECKF(false, "opening: %s", bitspark_last_error()); return; }
    gguf_writer *w = gguf_w_open(out);
    const gguf_tensor **t = malloc(sizeof *t * (size_t)src->n_tensors);
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_w_set_value(w, src->kv[i].key.s, &src->kv[i].val);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *x = &src->tensors[i], *f = gguf_find_tensor(tf, x->name);
        t[i] = f && (!strcmp(x->name, "token_embd.weight") || !strcmp(x->name, "output.weight")) ? f : x;
        gguf_w_add_tensor(w, x->name, t[i]->type, t[i]->n_dims, t[i]->ne);
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) gguf_w_write(w, t[i]->data, (size_t)t[i]->nbytes);
    CHECKF(!gguf_w_close(w), "writing: %s", bitspark_last_error());
    free(t);
    gguf_close(src);
    gguf_close(tf);
}

static void test_drafter_borrows(const char *plain, const char *folded) {
    char dp[1024], dc[1024], tq[1024], dq[1024];
    snprintf(dp, sizeof dp, "%s/hadamard_pair_drafter.gguf", tmpdir);
    snprintf(dc, sizeof dc, "%s/hadamard_pair_drafter_copies.gguf", tmpdir);
    snprintf(tq, sizeof tq, "%s/hadamard_pair_target_ptq1_0.gguf", tmpdir);
    snprintf(dq, sizeof dq, "%s/hadamard_pair_drafter_ptq1_0_copies.gguf", tmpdir);
    bs_synth_config c;
    bs_synth_preset("drafter-tiny", &c);
    c.seed = 5;   /* the target's seed and type: the same token table and head */
    bs_synth_derive(&c, false, false);
    CHECKF(!bs_synth_validate(&c) && !bs_synth_write(&c, dp), "drafter: %s", bitspark_last_error());
    with_target_tensors(dp, folded, dc);
    float *a = pair_block(plain, dp, 2), *b = pair_block(folded, dc, 2), *o = pair_block(folded, dp, 0);
    if (a && b && o) {
        const size_t n = 4 * 1024;
        CHECKF(rel_l2(a, b, n) < 1e-5, "a drafter with the folded target's copies: %g from the plain pair", rel_l2(a, b, n));
        CHECKF(rel_l2(a, o, n) < 1e-5, "a plain drafter beside the folded target: %g from the plain pair", rel_l2(a, o, n));
    }
    /* the target in PTQ1_0 (running as PQ2_0) and the drafter with its PTQ1_0 copies: both borrowed */
    bs_quantize_params qp;
    bs_quantize_params_init(&qp);
    qp.type = qp.output_type = qp.embd_type = BS_PTQ1_0;
    CHECKF(!bs_quantize_file(folded, tq, &qp), "quantizing: %s", bitspark_last_error());
    bs_quantize_params_free(&qp);
    with_target_tensors(dp, tq, dq);
    float *q = pair_block(tq, dq, 2);
    free(q);
    free(a), free(b), free(o);
}

static void test_refusals(const char *folded) {
    const edit cases[] = {
        {"version 3", "prism.hadamard.version", SET_U32, 3, NULL, {0}, "prism.hadamard.version 3 is not supported"},
        {"version 2, untied", "prism.hadamard.version", SET_U32, 2, NULL, {0}, "tied output"},
        {"block 48", "prism.hadamard.block_size", SET_U32, 48, NULL, {0}, "block_size 48 is not a power of two"},
        {"block too wide", "prism.hadamard.block_size", SET_U32, 1024, NULL, {0}, "does not divide"},
        {"no block", "prism.hadamard.block_size", DROP, 0, NULL, {0}, "prism.hadamard.block_size"},
        {"transform", "prism.hadamard.transform", SET_STR, 0, "dct", {0}, "transform 'dct' is not supported"},
        {"axis", "prism.hadamard.axis", SET_STR, 0, "output", {0}, "axis 'output' is not supported"},
        {"sign mode", "prism.hadamard.sign_mode", SET_STR, 0, "random", {0}, "sign_mode 'random'"},
        {"a sign of 0", "prism.hadamard.sign_values", SET_I32S, 0, NULL, {-5, 0}, "sign_values[4] is not +1 or -1"},
        {"signs cut short", "prism.hadamard.sign_values", SET_I32S, 0, NULL, {0, 300}, "the widths sum to another count"},
        /* (the tiny model's widths are 256, 512, 384: the same count of signs, none for 256) */
        {"a width without signs", "prism.hadamard.sign_widths", SET_ARR, 0, NULL, {768, 384}, "no sign vector for width 256"},
        {"a width twice", "prism.hadamard.sign_widths", SET_I32S, 0, NULL, {-2, 256}, "names width 256 twice"},
        {"not foldable", "prism.hadamard.weight_names", SET_NAMES, 0, "+blk.0.ssm_alpha.weight", {0}, "cannot fold"},
        {"not in the model", "prism.hadamard.weight_names", SET_NAMES, 0, "+blk.9.ffn_up.weight", {0},
         "'blk.9.ffn_up.weight', which is not a matrix"},
        {"named twice", "prism.hadamard.weight_names", SET_NAMES, 0, "+blk.0.ffn_up.weight", {0}, "twice"},
        {"inverse output", "prism.hadamard.inverse_weight_names", SET_NAMES, 0, "output.weight", {0}, "cannot fold"},
        {"unknown key", "prism.hadamard.rotation_seed", SET_U32, 1, NULL, {0}, "does not know"},
        {"grouped not a bool", "prism.hadamard.gdn_v_grouped", SET_STR, 0, "yes", {0}, "not a bool"},
        {"grouped 2", "prism.hadamard.gdn_v_grouped", SET_U32, 2, NULL, {0}, "not a bool"},
        {"grouped as 1", "prism.hadamard.gdn_v_grouped", SET_U32, 1, NULL, {0}, NULL},
        {"names not a list", "prism.hadamard.weight_names", SET_STR, 0, "output.weight", {0}, "not an array of names"},
        {"unchanged", "prism.hadamard.version", SET_U32, 1, NULL, {0}, NULL},
    };
    gguf_file *src = gguf_open(folded, 0);
    CHECKF(src != NULL, "opening %s: %s", folded, bitspark_last_error());
    if (!src) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/hadamard_case.gguf", tmpdir);
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const edit *e = &cases[i];
        if (write_copy(src, e, path, NULL)) { CHECKF(false, "%s: writing the copy: %s", e->what, bitspark_last_error()); continue; }
        bs_model *m = bs_model_load(path, NULL);
        const char *err = bitspark_last_error();
        if (!e->expect) CHECKF(m != NULL, "%s: %s", e->what, err);
        else {
            CHECKF(!m && strstr(err, e->expect), "%s: got '%s', expected an error with '%s'", e->what,
                   m ? "(loaded)" : err, e->expect);
            if (!m) printf("%-22s -> %s\n", e->what, err);
        }
        bs_model_free(m);
    }
    gguf_close(src);
}

int main(void) {
    tmpdir = getenv("BS_TMP");
    if (!tmpdir) { fprintf(stderr, "BS_TMP not set\n"); return 1; }
    test_rotation();
    test_products();
    char plain[1024], folded[1024];
    snprintf(plain, sizeof plain, "%s/hadamard_plain.gguf", tmpdir);
    snprintf(folded, sizeof folded, "%s/hadamard_folded.gguf", tmpdir);
    if (synth(plain, 0) || synth(folded, 64)) {
        fprintf(stderr, "synth: %s\n", bitspark_last_error());
        return 1;
    }
    test_model(plain, folded);
    test_lora(plain, folded);
    test_tied(plain, folded);
    test_merge_hostile(folded);
    test_drafter();
    test_drafter_borrows(plain, folded);
    test_refusals(folded);
    return test_summary("test_hadamard");
}
