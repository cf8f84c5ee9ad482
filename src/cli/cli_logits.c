/* cli_logits.c: `bitspark logits`: evaluate a token list (the first N tokens as one batch, the
 * rest one at a time) and write every position's logits as raw float32 rows: the layout of the
 * reference fixtures, so outside checks can compare bitspark with other runtimes. Optionally also
 * writes the layer taps of every position. `<image>` in the token list stands for the rows of an
 * image (--image-embd, or --image encoded with --mmproj), evaluated with bs_eval_image. Keep this interface stable. */
#include "bitspark.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "io/atomic_file.h"
#include "io/threadpool.h"
#include "vision/vision.h"
#include "io/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1 << 24)

typedef struct opts {
    const char *model, *tokens, *tokens_file, *out, *taps, *taps_out;
    const char *image_embd, *mmproj, *image;
    long batch, threads, ctx, img_nx, img_ny;
    int kv_type;
    bool no_mmap;
    const char *device;
} opts;

void help_logits(void) {
    printf("usage: bitspark logits -m MODEL (--tokens ID,ID,... | --tokens-file FILE) -o OUT.f32 [options]\n\n"
           "Evaluates the first N tokens as one batch, then the rest one at a time, and writes one\n"
           "row of n_vocab float32 logits per token (little-endian, no header).\n\n");
    cli_opts_help(CMD_LOGITS);
}

/* Integers separated by commas, whitespace and (for JSON lists) brackets. */
static int parse_ids(const char *text, const char *what, long lo, long hi, int32_t **out, int *n_out) {
    int cap = 64, n = 0;
    int32_t *ids = bs_xmalloc((size_t)cap * sizeof *ids);
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == '[' || *p == ']' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno) { free(ids); return bs_error("%s: '%.20s' is not an integer", what, p); }
        if (*end && !strchr(",[] \t\r\n", *end)) { free(ids); return bs_error("%s: malformed list near '%.20s'", what, p); }
        if (v < lo || v > hi) { free(ids); return bs_error("%s: %ld is out of range [%ld, %ld]", what, v, lo, hi); }
        if (n == MAX_TOKENS) { free(ids); return bs_error("%s: more than %d entries", what, MAX_TOKENS); }
        if (n == cap) ids = bs_xrealloc(ids, (size_t)(cap *= 2) * sizeof *ids);
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (n == 0) { free(ids); return bs_error("%s: empty list", what); }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_grid(opts *o, const char *v) {
    char *x;
    errno = 0;
    o->img_nx = strtol(v, &x, 10);
    if (x == v || (*x != 'x' && *x != 'X') || errno) return bs_error("--image-grid: '%s' is not WxH", v);
    const char *h = x + 1;
    o->img_ny = strtol(h, &x, 10);
    if (x == h || *x || errno || o->img_nx < 1 || o->img_ny < 1 || o->img_nx > 4096 || o->img_ny > 4096)
        return bs_error("--image-grid: '%s' is not WxH with 1 <= W, H <= 4096", v);
    return 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = -1;
    o->threads = bs_cpu_count();
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_LOGITS, argc, argv, &i, &a)) return -1;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MODEL: o->model = a.s; break;
        case OPT_TOKENS: o->tokens = a.s; break;
        case OPT_TOKENS_FILE: o->tokens_file = a.s; break;
        case OPT_OUTPUT: o->out = a.s; break;
        case OPT_TAPS: o->taps = a.s; break;
        case OPT_TAPS_OUT: o->taps_out = a.s; break;
        case OPT_BATCH: o->batch = a.n; break;
        case OPT_THREADS: o->threads = a.n; break;
        case OPT_CTX: o->ctx = a.n; break;
        case OPT_KV_TYPE: o->kv_type = !strcmp(a.s, "f32") ? BS_KV_F32 : BS_KV_F16; break;
        case OPT_IMAGE_EMBD: o->image_embd = a.s; break;
        case OPT_MMPROJ: o->mmproj = a.s; break;
        case OPT_IMAGE: o->image = a.s; break;
        case OPT_IMAGE_GRID: if (parse_grid(o, a.s)) return -1; break;
        case OPT_NO_MMAP: o->no_mmap = true; break;
        case OPT_DEVICE: o->device = a.s; break;
        case OPT_NONE: return bs_error("unexpected argument '%s'", a.s);
        default: return bs_error("%s: not handled by logits", a.name);
        }
    }
    cli_opts_end();
    if (!o->model) return bs_error("-m MODEL is required");
    if (!o->out) return bs_error("-o OUT.f32 is required");
    if (!o->tokens == !o->tokens_file) return bs_error("give exactly one of --tokens and --tokens-file");
    if (!o->taps != !o->taps_out) return bs_error("--taps and --taps-out go together");
    if (!o->image_embd != !o->img_nx) return bs_error("--image-embd and --image-grid go together");
    if (o->image && !o->mmproj) return bs_error("--image needs --mmproj FILE (the vision projector)");
    if (o->mmproj && !o->image) return bs_error("--mmproj goes with --image IMG");
    if (o->image && o->image_embd) return bs_error("give one of --image and --image-embd");
    return 0;
}

