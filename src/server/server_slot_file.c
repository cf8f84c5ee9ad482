/* server_slot_file.c: the scheduler's side of a slot action (server_slots.c): save a slot's
 * tokens, adapter scales and session state to a file atomically, restore them, or erase the
 * slot. Runs on the scheduler thread, on an idle slot. */
#include "server/server_slots.h"
#include "model/session.h"
#include "io/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOT_MAGIC "BSSLOT1\n"

typedef struct slot_header {
    char magic[8];
    uint32_t n_vocab, n_tokens, n_lora, pad;
    float lora[SRV_MAX_LORA];
    uint64_t state_len;
} slot_header;

static int op_fail(srv_slot_op *op, int status, const char *fmt, const char *arg) {
    op->status = status;
    snprintf(op->err, sizeof op->err, fmt, arg);
    return -1;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* temp file in the same directory, fsync, rename over the name, fsync the directory */
static int write_atomic(srv_slot_op *op, const char *dir, const slot_header *h, const int32_t *toks,
                        const void *state) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, op->filename);
    int fd = mkstemp(tmp);
    if (fd < 0) return op_fail(op, 500, "cannot create a file in the slot save directory: %s", strerror(errno));
    int bad = write_all(fd, h, sizeof *h) || write_all(fd, toks, (size_t)h->n_tokens * sizeof *toks) ||
              write_all(fd, state, h->state_len) || fsync(fd);
    const int e = errno;
    bad |= close(fd) != 0;
    if (bad || rename(tmp, op->path)) {
        unlink(tmp);
        return op_fail(op, 500, "writing the slot file failed: %s", strerror(bad ? e : errno));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {   /* the rename itself survives a crash */
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

static int slot_save(srv_slot_op *op, const char *dir, bs_gen *g, const float *lora) {
    int n = 0;
    const int32_t *toks = bs_gen_cached(g, &n);
    bs_session *sess = bs_gen_session(g);
    slot_header h = {.n_vocab = (uint32_t)op->n_vocab, .n_tokens = (uint32_t)n, .n_lora = SRV_MAX_LORA};
    memcpy(h.magic, SLOT_MAGIC, 8);
    memcpy(h.lora, lora, sizeof h.lora);
    h.state_len = bs_session_state_size(sess);
    void *state = malloc(h.state_len);
    if (!state) return op_fail(op, 500, "out of memory for the slot's state (%s)", "save");
    int rc = bs_session_state_save(sess, state, h.state_len)
                 ? op_fail(op, 500, "saving the slot's state: %s", bs_last_error())
                 : write_atomic(op, dir, &h, toks, state);
    free(state);
    if (!rc) {
        op->n_tokens = n;
        op->n_bytes = sizeof h + (size_t)n * sizeof *toks + h.state_len;
    }
    return rc;
}

/* Read exactly n bytes at the file's current offset. */
static int read_exact(int fd, void *p, size_t n) {
    for (size_t got = 0; got < n;) {
        const ssize_t k = read(fd, (char *)p + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* The header's sizes against the file and this slot, each step without overflow: its tokens fit
 * the context, its state is exactly what a session of that many positions saves (so a lying
 * header is refused before anything past it is read, and nothing larger is ever read). */
static int check_header(srv_slot_op *op, const slot_header *h, uint64_t size, bs_session *sess) {
    const int n_ctx = bs_session_n_ctx(sess);
    if (memcmp(h->magic, SLOT_MAGIC, 8) || h->n_lora != SRV_MAX_LORA)
        return op_fail(op, 400, "%s is not a slot file of this server", op->filename);
    if (h->n_vocab != (uint32_t)op->n_vocab || h->n_tokens > (uint32_t)n_ctx ||
        h->state_len != bs_session_state_bytes(sess, (int)h->n_tokens) ||
        size - sizeof *h != (uint64_t)h->n_tokens * 4 + h->state_len)
        return op_fail(op, 400, "%s was saved from another model or context size, or is damaged", op->filename);
    return 0;
}

static int slot_restore(srv_slot_op *op, bs_gen *g, float *lora) {
    bs_session *sess = bs_gen_session(g);
    /* a regular file of the directory only: no link out of it, no FIFO to block the scheduler */
    const int fd = open(op->path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return op_fail(op, 400, "Unable to restore slot: no slot file named %s", op->filename);
    struct stat st;
    slot_header h;
    char *body = NULL;
    int rc = fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < sizeof h
                 ? op_fail(op, 400, "Unable to restore slot: %s is not a slot file", op->filename)
             : read_exact(fd, &h, sizeof h) ? op_fail(op, 500, "reading %s failed", op->filename)
                                            : check_header(op, &h, (uint64_t)st.st_size, sess);
    const size_t n_body = rc ? 0 : (size_t)st.st_size - sizeof h;
    if (!rc && !(body = malloc(n_body ? n_body : 1))) rc = op_fail(op, 500, "out of memory reading %s", op->filename);
    if (!rc && read_exact(fd, body, n_body)) rc = op_fail(op, 500, "reading %s failed", op->filename);
    close(fd);
    const int32_t *toks = (const int32_t *)body;
    for (uint32_t i = 0; !rc && i < h.n_tokens; i++)
        if (toks[i] < 0 || toks[i] >= op->n_vocab) rc = op_fail(op, 400, "%s holds a token outside the vocabulary", op->filename);
    /* a state the session refuses (another model's) leaves the slot as it was (bs_gen_adopt) */
    if (!rc && bs_gen_adopt(g, body + (size_t)h.n_tokens * 4, h.state_len, toks, (int)h.n_tokens)) {
        op_fail(op, 400, "Unable to restore slot: %s", bs_last_error());
        rc = -1;
        int held = 0;
        bs_gen_cached(g, &held);
        if (!held) memset(lora, 0, SRV_MAX_LORA * sizeof *lora);   /* emptied by a load that failed part way */
    }
    if (!rc) {
        memcpy(lora, h.lora, sizeof h.lora);   /* what its cached prefix was computed with */
        op->n_tokens = (int)h.n_tokens;
        op->n_bytes = (size_t)st.st_size;
    }
    free(body);
    return rc;
}

int srv_slot_op_run(srv_slot_op *op, const srv_config *cfg, bs_gen *g, float *lora) {
    const double t0 = bs_time();
    op->status = 200;
    int rc = 0;
    if (op->action == SRV_SLOT_SAVE) {
        rc = slot_save(op, cfg->slot_save_path, g, lora);
    } else if (op->action == SRV_SLOT_RESTORE) {
        rc = slot_restore(op, g, lora);
    } else {
        bs_gen_cached(g, &op->n_tokens);
        bs_gen_forget(g);
        memset(lora, 0, SRV_MAX_LORA * sizeof *lora);
    }
    op->ms = (bs_time() - t0) * 1e3;
    return rc;
}

void srv_slot_op_free(srv_slot_op *op) { free(op); }
