/* cli_common.c: option parsing helpers shared by the subcommands. */
#include "cli/cli.h"
#include "io/util.h"
#include "sample/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) return bs_error("%s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi) return bs_error("%s: %ld is out of range [%ld, %ld]", opt, v, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_float(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return bs_error("%s: '%s' is not a number", opt, s);
    *out = v;
    return 0;
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "bitspark %s: %s\n", cmd, bs_last_error());
    return 1;
}

int cli_parse_samplers(const char *opt, const char *s, char order[16], bool *letters) {
    *letters = strstr(opt, "seq") != NULL;
    bs_sampler_parse_order(s, *letters, order);
    return order[0] ? 0 : bs_error("%s: no stage named in '%s'", opt, s);
}
