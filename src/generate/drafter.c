/* drafter.c: load a drafter, check it against its target, borrow shared tensors (drafter.h). */
#include "generate/drafter.h"
#include "model/qwen35.h"
#include "io/util.h"

bs_dspark *bs_gen_drafter_open(const char *path, const bs_model *target, int draft_max, bool share_embeddings) {
    if (!path || !target) return bs_error("drafter: no drafter or target"), NULL;
    if (!target->layers) return bs_error("drafter: the target was loaded vocab-only"), NULL;
    bs_dspark *d = bs_dspark_load(path, NULL);
    if (!d) return NULL;
    if (bs_dspark_check_pair(d, target)) {
        bs_error_prefix("%s does not fit the target: ", path);
    } else if (draft_max > d->hp.block_size) {
        bs_error("--draft-max %d exceeds the drafter's block size %d (%s)", draft_max, d->hp.block_size, path);
    } else {
        int shared = bs_dspark_share_embeddings(d, target, share_embeddings);
        bs_log(2, "drafter: %s%s%s from the target\n", shared ? "borrowing" : "nothing borrowed",
               d->embd_borrowed ? " token_embd" : "", d->output_borrowed ? " output" : "");
        return d;
    }
    bs_dspark_free(d);
    return NULL;
}
