/* cli_bench_vision.c: `bitspark bench --mmproj F [--image-size WxH] [-t N,..] [-r N] [--device D]`: the vision
 * encoder's time per image on preprocessed random pixels (decoding and resizing excluded: they
 * are a few ms and not the encoder), as llama-bench-style rows: ms per image, output tokens/s
 * and GFLOP/s of its matrix products (bs_vision_matmul_flops). --device vulkan[:N]: the encoder
 * on that device (the row's threads are then unused). */
#include "cli/cli.h"
#include "cli/cli_opts.h"

#include "io/threadpool.h"
#include "formats/quant.h"
#include "io/util.h"
#include "vision/vision.h"
#include "vulkan/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VB_MAX_THREADS 16
#define VB_MAX_REPS 64

typedef struct {
    const char *mmproj;
    int w, h;                     /* 0: the projector's image_size */
    int threads[VB_MAX_THREADS], n_threads;
    int reps, warmup;
    const char *device;           /* NULL or "cpu": the CPU */
} vbench_opts;

static int parse_size(const char *s, int *w, int *h) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s) return bs_error("--image-size: '%s' is not WxH or N", s);
    if (*end == 'x' || *end == 'X') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t) return bs_error("--image-size: '%s' is not WxH or N", s);
    }
    if (*end || a < 1 || b < 1 || a > 16384 || b > 16384) return bs_error("--image-size: '%s' is not WxH in 1..16384", s);
    *w = (int)a;
    *h = (int)b;
    return 0;
}

static int parse_threads(const char *s, vbench_opts *o) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_threads = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (o->n_threads >= VB_MAX_THREADS) return bs_error("-t: at most %d values", VB_MAX_THREADS);
        if (cli_parse_int("-t", tok, 1, 1024, &v)) return -1;
        o->threads[o->n_threads++] = (int)v;
    }
    return o->n_threads ? 0 : bs_error("-t: empty list");
}

/* One timed encode; -1 on error. */
static double encode_once(const bs_mmproj *m, const float *px, int w, int h, int nt, int *n_rows) {
    bs_image_embd e;
    char err[256];
    double t0 = bs_time();
    if (bs_vision_encode_pixels(m, px, w, h, nt, &e, err, sizeof err)) {
        bs_error("%s", err);
        return -1;
    }
    double dt = bs_time() - t0;
    *n_rows = e.n_rows;
    bs_image_embd_free(&e);
    return dt;
}

static int run_rows(const vbench_opts *o, const bs_mmproj *m, const float *px, int w, int h) {
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
    const double flops = bs_vision_matmul_flops(m, w, h);
    const char *base = strrchr(o->mmproj, '/');
    base = base ? base + 1 : o->mmproj;
    printf("| %-24s | %10s | %8s | %-7s | %7s | %-12s | %20s | %12s | %10s |\n", "mmproj", "size", "params", "backend",
           "threads", "test", "ms/image", "tokens/s", "GFLOP/s");
    static const int width[] = {24, 10, 8, 7, 7, 12, 20, 12, 10};   /* the header's columns */
    static const char right[] = {0, 1, 1, 0, 1, 0, 1, 1, 1};          /* numbers: right-aligned */
    static const char dashes[] = "------------------------";
    for (int c = 0; c < 9; c++) printf("| %s%s ", &dashes[24 - width[c] + right[c]], right[c] ? ":" : "");
    printf("|\n");
    for (int t = 0; t < o->n_threads; t++) {
        const int nt = o->threads[t];
        int n_rows = 0;
        double dt[VB_MAX_REPS];
        if (o->warmup && encode_once(m, px, w, h, nt, &n_rows) < 0) return -1;
        for (int r = 0; r < o->reps; r++)
            if ((dt[r] = encode_once(m, px, w, h, nt, &n_rows)) < 0) return -1;
        double mean = 0, sd = 0;
        for (int r = 0; r < o->reps; r++) mean += dt[r];
        mean /= o->reps;
        for (int r = 0; r < o->reps; r++) sd += (dt[r] - mean) * (dt[r] - mean);
        sd = o->reps > 1 ? sqrt(sd / (o->reps - 1)) : 0;
        char size[32], params[32], test[32], ms[40], tps[40], gf[40];
        snprintf(size, sizeof size, "%.2f MiB", hp->weight_bytes / 1048576.0);
        snprintf(params, sizeof params, "%.2f M", hp->n_params / 1e6);
        snprintf(test, sizeof test, "img%dx%d", w, h);
        snprintf(ms, sizeof ms, "%.2f ± %.2f", mean * 1e3, sd * 1e3);
        snprintf(tps, sizeof tps, "%.1f", n_rows / mean);
        snprintf(gf, sizeof gf, "%.1f", flops / mean / 1e9);
        printf("| %-24.24s | %10s | %8s | %-7s | %7d | %-12s | %20s | %12s | %10s |\n", base, size, params,
               bs_mmproj_on_device(m) ? "Vulkan" : "CPU", nt, test,
               ms, tps, gf);
        fflush(stdout);
    }
    printf("\n%s weights, ViT %d layers x %d wide; %d output tokens of width %d per image; "
           "GFLOP/s counts the matrix products (%.4g GFLOP per image)\n",
           bs_type_name(hp->weight_type), hp->n_layer, hp->n_embd, (w / (hp->patch * hp->merge)) * (h / (hp->patch * hp->merge)),
           hp->proj_dim, flops / 1e9);
    return 0;
}

