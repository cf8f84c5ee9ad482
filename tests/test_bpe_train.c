/* test_bpe_train.c: the BPE trainer is deterministic, its vocabulary is well formed (every byte
 * is a token, every merge joins two existing tokens into an existing token, no duplicates), the
 * pre-tokenizer splits like the qwen35 regex on hand-checked strings, and the built-in corpus
 * round-trips through a plain BPE encoder that uses only the trained merges. */
#include "tools/bpe_train.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static int find(const bs_bpe_vocab *v, const char *s) {
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return (int)i;
    return -1;
}

static void test_byte_map(void) {
    int seen[512] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = bs_gpt2_byte_to_cp((uint8_t)b);
        CHECK(cp < 512 && !seen[cp], "byte %d maps to a repeated or large code point %u", b, cp);
        if (cp < 512) seen[cp] = 1;
        CHECK(bs_gpt2_cp_to_byte(cp) == b, "byte %d does not map back", b);
    }
    /* Spot values of GPT-2's table: space -> U+0120, newline -> U+010A, 'A' -> 'A'. */
    CHECK(bs_gpt2_byte_to_cp(' ') == 0x120, "space");
    CHECK(bs_gpt2_byte_to_cp('\n') == 0x10A, "newline");
    CHECK(bs_gpt2_byte_to_cp('A') == 'A', "A");
    CHECK(bs_gpt2_cp_to_byte(0x20) == -1, "U+0020 is not an image");
}

/* Split s and compare with the expected pieces joined by '|'. */
static void expect_split(const char *s, const char *want) {
    char got[512] = {0};
    size_t len = strlen(s), o = 0;
    for (size_t p = 0, e; p < len; p = e) {
        e = bs_bpe_split(s, len, p);
        if (e <= p || e > len) { CHECK(0, "split of '%s' did not advance at %zu", s, p); return; }
        if (p) got[o++] = '|';
        memcpy(got + o, s + p, e - p);
        o += e - p;
    }
    CHECK(strcmp(got, want) == 0, "split '%s': got '%s' want '%s'", s, got, want);
}

static void test_split(void) {
    expect_split("Hello world", "Hello| world");
    expect_split("Hello, world!", "Hello|,| world|!");
    expect_split("I'm here, they'll go", "I|'m| here|,| they|'ll| go");
    expect_split("333 apples", "3|3|3| apples");
    expect_split("a  b", "a| | b");
    expect_split("end.\n\nNext", "end|.\n\n|Next");
    expect_split("x\n  y", "x|\n| | y");
    expect_split("tail   ", "tail|   ");
    expect_split("(see) it", "(see|)| it");
}

/* GPT-2 form of the bytes s[0..n) into out. */
static void to_gpt2(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)bs_gpt2_byte_utf8((uint8_t)s[i], out + o);
    out[o] = 0;
}

/* Encode one piece with the merges (lowest rank first); symbols are byte ranges of the piece.
 * Writes token ids to ids and returns their count, or -1 if a symbol is not a token. */
static int encode_piece(const bs_bpe_vocab *v, const char *piece, size_t n, int *ids) {
    size_t start[256], end[256];
    int ns = 0;
    for (size_t i = 0; i < n; i++, ns++) start[ns] = i, end[ns] = i + 1;
    for (;;) {
        int best = -1, at = -1;
        char l[520], r[520], key[1041];
        for (int i = 0; i + 1 < ns; i++) {
            to_gpt2(piece + start[i], end[i] - start[i], l);
            to_gpt2(piece + start[i + 1], end[i + 1] - start[i + 1], r);
            snprintf(key, sizeof key, "%s %s", l, r);
            for (uint32_t k = 0; k < v->n_merges && (best < 0 || (int)k < best); k++)
                if (strcmp(v->merges[k], key) == 0) { best = (int)k; at = i; break; }
        }
        if (best < 0) break;
        end[at] = end[at + 1];
        for (int i = at + 1; i + 1 < ns; i++) start[i] = start[i + 1], end[i] = end[i + 1];
        ns--;
    }
    for (int i = 0; i < ns; i++) {
        char t[520];
        to_gpt2(piece + start[i], end[i] - start[i], t);
        if ((ids[i] = find(v, t)) < 0) return -1;
    }
    return ns;
}

