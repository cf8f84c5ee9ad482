/* test_tokenizer.c: the BPE tokenizer against llama.cpp's output on the fixture vocabulary
 * (every vector of $BS_FIXTURES/tokenizer.json and the prompt of tiny-f32.json must match id for
 * id), round trips, the streaming detokenizer's UTF-8 guarantee, specials, EOG, errors, and the
 * pre-tokenizer against splits made offline by Python's `regex` module (tests/data). */
#include "formats/gguf.h"
#include "text/pretokenize.h"
#include "test.h"
#include "text/tokenizer.h"
#include "io/utf8.h"
#include "io/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char path_buf[4096];
static const char *fixture(const char *name) {
    const char *dir = getenv("BS_FIXTURES");
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir ? dir : "tests/fixtures", name);
    return path_buf;
}

static bool ids_equal(const int32_t *a, size_t na, json_t *arr) {
    if (na != json_array_size(arr)) return false;
    for (size_t i = 0; i < na; i++)
        if (a[i] != json_integer_value(json_array_get(arr, i))) return false;
    return true;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}

static void test_vectors(const bs_tokenizer *t) {
    json_error_t err;
    json_t *root = json_load_file(fixture("tokenizer.json"), 0, &err);
    CHECKF(root && json_is_array(root), "tokenizer.json: %s", err.text);
    if (!root) return;
    size_t i;
    json_t *v;
    json_array_foreach(root, i, v) {
        const char *text = json_string_value(json_object_get(v, "text"));
        size_t len = json_string_length(json_object_get(v, "text"));
        json_t *want = json_object_get(v, "ids");
        int32_t *ids;
        size_t n;
        CHECK(bs_tokenize(t, text, len, false, &ids, &n) == 0);
        bool ok = ids_equal(ids, n, want);
        CHECKF(ok, "vector %zu '%s' does not match llama.cpp", i, text);
        if (!ok) print_ids("ours", ids, n);
        char *back;
        size_t blen;
        CHECK(bs_detokenize(t, ids, n, true, &back, &blen) == 0);
        CHECKF(blen == len && memcmp(back, text, len) == 0, "round trip of '%s' gave '%s'", text, back);
        free(back);
        free(ids);
    }
    json_decref(root);
}

static void test_prompt(const bs_tokenizer *t) {
    size_t len;
    char *prompt = bs_read_file(fixture("prompt.txt"), &len);
    json_t *ref = json_load_file(fixture("tiny-f32.json"), 0, NULL);
    CHECK(prompt && ref);
    if (!prompt || !ref) { free(prompt); json_decref(ref); return; }
    int32_t *ids;
    size_t n;
    CHECK(bs_tokenize(t, prompt, len, true, &ids, &n) == 0);
    bool ok = ids_equal(ids, n, json_object_get(ref, "prompt_tokens"));
    CHECKF(ok, "prompt.txt with specials does not give tiny-f32.json's prompt_tokens");
    if (!ok) print_ids("ours", ids, n);
    char *back;
    CHECK(bs_detokenize(t, ids, n, true, &back, NULL) == 0);
    CHECK_STR(back, prompt);
    free(back);
    /* without special parsing <|im_start|> is text and takes several tokens */
    int32_t *ids2;
    size_t n2;
    CHECK(bs_tokenize(t, prompt, len, false, &ids2, &n2) == 0);
    CHECK(n2 > n);
    for (size_t i = 0; i < n2; i++) CHECK(bs_token_type(t, ids2[i]) == BS_TOKEN_NORMAL);
    free(ids2);
    free(ids);
    free(prompt);
    json_decref(ref);
}

/* Random strings drawn from code points that stress every pre-tokenizer branch. */
static size_t random_text(bs_rng *r, char *buf, size_t max_cps) {
    static const uint32_t pool[] = {
        'a', 'Z', 'q', ' ', ' ', '\n', '\r', '\t', '\'', 's', 'l', 'L', 'e', '0', '7', '.', ',', '!',
        '<', '|', '>', '_', '"', 0x0B, 0x0C, 0x85, 0xA0, 0x2003, 0x3000, 0x2028, 0xE9, 0xFC, 0x301,
        0x308, 0x4E2D, 0x6587, 0x3053, 0xAC00, 0x0627, 0x0915, 0x093F, 0x0E01, 0x0E31, 0x1F389,
        0x1F680, 0x200D, 0xFE0F, 0x0660, 0x2167, 0xBD, 0x00, 0x7F, 0xFFFD, 0x10FFFF, 0xE000,
    };
    size_t n = 1 + bs_rng_next(r) % max_cps, o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = pool[bs_rng_next(r) % BS_ARRAY_LEN(pool)];
        if (bs_rng_next(r) % 8 == 0) cp = 0x20 + (uint32_t)(bs_rng_next(r) % 0x2FFE0);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        o += bs_utf8_encode(cp, buf + o);
    }
    return o;
}

