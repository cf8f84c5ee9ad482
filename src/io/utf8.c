/* utf8.c: see utf8.h. */
#include "io/utf8.h"

/* Valid range of the second byte for each lead byte (the first byte decides it); later
 * continuation bytes are always 0x80..0xBF. */
static bool second_ok(unsigned char lead, unsigned char b) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;   /* no overlong 3-byte forms */
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;   /* no surrogates */
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;   /* no overlong 4-byte forms */
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;   /* nothing above U+10FFFF */
    return b >= 0x80 && b <= 0xBF;
}

int bs_utf8_next(const unsigned char *s, size_t avail, uint32_t *cp) {
    if (avail == 0) return 0;
    unsigned char c = s[0];
    int need;
    uint32_t v;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { need = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 4; v = c & 0x07; }
    else return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= avail) return 0;
        unsigned char b = s[i];
        if (i == 1 ? !second_ok(c, b) : (b & 0xC0) != 0x80) return -1;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need;
}

bool bs_utf8_valid(const char *s, size_t len, size_t *bad) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int n = bs_utf8_next(u + i, len - i, &cp);
        if (n <= 0) { if (bad) *bad = i; return false; }
        i += (size_t)n;
    }
    return true;
}

size_t bs_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
