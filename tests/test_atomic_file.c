/* test_atomic_file: the crash-safe writer (io/atomic_file.h) and the "output is an input" check.
 *  - commit: the new content under the final name, mode 0666 & ~umask, no temporary left;
 *  - abort, a write error (RLIMIT_FSIZE: EFBIG) and SIGTERM / SIGINT in the middle of a write
 *    all keep the previous file byte for byte and leave no temporary behind;
 *  - bs_check_not_input refuses the same path, another spelling, a symlink, a hard link and a
 *    file inside an input directory, and accepts a distinct or new file;
 *  - lora merge refuses -o BASE and -o ADAPTER (both stay intact), quantize refuses -o INPUT;
 *  - an output that is not a regular file is written in place and stays what it is (/dev/null a
 *    device, a FIFO a FIFO: a rename would have replaced the node); /dev/stdout on a file opened
 *    for appending adds to it; a symbolic link (dangling too) stays a link to the file it names,
 *    which gets the content; a directory is refused. */
#include "test.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "formats/quantize.h"
#include "io/atomic_file.h"
#include "io/util.h"
#include "model/lora.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[1024];

static char *at(const char *name) {     /* one buffer per call: paths live until exit */
    static char buf[64][1200];
    static int k;
    char *b = buf[k++ % 64];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

static int temporaries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

static char *slurp(const char *p) {
    size_t n;
    char *s = bs_read_file(p, &n);
    return s ? s : bs_xstrdup("<missing>");
}

static void put(const char *p, const char *s) {
    FILE *f = fopen(p, "w");
    fputs(s, f);
    fclose(f);
}

static void test_commit_abort(void) {
    const char *p = at("a.txt");
    CHECK(bs_write_file_atomic(p, "one\n", 4) == 0);
    char *s = slurp(p);
    CHECK_STR(s, "one\n");
    free(s);
    mode_t um = umask(022);
    umask(um);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == (0666 & ~um));
    bs_afile *a = bs_afile_open(p);
    CHECK(a && temporaries() == 1);
    fputs("two, never committed\n", bs_afile_fp(a));
    bs_afile_abort(a);
    s = slurp(p);
    CHECK_STR(s, "one\n");
    free(s);
    CHECK_EQ_INT(temporaries(), 0);
    CHECK(bs_afile_open("/nonexistent-dir/x") == NULL && strstr(bs_last_error(), "No such file"));
}

/* In a child: write a big buffer under a 64 KiB file-size limit; the write fails with EFBIG. */
static void test_write_error(void) {
    const char *p = at("b.txt");
    put(p, "old\n");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1 << 16, 1 << 16};
        setrlimit(RLIMIT_FSIZE, &rl);
        size_t n = 4 << 20;
        char *buf = calloc(1, n);
        int rc = bs_write_file_atomic(p, buf, n);
        _exit(rc == -1 && strstr(bs_last_error(), "File too large") ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *s = slurp(p);
    CHECK_STR(s, "old\n");
    free(s);
    CHECK_EQ_INT(temporaries(), 0);
}

static void test_signal(int sig) {
    const char *p = at("c.txt");
    put(p, "old\n");
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        bs_afile *a = bs_afile_open(p);
        if (!a) _exit(2);
        fputs("half written", bs_afile_fp(a));
        fflush(bs_afile_fp(a));
        if (write(ready[1], "x", 1) != 1) _exit(3);
        pause();
        _exit(4);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK_EQ_INT(temporaries(), 1);
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == sig, "status %x", status);
    char *s = slurp(p);
    CHECK_STR(s, "old\n");
    free(s);
    CHECK_EQ_INT(temporaries(), 0);
    close(ready[0]);
    close(ready[1]);
}

