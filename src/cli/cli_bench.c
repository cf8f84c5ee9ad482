/* cli_bench.c: `bitspark bench`, llama-bench-compatible speed tests.
 *
 * Model mode (-m): pp<N> (one batch of N random tokens) and tg<N> (N single-token evals), each
 * repeated -r times after a warm-up, printed as mean ± sample stddev of tokens/s in
 * llama-bench's markdown / csv / json layout; --verify W,.. adds the cost of a W-token verify
 * step relative to a 1-token step; a `membw` line gives this machine's measured read bandwidth,
 * the decode roofline it implies for the model's weight bytes per token, and the fraction tg
 * reached; --parallel N,.. adds tg rows of N sessions decoding together (one pass per token of
 * each, as the server's slots decode), counting every session's tokens; --sampled adds a tg row
 * that samples each token (the default chain; on a device from the k best found there).
 * Kernel mode (--matmul): bs_matmul on synthetic Bonsai-shaped weights (default Q1_0 5120x17408
 * and 17408x5120), spread over enough copies that every call streams from DRAM, for 1..8
 * activation rows and each thread count: ms per call, GB/s and cost relative to one row. */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "tools/spec_bench.h"

#include "bitspark.h"
#include "sample/sampler.h"
#include "cpu/cpu_features.h"
#include "formats/gguf.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "formats/quant.h"
#include "io/threadpool.h"
#include "io/util.h"
#include "model/device.h"
#include "model/batch_eval.h"
#include "vulkan/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_LIST 16
#define MAX_REPS 64   /* -r: samples per test (and tg runs between bandwidth probes) */
#define MAX_PARALLEL 64   /* --parallel: sessions per row */

typedef struct {
    const char *model;
    int n_prompt, n_gen, reps, warmup;
    int threads[MAX_LIST], n_threads;
    int verify[MAX_LIST], n_verify;
    int parallel[MAX_LIST], n_parallel;   /* --parallel: sessions decoding together */
    const char *out;            /* md, csv, json */
    int matmul;                 /* kernel mode */
    const char *mm_type;
    long mm_mb;                 /* MiB of weight copies in kernel mode */
    int mm_rows[MAX_LIST], n_mm_rows;   /* activation rows per product in kernel mode */
    int mm_packed_only;         /* kernel mode: skip the native layout's rows */
    int membw;
    int no_mmap;                /* read the model into anonymous memory (stabler numbers) */
    const char *device;         /* --device */
    int sampled;                /* --sampled: a tg row sampling each token (the default chain) */
} bench_opts;

typedef struct { double mean, sd; } stat;

static stat stats(const double *v, int n) {
    stat s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n > 0 ? n : 1;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0.0;
    return s;
}

static int parse_list(const char *opt, const char *s, int *out, int *n, long lo, long hi) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (*n >= MAX_LIST) return bs_error("%s: at most %d values", opt, MAX_LIST);
        if (cli_parse_int(opt, tok, lo, hi, &v)) return -1;
        out[(*n)++] = (int)v;
    }
    return *n ? 0 : bs_error("%s: empty list", opt);
}

/* --- memory bandwidth ------------------------------------------------------------------------ */

typedef struct { const uint64_t *p; size_t n; uint64_t sums[64]; } bw_job;

static void bw_read(void *ctx, int ith, int nth) {
    bw_job *j = ctx;
    int64_t lo, hi;
    bs_pool_split((int64_t)j->n, 64, ith, nth, &lo, &hi);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = lo; i + 4 <= hi; i += 4) a += j->p[i], b += j->p[i + 1], c += j->p[i + 2], d += j->p[i + 3];
    j->sums[ith & 63] = a + b + c + d;
}

/* A 1 GiB anonymous buffer read by a pool's threads: this machine's read bandwidth now. */
typedef struct { uint64_t *buf; size_t bytes; bs_pool *pool; } bw_probe;

static void probe_init(bw_probe *p, bs_pool *pool) {
    p->bytes = (size_t)1 << 30;
    p->buf = bs_amalloc(p->bytes);
    p->pool = pool;
#ifdef MADV_HUGEPAGE
    madvise(p->buf, p->bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < p->bytes / 8; i++) p->buf[i] = i;
}

