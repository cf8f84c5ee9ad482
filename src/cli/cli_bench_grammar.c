/* cli_bench_grammar.c: `bitspark bench --grammar FILE | --schema FILE [-m MODEL] [-n N] [-r N]`:
 * the time of one constrained-decoding token mask (bs_grammar_mask) over a whole vocabulary.
 *
 * The vocabulary is the model's (-m), or by default a synthetic one of 248320 tokens shaped like
 * a large multilingual BPE vocabulary (Latin word pieces with and without a leading space,
 * punctuation and code pieces, digits, whitespace runs, CJK, Cyrillic and Greek), since the
 * mask's cost follows the vocabulary trie's size. Each repetition walks N tokens from the
 * grammar's start, masking before each and then taking a pseudo-random allowed token (the same
 * sequence every run); the row gives the median, 90th percentile and worst mask in ms of CPU
 * time on one core, the compile time, and the load average, which the figures depend on. */
#include "cli/cli.h"
#include "cli/cli_opts.h"

#include "io/util.h"
#include "sample/grammar.h"
#include "text/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GB_VOCAB 248320

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Appends the UTF-8 of code point c to p; returns the new end. */
static char *put_cp(char *p, uint32_t c) {
    if (c < 0x80) *p++ = (char)c;
    else if (c < 0x800) *p++ = (char)(0xC0 | c >> 6), *p++ = (char)(0x80 | (c & 63));
    else *p++ = (char)(0xE0 | c >> 12), *p++ = (char)(0x80 | ((c >> 6) & 63)), *p++ = (char)(0x80 | (c & 63));
    return p;
}

/* One synthetic token's text into buf (at most 64 bytes). */
static size_t synth_piece(uint64_t *rng, char *buf) {
    static const char *punct[] = {".", ",", "\"", "\":", "\",", "{", "}", "[", "]", "(", ")", "();", "\\n", "\\",
                                  ":", ";", "!", "?", "'", "-", "--", "==", "=>", "->", "/", "//", "*", "#", "_", "<", ">"};
    char *p = buf;
    const unsigned kind = (unsigned)(rng_next(rng) % 100);
    const int n = 1 + (int)(rng_next(rng) % 9);
    if (kind < 50) {   /* Latin word pieces */
        if (rng_next(rng) & 1) *p++ = ' ';
        const bool cap = rng_next(rng) % 5 == 0;
        for (int i = 0; i < n; i++) *p++ = (char)((cap && !i ? 'A' : 'a') + rng_next(rng) % 26);
    } else if (kind < 62) {   /* punctuation and code */
        if (rng_next(rng) % 3 == 0) *p++ = ' ';
        for (int i = 0; i < 1 + n / 4; i++) {
            const char *q = punct[rng_next(rng) % BS_ARRAY_LEN(punct)];
            memcpy(p, q, strlen(q));
            p += strlen(q);
        }
    } else if (kind < 65) {   /* digits, whitespace runs */
        if (rng_next(rng) & 1) for (int i = 0; i < 1 + n / 3; i++) *p++ = (char)('0' + rng_next(rng) % 10);
        else for (int i = 0; i < n; i++) *p++ = "  \n\t"[rng_next(rng) % 4];
    } else if (kind < 85) {   /* CJK */
        for (int i = 0; i < 1 + n / 4; i++) p = put_cp(p, 0x4E00 + (uint32_t)(rng_next(rng) % 20000));
    } else {   /* Cyrillic and Greek words */
        if (rng_next(rng) & 1) *p++ = ' ';
        const uint32_t base = rng_next(rng) & 1 ? 0x430 : 0x3B1;
        for (int i = 0; i < n; i++) p = put_cp(p, base + (uint32_t)(rng_next(rng) % 24));
    }
    return (size_t)(p - buf);
}

static bs_grammar_vocab *synth_vocab(void) {
    char *text = bs_xmalloc((size_t)GB_VOCAB * 64);
    const char **piece = bs_xcalloc(GB_VOCAB, sizeof *piece);
    size_t *len = bs_xcalloc(GB_VOCAB, sizeof *len);
    bool *eog = bs_xcalloc(GB_VOCAB, sizeof *eog);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < GB_VOCAB - 1; i++) {
        piece[i] = text + (size_t)i * 64;
        len[i] = i < 95 ? (text[(size_t)i * 64] = (char)(32 + i), 1) : synth_piece(&rng, text + (size_t)i * 64);
    }
    eog[GB_VOCAB - 1] = true;
    bs_grammar_vocab *v = bs_grammar_vocab_from_pieces(piece, len, eog, GB_VOCAB);
    free(text);
    free(piece);
    free(len);
    free(eog);
    return v;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* N masks from the start (one repetition); their times appended to ms. -1 on a mask error. */
