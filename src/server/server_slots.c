/* server_slots.c: GET /slots, llama-server's slot persistence, POST
 * /slots/{id}?action=save|restore|erase with {"filename": NAME} (serve --slot-save-path DIR),
 * and --no-slots.
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
#include "server/server_slots.h"
#include "io/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the HTTP side ---------------------------------------------------------------------------- */

static void op_reply(srv *s, srv_task *t, srv_reply *r) {
    (void)s;
    const srv_slot_op *op = t->op;
    if (t->finish == SRV_FINISH_SHUTDOWN) {
        srv_reply_error(r, 503, "unavailable_error", "the server shut down before the slot action ran");
    } else if (op->status != 200) {
        srv_reply_error(r, op->status, op->status == 500 ? "server_error" : "invalid_request_error", "%s", op->err);
    } else if (op->action == SRV_SLOT_ERASE) {
        srv_reply_json(r, 200, json_pack("{s:i,s:i}", "id_slot", t->slot, "n_erased", op->n_tokens));
    } else {
        const bool save = op->action == SRV_SLOT_SAVE;
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

/* The value of `key` in url's query string (*n bytes, not NUL-terminated), or NULL. */
static const char *query_value(const char *url, const char *key, size_t *n) {
    const char *q = strchr(url, '?');
    const size_t kn = strlen(key);
    for (const char *p = q ? q + 1 : NULL; p && *p; p = strchr(p, '&') ? strchr(p, '&') + 1 : NULL)
        if (!strncmp(p, key, kn) && p[kn] == '=') {
            *n = strcspn(p + kn + 1, "&");
            return p + kn + 1;
        }
    return NULL;
}

/* The action's part of the query string (?action=save). */
static bool query_action(const char *url, int *action) {
    size_t n;
    const char *p = query_value(url, "action", &n);
    static const char *const names[] = {"save", "restore", "erase"};
    for (int k = 0; p && k < 3; k++)
        if (strlen(names[k]) == n && !strncmp(p, names[k], n)) {
            *action = k;
            return true;
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
    if (action != SRV_SLOT_ERASE) {
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

/* GET /slots: llama-server's shape per slot (id, id_task, n_ctx, speculative, is_processing,
 * and for the task it runs or last ran its params and next_token) and this server's n_cached;
 * ?fail_on_no_slot=VALUE (any non-empty one) answers 503 when every slot is busy. */
static void slots_list(srv *s, const char *url, srv_reply *r) {
    const int n = srv_sched_n_slots(s->sched);
    srv_slot_info *info = bs_xcalloc((size_t)n, sizeof *info);
    srv_sched_slots(s->sched, info);
    bool idle = false;
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const srv_slot_info *in = &info[i];
        idle |= !in->busy;
        json_t *j = json_pack("{s:i,s:I,s:i,s:b,s:b,s:i}", "id", in->id, "id_task",
                              (json_int_t)(in->has_task ? in->id_task : -1), "n_ctx", in->n_ctx, "speculative",
                              in->drafts, "is_processing", in->busy, "n_cached", in->n_cached);
        if (in->has_task) {
            json_t *p = json_pack("{s:i,s:I}", "n_predict", in->n_predict, "seed", (json_int_t)in->sp.seed);
            srv_sampler_settings(p, &in->sp);
            json_object_set_new(p, "n_keep", json_integer(in->n_keep));
            json_object_set_new(p, "ignore_eos", json_boolean(in->ignore_eos));
            json_object_set_new(j, "params", p);
            const int remain = BS_MAX(0, in->n_predict - in->n_decoded);   /* (n_predict: as capped, never -1) */
            json_object_set_new(j, "next_token", json_pack("[{s:b,s:b,s:i,s:i}]", "has_next_token", in->generating,
                                                           "has_new_line", in->has_new_line, "n_remain", remain,
                                                           "n_decoded", in->n_decoded));
        }
        json_array_append_new(a, j);
    }
    free(info);
    size_t fn = 0;
    if (query_value(url, "fail_on_no_slot", &fn) && fn && !idle) {   /* any value, as llama-server takes it */
        json_decref(a);
        srv_reply_error(r, 503, "unavailable_error", "no slot available");
        return;
    }
    srv_reply_json(r, 200, a);
}

bool srv_slots_route(srv *s, const char *method, const char *url, const char *body, size_t len, srv_reply *r) {
    const size_t plen = strcspn(url, "?");
    if (plen == 6 && !strncmp(url, "/slots", 6) && s->cfg.no_slots) {
        srv_reply_error(r, 501, "not_supported_error", "This server does not support slots endpoint. Start it with `--slots`");
        return true;
    }
    if (plen == 6 && !strncmp(url, "/slots", 6) && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) {
        slots_list(s, url, r);
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
