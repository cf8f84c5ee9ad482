/* server_tokenize.c: POST /tokenize (content, add_special, parse_special, with_pieces) and
 * POST /detokenize (tokens), llama-server's shapes. */
#include "server/server.h"
#include "io/util.h"
#include "io/utf8.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A piece as a string when it is valid UTF-8, else as its byte values (llama-server does so). */
static json_t *piece_json(const char *p, size_t len) {
    if (bs_utf8_valid(p, len, NULL)) return json_stringn(p, len);
    json_t *a = json_array();
    for (size_t i = 0; i < len; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

void srv_api_tokenize(srv *s, json_t *b, srv_reply *r) {
    json_t *c = json_object_get(b, "content");
    bool add_special = false, parse_special = true, pieces = false;
    if (!json_is_string(c)) { srv_reply_error(r, 400, "invalid_request_error", "'content' must be a string"); return; }
    if (!srv_get_bool(b, "add_special", &add_special, r) || !srv_get_bool(b, "parse_special", &parse_special, r) ||
        !srv_get_bool(b, "with_pieces", &pieces, r))
        return;
    int32_t *ids;
    size_t n;
    if (bs_tokenize(s->tok, json_string_value(c), json_string_length(c), parse_special, &ids, &n) < 0) {
        srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
        return;
    }
    /* written as text, not as a tree: 7 MB of content is ~2M tokens (jansson: ~1 GB of nodes) */
    srv_buf out = {0};
    char num[64];
    srv_buf_adds(&out, "{\"tokens\":[");
    int32_t bos = bs_token_bos(s->tok);
    const bool add_bos = add_special && bs_tokenizer_add_bos(s->tok) && bos >= 0 && !(n && ids[0] == bos);
    if (add_bos) {
        snprintf(num, sizeof num, "%d", (int)bos);
        srv_buf_adds(&out, num);
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(num, sizeof num, "%s%s%d", i || add_bos ? "," : "", pieces ? "{\"id\":" : "", (int)ids[i]);
        srv_buf_adds(&out, num);
        if (!pieces) continue;
        const char *p;
        size_t len = 0;
        bs_token_to_piece(s->tok, ids[i], true, &p, &len);
        json_t *pj = piece_json(p, len);
        char *txt = json_dumps(pj, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(pj);
        srv_buf_adds(&out, ",\"piece\":");
        srv_buf_adds(&out, txt ? txt : "null");
        srv_buf_adds(&out, "}");
        free(txt);
    }
    srv_buf_adds(&out, "]}");
    free(ids);
    r->status = 200;
    r->ctype = "application/json; charset=utf-8";
    r->body = out.p;
    r->len = out.len;
    srv_trim_after(out.len);
}

void srv_api_detokenize(srv *s, json_t *b, srv_reply *r) {
    json_t *a = json_object_get(b, "tokens");
    if (!json_is_array(a)) { srv_reply_error(r, 400, "invalid_request_error", "'tokens' must be an array of token ids"); return; }
    size_t n = json_array_size(a), i;
    int32_t *ids = bs_xmalloc((n ? n : 1) * sizeof *ids);
    json_t *e;
    json_array_foreach(a, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= bs_tokenizer_n_vocab(s->tok)) {
            free(ids);
            srv_reply_error(r, 400, "invalid_request_error", "'tokens' must hold token ids of the vocabulary");
            return;
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    char *text;
    size_t len;
    if (bs_detokenize(s->tok, ids, n, true, &text, &len)) {
        free(ids);
        srv_reply_error(r, 400, "invalid_request_error", "%s", bs_last_error());
        return;
    }
    free(ids);
    srv_reply_json(r, 200, json_pack("{s:s%}", "content", text, len));
    free(text);
}

