/* server_infill.c: the prompt of POST /infill (fill in the middle), as llama-server builds it
 * from the vocabulary's FIM tokens:
 *
 *   [<|repo_name|> "myproject\n"] { <|file_sep|> filename "\n" text }   (input_extra)
 *   [<|file_sep|> "filename\n"]  <|fim_prefix|> prefix prompt  <|fim_suffix|> suffix  <|fim_middle|>
 *
 * (<|repo_name|> and <|file_sep|> where the vocabulary has them; without <|file_sep|> the extra
 * files are joined by "\n\n--- snippet ---\n\n"). The model writes the middle. To fit, the prefix
 * keeps its last 3/4 of a batch of tokens, the suffix its first quarter less the prompt, the
 * extra context its last tokens that leave room for the prefix, the suffix and twice n_predict
 * (tokenized from the end only as far as that);
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

/* The last `need` tokens of text (all of it when it is short) appended to v: a long text is
 * tokenized from a window at its end, wide enough for need+2 of the longest pieces and started on
 * a character, so the work is bounded by what is kept, not by what the client sent. The tokens
 * kept lie at least twice the longest piece from the window's start, where a cut word may
 * tokenize otherwise than in the whole text; its first token is dropped. */
static int put_tail(const srv *s, ids *v, const char *text, size_t len, size_t need, bool *cut) {
    const size_t window = s->max_piece > 0 ? (need + 2) * (size_t)s->max_piece * 4 : len;
    size_t from = len > window ? len - window : 0;
    while (from < len && ((unsigned char)text[from] & 0xC0) == 0x80) from++;
    if (from) *cut = true;
    ids t = {0};
    if (put_text(s, &t, text + from, len - from, false)) { free(t.p); return -1; }
    const int skip = from && t.n > 0 ? 1 : 0;   /* the window's first token may be a piece of one */
    put(v, t.p + skip, t.n - skip);
    free(t.p);
    return 0;
}

/* One input_extra file as tokens: its header (<|file_sep|> name "\n", or the snippet line), then
 * its text's last `need` tokens. */
static int extra_chunk(const srv *s, json_t *c, int32_t sep, size_t need, ids *out, bool *cut) {
    static const char snippet[] = "\n\n--- snippet ---\n\n";
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
    return put_tail(s, out, json_string_value(text), json_string_length(text), need, cut);
}

/* The input_extra files (and the repository name) as tokens, of which the prompt keeps the last
 * `need`: the files are taken from the last back until they hold that many, so a client's
 * megabytes of context cost the tokenizer only what fits (*cut: something was left out). */
static int extra_tokens(const srv *s, json_t *x, int32_t rep, int32_t sep, size_t need, ids *out, bool *cut) {
    const size_t n = json_array_size(x);
    ids *files = bs_xcalloc(n + 1, sizeof *files);
    size_t have = 0, first = n;
    int rc = 0;
    if (sep >= 0) {
        put1(&files[n], sep);
        rc = put_text(s, &files[n], "filename\n", 9, false);
        have = (size_t)files[n].n;
    }
    while (!rc && first > 0 && have < need) {
        first--;
        rc = extra_chunk(s, json_array_get(x, first), sep, need - have, &files[first], cut);
        have += (size_t)files[first].n;
    }
    if (first > 0) *cut = true;
    if (!rc && rep >= 0 && first == 0 && have < need) {
        put1(out, rep);
        rc = put_text(s, out, "myproject\n", 10, false);
    } else if (rep >= 0) {
        *cut = true;
    }
    for (size_t i = first; i <= n; i++) {
        if (!rc) put(out, files[i].p, files[i].n);
        free(files[i].p);
    }
    free(files);
    return rc;
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
    /* llama-server's split of a batch (here the smaller of 2048 and half the context) */
    const int batch = BS_MIN(2048, n_ctx / 2), np = BS_MAX(n_predict, 0);
    const long room = BS_MAX(0L, (long)n_ctx - batch - 2L * np);   /* the most extra tokens kept */
    bool extra_cut = false;
    int rc = too_long || put_text(s, &prefix, json_string_value(jp), json_string_length(jp), false) ||
             put_text(s, &suffix, json_string_value(js), json_string_length(js), false) ||
             (json_is_string(jq) && put_text(s, &prompt, json_string_value(jq), json_string_length(jq), true)) ||
             extra_tokens(s, json_object_get(b, "input_extra"), rep, sep, (size_t)room, &extra, &extra_cut);
    if (rc) {
        if (too_long) srv_fail_set(f, 400, "exceed_context_size_error", "the request exceeds the available context size: "
                                  "at least %zu prompt tokens, context %d", srv_min_tokens(s, bytes), n_ctx);
        else srv_fail_set(f, 400, "invalid_request_error", "tokenizing the input: %s", bs_last_error());
    } else {
        const int take_pre = BS_MIN(prefix.n, 3 * (batch / 4));
        const int take_suf = BS_MIN(suffix.n, BS_MAX(0, batch / 4 - (2 + prompt.n)));
        const int take_extra = (int)BS_MIN(room, (long)extra.n);
        *cut = take_pre < prefix.n || take_suf < suffix.n || take_extra < extra.n || extra_cut;
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
