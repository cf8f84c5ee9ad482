/* image.h: image files in memory -> 8-bit RGB, interleaved, top row first. PNG (libpng),
 * JPEG (libjpeg-turbo) and binary PPM/PGM (P6/P5, read here). Hostile input is expected: every
 * decoder checks the declared size against BS_IMAGE_MAX_SIDE / BS_IMAGE_MAX_PIXELS before it
 * allocates, stops at the end of the data (truncated files are errors, not grey fill), and
 * answers -1 with a one-line message instead of crashing. Alpha is dropped (not blended) and
 * 16-bit samples keep their high byte, as llama.cpp's loader does. */
#ifndef BS_IMAGE_H
#define BS_IMAGE_H

#include <stddef.h>
#include <stdio.h>

/* The largest image accepted: 16384 on a side, 64 Mpixel in all (192 MiB of RGB), so a
 * decompression bomb is refused from its header, and decoding never needs more than about
 * twice that. */
#define BS_IMAGE_MAX_SIDE 16384
#define BS_IMAGE_MAX_PIXELS (64ll << 20)

typedef struct { int w, h; unsigned char *rgb; } bs_image_u8;   /* rgb: w*h*3 bytes */

/* Which decoder the bytes' signature selects: "png", "jpeg", "ppm" or NULL. */
const char *bs_image_kind(const unsigned char *data, size_t len);
/* 0, or -1 with err filled (out untouched). */
int bs_image_decode(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen);
void bs_image_free(bs_image_u8 *im);

/* The decoders behind bs_image_decode (same convention). */
int bs_image_decode_png(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen);
int bs_image_decode_jpeg(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen);
int bs_image_decode_ppm(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen);
/* The size check every decoder applies before it allocates: 0, or -1 with err filled. */
static inline int bs_image_check_size(long long w, long long h, char *err, size_t errlen) {
    if (w >= 1 && h >= 1 && w <= BS_IMAGE_MAX_SIDE && h <= BS_IMAGE_MAX_SIDE && w * h <= BS_IMAGE_MAX_PIXELS)
        return 0;
    if (w < 1 || h < 1) snprintf(err, errlen, "image has no pixels (%lld x %lld)", w, h);
    else
        snprintf(err, errlen, "image is %lld x %lld: larger than the limit (%d on a side, %lld Mpixel)",
                 w, h, BS_IMAGE_MAX_SIDE, BS_IMAGE_MAX_PIXELS >> 20);
    return -1;
}

#endif