static void test_same_file(void) {
    const char *in = at("in.bin"), *other = at("other.bin");
    put(in, "input");
    put(other, "other");
    const char *inputs[] = {in};
    char spelled[1300];
    snprintf(spelled, sizeof spelled, "%s/./in.bin", dir);
    unlink(at("link.bin"));
    unlink(at("hard.bin"));
    CHECK(symlink(in, at("link.bin")) == 0 && link(in, at("hard.bin")) == 0);
    CHECK(bs_check_not_input(in, inputs, 1) == -1 && strstr(bs_last_error(), "refusing to write"));
    CHECK(bs_check_not_input(spelled, inputs, 1) == -1);
    CHECK(bs_check_not_input(at("link.bin"), inputs, 1) == -1);
    CHECK(bs_check_not_input(at("hard.bin"), inputs, 1) == -1);
    CHECK(bs_check_not_input(other, inputs, 1) == 0);
    CHECK(bs_check_not_input(at("new.bin"), inputs, 1) == 0);
    const char *dirs[] = {NULL, dir};
    CHECK(bs_check_not_input(other, dirs, 2) == -1);
}

/* A one-pair adapter on blk.0.attn_qkv.weight of the tiny model. */
static int write_adapter(const char *path, const gguf_file *base) {
    const gguf_tensor *x = gguf_find_tensor(base, "blk.0.attn_qkv.weight");
    if (!x) return -1;
    int64_t nea[2] = {x->ne[0], 2}, neb[2] = {2, x->ne[1]};
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_str(w, "general.type", "adapter");
    gguf_w_set_str(w, "adapter.type", "lora");
    gguf_w_set_f32(w, "adapter.lora.alpha", 2.0f);
    gguf_w_add_tensor(w, "blk.0.attn_qkv.weight.lora_a", BS_F32, 2, nea);
    gguf_w_add_tensor(w, "blk.0.attn_qkv.weight.lora_b", BS_F32, 2, neb);
    size_t na = (size_t)(2 * x->ne[0]), nb = (size_t)(2 * x->ne[1]);
    float *v = calloc(na > nb ? na : nb, sizeof(float));
    for (size_t i = 0; i < (na > nb ? na : nb); i++) v[i] = 0.01f * (float)(i % 7);
    gguf_w_write(w, v, na * sizeof(float));
    gguf_w_write(w, v, nb * sizeof(float));
    free(v);
    return gguf_w_close(w);
}

