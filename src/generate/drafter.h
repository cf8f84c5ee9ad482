/* drafter.h: opening a DSpark drafter for a target, the one way every caller does it (the
 * engine, the public API, the server, bench --spec): load, check the pair, check a fixed
 * --draft-max against the block, borrow the target's embeddings. */
#ifndef BS_GEN_DRAFTER_H
#define BS_GEN_DRAFTER_H

#include "dspark/dspark.h"
#include <stdbool.h>

/* draft_max: a fixed depth to check against the drafter's block size (BS_DRAFT_AUTO or < 0: no
 * check). share_embeddings: borrow the target's token_embd / output even where they differ
 * (identical ones are always borrowed). NULL + bs_error naming the file. */
bs_dspark *bs_gen_drafter_open(const char *path, const bs_model *target, int draft_max, bool share_embeddings);

#endif
