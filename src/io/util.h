/* util.h: errors, checked allocation, half-precision conversion, small helpers shared by every
 * part of bitspark. Errors follow one convention everywhere: a function that can fail returns
 * NULL or a negative int and records a one-line message with bs_error(); callers add context
 * with bs_error_prefix() and the CLI prints bs_last_error(). */
#ifndef BS_UTIL_H
#define BS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>

#if defined(__GNUC__)
#define BS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BS_PRINTF(a, b)
#endif

/* Record an error message for the current thread (overwrites the previous one). Returns -1 so
 * that `return bs_error(...)` reads naturally. */
int bs_error(const char *fmt, ...) BS_PRINTF(1, 2);
/* Prepend context ("loading x.gguf: ") to the current error message. Returns -1. */
int bs_error_prefix(const char *fmt, ...) BS_PRINTF(1, 2);
const char *bs_last_error(void);
void bs_clear_error(void);

/* Logging to stderr; verbosity from bs_log_level (0 quiet, 1 info, 2 debug). An embedder's
 * callback (bitspark.h's bs_log_set) takes the messages instead when set. */
extern int bs_log_level;
void bs_log(int level, const char *fmt, ...) BS_PRINTF(2, 3);
void bs_log_set_sink(void (*cb)(int level, const char *text, void *ud), void *ud);

/* Allocation that never returns NULL for a nonzero size: aborts with a message on OOM.
 * Use only for sizes the program controls; sizes that come from a file must be validated
 * first (see bs_mul_overflow). */
void *bs_xmalloc(size_t n);
void *bs_xcalloc(size_t n, size_t sz);
void *bs_xrealloc(void *p, size_t n);
char *bs_xstrdup(const char *s);
/* 64-byte aligned allocation for SIMD buffers; free with bs_afree. */
void *bs_amalloc(size_t n);
void bs_afree(void *p);

/* Overflow-checked arithmetic for sizes read from untrusted files. Return true on overflow. */
static inline bool bs_mul_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool bs_add_overflow(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* IEEE half and bfloat16. Conversions round to nearest even, like the F16C instructions
 * and ggml's reference code, so quantized files come out byte-identical. */
float bs_f16_to_f32(uint16_t h);
uint16_t bs_f32_to_f16(float f);
float bs_bf16_to_f32(uint16_t h);
uint16_t bs_f32_to_bf16(float f);

/* Monotonic wall clock in seconds. */
double bs_time(void);
/* Whether environment variable `name` is set, non-empty and not "0". */
bool bs_env_flag(const char *name);
/* Whether s ends with suffix. */
bool bs_ends_with(const char *s, const char *suffix);
/* Peak resident set size of this process in bytes (from /proc/self/status VmHWM). */
uint64_t bs_peak_rss(void);
/* Current resident set size in bytes. */
uint64_t bs_current_rss(void);

/* (Output files: io/atomic_file.h, a temporary renamed over the target when complete.) */
/* Writers keep their first error in a fixed buffer and report it when closed: record the
 * message only if the buffer is still empty. */
void bs_latch_error(char *buf, size_t size, const char *fmt, va_list ap);
/* Functions that report into a caller's buffer (err, errlen; either may be NULL / 0): format the
 * message there and return -1. */
int bs_errbuf(char *err, size_t errlen, const char *fmt, ...) BS_PRINTF(3, 4);

/* Whole-file read into a malloc'd, NUL-terminated buffer; NULL + bs_error on failure. */
char *bs_read_file(const char *path, size_t *len);

/* Deterministic RNG (xoshiro256**) used by synth and the sampler. */
typedef struct { uint64_t s[4]; } bs_rng;
void bs_rng_seed(bs_rng *r, uint64_t seed);
uint64_t bs_rng_next(bs_rng *r);
double bs_rng_uniform(bs_rng *r);   /* [0, 1) */
float bs_rng_normal(bs_rng *r);     /* standard normal */

#define BS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define BS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define BS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
