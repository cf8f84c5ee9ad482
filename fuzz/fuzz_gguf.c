/* fuzz_gguf.c: libFuzzer target for the GGUF reader (and, for inputs it accepts, the writer).
 * Any input must either parse or fail with a one-line error; accepted files must have every
 * tensor's bytes inside the input, and rewriting them with the writer must give a file that
 * parses back with the same metadata and tensor names. */
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"
#include "model/hadamard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void walk_value(const gguf_value *v, unsigned *acc) {
    if (v->type == GGUF_TYPE_STRING) { *acc += (unsigned)v->str.len + (unsigned char)v->str.s[0]; return; }
    if (v->type != GGUF_TYPE_ARRAY) return;
    for (uint64_t i = 0; i < v->n; i++) {
        int64_t x;
        if (v->arr_type == GGUF_TYPE_STRING) *acc += (unsigned)((const gguf_str *)v->arr)[i].len;
        else if (v->arr_type == GGUF_TYPE_ARRAY) walk_value(&((const gguf_value *)v->arr)[i], acc);
        else if (gguf_arr_elem_i64(v, i, &x) == 0) *acc += (unsigned)x;
    }
}

static void rewrite(const gguf_file *f) {
    static char path[256];
    if (!path[0]) {
        const char *d = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/fuzz_gguf_%d.gguf", d && *d ? d : "/tmp", (int)getpid());
    }
    gguf_writer *w = gguf_w_open(path);
    if (!w) return;
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_w_set_value(w, f->kv[i].key.s, &f->kv[i].val);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) != (int)i) {
            fprintf(stderr, "writer refused tensor '%s' the reader accepted: %s\n", t->name, bs_last_error());
            abort();
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_w_write(w, f->tensors[i].data, (size_t)f->tensors[i].nbytes)) abort();
    if (gguf_w_close(w)) { fprintf(stderr, "rewrite failed: %s\n", bs_last_error()); abort(); }
    gguf_file *g = gguf_open(path, GGUF_OPEN_NO_MMAP);
    if (!g) { fprintf(stderr, "rewritten file does not parse: %s\n", bs_last_error()); abort(); }
    if (g->n_kv != f->n_kv || g->n_tensors != f->n_tensors || g->alignment != f->alignment) abort();
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(g->tensors[i].name, f->tensors[i].name) || g->tensors[i].file_type != f->tensors[i].file_type)
            abort();
    gguf_close(g);
    unlink(path);
}

/* A Hadamard fold the file declares (Bonsai 2): read as a model's and as a drafter's, refused
 * with a one-line error or its rotations made and run over widths up to 4096. */
static void fold(const gguf_file *f) {
    static float x[4096], y[4096];
    for (int drafter = 0; drafter < 2; drafter++) {
        bs_hadamard *h = NULL;
        bs_clear_error();
        if (bs_hadamard_read(f, drafter, &h)) {
            const char *e = bs_last_error();
            if (!e[0] || strchr(e, '\n')) abort();
            continue;
        }
        if (!h) return;
        char d[200];
        bs_hadamard_describe(h, d, sizeof d);
        for (int64_t w = 64; w <= 4096; w *= 2)
            for (int k = 0; k < 3; k++) {
                const bs_rotation *r = bs_hadamard_rotation(h, w, k == 1 ? 8 : 0, 2, (int)(w / 16), k == 2);
                if (!r) continue;
                if (r->width != w) abort();
                for (int64_t i = 0; i < w; i++) x[i] = (float)(i % 7) - 3.0f;
                bs_rotate_rows(r, x, y, 1, NULL);
            }
        bs_hadamard_folds(h, "output.weight", false);
        bs_hadamard_folds(h, "token_embd.weight", true);
        bs_hadamard_check_all_found(h);
        bs_hadamard_free(h);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_clear_error();
    gguf_file *f = gguf_open_memory(data, size);
    if (!f) {
        const char *e = bs_last_error();
        if (!e[0] || strchr(e, '\n') || strcmp(e, "unknown error") == 0) abort();
        return 0;
    }
    unsigned acc = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (gguf_find_kv(f, f->kv[i].key.s) != &f->kv[i] && strlen(f->kv[i].key.s) == f->kv[i].key.len)
            abort();
        walk_value(&f->kv[i].val, &acc);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        if (p < data || t->nbytes == 0 || p + t->nbytes > data + size) abort();
        acc += p[0] + p[t->nbytes - 1];
        if (gguf_find_tensor(f, t->name) != t) abort();
    }
    if (acc == 0xdeadbeef) fputc(0, stderr);     /* keep the walk from being optimized away */
    rewrite(f);
    fold(f);
    gguf_close(f);
    return 0;
}
