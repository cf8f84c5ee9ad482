/* fuzz_image.c: libFuzzer target for the image decoders (PNG, JPEG, PPM/PGM) and, for images
 * they accept, mtmd's preprocessing. Any input must decode or fail with a one-line error;
 * a decoded image must be within the size caps, and every one of its bytes readable. */
#include "vision/image.h"
#include "vision/image_prep.h"
#include "vision/vision.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bs_image_u8 im = {0};
    char err[256] = "";
    if (bs_image_decode(data, size, &im, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n')) abort();   /* errors are one non-empty line */
        return 0;
    }
    if (im.w < 1 || im.h < 1 || im.w > BS_IMAGE_MAX_SIDE || im.h > BS_IMAGE_MAX_SIDE ||
        (long long)im.w * im.h > BS_IMAGE_MAX_PIXELS || !im.rgb)
        abort();
    unsigned sum = 0;   /* touch every byte: ASan / MSan see a short buffer */
    for (size_t i = 0; i < (size_t)im.w * im.h * 3; i++) sum += im.rgb[i];
    /* preprocessing on small images only (a large one is slow, not interesting here) */
    if ((long long)im.w * im.h <= 256 * 256) {
        bs_mmproj_hparams hp = {.patch = 16, .merge = 2, .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}};
        int tw, th;
        float *px = bs_image_preprocess(&im, &hp, &tw, &th, err, sizeof err);
        if (px && (tw % 32 || th % 32 || tw * th < 8 * 32 * 32)) abort();
        free(px);
    }
    bs_image_free(&im);
    return (int)(sum & 0);
}