/* --device: the context the encoder runs on (NULL: the CPU); -1 on a bad or unusable device */
static int open_device(const char *spec, bs_vk_ctx **c) {
    int kind, index;
    *c = NULL;
    if (!spec || bs_vk_parse_device(spec, &kind, &index)) return spec ? -1 : 0;
    if (kind == BS_DEVICE_CPU) return 0;
    if (index < 0 && (index = bs_vk_pick(kind == BS_DEVICE_VULKAN)) < 0)
        return kind == BS_DEVICE_AUTO ? (bs_clear_error(), 0) : bs_error_prefix("--device %s: ", spec);
    if (!(*c = bs_vk_open(index))) return bs_error_prefix("--device %s: ", spec);
    fprintf(stderr, "device: Vulkan %s\n", bs_vk_info(*c)->name);
    return 0;
}

static int bench_vision_run(const vbench_opts *o) {
    char err[512];
    bs_vk_ctx *dev;
    if (open_device(o->device, &dev)) return -1;
    bs_mmproj *m = bs_mmproj_load(o->mmproj, err, sizeof err);
    if (!m || (dev && bs_mmproj_use_device(m, dev, err, sizeof err))) {
        bs_mmproj_free(m);
        bs_vk_close(dev);
        return bs_error("%s", err);
    }
    const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
    const int unit = hp->patch * hp->merge;
    int w = o->w ? o->w : hp->image_size, h = o->h ? o->h : hp->image_size;
    w = (w + unit - 1) / unit * unit;   /* the encoder takes whole merged blocks */
    h = (h + unit - 1) / unit * unit;
    float *px = malloc((size_t)3 * w * h * sizeof *px);
    if (!px) { bs_mmproj_free(m); bs_vk_close(dev); return bs_error("out of memory for a %dx%d image", w, h); }
    bs_rng rng;
    bs_rng_seed(&rng, 1234);
    for (size_t i = 0; i < (size_t)3 * w * h; i++) px[i] = bs_rng_normal(&rng);
    int rc = run_rows(o, m, px, w, h);
    free(px);
    bs_mmproj_free(m);   /* before its device */
    bs_vk_close(dev);
    return rc;
}

int bench_vision(int argc, char **argv) {
    vbench_opts o = {.reps = 3, .warmup = 1, .n_threads = 1};
    o.threads[0] = BS_MIN(bs_cpu_count(), 64);
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_BENCH_VISION, argc, argv, &i, &a)) return -1;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MMPROJ: o.mmproj = a.s; break;
        case OPT_IMAGE_SIZE: if (parse_size(a.s, &o.w, &o.h)) return -1; break;
        case OPT_THREADS: if (parse_threads(a.s, &o)) return -1; break;
        case OPT_REPS: o.reps = (int)BS_MIN(a.n, VB_MAX_REPS); break;
        case OPT_NO_WARMUP: o.warmup = 0; break;
        case OPT_DEVICE: o.device = a.s; break;
        default: return bs_error("--mmproj: unexpected argument '%s'", a.s);
        }
    }
    cli_opts_end();
    if (!o.mmproj) return bs_error("--mmproj needs a FILE");
    return bench_vision_run(&o);
}
