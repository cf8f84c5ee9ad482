/* server_slots.c: llama-server's slot persistence, POST /slots/{id}?action=save|restore|erase
 * with {"filename": NAME} (serve --slot-save-path DIR), and --no-slots.
 *
 * An action is a task of the scheduler (server_sched.c) for that slot: it runs on the scheduler
 * thread, which owns the slots, once the slot is idle (a busy slot's action waits, as in
 * llama-server), so it never races a generation. A file holds the slot's tokens, the adapter
 * scales its state was computed with and the session state (bs_session_state_save: positions,
 * the recurrent DeltaNet and conv state, the used KV cache); it is written to a temporary file
 * in DIR, fsync'd and renamed, so a crash leaves the old file or the new one, never half of one.
 * Restored, the slot holds exactly what was saved: the next token's logits are those it would
 * have had without the save. Names are plain file names in DIR (no '/', no "..", no leading
 * '.'), anything else is a 400. */
#include "server/server.h"
#include "io/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OP_SAVE, OP_RESTORE, OP_ERASE };

struct srv_slot_op {
    int action;
    char filename[200];
    char path[4096];
    int n_vocab;
    /* the scheduler's answer */
    int status;                /* 200, or the error's */
    char err[512];
    int n_tokens;
    size_t n_bytes;
    double ms;
};

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

/* The whole file (at most max bytes) into *buf. */
static int read_file(srv_slot_op *op, size_t max, char **buf, size_t *len) {
    FILE *f = fopen(op->path, "rb");
    if (!f) return op_fail(op, 400, "Unable to restore slot: no slot file named %s", op->filename);
    char *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            if (cap > max + 1 || !(p = bs_xrealloc(p, cap))) break;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const bool err = ferror(f) || n > max;
    fclose(f);
    if (err) {
        free(p);
        return op_fail(op, 400, "the slot file %s cannot be read or is too large", op->filename);
    }
    *buf = p;
    *len = n;
    return 0;
}

static int slot_restore(srv_slot_op *op, bs_gen *g, float *lora) {
    bs_session *sess = bs_gen_session(g);
    const int n_ctx = bs_session_n_ctx(sess);
    char *buf = NULL;
    size_t len = 0;
    const size_t max = (size_t)64 << 30;
    if (read_file(op, max, &buf, &len)) return -1;
    slot_header h;
    int rc = 0;
    if (len < sizeof h) rc = op_fail(op, 400, "%s is not a slot file", op->filename);
    else memcpy(&h, buf, sizeof h);
    if (!rc && (memcmp(h.magic, SLOT_MAGIC, 8) || h.n_lora != SRV_MAX_LORA))
        rc = op_fail(op, 400, "%s is not a slot file of this server", op->filename);
    else if (!rc && (h.n_vocab != (uint32_t)op->n_vocab || h.n_tokens > (uint32_t)n_ctx ||
                     len != sizeof h + (size_t)h.n_tokens * 4 + h.state_len))
        rc = op_fail(op, 400, "%s was saved from another model or context size, or is damaged", op->filename);
    const int32_t *toks = (const int32_t *)(buf + sizeof h);
    for (uint32_t i = 0; !rc && i < h.n_tokens; i++)
        if (toks[i] < 0 || toks[i] >= op->n_vocab) rc = op_fail(op, 400, "%s holds a token outside the vocabulary", op->filename);
    if (!rc && bs_gen_adopt(g, buf + sizeof h + (size_t)h.n_tokens * 4, h.state_len, toks, (int)h.n_tokens)) {
        op_fail(op, 400, "Unable to restore slot: %s", bs_last_error());
        rc = -1;
        memset(lora, 0, SRV_MAX_LORA * sizeof *lora);   /* it holds nothing now */
    }
    if (!rc) {
        memcpy(lora, h.lora, sizeof h.lora);   /* what its cached prefix was computed with */
        op->n_tokens = (int)h.n_tokens;
        op->n_bytes = len;
    }
    free(buf);
    return rc;
}

int srv_slot_op_run(srv_slot_op *op, const srv_config *cfg, bs_gen *g, float *lora) {
    const double t0 = bs_time();
    op->status = 200;
    int rc = 0;
    if (op->action == OP_SAVE) {
        rc = slot_save(op, cfg->slot_save_path, g, lora);
    } else if (op->action == OP_RESTORE) {
        rc = slot_restore(op, g, lora);
    } else {
        bs_gen_cached(g, &op->n_tokens);
        bs_gen_forget(g);
        memset(lora, 0, SRV_MAX_LORA * sizeof *lora);
    }
    op->ms = (bs_time() - t0) * 1e3;
    return rc;
}

/* ---- the HTTP side ---------------------------------------------------------------------------- */

