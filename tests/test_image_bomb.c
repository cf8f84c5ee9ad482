/* test_image_bomb.c: PNG decompression bombs with valid CRCs (built here with zlib) are refused
 * or decoded within the memory bound of vision/image.h, and quickly:
 *   - IHDR 16384 x 16384 (within the side cap, over the pixel cap): refused from the header;
 *   - a 64 x 64 image whose IDAT inflates to 256 MiB of rows: no more than the image is
 *     inflated (peak RSS grows by < 64 MiB) and it answers in seconds;
 *   - an IDAT declaring 2 GiB that is not there: truncated, an error;
 *   - a legitimate 4096 x 4096 all-black image from a 50 KiB file decodes (the cap is not
 *     over-tight) with peak RSS growth below twice its 48 MiB of RGB plus slack;
 *   - a real JPEG written by cjpeg (libjpeg-turbo-progs), where installed: decodes to the
 *     fixture image's size with pixels near the PPM it was made from and within 1 of what
 *     djpeg decodes (skipped without cjpeg). */
#include "test.h"
#include "vision/image.h"
#include "io/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zlib.h>

typedef struct { unsigned char *p; size_t n, cap; } buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void be32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

/* A chunk with its real CRC; declared: the length field (the data's length unless faked). */
static void chunk(buf *b, const char *type, const unsigned char *d, uint32_t n, uint32_t declared) {
    unsigned char h[8];
    be32(h, declared);
    memcpy(h + 4, type, 4);
    put(b, h, 8);
    if (n) put(b, d, n);
    uLong crc = crc32(crc32(0, (const Bytef *)type, 4), d ? d : (const Bytef *)"", n);
    be32(h, (uint32_t)crc);
    put(b, h, 4);
}