/* Neither output is an input (the model, the projector, the image, the token file) or the
 * other output: checked before the model loads, so a mistyped -o costs nothing. */
static int check_outputs(const opts *o) {
    const char *inputs[] = {o->model, o->mmproj, o->image, o->image_embd, o->tokens_file};
    return bs_check_outputs(o->out, o->taps_out, inputs, (int)(sizeof inputs / sizeof *inputs));
}

typedef struct run_ctx {
    int32_t *tokens, *taps;   /* tokens: IMAGE_ID where the list said <image> */
    int n_tokens, n_taps;
    int n_rows, img_rows;     /* logits rows: tokens, and img_rows per image */
    int img_nx, img_ny;
    float *img;               /* img_rows x n_embd */
    float *logits, *tap_rows;
    bs_model *m;
    bs_session *s;
} run_ctx;

#define IMAGE_ID (-1)

/* Evaluate tokens[i..j) as one batch, or the image if tokens[i] is one; *row: its first row. */
static int eval_span(run_ctx *r, int i, int j, int *row) {
    const size_t nv = (size_t)bs_model_n_vocab(r->m), tap_w = (size_t)r->n_taps * bs_model_n_embd(r->m);
    float *lg = r->logits + (size_t)*row * nv, *tp = r->tap_rows ? r->tap_rows + (size_t)*row * tap_w : NULL;
    if (r->tokens[i] == IMAGE_ID) {
        *row += r->img_rows;
        return bs_eval_image(r->s, r->img, r->img_nx, r->img_ny, BS_LOGITS_ALL, lg, tp);
    }
    *row += j - i;
    return bs_eval(r->s, r->tokens + i, j - i, BS_LOGITS_ALL, lg, tp);
}

/* The first nb entries batched (text runs as one batch each, an image as one), the rest alone. */
static int eval_all(run_ctx *r, int nb) {
    int row = 0;
    for (int i = 0; i < nb;) {
        int j = i + 1;
        if (r->tokens[i] != IMAGE_ID)
            while (j < nb && r->tokens[j] != IMAGE_ID) j++;
        if (eval_span(r, i, j, &row)) return -1;
        i = j;
    }
    for (int i = nb; i < r->n_tokens; i++)
        if (eval_span(r, i, i + 1, &row)) return -1;
    return 0;
}

static int evaluate(const opts *o, run_ctx *r) {
    const int nv = bs_model_n_vocab(r->m), E = bs_model_n_embd(r->m);
    r->n_rows = 0;
    for (int i = 0; i < r->n_tokens; i++) {
        if (r->tokens[i] == IMAGE_ID && !r->img) return bs_error("<image> in the token list needs --image-embd or --image");
        if (r->tokens[i] >= nv) return bs_error("token id %d (at %d) is out of range [0, %d)", r->tokens[i], i, nv);
        r->n_rows += r->tokens[i] == IMAGE_ID ? r->img_rows : 1;
    }
    const int nb = o->batch < 0 ? r->n_tokens : (int)BS_MIN(o->batch, (long)r->n_tokens);
    bs_session_params sp = {.n_ctx = (int)o->ctx, .kv_type = o->kv_type, .n_threads = (int)o->threads,
                            .n_batch = BS_MAX(nb, 512)};
    if (!o->ctx && r->n_rows > 4096) sp.n_ctx = r->n_rows;
    if (!(r->s = bs_session_new(r->m, &sp))) return -1;
    if (r->n_rows > bs_session_n_ctx(r->s))
        return bs_error("%d rows are more than the context of %d (use --ctx)", r->n_rows, bs_session_n_ctx(r->s));
    if (r->n_taps && bs_session_set_taps(r->s, r->taps, r->n_taps)) return -1;
    r->logits = bs_xmalloc((size_t)r->n_rows * nv * sizeof(float));
    const size_t tap_w = (size_t)r->n_taps * E;
    if (r->n_taps) r->tap_rows = bs_xmalloc((size_t)r->n_rows * tap_w * sizeof(float));

    double t0 = bs_time();
    if (eval_all(r, nb)) return -1;
    bs_log(1, "logits: %d rows in %.3f s\n", r->n_rows, bs_time() - t0);
    if (bs_write_file_atomic(o->out, r->logits, (size_t)r->n_rows * nv * sizeof(float))) return -1;
    if (r->n_taps && bs_write_file_atomic(o->taps_out, r->tap_rows, (size_t)r->n_rows * tap_w * sizeof(float))) return -1;
    return 0;
}

