/* test_normalize.c: the tokenizer's Unicode normalization (normalize.h). On the fixture
 * vocabulary (pre-tokenizer qwen35, no tokenizer.ggml.normalizer key, so NFC by rule): text that
 * is not in NFC (a decomposed accent, the Kelvin/Angstrom/Ohm signs, EN/EM quads, CJK
 * compatibility ideographs, Hebrew and Myanmar marks out of canonical order, Hangul jamo,
 * Bengali U+09DF, Devanagari U+0958) gets the ids of its NFC form; BS_NORM_NONE gives back the
 * byte-for-byte tokenization llama.cpp makes; special tokens are matched on the raw text and
 * never normalized; the GGUF key wins over the pre-tokenizer rule and is validated. Python's
 * independent reference is tests/test_tokenize_nfc.py. */
#include "formats/gguf.h"
#include "test.h"
#include "text/normalize.h"
#include "text/tokenizer.h"
#include "io/utf8.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path_buf[4096];
static const char *fixture(const char *name) {
    const char *dir = getenv("BS_FIXTURES");
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir ? dir : "tests/fixtures", name);
    return path_buf;
}

typedef struct { int32_t *v; size_t n; } ids;

static ids tok(const bs_tokenizer *t, const char *s, bool special) {
    ids r = {NULL, 0};
    if (bs_tokenize(t, s, strlen(s), special, &r.v, &r.n)) { r.v = NULL; r.n = (size_t)-1; }
    return r;
}

static bool same(ids a, ids b) {
    return a.v && b.v && a.n == b.n && memcmp(a.v, b.v, a.n * sizeof *a.v) == 0;
}

/* detokenize(ids) == want, byte for byte */
static bool decodes_to(const bs_tokenizer *t, ids a, const char *want) {
    char *s;
    size_t n;
    if (!a.v || bs_detokenize(t, a.v, a.n, true, &s, &n)) return false;
    bool ok = n == strlen(want) && memcmp(s, want, n) == 0;
    free(s);
    return ok;
}

/* Input not in NFC, and its NFC form (from Python's unicodedata; the C side never computes it). */
static const struct { const char *raw, *nfc, *what; } cases[] = {
    {"e\xcc\x81", "\xc3\xa9", "e + U+0301"},
    {"Cafe\xcc\x81 cre\xcc\x80me", "Caf\xc3\xa9 cr\xc3\xa8me", "decomposed accents in words"},
    {"\xe2\x84\xaa", "K", "Kelvin sign U+212A"},
    {"5 \xe2\x84\xaa", "5 K", "Kelvin sign after a number"},
    {"\xe2\x84\xab", "\xc3\x85", "Angstrom sign U+212B"},
    {"\xe2\x84\xa6", "\xce\xa9", "Ohm sign U+2126"},
    {"a\xe2\x80\x80" "b\xe2\x80\x81" "c", "a\xe2\x80\x82" "b\xe2\x80\x83" "c", "EN/EM quads U+2000/U+2001"},
    {"\xef\xa4\x80\xef\xa4\xac\xef\xa8\x90", "\xe8\xb1\x88\xe9\x83\x8e\xe5\xa1\x9a", "CJK compatibility ideographs"},
    {"\xd7\x91\xd6\xbc\xd6\xb8", "\xd7\x91\xd6\xb8\xd6\xbc", "Hebrew points out of canonical order"},
    {"\xe1\x80\x80\xe1\x80\xba\xe1\x80\xb7", "\xe1\x80\x80\xe1\x80\xb7\xe1\x80\xba", "Myanmar marks out of order"},
    {"\xe1\x84\x80\xe1\x85\xa1", "\xea\xb0\x80", "Hangul jamo (ga)"},
    {"\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", "\xed\x95\x9c", "Hangul jamo (han)"},
    {"\xe0\xa7\x9f", "\xe0\xa6\xaf\xe0\xa6\xbc", "Bengali U+09DF (NFC decomposes it)"},
    {"\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc", "Devanagari U+0958"},
};

