/* test_server_image.c: image_url content parts -> image bytes (server_image.c). The fixture PNG,
 * a JPEG and a PPM round-trip through data: URLs (object and string forms, unspecified type,
 * upper case, wrapped lines) byte for byte, and the PNG decodes to the fixture's pixels; RFC 4648's
 * vectors; bad characters, padding and pad bits named with their offset; the size limit; remote
 * URLs, missing fields and non-images refused with one-line messages and nothing allocated. */
#include "server/server_image.h"
#include "generate/gen.h"
#include "vision/image.h"
#include "io/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static unsigned char *slurp(const char *dir, const char *name, size_t *len) {
    char path[1100];   /* a dir of up to 1023 bytes and a short name */
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *p = (unsigned char *)bs_read_file(path, len);
    if (!p) { fprintf(stderr, "%s\n", bs_last_error()); exit(1); }
    return p;
}

/* A plain encoder, written apart from the decoder under test; wrap > 0 puts CRLF every wrap chars. */
static char *b64(const unsigned char *p, size_t n, size_t wrap) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc((n + 2) / 3 * 4 * 2 + 8), *w = s;
    size_t col = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {A[v >> 18], A[v >> 12 & 63], i + 1 < n ? A[v >> 6 & 63] : '=', i + 2 < n ? A[v & 63] : '='};
        for (int k = 0; k < 4; k++) {
            if (wrap && col == wrap) { *w++ = '\r'; *w++ = '\n'; col = 0; }
            *w++ = q[k];
            col++;
        }
    }
    *w = 0;
    return s;
}

