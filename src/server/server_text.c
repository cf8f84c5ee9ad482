/* server_text.c: generated text as a JSON string. Kept apart from the answers that use it
 * (server_native.c, server_reply.c, server_calls.c, ...) so that each of them can, without
 * a circle between files. */
#include "server/server.h"
#include "io/utf8.h"

#include <jansson.h>

json_t *srv_text_json(const char *p, size_t len) {
    if (bs_utf8_valid(p, len, NULL)) return json_stringn(p, len);
    srv_buf b = {0};
    srv_buf_adds(&b, "");
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = bs_utf8_next((const unsigned char *)p + i, len - i, &cp);
        if (n <= 0) { srv_buf_adds(&b, "\xEF\xBF\xBD"); i++; }
        else { srv_buf_add(&b, p + i, (size_t)n); i += (size_t)n; }
    }
    json_t *j = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    return j;
}
