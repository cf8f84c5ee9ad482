/* quant.h: every weight format bitspark reads or writes, in one table (quant.c).
 *
 * Type ids are ggml's, so they go to and from GGUF unchanged. The one exception is GGUF id 42
 * (Q2_0), which names two layouts: the legacy 128-group 34-byte block of the original
 * Ternary-Bonsai-27B (BS_Q2_0) and mainline's 64-group 18-byte block (BS_Q2_0_G64, an internal
 * id written to files as 42). The GGUF reader tells them apart by the tensor's byte size. */
#ifndef BS_QUANT_H
#define BS_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

enum bs_type {
    BS_F32 = 0, BS_F16 = 1, BS_Q4_0 = 2, BS_Q4_1 = 3, BS_Q8_0 = 8, BS_Q8_1 = 9,
    BS_Q6_K = 14, BS_Q8_K = 15, BS_I8 = 24, BS_I16 = 25, BS_I32 = 26, BS_BF16 = 30,
    BS_TQ1_0 = 34, BS_TQ2_0 = 35, BS_Q1_0 = 41, BS_Q2_0 = 42, BS_PQ2_0 = 142,
    BS_PTQ1_0 = 143,             /* PrismML's base-3 ternary, 128 weights in 28 bytes (Bonsai 2) */
    BS_Q2_0_G64 = 1042,          /* internal id; GGUF id 42 with 64-element blocks */
    BS_TYPE_INVALID = -1
};

/* Dequantize n values (n a multiple of the block size). */
typedef void (*bs_to_float_fn)(const void *src, float *dst, int64_t n);
/* Reference quantizer with llama.cpp's rounding (what llama-quantize writes). */
typedef void (*bs_from_float_fn)(const float *src, void *dst, int64_t n);
/* Dot product of n weights (this type) with n activations already quantized to vec_dot_type. */
typedef void (*bs_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);

typedef struct bs_type_traits {
    int type;
    const char *name;            /* "q1_0", "q2_0", "q2_0_g64", ... */
    int ggml_id;                 /* id written to GGUF */
    int64_t blck;                /* elements per block */
    size_t type_size;            /* bytes per block */
    bool is_quantized;
    bs_to_float_fn to_float;
    bs_from_float_fn from_float;       /* NULL: cannot be a quantization target */
    int vec_dot_type;                  /* activation format for the dot product */
    bs_from_float_fn act_from_float;   /* activation quantizer for this type's vec_dot_type
                                          (x86 llama.cpp rounding); F16/BF16 convert to
                                          their own format, NULL for F32 (used as is) */
    bs_vec_dot_fn vec_dot;             /* portable scalar reference (test oracle) */
} bs_type_traits;

/* NULL for an unknown id. */
const bs_type_traits *bs_type_get(int type);
/* Lookup by name (case-insensitive, accepts "Q1_0", "q2_0_g64", "pq2_0", "bf16", ...). */
int bs_type_from_name(const char *name);
const char *bs_type_name(int type);
/* Bytes of a row of ne0 elements; 0 if ne0 is not a multiple of the block size. */
size_t bs_row_size(int type, int64_t ne0);
/* Bytes of an ne0 x nrows tensor, or UINT64_MAX on overflow / bad shape. */
uint64_t bs_tensor_size(int type, int64_t ne0, uint64_t nrows);
/* Candidate bs_types for a GGUF type id (two for id 42); returns the count. */
int bs_types_for_ggml_id(uint32_t id, int out[2]);

/* Convenience: dequantize / quantize whole rows through the table. */
int bs_dequantize(int type, const void *src, float *dst, int64_t n);
int bs_quantize(int type, const float *src, void *dst, int64_t n);

/* Bits per weight of a type (type_size * 8 / blck). */
double bs_type_bpw(int type);

/* PTQ1_0 -> PQ2_0 (same codes and d, n % 128 == 0): the loader runs PTQ1_0 on the PQ2_0 kernels. */
void bs_ptq1_0_to_pq2_0(const void *src, void *dst, int64_t n);

#endif