static void test_random_round_trip(const bs_tokenizer *t) {
    bs_rng r;
    bs_rng_seed(&r, 1234);
    char buf[4 * 64 + 1];
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = random_text(&r, buf, 64);
        for (int special = 0; special < 2; special++) {
            int32_t *ids;
            size_t n;
            if (bs_tokenize(t, buf, len, special, &ids, &n)) { bad++; continue; }
            char *back;
            size_t blen;
            if (bs_detokenize(t, ids, n, true, &back, &blen) || blen != len || memcmp(back, buf, len)) bad++;
            /* streaming in pieces must give the same bytes */
            bs_detok *d = bs_detok_new(t, true);
            size_t o = 0;
            bool same = true;
            for (size_t i = 0; i <= n; i++) {
                const char *s;
                size_t k;
                if (i == n) bs_detok_flush(d, &s, &k);
                else bs_detok_push(d, ids[i], &s, &k);
                if (!bs_utf8_valid(s, k, NULL) || o + k > len || memcmp(buf + o, s, k)) same = false;
                o += k;
            }
            if (!same || o != len) bad++;
            bs_detok_free(d);
            free(back);
            free(ids);
        }
    }
    CHECKF(bad == 0, "%d random strings did not round-trip", bad);
}

static void test_stream_random_ids(const bs_tokenizer *t) {
    bs_rng r;
    bs_rng_seed(&r, 99);
    int32_t nv = bs_tokenizer_n_vocab(t);
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        bs_detok *d = bs_detok_new(t, iter & 1);
        int n = 1 + (int)(bs_rng_next(&r) % 40);
        for (int i = 0; i <= n; i++) {
            const char *s;
            size_t k;
            if (i == n) bs_detok_flush(d, &s, &k);
            else if (bs_detok_push(d, (int32_t)(bs_rng_next(&r) % (uint64_t)nv), &s, &k)) { bad++; break; }
            if (!bs_utf8_valid(s, k, NULL) || strlen(s) > k) bad++;
        }
        bs_detok_free(d);
    }
    CHECKF(bad == 0, "%d streaming outputs were not valid UTF-8", bad);
    /* a code point split across tokens is held back, then emitted whole */
    bs_detok *d = bs_detok_new(t, true);
    const char *s;
    size_t k;
    int32_t e2 = bs_token_lookup(t, "\xc3\xa2"), x82 = bs_token_lookup(t, "\xc4\xa4"), xac = bs_token_lookup(t, "\xc2\xac");
    CHECK(e2 >= 0 && x82 >= 0 && xac >= 0);   /* byte tokens for E2, 82, AC (the euro sign) */
    CHECK(bs_detok_push(d, e2, &s, &k) == 0 && k == 0);
    CHECK(bs_detok_push(d, x82, &s, &k) == 0 && k == 0);
    CHECK(bs_detok_push(d, xac, &s, &k) == 0 && k == 3 && memcmp(s, "\xe2\x82\xac", 3) == 0);
    CHECK(bs_detok_push(d, e2, &s, &k) == 0 && k == 0);
    bs_detok_flush(d, &s, &k);
    CHECK(k == 3 && memcmp(s, "\xef\xbf\xbd", 3) == 0);
    CHECK(bs_detok_push(d, e2, &s, &k) == 0 && k == 0);
    CHECK(bs_detok_push(d, bs_token_lookup(t, "A"), &s, &k) == 0);
    CHECK(k == 4 && memcmp(s, "\xef\xbf\xbd" "A", 4) == 0);
    CHECK(bs_detok_push(d, nv, &s, &k) == -1);
    bs_detok_free(d);
    /* preserved tokens show even without special rendering; other control tokens do not */
    d = bs_detok_new(t, false);
    CHECK(bs_detok_preserve(d, "</think>") == 0 && bs_detok_preserve(d, "<nope>") == -1);
    CHECK(bs_detok_push(d, bs_token_lookup(t, "</think>"), &s, &k) == 0 && k == 8 && !memcmp(s, "</think>", 8));
    CHECK(bs_detok_push(d, bs_token_lookup(t, "<think>"), &s, &k) == 0 && k == 0);
    CHECK(bs_detok_push(d, bs_token_lookup(t, "<|im_end|>"), &s, &k) == 0 && k == 0);
    bs_detok_free(d);
}

