/* sampler_dry.h: DRY ("Don't Repeat Yourself") penalty with llama.cpp's semantics; internal to
 * the sampler (sampler.c), separate because it is its own algorithm (restart sequences plus a
 * Z-function over the reversed history). */
#ifndef BS_SAMPLER_DRY_H
#define BS_SAMPLER_DRY_H

#include "sample/sampler.h"

/* A restart sequence: `head` followed by tail tokens pool[off .. off+len). */
typedef struct {
    int32_t head, off, len;
} bs_dry_breaker;

typedef struct {
    int32_t n_vocab;
    bs_dry_breaker *br;
    int n_br, cap_br;
    bool sorted;              /* br sorted by head (lookup by binary search) */
    int32_t *pool;
    int n_pool, cap_pool;
    int32_t *z;               /* scratch: Z-function of the reversed window */
    size_t cap_z;
    int32_t *maxrep;          /* [n_vocab] longest repeat a token would extend; kept all zero */
    int32_t *touched;         /* [n_vocab] tokens with maxrep set this step */
} bs_dry;

void bs_dry_init(bs_dry *d, int32_t n_vocab);
void bs_dry_free(bs_dry *d);
void bs_dry_clear(bs_dry *d);
int bs_dry_add(bs_dry *d, int32_t head, const int32_t *tail, int n_tail);
int bs_dry_set_strings(bs_dry *d, const char *const *strings, int n, const bs_sampler_vocab *v);

/* Subtract DRY penalties from logits[n_vocab] given the last n tokens of the history. */
void bs_dry_apply(bs_dry *d, const int32_t *tokens, size_t n, float multiplier, float base,
                  int32_t allowed_length, float *logits);

#endif
