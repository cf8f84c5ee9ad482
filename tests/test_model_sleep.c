/* test_model_sleep.c: bs_model_sleep / bs_model_wake (model/sleep.c), what `serve
 * --sleep-idle-seconds` uses to give the weights' memory back while idle. On the fixtures of each
 * weight family ($BS_FIXTURES: F32 read from the mapping, Q1_0 and Q2_0 repacked into their own
 * buffers, Q4_1 kept as the file has it), mapped and read into memory (--no-mmap):
 * - after sleep the weights' pages are no longer resident (mincore over the packed copies, or
 *   over the data section of a read-in file, whose pages read back as zeros);
 * - after wake the logits of a prompt are bit for bit those before sleeping;
 * - a file whose mtime changed while asleep is refused (still asleep, the error names it), and
 *   once it is the same file again the model wakes;
 * - sleep and wake twice are harmless;
 * - `test_model_sleep vulkan` (ctest test_vulkan_sleep, with the Vulkan tests' environment): on
 *   a Vulkan device (lavapipe here; none: skipped, 77) sleep gives the weights' device memory
 *   back, a session cannot start asleep, and after waking the logits are again bit for bit
 *   those before. */
#include "bitspark.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "model/qwen35.h"
#include "model/sleep.h"
#include "vulkan/backend.h"
#include "test.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const int32_t prompt[] = {957, 117, 851, 10, 87, 114, 276, 101};
enum { N_PROMPT = sizeof prompt / sizeof prompt[0] };

static float *logits_of(bs_model *m) {
    float *l = calloc((size_t)bs_model_n_vocab(m), sizeof *l);
    bs_session_params p = {.n_ctx = 64};
    bs_session *s = bs_session_new(m, &p);
    if (!s || bs_eval(s, prompt, N_PROMPT, BS_LOGITS_LAST, l, NULL)) {
        fprintf(stderr, "eval: %s\n", bitspark_last_error());
        free(l);
        l = NULL;
    }
    bs_session_free(s);
    return l;
}

/* Resident pages among the whole pages of [p, p + n) (mincore). */
static long resident_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1), hi = ((uintptr_t)p + n) & ~(pg - 1);
    if (hi <= lo) return 0;
    const size_t np = (hi - lo) / pg;
    unsigned char *v = malloc(np);
    long r = 0;
    if (!mincore((void *)lo, hi - lo, v))
        for (size_t i = 0; i < np; i++) r += v[i] & 1;
    free(v);
    return r;
}

/* Resident pages of what sleep releases: packed copies, transcoded weights, and the data section of a read-in file
 * (a mapping's file pages may stay in the page cache, which mincore reports). */
static long weights_resident(bs_model *m) {
    bs_weight **ws = malloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    long r = 0;
    for (int i = 0; i < n; i++)
        if (bs_model_transcoded(m, ws[i]))   /* a PTQ1_0 weight's PQ2_0 buffer */
            r += resident_pages(ws[i]->data, ws[i]->row_bytes * (size_t)ws[i]->ne1);
        else if (ws[i]->packed && ws[i]->packed != ws[i]->data)
            r += resident_pages(ws[i]->packed, ws[i]->row_bytes * (size_t)ws[i]->ne1);
    free(ws);
    const gguf_file *f = m->file;
    if (!f->mmapped) r += resident_pages((const uint8_t *)f->base + f->data_offset, f->file_size - f->data_offset);
    return r;
}

static void check_model(const char *path, const char *name, bool no_mmap) {
    bs_model_params mp = bs_model_default_params();
    mp.no_mmap = no_mmap;
    bs_model *m = bs_model_load(path, &mp);
    if (!m) { fprintf(stderr, "%s: %s\n", name, bitspark_last_error()); CHECK(m); return; }
    const size_t nv = (size_t)bs_model_n_vocab(m);
    float *before = logits_of(m);
    const long awake = weights_resident(m);
    CHECK(!bs_model_asleep(m));
    CHECKF(!bs_model_sleep(m) && bs_model_asleep(m), "%s: sleep: %s", name, bitspark_last_error());
    CHECK(!bs_model_sleep(m));   /* again: nothing to do */
    const long asleep = weights_resident(m);
    if (awake > 0) CHECKF(asleep == 0, "%s: %ld of %ld weight pages still resident asleep", name, asleep, awake);
    CHECKF(!bs_model_wake(m) && !bs_model_asleep(m), "%s: wake: %s", name, bitspark_last_error());
    CHECK(!bs_model_wake(m));    /* again: nothing to do */
    float *after = logits_of(m);
    CHECKF(before && after && !memcmp(before, after, nv * sizeof *before), "%s: logits after waking differ", name);
    free(after);
    /* twice more: the restored weights sleep and wake like the loaded ones */
    CHECK(!bs_model_sleep(m) && !bs_model_wake(m));
    after = logits_of(m);
    CHECKF(before && after && !memcmp(before, after, nv * sizeof *before), "%s: logits after a second sleep differ", name);
    printf("%s: %ld weight pages resident awake, %ld asleep; logits the same after waking\n", name, awake, asleep);
    free(before);
    free(after);
    bs_model_free(m);
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int rc = a && b ? 0 : -1;
    char buf[1 << 16];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, a)) > 0) rc = fwrite(buf, 1, n, b) == n ? 0 : -1;
    if (a) fclose(a);
    if (b && fclose(b)) rc = -1;
    return rc;
}

