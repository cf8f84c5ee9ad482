/* image.c: pick the decoder from the file's signature; the size limit; binary PPM/PGM. */
#include "io/util.h"
#include "vision/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *bs_image_kind(const unsigned char *d, size_t n) {
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) return "png";
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpeg";
    if (n >= 2 && d[0] == 'P' && (d[1] == '5' || d[1] == '6')) return "ppm";
    return NULL;
}

int bs_image_decode(const unsigned char *data, size_t len, bs_image_u8 *out, char *err, size_t errlen) {
    const char *k = data ? bs_image_kind(data, len) : NULL;
    if (!k) return bs_errbuf(err, errlen, "not a PNG, JPEG or binary PPM/PGM image (unknown signature, %zu bytes)", len);
    if (!strcmp(k, "png")) return bs_image_decode_png(data, len, out, err, errlen);
    if (!strcmp(k, "jpeg")) return bs_image_decode_jpeg(data, len, out, err, errlen);
    return bs_image_decode_ppm(data, len, out, err, errlen);
}

void bs_image_free(bs_image_u8 *im) {
    if (!im) return;
    free(im->rgb);
    im->rgb = NULL;
    im->w = im->h = 0;
}

/* --- PPM / PGM (P6 / P5): header "P6 <w> <h> <maxval>" with '#' comments, one whitespace
 * byte, then the samples (16-bit big-endian when maxval > 255). Samples are scaled to 0..255. */

static int ppm_number(const unsigned char *d, size_t n, size_t *at, long long *out) {
    for (;;) {
        while (*at < n && (d[*at] == ' ' || d[*at] == '\t' || d[*at] == '\r' || d[*at] == '\n')) (*at)++;
        if (*at < n && d[*at] == '#') { while (*at < n && d[*at] != '\n') (*at)++; continue; }
        break;
    }
    if (*at >= n || d[*at] < '0' || d[*at] > '9') return -1;
    long long v = 0;
    while (*at < n && d[*at] >= '0' && d[*at] <= '9') {
        v = v * 10 + (d[*at] - '0');
        if (v > (1ll << 40)) return -1;
        (*at)++;
    }
    *out = v;
    return 0;
}

int bs_image_decode_ppm(const unsigned char *d, size_t n, bs_image_u8 *out, char *err, size_t errlen) {
    if (n < 2 || d[0] != 'P' || (d[1] != '5' && d[1] != '6')) return bs_errbuf(err, errlen, "PPM: not a P5/P6 file");
    int ch = d[1] == '6' ? 3 : 1;
    size_t at = 2;
    long long w, h, maxval;
    if (ppm_number(d, n, &at, &w) || ppm_number(d, n, &at, &h) || ppm_number(d, n, &at, &maxval))
        return bs_errbuf(err, errlen, "PPM: malformed header");
    if (maxval < 1 || maxval > 65535) return bs_errbuf(err, errlen, "PPM: maxval %lld is out of range [1, 65535]", maxval);
    if (bs_image_check_size(w, h, err, errlen)) return -1;
    if (at >= n) return bs_errbuf(err, errlen, "PPM: truncated after the header");
    at++;   /* the single whitespace byte before the samples */
    int bps = maxval > 255 ? 2 : 1;
    unsigned long long need = (unsigned long long)w * h * ch * bps;
    if (n - at < need) return bs_errbuf(err, errlen, "PPM: truncated: %llu sample bytes expected, %zu present", need, n - at);
    unsigned char *rgb = malloc((size_t)(w * h * 3));
    if (!rgb) return bs_errbuf(err, errlen, "PPM: out of memory for %lld x %lld", w, h);
    const unsigned char *s = d + at;
    for (long long p = 0; p < w * h; p++)
        for (int c = 0; c < 3; c++) {
            long long i = (p * ch + (ch == 3 ? c : 0)) * bps;
            unsigned v = bps == 2 ? (unsigned)s[i] << 8 | s[i + 1] : s[i];
            if (v > (unsigned)maxval) v = (unsigned)maxval;   /* out-of-range sample: clamp */
            rgb[p * 3 + c] = (unsigned char)(maxval == 255 ? v : (v * 255 + (unsigned)maxval / 2) / (unsigned)maxval);
        }
    out->w = (int)w;
    out->h = (int)h;
    out->rgb = rgb;
    return 0;
}
