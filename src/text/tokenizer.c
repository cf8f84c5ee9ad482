/* tokenizer.c: see tokenizer.h. Vocabulary and merges live in two open-addressing hash tables
 * (text -> id, (left id, right id) -> rank and result), so loading a 248k-token vocabulary
 * with 247k merges is a few linear passes, and BPE runs on token ids, not strings. */
#include "text/tokenizer.h"
#include "io/utf8.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct { uint64_t key; int32_t rank, result; } merge_slot;   /* key 0 = empty */
/* Keeping 32 bits of the hash in the slot skips almost every non-matching text compare (each
 * of which would be a cache miss into the text arena). */
typedef struct { uint32_t h; int32_t id; } vslot;                       /* id -1 = empty */

struct bs_tokenizer {
    int32_t n_vocab;
    char *text;              /* all token texts, each NUL-terminated */
    uint64_t *text_off;
    uint32_t *text_len;
    char *piece;             /* decoded bytes of each token (what special=true renders) */
    uint64_t *piece_off;
    uint32_t *piece_len;
    uint8_t *type;
    uint8_t *eog;
    vslot *vhash;            /* text -> id */
    uint64_t vmask;
    merge_slot *mhash;
    uint64_t mmask;
    int32_t byte_tok[256];   /* token of each single byte */
    int32_t *specials;       /* CONTROL/USER_DEFINED/UNKNOWN ids, longest text first */
    size_t n_specials;
    bs_pre_type pre;
    bs_norm_mode norm;
    const char *norm_source;
    bool ignore_merges, add_bos;
    int32_t bos, eos, eot, eom, pad;
};

/* ---- GPT-2 byte <-> printable code point map ------------------------------------------- */

static bool byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* byte_cp[b] = code point standing for byte b; cp_byte[cp] = byte for cp < 324, else -1. */
static void byte_maps(uint32_t byte_cp[256], int16_t cp_byte[324]) {
    for (int i = 0; i < 324; i++) cp_byte[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        byte_cp[b] = byte_is_printable(b) ? (uint32_t)b : next++;
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

/* ---- hashing --------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a, then a final mix for the low bits */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull; x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t table_size(uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

static const char *tok_text(const bs_tokenizer *t, int32_t id) { return t->text + t->text_off[id]; }

static int32_t lookup_n(const bs_tokenizer *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    for (uint64_t i = h & t->vmask;; i = (i + 1) & t->vmask) {
        vslot v = t->vhash[i];
        if (v.id < 0) return -1;
        if (v.h == (uint32_t)(h >> 32) && t->text_len[v.id] == n && memcmp(tok_text(t, v.id), s, n) == 0)
            return v.id;
    }
}

/* Insert id under its text; a later duplicate text replaces the earlier one (llama.cpp's
 * token_to_id map does the same). */
static void vocab_insert(bs_tokenizer *t, int32_t id) {
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id];
    uint64_t h = hash_bytes(s, n);
    for (uint64_t i = h & t->vmask;; i = (i + 1) & t->vmask) {
        vslot v = t->vhash[i];
        if (v.id < 0 || (v.h == (uint32_t)(h >> 32) && t->text_len[v.id] == n &&
                         memcmp(tok_text(t, v.id), s, n) == 0)) {
            t->vhash[i] = (vslot){(uint32_t)(h >> 32), id};
            return;
        }
    }
}

static uint64_t merge_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static const merge_slot *merge_find(const bs_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = merge_key(a, b);
    for (uint64_t i = hash_u64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mhash[i].key == key) return &t->mhash[i];
        if (t->mhash[i].key == 0) return NULL;
    }
}

/* First occurrence of a pair keeps its rank (llama.cpp's bpe_ranks.emplace does the same). */
static void merge_insert(bs_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t result) {
    uint64_t key = merge_key(a, b);
    for (uint64_t i = hash_u64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mhash[i].key == key) return;
        if (t->mhash[i].key == 0) {
            t->mhash[i] = (merge_slot){key, rank, result};
            return;
        }
    }
}

/* ---- construction ---------------------------------------------------------------------- */

static size_t spec_len(const char *const *s, const size_t *lens, size_t i) {
    return lens ? lens[i] : strlen(s[i]);
}

