/* cli_tokenize.c: `bitspark tokenize`: print the token ids of a text, using only the model's
 * metadata (the GGUF is opened without mapping its tensors). */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "formats/gguf.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void help_tokenize(void) {
    printf("usage: bitspark tokenize -m MODEL [options] (TEXT | -f FILE | --jsonl [-f FILE])\n"
           "\n"
           "Prints the token ids of TEXT (or of the contents of FILE, '-' for stdin), separated by\n"
           "spaces.\n\n");
    cli_opts_help(CMD_TOKENIZE);
}

/* Open MODEL's tokenizer; shared with cli_detokenize.c. */
bs_tokenizer *cli_load_tokenizer(const char *path);
bs_tokenizer *cli_load_tokenizer(const char *path) {
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    if (!f) return NULL;   /* gguf_open names the path */
    bs_tokenizer *t = bs_tokenizer_from_gguf(f);
    if (!t) bs_error_prefix("%s: ", path);
    gguf_close(f);
    return t;
}

static char *read_stream(FILE *in, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = bs_xmalloc(cap);
    size_t k;
    while ((k = fread(buf + n, 1, cap - n - 1, in)) > 0) {
        n += k;
        if (cap - n < 2) { cap *= 2; buf = bs_xrealloc(buf, cap); }
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static void print_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\u%04x", c);
        else if (c >= 0x80) printf("\\x%02x", c);   /* raw bytes: a piece may be part of a code point */
        else putchar(c);
    }
    putchar('"');
}

static void print_ids(const bs_tokenizer *t, const int32_t *ids, size_t n, int mode) {
    if (mode == 1) putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (mode == 2) {
            const char *p;
            size_t len;
            bs_token_to_piece(t, ids[i], true, &p, &len);
            printf("%d\t", (int)ids[i]);
            print_json_string(p, len);
            putchar('\n');
        } else {
            printf(i ? (mode == 1 ? ", %d" : " %d") : "%d", (int)ids[i]);
        }
    }
    if (mode == 1) putchar(']');
    if (mode != 2) putchar('\n');
}

/* One --jsonl line: its ids as a JSON array, or {"error": ...} (returns -1 then). */
static int jsonl_line(const bs_tokenizer *t, const char *line, size_t len, long no, bool special) {
    json_error_t err;
    json_t *j = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    if (!j) rc = bs_error("line %ld: not JSON (%s)", no, err.text);
    else if (!json_is_string(j)) rc = bs_error("line %ld: not a JSON string", no);
    else if (bs_tokenize(t, json_string_value(j), json_string_length(j), special, &ids, &n))
        rc = bs_error_prefix("line %ld: ", no);
    if (rc == 0) {
        print_ids(t, ids, n, 1);
    } else {
        json_t *e = json_pack("{s:s}", "error", bs_last_error());
        char *s = json_dumps(e, JSON_COMPACT);
        printf("%s\n", s);
        fprintf(stderr, "bitspark tokenize: %s\n", bs_last_error());
        free(s);
        json_decref(e);
    }
    free(ids);
    json_decref(j);
    return rc;
}

/* --jsonl: every line of in, answered in order. -1 if any line failed. */
static int tokenize_jsonl(const bs_tokenizer *t, FILE *in, bool special) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t k;
    long no = 0, bad = 0;
    while ((k = getline(&line, &cap, in)) >= 0) {
        size_t len = (size_t)k;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        bad += jsonl_line(t, line, len, ++no, special) != 0;
    }
    free(line);
    fflush(stdout);
    if (bad) return bs_error("%ld of %ld lines failed", bad, no);
    return 0;
}

static int cmd_tokenize_jsonl(const char *model, const char *file, const char *text, bool special, bool norm_set,
                              bs_norm_mode norm, int mode) {
    if (text) { bs_error("--jsonl reads stdin or -f FILE, not a TEXT argument"); return cli_fail("tokenize"); }
    if (mode) { bs_error("--jsonl prints JSON arrays; it takes neither --json nor --pieces"); return cli_fail("tokenize"); }
    FILE *in = !file || !strcmp(file, "-") ? stdin : fopen(file, "rb");
    if (!in) { bs_error("%s: %s", file, strerror(errno)); return cli_fail("tokenize"); }
    bs_tokenizer *t = cli_load_tokenizer(model);
    if (t && norm_set) bs_tokenizer_set_normalize(t, norm);
    int rc = !t || tokenize_jsonl(t, in, special) ? cli_fail("tokenize") : 0;
    if (in != stdin) fclose(in);
    bs_tokenizer_free(t);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    bool special = false, jsonl = false, norm_set = false;
    bs_norm_mode norm = BS_NORM_NONE;
    int mode = 0;   /* 0 plain, 1 json, 2 pieces */
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_TOKENIZE, argc, argv, &i, &a)) return cli_fail("tokenize");
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MODEL: model = a.s; break;
        case OPT_FILE: file = a.s; break;
        case OPT_SPECIAL: special = true; break;
        case OPT_JSON: mode = 1; break;
        case OPT_PIECES: mode = 2; break;
        case OPT_JSONL: jsonl = true; break;
        case OPT_NORMALIZE: if (cli_parse_normalize(a.s, &norm_set, &norm)) return cli_fail("tokenize"); break;
        case OPT_NONE:
            if (!strcmp(a.s, "--")) { if (i + 1 < argc) text = argv[++i]; }
            else if (!text) text = a.s;
            else { bs_error("give the text as one argument (quote it)"); return cli_fail("tokenize"); }
            break;
        default: bs_error("%s: not handled by tokenize", a.name); return cli_fail("tokenize");
        }
    }
    cli_opts_end();
    if (!model) { bs_error("missing -m MODEL"); return cli_fail("tokenize"); }
    if (jsonl) return cmd_tokenize_jsonl(model, file, text, special, norm_set, norm, mode);
    if (!text == !file) { bs_error("give either TEXT or -f FILE"); return cli_fail("tokenize"); }
    size_t len;
    char *buf = NULL;
    if (file) {
        buf = !strcmp(file, "-") ? read_stream(stdin, &len) : bs_read_file(file, &len);
        if (!buf) return cli_fail("tokenize");
        text = buf;
    } else {
        len = strlen(text);
    }
    bs_tokenizer *t = cli_load_tokenizer(model);
    if (t && norm_set) bs_tokenizer_set_normalize(t, norm);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    if (!t || bs_tokenize(t, text, len, special, &ids, &n)) rc = cli_fail("tokenize");
    else print_ids(t, ids, n, mode);
    free(ids);
    free(buf);
    bs_tokenizer_free(t);
    return rc;
}
