/* synth_mmproj.h: synthetic vision projectors (qwen3vl_merger mmproj GGUFs) with random weights,
 * for tests and `bench --mmproj`: `bitspark synth --preset mmproj-tiny | mmproj-bonsai-27b`. */
#ifndef BS_SYNTH_MMPROJ_H
#define BS_SYNTH_MMPROJ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int n_embd, n_ff, n_layer, n_head, patch, pos_side, proj_dim;
    int type;            /* bs_type of the matrices: F32, F16, BF16 or Q8_0 */
    uint64_t seed;
} bs_synth_mmproj_config;

/* The preset's shape: "mmproj-tiny" (the fixture's: width 64, 2 layers, 2 heads, MLP 128,
 * 6x6 positions, output 256, f32) or "mmproj-bonsai-27b" (Qwen3.5-27B's vision tower: width
 * 1152, 27 layers, 16 heads, MLP 4304, 48x48 positions, output 5120, f16). -1 if unknown. */
int bs_synth_mmproj_preset(const char *name, bs_synth_mmproj_config *c);
/* --dry-run: the tensor table, as bs_synth_list prints a model's. 0 or -1 with bs_error. */
int bs_synth_mmproj_list(const bs_synth_mmproj_config *c, FILE *out);
/* Write the projector (atomically). 0 or -1 with bs_error. */
int bs_synth_mmproj_write(const bs_synth_mmproj_config *c, const char *path);

#endif