static int load_texts(bs_tokenizer *t, const bs_vocab_spec *sp) {
    uint64_t total = 0;
    t->text_off = bs_xmalloc(sp->n_tokens * sizeof(uint64_t));
    t->text_len = bs_xmalloc(sp->n_tokens * sizeof(uint32_t));
    for (size_t i = 0; i < sp->n_tokens; i++) {
        if (!sp->tokens[i]) return bs_error("token %zu has no text", i);
        size_t n = spec_len(sp->tokens, sp->token_lens, i);
        if (n > UINT32_MAX / 4) return bs_error("token %zu is too long (%zu bytes)", i, n);
        t->text_len[i] = (uint32_t)n;
        total += n + 1;
    }
    t->text = bs_xmalloc(total);
    uint64_t off = 0;
    for (size_t i = 0; i < sp->n_tokens; i++) {
        size_t n = t->text_len[i];
        memcpy(t->text + off, sp->tokens[i], n);
        t->text[off + n] = 0;
        t->text_off[i] = off;
        off += n + 1;
    }
    t->vmask = table_size(sp->n_tokens) - 1;
    t->vhash = bs_xmalloc((t->vmask + 1) * sizeof(vslot));
    memset(t->vhash, 0xff, (t->vmask + 1) * sizeof(vslot));
    for (size_t i = 0; i < sp->n_tokens; i++) vocab_insert(t, (int32_t)i);
    return 0;
}

static int load_types(bs_tokenizer *t, const bs_vocab_spec *sp) {
    t->type = bs_xmalloc(sp->n_tokens);
    for (size_t i = 0; i < sp->n_tokens; i++) {
        int32_t ty = sp->types ? sp->types[i] : BS_TOKEN_NORMAL;
        if (ty < BS_TOKEN_UNDEFINED || ty > BS_TOKEN_BYTE)
            return bs_error("token %zu has invalid type %d", i, (int)ty);
        t->type[i] = (uint8_t)ty;
    }
    return 0;
}

/* Every byte must have its own token, else some inputs could not be tokenized at all. */
static int load_byte_tokens(bs_tokenizer *t, const uint32_t byte_cp[256]) {
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t n = bs_utf8_encode(byte_cp[b], buf);
        t->byte_tok[b] = lookup_n(t, buf, n);
        if (t->byte_tok[b] < 0)
            return bs_error("vocabulary has no token for byte 0x%02x (not a byte-level BPE vocabulary?)", b);
    }
    return 0;
}

static int load_merges(bs_tokenizer *t, const bs_vocab_spec *sp) {
    t->mmask = table_size(sp->n_merges) - 1;
    t->mhash = bs_xcalloc(t->mmask + 1, sizeof(merge_slot));
    size_t cap = 256;
    char *buf = bs_xmalloc(cap);
    int rc = 0;
    for (size_t i = 0; i < sp->n_merges && rc == 0; i++) {
        const char *m = sp->merges[i];
        if (!m) { rc = bs_error("merge %zu has no text", i); break; }
        size_t n = spec_len(sp->merges, sp->merge_lens, i);
        /* split at the first space after the first byte, like llama.cpp */
        const char *sep = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sep) { rc = bs_error("merge %zu ('%.40s') is not 'left right'", i, m); break; }
        size_t nl = (size_t)(sep - m), nr = n - nl - 1;
        if (nl + nr > cap) { cap = nl + nr; buf = bs_xrealloc(buf, cap); }
        memcpy(buf, m, nl);
        memcpy(buf + nl, sep + 1, nr);
        int32_t a = lookup_n(t, m, nl), b = lookup_n(t, sep + 1, nr), r = lookup_n(t, buf, nl + nr);
        if (a < 0 || b < 0 || r < 0)
            rc = bs_error("merge %zu ('%.40s') references a token missing from the vocabulary", i, m);
        else if (i > INT32_MAX)
            rc = bs_error("too many merges");
        else
            merge_insert(t, a, b, (int32_t)i, r);
    }
    free(buf);
    return rc;
}

/* Decoded bytes of every token, computed once: the detokenizer then just copies. NORMAL tokens
 * whose text is not made of byte-map characters (malformed, never seen in real files) decode
 * to their raw text. */