static int walk(bs_grammar_state *s, float *logits, int n_vocab, int n, uint64_t seed, double *ms, int *n_ms) {
    bs_grammar_state_reset(s);
    uint64_t rng = seed;
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < n_vocab; i++) logits[i] = 0.0f;
        const double t0 = now_ms();
        const int rc = bs_grammar_mask(s, logits, n_vocab);
        ms[(*n_ms)++] = now_ms() - t0;
        if (rc) return -1;
        int n_ok = 0, pick = -1;
        for (int i = 0; i < n_vocab; i++) n_ok += logits[i] == 0.0f;
        int want = (int)(rng_next(&rng) % (uint64_t)n_ok);
        for (int i = 0; i < n_vocab && pick < 0; i++)
            if (logits[i] == 0.0f && !want--) pick = i;
        if (bs_grammar_complete(s) && rng_next(&rng) % 4 == 0) bs_grammar_state_reset(s);   /* a new document */
        else if (bs_grammar_accept(s, pick)) bs_grammar_state_reset(s);   /* end-of-generation: start over */
    }
    return 0;
}

int bench_grammar(int argc, char **argv) {
    const char *gfile = NULL, *sfile = NULL, *model = NULL;
    long n = 64, reps = 5;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_BENCH_GRAMMAR, argc, argv, &i, &a)) return -1;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_GRAMMAR: gfile = a.s; break;
        case OPT_SCHEMA: sfile = a.s; break;
        case OPT_MODEL: model = a.s; break;
        case OPT_N_GEN: n = a.n; break;
        case OPT_REPS: reps = a.n; break;
        default: return bs_error("--grammar/--schema: unexpected argument '%s'", a.s);
        }
    }
    cli_opts_end();
    if (!gfile == !sfile) return bs_error("give one of --grammar FILE (GBNF) and --schema FILE (JSON schema)");
    size_t size;
    char *text = bs_read_file(gfile ? gfile : sfile, &size);
    if (!text) return -1;
    double t0 = now_ms();
    char *gbnf = gfile ? text : bs_grammar_from_json_schema(text);
    if (sfile) free(text);
    bs_grammar *g = gbnf ? bs_grammar_parse(gbnf) : NULL;
    const double compile = now_ms() - t0;
    free(gbnf);
    if (!g) return -1;
    bs_model *m = NULL;
    bs_tokenizer *tok = NULL;
    if (model && (!(m = bs_model_load(model, NULL)) || !(tok = bs_tokenizer_load(m)))) {
        bs_model_free(m);
        bs_grammar_free(g);
        return -1;
    }
    t0 = now_ms();
    bs_grammar_vocab *v = tok ? bs_grammar_vocab_new(tok) : synth_vocab();
    const double build = now_ms() - t0;
    const int n_vocab = bs_grammar_vocab_size(v);
    bs_grammar_state *s = bs_grammar_state_new(g, v);
    float *logits = bs_xmalloc((size_t)n_vocab * sizeof *logits);
    double *ms = bs_xmalloc((size_t)(n * reps) * sizeof *ms);
    int n_ms = 0, rc = 0;
    for (long r = 0; r < reps && !rc && s; r++) rc = walk(s, logits, n_vocab, (int)n, 12345 + (uint64_t)r, ms, &n_ms);
    if (rc || !s) fprintf(stderr, "bench: %s\n", bs_last_error());
    qsort(ms, (size_t)n_ms, sizeof *ms, cmp_double);
    double load[3] = {0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = NAN;
        fclose(f);
    }
    printf("| vocabulary | tokens | masks | median ms | p90 ms | max ms | compile ms | trie build ms | load avg |\n");
    printf("| ---------- | -----: | ----: | --------: | -----: | -----: | ---------: | ------------: | -------: |\n");
    if (n_ms)
        printf("| %s | %d | %d | %.3f | %.3f | %.3f | %.2f | %.0f | %.2f |\n", tok ? "model" : "synthetic", n_vocab, n_ms,
               ms[n_ms / 2], ms[(n_ms * 9) / 10], ms[n_ms - 1], compile, build, load[0]);
    free(ms);
    free(logits);
    bs_grammar_state_free(s);
    bs_grammar_vocab_free(v);
    bs_grammar_free(g);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc || !s ? -1 : 0;
}
