/* atomic_file.c: temporary + fsync + rename writers (see atomic_file.h). */
#include "io/atomic_file.h"

#include "io/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct bs_afile {
    char *path, *tmp;              /* tmp NULL: written in place (a device, FIFO or a descriptor) */
    char *target;                  /* where the rename goes when path is a symbolic link, else NULL */
    FILE *fp;
    int slot;                      /* index in the signal-cleanup table, -1 if it was full */
};

/* Temporaries the signal handler removes. A handler may only call async-signal-safe functions,
 * so the table is fixed: a slot's name is written before `used` is set and cleared after. */
#define AF_SLOTS 16
#define AF_NAME 4096
static struct { atomic_int used; char name[AF_NAME]; } af_table[AF_SLOTS];
static pthread_mutex_t af_lock = PTHREAD_MUTEX_INITIALIZER;
static bool af_handlers;

static void af_on_signal(int sig) {
    for (int i = 0; i < AF_SLOTS; i++)
        if (atomic_load(&af_table[i].used)) unlink(af_table[i].name);
    signal(sig, SIG_DFL);          /* then die of the same signal, as the default would */
    raise(sig);
}

/* Install the cleanup handler for the signals a user sends to stop a tool (Ctrl-C, kill,
 * a closed terminal), only where the program kept the default action: a program with its own
 * handler (the server) decides itself how it stops. */
static void af_install_handlers(void) {
    if (af_handlers) return;
    af_handlers = true;
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = af_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static int af_register(const char *tmp) {
    if (strlen(tmp) >= AF_NAME) return -1;
    pthread_mutex_lock(&af_lock);
    af_install_handlers();
    int slot = -1;
    for (int i = 0; i < AF_SLOTS && slot < 0; i++)
        if (!atomic_load(&af_table[i].used)) {
            memcpy(af_table[i].name, tmp, strlen(tmp) + 1);
            atomic_store(&af_table[i].used, 1);
            slot = i;
        }
    pthread_mutex_unlock(&af_lock);
    return slot;
}

static void af_unregister(int slot) {
    if (slot >= 0) atomic_store(&af_table[slot].used, 0);
}

static char *dir_of(const char *path) {
    char *copy = bs_xstrdup(path);
    char *d = bs_xstrdup(dirname(copy));
    free(copy);
    return d;
}

/* An afile written in place on descriptor fd (no temporary, no rename). */
static bs_afile *in_place(const char *path, int fd) {
    bs_afile *a = bs_xcalloc(1, sizeof *a);
    a->path = bs_xstrdup(path);
    a->slot = -1;
    if (!(a->fp = fdopen(fd, "wb"))) {
        bs_error("%s: %s", path, strerror(errno));
        close(fd);
        free(a->path);
        free(a);
        return NULL;
    }
    setvbuf(a->fp, NULL, _IOFBF, 1 << 20);
    return a;
}

static bs_afile *open_temporary(const char *path);

/* An output that exists and is not a regular file (/dev/null, a terminal, a FIFO) is written in
 * place: a rename would replace the node itself (as root, /dev/null for every program on the
 * machine). A directory is refused; a node swapped for a regular file after the stat goes the
 * temporary's way after all. */
static bs_afile *open_in_place(const char *path, const struct stat *st) {
    if (S_ISDIR(st->st_mode)) {
        bs_error("%s: is a directory", path);
        return NULL;
    }
    const int fd = open(path, O_WRONLY | O_CLOEXEC);
    struct stat now;
    if (fd < 0) {
        bs_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &now) == 0 && S_ISREG(now.st_mode)) {
        close(fd);
        return open_temporary(path);
    }
    return in_place(path, fd);
}

/* One hop along a symbolic link: cur (PATH_MAX bytes) becomes what it points at, a relative
 * target taken from the link's directory. -1 when cur is no link or the path is too long. */
static int follow(char *cur) {
    char link[PATH_MAX], joined[PATH_MAX];
    const ssize_t k = readlink(cur, link, sizeof link - 1);
    if (k < 0) return -1;
    link[k] = 0;
    char *copy = bs_xstrdup(cur);
    const int n = link[0] == '/' ? snprintf(joined, sizeof joined, "%s", link)
                                 : snprintf(joined, sizeof joined, "%s/%s", dirname(copy), link);
    free(copy);
    if (n >= (int)sizeof joined) return -1;
    memcpy(cur, joined, (size_t)n + 1);
    return 0;
}

/* The descriptor a path names through /proc/self/fd (/dev/stdout, /dev/fd/N, /proc/self/fd/N),
 * following symbolic links to get there; -1 when it names none. Such an output is the stream
 * the shell set up (`>> log`, `2> err`): it is written there, at its offset, never replaced. */
