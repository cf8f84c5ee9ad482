/* server_image.h: an OpenAI image_url content part -> the image file's bytes.
 *
 * Only data: URLs with a base64 payload are taken; the server fetches nothing (an http:, https:
 * or file: URL would let any client make the server read its network or its disk). */
#ifndef BS_SERVER_IMAGE_H
#define BS_SERVER_IMAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A sensible max_bytes: the decoded file, not its pixels (the decoders bound those). The
 * request body limit (--body-limit, 8 MiB by default) usually bites first: base64 is 4/3 larger. */
#define SRV_IMAGE_MAX_BYTES (16u << 20)

typedef struct srv_image { unsigned char *data; size_t len; uint64_t hash; } srv_image;

/* One content part of type image_url: {"type":"image_url","image_url":{"url":"data:image/png;base64,..."}}
 * (also accept "image_url": "<url string>" as some clients send). data: URLs with base64 payload only
 * (image/png, image/jpeg, image/x-portable-pixmap / pnm; also unspecified type: the decoder sniffs);
 * remote URLs (http:, https:, file:, anything else) are refused: the server fetches nothing.
 * 0, or -1 + the HTTP 400 message in err. hash: 64-bit FNV-1a of the decoded bytes (the prompt cache key). */
int srv_image_from_part(const json_t *part, size_t max_bytes, srv_image *out, char *err, size_t errlen);
void srv_image_free(srv_image *im);
/* The image's size from its header alone (PNG IHDR, JPEG's frame header, PPM/PGM), nothing
 * decoded: 0, or -1 + message (a malformed header, or a size past the decoders' limits). */
int srv_image_dims(const unsigned char *data, size_t len, int *w, int *h, char *err, size_t errlen);

/* The piece, for the tests and the fuzzer (the hash is bs_hash_bytes, 64-bit FNV-1a).
 * srv_base64_decode: strict RFC 4648 base64 (see server_image.c for the rules); 0 with a
 * malloc'd *out (never NULL, even for 0 bytes), or -1 + message. */
int srv_base64_decode(const char *s, size_t n, size_t max_bytes, unsigned char **out, size_t *out_len,
                      char *err, size_t errlen);

#endif
