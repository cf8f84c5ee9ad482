/* hadamard.c: read and check a file's `prism.hadamard.*` fold (hadamard.h).
 *
 * The keys, as PrismML's llama.cpp fork writes and checks them: version (1, or 2 with a tied
 * output), block_size (a power of two), transform "normalized-sylvester-walsh-hadamard", axis
 * "input-last-dimension", sign_mode "identity" or "explicit" (then sign_widths and sign_values,
 * the +-1 vectors concatenated in the widths' order), weight_names (matrices of the kinds a
 * fold can apply to), inverse_weight_names (token_embd.weight only), gdn_v_grouped (optional
 * bool). Anything else in them is refused: a fold read wrongly gives fluent-looking nonsense,
 * so a file this reader does not fully understand does not load. */
#include "model/hadamard.h"

#include "io/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROTS 32
#define MAX_WIDTH (1 << 24)

struct bs_hadamard {
    int version, block;
    bool grouped, explicit_signs;
    int n_widths;
    int64_t *widths;     /* [n_widths] */
    float **signs;       /* [n_widths] -> width values */
    int n_names;
    struct fold_name { char *s; bool inverse, found; } *names;   /* both lists, sorted by name */
    int n_rots;
    bs_rotation rots[MAX_ROTS];
};

static const char *const KINDS[] = {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_gate", "attn_output",
                                    "ffn_gate", "ffn_up", "ffn_down", "ssm_out"};

bool bs_hadamard_foldable(const char *name, bool drafter) {
    if (!strcmp(name, "output.weight")) return true;
    if (drafter || strncmp(name, "blk.", 4)) return false;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != '.') return false;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        const size_t n = strlen(KINDS[i]);
        if (!strncmp(p, KINDS[i], n) && !strcmp(p + n, ".weight")) return true;
    }
    return false;
}

static const char *need_str(const gguf_file *f, const char *key) {
    const char *s = gguf_get_str(f, key);
    if (!s) bs_error("%s is missing or not a string", key);
    return s;
}

static int read_header(const gguf_file *f, bs_hadamard *h) {
    uint32_t v = 1, block = 0;
    if (gguf_find_kv(f, "prism.hadamard.version") && gguf_get_u32(f, "prism.hadamard.version", &v)) return -1;
    if (v != 1 && v != 2) return bs_error("prism.hadamard.version %u is not supported (1 or 2)", v);
    if (v == 2 && gguf_find_tensor(f, "output.weight"))
        return bs_error("prism.hadamard.version 2 folds a tied output, but the file has output.weight");
    if (gguf_get_u32(f, "prism.hadamard.block_size", &block)) return -1;
    if (block < 2 || block > (1u << 20) || (block & (block - 1)))
        return bs_error("prism.hadamard.block_size %u is not a power of two in [2, 2^20]", block);
    const char *tr = need_str(f, "prism.hadamard.transform"), *ax = tr ? need_str(f, "prism.hadamard.axis") : NULL;
    if (!ax) return -1;
    if (strcmp(tr, "normalized-sylvester-walsh-hadamard"))
        return bs_error("prism.hadamard.transform '%s' is not supported", tr);
    if (strcmp(ax, "input-last-dimension")) return bs_error("prism.hadamard.axis '%s' is not supported", ax);
    const char *mode = gguf_find_kv(f, "prism.hadamard.sign_mode") ? need_str(f, "prism.hadamard.sign_mode") : "identity";
    if (!mode) return -1;
    if (strcmp(mode, "identity") && strcmp(mode, "explicit"))
        return bs_error("prism.hadamard.sign_mode '%s' is not supported (identity or explicit)", mode);
    h->version = (int)v;
    h->block = (int)block;
    h->explicit_signs = !strcmp(mode, "explicit");
    const gguf_kv *g = gguf_find_kv(f, "prism.hadamard.gdn_v_grouped");
    if (g && g->val.type != GGUF_TYPE_BOOL) {   /* a bool, or written as the integer 0 or 1 */
        int64_t v;
        if (gguf_get_i64(f, "prism.hadamard.gdn_v_grouped", &v) || (v != 0 && v != 1))
            return bs_error("prism.hadamard.gdn_v_grouped is not a bool (or 0 or 1)");
        h->grouped = v == 1;
    } else if (g && gguf_get_bool(f, "prism.hadamard.gdn_v_grouped", &h->grouped)) {
        return -1;
    }
    return 0;
}

