/* server_infill.c: the prompt of POST /infill (fill in the middle), as llama-server builds it
 * from the vocabulary's FIM tokens:
 *
 *   [<|repo_name|> "myproject\n"] { <|file_sep|> filename "\n" text }   (input_extra)
 *   [<|file_sep|> "filename\n"]  <|fim_prefix|> prefix prompt  <|fim_suffix|> suffix  <|fim_middle|>
 *
 * (<|repo_name|> and <|file_sep|> where the vocabulary has them; without <|file_sep|> the extra
 * files are joined by "\n\n--- snippet ---\n\n"). The model writes the middle. To fit, the prefix
 * keeps its last 3/4 of a batch of tokens, the suffix its first quarter less the prompt, the
 * extra context its last tokens that leave room for the prefix, the suffix and twice n_predict;
 * a cut is reported as `truncated`. A model without the three FIM tokens answers 501, as
 * llama-server. */
#include "server/server.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct ids { int32_t *p; int n; } ids;

static void put(ids *v, const int32_t *x, int n) {
    v->p = bs_xrealloc(v->p, (size_t)(v->n + n + 1) * sizeof *v->p);
    if (n) memcpy(v->p + v->n, x, (size_t)n * sizeof *x);
    v->n += n;
}

static void put1(ids *v, int32_t x) { put(v, &x, 1); }

/* text as plain text (no control tokens) appended to v */
static int put_text(const srv *s, ids *v, const char *text, size_t len, bool special) {
    int32_t *t;
    size_t n;
    if (bs_tokenize(s->tok, text, len, special, &t, &n) < 0) return -1;
    put(v, t, (int)n);
    free(t);
    return 0;
}

static int check_fields(json_t *b, srv_fail *f) {
    static const char extra_msg[] = "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}";
    json_t *p = json_object_get(b, "prompt"), *x = json_object_get(b, "input_extra");
    if (p && !json_is_null(p) && !json_is_string(p)) return srv_fail_set(f, 400, "invalid_request_error", "\"prompt\" must be a string");
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "input_suffix" : "input_prefix";
        json_t *v = json_object_get(b, name);
        if (!v) return srv_fail_set(f, 400, "invalid_request_error", "\"%s\" is required", name);
        if (!json_is_string(v)) return srv_fail_set(f, 400, "invalid_request_error", "\"%s\" must be a string", name);
    }
    if (x && !json_is_null(x) && !json_is_array(x)) return srv_fail_set(f, 400, "invalid_request_error", extra_msg);
    size_t i;
    json_t *c;
    json_array_foreach(x, i, c) {
        json_t *fn = json_object_get(c, "filename");
        if (!json_is_object(c) || !json_is_string(json_object_get(c, "text")))
            return srv_fail_set(f, 400, "invalid_request_error", "extra_context chunk must contain a \"text\" field with a string value");
        if (fn && !json_is_string(fn))
            return srv_fail_set(f, 400, "invalid_request_error", "extra_context chunk's \"filename\" field must be a string");
    }
    return 0;
}

/* The input_extra files (and the repository name) as tokens. */
static int extra_tokens(const srv *s, json_t *x, int32_t rep, int32_t sep, ids *out) {
    static const char snippet[] = "\n\n--- snippet ---\n\n";
    if (rep >= 0) {
        put1(out, rep);
        if (put_text(s, out, "myproject\n", 10, false)) return -1;
    }
    size_t i;
    json_t *c;
    json_array_foreach(x, i, c) {
        json_t *fn = json_object_get(c, "filename"), *text = json_object_get(c, "text");
        if (sep >= 0) {
            const char *name = json_is_string(fn) ? json_string_value(fn) : "tmp";
            char *line = bs_xmalloc(strlen(name) + 2);
            strcpy(line, name);
            strcat(line, "\n");
            put1(out, sep);
            const int rc = put_text(s, out, line, strlen(line), false);
            free(line);
            if (rc) return -1;
        } else if (put_text(s, out, snippet, sizeof snippet - 1, false)) {
            return -1;
        }
        if (put_text(s, out, json_string_value(text), json_string_length(text), false)) return -1;
    }
    if (sep >= 0) {
        put1(out, sep);
        if (put_text(s, out, "filename\n", 9, false)) return -1;
    }
    return 0;
}

