/* server_fields.c: a request body's typed fields (server.h's srv_get_*): each getter leaves *out
 * alone when the field is absent or null, and answers a 400 naming the field when it has the
 * wrong type or range. */
#include "server/server.h"

#include <jansson.h>
#include <math.h>

bool srv_get_num(json_t *b, const char *k, double lo, double hi, double *out, srv_reply *r) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) { srv_reply_error(r, 400, "invalid_request_error", "'%s' must be a number", k); return false; }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        srv_reply_error(r, 400, "invalid_request_error", "'%s' must be in [%g, %g]", k, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool srv_get_float(json_t *b, const char *k, double lo, double hi, float *out, srv_reply *r) {
    double x = *out;
    if (!srv_get_num(b, k, lo, hi, &x, r)) return false;
    *out = (float)x;
    return true;
}

/* An integer, or a number written with a fraction of zero (Python's json.dumps(3.0) gives 3.0;
 * llama-server converts it too). */
bool srv_get_int(json_t *b, const char *k, long lo, long hi, long *out, srv_reply *r) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return true;
    const double d = json_is_real(v) ? json_real_value(v) : 0.5;
    if (!json_is_integer(v) && !(d == floor(d) && fabs(d) < 9.0e15)) {
        srv_reply_error(r, 400, "invalid_request_error", "'%s' must be an integer", k);
        return false;
    }
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : (json_int_t)d;
    if (x < lo || x > hi) {
        srv_reply_error(r, 400, "invalid_request_error", "'%s' must be in [%ld, %ld]", k, lo, hi);
        return false;
    }
    *out = (long)x;
    return true;
}

bool srv_get_bool(json_t *b, const char *k, bool *out, srv_reply *r) {
    json_t *v = json_object_get(b, k);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) { srv_reply_error(r, 400, "invalid_request_error", "'%s' must be a boolean", k); return false; }
    *out = json_is_true(v);
    return true;
}

