/* cli_opts.c: parsing arguments and printing help from the option table (cli_opts.h). */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "io/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const cmd_names[CMD_N_BITS] = {
    "run", "chat", "serve", "antidoom-mine", "antidoom-eval", "logits", "draft-logits", "lora",
    "mmproj-embed", "tokenize", "detokenize", "synth", "inspect", "convert", "quantize", "bench", "bench-spec",
    "bench-mmproj", "bench-grammar",
};

unsigned cli_cmd_bit(const char *name) {
    for (int k = 0; k < CMD_N_BITS; k++)
        if (!strcmp(cmd_names[k], name)) return 1u << k;
    return 0;
}

const char *cli_cmd_name(unsigned bit) {
    for (int k = 0; k < CMD_N_BITS; k++)
        if (bit == 1u << k) return cmd_names[k];
    return "?";
}

/* Is s one of the ", "-separated spellings in names? */
static bool has_name(const char *names, const char *s) {
    const size_t n = strlen(s);
    for (const char *p = names; *p;) {
        const size_t k = strcspn(p, ",");
        if (k == n && !memcmp(p, s, n)) return true;
        p += k;
        while (*p == ',' || *p == ' ') p++;
    }
    return false;
}

static const cli_opt *find(unsigned cmd, const char *s) {
    for (int k = 0; k < cli_n_opts; k++)
        if (cli_opts[k].type != CLI_SECTION && (cli_opts[k].cmds & cmd) && has_name(cli_opts[k].names, s))
            return &cli_opts[k];
    return NULL;
}

const cli_opt *cli_find(unsigned cmd, const char *name) { return find(cmd, name); }

static bool in_choices(const char *choices, const char *v) {
    const size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const size_t k = strcspn(p, "|");
        if (k == n && !memcmp(p, v, n)) return true;
        p += k;
        if (*p) p++;
    }
    return false;
}

static int check_value(const cli_opt *o, const char *name, cli_arg *a) {
    const char *v = a->s;
    switch (o->type) {
    case CLI_INT_AUTO:
        if (!strcmp(v, "auto")) { a->n = -1; return 0; }
        /* fall through */
    case CLI_INT: {
        long x;
        if (cli_parse_int(name, v, o->lo, o->hi, &x)) return -1;
        a->n = x;
        return 0;
    }
    case CLI_FLOAT:
        if (cli_parse_float(name, v, &a->f)) return -1;
        if ((o->flo || o->fhi) && !(a->f >= o->flo && a->f <= o->fhi))
            return bs_error("%s: %g is out of range [%g, %g]", name, a->f, o->flo, o->fhi);
        return 0;
    case CLI_CHOICE:
        return in_choices(o->choices, v) ? 0 : bs_error("%s: expected %s, got '%s'", name, o->choices, v);
    default:
        return 0;
    }
}

/* Whether s is a finite number, all of it. */
static bool finite_number(const char *s) {
    char *end;
    if (!*s || isspace((unsigned char)*s)) return false;
    const double x = strtod(s, &end);
    return !*end && isfinite(x);
}

/* "FILE:SCALE[,FILE:SCALE...]", every scale a finite number: llama-server's newer one-value
 * form of a two-value option (--lora-scaled), read as one value unless a number follows it (the
 * two-value form FILE S of a file whose name ends so). */
static bool scaled_list(const char *v, const char *next) {
    if (next && finite_number(next)) return false;
    for (const char *p = v; *p;) {
        const size_t k = strcspn(p, ",");
        const char *colon = NULL;
        for (const char *q = p; q < p + k; q++)
            if (*q == ':') colon = q;
        char num[64];
        if (!colon || colon == p || (size_t)(p + k - colon - 1) >= sizeof num) return false;
        snprintf(num, sizeof num, "%.*s", (int)(p + k - colon - 1), colon + 1);
        if (!finite_number(num)) return false;
        p += k + (p[k] == ',');
    }
    return *v != 0;
}

int cli_next(unsigned cmd, int argc, char **argv, int *i, cli_arg *a) {
    memset(a, 0, sizeof *a);
    const char *s = argv[*i];
    a->name = a->s = s;
    /* positional: "-" (stdin), "--" (the rest is text or ids), a negative number (detokenize) */
    if (s[0] != '-' || !s[1] || !strcmp(s, "--") || (s[1] >= '0' && s[1] <= '9')) return 0;
    const cli_opt *o = find(cmd, s);
    if (!o) {
        for (int k = 0; k < cli_n_refused; k++)
            if ((cli_refused_opts[k].cmds & cmd) && has_name(cli_refused_opts[k].names, s))
                return bs_error("%s is not supported by bitspark %s: %s", s, cli_cmd_name(cmd), cli_refused_opts[k].why);
        return bs_error("unknown option '%s' (see bitspark help %s)", s, cli_cmd_name(cmd));
    }
    a->opt = o;
    if (o->type == CLI_FLAG) return 0;
    int need = o->type == CLI_STR2 ? 2 : 1;
    if (need == 2 && *i + 1 < argc && scaled_list(argv[*i + 1], *i + 2 < argc ? argv[*i + 2] : NULL))
        need = 1;   /* --lora-scaled A:0.5,B:1 */
    if (*i + need >= argc) return bs_error("option %s needs %s", s, need == 2 ? "two values" : "a value");
    a->s = argv[++*i];
    if (need == 2) a->s2 = argv[++*i];
    return check_value(o, s, a);
}

void cli_opts_end(void) {
    const char *e = getenv("BITSPARK_OPTS_CHECK");
    if (e && !strcmp(e, "1")) {
        printf("options ok\n");
        fflush(stdout);
        exit(0);
    }
}

/* One option: "  NAMES META" then its help lines from column 26, the default after the last. */
static void print_opt(const cli_opt *o) {
    char left[128];
    int n = snprintf(left, sizeof left, "  %s%s%s", o->names, o->meta ? " " : "", o->meta ? o->meta : "");
    printf("%s", left);
    if (n > 24) printf("\n%26s", "");
    else printf("%*s", 26 - n, "");
    for (const char *p = o->help; *p;) {
        const size_t k = strcspn(p, "\n");
        printf("%.*s", (int)k, p);
        p += k;
        if (*p) { p++; printf("\n%26s", ""); }
    }
    if (o->def) printf("%s(%s)", *o->help ? " " : "", o->def);
    printf("\n");
}

void cli_opts_help(unsigned cmd) {
    const cli_opt *section = NULL;
    bool shown = true, first = true;
    for (int k = 0; k < cli_n_opts; k++) {
        const cli_opt *o = &cli_opts[k];
        if (o->type == CLI_SECTION) {
            section = o;
            shown = false;
            continue;
        }
        if (!(o->cmds & cmd)) continue;
        if (!shown && section && (section->cmds & cmd)) printf("%s%s:\n", first ? "" : "\n", section->help);
        shown = true;
        first = false;
        print_opt(o);
    }
}

void cli_opts_dump(void) {
    static const char *const types[] = {"flag", "int", "int|auto", "float", "str", "choice", "str2"};
    for (int k = 0; k < cli_n_opts; k++) {
        const cli_opt *o = &cli_opts[k];
        if (o->type == CLI_SECTION) continue;
        for (int b = 0; b < CMD_N_BITS; b++) {
            if (!(o->cmds & (1u << b))) continue;
            printf("%s\t%s\t%s\t%ld\t%ld\t%g\t%g\t%s\t%s\n", cmd_names[b], o->names, types[o->type], o->lo,
                   o->hi, o->flo, o->fhi, o->choices ? o->choices : "", o->example ? o->example : "");
        }
    }
}