static void load_pieces(bs_tokenizer *t, const int16_t cp_byte[324]) {
    uint64_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->text_len[i];
    t->piece = bs_xmalloc(total + 1);
    t->piece_off = bs_xmalloc((size_t)t->n_vocab * sizeof(uint64_t));
    t->piece_len = bs_xmalloc((size_t)t->n_vocab * sizeof(uint32_t));
    uint64_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const unsigned char *s = (const unsigned char *)tok_text(t, i);
        size_t n = t->text_len[i], j = 0, m = 0;
        char *out = t->piece + off;
        if (t->type[i] == BS_TOKEN_NORMAL) {
            while (j < n) {
                uint32_t cp;
                int k = bs_utf8_next(s + j, n - j, &cp);
                if (k <= 0 || cp >= 324 || cp_byte[cp] < 0) break;
                out[m++] = (char)cp_byte[cp];
                j += (size_t)k;
            }
        }
        if (t->type[i] != BS_TOKEN_NORMAL || j < n) {   /* raw text (or undecodable) */
            memcpy(out, s, n);
            m = n;
        }
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)m;
        off += m;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const bs_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void load_specials(bs_tokenizer *t) {
    t->specials = bs_xmalloc((size_t)t->n_vocab * sizeof(int32_t));
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        if (ty != BS_TOKEN_CONTROL && ty != BS_TOKEN_USER_DEFINED && ty != BS_TOKEN_UNKNOWN) continue;
        /* an empty text would match everywhere; an invalid one could cut a code point */
        if (t->text_len[i] == 0 || !bs_utf8_valid(tok_text(t, i), t->text_len[i], NULL)) continue;
        t->specials[t->n_specials++] = i;
    }
    qsort_r(t->specials, t->n_specials, sizeof(int32_t), cmp_special, t);
}

/* End-of-generation and control-looking tokens recognised by text (llama.cpp does this too,
 * because converters do not always record eot ids). Recognised tokens become CONTROL. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};
static const char *const control_texts[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"};

static void load_eog(bs_tokenizer *t) {
    t->eog = bs_xcalloc((size_t)t->n_vocab, 1);
    for (size_t i = 0; i < BS_ARRAY_LEN(eog_texts); i++) {
        int32_t id = bs_token_lookup(t, eog_texts[i]);
        if (id >= 0) { t->eog[id] = 1; t->type[id] = BS_TOKEN_CONTROL; }
    }
    for (size_t i = 0; i < BS_ARRAY_LEN(control_texts); i++) {
        int32_t id = bs_token_lookup(t, control_texts[i]);
        if (id >= 0) t->type[id] = BS_TOKEN_CONTROL;
    }
    int32_t ids[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++) if (ids[i] >= 0) t->eog[ids[i]] = 1;
}

static int check_special_id(const bs_vocab_spec *sp, const char *what, int32_t id) {
    if (id < -1 || (id >= 0 && (size_t)id >= sp->n_tokens))
        return bs_error("%s token id %d is out of range (vocabulary has %zu tokens)", what, (int)id, sp->n_tokens);
    return 0;
}

static const char *const src_rule = "pre-tokenizer rule", *const src_key = BS_NORMALIZER_KEY;

static int load_norm(bs_tokenizer *t, const bs_vocab_spec *sp) {
    t->norm = bs_norm_for_pre(sp->pre ? sp->pre : "qwen35");
    t->norm_source = src_rule;
    if (!sp->normalizer) return 0;
    t->norm_source = src_key;
    return bs_norm_from_name(sp->normalizer, &t->norm) ? bs_error_prefix("%s: ", BS_NORMALIZER_KEY) : 0;
}

bs_tokenizer *bs_tokenizer_new(const bs_vocab_spec *sp) {
    if (sp->n_tokens < 256 || sp->n_tokens > INT32_MAX) {
        bs_error("vocabulary size %zu is not plausible for byte-level BPE", sp->n_tokens);
        return NULL;
    }
    if (check_special_id(sp, "bos", sp->bos_id) || check_special_id(sp, "eos", sp->eos_id) ||
        check_special_id(sp, "eot", sp->eot_id) || check_special_id(sp, "eom", sp->eom_id) ||
        check_special_id(sp, "padding", sp->pad_id))
        return NULL;
    bs_tokenizer *t = bs_xcalloc(1, sizeof *t);
    t->n_vocab = (int32_t)sp->n_tokens;
    t->bos = sp->bos_id; t->eos = sp->eos_id; t->eot = sp->eot_id; t->eom = sp->eom_id;
    t->pad = sp->pad_id; t->add_bos = sp->add_bos;
    uint32_t byte_cp[256];
    int16_t cp_byte[324];
    byte_maps(byte_cp, cp_byte);
    if (bs_pre_from_name(sp->pre ? sp->pre : "qwen35", &t->pre, &t->ignore_merges) || load_norm(t, sp) ||
        load_texts(t, sp) || load_types(t, sp) || load_byte_tokens(t, byte_cp) || load_merges(t, sp)) {
        bs_tokenizer_free(t);
        return NULL;
    }
    load_eog(t);
    load_specials(t);
    load_pieces(t, cp_byte);
    return t;
}

void bs_tokenizer_free(bs_tokenizer *t) {
    if (!t) return;
    free(t->text); free(t->text_off); free(t->text_len);
    free(t->piece); free(t->piece_off); free(t->piece_len);
    free(t->type); free(t->eog); free(t->vhash); free(t->mhash); free(t->specials);
    free(t);
}

/* ---- GGUF ------------------------------------------------------------------------------ */