static int same_bytes(const char *a, const char *b) {
    size_t na, nb;
    char *x = bs_read_file(a, &na), *y = bs_read_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void copy(const char *from, const char *to) {
    size_t n;
    char *s = bs_read_file(from, &n);
    CHECK(s && bs_write_file_atomic(to, s, n) == 0);
    free(s);
}

static void test_tools(const char *fx) {
    char src[1200];
    snprintf(src, sizeof src, "%s/tiny-f32.gguf", fx);
    const char *base = at("base.gguf"), *ad = at("ad.gguf"), *keep = at("base.keep"), *adkeep = at("ad.keep");
    copy(src, base);
    copy(src, keep);
    gguf_file *bf = gguf_open(base, 0);
    CHECK(bf && write_adapter(ad, bf) == 0);
    copy(ad, adkeep);
    bs_lora *l = bf ? bs_lora_load(ad, bf) : NULL;
    CHECKF(l != NULL, "%s", bs_last_error());
    if (l) {
        const bs_lora *ls[] = {l};
        const float sc[] = {1.0f};
        bs_lora_merge_params p = {.base = base, .out = base, .loras = ls, .scales = sc, .n_loras = 1,
                                  .type = BS_TYPE_INVALID, .quiet = true};
        bs_lora_merge_stats st;
        CHECK(bs_lora_merge(&p, &st) == -1 && strstr(bs_last_error(), "refusing to write"));
        p.out = ad;
        CHECK(bs_lora_merge(&p, &st) == -1 && strstr(bs_last_error(), "it is the input"));
        p.out = at("merged.gguf");
        CHECKF(bs_lora_merge(&p, &st) == 0, "%s", bs_last_error());
        bs_lora_free(l);
    }
    gguf_close(bf);
    CHECK(same_bytes(base, keep) && same_bytes(ad, adkeep));
    bs_quantize_params q;
    bs_quantize_params_init(&q);
    q.type = BS_Q8_0;
    char spelled[1300];
    snprintf(spelled, sizeof spelled, "%s/./base.gguf", dir);
    CHECK(bs_quantize_file(base, spelled, &q) == -1 && strstr(bs_last_error(), "refusing to write"));
    CHECK(same_bytes(base, keep));
    CHECK_EQ_INT(temporaries(), 0);
}

static void test_special(void) {
    struct stat st;
    /* /dev/null: written, and still the device (as root the rename would have replaced it) */
    if (stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) {
        CHECK(bs_write_file_atomic("/dev/null", "gone\n", 5) == 0);
        CHECKF(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a character device");
    }
    /* a FIFO: a reader gets the bytes, the FIFO stays */
    const char *fifo = at("fifo"), *got = at("fifo.got");
    CHECK(mkfifo(fifo, 0600) == 0);
    const pid_t pid = fork();
    if (pid == 0) {
        char cmd[2600];
        snprintf(cmd, sizeof cmd, "cat '%s' > '%s'", fifo, got);
        _exit(system(cmd) == 0 ? 0 : 1);
    }
    CHECK(bs_write_file_atomic(fifo, "through\n", 8) == 0);
    int status = 0;
    waitpid(pid, &status, 0);
    char *s = slurp(got);
    CHECK_STR(s, "through\n");
    free(s);
    CHECKF(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO was replaced");
    /* a symbolic link: the file it names is replaced, the link kept */
    const char *real = at("real.txt"), *link = at("link.txt");
    put(real, "old\n");
    CHECK(symlink(real, link) == 0);
    CHECK(bs_write_file_atomic(link, "new\n", 4) == 0);
    s = slurp(real);
    CHECK_STR(s, "new\n");
    free(s);
    CHECKF(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the symbolic link was replaced by a file");
    /* a dangling link: the file it names is created, the link kept */
    const char *dangling = at("dangling.txt"), *made = at("made.txt");
    CHECK(symlink(made, dangling) == 0);
    CHECK(bs_write_file_atomic(dangling, "made\n", 5) == 0);
    s = slurp(made);
    CHECK_STR(s, "made\n");
    free(s);
    CHECKF(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode), "the dangling link was replaced by a file");
    /* /dev/stdout while stdout is a file opened for appending (`>> log`): written there, at the
     * end, the file's earlier content kept (a rename would have replaced the file) */
    const char *log = at("stdout.log");
    put(log, "earlier\n");
    fflush(stdout);
    const int saved = dup(1), lf = open(log, O_WRONLY | O_APPEND);
    CHECK(saved >= 0 && lf >= 0 && dup2(lf, 1) == 1);
    const int rc = bs_write_file_atomic("/dev/stdout", "later\n", 6);
    dup2(saved, 1);
    close(saved);
    close(lf);
    CHECK(rc == 0);
    s = slurp(log);
    CHECK_STR(s, "earlier\nlater\n");
    free(s);
    CHECK_EQ_INT(temporaries(), 0);
    /* a directory */
    CHECK(bs_write_file_atomic(dir, "x", 1) == -1 && strstr(bs_last_error(), "is a directory"));
}

int main(void) {
    const char *tmp = getenv("BS_TMP"), *fx = getenv("BS_FIXTURES");
    snprintf(dir, sizeof dir, "%s/atomic.%d", tmp ? tmp : "/tmp", (int)getpid());
    mkdir(dir, 0777);
    test_commit_abort();
    test_write_error();
    test_signal(SIGTERM);
    test_signal(SIGINT);
    test_same_file();
    test_special();
    if (fx) test_tools(fx);
    else printf("BS_FIXTURES not set: the lora merge / quantize checks are skipped\n");
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_atomic_file");
}
