/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (and, for inputs it accepts,
 * the writer). Any input must either parse or fail with a one-line error; accepted files must
 * have every tensor inside the input, consistent sizes and no overlaps, and rewriting them must
 * give a file that parses back with the same tensors and metadata. */
#include "formats/safetensors.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void rewrite(const st_file *f) {
    static char path[256];
    if (!path[0]) {
        const char *d = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/fuzz_st_%d.safetensors", d && *d ? d : "/tmp", (int)getpid());
    }
    st_writer *w = st_w_open(path);
    if (!w) return;
    for (uint64_t i = 0; i < f->n_meta; i++) st_w_set_meta(w, f->meta[i].key, f->meta[i].value);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        if (st_w_add_tensor(w, t->name, t->dtype, t->n_dims, t->shape) != (int)i) {
            fprintf(stderr, "writer refused tensor '%s': %s\n", t->name, bs_last_error());
            abort();
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (st_w_write(w, f->tensors[i].data, (size_t)f->tensors[i].nbytes)) abort();
    if (st_w_close(w)) { fprintf(stderr, "rewrite failed: %s\n", bs_last_error()); abort(); }
    st_file *g = st_open(path, ST_OPEN_NO_MMAP);
    if (!g) { fprintf(stderr, "rewritten file does not parse: %s\n", bs_last_error()); abort(); }
    if (g->n_tensors != f->n_tensors || g->n_meta != f->n_meta) abort();
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *a = &f->tensors[i], *b = st_find_tensor(g, a->name);
        if (!b || b->dtype != a->dtype || b->nbytes != a->nbytes || b->n_dims != a->n_dims ||
            (a->nbytes && memcmp(a->data, b->data, (size_t)a->nbytes)))
            abort();
    }
    for (uint64_t i = 0; i < f->n_meta; i++) {
        const char *v = st_get_meta(g, f->meta[i].key);
        if (!v || strcmp(v, f->meta[i].value)) abort();
    }
    st_close(g);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_clear_error();
    st_file *f = st_open_memory(data, size);
    if (!f) {
        const char *e = bs_last_error();
        if (!e[0] || strchr(e, '\n') || strcmp(e, "unknown error") == 0) abort();
        return 0;
    }
    unsigned acc = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        const uint8_t *p = t->data;
        if (p < data + f->data_offset || p + t->nbytes > data + size) abort();
        if (t->n_elements * st_dtype_size(t->dtype) != t->nbytes) abort();
        if (t->nbytes) acc += p[0] + p[t->nbytes - 1];
        if (i && t->nbytes && f->tensors[i - 1].nbytes &&
            f->tensors[i - 1].offset + f->tensors[i - 1].nbytes > t->offset)
            abort();
    }
    if (acc == 0xdeadbeef) fputc(0, stderr);
    rewrite(f);
    st_close(f);
    return 0;
}
