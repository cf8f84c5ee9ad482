/* test_vision.c: the vision encoder against llama.cpp's numbers on the fixture projector
 * (tests/fixtures/vision): decoded PNG = image.rgb exactly, preprocessed pixels =
 * pixels.f32 exactly, image embeddings within 1e-3 (worst row, relative L2) of image_embd.f32;
 * the loader's errors; hostile images (truncated, corrupt, absurd sizes, bombs) refused cleanly. */
#include "test.h"
#include "vision/vision.h"
#include "vision/image.h"
#include "vision/image_prep.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char dir[512];

static char *fx(const char *name, size_t *len) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *d = bs_read_file(p, len);
    if (!d) fprintf(stderr, "cannot read %s: %s\n", p, bs_last_error());
    return d;
}

static double worst_row_rel(const float *a, const float *b, int rows, int cols) {
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int c = 0; c < cols; c++) {
            double d = (double)a[r * cols + c] - b[r * cols + c];
            num += d * d;
            den += (double)b[r * cols + c] * b[r * cols + c];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        if (rel > worst) worst = rel;
    }
    return worst;
}

static void test_fixture(const bs_mmproj *m) {
    size_t plen, rlen, xlen, elen;
    char *png = fx("image.png", &plen), *rgb = fx("image.rgb", &rlen);
    char *pix = fx("pixels.f32", &xlen), *emb = fx("image_embd.f32", &elen);
    CHECK(png && rgb && pix && emb);
    if (!png || !rgb || !pix || !emb) return;
    char err[256] = "";
    bs_image_u8 im;
    CHECKF(bs_image_decode((unsigned char *)png, plen, &im, err, sizeof err) == 0, "%s", err);
    CHECK_EQ_INT(im.w, 96);
    CHECK_EQ_INT(im.h, 64);
    CHECK(rlen == (size_t)im.w * im.h * 3 && !memcmp(im.rgb, rgb, rlen));
    int tw, th;
    float *px = bs_image_preprocess(&im, bs_mmproj_hparams_of(m), &tw, &th, err, sizeof err);
    CHECK(px != NULL);
    CHECK_EQ_INT(tw, 128);
    CHECK_EQ_INT(th, 96);
    if (px && xlen == (size_t)tw * th * 3 * 4) {
        int diff = 0;
        for (size_t i = 0; i < (size_t)tw * th * 3; i++) diff += px[i] != ((float *)pix)[i];
        CHECKF(diff == 0, "%d of %d pixels differ from pixels.f32", diff, tw * th * 3);
    } else CHECK(!"pixels.f32 size");
    bs_image_embd e;
    for (int threads = 1; threads <= 2; threads++) {
        CHECKF(bs_vision_encode_bytes(m, (unsigned char *)png, plen, threads, &e, err, sizeof err) == 0, "%s", err);
        CHECK_EQ_INT(e.nx, 4);
        CHECK_EQ_INT(e.ny, 3);
        CHECK_EQ_INT(e.n_rows, 12);
        CHECK_EQ_INT(e.n_embd, 256);
        if (e.embd && elen == (size_t)e.n_rows * e.n_embd * 4) {
            double w = worst_row_rel(e.embd, (float *)emb, e.n_rows, e.n_embd);
            printf("image_embd worst row relative L2 (%d threads): %.3g\n", threads, w);
            CHECKF(w <= 1e-3, "worst row %.3g > 1e-3", w);
        }
        bs_image_embd_free(&e);
    }
    /* the pixels path gives the same rows */
    bs_image_embd e2;
    CHECK(bs_vision_encode_pixels(m, (float *)pix, 128, 96, 1, &e2, err, sizeof err) == 0);
    CHECK(e2.embd && worst_row_rel(e2.embd, (float *)emb, 12, 256) <= 1e-3);
    bs_image_embd_free(&e2);
    CHECK(bs_vision_encode_pixels(m, (float *)pix, 100, 96, 1, &e2, err, sizeof err) == -1 && strstr(err, "multiple"));
    bs_image_free(&im);
    free(px); free(png); free(rgb); free(pix); free(emb);
}

static void test_target_size(void) {
    int w, h;
    bs_image_target_size(96, 64, 32, &w, &h);
    CHECK(w == 128 && h == 96);
    bs_image_target_size(1, 1, 32, &w, &h);          /* tiny: at least 8 tokens */
    CHECK(w * h >= 8 * 32 * 32 && w % 32 == 0 && h % 32 == 0);
    bs_image_target_size(16000, 12000, 32, &w, &h);  /* huge: at most 4096 tokens */
    CHECK(w * h <= 4096 * 32 * 32 && w % 32 == 0 && h % 32 == 0);
    bs_image_target_size(640, 480, 32, &w, &h);
    CHECK(w == 640 && h == 480);
}

