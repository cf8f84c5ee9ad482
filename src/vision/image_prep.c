/* image_prep.c: mtmd's preprocessing, in float exactly where mtmd computes in float, so the
 * pixels come out bit-identical to what llama.cpp feeds its encoder (tests/test_vision.c). */
#include "vision/image_prep.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

void bs_image_target_size(int w, int h, int align, int *tw, int *th) {
    const float A = (float)align;
    const float min_px = (float)BS_VISION_MIN_TOKENS * A * A, max_px = (float)BS_VISION_MAX_TOKENS * A * A;
    int hb = imax(align, (int)roundf((float)h / A) * align);
    int wb = imax(align, (int)roundf((float)w / A) * align);
    if ((float)hb * (float)wb > max_px) {
        float beta = sqrtf((float)h * (float)w / max_px);
        hb = imax(align, (int)floorf((float)h / beta / A) * align);
        wb = imax(align, (int)floorf((float)w / beta / A) * align);
    } else if ((float)hb * (float)wb < min_px) {
        float beta = sqrtf(min_px / ((float)h * (float)w));
        hb = (int)ceilf((float)h * beta / A) * align;
        wb = (int)ceilf((float)w * beta / A) * align;
    }
    *tw = wb;
    *th = hb;
}

static float lerp(float a, float b, float t) { return a + (b - a) * t; }

void bs_image_resize_bilinear(const bs_image_u8 *src, int nw, int nh, unsigned char *dst) {
    const int w = src->w, h = src->h;
    const float rx = nw > 1 ? (float)(w - 1) / (float)(nw - 1) : 0.0f;
    const float ry = nh > 1 ? (float)(h - 1) / (float)(nh - 1) : 0.0f;
    for (int y = 0; y < nh; y++) {
        float py = ry * (float)y;
        int y0 = imin((int)py, h - 1), y1 = imin(y0 + 1, h - 1);
        float ty = py - (float)y0;
        const unsigned char *r0 = src->rgb + (size_t)y0 * w * 3, *r1 = src->rgb + (size_t)y1 * w * 3;
        for (int x = 0; x < nw; x++) {
            float px = rx * (float)x;
            int x0 = imin((int)px, w - 1), x1 = imin(x0 + 1, w - 1);
            float tx = px - (float)x0;
            for (int c = 0; c < 3; c++) {
                float top = lerp(r0[x0 * 3 + c], r0[x1 * 3 + c], tx);
                float bot = lerp(r1[x0 * 3 + c], r1[x1 * 3 + c], tx);
                dst[((size_t)y * nw + x) * 3 + c] = (unsigned char)lerp(top, bot, ty);
            }
        }
    }
}

/* The letterboxed u8 canvas of tw x th: the image resized to fit, centred, black around it. */
static unsigned char *letterbox(const bs_image_u8 *im, int tw, int th) {
    unsigned char *canvas = calloc((size_t)tw * th * 3, 1);
    if (!canvas) return NULL;
    if (im->w == tw && im->h == th) {
        memcpy(canvas, im->rgb, (size_t)tw * th * 3);
        return canvas;
    }
    float scale = fminf((float)tw / (float)im->w, (float)th / (float)im->h);
    int nw = imin((int)ceilf((float)im->w * scale), tw), nh = imin((int)ceilf((float)im->h * scale), th);
    unsigned char *r = malloc((size_t)nw * nh * 3);
    if (!r) { free(canvas); return NULL; }
    bs_image_resize_bilinear(im, nw, nh, r);
    int ox = (tw - nw) / 2, oy = (th - nh) / 2;
    for (int y = 0; y < nh; y++)
        memcpy(canvas + ((size_t)(y + oy) * tw + ox) * 3, r + (size_t)y * nw * 3, (size_t)nw * 3);
    free(r);
    return canvas;
}

float *bs_image_preprocess(const bs_image_u8 *im, const bs_mmproj_hparams *hp, int *tw, int *th,
                           char *err, size_t errlen) {
    if (!im || !im->rgb || im->w < 1 || im->h < 1) {
        snprintf(err, errlen, "empty image");
        return NULL;
    }
    bs_image_target_size(im->w, im->h, hp->patch * hp->merge, tw, th);
    unsigned char *canvas = letterbox(im, *tw, *th);
    size_t n = (size_t)*tw * *th;
    float *px = canvas ? malloc(n * 3 * sizeof *px) : NULL;
    if (!px) {
        free(canvas);
        snprintf(err, errlen, "out of memory preprocessing a %d x %d image", *tw, *th);
        return NULL;
    }
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++)
            px[c * n + i] = ((float)canvas[i * 3 + c] / 255.0f - hp->mean[c]) / hp->std[c];
    free(canvas);
    return px;
}
