/* normalize.c: see normalize.h. */
#include "text/normalize.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>

static const char *const names[] = {"none", "nfc", "nfd", "nfkc", "nfkd"};

int bs_norm_from_name(const char *name, bs_norm_mode *mode) {
    for (size_t i = 0; i < BS_ARRAY_LEN(names); i++) {
        if (strcasecmp(name, names[i]) == 0) {
            *mode = (bs_norm_mode)i;
            return 0;
        }
    }
    return bs_error("unknown normalization '%s' (expected none, nfc, nfd, nfkc or nfkd)", name);
}

const char *bs_norm_name(bs_norm_mode mode) {
    return (unsigned)mode < BS_ARRAY_LEN(names) ? names[mode] : "?";
}

bs_norm_mode bs_norm_for_pre(const char *pre_name) {
    return !strcmp(pre_name, "qwen35") || !strcmp(pre_name, "qwen2") ? BS_NORM_NFC : BS_NORM_NONE;
}

static bool all_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* utf8proc's own option sets for utf8proc_NFC & co., with an explicit length instead of
 * NULLTERM so that a U+0000 inside the text stays a character. */
static utf8proc_option_t options(bs_norm_mode mode) {
    int o = UTF8PROC_STABLE;
    o |= mode == BS_NORM_NFC || mode == BS_NORM_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (mode == BS_NORM_NFKC || mode == BS_NORM_NFKD) o |= UTF8PROC_COMPAT;
    return (utf8proc_option_t)o;
}

int bs_normalize(bs_norm_mode mode, const char *s, size_t len, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = len;
    if (mode == BS_NORM_NONE || all_ascii(s, len)) return 0;
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res, options(mode));
    if (n < 0) return bs_error("unicode normalization (%s) failed: %s", bs_norm_name(mode), utf8proc_errmsg(n));
    *out = (char *)res;
    *out_len = (size_t)n;
    return 0;
}
