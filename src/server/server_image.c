/* server_image.c: image_url content parts -> image bytes (see server_image.h).
 *
 * A data: URL (RFC 2397) is data:[<type>][;<attr>=<value>]...;base64,<payload>. The type may be
 * empty or application/octet-stream (the decoder sniffs), image/png, image/jpeg (image/jpg too,
 * which some clients write) or a PNM type; attributes such as name= or charset= are ignored.
 * The declared type is not held against the bytes: a mislabelled file still decodes, as the
 * decoder chooses by signature; bytes with no known signature are refused here, so the client
 * learns it at once (400) rather than from the engine.
 *
 * Base64 is RFC 4648's strict form: the standard alphabet (not base64url's - and _), '=' padding
 * required to a multiple of 4 characters, padding only at the very end, and the unused bits of
 * the last character zero (one canonical encoding per image, which the prompt cache's hash
 * relies on). Whitespace policy: CR and LF are skipped anywhere, because `base64` and MIME wrap
 * lines at 76 columns; every other byte outside the alphabet, spaces and tabs included, is an
 * error that names its offset in the payload. */
#include "server/server_image.h"
#include "server/server.h"
#include "generate/gen.h"
#include "io/util.h"
#include "vision/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REMOTE_MSG "image_url: remote URLs are not fetched; send the image as a data: URL"

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static int bad_byte(const char *s, size_t i, char *err, size_t errlen) {
    unsigned char c = (unsigned char)s[i];
    if (c > 32 && c < 127)
        return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu ('%c')", i, c);
    return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu (byte 0x%02x)", i, c);
}

/* Pass one: validate everything and count, so nothing is allocated for bad or oversized data.
 * *n_sym: alphabet characters; the decoded size follows from it. */
static int b64_scan(const char *s, size_t n, size_t *n_sym, char *err, size_t errlen) {
    size_t sym = 0, pads = 0, last = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r' || c == '\n') continue;
        if (c == '=') {
            if (pads == 0 && sym % 4 < 2)
                return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu (misplaced '=' padding)", i);
            if (++pads > 2) return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu (too much '=' padding)", i);
            continue;
        }
        if (b64_value(c) < 0) return bad_byte(s, i, err, errlen);
        if (pads) return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu (data after '=' padding)", i);
        sym++;
        last = i;
    }
    if ((sym + pads) % 4)
        return bs_errbuf(err, errlen, "image_url: invalid base64: %zu characters, not a multiple of 4 ('=' padding is required)",
                    sym + pads);
    int unused = sym % 4 == 2 ? 0xf : sym % 4 == 3 ? 0x3 : 0;
    if (unused && (b64_value((unsigned char)s[last]) & unused))
        return bs_errbuf(err, errlen, "image_url: invalid base64 at byte %zu (nonzero padding bits)", last);
    *n_sym = sym;
    return 0;
}

int srv_base64_decode(const char *s, size_t n, size_t max_bytes, unsigned char **out, size_t *out_len,
                      char *err, size_t errlen) {
    size_t sym = 0;
    if (b64_scan(s, n, &sym, err, errlen)) return -1;
    size_t len = sym / 4 * 3 + (sym % 4 ? sym % 4 - 1 : 0);
    if (len > max_bytes)
        return bs_errbuf(err, errlen, "image_url: the image is %zu bytes, more than the limit of %zu", len, max_bytes);
    unsigned char *p = malloc(len ? len : 1);
    if (!p) return bs_errbuf(err, errlen, "image_url: out of memory for %zu bytes", len);
    uint32_t acc = 0;
    size_t k = 0, bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) continue;   /* CR, LF and the padding: the scan vouched for the rest */
        acc = (acc << 6 | (uint32_t)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) { bits -= 8; p[k++] = (unsigned char)(acc >> bits); }
    }
    *out = p;
    *out_len = k;
    return 0;
}

/* Printable ASCII of s[0..n) into a buffer for a message (user text must not break the line). */
static const char *printable(const char *s, size_t n, char *buf, size_t size) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < size; i++)
        buf[k++] = s[i] >= 32 && s[i] < 127 ? s[i] : '?';
    if (n && k < n) { memcpy(buf + k, "...", 3); k += 3; }
    buf[k] = 0;
    return buf;
}

static int media_type_ok(const char *t, size_t n) {
    static const char *const ok[] = {"", "application/octet-stream", "image/png", "image/jpeg", "image/jpg",
        "image/x-portable-pixmap", "image/x-portable-graymap", "image/x-portable-anymap"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strlen(ok[i]) == n && !strncasecmp(t, ok[i], n)) return 1;
    return 0;
}

/* url[0..n) -> its base64 payload, after checking the scheme, the type and the ;base64 flag. */
static int data_url_payload(const char *url, size_t n, const char **pay, size_t *pay_len, char *err, size_t errlen) {
    if (n < 5 || strncasecmp(url, "data:", 5)) return bs_errbuf(err, errlen, REMOTE_MSG);
    const char *head = url + 5, *comma = memchr(head, ',', n - 5);
    if (!comma) return bs_errbuf(err, errlen, "image_url: a data: URL needs a ',' before its data");
    const char *semi = memchr(head, ';', (size_t)(comma - head));
    const char *type_end = semi ? semi : comma, *flag = comma;
    while (flag > head && flag[-1] != ';') flag--;
    if (!semi || comma - flag != 6 || strncasecmp(flag, "base64", 6))
        return bs_errbuf(err, errlen, "image_url: only base64 data: URLs are taken (data:image/png;base64,...)");
    if (!media_type_ok(head, (size_t)(type_end - head))) {
        char buf[48];
        return bs_errbuf(err, errlen, "image_url: unsupported image type '%s' (PNG, JPEG or PPM/PGM)",
                    printable(head, (size_t)(type_end - head), buf, sizeof buf));
    }
    *pay = comma + 1;
    *pay_len = n - (size_t)(*pay - url);
    if (!*pay_len) return bs_errbuf(err, errlen, "image_url: the data: URL holds no data");
    return 0;
}