static void test_cases(bs_tokenizer *t) {
    CHECK_EQ_INT(bs_tokenizer_get_normalize(t), BS_NORM_NFC);
    CHECK_STR(bs_tokenizer_normalize_source(t), "pre-tokenizer rule");
    for (size_t i = 0; i < BS_ARRAY_LEN(cases); i++) {
        bs_tokenizer_set_normalize(t, BS_NORM_NFC);
        ids raw = tok(t, cases[i].raw, false), nfc = tok(t, cases[i].nfc, false);
        CHECKF(same(raw, nfc), "%s: the raw text does not get the NFC form's ids", cases[i].what);
        CHECKF(decodes_to(t, raw, cases[i].nfc), "%s: does not decode to the NFC text", cases[i].what);
        bs_tokenizer_set_normalize(t, BS_NORM_NONE);
        ids old = tok(t, cases[i].raw, false);
        CHECKF(!same(old, nfc), "%s: none gives the NFC ids too (the case tests nothing)", cases[i].what);
        CHECKF(decodes_to(t, old, cases[i].raw), "%s: none does not keep the raw bytes", cases[i].what);
        free(raw.v); free(nfc.v); free(old.v);
    }
    CHECK_STR(bs_tokenizer_normalize_source(t), "override");
    CHECK(bs_tokenizer_set_normalize(t, (bs_norm_mode)7) == -1 && bs_tokenizer_get_normalize(t) == BS_NORM_NONE);
    CHECK(bs_tokenizer_set_normalize(t, BS_NORM_NFC) == 0);
}

/* Special tokens are cut out of the raw text; only the text between them is normalized. */
static void test_fixture_specials(const bs_tokenizer *t) {
    const char *s = "<|im_start|>e\xcc\x81<|im_end|>\xcc\xb8";
    ids a = tok(t, s, true), e = tok(t, "\xc3\xa9", false), m = tok(t, "\xcc\xb8", false);
    int32_t st = bs_token_lookup(t, "<|im_start|>"), en = bs_token_lookup(t, "<|im_end|>");
    CHECK(a.v && e.v && m.v && e.n == 1);
    /* U+0338 after <|im_end|> stays a lone mark: NFC of the whole text would have made '>' +
     * U+0338 into U+226F and lost the special token */
    CHECK(a.v && a.n == 3 + m.n && a.v[0] == st && a.v[1] == e.v[0] && a.v[2] == en &&
          !memcmp(a.v + 3, m.v, m.n * sizeof *m.v));
    free(a.v); free(e.v); free(m.v);
}

static const char *byte_token(int b) {
    static char buf[256][5];
    uint32_t cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) cp = (uint32_t)b;
    else {
        int n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
        cp = 256 + (uint32_t)n;
    }
    buf[b][bs_utf8_encode(cp, buf[b])] = 0;
    return buf[b];
}

/* Special tokens whose own text is not NFC still match the raw text (NFC would turn s + U+0301
 * into U+015B first), and a user-defined "xe" followed by U+0301 stays "xe" + the mark, as in HF
 * where added tokens are split off before the normalizer runs. */
static void test_special_text_not_normalized(void) {
    const char *tokens[260];
    int32_t types[260];
    int n = 0;
    for (int b = 0; b < 256; b++) { tokens[n] = byte_token(b); types[n++] = BS_TOKEN_NORMAL; }
    tokens[n] = "<s\xcc\x81>"; types[n++] = BS_TOKEN_USER_DEFINED;
    tokens[n] = "<c\xcc\x81>"; types[n++] = BS_TOKEN_CONTROL;
    tokens[n] = "xe"; types[n++] = BS_TOKEN_USER_DEFINED;
    bs_vocab_spec sp = {.n_tokens = (size_t)n, .tokens = tokens, .types = types, .pre = "qwen35",
                        .bos_id = -1, .eos_id = -1, .eot_id = -1, .eom_id = -1, .pad_id = -1};
    bs_tokenizer *t = bs_tokenizer_new(&sp);
    CHECKF(t != NULL, "%s", bs_last_error());
    if (!t) return;
    CHECK_EQ_INT(bs_tokenizer_get_normalize(t), BS_NORM_NFC);
    ids a = tok(t, "a<s\xcc\x81>b", false);
    CHECK(a.n == 3 && a.v[0] == 'a' && a.v[1] == 256 && a.v[2] == 'b');
    ids c = tok(t, "<c\xcc\x81>", true);
    CHECK(c.n == 1 && c.v[0] == 257);
    ids ct = tok(t, "<c\xcc\x81>", false);   /* as text it is normalized like any text */
    CHECK(decodes_to(t, ct, "<\xc4\x87>"));
    ids x = tok(t, "xe\xcc\x81", false);
    CHECK(x.v && x.n == 3 && x.v[0] == 258 && decodes_to(t, x, "xe\xcc\x81"));
    free(a.v); free(c.v); free(ct.v); free(x.v);
    bs_tokenizer_free(t);
    sp.normalizer = "nfkc";
    t = bs_tokenizer_new(&sp);
    CHECK(t && bs_tokenizer_get_normalize(t) == BS_NORM_NFKC);
    ids f = t ? tok(t, "\xef\xac\x81", false) : (ids){0};   /* U+FB01 ligature fi */
    CHECK(t && decodes_to(t, f, "fi"));
    free(f.v);
    bs_tokenizer_free(t);
    sp.normalizer = "nfx";
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "tokenizer.ggml.normalizer") &&
          strstr(bs_last_error(), "nfx"));
}

