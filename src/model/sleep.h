/* sleep.h: a loaded model's weights given back to the system while idle and restored on demand
 * (sleep.c), for `serve --sleep-idle-seconds`. Hyperparameters, vocabulary and chat template
 * stay; nothing may evaluate the model between sleep and wake. */
#ifndef BS_MODEL_SLEEP_H
#define BS_MODEL_SLEEP_H

#include "model/qwen35.h"

#include <stdbool.h>

/* Release the weights' resident memory (mapped pages, packed copies, and on a Vulkan device its
 * buffers: every session of the model freed first). 0, or -1 + bs_error when it cannot: it is
 * left as it was. */
int bs_model_sleep(bs_model *m);
/* Restore them: the file must be the one loaded (same device, inode, size and mtime); it is
 * read and repacked to the same bytes as at load. 0, or -1 + bs_error (still asleep). */
int bs_model_wake(bs_model *m);
bool bs_model_asleep(const bs_model *m);

#endif