static const gguf_value *find_array(const gguf_file *f, const char *key, enum gguf_type want, bool required) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) bs_error("missing %s", key);
        return NULL;
    }
    if (kv->val.type != GGUF_TYPE_ARRAY || kv->val.arr_type != want) {
        bs_error("%s must be an array of %s", key, gguf_type_name(want));
        return NULL;
    }
    return &kv->val;
}

/* Optional token id key: -1 when absent. */
static int get_token_id(const gguf_file *f, const char *key, int32_t *out) {
    *out = -1;
    if (!gguf_find_kv(f, key)) return 0;
    uint32_t v;
    if (gguf_get_u32(f, key, &v)) return -1;
    if (v > INT32_MAX) return bs_error("%s = %u is out of range", key, v);
    *out = (int32_t)v;
    return 0;
}

/* Token types may be stored as any 32-bit integer type; copy them out as int32. */
static int32_t *read_types(const gguf_value *v) {
    size_t es = v->arr_type == GGUF_TYPE_INT32 || v->arr_type == GGUF_TYPE_UINT32 ? 4 : 0;
    if (!es) { bs_error("tokenizer.ggml.token_type must be an array of int32"); return NULL; }
    int32_t *out = bs_xmalloc(v->n * sizeof(int32_t));
    memcpy(out, v->arr, v->n * sizeof(int32_t));
    return out;
}

/* tokenizer.ggml.normalizer: NULL when absent, else it must be a string. */
static int gguf_normalizer(const gguf_file *f, const char **out) {
    *out = NULL;
    if (!gguf_find_kv(f, BS_NORMALIZER_KEY)) return 0;
    if (!(*out = gguf_get_str(f, BS_NORMALIZER_KEY))) return bs_error("%s must be a string", BS_NORMALIZER_KEY);
    return 0;
}

/* tokenizer.ggml.pre, "default" when absent (old GGUFs: llama.cpp falls back to its default
 * splitter too); -1 + bs_error when it is there but not a string. */
static int gguf_pre(const gguf_file *f, const char **pre) {
    *pre = "default";
    if (!gguf_find_kv(f, "tokenizer.ggml.pre")) return 0;
    if (!(*pre = gguf_get_str(f, "tokenizer.ggml.pre"))) return bs_error("tokenizer.ggml.pre must be a string");
    return 0;
}

int bs_tokenizer_gguf_normalize(const gguf_file *f, bs_norm_mode *mode, const char **source) {
    const char *name;
    bs_pre_type pre;
    bool ig;
    if (gguf_normalizer(f, &name)) return -1;
    if (name) {
        *source = src_key;
        return bs_norm_from_name(name, mode) ? bs_error_prefix("%s: ", BS_NORMALIZER_KEY) : 0;
    }
    const char *pre_name;
    if (gguf_pre(f, &pre_name) || bs_pre_from_name(pre_name, &pre, &ig)) return -1;   /* an unknown name is an error */
    *mode = bs_norm_for_pre(pre_name);
    *source = src_rule;
    return 0;
}