/* Best of `tries` reads (GB/s), after 10 ms for other pools' workers to stop spinning. */
static double probe_read(bw_probe *p, int tries) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
    bw_job j = {.p = p->buf, .n = p->bytes / 8};
    double best = 0;
    for (int r = 0; r < tries; r++) {
        double t0 = bs_time();
        bs_pool_run(p->pool, bw_read, &j);
        double gbs = (double)p->bytes / (bs_time() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

static void probe_free(bw_probe *p) { bs_afree(p->buf); p->buf = NULL; }

static double measure_membw(bs_pool *pool) {
    bw_probe p;
    probe_init(&p, pool);
    double bw = probe_read(&p, 5);
    probe_free(&p);
    return bw;
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- kernel mode ------------------------------------------------------------------------------ */

static void fill_weight(uint8_t *w, int type, int64_t ne0, int64_t ne1, bs_rng *rng) {
    const bs_type_traits *t = bs_type_get(type);
    size_t total = bs_row_size(type, ne0) * (size_t)ne1;
    for (size_t i = 0; i + 8 <= total; i += 8) {
        uint64_t v = bs_rng_next(rng);
        memcpy(w + i, &v, 8);
    }
    if (t->is_quantized)   /* a sane fp16 scale (0.01) at the start of every block */
        for (size_t b = 0; b + t->type_size <= total; b += t->type_size) w[b] = 0x1f, w[b + 1] = 0x21;
}

static int bench_matmul(const bench_opts *o) {
    int type = bs_type_from_name(o->mm_type);
    if (type == BS_TYPE_INVALID || !bs_type_get(type)->is_quantized)
        return bs_error("--matmul-type: unknown or float type '%s'", o->mm_type);
    const int64_t shapes[2][2] = {{5120, 17408}, {17408, 5120}};
    const int *rows = o->mm_rows, nrows = o->n_mm_rows;
    int maxr = 1;
    for (int i = 0; i < nrows; i++) maxr = BS_MAX(maxr, rows[i]);
    bs_rng rng;
    bs_rng_seed(&rng, 42);
    printf("cpu: %s, kernels: %s\n", bs_cpu_describe(), bs_cpu_level_name(bs_cpu_level()));
    printf("(cpu ms: process CPU time per call, all threads; on a loaded machine wall time overstates cost)\n");
    printf("| %-8s | %-6s | %-12s | %6s | %6s | %7s | %4s | %9s | %8s | %9s | %9s | %9s |\n", "type", "layout", "kernel", "ne0",
           "ne1", "threads", "rows", "ms/call", "GB/s", "vs 1st", "cpu ms", "GMAC/s");
    printf("| -------- | ------ | ------------ | -----: | -----: | ------: | ---: | --------: | -------: | --------: | --------: | --------: |\n");
    for (int s = 0; s < 2; s++) {
        const int64_t ne0 = shapes[s][0], ne1 = shapes[s][1];
        size_t wbytes = bs_row_size(type, ne0) * (size_t)ne1;
        if (!wbytes) return bs_error("%s: %lld is not a multiple of the block size", o->mm_type, (long long)ne0);
        int copies = (int)BS_MAX(1, (o->mm_mb << 20) / (long)wbytes);
        uint8_t *mem = bs_amalloc(wbytes * (size_t)copies);
#ifdef MADV_HUGEPAGE
        madvise(mem, wbytes * (size_t)copies, MADV_HUGEPAGE);
#endif
        fill_weight(mem, type, ne0, ne1 * copies, &rng);
        float *x = bs_xmalloc((size_t)(maxr * ne0) * sizeof(float));
        float *y = bs_xmalloc((size_t)(maxr * ne1) * sizeof(float));
        for (int64_t i = 0; i < maxr * ne0; i++) x[i] = bs_rng_normal(&rng);
        bs_weight *W = bs_xcalloc((size_t)copies, sizeof *W);
        for (int c = 0; c < copies; c++)
            W[c] = (bs_weight){.type = type, .ne0 = ne0, .ne1 = ne1, .data = mem + (size_t)c * wbytes,
                               .row_bytes = bs_row_size(type, ne0), .name = "bench"};
        for (int layout = o->mm_packed_only; layout < 2; layout++) {
            if (layout == 1) {   /* repacked copies (bs_weight_pack), when this CPU has such a kernel */
                bs_pool *pp = bs_pool_new(o->threads[o->n_threads - 1]);
                double t0 = bs_time();
                for (int c = 0; c < copies; c++)
                    if (bs_weight_pack(&W[c], pp)) return -1;
                double dt = bs_time() - t0;
                bs_pool_free(pp);
                if (!W[0].packed) break;
                fprintf(stderr, "repacked %.2f GB in %.2f s\n", (double)wbytes * copies / 1e9, dt);
            }
            for (int ti = 0; ti < o->n_threads; ti++) {
                bs_pool *pool = o->threads[ti] > 1 ? bs_pool_new(o->threads[ti]) : NULL;
                double t1 = 0;
                for (int ri = 0; ri < nrows; ri++) {
                    double best = 1e30, cbest = 1e30;
                    for (int rep = 0; rep < o->reps + 1; rep++) {   /* +1: warm-up pass */
                        double t0 = bs_time(), c0 = cpu_seconds();
                        for (int c = 0; c < copies; c++) bs_matmul(&W[c], x, rows[ri], y, pool);
                        double dt = (bs_time() - t0) / copies, dc = (cpu_seconds() - c0) / copies;
                        if (rep > 0 && dt < best) best = dt;
                        if (rep > 0 && dc < cbest) cbest = dc;
                    }
                    if (ri == 0) t1 = best;
                    printf("| %-8s | %-6s | %-12s | %6lld | %6lld | %7d | %4d | %9.3f | %8.2f | %8.2fx | %9.3f | %9.1f |\n",
                           bs_type_name(type), !layout ? "native" : W[0].pack_kind == BS_PACK_Q1_L128 ? "l128" : "x16",
                           bs_kernel_describe(&W[0], rows[ri], bs_cpu_level()), (long long)ne0, (long long)ne1, o->threads[ti], rows[ri], best * 1e3,
                           (double)wbytes / best / 1e9, best / t1, cbest * 1e3, (double)ne0 * (double)ne1 * rows[ri] / best / 1e9);
                    fflush(stdout);
                }
                if (o->membw && layout == 0)
                    printf("membw: %.1f GB/s read with %d thread(s)\n", measure_membw(pool), o->threads[ti]);
                bs_pool_free(pool);
            }
        }
        for (int c = 0; c < copies; c++) bs_weight_release(&W[c]);
        free(W);
        free(x), free(y);
        bs_afree(mem);
    }
    return 0;
}

/* --- model mode ------------------------------------------------------------------------------- */

typedef struct {
    char type_str[128];
    uint64_t size, n_params, stream_bytes;   /* stream: bytes read per decoded token */
    uint64_t stream_params;                  /* weights those bytes hold */
    uint64_t run_bytes;                      /* the bytes the kernels read: PTQ1_0 runs as PQ2_0 */
} model_info;

/* Header facts for the table, from the GGUF metadata (no tensor data is read). */
static int model_describe(const char *path, model_info *mi) {
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    if (!f) return -1;
    uint64_t bytes_by_type[2048] = {0};
    int has_output = gguf_find_tensor(f, "output.weight") != NULL;
    memset(mi, 0, sizeof *mi);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t ne = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) ne *= (uint64_t)t->ne[d];
        mi->n_params += ne;
        mi->size += t->nbytes;
        if (strcmp(t->name, "token_embd.weight") != 0 || !has_output) {
            mi->stream_bytes += t->nbytes;
            mi->stream_params += ne;
            mi->run_bytes += t->type == BS_PTQ1_0 ? t->nbytes / 28 * 34 : t->nbytes;
        }
        if (t->n_dims >= 2 && t->type >= 0 && t->type < 2048) bytes_by_type[t->type] += t->nbytes;
    }
    int ftype = 0;
    for (int k = 0; k < 2048; k++)
        if (bytes_by_type[k] > bytes_by_type[ftype]) ftype = k;
    const char *arch = gguf_get_str(f, "general.architecture");
    const char *label = gguf_get_str(f, "general.size_label");
    char size_label[32], tname[32];
    if (label) snprintf(size_label, sizeof size_label, "%s", label);
    else if (mi->n_params >= 1000000000ull) snprintf(size_label, sizeof size_label, "%.0fB", mi->n_params / 1e9);
    else snprintf(size_label, sizeof size_label, "%.0fM", mi->n_params / 1e6);
    snprintf(tname, sizeof tname, "%s", bs_type_name(ftype));
    for (char *c = tname; *c; c++) if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 32);
    snprintf(mi->type_str, sizeof mi->type_str, "%s %s %s", arch ? arch : "unknown", size_label, tname);
    gguf_close(f);
    return 0;
}

