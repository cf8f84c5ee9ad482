/* sleep.c: give a loaded model's weight memory back to the system while it is idle and restore
 * it on demand (sleep.h). The memory is released with madvise(MADV_DONTNEED) rather than
 * munmap / free, so every pointer into it stays valid: a drafter borrows the target's embedding
 * and LM head by copying the bs_weight (packed pointer included), and the tokenizer and chat
 * template were read from the file's metadata. Dropped pages of a mapping come back from the
 * file when read; anonymous pages (a read-in file, a packed copy) come back zeroed, so wake
 * reads them from the file again and repacks them, which gives the same bytes. */
#include "model/sleep.h"
#include "model/device.h"
#include "io/file_map.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The whole pages inside [p, p + n): the partial pages at either end are kept. */
static void drop_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1), hi = ((uintptr_t)p + n) & ~(pg - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static bool packed_copy(const bs_weight *w) { return w->packed && w->packed != w->data; }

int bs_model_sleep(bs_model *m) {
    if (!m->layers) return bs_error("the model has no weights loaded");
    if (m->asleep) return 0;
    if (bs_device_sleep(m)) return -1;   /* on a device: its buffers first (nothing changed on failure) */
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    for (int i = 0; i < n; i++)
        if (packed_copy(ws[i])) drop_pages(ws[i]->packed, ws[i]->row_bytes * (size_t)ws[i]->ne1);
    for (int i = 0; i < m->n_transcoded; i++) {   /* PTQ1_0 as PQ2_0: made again on waking */
        const bs_weight *w = m->transcoded[i].w;
        drop_pages(w->data, w->row_bytes * (size_t)w->ne1);
    }
    free(ws);
    const gguf_file *f = m->file;
    drop_pages((const uint8_t *)f->base + f->data_offset, (size_t)(f->file_size - f->data_offset));
    m->asleep = true;
    return 0;
}

static int read_fully(int fd, void *dst, size_t n, off_t off) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (uint8_t *)dst + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Bring the packed weights back: a read-in file is read again and its weights repacked where
 * they lie; packed copies of a mapped file are read and packed into their own buffers. */
static int restore(bs_model *m, int fd, bs_pool *pool) {
    const gguf_file *f = m->file;
    if (!f->mmapped &&
        read_fully(fd, (uint8_t *)f->base + f->data_offset, (size_t)(f->file_size - f->data_offset),
                   (off_t)f->data_offset))
        return bs_error("%s: reading the weights again: %s", f->path, errno ? strerror(errno) : "file shrank");
    bs_weight **ws = bs_xmalloc(sizeof *ws * (size_t)bs_model_max_weights(m));
    const int n = bs_model_weights(m, ws);
    int rc = 0;
    for (int i = 0; i < m->n_transcoded && !rc; i++) rc = bs_model_transcode(m, i, pool);
    for (int i = 0; i < n && !rc; i++) {
        bs_weight *w = ws[i];
        if (!w->packed || bs_model_transcoded(m, w)) continue;
        if (packed_copy(w)) {
            rc = bs_model_pack_from_file(w, fd, f, w->packed, pool);
            continue;
        }
        w->packed = NULL;   /* packed in place: the bytes are the file's again */
        w->pack_kind = 0;   /* none (matmul.h) */
        rc = bs_weight_pack_in_place(w, pool);
    }
    free(ws);
    return rc;
}

int bs_model_wake(bs_model *m) {
    if (!m->asleep) return 0;
    uint64_t id[4];
    if (bs_file_identity(m->file->path, id)) return -1;
    if (memcmp(id, m->file_id, sizeof id))
        return bs_error("%s changed since it was loaded; restart to load it again", m->file->path);
    const int fd = open(m->file->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bs_error("%s: %s", m->file->path, strerror(errno));
    bs_pool *pool = bs_pool_new(0);
    errno = 0;
    const int rc = restore(m, fd, pool);
    bs_pool_free(pool);
    close(fd);
    if (rc || bs_device_wake(m)) return -1;
    m->asleep = false;
    return 0;
}

bool bs_model_asleep(const bs_model *m) { return m->asleep; }