static bs_tokenizer *from_gguf(const gguf_file *f) {
    const char *model = gguf_get_str(f, "tokenizer.ggml.model");
    if (!model) { bs_error("missing tokenizer.ggml.model"); return NULL; }
    if (strcmp(model, "gpt2") != 0) {
        bs_error("tokenizer.ggml.model is '%s'; only 'gpt2' (byte-level BPE) is supported", model);
        return NULL;
    }
    const char *pre, *norm;
    if (gguf_pre(f, &pre) || gguf_normalizer(f, &norm)) return NULL;
    if (!gguf_find_kv(f, "tokenizer.ggml.pre"))
        bs_log(1, "tokenizer: no tokenizer.ggml.pre in the file, using the 'default' pre-tokenizer\n");
    const gguf_value *tv = find_array(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, true);
    if (!tv) return NULL;
    const gguf_value *mv = find_array(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, true);
    if (!mv) return NULL;
    const gguf_kv *tykv = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (tykv && (tykv->val.type != GGUF_TYPE_ARRAY || tykv->val.n != tv->n)) {
        bs_error("tokenizer.ggml.token_type must be an array with one entry per token");
        return NULL;
    }
    bs_vocab_spec sp = {.n_tokens = tv->n, .n_merges = mv->n, .pre = pre, .normalizer = norm};
    if (get_token_id(f, "tokenizer.ggml.bos_token_id", &sp.bos_id) ||
        get_token_id(f, "tokenizer.ggml.eos_token_id", &sp.eos_id) ||
        get_token_id(f, "tokenizer.ggml.eot_token_id", &sp.eot_id) ||
        get_token_id(f, "tokenizer.ggml.eom_token_id", &sp.eom_id) ||
        get_token_id(f, "tokenizer.ggml.padding_token_id", &sp.pad_id))
        return NULL;
    if (gguf_find_kv(f, "tokenizer.ggml.add_bos_token") && gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &sp.add_bos))
        return NULL;
    int32_t *types = NULL;
    if (tykv && !(types = read_types(&tykv->val))) return NULL;
    const gguf_str *ts = tv->arr, *ms = mv->arr;
    const char **tok = bs_xmalloc((tv->n + 1) * sizeof(char *));
    size_t *tlen = bs_xmalloc((tv->n + 1) * sizeof(size_t));
    const char **mer = bs_xmalloc((mv->n + 1) * sizeof(char *));
    size_t *mlen = bs_xmalloc((mv->n + 1) * sizeof(size_t));
    for (uint64_t i = 0; i < tv->n; i++) { tok[i] = ts[i].s; tlen[i] = ts[i].len; }
    for (uint64_t i = 0; i < mv->n; i++) { mer[i] = ms[i].s; mlen[i] = ms[i].len; }
    sp.tokens = tok; sp.token_lens = tlen; sp.types = types;
    sp.merges = mer; sp.merge_lens = mlen;
    bs_tokenizer *t = bs_tokenizer_new(&sp);
    free(tok); free(tlen); free(mer); free(mlen); free(types);
    return t;
}

bs_tokenizer *bs_tokenizer_from_gguf(const gguf_file *f) {
    bs_tokenizer *t = from_gguf(f);
    if (!t) bs_error_prefix("tokenizer: ");
    return t;
}

/* ---- accessors ------------------------------------------------------------------------- */

int32_t bs_tokenizer_n_vocab(const bs_tokenizer *t) { return t->n_vocab; }
const char *bs_tokenizer_pre_name(const bs_tokenizer *t) { return bs_pre_name(t->pre); }
int32_t bs_token_bos(const bs_tokenizer *t) { return t->bos; }
int32_t bs_token_eos(const bs_tokenizer *t) { return t->eos; }
bool bs_tokenizer_add_bos(const bs_tokenizer *t) { return t->add_bos; }

int bs_tokenizer_set_normalize(bs_tokenizer *t, bs_norm_mode mode) {
    if ((unsigned)mode > BS_NORM_NFKD) return bs_error("normalization mode %d is not one of bs_norm_mode", (int)mode);
    t->norm = mode;
    t->norm_source = "override";
    return 0;
}
bs_norm_mode bs_tokenizer_get_normalize(const bs_tokenizer *t) { return t->norm; }
const char *bs_tokenizer_normalize_source(const bs_tokenizer *t) { return t->norm_source; }

const char *bs_token_text(const bs_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? tok_text(t, id) : NULL;
}

enum bs_token_type bs_token_type(const bs_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? (enum bs_token_type)t->type[id] : BS_TOKEN_UNDEFINED;
}

int32_t bs_token_lookup(const bs_tokenizer *t, const char *text) { return lookup_n(t, text, strlen(text)); }

bool bs_token_is_eog(const bs_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int bs_token_to_piece(const bs_tokenizer *t, int32_t id, bool special, const char **piece, size_t *len) {
    if (id < 0 || id >= t->n_vocab)
        return bs_error("token id %d is out of range [0, %d)", (int)id, (int)t->n_vocab);
    uint8_t ty = t->type[id];
    bool shown = ty == BS_TOKEN_NORMAL || ty == BS_TOKEN_USER_DEFINED ||
                 (special && (ty == BS_TOKEN_CONTROL || ty == BS_TOKEN_UNKNOWN));
    *piece = t->piece + t->piece_off[id];
    *len = shown ? t->piece_len[id] : 0;
    return 0;
}

/* ---- tokenization ---------------------------------------------------------------------- */

typedef struct { int32_t *v; size_t n, cap; } idvec;

static void push_id(idvec *o, int32_t id) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->v = bs_xrealloc(o->v, o->cap * sizeof(int32_t));
    }
    o->v[o->n++] = id;
}