static int read_sign(const gguf_value *v, uint64_t i, float *out) {
    float x;
    if (v->arr_type == GGUF_TYPE_FLOAT32) memcpy(&x, (const float *)v->arr + i, 4);
    else if (v->arr_type == GGUF_TYPE_FLOAT64) { double d; memcpy(&d, (const double *)v->arr + i, 8); x = (float)d; }
    else { int64_t k; if (gguf_arr_elem_i64(v, i, &k)) return -1; x = k == 1 ? 1.0f : k == -1 ? -1.0f : 0.0f; }
    if (x != 1.0f && x != -1.0f) return bs_error("prism.hadamard.sign_values[%" PRIu64 "] is not +1 or -1", i);
    *out = x;
    return 0;
}

static int read_signs(const gguf_file *f, bs_hadamard *h) {
    if (!h->explicit_signs) return 0;
    const gguf_kv *kw = gguf_find_kv(f, "prism.hadamard.sign_widths"), *kv = gguf_find_kv(f, "prism.hadamard.sign_values");
    if (!kw || !kv || kw->val.type != GGUF_TYPE_ARRAY || kv->val.type != GGUF_TYPE_ARRAY || kw->val.n == 0 || kw->val.n > 64)
        return bs_error("explicit signs need prism.hadamard.sign_widths (1 to 64 widths) and sign_values arrays");
    h->n_widths = (int)kw->val.n;
    h->widths = bs_xcalloc((size_t)h->n_widths, sizeof *h->widths);
    h->signs = bs_xcalloc((size_t)h->n_widths, sizeof *h->signs);
    uint64_t at = 0;
    for (int i = 0; i < h->n_widths; i++) {
        int64_t w;
        if (gguf_arr_elem_i64(&kw->val, (uint64_t)i, &w)) return bs_error_prefix("prism.hadamard.sign_widths: ");
        if (w < 1 || w > MAX_WIDTH) return bs_error("prism.hadamard.sign_widths[%d] = %" PRId64 " is out of range", i, w);
        for (int k = 0; k < i; k++)
            if (h->widths[k] == w) return bs_error("prism.hadamard.sign_widths names width %" PRId64 " twice", w);
        if (at + (uint64_t)w > kv->val.n) break;
        h->widths[i] = w;
        h->signs[i] = bs_xmalloc((size_t)w * sizeof(float));
        for (int64_t j = 0; j < w; j++)
            if (read_sign(&kv->val, at + (uint64_t)j, &h->signs[i][j])) return -1;
        at += (uint64_t)w;
    }
    if (at != kv->val.n || !h->signs[h->n_widths - 1])
        return bs_error("prism.hadamard.sign_values has %" PRIu64 " values, the widths sum to another count", kv->val.n);
    return 0;
}

static int read_names(const gguf_file *f, bs_hadamard *h, const char *key, bool inverse, bool drafter) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return inverse ? 0 : bs_error("%s is missing", key);
    if (kv->val.type != GGUF_TYPE_ARRAY || kv->val.arr_type != GGUF_TYPE_STRING || kv->val.n > 100000)
        return bs_error("%s is not an array of names", key);
    const int base = h->n_names, n = (int)kv->val.n;
    h->names = bs_xrealloc(h->names, (size_t)(base + n) * sizeof *h->names);
    for (int i = 0; i < n; i++) {
        const char *s = gguf_get_arr_str(f, key, (uint64_t)i);
        if (!s) return bs_error_prefix("%s[%d]: ", key, i);
        const bool ok = inverse ? !drafter && !strcmp(s, "token_embd.weight") : bs_hadamard_foldable(s, drafter);
        if (!ok) return bs_error("%s names '%s', which %s cannot fold", key, s, drafter ? "a drafter" : "a model");
        h->names[h->n_names++] = (struct fold_name){bs_xstrdup(s), inverse, false};
    }
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct fold_name *)a)->s, ((const struct fold_name *)b)->s);
}

/* Sorted, for the loaders' look-ups; a name in both lists or twice in one is refused. */
static int sort_names(bs_hadamard *h) {
    if (h->n_names) qsort(h->names, (size_t)h->n_names, sizeof *h->names, by_name);
    for (int i = 1; i < h->n_names; i++)
        if (!strcmp(h->names[i - 1].s, h->names[i].s)) return bs_error("prism.hadamard names '%s' twice", h->names[i].s);
    return 0;
}

