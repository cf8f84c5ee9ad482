/* synth_impl.h: internals shared by synth.c (presets, plan), synth_meta.c (metadata, vocabulary,
 * chat template) and synth_weights.c (weight generator). Not a public interface. */
#ifndef BS_SYNTH_IMPL_H
#define BS_SYNTH_IMPL_H

#include "formats/gguf.h"
#include "tools/synth.h"

#include <stddef.h>

enum synth_fill {
    SYNTH_MATRIX,    /* per-128-group magnitude, binary or ternary values; a = RMS of the entries */
    SYNTH_NORMAL,    /* mean a, standard deviation b */
    SYNTH_UNIFORM,   /* uniform in [a, b) */
    SYNTH_NEG_EXP,   /* -exp(u), u uniform in [a, b) (ssm_a from A_log) */
};

typedef struct synth_tensor {
    char name[64];
    int type;                    /* bs_type */
    int n_dims;
    int64_t ne[2];
    enum synth_fill fill;
    float a, b;
    enum bs_synth_values values; /* SYNTH_MATRIX only */
} synth_tensor;

typedef struct synth_plan { synth_tensor *t; size_t n, cap; } synth_plan;

#define SYNTH_LOG_SNR_DIM 128    /* sinusoidal log-SNR embedding width (dspark.md §2.6) */
#define SYNTH_N_SPECIALS 33      /* Qwen special tokens, ids 248044..248076 in the real vocabulary */
#define SYNTH_MIN_VOCAB (256 + SYNTH_N_SPECIALS + 1)

/* synth_meta.c */
int synth_write_metadata(gguf_writer *w, const bs_synth_config *c, const synth_plan *p);
/* synth_fold.c: --hadamard B */
bool synth_folded(const bs_synth_config *c, const synth_tensor *t);
int synth_fold_widths(const bs_synth_config *c, const synth_plan *p, int64_t *widths, int max);
void synth_fold_signs(const bs_synth_config *c, int64_t width, float *out);
int synth_fold_check(const bs_synth_config *c, const synth_plan *p);
void synth_fold_keys(gguf_writer *w, const bs_synth_config *c, const synth_plan *p);
struct bs_rotation;
float *synth_fold_rotation(const bs_synth_config *c, const synth_tensor *t, struct bs_rotation *r);
/* synth_weights.c */
bool synth_can_generate(int type);
int synth_write_tensor(gguf_writer *w, const bs_synth_config *c, const synth_tensor *t);

#endif