static int fd_named(const char *path) {
    char cur[PATH_MAX], fds[64];
    snprintf(fds, sizeof fds, "/proc/%d/fd", (int)getpid());
    if (strlen(path) >= sizeof cur) return -1;
    snprintf(cur, sizeof cur, "%s", path);
    for (int hop = 0; hop < 16; hop++) {
        char *copy = bs_xstrdup(cur), *dir = realpath(dirname(copy), NULL);
        const bool in_fds = dir && !strcmp(dir, fds);
        free(copy), free(dir);
        if (in_fds) {
            copy = bs_xstrdup(cur);
            const char *name = basename(copy);
            char *end;
            const long n = strtol(name, &end, 10);
            const int fd = *name && !*end && n >= 0 && n < INT_MAX ? (int)n : -1;
            free(copy);
            return fd;
        }
        if (follow(cur)) return -1;
    }
    return -1;
}

/* Where a symbolic link leads (dangling too: the file it would create), or NULL for a path
 * that is not one: the file is replaced there and the link kept, as cp and > do. */
static char *link_target(const char *path) {
    struct stat lst;
    if (lstat(path, &lst) != 0 || !S_ISLNK(lst.st_mode)) return NULL;
    char *real = realpath(path, NULL);
    if (real) return real;
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    for (int hop = 0; hop < 40; hop++) {
        if (lstat(cur, &lst) != 0 || !S_ISLNK(lst.st_mode)) return bs_xstrdup(cur);
        if (follow(cur)) return NULL;
    }
    return NULL;   /* a loop: the link is replaced, as before */
}

bs_afile *bs_afile_open(const char *path) {
    const int fd = fd_named(path);
    if (fd >= 0) {
        const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dup < 0) {
            bs_error("%s: %s", path, strerror(errno));
            return NULL;
        }
        return in_place(path, dup);
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return open_in_place(path, &st);
    char *dest = link_target(path);
    bs_afile *a = open_temporary(dest ? dest : path);
    if (!a && dest) bs_error_prefix("%s: ", path);   /* (the message names the path the user gave) */
    if (a && dest) {
        free(a->path);
        a->path = bs_xstrdup(path);
        a->target = dest;
        dest = NULL;
    }
    free(dest);
    return a;
}

static bs_afile *open_temporary(const char *path) {
    char *copy = bs_xstrdup(path);
    const char *base = basename(copy);
    char *dir = dir_of(path);
    size_t cap = strlen(dir) + strlen(base) + 64;
    char *tmp = bs_xmalloc(cap);
    /* O_EXCL with a fresh name per try rather than mkstemp: mkstemp makes 0600 files, and the
     * result should get the usual 0666 & ~umask like any file a tool creates. */
    static atomic_uint counter;
    int fd = -1;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(tmp, cap, "%s/.%s.tmp-%ld-%u-%lx", dir, base, (long)getpid(),
                 atomic_fetch_add(&counter, 1), (unsigned long)ts.tv_nsec);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    free(copy);
    free(dir);
    if (fd < 0) {
        bs_error("%s: %s", path, strerror(errno));
        free(tmp);
        return NULL;
    }
    bs_afile *a = bs_xcalloc(1, sizeof *a);
    a->path = bs_xstrdup(path);
    a->tmp = tmp;
    a->slot = af_register(tmp);
    a->fp = fdopen(fd, "wb");
    if (!a->fp) {
        bs_error("%s: %s", path, strerror(errno));
        close(fd);
        a->fp = NULL;
        bs_afile_abort(a);
        return NULL;
    }
    setvbuf(a->fp, NULL, _IOFBF, 1 << 20);
    return a;
}

FILE *bs_afile_fp(bs_afile *a) { return a->fp; }

static void af_free(bs_afile *a) {
    if (a->slot >= 0) af_unregister(a->slot);
    free(a->path);
    free(a->tmp);
    free(a->target);
    free(a);
}

void bs_afile_abort(bs_afile *a) {
    if (!a) return;
    if (a->fp) fclose(a->fp);
    if (a->tmp) unlink(a->tmp);
    af_free(a);
}

/* The rename is durable only once the directory entry is on disk too. Filesystems that
 * cannot fsync a directory (EINVAL) have nothing more to do. */
static int fsync_dir(const char *path) {
    char *dir = dir_of(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL) rc = -1;
        close(fd);
    }
    free(dir);
    return rc;
}