int bs_hadamard_read(const gguf_file *f, bool drafter, bs_hadamard **out) {
    *out = NULL;
    bool any = false;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key.s;
        if (strncmp(k, "prism.hadamard.", 15)) continue;
        any = true;
        static const char *const known[] = {"version", "block_size", "transform", "axis", "sign_mode", "sign_widths",
                                            "sign_values", "weight_names", "inverse_weight_names", "gdn_v_grouped"};
        bool ok = false;
        for (size_t j = 0; j < sizeof known / sizeof known[0]; j++) ok = ok || !strcmp(k + 15, known[j]);
        if (!ok) return bs_error("%s: a Hadamard fold key this version does not know", k);
    }
    if (!any) return 0;
    bs_hadamard *h = bs_xcalloc(1, sizeof *h);
    if (read_header(f, h) || read_signs(f, h) || read_names(f, h, "prism.hadamard.weight_names", false, drafter) ||
        read_names(f, h, "prism.hadamard.inverse_weight_names", true, drafter) || sort_names(h)) {
        bs_hadamard_free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void bs_hadamard_free(bs_hadamard *h) {
    if (!h) return;
    for (int i = 0; i < h->n_widths; i++) free(h->signs[i]);
    for (int i = 0; i < h->n_names; i++) free(h->names[i].s);
    free(h->signs), free(h->widths), free(h->names);
    free(h);
}

bool bs_hadamard_folds(bs_hadamard *h, const char *name, bool inverse) {
    if (!h || !name || !h->n_names) return false;
    const struct fold_name key = {(char *)name, false, false};
    struct fold_name *e = bsearch(&key, h->names, (size_t)h->n_names, sizeof *h->names, by_name);
    return e && e->inverse == inverse ? (e->found = true) : false;
}

bool bs_hadamard_regroups(const bs_hadamard *h, const char *name) {
    return h && h->grouped && bs_ends_with(name, ".ssm_out.weight");
}

const bs_rotation *bs_hadamard_rotation(bs_hadamard *h, int64_t width, int perm_hd, int perm_nk, int perm_rep,
                                        bool inverse) {
    if (perm_hd && (int64_t)perm_hd * perm_nk * perm_rep != width) {
        bs_error("the V heads (%d x %d x %d) do not make an input width of %" PRId64, perm_rep, perm_nk, perm_hd, width);
        return NULL;
    }
    if (width % h->block) {
        bs_error("the Hadamard block %d does not divide an input width of %" PRId64, h->block, width);
        return NULL;
    }
    const float *signs = NULL;
    if (h->explicit_signs) {
        for (int i = 0; i < h->n_widths; i++)
            if (h->widths[i] == width) signs = h->signs[i];
        if (!signs) {
            bs_error("prism.hadamard has no sign vector for width %" PRId64, width);
            return NULL;
        }
    }
    if (!perm_hd) perm_nk = perm_rep = 0;
    const bs_rotation want = {h->block, width, signs, perm_hd, perm_nk, perm_rep, inverse};
    for (int i = 0; i < h->n_rots; i++) {
        const bs_rotation *r = &h->rots[i];
        if (r->width == width && r->signs == signs && r->perm_hd == perm_hd && r->perm_nk == perm_nk &&
            r->perm_rep == perm_rep && r->inverse == (int)inverse)
            return r;
    }
    if (h->n_rots == MAX_ROTS) {
        bs_error("more than %d Hadamard rotations", MAX_ROTS);
        return NULL;
    }
    h->rots[h->n_rots] = want;
    return &h->rots[h->n_rots++];
}

int bs_hadamard_check_all_found(const bs_hadamard *h) {
    for (int i = 0; h && i < h->n_names; i++)
        if (!h->names[i].found)
            return bs_error("prism.hadamard folds '%s', which is not a matrix this file's model has", h->names[i].s);
    return 0;
}

void bs_hadamard_describe(const bs_hadamard *h, char *buf, size_t n) {
    int fwd = 0;
    for (int i = 0; i < h->n_names; i++) fwd += !h->names[i].inverse;
    snprintf(buf, n, "Hadamard fold v%d: block %d, %d weights%s, %s signs%s", h->version, h->block, fwd,
             h->n_names > fwd ? " and the token embedding" : "", h->explicit_signs ? "explicit" : "identity",
             h->grouped ? ", DeltaNet V heads regrouped" : "");
}