/* The URL string of the part: "image_url": {"url": "..."} or "image_url": "...". */
static const json_t *part_url(const json_t *part, char *err, size_t errlen) {
    if (!json_is_object(part)) { bs_errbuf(err, errlen, "image_url: a content part must be an object"); return NULL; }
    const json_t *type = json_object_get(part, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "image_url")) {
        bs_errbuf(err, errlen, "image_url: the part's \"type\" must be \"image_url\"");
        return NULL;
    }
    const json_t *iu = json_object_get(part, "image_url");
    if (json_is_string(iu)) return iu;
    if (!json_is_object(iu)) {
        bs_errbuf(err, errlen, "image_url: missing \"image_url\" ({\"url\": \"data:...\"} or a URL string)");
        return NULL;
    }
    const json_t *url = json_object_get(iu, "url");
    if (!json_is_string(url)) { bs_errbuf(err, errlen, "image_url: missing \"image_url.url\" (a string)"); return NULL; }
    return url;
}

int srv_image_from_part(const json_t *part, size_t max_bytes, srv_image *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const json_t *url = part_url(part, err, errlen);
    const char *pay = NULL;
    size_t pay_len = 0;
    unsigned char *data = NULL;
    size_t len = 0;
    if (url && json_string_length(url) >= 7 && !strncasecmp(json_string_value(url), "file://", 7)) {   /* --media-path */
        if (srv_media_read(json_string_value(url), json_string_length(url), max_bytes, &data, &len, err, errlen)) return -1;
    } else if (!url || data_url_payload(json_string_value(url), json_string_length(url), &pay, &pay_len, err, errlen))
        return -1;
    else if (srv_base64_decode(pay, pay_len, max_bytes, &data, &len, err, errlen)) return -1;
    if (!bs_image_kind(data, len)) {
        free(data);
        return bs_errbuf(err, errlen, "image_url: the data is not a PNG, JPEG or PPM/PGM image");
    }
    *out = (srv_image){.data = data, .len = len, .hash = bs_hash_bytes(data, len)};
    return 0;
}

/* ---- dimensions from the header: PNG IHDR, JPEG SOFn, PPM/PGM ---- */

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }
static unsigned long be32(const unsigned char *p) { return (unsigned long)be16(p) << 16 | be16(p + 2); }

static int png_dims(const unsigned char *d, size_t n, long long *w, long long *h) {
    if (n < 24 || memcmp(d + 12, "IHDR", 4)) return -1;
    *w = (long long)be32(d + 16);
    *h = (long long)be32(d + 20);
    return 0;
}

/* The first frame header (SOF0..SOF15 but DHT, JPG and DAC) before the scan. */
static int jpeg_dims(const unsigned char *d, size_t n, long long *w, long long *h) {
    size_t at = 2;
    while (at + 4 <= n) {
        if (d[at] != 0xFF) return -1;
        const unsigned m = d[at + 1];
        if (m == 0xFF) { at++; continue; }   /* fill byte */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { at += 2; continue; }   /* no length */
        if (m == 0xDA || m == 0xD9) return -1;   /* scan or end before a frame header */
        const unsigned len = be16(d + at + 2);
        if (len < 2 || at + 2 + len > n) return -1;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (len < 7) return -1;
            *h = be16(d + at + 5);
            *w = be16(d + at + 7);
            return 0;
        }
        at += 2 + len;
    }
    return -1;
}

static int ppm_num(const unsigned char *d, size_t n, size_t *at, long long *v) {
    for (;;) {
        while (*at < n && strchr(" \t\r\n", d[*at]) && d[*at]) (*at)++;
        if (*at < n && d[*at] == '#') { while (*at < n && d[*at] != '\n') (*at)++; continue; }
        break;
    }
    if (*at >= n || d[*at] < '0' || d[*at] > '9') return -1;
    for (*v = 0; *at < n && d[*at] >= '0' && d[*at] <= '9'; (*at)++)
        if ((*v = *v * 10 + (d[*at] - '0')) > (1ll << 40)) return -1;
    return 0;
}

int srv_image_dims(const unsigned char *d, size_t n, int *w, int *h, char *err, size_t errlen) {
    const char *k = bs_image_kind(d, n);
    long long W = 0, H = 0;
    size_t at = 2;
    int rc = !k ? -1 : !strcmp(k, "png") ? png_dims(d, n, &W, &H) : !strcmp(k, "jpeg") ? jpeg_dims(d, n, &W, &H)
             : (ppm_num(d, n, &at, &W) || ppm_num(d, n, &at, &H)) ? -1 : 0;
    if (rc) return bs_errbuf(err, errlen, "image_url: the %s header is malformed", k ? k : "image");
    if (bs_image_check_size(W, H, err, errlen)) return -1;
    *w = (int)W;
    *h = (int)H;
    return 0;
}

void srv_image_free(srv_image *im) {
    if (!im) return;
    free(im->data);
    memset(im, 0, sizeof *im);
}
