/* server_bias.c: a request's "logit_bias", in the forms of OpenAI and llama-server: an object
 * {"id or text": bias} or a list [[id or text, bias | false], ...]. A key that is a whole number
 * is a token id; any other is text, whose every token gets the bias (the text tokenized as
 * plain text, as llama-server does). A bias <= -100, or false, bans the token. */
#include "server/server.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int add_one(srv_task *t, long id, double bias, int n_vocab, srv_fail *f) {
    if (id < 0 || id >= n_vocab)
        return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias': token %ld is out of range [0, %d)", id, n_vocab);
    if (t->n_bias == SRV_MAX_BIAS) return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias' has too many entries");
    /* checked here, not when sampling: a bias past float range would fail the request with a 500 */
    if (!(bias <= SRV_MAX_BIAS_VALUE))
        return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias': the bias of token %ld must be a number <= %g "
                            "(<= -100 bans the token)", id, SRV_MAX_BIAS_VALUE);
    t->bias_id[t->n_bias] = (int32_t)id;
    t->bias[t->n_bias++] = bias <= -100 ? -INFINITY : (float)bias;
    return 0;
}

/* key: text (each of its tokens), or an id when it is a whole number and may_be_id (object keys;
 * a string in the list form is always text). */
static int add_key(const bs_tokenizer *tok, srv_task *t, const char *key, size_t len, bool may_be_id, double bias,
                   int n_vocab, srv_fail *f) {
    char *end;
    long id = strtol(key, &end, 10);
    if (may_be_id && end != key && end == key + len) return add_one(t, id, bias, n_vocab, f);
    int32_t *ids;
    size_t n;
    if (!tok || bs_tokenize(tok, key, len, false, &ids, &n) < 0)
        return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias': cannot tokenize '%.64s'", key);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) rc = add_one(t, ids[i], bias, n_vocab, f);
    free(ids);
    return rc;
}

int srv_parse_bias(const bs_tokenizer *tok, json_t *b, srv_task *t, int n_vocab, srv_fail *f) {
    json_t *v = json_object_get(b, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    const char *key;
    json_t *e;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, key, e) {
            if (!json_is_number(e) && !json_is_false(e))
                return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias' values must be numbers or false "
                                    "(got one for '%.64s')", key);
            if (add_key(tok, t, key, strlen(key), true, json_is_false(e) ? -1e9 : json_number_value(e), n_vocab, f))
                return f->status;
        }
        return 0;
    }
    if (!json_is_array(v)) return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias' must be an object or a list");
    json_array_foreach(v, i, e) {
        json_t *id = json_array_get(e, 0), *bias = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !(json_is_integer(id) || json_is_string(id)) ||
            !(json_is_number(bias) || json_is_false(bias)))
            return srv_fail_set(f, 400, "invalid_request_error", "'logit_bias' entries must be [token id or text, bias or false]");
        const double x = json_is_false(bias) ? -1e9 : json_number_value(bias);
        const int rc = json_is_integer(id) ? add_one(t, (long)json_integer_value(id), x, n_vocab, f)
                                           : add_key(tok, t, json_string_value(id), json_string_length(id), false, x, n_vocab, f);
        if (rc) return rc;
    }
    return 0;
}
