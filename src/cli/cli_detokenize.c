/* cli_detokenize.c: `bitspark detokenize`: print the text of token ids. */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bs_tokenizer *cli_load_tokenizer(const char *path);   /* cli_tokenize.c */

void help_detokenize(void) {
    printf("usage: bitspark detokenize -m MODEL [--no-special] ID...\n"
           "\n"
           "Prints the text of the token ids (separated by spaces or commas, in one or several\n"
           "arguments). Bytes that do not form valid UTF-8 are printed as U+FFFD.\n\n");
    cli_opts_help(CMD_DETOKENIZE);
}

typedef struct { int32_t *v; size_t n, cap; } idlist;

/* Parse "12 34,56" into ids; every id must be an integer (range is checked by the tokenizer). */
static int parse_ids(const char *s, idlist *out) {
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') { s++; continue; }
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || (*end && !strchr(" ,\t\n", *end)))
            return bs_error("'%s' is not a token id", s);
        if (v < INT32_MIN || v > INT32_MAX) return bs_error("token id %lld is out of range", v);
        if (out->n == out->cap) {
            out->cap = out->cap ? 2 * out->cap : 64;
            out->v = bs_xrealloc(out->v, out->cap * sizeof(int32_t));
        }
        out->v[out->n++] = (int32_t)v;
        s = end;
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool special = true;
    idlist ids = {0};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        cli_arg a;
        if ((rc = cli_next(CMD_DETOKENIZE, argc, argv, &i, &a))) break;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MODEL: model = a.s; break;
        case OPT_NO_SPECIAL: special = false; break;
        case OPT_NONE:
            if (!strcmp(a.s, "--")) { while (rc == 0 && ++i < argc) rc = parse_ids(argv[i], &ids); }
            else rc = parse_ids(a.s, &ids);
            break;
        default: rc = bs_error("%s: not handled by detokenize", a.name);
        }
    }
    if (rc == 0) cli_opts_end();
    if (rc == 0 && !model) rc = bs_error("missing -m MODEL");
    bs_tokenizer *t = NULL;
    char *text = NULL;
    size_t len = 0;
    if (rc == 0 && !(t = cli_load_tokenizer(model))) rc = -1;
    if (rc == 0) rc = bs_detokenize(t, ids.v, ids.n, special, &text, &len);
    if (rc == 0) {
        fwrite(text, 1, len, stdout);
        if (isatty(fileno(stdout))) putchar('\n');
    }
    free(text);
    free(ids.v);
    bs_tokenizer_free(t);
    return rc ? cli_fail("detokenize") : 0;
}