static void test_errors_and_specials(const bs_tokenizer *t) {
    int32_t *ids;
    size_t n;
    CHECK(bs_tokenize(t, "ab\xff" "cd", 5, false, &ids, &n) == -1);
    CHECKF(strstr(bs_last_error(), "offset 2") != NULL, "%s", bs_last_error());
    CHECK(bs_tokenize(t, "\xe2\x82", 2, true, &ids, &n) == -1);          /* truncated */
    CHECK(bs_tokenize(t, "\xed\xa0\x80", 3, true, &ids, &n) == -1);      /* surrogate */
    CHECK(bs_tokenize(t, "\xc0\xaf", 2, true, &ids, &n) == -1);          /* overlong */
    CHECK(bs_tokenize(t, "", 0, true, &ids, &n) == 0 && n == 0);
    free(ids);
    const char *p;
    size_t len;
    CHECK(bs_token_to_piece(t, -1, true, &p, &len) == -1);
    CHECK(bs_token_to_piece(t, bs_tokenizer_n_vocab(t), true, &p, &len) == -1);
    int32_t im_end = bs_token_lookup(t, "<|im_end|>"), eot = bs_token_lookup(t, "<|endoftext|>");
    CHECK_EQ_INT(im_end, 958);
    CHECK_EQ_INT(bs_token_eos(t), 958);
    CHECK(bs_token_is_eog(t, im_end) && bs_token_is_eog(t, eot));
    CHECK(!bs_token_is_eog(t, bs_token_lookup(t, "<think>")) && !bs_token_is_eog(t, 72));
    CHECK(bs_token_to_piece(t, im_end, false, &p, &len) == 0 && len == 0);
    CHECK(bs_token_to_piece(t, im_end, true, &p, &len) == 0 && len == 10 && !memcmp(p, "<|im_end|>", 10));
    CHECK(bs_token_to_piece(t, 32, false, &p, &len) == 0 && len == 1 && p[0] == ' ');
    CHECK(bs_token_to_piece(t, 963, true, &p, &len) == 0 && len == 0);  /* [PAD963], unused */
    /* specials next to text and each other; specials only where asked */
    const char *s = "<think>x</think><|im_end|><|im_end|>";
    CHECK(bs_tokenize(t, s, strlen(s), true, &ids, &n) == 0);
    CHECK(n == 5 && ids[0] == 959 && ids[1] == 'x' && ids[2] == 960 && ids[3] == 958 && ids[4] == 958);
    free(ids);
    CHECK_STR(bs_tokenizer_pre_name(t), "qwen35");
    CHECK(!bs_tokenizer_add_bos(t) && bs_token_bos(t) == -1);
}

/* A hand-made vocabulary: merges and ranks, user-defined tokens, validation errors. */
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