static void op_reply(srv *s, srv_task *t, srv_reply *r) {
    (void)s;
    const srv_slot_op *op = t->op;
    if (t->finish == SRV_FINISH_SHUTDOWN) {
        srv_reply_error(r, 503, "unavailable_error", "the server shut down before the slot action ran");
    } else if (op->status != 200) {
        srv_reply_error(r, op->status, op->status == 500 ? "server_error" : "invalid_request_error", "%s", op->err);
    } else if (op->action == OP_ERASE) {
        srv_reply_json(r, 200, json_pack("{s:i,s:i}", "id_slot", t->slot, "n_erased", op->n_tokens));
    } else {
        const bool save = op->action == OP_SAVE;
        srv_reply_json(r, 200, json_pack("{s:i,s:s,s:i,s:I,s:{s:f}}", "id_slot", t->slot, "filename", op->filename,
                                         save ? "n_saved" : "n_restored", op->n_tokens,
                                         save ? "n_written" : "n_read", (json_int_t)op->n_bytes, "timings",
                                         save ? "save_ms" : "restore_ms", op->ms));
    }
}

/* A plain file name: no path, nothing hidden, no control bytes. */
static bool good_filename(const char *f, size_t n) {
    if (n == 0 || n >= 200 || f[0] == '.' || memchr(f, 0, n)) return false;
    for (size_t i = 0; i < n; i++)
        if (f[i] == '/' || f[i] == '\\' || (unsigned char)f[i] < 32 || f[i] == 127) return false;
    return strstr(f, "..") == NULL;
}

/* The action's part of the query string (?action=save). */
static bool query_action(const char *url, int *action) {
    const char *q = strchr(url, '?');
    for (const char *p = q ? q + 1 : NULL; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL) {
        if (strncmp(p, "action=", 7)) continue;
        p += 7;
        const size_t n = strcspn(p, "&");
        static const char *const names[] = {"save", "restore", "erase"};
        for (int k = 0; k < 3; k++)
            if (strlen(names[k]) == n && !strncmp(p, names[k], n)) {
                *action = k;
                return true;
            }
        return false;
    }
    return false;
}

static void slot_action(srv *s, const char *url, const char *body, size_t len, srv_reply *r) {
    if (s->cfg.no_slots) {
        srv_reply_error(r, 501, "not_supported_error", "This server does not support slots action. Start it with `--slots`");
        return;
    }
    if (!s->cfg.slot_save_path) {
        srv_reply_error(r, 501, "not_supported_error",
                        "This server does not support slots action. Start it with `--slot-save-path`");
        return;
    }
    const char *idp = url + strlen("/slots/");
    char *end;
    errno = 0;
    const long id = strtol(idp, &end, 10);
    if (end == idp || (*end && *end != '?') || errno || id < 0 || id >= srv_sched_n_slots(s->sched)) {
        srv_reply_error(r, 400, "invalid_request_error", "Invalid slot ID (0..%d)", srv_sched_n_slots(s->sched) - 1);
        return;
    }
    int action = -1;
    if (!query_action(url, &action)) {
        srv_reply_error(r, 400, "invalid_request_error", "Invalid action: ?action=save, restore or erase");
        return;
    }
    srv_slot_op *op = bs_xcalloc(1, sizeof *op);
    op->action = action;
    op->n_vocab = bs_model_n_vocab(s->model);
    if (action != OP_ERASE) {
        json_error_t je;
        json_t *b = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
        json_t *f = json_is_object(b) ? json_object_get(b, "filename") : NULL;
        const bool ok = json_is_string(f) && good_filename(json_string_value(f), json_string_length(f));
        if (ok) {
            snprintf(op->filename, sizeof op->filename, "%s", json_string_value(f));
            snprintf(op->path, sizeof op->path, "%s/%s", s->cfg.slot_save_path, op->filename);
        }
        json_decref(b);
        if (!ok) {
            free(op);
            srv_reply_error(r, 400, "invalid_request_error",
                            "Invalid filename: the body must be {\"filename\": NAME}, a file name without '/' or '..'");
            return;
        }
    }
    srv_task *t = srv_task_new();
    t->op = op;
    t->id_slot = (int)id;
    if (srv_sched_submit(s->sched, t)) {
        srv_reply_error(r, 503, "unavailable_error", "%s", bs_last_error());
        srv_task_unref(t);
        return;
    }
    srv_gen g = {.answer = op_reply};
    srv_reply_generation(s, t, &g, r);
}

bool srv_slots_route(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r) {
    const size_t plen = strcspn(url, "?");
    if (plen == 6 && !strncmp(url, "/slots", 6) && s->cfg.no_slots) {
        srv_reply_error(r, 501, "not_supported_error", "This server does not support slots endpoint. Start it with `--slots`");
        return true;
    }
    if (plen <= 7 || strncmp(url, "/slots/", 7)) return false;
    if (strcmp(method, "POST")) {
        srv_reply_error(r, 405, "invalid_request_error", "/slots/{id} needs POST");
        r->allow = "POST, OPTIONS";
        return true;
    }
    slot_action(s, url, body, len, r);
    return true;
}

void srv_slot_op_free(srv_slot_op *op) { free(op); }

bool srv_slots_parse(srv *s, json_t *b, srv_task *t, srv_reply *r) {
    json_t *v = json_object_get(b, "id_slot");
    if (v && !json_is_null(v)) {
        const json_int_t n = srv_sched_n_slots(s->sched);
        if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) >= n) {
            srv_reply_error(r, 400, "invalid_request_error", "'id_slot' must be -1 (any) or a slot id in [0, %d)", (int)n);
            return false;
        }
        t->id_slot = (int)json_integer_value(v);
    }
    return srv_lora_parse(s, b, t, r);
}