/* A file changed while asleep is not read: wake fails (still asleep) until it is the loaded one. */
static void check_changed(const char *path) {
    char copy[1024];
    const char *tmp = getenv("BS_TMP");
    snprintf(copy, sizeof copy, "%s/model_sleep_%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
    CHECK(!copy_file(path, copy));
    bs_model *m = bs_model_load(copy, NULL);
    CHECK(m);
    if (!m) return;
    float *before = logits_of(m);
    struct stat st;
    CHECK(!stat(copy, &st));
    CHECK(!bs_model_sleep(m));
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    ts[1].tv_sec += 7;
    CHECK(!utimensat(AT_FDCWD, copy, ts, 0));
    CHECK(bs_model_wake(m) != 0 && bs_model_asleep(m));
    CHECKF(strstr(bitspark_last_error(), "changed since it was loaded") != NULL, "error: %s", bitspark_last_error());
    ts[1] = st.st_mtim;   /* the same file again */
    CHECK(!utimensat(AT_FDCWD, copy, ts, 0));
    CHECKF(!bs_model_wake(m) && !bs_model_asleep(m), "wake: %s", bitspark_last_error());
    float *after = logits_of(m);
    CHECK(before && after && !memcmp(before, after, (size_t)bs_model_n_vocab(m) * sizeof *before));
    free(before);
    free(after);
    bs_model_free(m);
    unlink(copy);
}

/* 0, or 77 where there is no Vulkan device */
static int check_device(const char *path) {
    bs_model_params mp = bs_model_default_params();
    mp.device = "vulkan";
    bs_model *m = bs_model_load(path, &mp);
    if (!m) {
        printf("skipped: no Vulkan device (%s)\n", bitspark_last_error());
        return 77;
    }
    const size_t nv = (size_t)bs_model_n_vocab(m);
    /* a session the device refuses (its KV cache past one binding) does not count as one that
     * uses the weights: the model still sleeps */
    bs_session_params big = {.n_ctx = 1 << 22};
    bs_session *no = bs_session_new(m, &big);
    CHECKF(!no, "vulkan: a context of %d positions was accepted", big.n_ctx);
    bs_session_free(no);
    float *before = logits_of(m);
    const uint64_t held = bs_vk_bytes_held(m->vk);
    CHECKF(!bs_model_sleep(m), "vulkan: sleep: %s", bitspark_last_error());
    const uint64_t asleep = bs_vk_bytes_held(m->vk);
    CHECKF(asleep + 512 * 1024 < held, "vulkan: %llu bytes held awake, %llu asleep", (unsigned long long)held,
           (unsigned long long)asleep);
    bs_session_params sp = {.n_ctx = 64};
    bs_session *s = bs_session_new(m, &sp);
    CHECKF(!s, "vulkan: a session started on a sleeping model");
    bs_session_free(s);
    CHECKF(!bs_model_wake(m), "vulkan: wake: %s", bitspark_last_error());
    float *after = logits_of(m);
    CHECKF(before && after && !memcmp(before, after, nv * sizeof *before), "vulkan: logits after waking differ");
    printf("vulkan: %llu bytes of device memory awake, %llu asleep; logits the same after waking\n", (unsigned long long)held,
           (unsigned long long)asleep);
    free(before);
    free(after);
    bs_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    const char *fix = getenv("BS_FIXTURES");
    if (!fix) { fprintf(stderr, "BS_FIXTURES is not set\n"); return 1; }
    if (argc > 1 && !strcmp(argv[1], "vulkan")) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tiny-q1_0.gguf", fix);
        if (check_device(path) == 77) return 77;
        return test_summary("test_model_sleep vulkan");
    }
    const char *models[] = {"tiny-f32", "tiny-q1_0", "tiny-q2_0", "tiny-q4_1"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[1024], name[64];
        snprintf(path, sizeof path, "%s/%s.gguf", fix, models[i]);
        for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
            snprintf(name, sizeof name, "%s%s", models[i], no_mmap ? " (no mmap)" : "");
            check_model(path, name, no_mmap);
        }
    }
    /* PTQ1_0 runs transcoded to PQ2_0 in memory of its own: dropped asleep, made again awake */
    char path[1024], ptq[1024];
    const char *tmp = getenv("BS_TMP");
    snprintf(path, sizeof path, "%s/tiny-q2_0.gguf", fix);
    snprintf(ptq, sizeof ptq, "%s/sleep-ptq1_0.gguf", tmp ? tmp : ".");
    bs_quantize_params qp;
    bs_quantize_params_init(&qp);
    qp.type = qp.output_type = BS_PTQ1_0;
    qp.allow_requantize = true;
    CHECKF(!bs_quantize_file(path, ptq, &qp), "quantizing to ptq1_0: %s", bitspark_last_error());
    bs_quantize_params_free(&qp);
    for (int no_mmap = 0; no_mmap < 2; no_mmap++) check_model(ptq, no_mmap ? "tiny-ptq1_0 (no mmap)" : "tiny-ptq1_0", no_mmap);
    snprintf(path, sizeof path, "%s/tiny-q1_0.gguf", fix);
    check_changed(path);
    return test_summary("test_model_sleep");
}