typedef struct {
    char test[32];
    int n_prompt, n_gen, threads;
    double samples[MAX_REPS];
    int n;
} result;

static void random_tokens(int32_t *tok, int n, int n_vocab, bs_rng *rng) {
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(bs_rng_next(rng) % (uint64_t)n_vocab);
}

static bool g_device_greedy;   /* tg on a device: greedy steps (bs_eval_greedy) */

/* The tg steps of --sampled: each token drawn by the default chain (temperature 0.8, top-k 40,
 * top-p 0.95, min-p 0.05) from the step before, as `run` samples: on a device from the k best
 * found there, the step after running meanwhile fed the draw predicted there
 * (bs_eval_top_drawn), else from the row. */
static int sampled_steps(bs_session *s, bs_sampler *smp, int32_t first, int n_gen, float *logits) {
    const int k = g_device_greedy ? bs_sampler_top_k_only(smp, BS_TOP_MAX) : 0;
    const bs_draw d = bs_sampler_draw_steps(smp, k);
    int32_t cur = first, ids[BS_TOP_MAX];
    float vals[BS_TOP_MAX];
    double u[2];
    bs_sampler_set_seed(smp, 1);
    for (int i = 0; i < n_gen; i++) {
        if (k) bs_sampler_lookahead(smp, 2, u);
        const int n = k ? bs_eval_top_drawn(s, cur, &d, u, ids, vals) : bs_eval(s, &cur, 1, BS_LOGITS_LAST, logits, NULL);
        if (n < 0) return -1;
        const int32_t next = k ? bs_sampler_sample_top(smp, ids, vals, n) : bs_sampler_sample(smp, logits);
        if (next < 0) return -1;
        bs_sampler_accept(smp, next);
        cur = next;
    }
    return 0;
}

/* Seconds for one run: pp = one batch of n_prompt tokens; tg = n_gen one-token evals (smp: drawn
 * by it, sampled_steps). */
static double run_once(bs_session *s, int n_prompt, int n_gen, int n_vocab, bs_rng *rng, float *logits, bs_sampler *smp) {
    int32_t *tok = bs_xmalloc(sizeof(int32_t) * (size_t)BS_MAX(1, BS_MAX(n_prompt, n_gen)));
    bs_session_reset(s);
    double t0 = bs_time(), dt = -1;
    if (n_prompt > 0) {
        random_tokens(tok, n_prompt, n_vocab, rng);
        t0 = bs_time();
        if (bs_eval(s, tok, n_prompt, BS_LOGITS_LAST, logits, NULL)) goto out;
    } else if (smp) {
        random_tokens(tok, 1, n_vocab, rng);
        bs_session_set_undo(s, 0);
        t0 = bs_time();
        const int rc = sampled_steps(s, smp, tok[0], n_gen, logits);
        bs_session_set_undo(s, 1);
        if (rc) goto out;
    } else {
        random_tokens(tok, n_gen, n_vocab, rng);
        bs_session_set_undo(s, 0);   /* as `run` decodes */
        t0 = bs_time();
        int rc = 0;
        /* on a device a greedy step reads back the token, not the row, and each step's token is
           the one before's (as `run` greedy: the device runs the next step meanwhile) */
        int32_t cur = tok[0], next = 0;
        for (int i = 0; i < n_gen && !rc; i++, cur = next)
            rc = g_device_greedy ? bs_eval_greedy(s, &cur, 1, &next, NULL) : bs_eval(s, tok + i, 1, BS_LOGITS_LAST, logits, NULL);
        bs_session_set_undo(s, 1);
        if (rc) goto out;
    }
    dt = bs_time() - t0;
out:
    free(tok);
    return dt;
}

