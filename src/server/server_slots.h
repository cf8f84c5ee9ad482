/* server_slots.h: a slot action (server_slots.c, the HTTP side; server_slot_file.c, the
 * scheduler's side). */
#ifndef BS_SERVER_SLOTS_H
#define BS_SERVER_SLOTS_H

#include "server/server.h"

enum { SRV_SLOT_SAVE, SRV_SLOT_RESTORE, SRV_SLOT_ERASE };

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

#endif