static char *cat(const char *a, const char *b) {
    char *s = malloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

/* {"type":"image_url","image_url":{"url":URL}}, or the string form */
static json_t *part_of(const char *url, int string_form) {
    if (string_form) return json_pack("{s:s,s:s}", "type", "image_url", "image_url", url);
    return json_pack("{s:s,s:{s:s}}", "type", "image_url", "image_url", "url", url);
}

/* The part must give exactly want[0..n). */
static void good(json_t *part, const unsigned char *want, size_t n) {
    srv_image im;
    char err[256] = "";
    int rc = srv_image_from_part(part, SRV_IMAGE_MAX_BYTES, &im, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        CHECK_EQ_INT(im.len, n);
        CHECK(im.len == n && !memcmp(im.data, want, n));
        CHECK(im.hash == bs_hash_bytes(want, n));
    }
    srv_image_free(&im);
    CHECK(!im.data && !im.len);
    json_decref(part);
}

/* The part must be refused with a one-line message containing `want`, and out left empty. */
static void bad(json_t *part, size_t max_bytes, const char *want) {
    srv_image im = {.data = (unsigned char *)1};
    char err[256] = "";
    int rc = srv_image_from_part(part, max_bytes, &im, err, sizeof err);
    CHECK_EQ_INT(rc, -1);
    CHECK(!im.data && !im.len);
    CHECKF(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
    CHECKF(!strncmp(err, "image_url: ", 11) && !strchr(err, '\n'), "'%s'", err);
    if (rc == 0) srv_image_free(&im);
    json_decref(part);
}

static void bad_url(const char *url, const char *want) { bad(part_of(url, 0), SRV_IMAGE_MAX_BYTES, want); }

static void rfc4648_vectors(void) {
    static const char *const v[][2] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}, {"foobar", "Zm9v\r\nYmFy\n"}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        unsigned char *out = NULL;
        size_t n = 99;
        char err[128] = "";
        int rc = srv_base64_decode(v[i][1], strlen(v[i][1]), 64, &out, &n, err, sizeof err);
        CHECKF(rc == 0 && n == strlen(v[i][0]) && !memcmp(out, v[i][0], n), "'%s': %s", v[i][1], err);
        free(out);
    }
    /* FNV-1a 64 reference values */
    CHECK(bs_hash_bytes((const unsigned char *)"", 0) == 0xcbf29ce484222325ull);
    CHECK(bs_hash_bytes((const unsigned char *)"a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(bs_hash_bytes((const unsigned char *)"foobar", 6) == 0x85944171f73967e8ull);
}

static void bad_base64(void) {
    static const char *const v[][2] = {
        {"Zm9v!mFy", "invalid base64 at byte 4 ('!')"},
        {"Zm9v YmFy", "invalid base64 at byte 4 (byte 0x20)"},
        {"Zm9v\tYmFy", "invalid base64 at byte 4 (byte 0x09)"},
        {"Zm9-YmFy", "invalid base64 at byte 3 ('-')"},        /* base64url */
        {"Zm9_YmFy", "invalid base64 at byte 3 ('_')"},
        {"Zg", "2 characters, not a multiple of 4"},            /* padding left out */
        {"Zg=", "3 characters, not a multiple of 4"},
        {"Zm9vY", "5 characters, not a multiple of 4"},
        {"Zg===", "at byte 4 (too much '=' padding)"},
        {"Z===", "at byte 1 (misplaced '=' padding)"},
        {"=Zg=", "at byte 0 (misplaced '=' padding)"},
        {"Zg==Zg==", "at byte 4 (data after '=' padding)"},
        {"Zh==", "at byte 1 (nonzero padding bits)"},           /* 'h' leaves bits in the pad */
        {"Zm9=", "at byte 2 (nonzero padding bits)"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char *url = cat("data:image/png;base64,", v[i][0]);
        bad_url(url, v[i][1]);
        free(url);
    }
}

static void refused_urls(void) {
    const char *remote = "image_url: remote URLs are not fetched; send the image as a data: URL";
    const char *const urls[] = {"http://example.com/a.png", "https://example.com/a.png", "file:///etc/passwd",
        "ftp://x/y.png", "", "a.png", "dat:image/png;base64,Zm9v", " data:image/png;base64,Zm9v"};
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) bad_url(urls[i], remote);
    bad(part_of("https://example.com/a.png", 1), SRV_IMAGE_MAX_BYTES, remote);
    bad_url("data:image/png;base64", "needs a ','");
    bad_url("data:image/png,Zm9v", "only base64 data: URLs");
    bad_url("data:image/png;base64;x=1,Zm9v", "only base64 data: URLs");
    bad_url("data:image/gif;base64,R0lGODlh", "unsupported image type 'image/gif'");
    bad_url("data:text/plain\n;base64,Zm9v", "unsupported image type 'text/plain?'");
    bad_url("data:image/png;base64,", "holds no data");
    bad_url("data:image/png;base64,aGVsbG8gd29ybGQh", "not a PNG, JPEG or PPM/PGM image");
}

static void missing_fields(void) {
    bad(json_string("data:image/png;base64,Zm9v"), 64, "must be an object");
    bad(json_pack("{s:{s:s}}", "image_url", "url", "data:,"), 64, "\"type\" must be \"image_url\"");
    bad(json_pack("{s:s,s:{s:s}}", "type", "text", "image_url", "url", "data:,"), 64, "\"type\" must be");
    bad(json_pack("{s:s}", "type", "image_url"), 64, "missing \"image_url\"");
    bad(json_pack("{s:s,s:i}", "type", "image_url", "image_url", 5), 64, "missing \"image_url\"");
    bad(json_pack("{s:s,s:{}}", "type", "image_url", "image_url"), 64, "missing \"image_url.url\"");
    bad(json_pack("{s:s,s:{s:n}}", "type", "image_url", "image_url", "url"), 64, "missing \"image_url.url\"");
    /* a short error buffer is cut, not overrun */
    char err[8];
    srv_image im;
    CHECK(srv_image_from_part(json_null(), 64, &im, err, sizeof err) == -1 && strlen(err) == 7);
    CHECK(srv_image_from_part(json_null(), 64, &im, NULL, 0) == -1);
}

/* The fixture PNG: every accepted spelling gives its bytes, which decode to the fixture's pixels. */
static void fixture_png(const char *fixtures) {
    size_t n, nrgb;
    unsigned char *png = slurp(fixtures, "vision/image.png", &n), *rgb = slurp(fixtures, "vision/image.rgb", &nrgb);
    char *enc = b64(png, n, 0), *wrapped = b64(png, n, 76);
    const char *const heads[] = {"data:image/png;base64,", "DATA:IMAGE/PNG;BASE64,", "data:;base64,",
        "data:application/octet-stream;base64,", "data:image/png;name=image.png;base64,", "data:image/jpeg;base64,"};
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        char *url = cat(heads[i], enc);
        good(part_of(url, (int)(i & 1)), png, n);
        free(url);
    }
    char *url = cat("data:image/png;base64,", wrapped);
    good(part_of(url, 0), png, n);
    srv_image im;
    char err[256] = "";
    json_t *part = part_of(url, 0);
    CHECK(srv_image_from_part(part, n, &im, err, sizeof err) == 0);   /* exactly at the limit */
    json_decref(part);
    bs_image_u8 px = {0};
    CHECKF(bs_image_decode(im.data, im.len, &px, err, sizeof err) == 0, "%s", err);
    CHECK(px.w == 96 && px.h == 64 && nrgb == 96 * 64 * 3 && !memcmp(px.rgb, rgb, nrgb));
    bs_image_free(&px);
    srv_image_free(&im);
    char want[128];
    snprintf(want, sizeof want, "the image is %zu bytes, more than the limit of %zu", n, n - 1);
    bad(part_of(url, 0), n - 1, want);
    free(url);
    free(enc);
    free(wrapped);
    free(png);
    free(rgb);
}

static void other_kinds(const char *src) {
    const char *const files[][2] = {{"base.jpg", "data:image/jpeg;base64,"}, {"progressive.jpg", "data:image/jpg;base64,"},
        {"rgb.ppm", "data:image/x-portable-pixmap;base64,"}, {"grey16.pgm", "data:image/x-portable-graymap;base64,"}};
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/image", src);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        size_t n;
        unsigned char *p = slurp(dir, files[i][0], &n);
        char *enc = b64(p, n, 0), *url = cat(files[i][1], enc);
        good(part_of(url, 1), p, n);
        free(url);
        free(enc);
        free(p);
    }
}

int main(void) {
    const char *fixtures = getenv("BS_FIXTURES"), *src = getenv("BS_SRC");
    if (!fixtures || !src) { fprintf(stderr, "BS_FIXTURES and BS_SRC must be set (ctest sets them)\n"); return 1; }
    rfc4648_vectors();
    bad_base64();
    refused_urls();
    missing_fields();
    fixture_png(fixtures);
    other_kinds(src);
    return test_summary("test_server_image");
}