/* "CPU" or "Vulkan": the backend column of the table, as llama-bench names its backends */
static char g_backend[16] = "CPU";

static void print_md_header(void) {
    printf("| %-30s | %10s | %10s | %-10s | %7s | %15s | %20s |\n", "model", "size", "params", "backend",
           "threads", "test", "t/s");
    printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n");
}

static void fmt_size(char *buf, size_t n, uint64_t bytes) {
    if (bytes < (1ull << 30)) snprintf(buf, n, "%.2f MiB", bytes / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
}

static void print_result(const bench_opts *o, const model_info *mi, const result *r, int first) {
    stat s = stats(r->samples, r->n);
    int ntok = r->n_prompt + r->n_gen;
    double ts[MAX_REPS], ns[MAX_REPS];
    for (int i = 0; i < r->n; i++) ts[i] = ntok / r->samples[i], ns[i] = r->samples[i] * 1e9;
    stat st = stats(ts, r->n), sn = stats(ns, r->n);
    (void)s;
    char size[32], params[32], when[32];
    fmt_size(size, sizeof size, mi->size);
    if (mi->n_params < 1000000000ull) snprintf(params, sizeof params, "%.2f M", mi->n_params / 1e6);
    else snprintf(params, sizeof params, "%.2f B", mi->n_params / 1e9);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!strcmp(o->out, "md")) {
        char tsbuf[64];
        snprintf(tsbuf, sizeof tsbuf, "%.2f ± %.2f", st.mean, st.sd);
        printf("| %-30s | %10s | %10s | %-10s | %7d | %15s | %21s |\n", mi->type_str, size, params, g_backend,
               r->threads, r->test, tsbuf);
    } else if (!strcmp(o->out, "csv")) {
        if (first)
            printf("build_commit,build_number,cpu_info,model_filename,model_type,model_size,model_n_params,"
                   "backends,n_threads,n_batch,n_ubatch,type_k,type_v,n_prompt,n_gen,n_depth,test_time,"
                   "avg_ns,stddev_ns,avg_ts,stddev_ts\n");
        printf("\"%s\",0,\"%s\",\"%s\",\"%s\",%llu,%llu,\"%s\",%d,%d,%d,\"f16\",\"f16\",%d,%d,0,\"%s\",%.0f,%.0f,%.6f,%.6f\n",
               bitspark_version(), bs_cpu_describe(), o->model, mi->type_str, (unsigned long long)mi->size,
               (unsigned long long)mi->n_params, g_backend, r->threads, BS_MAX(r->n_prompt, 1), BS_MAX(r->n_prompt, 1),
               r->n_prompt, r->n_gen, when, sn.mean, sn.sd, st.mean, st.sd);
    } else {
        printf("%s  {\"build_commit\": \"%s\", \"build_number\": 0, \"cpu_info\": \"%s\", \"model_filename\": \"%s\", "
               "\"model_type\": \"%s\", \"model_size\": %llu, \"model_n_params\": %llu, \"backends\": \"%s\", "
               "\"n_threads\": %d, \"type_k\": \"f16\", \"type_v\": \"f16\", \"n_prompt\": %d, \"n_gen\": %d, "
               "\"n_depth\": 0, \"test_time\": \"%s\", \"avg_ns\": %.0f, \"stddev_ns\": %.0f, \"avg_ts\": %.6f, "
               "\"stddev_ts\": %.6f, \"samples_ns\": [",
               first ? "[\n" : ",\n", bitspark_version(), bs_cpu_describe(), o->model, mi->type_str,
               (unsigned long long)mi->size, (unsigned long long)mi->n_params, g_backend, r->threads, r->n_prompt, r->n_gen,
               when, sn.mean, sn.sd, st.mean, st.sd);
        for (int i = 0; i < r->n; i++) printf("%s%.0f", i ? ", " : "", ns[i]);
        printf("], \"samples_ts\": [");
        for (int i = 0; i < r->n; i++) printf("%s%.6f", i ? ", " : "", ts[i]);
        printf("]}");
    }
    fflush(stdout);
}

/* Seconds of a w-token verify step after a 16-token prefix, best of reps: as a greedy
 * speculative round runs it, each row's greedy token back (on a GPU the ids, not the rows). */
static double verify_step(bs_session *s, int w, int reps, int n_vocab, bs_rng *rng) {
    int32_t tok[64 + 16], next[64];
    float *logits = bs_xmalloc(sizeof(float) * (size_t)n_vocab * (size_t)w);
    double best = -1;
    bs_session_reset(s);
    random_tokens(tok, 16 + w, n_vocab, rng);
    if (bs_eval(s, tok, 16, BS_LOGITS_NONE, NULL, NULL) == 0) {
        for (int r = 0; r < reps + 1; r++) {
            double t0 = bs_time();
            const bs_batch_seq q = {.s = s, .tokens = tok + 16, .n = w, .logits_mode = BS_LOGITS_ALL, .logits = logits, .next = next};
            if (bs_eval_seq(&q)) break;
            double dt = bs_time() - t0;
            if (bs_session_rollback(s, 16)) break;
            if (r > 0 && (best < 0 || dt < best)) best = dt;
        }
    }
    free(logits);
    return best;
}

