/* image_png.c: PNG through libpng's classic API (the simplified one converts through linear
 * light, llama.cpp's loader does not). Every format becomes 8-bit RGB the way that loader does
 * it: palette expanded, grey replicated, 16-bit samples keep their high byte, alpha dropped.
 * libpng reports errors by longjmp; the setjmp frame below catches them and frees everything. */
#include "vision/image.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *data;
    size_t len, at;
    char msg[160];
} png_src;

static void on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (bad CRC in an ancillary chunk, ...) are not fatal and not printed. */
static void on_warning(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

static void on_read(png_structp png, png_bytep out, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->at) png_error(png, "truncated file");
    memcpy(out, s->data + s->at, n);
    s->at += n;
}

static void set_transforms(png_structp png, png_infop info) {
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

int bs_image_decode_png(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen) {
    png_src src = {.data = data, .len = len};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    unsigned char *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        snprintf(err, errlen, "PNG: out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        snprintf(err, errlen, "PNG: %s", src.msg[0] ? src.msg : "decode error");
        free(rgb);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    /* Limits before anything is allocated from the header: the image size, and the memory any
     * one ancillary chunk (a zTXt / iCCP bomb) may take. */
    png_set_user_limits(png, BS_IMAGE_MAX_SIDE, BS_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, 8u << 20);
    png_set_chunk_cache_max(png, 1000);
    png_set_read_fn(png, &src, on_read);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (bs_image_check_size(w, h, err, errlen)) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    set_transforms(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3 || png_get_channels(png, info) != 3)
        png_error(png, "unexpected row layout after conversion to RGB");
    rgb = malloc((size_t)w * h * 3);
    rows = malloc(sizeof *rows * h);
    if (!rgb || !rows) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    out->w = (int)w;
    out->h = (int)h;
    out->rgb = rgb;
    return 0;
}
