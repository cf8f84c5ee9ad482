/* utf8.h: strict UTF-8 decoding and encoding shared by the tokenizer, the streaming
 * detokenizer and the chat code. "Strict" means RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF, so every accepted string round-trips byte for byte. */
#ifndef BS_UTF8_H
#define BS_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the sequence at s (avail bytes left). Returns its length (1..4) and sets *cp; 0 if the
 * bytes are a valid but incomplete prefix of a sequence that runs past avail; -1 if invalid. */
int bs_utf8_next(const unsigned char *s, size_t avail, uint32_t *cp);
/* True if s[0..len) is valid UTF-8; otherwise false and *bad = byte offset of the first error. */
bool bs_utf8_valid(const char *s, size_t len, size_t *bad);
/* Encode cp (must be a valid scalar value) into out; returns the byte count (1..4). */
size_t bs_utf8_encode(uint32_t cp, char out[4]);

#endif