/* Random text with marks, compatibility characters and jamo: the ids of the text are the ids
 * of its normalized form, which is also what comes back out; none keeps every byte. */
static void test_random(bs_tokenizer *t) {
    static const uint32_t pool[] = {'a', 'e', 'o', 'K', ' ', '\n', '5', '.', 0x301, 0x300, 0x308, 0x327,
                                    0x323, 0x212A, 0x212B, 0x2126, 0x2000, 0x2001, 0xF900, 0x1100,
                                    0x1161, 0x11AB, 0x9DF, 0x5D1, 0x5BC, 0x5B8, 0xE9, 0x4E2D, 0x1F389};
    bs_rng r;
    bs_rng_seed(&r, 26);
    int bad = 0, changed = 0;
    for (int it = 0; it < 500; it++) {
        char buf[4 * 40 + 1];
        size_t o = 0, n = 1 + bs_rng_next(&r) % 40;
        for (size_t i = 0; i < n; i++) o += bs_utf8_encode(pool[bs_rng_next(&r) % BS_ARRAY_LEN(pool)], buf + o);
        buf[o] = 0;
        char *nf;
        size_t nl;
        if (bs_normalize(BS_NORM_NFC, buf, o, &nf, &nl)) { bad++; continue; }
        bs_tokenizer_set_normalize(t, BS_NORM_NFC);
        ids a = tok(t, buf, false), b = tok(t, nf ? nf : buf, false);
        if (!same(a, b) || !decodes_to(t, a, nf ? nf : buf)) bad++;
        bs_tokenizer_set_normalize(t, BS_NORM_NONE);
        ids c = tok(t, buf, false);
        if (!decodes_to(t, c, buf)) bad++;
        changed += nf && (nl != o || memcmp(nf, buf, o));
        free(a.v); free(b.v); free(c.v); free(nf);
    }
    bs_tokenizer_set_normalize(t, BS_NORM_NFC);
    CHECKF(bad == 0, "%d of 500 random strings", bad);
    CHECKF(changed > 250, "only %d of 500 random strings were not NFC", changed);
}

static void test_rule_and_names(void) {
    CHECK(bs_norm_for_pre("qwen35") == BS_NORM_NFC && bs_norm_for_pre("qwen2") == BS_NORM_NFC);
    static const char *const none[] = {"llama-bpe", "llama3", "gpt2", "default", "deepseek-r1-qwen", "stablelm2"};
    for (size_t i = 0; i < BS_ARRAY_LEN(none); i++) CHECKF(bs_norm_for_pre(none[i]) == BS_NORM_NONE, "%s", none[i]);
    bs_norm_mode m;
    CHECK(bs_norm_from_name("NFC", &m) == 0 && m == BS_NORM_NFC && !strcmp(bs_norm_name(m), "nfc"));
    CHECK(bs_norm_from_name("none", &m) == 0 && m == BS_NORM_NONE);
    CHECK(bs_norm_from_name("auto", &m) == -1);
    char *out;
    size_t n;
    CHECK(bs_normalize(BS_NORM_NFC, "plain ascii", 11, &out, &n) == 0 && out == NULL && n == 11);
    /* a U+0000 inside the text is a character, not the end */
    CHECK(bs_normalize(BS_NORM_NFC, "e\0e\xcc\x81", 5, &out, &n) == 0 && out && n == 4 &&
          !memcmp(out, "e\0\xc3\xa9", 4));
    free(out);
}

/* tokenizer.ggml.normalizer in a GGUF wins over the pre-tokenizer rule; bad values fail.
 * int_keys: 1 writes the normalizer, 2 the pre-tokenizer as a u32 instead of a string. */