static char notes[4096];   /* verify / membw lines, printed under the table */

static void note(const char *fmt, ...) BS_PRINTF(1, 2);
static void note(const char *fmt, ...) {
    size_t len = strlen(notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes + len, sizeof notes - len, fmt, ap);
    va_end(ap);
}

typedef struct { double macs[64]; } peak_job;

static void peak_run(void *ctx, int ith, int nth) {
    (void)nth;
    ((peak_job *)ctx)->macs[ith & 63] = bs_int8_peak_avx512(20000000);
}

/* The arithmetic ceiling next to the bandwidth one: with one vpdpbusd product per weight (what
 * the Q2_0 kernels do), a 1-row step cannot beat peak MAC/s / weights per token. Q1_0's L128
 * lookups (kernels_l128_prompt.c) are bound by their own instruction count instead. */
static void int8_ceiling(int threads, const model_info *mi) {
#if !defined(__x86_64__)
    (void)threads, (void)mi;
    return;   /* the probe is the AVX-512 VNNI loop; ARM levels compare above it numerically */
#endif
    if (bs_cpu_level() < BS_CPU_AVX512 || !mi->stream_params) return;
    bs_pool *pool = threads > 1 ? bs_pool_new(threads) : NULL;
    peak_job j;
    memset(&j, 0, sizeof j);
    bs_pool_run(pool, peak_run, &j);
    bs_pool_free(pool);
    double macs = 0;
    for (int i = 0; i < 64; i++) macs += j.macs[i];
    note("int8: %.0f GMAC/s peak (vpdpbusd, %d threads); at 1 vpdpbusd product per weight (%.2f G "
         "weights/token, the Q2_0 kernels) a token costs at least %.1f ms of arithmetic: ceiling %.2f tok/s "
         "(Q1_0's table lookups do 128 products per instruction and are not bound by it)\n", macs / 1e9, threads,
         mi->stream_params / 1e9, 1e3 * (double)mi->stream_params / macs, macs / (double)mi->stream_params);
    note("amx: %s\n", bs_amx_status());
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {   /* n <= MAX_REPS + 1 */
    double t[MAX_REPS + 1];
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* The membw line from the bandwidths bw[0..nbw) probed before, between and after the n tg runs
 * of dt seconds each. The host's bandwidth drifts within minutes, so each run is held against
 * the mean of the probes either side of it, and the fraction printed is the median of those. */
static void membw_note(int threads, const model_info *mi, const double *bw, int nbw, const double *dt, int n,
                       int n_gen) {
    double lo = bw[0], hi = bw[0], bwm = median(bw, nbw);
    for (int i = 1; i < nbw; i++) lo = BS_MIN(lo, bw[i]), hi = BS_MAX(hi, bw[i]);
    double roof = bwm * 1e9 / (double)mi->stream_bytes;
    note("membw: %.1f GB/s read (%d threads", bwm, threads);
    if (nbw > 1) note("; median of %d probes around the tg runs, %.1f-%.1f", nbw, lo, hi);
    note("); decode roofline %.2f tok/s (%.3f GB/token of weights)", roof, mi->stream_bytes / 1e9);
    if (mi->run_bytes != mi->stream_bytes)   /* (the roofline stays the file's: what a native kernel would read) */
        note("; PTQ1_0 runs as PQ2_0, %.3f GB/token read", mi->run_bytes / 1e9);
    if (n > 0 && nbw == n + 1) {
        double frac[MAX_REPS];
        for (int i = 0; i < n; i++) frac[i] = n_gen / dt[i] / (0.5 * (bw[i] + bw[i + 1]) * 1e9 / (double)mi->stream_bytes);
        note("; tg reached %.0f%% (median over the runs, each against the probes either side of it)",
             100.0 * median(frac, n));
    }
    note("\n");
}

/* On the device: its bandwidth from the copy kernel (read + write of buffers well past any
 * cache), the decode roofline it implies and the fraction of it tg reached (median run). */
static void device_roofline(bs_model *m, const model_info *mi, const double *dt, int n, int n_gen) {
    const uint64_t heap = bs_vk_info(m->vk)->heap_bytes;
    const size_t bytes = (size_t)BS_MIN((uint64_t)1 << 30, heap / 8);
    const double bw = bs_vk_copy_bandwidth(m->vk, bytes, 8);
    if (bw <= 0) { note("membw: the device copy kernel failed (%s)\n", bitspark_last_error()); return; }
    const double roof = bw * 1e9 / (double)mi->stream_bytes;
    note("membw: %.1f GB/s copy on %s (%.0f MiB, read + write); decode roofline %.2f tok/s (%.3f GB/token of weights)",
         bw, bs_model_device(m), bytes / 1048576.0, roof, mi->stream_bytes / 1e9);
    if (n > 0) note("; tg reached %.0f%%", 100.0 * n_gen / median(dt, n) / roof);
    note("\n");
}

/* On the device, per decoded token of the tg runs: what the host asks of it besides the
 * kernels' work (dispatches, barriers, submissions, bytes read back) and the weight bytes the
 * products read against the file's. */
static void device_steps(bs_model *m, const model_info *mi, int np, const bs_vk_stats *passes, const char *what) {
    bs_vk_stats st;
    if (passes) st = *passes;
    else bs_vk_stats_get(m->vk, &st);
    if (!st.tokens) return;
    const double n = (double)st.tokens / np;   /* steps: np tokens each */
    if (np > 1) {
        note("device tg x%d: per pass (%d tokens) %.1f dispatches, %.1f barriers, %.2f submissions, %.0f bytes read back\n",
             np, np, st.dispatches / n, st.barriers / n, st.submits / n, st.read_bytes / n);
        return;
    }
    note("device %s: per token %.1f dispatches, %.1f barriers, %.2f submissions, %.0f bytes read back; "
         "weights read %.3f GB/token (%.3fx the file's %.3f GB)\n", what,
         st.dispatches / n, st.barriers / n, st.submits / n, st.read_bytes / n, st.weight_bytes / n / 1e9,
         mi->stream_bytes ? st.weight_bytes / n / (double)mi->stream_bytes : 0.0, mi->stream_bytes / 1e9);
    if (st.ahead) note("device %s: %llu steps submitted ahead of the host, %llu undone\n", what, (unsigned long long)st.ahead,
                       (unsigned long long)st.discarded);
}

/* One timed run of --parallel: np sessions (16-token prompts, not timed) then n_gen passes of one
 * token each through bs_multi_eval; greedy ids on a device, logits rows on the CPU. */
static double parallel_once(bs_model *m, bs_multi *mb, bs_session **ss, int np, int n_gen, bs_rng *rng, float *logits,
                            bs_vk_stats *sum) {
    const int n_vocab = bs_model_n_vocab(m);
    enum { PROMPT = 16 };
    int32_t *tok = bs_xmalloc(sizeof(int32_t) * (size_t)np * (PROMPT + (size_t)n_gen)), next[MAX_PARALLEL];
    bs_batch_seq q[MAX_PARALLEL];
    random_tokens(tok, np * (PROMPT + n_gen), n_vocab, rng);
    double dt = -1;
    for (int i = 0; i < np; i++) {
        bs_session_reset(ss[i]);
        if (bs_eval(ss[i], tok + (size_t)i * (PROMPT + n_gen), PROMPT, BS_LOGITS_NONE, NULL, NULL)) goto out;
    }
    if (m->vk) bs_vk_stats_reset(m->vk);   /* the passes' work alone */
    const double t0 = bs_time();
    for (int t = 0; t < n_gen; t++) {
        for (int i = 0; i < np; i++)
            q[i] = (bs_batch_seq){.s = ss[i], .tokens = tok + (size_t)i * (PROMPT + n_gen) + PROMPT + t, .n = 1,
                                  .logits_mode = BS_LOGITS_LAST, .logits = logits + (size_t)i * n_vocab,
                                  .next = g_device_greedy ? &next[i] : NULL};
        if (bs_multi_eval(mb, q, np)) goto out;
    }
    dt = bs_time() - t0;
    if (m->vk && sum) {
        bs_vk_stats st;
        bs_vk_stats_get(m->vk, &st);
        sum->dispatches += st.dispatches, sum->barriers += st.barriers, sum->submits += st.submits;
        sum->read_bytes += st.read_bytes, sum->tokens += st.tokens, sum->weight_bytes += st.weight_bytes;
    }
out:
    free(tok);
    return dt;
}

/* The tg<n_gen>x<np> row: np sessions decoding together; t/s counts all their tokens. */
static int parallel_row(const bench_opts *o, bs_model *m, const model_info *mi, int threads, int np, bs_rng *rng, int first) {
    const int n_vocab = bs_model_n_vocab(m);
    bs_vk_stats sum = {0};
    bs_session_params sp = {.n_ctx = o->n_gen + 32, .n_batch = 16, .n_threads = threads};
    bs_session *ss[MAX_PARALLEL] = {0};
    bs_multi *mb = bs_multi_new(m, np, np, threads);
    float *logits = bs_xmalloc(sizeof(float) * (size_t)n_vocab * (size_t)np);
    int rc = mb ? 0 : -1;
    for (int i = 0; i < np && !rc; i++) {
        if (!(ss[i] = bs_session_new(m, &sp))) rc = -1;
        else bs_session_set_undo(ss[i], 0);   /* as the server's decode steps */
    }
    result r = {.threads = threads, .n_gen = np * o->n_gen};
    snprintf(r.test, sizeof r.test, "tg%dx%d", o->n_gen, np);
    if (!rc && o->warmup && parallel_once(m, mb, ss, np, o->n_gen, rng, logits, NULL) < 0) rc = -1;
    for (int i = 0; i < o->reps && !rc; i++) {
        const double dt = parallel_once(m, mb, ss, np, o->n_gen, rng, logits, &sum);
        if (dt < 0) rc = -1;
        else r.samples[r.n++] = dt;
    }
    if (!rc && m->vk) device_steps(m, mi, np, &sum, "tg");
    if (!rc) print_result(o, mi, &r, first);
    for (int i = 0; i < np; i++) bs_session_free(ss[i]);
    bs_multi_free(mb);
    free(logits);
    return rc ? bs_error("--parallel %d: %s", np, bitspark_last_error()) : 0;
}

static int bench_model(const bench_opts *o) {
    model_info mi;
    notes[0] = 0;
    if (model_describe(o->model, &mi)) return -1;
    bs_model_params mp = {.no_mmap = o->no_mmap != 0, .device = o->device};
    double t_load = bs_time();
    bs_model *m = bs_model_load(o->model, &mp);
    if (!m) return bs_error("%s", bitspark_last_error());
    note("load: %.2f s (%s, Q1_0/Q2_0 weights %s)\n", bs_time() - t_load, o->no_mmap ? "read into memory" : "mmap",
         m->vk ? "uploaded to the device" : bs_weight_exact() ? "in llama.cpp's layout: BITSPARK_EXACT" : "repacked where the CPU has a packed kernel");
    snprintf(g_backend, sizeof g_backend, "%s", m->vk ? "Vulkan" : "CPU");
    g_device_greedy = m->vk != NULL;
    note("device: %s\n", bs_model_device(m));
    int n_vocab = bs_model_n_vocab(m), first = 1, rc = 0;
    float *logits = bs_xmalloc(sizeof(float) * (size_t)n_vocab);
    bs_rng rng;
    bs_rng_seed(&rng, 1);
    if (!strcmp(o->out, "md")) print_md_header();
    for (int ti = 0; ti < o->n_threads && !rc; ti++) {
        int nb = BS_MAX(o->n_prompt, 64);
        bs_session_params sp = {.n_ctx = BS_MAX(o->n_prompt, o->n_gen) + 128, .n_batch = nb,
                                .n_threads = o->threads[ti]};
        bs_session *s = bs_session_new(m, &sp);
        if (!s) { rc = bs_error("%s", bitspark_last_error()); break; }
        /* the roofline is probed before, between and after the tg runs (last thread count) */
        const int probing = o->membw && !strcmp(o->out, "md") && ti == o->n_threads - 1 && !m->vk;
        bw_probe probe = {0};
        double bw[MAX_REPS + 1], tg_dt[MAX_REPS];
        int nbw = 0, n_tg = 0;
        if (probing) probe_init(&probe, o->threads[ti] > 1 ? bs_pool_new(o->threads[ti]) : NULL);
        for (int kind = 0; kind < 3 && !rc; kind++) {   /* pp, tg, tg sampled */
            result r = {.threads = o->threads[ti]};
            r.n_prompt = kind == 0 ? o->n_prompt : 0;
            r.n_gen = kind == 1 || (kind == 2 && o->sampled) ? o->n_gen : 0;
            if (r.n_prompt + r.n_gen == 0) continue;
            snprintf(r.test, sizeof r.test, kind == 0 ? "pp%d" : kind == 1 ? "tg%d" : "tg%d sampled", kind == 0 ? r.n_prompt : r.n_gen);
            bs_sampler *smp = NULL;
            if (kind == 2) {
                const bs_sampler_params sp = bs_sampler_default_params();
                if (!(smp = bs_sampler_new(&sp, n_vocab))) { rc = -1; break; }
            }
            if (o->warmup && run_once(s, r.n_prompt, r.n_gen, n_vocab, &rng, logits, smp) < 0) rc = -1;
            if (m->vk) bs_vk_stats_reset(m->vk);
            for (int i = 0; i < o->reps && i < MAX_REPS && !rc; i++) {
                if (probing && kind == 1) bw[nbw++] = probe_read(&probe, 3);
                double dt = run_once(s, r.n_prompt, r.n_gen, n_vocab, &rng, logits, smp);
                if (dt < 0) { rc = bs_error("%s", bitspark_last_error()); break; }
                r.samples[r.n++] = dt;
            }
            bs_sampler_free(smp);
            if (rc) break;
            if (kind == 1) {
                memcpy(tg_dt, r.samples, sizeof(double) * (size_t)r.n);
                n_tg = r.n;
            }
            if (kind && m->vk) device_steps(m, &mi, 1, NULL, kind == 2 ? "tg sampled" : "tg");
            if (probing && kind == 1) {
                bw[nbw++] = probe_read(&probe, 3);
                memcpy(tg_dt, r.samples, sizeof(double) * (size_t)r.n);
                n_tg = r.n;
            }
            print_result(o, &mi, &r, first);
            first = 0;
        }
        for (int p = 0; p < o->n_parallel && !rc && o->n_gen > 0; p++) {
            rc = parallel_row(o, m, &mi, o->threads[ti], o->parallel[p], &rng, first);
            first = 0;
        }
        if (!rc && o->n_verify && !strcmp(o->out, "md")) {
            double tw[MAX_LIST], t1 = -1;
            for (int v = 0; v < o->n_verify; v++) {
                tw[v] = verify_step(s, o->verify[v], 3 * o->reps, n_vocab, &rng);
                if (o->verify[v] == 1) t1 = tw[v];
            }
            if (t1 < 0) t1 = verify_step(s, 1, 3 * o->reps, n_vocab, &rng);
            note("verify (threads %d, best of %d): ", o->threads[ti], 3 * o->reps);
            for (int v = 0; v < o->n_verify; v++)
                note("%sw=%d %.1f ms (%.2fx)", v ? ", " : "", o->verify[v], tw[v] * 1e3, t1 > 0 ? tw[v] / t1 : 0.0);
            note("\n");
        }
        if (!rc && m->vk && o->membw && !strcmp(o->out, "md") && ti == o->n_threads - 1) device_roofline(m, &mi, tg_dt, n_tg, o->n_gen);
        if (probing) {
            if (!rc) {
                if (!nbw) bw[nbw++] = probe_read(&probe, 5);
                membw_note(o->threads[ti], &mi, bw, nbw, tg_dt, n_tg, o->n_gen);
                int8_ceiling(o->threads[ti], &mi);
            }
            bs_pool_free(probe.pool);
            probe_free(&probe);
        }
        bs_session_free(s);
    }
    if (!strcmp(o->out, "json") && !first) printf("\n]\n");
    else if (!strcmp(o->out, "md")) printf("\n%sbuild: %s (0)\n", notes, bitspark_version());
    free(logits);
    bs_model_free(m);
    return rc;
}

/* bench --spec: DSpark round costs, projections and a measured run (tools/spec_bench.c). */
static int bench_spec(int argc, char **argv) {
    bs_spec_bench_opts o = {.n_threads = BS_MIN(bs_cpu_count(), 64), .n_prompt = 64, .reps = 3, .n_gen = 64};
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_BENCH_SPEC, argc, argv, &i, &a)) return -1;
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_SPEC: break;
        case OPT_MODEL: o.model = a.s; break;
        case OPT_MODEL_DRAFT: o.drafter = a.s; break;
        case OPT_THREADS: o.n_threads = (int)a.n; break;
        case OPT_N_PROMPT: o.n_prompt = (int)a.n; break;
        case OPT_N_GEN: o.n_gen = (int)a.n; break;
        case OPT_REPS: o.reps = (int)a.n; break;
        case OPT_DEVICE: o.device = a.s; break;
        default: return bs_error("--spec: unexpected argument '%s'", a.s);
        }
    }
    cli_opts_end();
    if (!o.model || !o.drafter) return bs_error("--spec needs -m TARGET and -md DRAFTER");
    return bs_spec_bench(&o);
}

