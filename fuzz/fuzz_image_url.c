/* fuzz_image_url.c: libFuzzer target for the server's image_url parts (server_image.c). The input
 * is used twice: as the URL of a part, and as a base64 payload. Any input must be accepted or
 * refused with a one-line "image_url: ..." message. Base64 is checked against an encoder: strict
 * RFC 4648 accepts exactly the canonical encodings: a payload that decodes is what encoding its
 * bytes gives (CR and LF aside), and the encoding of any bytes (the input's) decodes to them. */
#include "server/server_image.h"
#include "generate/gen.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_err(const char *err) {
    if (strncmp(err, "image_url: ", 11) || strchr(err, '\n')) abort();
}

static char *encode(const unsigned char *p, size_t n, size_t *len) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc((n + 2) / 3 * 4 + 1), *w = s;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = A[v >> 18];
        *w++ = A[v >> 12 & 63];
        *w++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? A[v & 63] : '=';
    }
    *len = (size_t)(w - s);
    return s;
}

static void fuzz_base64(const char *s, size_t n) {
    char *bare = malloc(n + 1);
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) if (s[i] != '\r' && s[i] != '\n') bare[nb++] = s[i];
    size_t ne;
    unsigned char *out = NULL;
    size_t len = 0;
    char err[256] = "";
    int rc = srv_base64_decode(s, n, 1 << 20, &out, &len, err, sizeof err);
    if (rc == 0) {
        char *enc = encode(out, len, &ne);
        if (ne != nb || memcmp(enc, bare, nb)) abort();
        free(enc);
        free(out);
    } else {
        check_err(err);
    }
    free(bare);
}

/* The other way: the encoding of any bytes decodes to them. */
static void fuzz_round_trip(const unsigned char *p, size_t n) {
    size_t ne, len = 0;
    char *enc = encode(p, n, &ne), err[256] = "";
    unsigned char *out = NULL;
    if (srv_base64_decode(enc, ne, n, &out, &len, err, sizeof err) || len != n || memcmp(out, p, n)) abort();
    free(out);
    free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_base64((const char *)data, size);
    fuzz_round_trip(data, size);
    json_t *part = json_pack("{s:s,s:{s:o}}", "type", "image_url", "image_url", "url",
                             json_stringn_nocheck((const char *)data, size));
    srv_image im;
    char err[256] = "";
    if (srv_image_from_part(part, 1 << 20, &im, err, sizeof err) == 0) {
        if (!im.data || !im.len || im.len > (1 << 20) || im.hash != bs_hash_bytes(im.data, im.len)) abort();
        srv_image_free(&im);
    } else {
        check_err(err);
        if (im.data) abort();
    }
    json_decref(part);
    return 0;
}
