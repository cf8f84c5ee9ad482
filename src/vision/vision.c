/* vision.c: an image file's bytes to embedding rows: decode (image.c), preprocess
 * (image_prep.c), encode (encoder.c). */
#include "vision/vision.h"
#include "vision/image.h"
#include "vision/image_prep.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bs_vision_prepare(const bs_mmproj *m, const unsigned char *data, size_t len, bs_image_pixels *out, char *err,
                      size_t errlen) {
    bs_image_u8 im = {0};
    memset(out, 0, sizeof *out);
    if (bs_image_decode(data, len, &im, err, errlen)) return -1;
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
    out->px = bs_image_preprocess(&im, hp, &out->w, &out->h, err, errlen);
    bs_image_free(&im);
    if (!out->px) return -1;
    const int a = hp->patch * hp->merge;
    out->nx = out->w / a;
    out->ny = out->h / a;
    return 0;
}

void bs_image_pixels_free(bs_image_pixels *p) {
    if (!p) return;
    free(p->px);
    memset(p, 0, sizeof *p);
}

int bs_vision_encode_bytes(const bs_mmproj *m, const unsigned char *data, size_t len, int n_threads,
                           bs_image_embd *out, char *err, size_t errlen) {
    bs_image_pixels p;
    memset(out, 0, sizeof *out);
    if (bs_vision_prepare(m, data, len, &p, err, errlen)) return -1;
    int rc = bs_vision_encode_pixels(m, p.px, p.w, p.h, n_threads, out, err, errlen);
    bs_image_pixels_free(&p);
    return rc;
}

int bs_vision_encode_file(const bs_mmproj *m, const char *path, int n_threads, bs_image_embd *out,
                          char *err, size_t errlen) {
    size_t len = 0;
    memset(out, 0, sizeof *out);
    char *data = bs_read_file(path, &len);
    if (!data) {
        snprintf(err, errlen, "%s", bs_last_error());
        return -1;
    }
    int rc = bs_vision_encode_bytes(m, (const unsigned char *)data, len, n_threads, out, err, errlen);
    if (rc) {
        /* name the file in the message */
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    free(data);
    return rc;
}

void bs_image_embd_free(bs_image_embd *e) {
    if (!e) return;
    free(e->embd);
    memset(e, 0, sizeof *e);
}
