/* test_qwen35_load.c: the qwen35 loader on altered copies of tiny-f32.gguf ($BS_FIXTURES): each
 * alteration must fail with a one-line error naming the problem (the first mismatching tensor,
 * the refused key, ...), and the unaltered copy and layer-pattern overrides must load. */
#include "bitspark.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "test.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct edit {
    const char *what;
    const char *drop_tensor;        /* leave this tensor out */
    const char *halve_tensor;       /* declare this tensor with half its rows (and half the data) */
    const char *f16_tensor;         /* store this (f32) tensor as f16 */
    const char *str_key, *str_val;  /* set a string key */
    const char *u32_key;            /* set a u32 key to u32_val */
    uint32_t u32_val;
    bool all_recurrent;             /* attention.recurrent_layers = all true */
    const char *expect;             /* substring of the error; NULL: must load */
} edit;

static int write_copy(const gguf_file *src, const edit *e, const char *path) {
    gguf_writer *w = gguf_w_open(path);
    if (!w) return -1;
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_w_set_value(w, src->kv[i].key.s, &src->kv[i].val);
    if (e->str_key) gguf_w_set_str(w, e->str_key, e->str_val);
    if (e->u32_key) gguf_w_set_u32(w, e->u32_key, e->u32_val);
    if (e->all_recurrent) {
        uint8_t flags[8];
        memset(flags, 1, sizeof flags);
        gguf_value v = {.type = GGUF_TYPE_ARRAY};
        v.arr_type = GGUF_TYPE_BOOL;
        v.n = sizeof flags;
        v.arr = flags;
        gguf_w_set_value(w, "qwen35.attention.recurrent_layers", &v);
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        int64_t ne[GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        if (e->halve_tensor && !strcmp(t->name, e->halve_tensor)) ne[1] /= 2;
        int type = e->f16_tensor && !strcmp(t->name, e->f16_tensor) ? BS_F16 : t->type;
        if (gguf_w_add_tensor(w, t->name, type, t->n_dims, ne) < 0) { gguf_w_abort(w); return -1; }
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        size_t n = (size_t)t->nbytes;
        int rc;
        if (e->f16_tensor && !strcmp(t->name, e->f16_tensor)) {
            uint16_t *h = malloc(n / 2);
            for (size_t j = 0; j < n / 4; j++) h[j] = bs_f32_to_f16(((const float *)t->data)[j]);
            rc = gguf_w_write(w, h, n / 2);
            free(h);
        } else {
            if (e->halve_tensor && !strcmp(t->name, e->halve_tensor)) n /= 2;
            rc = gguf_w_write(w, t->data, n);
        }
        if (rc) { gguf_w_abort(w); return -1; }
    }
    return gguf_w_close(w);
}

int main(void) {
    const char *fix = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    if (!fix || !tmp) { fprintf(stderr, "BS_FIXTURES / BS_TMP not set\n"); return 1; }
    char src_path[1024], path[1024];
    snprintf(src_path, sizeof src_path, "%s/tiny-f32.gguf", fix);
    snprintf(path, sizeof path, "%s/qwen35_load_case.gguf", tmp);
    gguf_file *src = gguf_open(src_path, 0);
    if (!src) { fprintf(stderr, "%s\n", bs_last_error()); return 1; }

    const edit cases[] = {
        {.what = "unaltered copy", .expect = NULL},
        {.what = "missing tensor", .drop_tensor = "blk.0.ssm_a", .expect = "missing tensor blk.0.ssm_a"},
        {.what = "wrong shape", .halve_tensor = "blk.3.attn_q.weight",
         .expect = "blk.3.attn_q.weight has shape [256, 128], expected [256, 256]"},
        {.what = "norm not f32", .f16_tensor = "blk.0.ssm_norm.weight",
         .expect = "blk.0.ssm_norm.weight has type f16, expected f32"},
        {.what = "a lone hadamard key", .str_key = "prism.hadamard.inverse_weight_names", .str_val = "x",
         .expect = "prism.hadamard.block_size"},
        {.what = "other architecture", .str_key = "general.architecture", .str_val = "llama",
         .expect = "'llama' is not supported"},
        {.what = "interval 2", .u32_key = "qwen35.full_attention_interval", .u32_val = 2,
         .expect = "missing tensor blk.1.attn_q.weight"},
        {.what = "recurrent_layers all true", .all_recurrent = true,
         .expect = "missing tensor blk.3.attn_qkv.weight"},
        {.what = "head counts", .u32_key = "qwen35.attention.head_count_kv", .u32_val = 3,
         .expect = "not a multiple"},
        {.what = "absurd width", .u32_key = "qwen35.ssm.inner_size", .u32_val = 0x7fffffff,
         .expect = "out of range"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        const edit *e = &cases[i];
        if (write_copy(src, e, path)) { CHECKF(false, "%s: writing the copy failed: %s", e->what, bs_last_error()); continue; }
        bs_model *m = bs_model_load(path, NULL);
        const char *err = bitspark_last_error();
        if (!e->expect) {
            CHECKF(m != NULL, "%s: %s", e->what, err);
            if (m) CHECK_EQ_INT(bs_model_n_vocab(m), 1024);
        } else {
            CHECKF(!m && strstr(err, e->expect), "%s: got '%s', expected an error with '%s'",
                   e->what, m ? "(loaded)" : err, e->expect);
            if (!m) printf("%-26s -> %s\n", e->what, err);
        }
        bs_model_free(m);
    }
    bs_model_params np = {.no_mmap = true};
    bs_model *m = bs_model_load(src_path, &np);
    CHECK(m != NULL);
    bs_model_free(m);
    gguf_close(src);
    remove(path);
    return test_summary("test_qwen35_load");
}
