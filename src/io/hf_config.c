/* hf_config.c: see hf_config.h. */
#include "io/hf_config.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *bs_json_load_file(const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) bs_error("%s: line %d column %d: %s", path, err.line, err.column, err.text);
    return root;
}

json_t *hf_get(const json_t *root, const char *key) {
    const json_t *v = root;
    const char *p = key;
    while (v && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];
        if (n >= sizeof part || !json_is_object(v)) return NULL;
        memcpy(part, p, n);
        part[n] = 0;
        v = json_object_get(v, part);
        p += n + (dot ? 1 : 0);
    }
    return (json_t *)v;
}

/* The value of key, or NULL when missing / null (the caller applies its default). */
static json_t *lookup(const json_t *root, const char *key) {
    json_t *v = hf_get(root, key);
    return json_is_null(v) ? NULL : v;
}

static int as_int(const json_t *v, const char *key, int64_t *out) {
    if (json_is_integer(v)) { *out = json_integer_value(v); return 0; }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.2e18) { *out = (int64_t)d; return 0; }
    }
    return bs_error("config '%s' is not an integer", key);
}

int hf_int(const json_t *root, const char *key, int64_t def, int64_t *out) {
    json_t *v = lookup(root, key);
    if (!v) { *out = def; return 0; }
    return as_int(v, key, out);
}

int hf_int_req(const json_t *root, const char *key, int64_t *out) {
    json_t *v = lookup(root, key);
    if (!v) return bs_error("config has no '%s'", key);
    return as_int(v, key, out);
}

static int as_float(const json_t *v, const char *key, double *out) {
    if (!json_is_number(v)) return bs_error("config '%s' is not a number", key);
    *out = json_number_value(v);
    return 0;
}

int hf_float(const json_t *root, const char *key, double def, double *out) {
    json_t *v = lookup(root, key);
    if (!v) { *out = def; return 0; }
    return as_float(v, key, out);
}

int hf_float_req(const json_t *root, const char *key, double *out) {
    json_t *v = lookup(root, key);
    if (!v) return bs_error("config has no '%s'", key);
    return as_float(v, key, out);
}

int hf_bool(const json_t *root, const char *key, bool def, bool *out) {
    json_t *v = lookup(root, key);
    if (!v) { *out = def; return 0; }
    if (!json_is_boolean(v)) return bs_error("config '%s' is not a boolean", key);
    *out = json_is_true(v);
    return 0;
}

const char *hf_str(const json_t *root, const char *key, const char *def) {
    json_t *v = lookup(root, key);
    if (!v) return def;
    if (!json_is_string(v)) { bs_error("config '%s' is not a string", key); return NULL; }
    return json_string_value(v);
}

int hf_int_array(const json_t *root, const char *key, int64_t *out, int max, int *n) {
    json_t *v = lookup(root, key);
    *n = 0;
    if (!v) return 0;
    if (!json_is_array(v)) return bs_error("config '%s' is not an array", key);
    if (json_array_size(v) > (size_t)max)
        return bs_error("config '%s' has %zu elements (at most %d)", key, json_array_size(v), max);
    for (size_t i = 0; i < json_array_size(v); i++)
        if (as_int(json_array_get(v, i), key, &out[i])) return -1;
    *n = (int)json_array_size(v);
    return 0;
}

json_t *bs_hf_config_of_dir(const char *dir) {
    const size_t n = strlen(dir) + 16;
    char *p = bs_xmalloc(n);
    snprintf(p, n, "%s/config.json", dir);
    json_t *cfg = bs_json_load_file(p);
    free(p);
    return cfg;
}