/* A candidate merge of adjacent symbols; popped lowest rank first, then leftmost. */
typedef struct { int32_t rank, left, right, lid, rid; } bigram;

typedef struct {
    int32_t *id, *prev, *next;  /* symbols of the current word (one per byte to start) */
    bigram *heap;
    size_t heap_n, cap, heap_cap;
    char *enc;                  /* byte-level encoded word (ignore_merges lookups) */
    size_t enc_cap;
} bpe_work;

static bool bigram_less(const bigram *a, const bigram *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(bpe_work *w, bigram g) {
    if (w->heap_n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 64;
        w->heap = bs_xrealloc(w->heap, w->heap_cap * sizeof(bigram));
    }
    size_t i = w->heap_n++;
    while (i > 0 && bigram_less(&g, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = g;
}

static bigram heap_pop(bpe_work *w) {
    bigram top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && bigram_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bigram_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static void try_pair(const bs_tokenizer *t, bpe_work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const merge_slot *m = merge_find(t, w->id[l], w->id[r]);
    if (m) heap_push(w, (bigram){m->rank, l, r, w->id[l], w->id[r]});
}

static void work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return;
    w->cap = n;
    w->id = bs_xrealloc(w->id, n * sizeof(int32_t));
    w->prev = bs_xrealloc(w->prev, n * sizeof(int32_t));
    w->next = bs_xrealloc(w->next, n * sizeof(int32_t));
}

/* llama3-style vocabularies look the whole word up before merging. */
static int32_t whole_word(const bs_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n) {
    if (4 * n > w->enc_cap) { w->enc_cap = 4 * n; w->enc = bs_xrealloc(w->enc, w->enc_cap); }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_text(t, t->byte_tok[s[i]]);
        size_t k = t->text_len[t->byte_tok[s[i]]];
        memcpy(w->enc + m, p, k);
        m += k;
    }
    return lookup_n(t, w->enc, m);
}

static void bpe_word(const bs_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n, idvec *out) {
    if (n == 1) { push_id(out, t->byte_tok[s[0]]); return; }
    if (t->ignore_merges) {
        int32_t id = whole_word(t, w, s, n);
        if (id >= 0) { push_id(out, id); return; }
    }
    if (n > INT32_MAX) n = INT32_MAX;   /* unreachable: callers cap fragment sizes */
    work_reserve(w, n);
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_tok[s[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, w, (int32_t)i, (int32_t)i + 1);
    while (w->heap_n) {
        bigram g = heap_pop(w);
        /* stale if either side was merged since the candidate was queued */
        if (w->id[g.left] != g.lid || w->id[g.right] != g.rid || w->next[g.left] != g.right) continue;
        const merge_slot *m = merge_find(t, g.lid, g.rid);
        w->id[g.left] = m->result;
        w->id[g.right] = -1;
        w->next[g.left] = w->next[g.right];
        if (w->next[g.right] >= 0) w->prev[w->next[g.right]] = g.left;
        w->next[g.right] = -2;
        try_pair(t, w, w->prev[g.left], g.left);
        try_pair(t, w, g.left, w->next[g.left]);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) push_id(out, w->id[i]);
}

/* Pre-tokenize one special-free, normalized fragment and BPE each word. */
static void split_and_merge(const bs_tokenizer *t, const char *s, size_t len, bpe_work *w, idvec *out) {
    uint32_t *cps = bs_xmalloc((len + 1) * sizeof(uint32_t));
    size_t *boff = bs_xmalloc((len + 1) * sizeof(size_t)), *lens = bs_xmalloc((len + 1) * sizeof(size_t));
    size_t n = 0, i = 0;
    while (i < len) {   /* already validated */
        int k = bs_utf8_next((const unsigned char *)s + i, len - i, &cps[n]);
        boff[n++] = i;
        i += (size_t)(k > 0 ? k : 1);
    }
    boff[n] = len;
    size_t nw = bs_pretokenize(t->pre, cps, n, lens), c = 0;
    for (size_t j = 0; j < nw; j++) {
        size_t b0 = boff[c], b1 = boff[c + lens[j]];
        bpe_word(t, w, (const unsigned char *)s + b0, b1 - b0, out);
        c += lens[j];
    }
    free(cps); free(boff); free(lens);
}

/* Each fragment between special tokens is normalized on its own, as HF does: its added tokens
 * (normalized: false in Qwen's files) are cut out of the raw text first. */
static int tokenize_fragment(const bs_tokenizer *t, const char *s, size_t len, bpe_work *w, idvec *out) {
    char *norm;
    size_t nlen;
    if (bs_normalize(t->norm, s, len, &norm, &nlen)) return -1;
    split_and_merge(t, norm ? norm : s, nlen, w, out);
    free(norm);
    return 0;
}

typedef struct { size_t off, len; int32_t id; } frag;   /* id < 0: raw text */
typedef struct { frag *v; size_t n, cap; } fragvec;

static void push_frag(fragvec *f, frag x) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->v = bs_xrealloc(f->v, f->cap * sizeof(frag));
    }
    f->v[f->n++] = x;
}

/* Cut every occurrence of each special token out of the raw fragments, one token at a time,
 * longest token first (llama.cpp's tokenizer_st_partition). */
static fragvec split_specials(const bs_tokenizer *t, const char *text, size_t len, bool parse_special) {
    fragvec cur = {0}, nxt = {0};
    push_frag(&cur, (frag){0, len, -1});
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && t->type[id] != BS_TOKEN_USER_DEFINED) continue;
        const char *st = tok_text(t, id);
        size_t sl = t->text_len[id];
        if (!memmem(text, len, st, sl)) continue;
        nxt.n = 0;
        for (size_t i = 0; i < cur.n; i++) {
            frag f = cur.v[i];
            if (f.id >= 0) { push_frag(&nxt, f); continue; }
            size_t pos = f.off, end = f.off + f.len;
            const char *hit;
            while (pos < end && (hit = memmem(text + pos, end - pos, st, sl))) {
                size_t h = (size_t)(hit - text);
                if (h > pos) push_frag(&nxt, (frag){pos, h - pos, -1});
                push_frag(&nxt, (frag){h, sl, id});
                pos = h + sl;
            }
            if (pos < end) push_frag(&nxt, (frag){pos, end - pos, -1});
        }
        fragvec tmp = cur; cur = nxt; nxt = tmp;
    }
    free(nxt.v);
    return cur;
}

