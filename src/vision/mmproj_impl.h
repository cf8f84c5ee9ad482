/* mmproj_impl.h: the loaded projector, shared by the loader (mmproj.c) and the encoder
 * (encoder.c) inside src/vision/ only. Matrices stay in the file's type (bs_weight over the
 * mapped GGUF); vectors and the two small tables are kept as float. */
#ifndef BS_MMPROJ_IMPL_H
#define BS_MMPROJ_IMPL_H

#include "cpu/compute.h"
#include "formats/gguf.h"
#include "vision/vision.h"
#include "vulkan/backend.h"

typedef struct {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    bs_weight qkv, out, up, down;
    float *qkv_b, *out_b, *up_b, *down_b;
} bs_vit_block;

struct bs_mmproj {
    gguf_file *f;
    bs_mmproj_hparams hp;
    float *patch_w;           /* [C][3*P*P]: both temporal kernels summed (a still image) */
    bs_weight patch;          /* F32 view of patch_w for bs_matmul */
    float *patch_b;           /* [C] */
    float *pos;               /* [S*S][C] */
    bs_vit_block *blk;
    float *post_w, *post_b;   /* [C] */
    bs_weight mm0, mm2;
    float *mm0_b, *mm2_b;
    bs_vk_vit *dev;           /* the encoder's copy on a Vulkan device (encoder_device.c), or NULL */
};

#endif