/* One option of bench -m / --matmul into o; 0 or -1 + bs_error. */
static int bench_apply(bench_opts *o, const cli_arg *a) {
    switch (a->opt ? a->opt->id : OPT_NONE) {
    case OPT_MODEL: o->model = a->s; break;
    case OPT_N_PROMPT: o->n_prompt = (int)a->n; break;
    case OPT_N_GEN: o->n_gen = (int)a->n; break;
    case OPT_REPS: o->reps = (int)BS_MIN(a->n, MAX_REPS); break;
    case OPT_MATMUL_MB: o->mm_mb = a->n; break;
    case OPT_THREADS: return parse_list(a->name, a->s, o->threads, &o->n_threads, 1, 1024);
    case OPT_MATMUL_ROWS: return parse_list(a->name, a->s, o->mm_rows, &o->n_mm_rows, 1, 4096);
    case OPT_VERIFY: return parse_list(a->name, a->s, o->verify, &o->n_verify, 1, 64);
    case OPT_BENCH_PARALLEL: return parse_list(a->name, a->s, o->parallel, &o->n_parallel, 1, MAX_PARALLEL);
    case OPT_OUTPUT: o->out = a->s; break;
    case OPT_MATMUL: o->matmul = 1; break;
    case OPT_MATMUL_TYPE: o->mm_type = a->s; break;
    case OPT_MATMUL_PACKED: o->mm_packed_only = 1; break;
    case OPT_NO_MEMBW: o->membw = 0; break;
    case OPT_BENCH_SAMPLED: o->sampled = 1; break;
    case OPT_NO_WARMUP: o->warmup = 0; break;
    case OPT_NO_MMAP: o->no_mmap = 1; break;
    case OPT_DEVICE: o->device = a->s; break;
    default: return bs_error("unexpected argument '%s' (see bitspark help bench)", a->s);
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--spec")) return bench_spec(argc, argv) ? cli_fail("bench --spec") : 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--mmproj")) return bench_vision(argc, argv) ? cli_fail("bench --mmproj") : 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--grammar") || !strcmp(argv[i], "--schema"))
            return bench_grammar(argc, argv) ? cli_fail("bench --grammar") : 0;
    bench_opts o = {.n_prompt = 512, .n_gen = 128, .reps = 5, .warmup = 1, .out = "md",
                    .mm_type = "q1_0", .mm_mb = 1024, .mm_rows = {1, 2, 4, 5, 8}, .n_mm_rows = 5, .membw = 1};
    o.threads[0] = BS_MIN(bs_cpu_count(), 64);
    o.n_threads = 1;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_BENCH, argc, argv, &i, &a) || bench_apply(&o, &a)) return cli_fail("bench");
    }
    cli_opts_end();
    if (!o.matmul && !o.model) {
        bs_error("need -m MODEL (or --matmul for the kernel benchmark)");
        return cli_fail("bench");
    }
    int rc = o.matmul ? bench_matmul(&o) : bench_model(&o);
    return rc ? cli_fail("bench") : 0;
}