int bs_tokenize(const bs_tokenizer *t, const char *text, size_t len, bool parse_special,
                int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t bad;
    if (!bs_utf8_valid(text, len, &bad))
        return bs_error("input is not valid UTF-8 (bad byte 0x%02x at offset %zu)", (unsigned char)text[bad], bad);
    idvec out = {0};
    bpe_work w = {0};
    fragvec frags = split_specials(t, text, len, parse_special);
    int rc = 0;
    for (size_t i = 0; i < frags.n && rc == 0; i++) {
        if (frags.v[i].id >= 0) push_id(&out, frags.v[i].id);
        else rc = tokenize_fragment(t, text + frags.v[i].off, frags.v[i].len, &w, &out);
    }
    free(frags.v);
    free(w.id); free(w.prev); free(w.next); free(w.heap); free(w.enc);
    if (rc) { free(out.v); return -1; }
    *ids = out.v ? out.v : bs_xmalloc(sizeof(int32_t));
    *n = out.n;
    return 0;
}

/* ---- detokenization -------------------------------------------------------------------- */

struct bs_detok {
    const bs_tokenizer *t;
    bool special;
    int32_t preserved[16];   /* tokens shown even when !special */
    int n_preserved;
    unsigned char held[4];   /* incomplete sequence carried to the next call */
    size_t n_held;
    char *out;
    size_t cap;
};

bs_detok *bs_detok_new(const bs_tokenizer *t, bool special) {
    bs_detok *d = bs_xcalloc(1, sizeof *d);
    d->t = t;
    d->special = special;
    return d;
}

int bs_detok_preserve(bs_detok *d, const char *text) {
    if (!text) return bs_error("bs_detok_preserve: no text");
    int32_t id = bs_token_lookup(d->t, text);
    if (id < 0) return bs_error("no token '%s' to preserve", text);
    for (int i = 0; i < d->n_preserved; i++)
        if (d->preserved[i] == id) return 0;
    if (d->n_preserved == (int)BS_ARRAY_LEN(d->preserved))
        return bs_error("at most %d preserved tokens", (int)BS_ARRAY_LEN(d->preserved));
    d->preserved[d->n_preserved++] = id;
    return 0;
}

