/* quantize.h: `bitspark quantize`: rewrite a GGUF with its weight matrices in another format,
 * streaming one tensor at a time (memory stays at a few tens of MB for any model size).
 *
 * Which tensors change (llama.cpp's llama-quantize rules): only tensors whose name ends in
 * "weight", that have at least two dimensions (ggml_n_dims: trailing 1s do not count), and that
 * are not norms ("_norm.weight") or the short conv (ssm_conv1d.weight). So norms, biases,
 * ssm_a, ssm_dt.bias and ssm_conv1d stay as they are (F32 in every qwen35 file). Every
 * quantizable matrix gets the target type, token_embd and output included (the layout of the
 * published Bonsai files and the fixtures; llama.cpp's mixtures would put output in Q6_K:
 * ask for that with --output-type q6_k). Then --embd-type / --output-type, then --tensor-type
 * overrides (POSIX extended regex searched in the name; the last match wins). A matrix whose rows
 * are not a multiple of its type's block falls back (Q6_K -> Q8_0; the 1/2-bit and ternary
 * types -> Q4_0; else its float source type) with a note. A tensor already of its target type is
 * copied byte for byte; converting a quantized tensor to another type needs allow_requantize.
 * Quantization uses the reference quantizers (quant.h), so output bytes equal llama.cpp's. */
#ifndef BS_QUANTIZE_H
#define BS_QUANTIZE_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>

#define BS_QUANTIZE_MAX_OVERRIDES 64

typedef struct bs_quantize_override {
    char pattern[256];
    regex_t re;
    int type;
} bs_quantize_override;

typedef struct bs_quantize_params {
    int type;                     /* target bs_type of the matrices */
    int output_type, embd_type;   /* -1: same as type */
    bs_quantize_override overrides[BS_QUANTIZE_MAX_OVERRIDES];
    int n_overrides;
    bool pure;                    /* accepted for llama.cpp compatibility: the default is uniform */
    bool allow_requantize;
    int n_threads;                /* <= 0: all CPUs */
} bs_quantize_params;

void bs_quantize_params_init(bs_quantize_params *p);
/* Parse "PATTERN=TYPE" into p (compiles the regex). 0 or -1 + bs_error. */
int bs_quantize_add_override(bs_quantize_params *p, const char *spec);
void bs_quantize_params_free(bs_quantize_params *p);

/* Quantize in -> out. 0, or -1 with bs_error (the partial output is removed). */
int bs_quantize_file(const char *in, const char *out, const bs_quantize_params *p);

/* want if rows of ne0 fit its blocks, else the fallback described above (with a note). */
int bs_quantize_fit_type(int want, const char *name, int64_t ne0, int src_type);

/* llama.cpp's LLAMA_FTYPE (general.file_type) for a model whose matrices are mostly `type`. */
uint32_t bs_ftype_of(int type);

/* Convert n_rows rows of ne0 values from src_type to dst_type (dequantize, then the reference
 * quantizer), split over threads. Both types must have to_float / from_float. 0 or -1. */
struct bs_pool;
int bs_convert_rows(struct bs_pool *pool, int src_type, const void *src, int dst_type, void *dst,
                    int64_t ne0, int64_t n_rows);

/* Tell the kernel the bytes [p, p+n) of a read-only file mapping are done with, so a streaming
 * pass over a big file does not keep it all resident. */
void bs_release_mapped(const void *p, uint64_t n);

#endif