static void test_memory_vocab(void) {
    const char *tokens[300];
    int32_t types[300];
    int n = 0;
    for (int b = 0; b < 256; b++) { tokens[n] = byte_token(b); types[n++] = BS_TOKEN_NORMAL; }
    const char *extra[] = {"ab", "abc", "bc", "Ġab", "<u>", "<ctl>", "<ctl>x"};
    int32_t extra_types[] = {1, 1, 1, 1, BS_TOKEN_USER_DEFINED, BS_TOKEN_CONTROL, BS_TOKEN_CONTROL};
    for (size_t i = 0; i < BS_ARRAY_LEN(extra); i++) { tokens[n] = extra[i]; types[n++] = extra_types[i]; }
    /* rank: "b c" before "a b", so "abc" -> a + bc, not ab + c; "ab c" never applies */
    const char *merges[] = {"b c", "a b", "Ġ ab", "ab c"};
    bs_vocab_spec sp = {.n_tokens = (size_t)n, .tokens = tokens, .types = types, .n_merges = 4,
                        .merges = merges, .pre = "qwen35", .bos_id = -1, .eos_id = -1, .eot_id = -1,
                        .eom_id = -1, .pad_id = -1};
    bs_tokenizer *t = bs_tokenizer_new(&sp);
    CHECKF(t != NULL, "%s", bs_last_error());
    if (!t) return;
    int32_t ab = bs_token_lookup(t, "ab"), bc = bs_token_lookup(t, "bc"), gab = bs_token_lookup(t, "Ġab");
    int32_t *ids;
    size_t k;
    CHECK(bs_tokenize(t, "abc", 3, false, &ids, &k) == 0 && k == 2 && ids[0] == 'a' && ids[1] == bc);
    free(ids);
    CHECK(bs_tokenize(t, "ab ab", 5, false, &ids, &k) == 0 && k == 2 && ids[0] == ab && ids[1] == gab);
    free(ids);
    /* user-defined tokens are cut out even without special parsing; control ones only with it,
     * and the longer control token wins over the shorter one */
    CHECK(bs_tokenize(t, "a<u>b", 5, false, &ids, &k) == 0 && k == 3 && ids[1] == 260);
    free(ids);
    CHECK(bs_tokenize(t, "<ctl>x", 6, false, &ids, &k) == 0 && k > 2);
    free(ids);
    CHECK(bs_tokenize(t, "<ctl>x<ctl>", 11, true, &ids, &k) == 0 && k == 2 && ids[0] == 262 && ids[1] == 261);
    free(ids);
    bs_tokenizer_free(t);

    sp.pre = "no-such-pre";
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "no-such-pre"));
    sp.pre = NULL;
    const char *bad_merges[] = {"b c", "a zz"};
    sp.merges = bad_merges; sp.n_merges = 2;
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "merge 1"));
    const char *no_space[] = {"bc"};
    sp.merges = no_space; sp.n_merges = 1;
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "merge 0"));
    sp.n_merges = 0;
    types[3] = 9;
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "type"));
    types[3] = 1;
    sp.eos_id = n;
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "eos"));
    sp.eos_id = -1;
    tokens[65] = "zz";  /* byte 'A' now has no token */
    CHECK(bs_tokenizer_new(&sp) == NULL && strstr(bs_last_error(), "0x41"));
}

/* A vocabulary of the real size (248k tokens, 247k merges, built by random merges) must load
 * fast: the bound is loose (CPU seconds, sanitizer builds included) and only catches a
 * quadratic regression; the time is printed. */
static void test_big_vocab(void) {
    const size_t N = 248320, NM = 247000;
    char **tok = bs_xmalloc(N * sizeof(char *)), **mer = bs_xmalloc(NM * sizeof(char *));
    size_t *tl = bs_xmalloc(N * sizeof(size_t));
    for (int b = 0; b < 256; b++) { tok[b] = bs_xstrdup(byte_token(b)); tl[b] = strlen(tok[b]); }
    bs_rng r;
    bs_rng_seed(&r, 7);
    size_t n = 256, m = 0;
    while (m < NM) {
        size_t a = bs_rng_next(&r) % n, b = bs_rng_next(&r) % n;
        if (tl[a] + tl[b] > 24) continue;
        tok[n] = bs_xmalloc(tl[a] + tl[b] + 1);
        memcpy(tok[n], tok[a], tl[a]);
        memcpy(tok[n] + tl[a], tok[b], tl[b] + 1);
        mer[m] = bs_xmalloc(tl[a] + tl[b] + 2);
        memcpy(mer[m], tok[a], tl[a]);
        mer[m][tl[a]] = ' ';
        memcpy(mer[m] + tl[a] + 1, tok[b], tl[b] + 1);
        tl[n] = tl[a] + tl[b];
        n++, m++;
    }
    while (n < N) { char buf[32]; snprintf(buf, sizeof buf, "[PAD%zu]", n); tok[n] = bs_xstrdup(buf); tl[n++] = strlen(buf); }
    bs_vocab_spec sp = {.n_tokens = N, .tokens = (const char *const *)tok, .token_lens = tl, .n_merges = NM,
                        .merges = (const char *const *)mer, .bos_id = -1, .eos_id = -1, .eot_id = -1,
                        .eom_id = -1, .pad_id = -1};
    clock_t c0 = clock();
    bs_tokenizer *t = bs_tokenizer_new(&sp);
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC;
    printf("248k-token vocabulary: load %.0f ms CPU\n", cpu * 1e3);
    CHECKF(t != NULL, "%s", bs_last_error());
    CHECKF(cpu < 5.0, "loading took %.2f s", cpu);
    if (t) {
        /* a merged token's own text, decoded, tokenizes back to ids that decode to it */
        for (size_t i = 256; i < 1256; i++) {
            const char *p;
            size_t len, k;
            int32_t *ids;
            bs_token_to_piece(t, (int32_t)i, true, &p, &len);
            char *text = bs_xmalloc(len + 1), *back;
            size_t blen;
            memcpy(text, p, len);
            if (!bs_utf8_valid(text, len, NULL)) { free(text); continue; }
            CHECK(bs_tokenize(t, text, len, false, &ids, &k) == 0);
            CHECK(bs_detokenize(t, ids, k, true, &back, &blen) == 0 && blen == len && !memcmp(back, text, len));
            free(back); free(ids); free(text);
        }
    }
    bs_tokenizer_free(t);
    for (size_t i = 0; i < N; i++) free(tok[i]);
    for (size_t i = 0; i < NM; i++) free(mer[i]);
    free(tok); free(mer); free(tl);
}

