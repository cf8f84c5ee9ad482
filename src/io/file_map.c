/* file_map.c: see file_map.h. */
#include "io/file_map.h"
#include "io/progress.h"
#include "io/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads in 64 MiB pieces so a big model shows a progress bar on a terminal (no summary line:
 * the loaders report their own). */
static int read_all(int fd, void *buf, size_t n) {
    size_t done = 0;
    bs_progress pr;
    bs_progress_begin(&pr, "load", n);
    if (n < (64u << 20)) pr.bar = false;
    while (done < n) {
        size_t want = n - done > (64u << 20) ? (64u << 20) : n - done;
        ssize_t r = read(fd, (char *)buf + done, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { bs_progress_clear(&pr); return bs_error("read failed: %s", strerror(errno)); }
        if (r == 0) { bs_progress_clear(&pr); return bs_error("file shrank while reading"); }
        done += (size_t)r;
        bs_progress_add(&pr, (uint64_t)r);
    }
    bs_progress_clear(&pr);
    return 0;
}

static int map_fd(bs_file_map *m, int fd, bool use_mmap) {
    struct stat st;
    if (fstat(fd, &st) != 0) return bs_error("%s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return bs_error("not a regular file");
    if (st.st_size == 0) return bs_error("empty file");
    if ((uint64_t)st.st_size > SIZE_MAX / 2) return bs_error("file too large");
    m->size = (size_t)st.st_size;
    if (use_mmap) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) return bs_error("mmap failed: %s", strerror(errno));
        m->base = p;
        m->mmapped = true;
        return 0;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, m->size) != 0)
        return bs_error("cannot allocate %zu bytes to read the file", m->size);
    madvise(p, m->size, MADV_HUGEPAGE);
    m->base = p;
    return read_all(fd, p, m->size);
}

int bs_file_map_open(bs_file_map *m, const char *path, bool use_mmap) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bs_error("%s: %s", path, strerror(errno));
    int rc = map_fd(m, fd, use_mmap);
    close(fd);
    if (rc) {
        bs_file_map_close(m);
        return bs_error_prefix("%s: ", path);
    }
    return 0;
}

void bs_file_map_willneed(const bs_file_map *m) {
    if (m->mmapped && m->base) madvise(m->base, m->size, MADV_WILLNEED);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels refuse it and pages are touched */
#endif

void bs_file_map_prefault(const bs_file_map *m) {
    if (!m->mmapped || !m->base) return;
    if (madvise(m->base, m->size, MADV_POPULATE_READ) == 0) return;
    volatile const uint8_t *p = m->base;
    uint8_t acc = 0;
    for (size_t i = 0; i < m->size; i += 4096) acc ^= p[i];
    (void)acc;
}

void bs_file_map_close(bs_file_map *m) {
    if (m->base) {
        if (m->mmapped) munmap(m->base, m->size);
        else free(m->base);
    }
    memset(m, 0, sizeof *m);
}

int bs_file_identity(const char *path, uint64_t id[4]) {
    struct stat sb;
    if (stat(path, &sb)) return bs_error("%s: %s", path, strerror(errno));
    id[0] = (uint64_t)sb.st_dev;
    id[1] = (uint64_t)sb.st_ino;
    id[2] = (uint64_t)sb.st_size;
    id[3] = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
    return 0;
}
