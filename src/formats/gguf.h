/* gguf.h: GGUF v2/v3 reader (mmap or read-into-memory) and streaming writer.
 *
 * The reader validates everything it is given (counts, string lengths, dimension products,
 * offsets, alignment, types) before it allocates or touches tensor data, so a hostile file gets a
 * one-line error from bs_last_error() and never a crash or a huge allocation. */
#ifndef BS_GGUF_H
#define BS_GGUF_H

#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
};
const char *gguf_type_name(enum gguf_type t);

typedef struct gguf_str { uint64_t len; char *s; /* NUL-terminated copy */ } gguf_str;

/* One metadata value. Scalars live in the union; arrays hold `n` elements of `arr_type`:
 * scalars packed in `arr` (little-endian as in the file, element size of the type), strings as
 * gguf_str in `arr`, nested arrays as gguf_value in `arr`. Scalar fields: unsigned integers in
 * u64, signed integers in i64 (sign-extended), FLOAT32 and FLOAT64 in f64, BOOL in b. */
typedef struct gguf_value {
    enum gguf_type type;
    union {
        uint64_t u64; int64_t i64; double f64; bool b; gguf_str str;
        struct { enum gguf_type arr_type; uint64_t n; void *arr; };
    };
} gguf_value;

typedef struct gguf_kv { gguf_str key; gguf_value val; } gguf_kv;

typedef struct gguf_tensor {
    char *name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];   /* ne[0] is the contiguous (input) dimension; unused dims = 1 */
    uint32_t file_type;          /* ggml type id as stored in the file */
    int type;                    /* resolved bs_type (Q2_0 id 42 -> BS_Q2_0 or BS_Q2_0_G64) */
    uint64_t offset;             /* relative to the start of the data section */
    uint64_t nbytes;
    const void *data;            /* valid while the gguf_file is open */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t data_offset;        /* absolute file offset of the data section */
    uint64_t file_size;
    void *base;                  /* mmap'd file or malloc'd copy */
    bool mmapped;
} gguf_file;

enum { GGUF_OPEN_NO_MMAP = 1 << 0, GGUF_OPEN_META_ONLY = 1 << 1, GGUF_OPEN_PREFAULT = 1 << 2 };

gguf_file *gguf_open(const char *path, int flags);
/* Parse a file image held in memory (the buffer must outlive the result). Used by the fuzzer. */
gguf_file *gguf_open_memory(const void *buf, size_t len);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Typed getters: return 0 on success, -1 (with bs_error) if missing or of an incompatible type.
 * Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
const char *gguf_get_str(const gguf_file *f, const char *key);  /* NULL if missing/not string */
/* Integer array element i as int64 (any integer element type); -1 with bs_error on failure. */
int gguf_get_arr_i64(const gguf_file *f, const char *key, uint64_t i, int64_t *out);
uint64_t gguf_get_arr_n(const gguf_file *f, const char *key);  /* 0 if missing / not array */
/* Additions: u64 getter (any non-negative integer), float / string array elements, and an
 * integer element of any array value (e.g. a nested one). Same error convention. */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_arr_f32(const gguf_file *f, const char *key, uint64_t i, float *out);
const char *gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i); /* NULL on error */
int gguf_arr_elem_i64(const gguf_value *v, uint64_t i, int64_t *out);

/* --- writer ------------------------------------------------------------------------------------
 * Usage: open, set metadata, declare every tensor (name, type, shape), then stream each tensor's
 * bytes in declaration order with gguf_w_write (any number of chunks per tensor), then close.
 * The header (with offsets) is written when the first data is written; only metadata and
 * tensor infos are held in memory. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_w_open(const char *path);
void gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_set_f32(gguf_writer *w, const char *key, float v);
void gguf_w_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_set_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_w_set_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Deep-copy any value (e.g. from a gguf_file being rewritten). Replaces an existing key. */
void gguf_w_set_value(gguf_writer *w, const char *key, const gguf_value *v);
void gguf_w_remove(gguf_writer *w, const char *key);
/* type is a bs_type (written to the file as its ggml id); returns the tensor index or -1. */
int gguf_w_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const int64_t *ne);
int gguf_w_write(gguf_writer *w, const void *data, size_t n);
/* Finishes the file (checks every tensor got exactly its bytes); returns 0 or -1. Frees w. */
int gguf_w_close(gguf_writer *w);
void gguf_w_abort(gguf_writer *w); /* free without finishing, removes the partial file */

#endif
