/* image_jpeg.c: JPEG through libjpeg-turbo, decoded to RGB (greyscale and YCbCr; CMYK is
 * refused). Hostile-file rules: the declared size is checked before decompression starts, the
 * library's working memory is capped, a progressive file may not have more than MAX_SCANS scans
 * (the known CPU-time bomb), and any warning (truncated data, corrupt entropy codes) is an
 * error rather than a silently grey picture. Errors come back by longjmp. */
#include "vision/image.h"

#include <stdio.h>   /* before jpeglib.h, which uses FILE */
#include <jpeglib.h>
#include <setjmp.h>
#include <stdlib.h>

#define MAX_SCANS 256

typedef struct {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX + 32];
} jpeg_guard;

static void on_exit_(j_common_ptr c) {
    jpeg_guard *g = (jpeg_guard *)c->err;
    (*c->err->format_message)(c, g->msg);
    longjmp(g->jmp, 1);
}

/* level < 0: a warning (corrupt or truncated data); stop there. Trace messages are ignored. */
static void on_message(j_common_ptr c, int level) {
    if (level < 0) on_exit_(c);
}

static void on_progress(j_common_ptr c) {
    jpeg_guard *g = (jpeg_guard *)c->err;
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > MAX_SCANS) {
        snprintf(g->msg, sizeof g->msg, "more than %d scans (progressive-scan bomb)", MAX_SCANS);
        longjmp(g->jmp, 1);
    }
}

int bs_image_decode_jpeg(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen) {
    struct jpeg_decompress_struct cinfo;
    jpeg_guard g = {0};
    unsigned char *volatile rgb = NULL;
    cinfo.err = jpeg_std_error(&g.pub);
    g.pub.error_exit = on_exit_;
    g.pub.emit_message = on_message;
    if (setjmp(g.jmp)) {
        snprintf(err, errlen, "JPEG: %s", g.msg[0] ? g.msg : "decode error");
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    g.progress.progress_monitor = on_progress;
    cinfo.progress = &g.progress;
    cinfo.mem->max_memory_to_use = 512l << 20;
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if (bs_image_check_size(cinfo.image_width, cinfo.image_height, err, errlen)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(err, errlen, "JPEG: CMYK images are not supported");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3) {
        snprintf(g.msg, sizeof g.msg, "unexpected %d output components", cinfo.output_components);
        longjmp(g.jmp, 1);
    }
    size_t w = cinfo.output_width, h = cinfo.output_height;
    rgb = malloc(w * h * 3);
    if (!rgb) {
        snprintf(g.msg, sizeof g.msg, "out of memory for %zu x %zu", w, h);
        longjmp(g.jmp, 1);
    }
    while (cinfo.output_scanline < h) {
        JSAMPROW row = rgb + (size_t)cinfo.output_scanline * w * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    out->w = (int)w;
    out->h = (int)h;
    out->rgb = rgb;
    return 0;
}