static size_t decode_token(const char *tok, char *out) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)tok; *p;) {
        uint32_t cp = *p < 0x80 ? *p++ : (uint32_t)((p[0] & 0x1F) << 6 | (p[1] & 0x3F));
        if (cp >= 0x80) p += 2;
        out[o++] = (char)bs_gpt2_cp_to_byte(cp);
    }
    return o;
}

static void test_train(void) {
    size_t len;
    const char *text = bs_corpus(&len);
    CHECK(len > 20000, "corpus is only %zu bytes", len);
    bs_bpe_vocab a, b;
    double t0 = bs_time();
    CHECK(bs_bpe_train(text, len, 700, &a) == 0, "train: %s", bs_last_error());
    double dt = bs_time() - t0;
    CHECK(bs_bpe_train(text, len, 700, &b) == 0, "train again: %s", bs_last_error());
    printf("trained %u merges, %u tokens in %.3f s\n", a.n_merges, a.n_tokens, dt);
    CHECK(a.n_merges == 700, "expected 700 merges from the corpus, got %u", a.n_merges);
    CHECK(a.n_tokens == b.n_tokens && a.n_merges == b.n_merges, "not deterministic (sizes)");
    for (uint32_t i = 0; i < a.n_tokens && i < b.n_tokens; i++)
        CHECK(strcmp(a.tokens[i], b.tokens[i]) == 0, "token %u differs between runs", i);
    for (uint32_t i = 0; i < a.n_merges && i < b.n_merges; i++)
        CHECK(strcmp(a.merges[i], b.merges[i]) == 0, "merge %u differs between runs", i);
    for (int c = 0; c < 256; c++) {
        char s[3];
        s[bs_gpt2_byte_utf8((uint8_t)c, s)] = 0;
        CHECK(strcmp(a.tokens[c], s) == 0, "token %d is not byte %d", c, c);
    }
    for (uint32_t i = 0; i < a.n_tokens; i++)
        for (uint32_t j = i + 1; j < a.n_tokens; j++)
            CHECK(strcmp(a.tokens[i], a.tokens[j]) != 0, "tokens %u and %u are equal", i, j);
    for (uint32_t r = 0; r < a.n_merges; r++) {
        char l[256], *sp = strchr(a.merges[r], ' ');
        CHECK(sp && !strchr(sp + 1, ' '), "merge %u '%s' is not 'left right'", r, a.merges[r]);
        if (!sp) continue;
        snprintf(l, sizeof l, "%.*s", (int)(sp - a.merges[r]), a.merges[r]);
        char joined[256];
        snprintf(joined, sizeof joined, "%s%s", l, sp + 1);
        CHECK(find(&a, l) >= 0 && find(&a, sp + 1) >= 0, "merge %u refers to a missing token", r);
        CHECK(find(&a, joined) >= 0, "merge %u result '%s' is not a token", r, joined);
    }
    CHECK(find(&a, "\xc4\xa0the") >= 0, "' the' (as 'Gthe') should be a token of an English corpus");
    /* Round trip of the whole corpus, piece by piece. */
    size_t n_tok = 0;
    for (size_t p = 0, e; p < len; p = e) {
        e = bs_bpe_split(text, len, p);
        int ids[256];
        char back[512];
        size_t o = 0;
        CHECK(e - p < 256, "piece too long for the test");
        if (e - p >= 256) break;
        int n = encode_piece(&a, text + p, e - p, ids);
        CHECK(n > 0, "piece at %zu has no encoding", p);
        for (int i = 0; i < n; i++) o += decode_token(a.tokens[ids[i]], back + o);
        CHECK(o == e - p && memcmp(back, text + p, o) == 0, "piece at %zu does not round-trip", p);
        n_tok += (size_t)(n > 0 ? n : 0);
        if (failures > 20) break;
    }
    printf("corpus: %zu bytes -> %zu tokens (%.2f bytes/token)\n", len, n_tok, (double)len / (double)n_tok);
    CHECK(n_tok < len / 2, "700 merges should at least halve the byte count");
    bs_bpe_vocab_free(&a);
    bs_bpe_vocab_free(&b);
    /* Stops early on tiny input: "abab" has one pair that occurs twice, then none. */
    CHECK(bs_bpe_train("abab", 4, 100, &a) == 0, "small train");
    CHECK(a.n_merges == 1 && strcmp(a.merges[0], "a b") == 0, "abab: %u merges", a.n_merges);
    bs_bpe_vocab_free(&a);
}

int main(void) {
    test_byte_map();
    test_split();
    test_train();
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("test_bpe_train: ok\n");
    return 0;
}