/* Tokenizer metadata written with the GGUF writer: a minimal valid vocabulary, then each kind
 * of malformed metadata must fail with a message naming the problem. */
typedef struct { const char *model, *pre; int n_tokens, n_types; const char *bad_merge; int eos; bool int_tokens; } meta_case;

static bs_tokenizer *load_meta(const meta_case *mc, const char *path) {
    const char *tokens[300];
    int32_t types[300];
    int n = 0;
    for (int b = 0; b < 256; b++) { tokens[n] = byte_token(b); types[n++] = BS_TOKEN_NORMAL; }
    tokens[n] = "ab"; types[n++] = BS_TOKEN_NORMAL;
    tokens[n] = "<|im_end|>"; types[n++] = BS_TOKEN_CONTROL;
    const char *merges[2] = {"a b", mc->bad_merge};
    gguf_writer *w = gguf_w_open(path);
    if (!w) return NULL;
    if (mc->model) gguf_w_set_str(w, "tokenizer.ggml.model", mc->model);
    if (mc->pre) gguf_w_set_str(w, "tokenizer.ggml.pre", mc->pre);
    if (mc->int_tokens) gguf_w_set_arr_i32(w, "tokenizer.ggml.tokens", types, 10);
    else if (mc->n_tokens) gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)BS_MIN(mc->n_tokens, n));
    if (mc->n_types) gguf_w_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)BS_MIN(mc->n_types, n));
    gguf_w_set_arr_str(w, "tokenizer.ggml.merges", merges, mc->bad_merge ? 2 : 1);
    if (mc->eos >= 0) gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)mc->eos);
    gguf_w_close(w);
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    bs_tokenizer *t = f ? bs_tokenizer_from_gguf(f) : NULL;
    gguf_close(f);
    return t;
}