void help_bench(void) {
    printf("usage: bitspark bench -m MODEL [options]       model speed, llama-bench style\n"
           "       bitspark bench --matmul [options]       kernel speed on synthetic weights\n"
           "       bitspark bench --mmproj FILE [options]  vision encoder time per image\n"
           "       bitspark bench --spec -m MODEL -md DRAFTER   DSpark round costs\n"
           "       bitspark bench --grammar|--schema FILE       token mask time\n"
           "\n"
           "\n"
           "BITSPARK_CPU=scalar|avx2|avx512 (aarch64: scalar|neon|dotprod|i8mm) lowers the kernel level. With AVX-512, Q1_0 matrices are\n"
           "repacked at load (16 rows interleaved; in place, or a copy whose file pages are dropped);\n"
           "BITSPARK_EXACT=1 keeps llama.cpp's layout and float order (bit-identical to it, slower).\n"
           "Prompts of 32+ rows use AMX int8 tiles where the CPU has them (the amx line says whether);\n"
           "BITSPARK_AMX=0 keeps them on AVX-512.\n\n");
    cli_opts_help(CMD_BENCH);
    printf("\n");
    cli_opts_help(CMD_BENCH_SPEC);
    printf("\n");
    cli_opts_help(CMD_BENCH_VISION);
    printf("\n");
    cli_opts_help(CMD_BENCH_GRAMMAR);
}
