/* cli_bench_vision.c: `bitspark bench --mmproj F`: the vision encoder's time per image.
 *
 * Random normalised pixels of one size (--image-size WxH, default 448x448: 196 image tokens with
 * Qwen3.5's 16-pixel patches merged 2x2) go straight into the encoder (decoding and resizing are
 * not timed), after one warm-up; each thread count prints ms per image (mean ± sample stddev),
 * image tokens per second and the GFLOP/s of the encoder's matrix products. */
#include "cli/cli.h"
#include "vision/vision.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_T = 16, MAX_R = 64 };

typedef struct {
    const char *path;
    int w, h, reps;
    int threads[MAX_T], n_threads;
} vbench_opts;

static int parse_size(const char *v, int *w, int *h) {
    char *end;
    long a = strtol(v, &end, 10), b = *end == 'x' ? strtol(end + 1, &end, 10) : -1;
    if (*end || a < 32 || b < 32 || a > 4096 || b > 4096) return bs_error("--image-size: '%s' is not WxH (32..4096 each)", v);
    *w = (int)a;
    *h = (int)b;
    return 0;
}

static int parse_opts(int argc, char **argv, vbench_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        if (!strcmp(a, "--mmproj")) {
            if (!(o->path = cli_value(argc, argv, &i))) return -1;
        } else if (!strcmp(a, "--image-size")) {
            if (!(v = cli_value(argc, argv, &i)) || parse_size(v, &o->w, &o->h)) return -1;
        } else if (!strcmp(a, "-r")) {
            if (!(v = cli_value(argc, argv, &i)) || cli_parse_int(a, v, 1, MAX_R, &x)) return -1;
            o->reps = (int)x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i))) return -1;
            o->n_threads = 0;
            for (char *s = (char *)v, *end; *s && o->n_threads < MAX_T; s = *end ? end + 1 : end) {
                x = strtol(s, &end, 10);
                if (end == s || x < 1 || x > 1024 || (*end && *end != ',')) return bs_error("-t: '%s' is not a list of thread counts", v);
                o->threads[o->n_threads++] = (int)x;
            }
        } else {
            return bs_error("bench --mmproj: unknown option '%s' (--image-size, -t, -r)", a);
        }
    }
    return o->path ? 0 : bs_error("bench --mmproj needs the projector file");
}

static int one_size(const bs_mmproj *m, const vbench_opts *o, const float *px, int nt) {
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
    double t[MAX_R];
    char err[512];
    int tokens = 0;
    for (int r = -1; r < o->reps; r++) {   /* r = -1: warm-up */
        bs_image_embd e;
        const double t0 = bs_time();
        if (bs_vision_encode_pixels(m, px, o->w, o->h, nt, &e, err, sizeof err)) return bs_error("%s", err);
        if (r >= 0) t[r] = bs_time() - t0;
        tokens = e.n_rows;
        bs_image_embd_free(&e);
    }
    double mean = 0, sd = 0;
    for (int r = 0; r < o->reps; r++) mean += t[r] / o->reps;
    for (int r = 0; r < o->reps; r++) sd += (t[r] - mean) * (t[r] - mean);
    sd = o->reps > 1 ? sqrt(sd / (o->reps - 1)) : 0;
    const double gf = bs_vision_matmul_flops(m, o->w, o->h) / mean * 1e-9;
    char sz[32], im[32];
    snprintf(sz, sizeof sz, "%.2f MiB", hp->weight_bytes / 1048576.0);
    snprintf(im, sizeof im, "%dx%d", o->w, o->h);
    printf("| %-30s | %10s | %9.1fM | %-5s | %7d | %-9s | %6d | %14.2f ± %-7.2f | %9.1f | %8.1f |\n", "qwen3vl_merger mmproj", sz,
           hp->n_params / 1e6, bs_type_name(hp->weight_type), nt, im, tokens, mean * 1e3, sd * 1e3, tokens / mean, gf);
    return 0;
}

int bench_vision(int argc, char **argv) {
    vbench_opts o = {.w = 448, .h = 448, .reps = 5, .threads = {BS_MIN(bs_cpu_count(), 64)}, .n_threads = 1};
    if (parse_opts(argc, argv, &o)) return -1;
    char err[512];
    bs_mmproj *m = bs_mmproj_load(o.path, err, sizeof err);
    if (!m) return bs_error("%s", err);
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
    const int unit = hp->patch * hp->merge;
    o.w = (o.w + unit - 1) / unit * unit;   /* the encoder takes whole merged blocks */
    o.h = (o.h + unit - 1) / unit * unit;
    float *px = bs_xmalloc(sizeof *px * 3 * (size_t)o.w * o.h);
    bs_rng rng;
    bs_rng_seed(&rng, 1234);
    for (size_t i = 0; i < 3 * (size_t)o.w * o.h; i++) px[i] = bs_rng_normal(&rng);
    printf("| %-30s | %10s | %10s | %-5s | %7s | %-9s | %6s | %24s | %9s | %8s |\n", "model", "size", "params", "type",
           "threads", "image", "tokens", "ms/image", "tokens/s", "GFLOP/s");
    printf("| ------------------------------ | ---------: | ---------: | ----- | ------: | --------- | -----: | "
           "-----------------------: | --------: | -------: |\n");
    int rc = 0;
    for (int i = 0; i < o.n_threads && !rc; i++) rc = one_size(m, &o, px, o.threads[i]);
    free(px);
    bs_mmproj_free(m);
    return rc;
}