static void test_gguf_metadata(void) {
    const char *tmp = getenv("BS_TMP");
    char path[4096];
    snprintf(path, sizeof path, "%s/tok_meta_%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
    meta_case ok = {"gpt2", NULL, 258, 258, NULL, 257, false};
    bs_tokenizer *t = load_meta(&ok, path);
    CHECKF(t != NULL, "%s", bs_last_error());
    if (t) {
        CHECK_STR(bs_tokenizer_pre_name(t), "default");   /* no pre key: llama.cpp's fallback */
        CHECK(bs_token_eos(t) == 257 && bs_token_is_eog(t, 257));
        int32_t *ids;
        size_t n;
        CHECK(bs_tokenize(t, "ab<|im_end|>", 12, true, &ids, &n) == 0 && n == 2 && ids[0] == 256 && ids[1] == 257);
        free(ids);
        bs_tokenizer_free(t);
    }
    static const struct { meta_case mc; const char *msg; } bad[] = {
        {{"llama", "qwen35", 258, 258, NULL, -1, false}, "only 'gpt2'"},
        {{NULL, "qwen35", 258, 258, NULL, -1, false}, "missing tokenizer.ggml.model"},
        {{"gpt2", "qwen35", 0, 0, NULL, -1, false}, "missing tokenizer.ggml.tokens"},
        {{"gpt2", "qwen35", 0, 0, NULL, -1, true}, "array of string"},
        {{"gpt2", "qwen35", 258, 100, NULL, -1, false}, "one entry per token"},
        {{"gpt2", "qwen35", 258, 258, "ab zz", -1, false}, "merge 1"},
        {{"gpt2", "qwen35", 258, 258, "abc", -1, false}, "merge 1"},
        {{"gpt2", "qwen35", 258, 258, NULL, 999, false}, "eos token id 999"},
        {{"gpt2", "klingon", 258, 258, NULL, -1, false}, "klingon"},
        {{"gpt2", "qwen35", 100, 0, NULL, -1, false}, "not plausible"},
    };
    for (size_t i = 0; i < BS_ARRAY_LEN(bad); i++) {
        bs_clear_error();
        t = load_meta(&bad[i].mc, path);
        CHECKF(t == NULL && strstr(bs_last_error(), bad[i].msg) && strstr(bs_last_error(), "tokenizer: "),
               "case %zu: want error with '%s', got '%s'", i, bad[i].msg, t ? "success" : bs_last_error());
        bs_tokenizer_free(t);
    }
    remove(path);
}

/* Splits written by Python's `regex` module from the original HF regexes (tests/data). */
static void test_pretokenizer_golden(void) {
    const char *src = getenv("BS_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/pretokenize_golden.json", src ? src : ".");
    json_error_t err;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &err);
    CHECKF(root != NULL, "%s: %s", path, err.text);
    if (!root) return;
    const char *name;
    json_t *cases;
    int n_cases = 0, bad = 0;
    json_object_foreach(root, name, cases) {
        bs_pre_type type;
        bool ig;
        CHECK(bs_pre_from_name(name, &type, &ig) == 0);
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            const char *text = json_string_value(json_array_get(c, 0));
            size_t len = json_string_length(json_array_get(c, 0));
            json_t *words = json_array_get(c, 1);
            uint32_t *cps = bs_xmalloc((len + 1) * sizeof(uint32_t));
            size_t *lens = bs_xmalloc((len + 1) * sizeof(size_t)), n = 0, off = 0;
            for (size_t b = 0; b < len;) {
                int k = bs_utf8_next((const unsigned char *)text + b, len - b, &cps[n++]);
                b += (size_t)(k > 0 ? k : 1);
            }
            size_t nw = bs_pretokenize(type, cps, n, lens);
            bool ok = nw == json_array_size(words);
            for (size_t w = 0, b = 0; ok && w < nw; w++) {
                size_t wb = 0;   /* byte length of word w */
                for (size_t j = 0; j < lens[w]; j++) { char tmp[4]; wb += bs_utf8_encode(cps[off + j], tmp); }
                json_t *want = json_array_get(words, w);
                ok = json_string_length(want) == wb && memcmp(json_string_value(want), text + b, wb) == 0;
                b += wb;
                off += lens[w];
            }
            if (!ok && bad++ < 5) fprintf(stderr, "  %s: split of case %zu differs from regex\n", name, i);
            n_cases++;
            free(cps);
            free(lens);
        }
    }
    CHECKF(bad == 0, "%d of %d pre-tokenizer cases differ from the regex", bad, n_cases);
    CHECK(n_cases > 100);
    json_decref(root);
}

int main(void) {
    gguf_file *f = gguf_open(fixture("tiny-f32.gguf"), GGUF_OPEN_META_ONLY);
    CHECKF(f != NULL, "%s", bs_last_error());
    if (!f) return test_summary("test_tokenizer");
    double t0 = bs_time();
    bs_tokenizer *t = bs_tokenizer_from_gguf(f);
    CHECKF(t != NULL, "%s", bs_last_error());
    if (t) {
        CHECK_EQ_INT(bs_tokenizer_n_vocab(t), 1024);
        test_vectors(t);
        test_prompt(t);
        /* byte-exact round trips are llama.cpp's behaviour: no normalization (test_normalize.c
         * checks that the default NFC round trip gives the NFC text) */
        bs_tokenizer_set_normalize(t, BS_NORM_NONE);
        test_random_round_trip(t);
        bs_tokenizer_set_normalize(t, BS_NORM_NFC);
        test_stream_random_ids(t);
        test_errors_and_specials(t);
        printf("load %.3f ms\n", (bs_time() - t0) * 1e3);
    }
    bs_tokenizer_free(t);
    gguf_close(f);
    test_memory_vocab();
    test_gguf_metadata();
    test_pretokenizer_golden();
    test_big_vocab();
    return test_summary("test_tokenizer");
}