/* The image embeddings file: exactly W * H rows of the model's n_embd floats. */
static int load_image(const opts *o, run_ctx *r) {
    size_t len;
    char *data = bs_read_file(o->image_embd, &len);
    if (!data) return -1;
    const size_t E = (size_t)bs_model_n_embd(r->m), rows = (size_t)(o->img_nx * o->img_ny);
    if (len != rows * E * sizeof(float)) {
        free(data);
        return bs_error("%s: %zu bytes, but a %ldx%ld grid of %zu-wide rows is %zu", o->image_embd, len, o->img_nx,
                        o->img_ny, E, rows * E * sizeof(float));
    }
    r->img = bs_xmalloc(len);
    memcpy(r->img, data, len);
    free(data);
    for (size_t i = 0; i < rows * E; i++)
        if (!isfinite(r->img[i])) return bs_error("%s: value %zu is not finite", o->image_embd, i);
    r->img_rows = (int)rows;
    r->img_nx = (int)o->img_nx;
    r->img_ny = (int)o->img_ny;
    return 0;
}

/* --image through the projector --mmproj. */
static int encode_image(const opts *o, run_ctx *r) {
    bs_mmproj *pj = bs_vision_load(o->mmproj, r->m);
    if (!pj) return -1;
    char err[512];
    bs_image_embd e;
    const int rc = bs_vision_encode_file(pj, o->image, (int)o->threads, &e, err, sizeof err);
    bs_mmproj_free(pj);
    if (rc) return bs_error("%s", err);
    const size_t len = (size_t)e.n_rows * e.n_embd * sizeof(float);
    r->img = bs_xmalloc(len);
    memcpy(r->img, e.embd, len);
    r->img_rows = e.n_rows;
    r->img_nx = e.nx;
    r->img_ny = e.ny;
    bs_image_embd_free(&e);
    return 0;
}

/* The token list with each <image> replaced by IMAGE_ID. */
static int parse_tokens(const char *text, const char *what, run_ctx *r) {
    if (strchr(text, '-')) return bs_error("%s: negative token ids are out of range", what);
    char *copy = bs_xmalloc(strlen(text) + 1), *w = copy;
    for (const char *p = text; *p;) {
        if (!strncmp(p, "<image>", 7)) { memcpy(w, "-1", 2); w += 2; p += 7; }
        else *w++ = *p++;
    }
    *w = 0;
    int e = parse_ids(copy, what, IMAGE_ID, INT32_MAX, &r->tokens, &r->n_tokens);
    free(copy);
    return e ? -1 : 0;
}

int cmd_logits(int argc, char **argv) {
    opts o;
    run_ctx r = {0};
    int rc = 1;
    if (parse_opts(argc, argv, &o) || check_outputs(&o)) return cli_fail("logits");
    if (o.tokens) {
        if (parse_tokens(o.tokens, "--tokens", &r)) goto done;
    } else {
        char *text = bs_read_file(o.tokens_file, NULL);
        if (!text) goto done;
        int e = parse_tokens(text, o.tokens_file, &r);
        free(text);
        if (e) goto done;
    }
    if (o.taps && parse_ids(o.taps, "--taps", 0, 1 << 20, &r.taps, &r.n_taps)) goto done;
    bs_model_params mp = {.no_mmap = o.no_mmap, .device = o.device};
    if (!(r.m = bs_model_load(o.model, &mp))) goto done;
    if (o.image_embd && load_image(&o, &r)) goto done;
    if (o.image && encode_image(&o, &r)) goto done;
    rc = evaluate(&o, &r) ? 1 : 0;
done:
    if (rc) cli_fail("logits");
    bs_session_free(r.s);
    bs_model_free(r.m);
    free(r.tokens);
    free(r.taps);
    free(r.logits);
    free(r.img);
    free(r.tap_rows);
    return rc;
}