/* An RGB8 PNG of w x h whose IDAT inflates to `raw` zero bytes (the image needs h*(1+3w)). */
static buf make_png(uint32_t w, uint32_t h, uint64_t raw, int fake_idat_len) {
    buf b = {0};
    put(&b, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {0};
    be32(ihdr, w);
    be32(ihdr + 4, h);
    ihdr[8] = 8;   /* bit depth */
    ihdr[9] = 2;   /* RGB */
    chunk(&b, "IHDR", ihdr, 13, 13);
    z_stream z = {0};
    deflateInit(&z, 9);
    static unsigned char zeros[1 << 16], out[1 << 16];
    buf idat = {0};
    for (uint64_t left = raw;;) {
        uInt n = (uInt)(left < sizeof zeros ? left : sizeof zeros);
        left -= n;
        z.next_in = zeros;
        z.avail_in = n;
        int flush = left ? Z_NO_FLUSH : Z_FINISH, rc;
        do {
            z.next_out = out;
            z.avail_out = sizeof out;
            rc = deflate(&z, flush);
            put(&idat, out, sizeof out - z.avail_out);
        } while (z.avail_out == 0);
        if (flush == Z_FINISH && rc == Z_STREAM_END) break;
    }
    deflateEnd(&z);
    chunk(&b, "IDAT", idat.p, (uint32_t)idat.n, fake_idat_len ? 0x7fffffffu : (uint32_t)idat.n);
    free(idat.p);
    if (!fake_idat_len) chunk(&b, "IEND", NULL, 0, 0);
    return b;
}

static long peak_rss_kib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* Decode; returns rc, err filled; *grow = peak RSS growth in MiB, *secs = time taken. */
static int decode(const buf *b, bs_image_u8 *im, char *err, size_t errlen, double *grow, double *secs) {
    long before = peak_rss_kib();
    double t0 = bs_time();
    int rc = bs_image_decode(b->p, b->n, im, err, errlen);
    *secs = bs_time() - t0;
    *grow = (peak_rss_kib() - before) / 1024.0;
    return rc;
}

static void test_bombs(void) {
    bs_image_u8 im = {0};
    char err[256] = "";
    double grow, secs;

    buf b = make_png(16384, 16384, 1000, 0);
    int rc = decode(&b, &im, err, sizeof err, &grow, &secs);
    CHECKF(rc == -1 && strstr(err, "limit"), "16384 x 16384: rc %d '%s'", rc, err);
    CHECKF(grow < 16, "16384 x 16384: peak RSS grew %.1f MiB", grow);
    printf("16384 x 16384 header: %s\n", err);
    free(b.p);

    /* the tall rows of zeros: 256 MiB behind a 64 x 64 header (the image needs 12 KiB) */
    b = make_png(64, 64, 256ull << 20, 0);
    printf("inflation bomb: %zu bytes of PNG inflate to 256 MiB\n", b.n);
    rc = decode(&b, &im, err, sizeof err, &grow, &secs);
    CHECKF(grow < 64 && secs < 20, "inflation bomb: peak RSS grew %.1f MiB in %.2f s", grow, secs);
    printf("inflation bomb: rc %d (%s), peak RSS +%.1f MiB, %.3f s\n", rc, rc ? err : "decoded", grow, secs);
    if (rc == 0) {
        CHECK(im.w == 64 && im.h == 64);
        bs_image_free(&im);
    }
    free(b.p);

    b = make_png(64, 64, 64 * (1 + 3 * 64), 1);
    rc = decode(&b, &im, err, sizeof err, &grow, &secs);
    CHECKF(rc == -1 && strstr(err, "PNG"), "IDAT of 2 GiB declared: rc %d '%s'", rc, err);
    free(b.p);

    b = make_png(4096, 4096, 4096ull * (1 + 3 * 4096), 0);
    rc = decode(&b, &im, err, sizeof err, &grow, &secs);
    CHECKF(rc == 0, "4096 x 4096 black (%zu bytes): rc %d '%s'", b.n, rc, err);
    CHECKF(grow < 2 * 48 + 32, "4096 x 4096: peak RSS grew %.1f MiB", grow);
    printf("4096 x 4096 black from %zu bytes: peak RSS +%.1f MiB, %.3f s\n", b.n, grow, secs);
    if (rc == 0) {
        CHECK(im.w == 4096 && im.h == 4096 && im.rgb[0] == 0 && im.rgb[(size_t)4096 * 4096 * 3 - 1] == 0);
        bs_image_free(&im);
    }
    free(b.p);
}

/* fixture image.rgb -> PPM -> cjpeg -> bs_image_decode_jpeg, when cjpeg is installed. */
static void test_real_jpeg(const char *fx) {
    if (system("command -v cjpeg >/dev/null 2>&1") != 0) {
        printf("skip real JPEG: cjpeg not installed (libjpeg-turbo-progs, tools/deps.sh test)\n");
        return;
    }
    char p[700], ppm[600], jpg[600], cmd[1400];
    const char *tmp = getenv("BS_TMP");
    snprintf(p, sizeof p, "%s/vision/image.rgb", fx);
    size_t n;
    unsigned char *rgb = (unsigned char *)bs_read_file(p, &n);
    CHECKF(rgb && n == 96 * 64 * 3, "cannot read %s", p);
    if (!rgb || n != 96 * 64 * 3) { free(rgb); return; }
    snprintf(ppm, sizeof ppm, "%s/bomb_%d.ppm", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(jpg, sizeof jpg, "%s/bomb_%d.jpg", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    FILE *f = fopen(ppm, "wb");
    CHECK(f != NULL);
    if (!f) { free(rgb); return; }
    fprintf(f, "P6\n96 64\n255\n");
    fwrite(rgb, 1, n, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cjpeg -quality 95 -sample 1x1 -outfile '%s' '%s'", jpg, ppm);
    CHECK(system(cmd) == 0);
    size_t jn;
    unsigned char *j = (unsigned char *)bs_read_file(jpg, &jn);
    bs_image_u8 im = {0};
    char err[256] = "";
    int rc = j ? bs_image_decode(j, jn, &im, err, sizeof err) : -1;
    CHECKF(rc == 0 && im.w == 96 && im.h == 64, "cjpeg's JPEG: rc %d '%s'", rc, err);
    if (rc == 0) {
        double sad = 0;
        for (size_t i = 0; i < n; i++) sad += abs((int)im.rgb[i] - (int)rgb[i]);
        sad /= (double)n;
        CHECKF(sad < 4.0, "cjpeg's JPEG: mean abs difference %.2f from the source pixels", sad);
        printf("real JPEG (cjpeg -quality 95 -sample 1x1, %zu bytes): mean abs difference %.2f\n", jn, sad);
        /* djpeg (the same library's own decoder) reads the same pixels, within rounding */
        snprintf(cmd, sizeof cmd, "djpeg -pnm -outfile '%s' '%s'", ppm, jpg);
        size_t dn = 0;
        char *d = system(cmd) == 0 ? bs_read_file(ppm, &dn) : NULL;
        int worst = 255;
        if (d && dn >= n) {
            worst = 0;
            for (size_t i = 0; i < n; i++) worst = BS_MAX(worst, abs((int)im.rgb[i] - (unsigned char)d[dn - n + i]));
        }
        CHECKF(worst <= 1, "bitspark vs djpeg: worst pixel difference %d", worst);
        free(d);
        bs_image_free(&im);
        /* the same bytes cut short: an error, not grey fill */
        rc = bs_image_decode(j, jn / 2, &im, err, sizeof err);
        CHECKF(rc == -1 && err[0], "half a JPEG: rc %d", rc);
        if (rc == 0) bs_image_free(&im);
    }
    free(j);
    free(rgb);
    remove(ppm);
    remove(jpg);
}

int main(void) {
    const char *fx = getenv("BS_FIXTURES");
    test_bombs();
    if (fx) test_real_jpeg(fx);
    return test_summary("test_image_bomb");
}
