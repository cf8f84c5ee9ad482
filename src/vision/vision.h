/* vision.h: the vision encoder's face to the layers above (a Qwen3.5 / Qwen3-VL "mmproj"
 * projector, clip.projector_type = "qwen3vl_merger"): load the projector GGUF, turn an image
 * file's bytes into rows of the text model's width, one row per merged 2x2 patch block.
 * Decoding (vision/image.h) and preprocessing (vision/image_prep.h) follow llama.cpp's mtmd so
 * the rows match its image embeddings; docs/vision.md describes the whole path. */
#ifndef BS_VISION_H
#define BS_VISION_H

#include <stdbool.h>
#include <stddef.h>

typedef struct bs_mmproj bs_mmproj;

/* NULL + a one-line message in err on error (missing or misshapen tensor, wrong key, ...). */
bs_mmproj *bs_mmproj_load(const char *path, char *err, size_t errlen);
void bs_mmproj_free(bs_mmproj *m);
/* Width of the output rows (= the text model's n_embd). */
int bs_mmproj_n_embd(const bs_mmproj *m);

/* nx*ny = n_rows merged tokens, row-major (y then x): row i sits at grid (i % nx, i / nx). */
typedef struct { int nx, ny; int n_rows; int n_embd; float *embd; } bs_image_embd;

/* Decode PNG/JPEG/PPM bytes, preprocess per mtmd's rules, run the encoder. 0 on success,
 * else -1 + message in err. n_threads <= 0: every online CPU. */
int bs_vision_encode_bytes(const bs_mmproj *m, const unsigned char *data, size_t len, int n_threads,
                           bs_image_embd *out, char *err, size_t errlen);
int bs_vision_encode_file(const bs_mmproj *m, const char *path, int n_threads, bs_image_embd *out,
                          char *err, size_t errlen);
void bs_image_embd_free(bs_image_embd *e);

/* The two halves of bs_vision_encode_bytes, for callers that must not encode where they parse
 * (the server's HTTP thread): decode + preprocess (cheap, bounded by the decoders' caps) gives
 * the pixels and the grid of rows they will make; bs_vision_encode_pixels (below) encodes them
 * later. px: planar [3][h][w], malloc'd. */
typedef struct { float *px; int w, h, nx, ny; } bs_image_pixels;
int bs_vision_prepare(const bs_mmproj *m, const unsigned char *data, size_t len, bs_image_pixels *out, char *err,
                      size_t errlen);
void bs_image_pixels_free(bs_image_pixels *p);

/* --- additions ------------------------------------------------------------------------------ */

/* The projector's shape, for inspect, bench and the preprocessing. */
typedef struct {
    int n_embd;          /* ViT width C */
    int n_ff;            /* ViT MLP width */
    int n_layer;
    int n_head;          /* head dim = n_embd / n_head */
    int patch;           /* patch side in pixels (16) */
    int merge;           /* spatial merge (2): tokens are merge x merge patch blocks */
    int image_size;      /* clip.vision.image_size (informative) */
    int pos_side;        /* S: the learned position table is S x S */
    int proj_dim;        /* output width = text n_embd */
    float eps;           /* LayerNorm epsilon */
    float mean[3], std[3];
    int weight_type;     /* bs_type of the matrices (F32, F16, BF16 or Q8_0) */
    long long n_params;
    size_t weight_bytes;
} bs_mmproj_hparams;
const bs_mmproj_hparams *bs_mmproj_hparams_of(const bs_mmproj *m);

/* Preprocessed pixels (planar [3][h][w], normalised) straight into the encoder, for tests and
 * bench: w and h must be multiples of patch*merge. Same return convention. */
int bs_vision_encode_pixels(const bs_mmproj *m, const float *pixels, int w, int h, int n_threads,
                            bs_image_embd *out, char *err, size_t errlen);

/* Run the encoder on a Vulkan device context (the text model's: the same thread must use both),
 * its weights uploaded there; c NULL: back on the CPU. 0, or -1 with err (the projector stays
 * as it was). The projector must be freed or moved back before the context is closed. */
typedef struct bs_vk_ctx bs_vk_ctx;
int bs_mmproj_use_device(bs_mmproj *m, bs_vk_ctx *c, char *err, size_t errlen);
/* Whether the encoder runs on a device. */
bool bs_mmproj_on_device(const bs_mmproj *m);

/* Multiply-adds of the encoder's matrix products for an image of w x h preprocessed pixels
 * (bench reports GFLOP/s from it). */
double bs_vision_matmul_flops(const bs_mmproj *m, int w, int h);

#endif
