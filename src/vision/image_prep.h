/* image_prep.h: llama.cpp mtmd's preprocessing for qwen3vl_merger projectors (not the Hugging
 * Face processor's): the "smart resize" target (multiples of patch*merge, at least 8 and at most
 * 4096 tokens), an aspect-preserving bilinear resize into a black letterbox, and normalisation
 * with the projector's mean / std into planar float [3][h][w]. */
#ifndef BS_IMAGE_PREP_H
#define BS_IMAGE_PREP_H

#include "vision/image.h"
#include "vision/vision.h"

#define BS_VISION_MIN_TOKENS 8
#define BS_VISION_MAX_TOKENS 4096

/* The encoder's input size for a w x h image, align = patch * merge. */
void bs_image_target_size(int w, int h, int align, int *tw, int *th);
/* Bilinear resize (align-corners style, results truncated to u8) as mtmd does it. dst holds
 * nw*nh*3 bytes. */
void bs_image_resize_bilinear(const bs_image_u8 *src, int nw, int nh, unsigned char *dst);
/* The whole preprocessing: planar normalised floats (malloc'd) of *tw x *th, or NULL with err
 * filled on a bad image. */
float *bs_image_preprocess(const bs_image_u8 *im, const bs_mmproj_hparams *hp, int *tw, int *th,
                           char *err, size_t errlen);

#endif
