/* safetensors.h: safetensors reader (mmap or read-into-memory), sharded checkpoints, and a
 * streaming writer.
 *
 * File layout: u64 little-endian N, an N-byte JSON object (UTF-8, maybe padded with spaces),
 * then the data section. Each JSON entry maps a tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} with offsets relative to the data section; the optional
 * "__metadata__" entry is a string -> string map. The reader validates everything (header length
 * against the file size, dtype names, shape products against the byte ranges, ranges inside the
 * data section and not overlapping) and fails with a one-line bs_error otherwise. */
#ifndef BS_SAFETENSORS_H
#define BS_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_U32, ST_I32, ST_U64, ST_I64,
    ST_F16, ST_BF16, ST_F32, ST_F64, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT,
    ST_DTYPE_INVALID = -1
};
const char *st_dtype_name(int dtype);          /* "F32", "BF16", ...; "?" if invalid */
int st_dtype_from_name(const char *name);      /* exact (upper-case) name; ST_DTYPE_INVALID */
size_t st_dtype_size(int dtype);               /* bytes per element; 0 if invalid */
/* The bs_type (quant.h) holding the same bytes (F32, F16, BF16, I8, I16, I32), or
 * BS_TYPE_INVALID. */
int st_dtype_to_bs_type(int dtype);

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    char *name;
    int dtype;
    int n_dims;                    /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];    /* row-major, outermost first (PyTorch order) */
    uint64_t n_elements;
    uint64_t offset;               /* data_offsets[0], relative to the data section */
    uint64_t nbytes;               /* data_offsets[1] - data_offsets[0] */
    const void *data;              /* NULL when opened with ST_OPEN_META_ONLY */
} st_tensor;

typedef struct st_meta { char *key, *value; } st_meta;

typedef struct st_file {
    char *path;
    uint64_t header_len;
    uint64_t data_offset;          /* 8 + header_len */
    uint64_t file_size;
    uint64_t n_tensors;
    st_tensor *tensors;            /* in data-offset order */
    uint64_t n_meta;
    st_meta *meta;                 /* __metadata__, in file order */
    void *base;                    /* mmap'd file or malloc'd copy; NULL for META_ONLY */
    bool mmapped;
    size_t map_len;
} st_file;

enum { ST_OPEN_NO_MMAP = 1 << 0, ST_OPEN_META_ONLY = 1 << 1, ST_OPEN_PREFAULT = 1 << 2 };

st_file *st_open(const char *path, int flags);
/* Parse an image held in memory (the buffer must outlive the result). Used by the fuzzer. */
st_file *st_open_memory(const void *buf, size_t len);
void st_close(st_file *f);
const st_tensor *st_find_tensor(const st_file *f, const char *name);
const char *st_get_meta(const st_file *f, const char *key);   /* NULL if absent */

/* A checkpoint: one .safetensors file, or the shards named by model.safetensors.index.json.
 * st_model_open accepts a .safetensors file, an index .json file, or a directory holding
 * model.safetensors.index.json or model.safetensors (or exactly one *.safetensors). Tensor
 * names are unique across shards, and every weight_map entry must exist in its shard. */
typedef struct st_model {
    char *dir;
    int n_files;
    st_file **files;
    uint64_t n_tensors;
    const st_tensor **tensors;     /* all tensors, sorted by name */
    int *tensor_file;              /* which file each of them lives in */
} st_model;

st_model *st_model_open(const char *path, int flags);
const st_tensor *st_model_find(const st_model *m, const char *name);
void st_model_close(st_model *m);

/* --- writer ------------------------------------------------------------------------------
 * Open, optionally set __metadata__ entries, declare every tensor, then stream the tensors'
 * bytes in declaration order with st_w_write (any chunking), then close. The JSON header is
 * computed from the declarations and written with the first data (padded with spaces so the
 * data section starts 8-aligned); tensor data is never held. */
typedef struct st_writer st_writer;

st_writer *st_w_open(const char *path);
void st_w_set_meta(st_writer *w, const char *key, const char *value);
/* Returns the tensor index or -1 (bad dtype/shape, duplicate name, after data started). */
int st_w_add_tensor(st_writer *w, const char *name, int dtype, int n_dims, const int64_t *shape);
int st_w_write(st_writer *w, const void *data, size_t n);
int st_w_close(st_writer *w);      /* checks every tensor got its bytes; frees w */
void st_w_abort(st_writer *w);     /* frees w and removes the partial file */

#endif
