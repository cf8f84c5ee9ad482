/* cli_draft_logits.c: `bitspark draft-logits`: one drafter round on given raw tap rows, for
 * comparing the drafter against other implementations (fixtures/dspark/). Writes the block's
 * base logits (block_size rows of n_vocab float32, before the Markov bias) and prints the greedy
 * Markov drafts and the confidences. This interface is used by outside checks: keep it stable. */
#include "cli.h"
#include "dspark.h"
#include "util.h"

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
           "  -md, --model-draft F    drafter (.gguf, or safetensors file/dir with config.json)\n"
           "  --features FILE         raw tap rows\n"
           "  --rows N                how many rows to read from FILE\n"
           "  --anchor ID             the block's anchor token\n"
           "  --pos P                 position of the anchor (>= N; default N)\n"
           "  -o, --output FILE       base block logits: block_size rows of n_vocab float32\n"
           "  --json                  print {\"drafts\": [...], \"confidence\": [...]} instead of text\n"
           "\n"
           "Drafts: greedy argmax of base logits + Markov bias, chained on the token just\n"
           "drafted, mask id excluded, ties to the lowest id. Confidence: the drafter's\n"
           "confidence head per slot (-1 if it has none).\n");
}

typedef struct {
    const char *drafter, *features, *out;
    long rows, anchor, pos;
    bool json;
} dl_opts;

static int parse(dl_opts *o, int argc, char **argv) {
    o->rows = o->anchor = o->pos = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
            if (!(o->drafter = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--features")) {
            if (!(o->features = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(o->out = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--rows")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 1 << 24, &o->rows)) return -1;
        } else if (!strcmp(a, "--anchor")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, INT32_MAX, &o->anchor)) return -1;
        } else if (!strcmp(a, "--pos")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 0, 1 << 30, &o->pos)) return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            return bs_error("unknown option '%s' (see bitspark help draft-logits)", a);
        }
    }
    if (!o->drafter || !o->features || !o->out || o->rows < 0 || o->anchor < 0)
        return bs_error("-md, --features, --rows, --anchor and -o are required");
    if (o->pos < 0) o->pos = o->rows;
    if (o->pos < o->rows) return bs_error("--pos %ld is inside the %ld context rows", o->pos, o->rows);
    return 0;
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
    printf(o->json ? "{\"drafts\": [" : "drafts:");
    const char *sep0 = o->json ? "" : " ", *sep = o->json ? ", " : " ";
    for (int k = 0; k < n; k++) printf("%s%d", k ? sep : sep0, drafts[k]);
    printf(o->json ? "], \"confidence\": [" : "\nconfidence:");
    for (int k = 0; k < n; k++) printf("%s%.6f", k ? sep : sep0, conf[k]);
    printf(o->json ? "]}\n" : "\n");
}

int cmd_draft_logits(int argc, char **argv) {
    dl_opts o = {0};
    if (parse(&o, argc, argv)) return cli_fail("draft-logits");
    bs_dspark *d = bs_dspark_load(o.drafter, NULL);
    if (!d) return cli_fail("draft-logits");
    const bs_dspark_hparams *hp = &d->hp;
    int rc = 1;
    size_t len;
    bs_dspark_ctx *c = NULL;
    float *feat = read_features(o.features, o.rows, (size_t)hp->n_taps * hp->n_embd, &len);
    FILE *f = NULL;
    if (!feat) goto done;
    if (o.anchor >= hp->n_vocab) { bs_error("--anchor %ld is outside the vocabulary of %d", o.anchor, hp->n_vocab); goto done; }
    if (!(c = bs_dspark_ctx_new(d, (int)BS_MAX(o.rows, 1), NULL)) ||
        bs_dspark_ctx_append(c, feat, (int)o.rows) || bs_dspark_block(c, (int32_t)o.anchor, (int)o.pos))
        goto done;
    const int B = hp->block_size;
    float *logits = bs_xmalloc((size_t)B * hp->n_vocab * sizeof(float));
    int32_t drafts[BS_DSPARK_MAX_BLOCK];
    float conf[BS_DSPARK_MAX_BLOCK];
    bs_dspark_logits(c, 0, B, logits);
    bs_dspark_draft_greedy(c, (int32_t)o.anchor, B, drafts, conf);
    size_t nw = (size_t)B * hp->n_vocab;
    if (!(f = fopen(o.out, "wb")) || fwrite(logits, sizeof(float), nw, f) != nw) {
        bs_error("cannot write %s", o.out);
        free(logits);
        goto done;
    }
    free(logits);
    if (fclose(f)) { f = NULL; bs_error("cannot write %s", o.out); goto done; }
    f = NULL;
    print_result(&o, drafts, conf, B);
    rc = 0;
done:
    if (f) fclose(f);
    if (rc) cli_fail("draft-logits");
    bs_dspark_ctx_free(c);
    free(feat);
    bs_dspark_free(d);
    return rc;
}