int srv_infill_prompt(srv *s, json_t *b, int n_predict, srv_prompt *out, bool *cut, srv_fail *f) {
    const int32_t pre = bs_token_lookup(s->tok, "<|fim_prefix|>"), suf = bs_token_lookup(s->tok, "<|fim_suffix|>"),
                  mid = bs_token_lookup(s->tok, "<|fim_middle|>"), rep = bs_token_lookup(s->tok, "<|repo_name|>"),
                  sep = bs_token_lookup(s->tok, "<|file_sep|>");
    if (pre < 0 || suf < 0 || mid < 0)
        return srv_fail_set(f, 501, "not_supported_error", "Infill is not supported by this model: %s%s%s",
                            pre < 0 ? "prefix token is missing. " : "", suf < 0 ? "suffix token is missing. " : "",
                            mid < 0 ? "middle token is missing. " : "");
    if (check_fields(b, f)) return f->status;
    json_t *jp = json_object_get(b, "input_prefix"), *js = json_object_get(b, "input_suffix"), *jq = json_object_get(b, "prompt");
    const int n_ctx = srv_sched_n_ctx(s->sched);
    const size_t bytes = json_string_length(jp) + json_string_length(js) + (json_is_string(jq) ? json_string_length(jq) : 0);
    ids prefix = {0}, suffix = {0}, prompt = {0}, extra = {0}, all = {0};
    const bool too_long = srv_min_tokens(s, bytes) >= (size_t)n_ctx;   /* the bytes alone are too many tokens */
    int rc = too_long || put_text(s, &prefix, json_string_value(jp), json_string_length(jp), false) ||
             put_text(s, &suffix, json_string_value(js), json_string_length(js), false) ||
             (json_is_string(jq) && put_text(s, &prompt, json_string_value(jq), json_string_length(jq), true)) ||
             extra_tokens(s, json_object_get(b, "input_extra"), rep, sep, &extra);
    if (rc) {
        if (too_long) srv_fail_set(f, 400, "exceed_context_size_error", "the request exceeds the available context size: "
                                  "at least %zu prompt tokens, context %d", srv_min_tokens(s, bytes), n_ctx);
        else srv_fail_set(f, 400, "invalid_request_error", "tokenizing the input: %s", bs_last_error());
    } else {
        /* llama-server's split of a batch (here the smaller of 2048 and half the context) */
        const int batch = BS_MIN(2048, n_ctx / 2), np = BS_MAX(n_predict, 0);
        const int take_pre = BS_MIN(prefix.n, 3 * (batch / 4));
        const int take_suf = BS_MIN(suffix.n, BS_MAX(0, batch / 4 - (2 + prompt.n)));
        const int take_extra = (int)BS_MIN(BS_MAX(0L, (long)n_ctx - batch - 2L * np), (long)extra.n);
        *cut = take_pre < prefix.n || take_suf < suffix.n || take_extra < extra.n;
        const int32_t bos = bs_token_bos(s->tok);
        if (take_extra) put(&all, extra.p + extra.n - take_extra, take_extra);
        if (bs_tokenizer_add_bos(s->tok) && bos >= 0) put1(&all, bos);
        put1(&all, pre);
        if (take_pre) put(&all, prefix.p + prefix.n - take_pre, take_pre);
        put(&all, prompt.p, prompt.n);
        put1(&all, suf);
        put(&all, suffix.p, take_suf);
        put1(&all, mid);
        if (all.n >= n_ctx) {
            f->n_prompt = all.n;
            rc = srv_fail_set(f, 400, "exceed_context_size_error", "the request exceeds the available context size: "
                              "%d prompt tokens, context %d", all.n, n_ctx);
        }
    }
    free(prefix.p);
    free(suffix.p);
    free(prompt.p);
    free(extra.p);
    if (rc) {
        free(all.p);
        return f->status;
    }
    out->ids = all.p;
    out->n = all.n;
    size_t len;
    if (bs_detokenize(s->tok, all.p, (size_t)all.n, true, &out->text, &len)) out->text = NULL;
    return 0;
}