/* Every hostile input gets -1 and a message, never a crash (ASan runs check the rest). */
static void hostile(const char *what, const unsigned char *d, size_t n, const char *expect) {
    bs_image_u8 im = {0};
    char err[256] = "";
    int rc = bs_image_decode(d, n, &im, err, sizeof err);
    CHECKF(rc == -1 && err[0], "%s: rc %d", what, rc);
    if (expect) CHECKF(strstr(err, expect) != NULL, "%s: message '%s' lacks '%s'", what, err, expect);
    if (rc == 0) bs_image_free(&im);
}

static void put32(unsigned char *p, unsigned v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static void test_hostile(void) {
    size_t plen;
    unsigned char *png = (unsigned char *)fx("image.png", &plen);
    if (!png) { CHECK(0); return; }
    hostile("empty", (const unsigned char *)"", 0, "unknown signature");
    hostile("text", (const unsigned char *)"hello world", 11, "unknown signature");
    for (size_t cut = 8; cut < plen; cut += plen / 23 + 1) hostile("truncated png", png, cut, "PNG");
    hostile("png cut before IEND", png, plen - 12, "PNG");
    unsigned char *bad = malloc(plen);
    memcpy(bad, png, plen);
    for (size_t i = 100; i < plen; i += 97) bad[i] ^= 0x5a;   /* corrupt IDAT: CRC errors */
    hostile("corrupt png", bad, plen, "PNG");
    memcpy(bad, png, plen);
    put32(bad + 16, 1000000);  /* IHDR width: absurd (the CRC no longer matches either) */
    hostile("png absurd width", bad, plen, "PNG");
    free(bad);
    /* PNG bombs with correct CRCs (16384 x 16384 headers, IDATs inflating to 256 MiB): test_image_bomb.c */
    static const unsigned char jpeg_trunc[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0};
    hostile("truncated jpeg", jpeg_trunc, sizeof jpeg_trunc, "JPEG");
    const char *ppm_big = "P6 100000 100000 255\n";
    hostile("ppm bomb", (const unsigned char *)ppm_big, strlen(ppm_big), "limit");
    const char *ppm_short = "P6 4 4 255\nabc";
    hostile("ppm truncated", (const unsigned char *)ppm_short, strlen(ppm_short), "truncated");
    const char *ppm_zero = "P6 0 4 255\n";
    hostile("ppm empty", (const unsigned char *)ppm_zero, strlen(ppm_zero), "no pixels");
    const char *ppm_max = "P5 1 1 70000\n";
    hostile("ppm maxval", (const unsigned char *)ppm_max, strlen(ppm_max), "maxval");
    const char *ppm_hdr = "P6 # only a comment";
    hostile("ppm header", (const unsigned char *)ppm_hdr, strlen(ppm_hdr), "header");
    /* a good PGM: grey replicated */
    const unsigned char pgm[] = "P5 2 1 255\n\x10\xf0";
    bs_image_u8 im;
    char err[128];
    CHECK(bs_image_decode(pgm, sizeof pgm - 1, &im, err, sizeof err) == 0);
    CHECK(im.w == 2 && im.h == 1 && im.rgb[0] == 0x10 && im.rgb[2] == 0x10 && im.rgb[3] == 0xf0);
    bs_image_free(&im);
    free(png);
}

static void test_load_errors(void) {
    char err[512] = "";
    CHECK(bs_mmproj_load("/nonexistent/x.gguf", err, sizeof err) == NULL && err[0]);
    char p[700];
    snprintf(p, sizeof p, "%s/../tiny-f32.gguf", dir);   /* a text model, not a projector */
    CHECK(bs_mmproj_load(p, err, sizeof err) == NULL);
    CHECKF(strstr(err, "not an mmproj") != NULL, "%s", err);
}

int main(void) {
    const char *fxd = getenv("BS_FIXTURES");
    snprintf(dir, sizeof dir, "%s/vision", fxd ? fxd : "tests/fixtures");
    char path[700], err[512] = "";
    snprintf(path, sizeof path, "%s/tiny-mmproj-f32.gguf", dir);
    bs_mmproj *m = bs_mmproj_load(path, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (m) {
        const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
        CHECK(hp->n_embd == 64 && hp->n_layer == 2 && hp->n_head == 2 && hp->n_ff == 128);
        CHECK(hp->patch == 16 && hp->merge == 2 && hp->pos_side == 6 && bs_mmproj_n_embd(m) == 256);
        test_fixture(m);
        bs_mmproj_free(m);
    }
    test_target_size();
    test_hostile();
    test_load_errors();
    return test_summary("test_vision");
}