void bs_detok_free(bs_detok *d) {
    if (!d) return;
    free(d->out);
    free(d);
}

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};   /* U+FFFD */

/* Append only complete sequences of held+piece; keep a valid incomplete tail for later. */
static size_t detok_feed(bs_detok *d, const char *piece, size_t len) {
    size_t need = 3 * (d->n_held + len) + 1;
    if (need > d->cap) { d->cap = need; d->out = bs_xrealloc(d->out, need); }
    unsigned char buf[8];
    size_t o = 0, i = 0;
    /* complete the held sequence first (it needs at most 3 more bytes) */
    while (d->n_held) {
        size_t take = BS_MIN(len - i, 4 - d->n_held);
        memcpy(buf, d->held, d->n_held);
        memcpy(buf + d->n_held, piece + i, take);
        uint32_t cp;
        int k = bs_utf8_next(buf, d->n_held + take, &cp);
        if (k == 0) {   /* still incomplete: everything so far is held */
            memcpy(d->held + d->n_held, piece + i, take);
            d->n_held += take;
            return o;
        }
        if (k > 0) {
            memcpy(d->out + o, buf, (size_t)k);
            o += (size_t)k;
            i += (size_t)k - d->n_held;
            d->n_held = 0;
        } else {        /* the held bytes can never complete: replace the first, retry */
            memcpy(d->out + o, replacement, 3);
            o += 3;
            memmove(d->held, d->held + 1, --d->n_held);
        }
    }
    const unsigned char *u = (const unsigned char *)piece;
    while (i < len) {
        uint32_t cp;
        int k = bs_utf8_next(u + i, len - i, &cp);
        if (k > 0) { memcpy(d->out + o, u + i, (size_t)k); o += (size_t)k; i += (size_t)k; }
        else if (k == 0) { memcpy(d->held, u + i, len - i); d->n_held = len - i; break; }
        else { memcpy(d->out + o, replacement, 3); o += 3; i++; }
    }
    return o;
}

int bs_detok_push(bs_detok *d, int32_t id, const char **text, size_t *len) {
    const char *piece = NULL;
    size_t n = 0;
    bool show = d->special;
    for (int i = 0; i < d->n_preserved && !show; i++) show = d->preserved[i] == id;
    if (bs_token_to_piece(d->t, id, show, &piece, &n)) return -1;
    *len = detok_feed(d, piece, n);
    d->out[*len] = 0;
    *text = d->out;
    return 0;
}

void bs_detok_flush(bs_detok *d, const char **text, size_t *len) {
    if (d->cap < 4) { d->cap = 4; d->out = bs_xrealloc(d->out, 4); }
    *len = 0;
    if (d->n_held) { memcpy(d->out, replacement, 3); *len = 3; }
    d->n_held = 0;
    d->out[*len] = 0;
    *text = d->out;
}

int bs_detokenize(const bs_tokenizer *t, const int32_t *ids, size_t n, bool special, char **text, size_t *len) {
    bs_detok *d = bs_detok_new(t, special);
    size_t cap = 64, m = 0;
    char *res = bs_xmalloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t k;
        if (i == n) bs_detok_flush(d, &s, &k);
        else if (bs_detok_push(d, ids[i], &s, &k)) { free(res); bs_detok_free(d); return -1; }
        if (m + k + 1 > cap) { cap = 2 * (m + k + 1); res = bs_xrealloc(res, cap); }
        memcpy(res + m, s, k);
        m += k;
    }
    res[m] = 0;
    bs_detok_free(d);
    *text = res;
    if (len) *len = m;
    return 0;
}

const char *bs_tokenizer_piece_cb(void *ud, int32_t id, size_t *len) {
    const char *piece = NULL;
    return bs_token_to_piece(ud, id, true, &piece, len) < 0 ? NULL : piece;
}

int bs_tokenizer_tokenize_cb(void *ud, const char *text, size_t len, int32_t *out, int max) {
    int32_t *ids;
    size_t n;
    if (bs_tokenize(ud, text, len, false, &ids, &n) < 0) return -1;
    const int k = (int)BS_MIN(n, (size_t)max);
    memcpy(out, ids, (size_t)k * sizeof *ids);
    free(ids);
    return k;
}
