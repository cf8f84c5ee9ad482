/* cli_draft_logits.c: `bitspark draft-logits`: one drafter round on given raw tap rows, for
 * comparing the drafter against other implementations (fixtures/dspark/). Writes the block's
 * base logits (block_size rows of n_vocab float32, before the Markov bias) and prints the greedy
 * Markov drafts and the confidences. This interface is used by outside checks: keep it stable. */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "dspark/dspark.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void help_draft_logits(void) {
    printf("usage: bitspark draft-logits -md DRAFTER --features FILE --rows N --anchor ID\n"
           "                             [--pos P] -o OUT.f32 [--json]\n"
           "\n"
           "One DSpark drafter round: the N tap rows in FILE (raw float32, N rows of\n"
           "n_taps * n_embd values, pre-fc, positions 0..N-1) become the drafter's context,\n"
           "then the block [ID, mask, ...] runs at positions P.. (default P = N).\n"
           "\n"
           "Drafts: greedy argmax of base logits + Markov bias, chained on the token just\n"
           "drafted, mask id excluded, ties to the lowest id. Confidence: the drafter's\n"
           "confidence head per slot (-1 if it has none).\n\n");
    cli_opts_help(CMD_DRAFT_LOGITS);
}

typedef struct {
    const char *drafter, *features, *out, *rounds, *device;
    long rows, anchor, pos;
    bool json;
} dl_opts;

static int parse(dl_opts *o, int argc, char **argv) {
    o->rows = o->anchor = o->pos = -1;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_DRAFT_LOGITS, argc, argv, &i, &a)) return -1;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MODEL_DRAFT: o->drafter = a.s; break;
        case OPT_FEATURES: o->features = a.s; break;
        case OPT_OUTPUT: o->out = a.s; break;
        case OPT_ROWS: o->rows = a.n; break;
        case OPT_ANCHOR: o->anchor = a.n; break;
        case OPT_POS: o->pos = a.n; break;
        case OPT_ROUNDS: o->rounds = a.s; break;
        case OPT_DEVICE: o->device = a.s; break;
        case OPT_JSON: o->json = true; break;
        case OPT_NONE: return bs_error("unexpected argument '%s'", a.s);
        default: return bs_error("%s: not handled by draft-logits", a.name);
        }
    }
    cli_opts_end();
    if (!o->drafter || !o->features || !o->out || o->rows < 0 || (o->anchor < 0 && !o->rounds))
        return bs_error("-md, --features, --rows, --anchor (or --rounds) and -o are required");
    if (o->pos < 0) o->pos = o->rows;
    if (o->pos < o->rows) return bs_error("--pos %ld is inside the %ld context rows", o->pos, o->rows);
    const char *inputs[] = {o->drafter, o->features};
    return bs_check_not_input(o->out, inputs, 2);
}

static float *read_features(const char *path, long rows, size_t row, size_t *len) {
    char *buf = bs_read_file(path, len);
    if (!buf) return NULL;
    uint64_t need;
    if (bs_mul_overflow((uint64_t)rows, row * sizeof(float), &need) || *len < need) {
        bs_error("%s: %zu bytes, but %ld rows of %zu floats need %llu", path, *len, rows, row,
                 (unsigned long long)need);
        free(buf);
        return NULL;
    }
    return (float *)(void *)buf;   /* bs_read_file's buffer is malloc'd: aligned for floats */
}

static void print_result(const dl_opts *o, const int32_t *drafts, const float *conf, int n) {
    const char *sep0 = o->json ? "" : " ", *sep = o->json ? ", " : " ";
    printf(o->json ? "{\"drafts\": [" : "drafts:");
    for (int k = 0; k < n; k++) printf("%s%d", k ? sep : sep0, drafts[k]);
    printf(o->json ? "], \"confidence\": [" : "\nconfidence:");
    for (int k = 0; k < n; k++) printf("%s%.6f", k ? sep : sep0, conf[k]);
    printf(o->json ? "]}" : "\n");
}

