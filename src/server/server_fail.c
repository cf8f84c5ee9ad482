/* server_fail.c: a request's refusal (srv_fail) as the request parsers build it, before the
 * reply that carries it (its own file: parsers of every rank use it). */
#include "server/server.h"

#include <stdarg.h>
#include <stdio.h>

int srv_fail_set(srv_fail *f, int status, const char *type, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->status = status;
    f->type = type;
    return status;
}