enum { NORM_INT = 1, PRE_INT = 2 };
static bs_tokenizer *load(const char *path, const char *pre, const char *norm, int int_keys) {
    const char *tokens[256];
    for (int b = 0; b < 256; b++) tokens[b] = byte_token(b);
    const char *merges[1] = {"a b"};
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_w_set_str(w, "tokenizer.ggml.pre", pre);
    if (norm) gguf_w_set_str(w, BS_NORMALIZER_KEY, norm);
    if (int_keys & NORM_INT) gguf_w_set_u32(w, BS_NORMALIZER_KEY, 1);
    if (int_keys & PRE_INT) gguf_w_set_u32(w, "tokenizer.ggml.pre", 2);
    gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 256);
    gguf_w_set_arr_str(w, "tokenizer.ggml.merges", merges, 0);
    gguf_w_close(w);
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    bs_tokenizer *t = f ? bs_tokenizer_from_gguf(f) : NULL;
    bs_norm_mode m;
    const char *src;
    if (t) CHECK(bs_tokenizer_gguf_normalize(f, &m, &src) == 0 && m == bs_tokenizer_get_normalize(t) &&
                 !strcmp(src, bs_tokenizer_normalize_source(t)));
    gguf_close(f);
    return t;
}

static void test_gguf_key(void) {
    const char *tmp = getenv("BS_TMP");
    char path[4096];
    snprintf(path, sizeof path, "%s/norm_%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
    static const struct { const char *pre, *norm; bs_norm_mode want; const char *src; } ok[] = {
        {"qwen35", NULL, BS_NORM_NFC, "pre-tokenizer rule"}, {"qwen2", NULL, BS_NORM_NFC, "pre-tokenizer rule"},
        {"llama-bpe", NULL, BS_NORM_NONE, "pre-tokenizer rule"}, {"gpt2", NULL, BS_NORM_NONE, "pre-tokenizer rule"},
        {"stablelm2", NULL, BS_NORM_NONE, "pre-tokenizer rule"}, {"stablelm2", "nfc", BS_NORM_NFC, BS_NORMALIZER_KEY},
        {NULL, NULL, BS_NORM_NONE, "pre-tokenizer rule"}, {"qwen35", "none", BS_NORM_NONE, BS_NORMALIZER_KEY},
        {"gpt2", "nfc", BS_NORM_NFC, BS_NORMALIZER_KEY}, {"qwen35", "NFKD", BS_NORM_NFKD, BS_NORMALIZER_KEY},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(ok); i++) {
        bs_tokenizer *t = load(path, ok[i].pre, ok[i].norm, 0);
        CHECKF(t && bs_tokenizer_get_normalize(t) == ok[i].want && !strcmp(bs_tokenizer_normalize_source(t), ok[i].src),
               "case %zu: %s", i, t ? bs_norm_name(bs_tokenizer_get_normalize(t)) : bs_last_error());
        bs_tokenizer_free(t);
    }
    bs_tokenizer *t = load(path, "qwen35", "nfcc", 0);
    CHECKF(!t && strstr(bs_last_error(), "tokenizer.ggml.normalizer: unknown normalization 'nfcc'"), "%s", bs_last_error());
    t = load(path, "qwen35", NULL, NORM_INT);
    CHECKF(!t && strstr(bs_last_error(), "tokenizer.ggml.normalizer must be a string"), "%s", bs_last_error());
    t = load(path, NULL, NULL, PRE_INT);   /* not taken for an absent one (the default splitter) */
    CHECKF(!t && strstr(bs_last_error(), "tokenizer.ggml.pre must be a string"), "%s", bs_last_error());
    remove(path);
}

int main(void) {
    gguf_file *f = gguf_open(fixture("tiny-f32.gguf"), GGUF_OPEN_META_ONLY);
    CHECKF(f != NULL, "%s", bs_last_error());
    bs_tokenizer *t = f ? bs_tokenizer_from_gguf(f) : NULL;
    CHECKF(!f || t != NULL, "%s", bs_last_error());
    if (t) {
        test_cases(t);
        test_fixture_specials(t);
        test_random(t);
    }
    bs_tokenizer_free(t);
    gguf_close(f);
    test_special_text_not_normalized();
    test_rule_and_names();
    test_gguf_key();
    return test_summary("test_normalize");
}
