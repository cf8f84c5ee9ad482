/* util.c: see util.h. */
#include "io/util.h"
#include "bitspark.h"   /* bs_hash_bytes is public */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char bs_err_buf[1024];
int bs_log_level = 1;

/* A message is one line whatever it quotes (a type name, a path, a piece of a request): control
 * bytes become '?', so a log line or an HTTP error stays one line. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = '?';
}

int bs_error(const char *fmt, ...) {
    char msg[sizeof bs_err_buf];   /* (the arguments may be the last error itself) */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(bs_err_buf, msg, sizeof msg);
    one_line(bs_err_buf);
    return -1;
}

int bs_error_prefix(const char *fmt, ...) {
    char prefix[512], old[sizeof bs_err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, bs_err_buf, sizeof old);
    size_t np = strlen(prefix);
    if (np >= sizeof bs_err_buf) np = sizeof bs_err_buf - 1;
    memcpy(bs_err_buf, prefix, np);
    size_t rest = sizeof bs_err_buf - 1 - np, no = strlen(old);
    if (no > rest) no = rest;
    memcpy(bs_err_buf + np, old, no);
    bs_err_buf[np + no] = 0;
    one_line(bs_err_buf);
    return -1;
}

const char *bs_last_error(void) { return bs_err_buf[0] ? bs_err_buf : "unknown error"; }
void bs_clear_error(void) { bs_err_buf[0] = 0; }

static void (*log_sink)(int level, const char *text, void *ud);
static void *log_sink_ud;

void bs_log_set_sink(void (*cb)(int level, const char *text, void *ud), void *ud) {
    log_sink = cb;
    log_sink_ud = ud;
}

void bs_log(int level, const char *fmt, ...) {
    if (level > bs_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    if (log_sink) {
        char buf[2048];
        vsnprintf(buf, sizeof buf, fmt, ap);
        log_sink(level, buf, log_sink_ud);
    } else {
        vfprintf(stderr, fmt, ap);
    }
    va_end(ap);
}

static void oom(size_t n) {
    fprintf(stderr, "bitspark: out of memory allocating %zu bytes\n", n);
    abort();
}

void *bs_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}
void *bs_xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(n * sz);
    return p;
}
void *bs_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}
char *bs_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = bs_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
void *bs_amalloc(size_t n) {
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n);
    return p;
}
void bs_afree(void *p) { free(p); }

/* --- half precision --------------------------------------------------------------------- */
static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float bs_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t bs_f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* result is subnormal or zero */
        /* Add 0.5 (as float) so the FPU rounds the mantissa to nearest even in one step. */
        float v = u2f(ax) + 0.5f;
        return (uint16_t)(sign | (f2u(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (ax >> 13));
}

float bs_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t bs_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet nan */
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* --- misc --------------------------------------------------------------------------------- */
bool bs_env_flag(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

bool bs_ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

double bs_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) { kb = strtoull(line + n, NULL, 10); break; }
    fclose(f);
    return kb * 1024;
}
uint64_t bs_peak_rss(void) { return status_kb("VmHWM:"); }
uint64_t bs_current_rss(void) { return status_kb("VmRSS:"); }

void bs_latch_error(char *buf, size_t size, const char *fmt, va_list ap) {
    if (!buf[0]) vsnprintf(buf, size, fmt, ap);
}

int bs_errbuf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

char *bs_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { bs_error("%s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = bs_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = bs_xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); bs_error("%s: read error", path); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* --- rng ----------------------------------------------------------------------------------- */
static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
void bs_rng_seed(bs_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
uint64_t bs_rng_next(bs_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}
double bs_rng_uniform(bs_rng *r) { return (double)(bs_rng_next(r) >> 11) * 0x1.0p-53; }
float bs_rng_normal(bs_rng *r) {
    double u1 = bs_rng_uniform(r), u2 = bs_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t bs_hash_bytes(const void *data, size_t len) {   /* FNV-1a, 64 bits */
    const unsigned char *b = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}