/* A block at pos: its base logits appended to f, drafts and confidences printed. */
static int block(const dl_opts *o, bs_dspark_ctx *c, const bs_dspark *d, long anchor, long pos, FILE *f, float *logits) {
    const int B = d->hp.block_size;
    if (anchor < 0 || anchor >= d->hp.n_vocab) return bs_error("anchor %ld is outside the vocabulary of %d", anchor, d->hp.n_vocab);
    if (pos > (1L << 30) || bs_dspark_block(c, (int32_t)anchor, (int)pos)) return -1;
    int32_t drafts[BS_DSPARK_MAX_BLOCK];
    float conf[BS_DSPARK_MAX_BLOCK];
    bs_dspark_logits(c, 0, B, logits);
    bs_dspark_draft_greedy(c, (int32_t)anchor, B, drafts, conf);
    const size_t nw = (size_t)B * d->hp.n_vocab;
    if (fwrite(logits, sizeof(float), nw, f) != nw) return bs_error("cannot write %s", o->out);
    print_result(o, drafts, conf, B);
    return 0;
}

/* --rounds: +N append, -N crop, ID@P block. */
static int run_rounds(const dl_opts *o, bs_dspark_ctx *c, const bs_dspark *d, const float *feat, FILE *f, float *logits) {
    const size_t row = (size_t)d->hp.n_taps * d->hp.n_embd;
    long used = 0;
    int n_blocks = 0;
    if (o->json) printf("{\"rounds\": [");
    for (const char *p = o->rounds; *p;) {
        char *end;
        long a = strtol(p, &end, 10), b = 0;
        if (end == p) return bs_error("--rounds: bad operation at '%s'", p);
        if (*p == '+') {
            if (a < 0 || a > o->rows - used) return bs_error("--rounds: +%ld runs past the %ld rows", a, o->rows);
            if (bs_dspark_ctx_append(c, feat + (size_t)used * row, (int)a)) return -1;
            used += a;
        } else if (*p == '-') {
            if (-a > bs_dspark_ctx_len(c)) return bs_error("--rounds: -%ld keeps more rows than the %d in the context", -a, bs_dspark_ctx_len(c));
            bs_dspark_ctx_crop(c, (int)-a);
        } else if (*end == '@') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < 0) return bs_error("--rounds: bad position at '%s'", q);
            if (o->json && n_blocks) printf(", ");
            if (block(o, c, d, a, b, f, logits)) return -1;
            n_blocks++;
        } else {
            return bs_error("--rounds: expected +N, -N or ID@P at '%s'", p);
        }
        p = end;
        if (*p == ',') p++;
        else if (*p) return bs_error("--rounds: expected ',' at '%s'", p);
    }
    if (o->json) printf("]}\n");
    return 0;
}

int cmd_draft_logits(int argc, char **argv) {
    dl_opts o = {0};
    if (parse(&o, argc, argv)) return cli_fail("draft-logits");
    bs_dspark *d = bs_dspark_load(o.drafter, NULL);
    if (!d) return cli_fail("draft-logits");
    /* as for models: --device, else BITSPARK_DEVICE, else auto (a GPU if there is one) */
    const char *env = getenv("BITSPARK_DEVICE"), *dev = o.device ? o.device : env && *env ? env : "auto";
    if (bs_dspark_to_device(d, NULL, dev)) {
        if (strcmp(dev, "auto")) {
            bs_dspark_free(d);
            return cli_fail("draft-logits");
        }
        bs_log(2, "draft-logits: no GPU for auto (%s); the drafter runs on the CPU\n", bs_last_error());
        bs_clear_error();
    }
    const bs_dspark_hparams *hp = &d->hp;
    int rc = 1;
    size_t len;
    bs_dspark_ctx *c = NULL;
    float *feat = read_features(o.features, o.rows, (size_t)hp->n_taps * hp->n_embd, &len);
    bs_afile *af = NULL;
    if (!feat) goto done;
    float *logits = bs_xmalloc((size_t)hp->block_size * hp->n_vocab * sizeof(float));
    if (!(c = bs_dspark_ctx_new(d, (int)BS_MIN(BS_MAX(o.rows, 1) + 4096L, 1L << 24), NULL))) goto done_l;
    /* the rows go to a temporary, renamed over OUT only when every block ran */
    if (!(af = bs_afile_open(o.out))) goto done_l;
    FILE *f = bs_afile_fp(af);
    if (o.rounds) {
        if (run_rounds(&o, c, d, feat, f, logits)) goto done_l;
    } else {
        if (bs_dspark_ctx_append(c, feat, (int)o.rows) || block(&o, c, d, o.anchor, o.pos, f, logits)) goto done_l;
        if (o.json) printf("\n");
    }
    rc = bs_afile_commit(af) ? 1 : 0;
    af = NULL;
done_l:
    free(logits);
done:
    bs_afile_abort(af);
    if (rc) cli_fail("draft-logits");
    bs_dspark_ctx_free(c);
    free(feat);
    bs_dspark_free(d);
    return rc;
}
