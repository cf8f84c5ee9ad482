/* hadamard.h: PrismML's `prism.hadamard.*` weight fold (Bonsai 2 files) read from a GGUF.
 *
 * A folded file stores the rows of the weights it names rotated (cpu/matmul.h: bs_rotation)
 * and its token embedding table rotated the same way; products with those weights take the
 * rotated activations and table rows are rotated back after the lookup. The reader checks every
 * key (version, transform, axis, block size, sign vectors, names); the loaders then ask, weight
 * by weight, whether the file folds it and attach the rotation its input width takes. */
#ifndef BS_HADAMARD_H
#define BS_HADAMARD_H

#include "cpu/compute.h"
#include "formats/gguf.h"

#include <stdbool.h>

typedef struct bs_hadamard bs_hadamard;

/* The fold f declares (*out = NULL when it has no prism.hadamard.* key). drafter: the file is a
 * DSpark drafter, which may fold only output.weight. Returns 0, or -1 with bs_error. */
int bs_hadamard_read(const gguf_file *f, bool drafter, bs_hadamard **out);
void bs_hadamard_free(bs_hadamard *h);
/* Whether a fold may name this weight: "output.weight", or for a model "blk.N.KIND.weight" of a
 * kind it can apply to (attn_q/k/v/qkv/gate/output, ffn_gate/up/down, ssm_out). */
bool bs_hadamard_foldable(const char *name, bool drafter);

/* Whether the fold names this weight (forward: weight_names; inverse: inverse_weight_names);
 * a name asked for is marked as found. */
bool bs_hadamard_folds(bs_hadamard *h, const char *name, bool inverse);
/* Whether weight `name` takes its input's V heads regrouped before the rotation (an ssm_out of a
 * file that says gdn_v_grouped). */
bool bs_hadamard_regroups(const bs_hadamard *h, const char *name);
/* The rotation of an input of `width` (perm_hd > 0: regrouped first, see bs_rotation), owned
 * by h; NULL with bs_error when the block does not divide width or no sign vector has it. */
const bs_rotation *bs_hadamard_rotation(bs_hadamard *h, int64_t width, int perm_hd, int perm_nk, int perm_rep,
                                        bool inverse);
/* -1 with bs_error naming the first declared weight no loader asked for (a name the model
 * does not have: the file is not what its fold says). */
int bs_hadamard_check_all_found(const bs_hadamard *h);
/* One line for reports: "block 1024, 401 weights, explicit signs for 3 widths". */
void bs_hadamard_describe(const bs_hadamard *h, char *buf, size_t n);

#endif