int bs_afile_commit(bs_afile *a) {
    int err = 0;
    if (fflush(a->fp) != 0) err = errno;
    if (!err && ferror(a->fp)) err = EIO;
    if (!err && fsync(fileno(a->fp)) != 0 && errno != EINVAL) err = errno;
    if (fclose(a->fp) != 0 && !err) err = errno;
    a->fp = NULL;
    const char *dest = a->target ? a->target : a->path;
    if (!err && a->tmp && rename(a->tmp, dest) != 0) err = errno;
    if (err) {
        bs_error("%s: %s", a->path, strerror(err));
        if (a->tmp) unlink(a->tmp);
        af_free(a);
        return -1;
    }
    if (!a->tmp) {   /* written in place: no rename, no directory entry */
        af_free(a);
        return 0;
    }
    af_unregister(a->slot);   /* renamed: nothing left for the handler to remove */
    a->slot = -1;
    int rc = fsync_dir(dest) ? bs_error("%s: syncing its directory: %s", a->path, strerror(errno)) : 0;
    af_free(a);
    return rc;
}

int bs_write_file_atomic(const char *path, const void *data, size_t n) {
    bs_afile *a = bs_afile_open(path);
    if (!a) return -1;
    if (n && fwrite(data, 1, n, a->fp) != n) {
        int e = errno;
        bs_afile_abort(a);
        return bs_error("%s: %s", path, strerror(e ? e : EIO));
    }
    return bs_afile_commit(a);
}

static int refuse(const char *out, const char *in) {
    return bs_error("refusing to write %s: it is the input %s (choose another output name)", out, in);
}

/* An input directory (a safetensors checkpoint, a PEFT adapter) holds the input files. */
static int check_dir(const char *out, const struct stat *so, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        struct stat si;
        if (fstatat(dirfd(d), e->d_name, &si, 0) == 0 && S_ISREG(si.st_mode) &&
            si.st_dev == so->st_dev && si.st_ino == so->st_ino) {
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *full = bs_xmalloc(n);
            snprintf(full, n, "%s/%s", dir, e->d_name);
            rc = refuse(out, full);
            free(full);
        }
    }
    closedir(d);
    return rc;
}

int bs_check_not_input(const char *out, const char *const *inputs, int n_inputs) {
    struct stat so;
    if (stat(out, &so) != 0) return 0;     /* a new file cannot be an input */
    for (int i = 0; i < n_inputs; i++) {
        struct stat si;
        if (!inputs[i] || stat(inputs[i], &si) != 0) continue;
        if (S_ISDIR(si.st_mode)) {
            if (check_dir(out, &so, inputs[i])) return -1;
        } else if (si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            return refuse(out, inputs[i]);
        }
    }
    return 0;
}

/* path's directory resolved (symlinks, "..", other spellings) and its last component, as one
 * string; NULL where the directory does not resolve. */
static char *canonical(const char *path) {
    char *dir = dir_of(path), *real = realpath(dir, NULL), *copy = bs_xstrdup(path);
    const char *base = basename(copy);
    char *full = NULL;
    if (real) {
        const size_t n = strlen(real) + strlen(base) + 2;
        full = bs_xmalloc(n);
        snprintf(full, n, "%s/%s", real, base);
    }
    free(dir);
    free(real);
    free(copy);
    return full;
}

static int outputs_differ(const char *a, const char *b) {
    struct stat sa, sb;
    bool same;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) {   /* (a device twice, /dev/null: nothing to lose) */
        same = sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISCHR(sa.st_mode);
    } else {
        char *ca = canonical(a), *cb = canonical(b);
        same = ca && cb ? !strcmp(ca, cb) : !strcmp(a, b);
        free(ca);
        free(cb);
    }
    return same ? bs_error("refusing to write %s and %s: they are the same file (choose two names)", a, b) : 0;
}

int bs_check_outputs(const char *a, const char *b, const char *const *inputs, int n_inputs) {
    if (bs_check_not_input(a, inputs, n_inputs) || (b && bs_check_not_input(b, inputs, n_inputs))) return -1;
    return b ? outputs_differ(a, b) : 0;
}

/* --- bs_aout ------------------------------------------------------------------------------- */

int bs_aout_open(bs_aout *o, const char *path) {
    *o = (bs_aout){0};
    if (!(o->af = bs_afile_open(path))) return -1;
    o->path = bs_xstrdup(path);
    o->fp = bs_afile_fp(o->af);
    return 0;
}

void bs_aout_fail(bs_aout *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bs_latch_error(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
}

int bs_aout_close(bs_aout *o) {
    int rc;
    if (o->err[0]) {
        bs_afile_abort(o->af);
        rc = bs_error("%s: %s", o->path, o->err);
    } else {
        rc = bs_afile_commit(o->af);
    }
    free(o->path);
    *o = (bs_aout){0};
    return rc;
}

void bs_aout_abort(bs_aout *o) {
    bs_afile_abort(o->af);
    free(o->path);
    *o = (bs_aout){0};
}
