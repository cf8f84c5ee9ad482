/* antidoom_common.c: prompt files, chosen-token selection and per-prompt model runs shared by
 * `bitspark antidoom mine` and `eval` (see antidoom.h). */
#include "tools/antidoom.h"
#include "io/util.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- prompt files ------------------------------------------------------------------------------- */

static const char *first_user_turn(json_t *conv) {
    size_t i;
    json_t *m;
    json_array_foreach(conv, i, m) {
        const char *who = json_string_value(json_object_get(m, "from"));
        if (!who) who = json_string_value(json_object_get(m, "role"));
        const char *v = json_string_value(json_object_get(m, "value"));
        if (!v) v = json_string_value(json_object_get(m, "content"));
        if (who && v && (!strcmp(who, "human") || !strcmp(who, "user"))) return v;
    }
    return NULL;
}

static char *prompt_of_line(const char *line, size_t len, int lineno) {
    if (len && (line[0] == '{' || line[0] == '"')) {
        json_error_t err;
        json_t *j = json_loadb(line, len, JSON_DECODE_ANY, &err);
        if (!j) {
            bs_error("line %d: bad JSON: %s", lineno, err.text);
            return NULL;
        }
        const char *s = json_string_value(j);
        static const char *keys[] = {"prompt", "text", "context"};
        for (size_t k = 0; !s && json_is_object(j) && k < BS_ARRAY_LEN(keys); k++)
            s = json_string_value(json_object_get(j, keys[k]));
        if (!s && json_is_object(j)) s = first_user_turn(json_object_get(j, "conversations"));
        char *out = s ? bs_xstrdup(s) : NULL;
        json_decref(j);
        if (!out) bs_error("line %d: no \"prompt\", \"text\", \"context\" or user turn", lineno);
        return out;
    }
    char *out = bs_xmalloc(len + 1);
    memcpy(out, line, len);
    out[len] = 0;
    return out;
}

int ad_prompts_read(const char *path, ad_prompts *p) {
    memset(p, 0, sizeof *p);
    size_t len;
    char *buf = bs_read_file(path, &len);
    if (!buf) return bs_error_prefix("%s: ", path);
    int cap = 0, lineno = 0;
    for (size_t off = 0; off < len;) {
        const char *nl = memchr(buf + off, '\n', len - off);
        size_t end = nl ? (size_t)(nl - buf) : len, l = end - off;
        lineno++;
        if (l && buf[off + l - 1] == '\r') l--;
        if (l) {
            char *s = prompt_of_line(buf + off, l, lineno);
            if (!s) {
                free(buf);
                ad_prompts_free(p);
                return bs_error_prefix("%s: ", path);
            }
            if (p->n == cap) p->text = bs_xrealloc(p->text, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *p->text);
            p->text[p->n++] = s;
        }
        off = end + 1;
    }
    free(buf);
    if (!p->n) return bs_error("%s: no prompts", path);
    return 0;
}

void ad_prompts_free(ad_prompts *p) {
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
    memset(p, 0, sizeof *p);
}

/* --- chosen tokens ------------------------------------------------------------------------------ */

ad_chosen_params ad_chosen_defaults(void) {
    return (ad_chosen_params){.top_k = 20, .min_p = 0.01f, .max_n = 20, .min_chars = 1,
                              .require_alnum = false, .temp = 1.0f};
}

char *ad_token_decoded(const bs_tokenizer *t, int32_t id) {
    const char *piece;
    size_t len;
    if (bs_token_to_piece(t, id, false, &piece, &len) < 0) len = 0;
    char *s = bs_xmalloc(len + 1);
    if (len) memcpy(s, piece, len);
    s[len] = 0;
    return s;
}

/* The stripped text, lower-cased (ASCII) into out (cap bytes); its length. */
static size_t norm_text(const char *s, char *out, size_t cap) {
    size_t n = strlen(s), a = 0;
    while (a < n && isspace((unsigned char)s[a])) a++;
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    size_t k = 0;
    for (size_t i = a; i < n && k + 1 < cap; i++) out[k++] = (char)tolower((unsigned char)s[i]);
    out[k] = 0;
    return n - a;
}

typedef struct { int32_t id; double p; } cand;

static int cand_ascending(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int ad_select_chosen(const bs_tokenizer *t, const float *logits, int n_vocab, int32_t rejected,
                     const ad_chosen_params *p, int32_t *out) {
    int k = BS_MAX(1, BS_MIN(p->top_k, n_vocab));
    int32_t *ids = bs_xmalloc((size_t)k * sizeof *ids);
    float *lp = bs_xmalloc((size_t)k * sizeof *lp);
    k = bs_top_logprobs(logits, n_vocab, k, ids, lp, -1, NULL);
    char rej[256], buf[256];
    char *rd = ad_token_decoded(t, rejected);
    norm_text(rd, rej, sizeof rej);
    free(rd);
    cand *c = bs_xmalloc((size_t)k * sizeof *c);
    int n = 0;
    double sum = 0, best = 0;
    const double T = p->temp > 0 ? p->temp : 1.0;
    for (int i = 0; i < k; i++) {
        if (ids[i] == rejected || bs_token_type(t, ids[i]) != BS_TOKEN_NORMAL) continue;
        char *d = ad_token_decoded(t, ids[i]);
        norm_text(d, buf, sizeof buf);
        free(d);
        if (!strcmp(buf, rej)) continue;
        c[n].id = ids[i];
        c[n].p = exp((double)(lp[i] - lp[0]) / T);
        sum += c[n].p;
        n++;
    }
    for (int i = 0; i < n; i++) best = BS_MAX(best, c[i].p /= sum);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (c[i].p >= (double)p->min_p * best) c[m++] = c[i];
    qsort(c, (size_t)m, sizeof *c, cand_ascending);
    int kept = 0;
    for (int i = 0; i < m && kept < p->max_n; i++) {
        char *d = ad_token_decoded(t, c[i].id);
        size_t len = norm_text(d, buf, sizeof buf);
        bool alnum = false;
        for (const char *q = d; *q; q++) alnum = alnum || isalnum((unsigned char)*q) || (unsigned char)*q >= 0x80;
        free(d);
        if ((int)len < p->min_chars || (p->require_alnum && !alnum)) continue;
        out[kept++] = c[i].id;
    }
    free(c);
    free(ids);
    free(lp);
    return kept;
}
