/* session_ckpt.h: cheap checkpoints of a session's recurrent state, for rewinding further back
 * than bs_session_rollback reaches (the loop guard rewinds to the start of a repeat, possibly
 * hundreds of tokens ago).
 *
 * A checkpoint holds only the Gated DeltaNet state (conv windows and SSM matrices) and the
 * position: the KV rows before that position are never rewritten while the session only grows
 * or is rolled back to >= the position, so they need no copy. Restoring and then evaluating the
 * kept tokens exactly as a straight run did (same batch splits: one token at a time after a
 * prompt) gives bit-identical state and logits, because the same code runs on the same inputs.
 *
 * The caller is responsible for that precondition: a checkpoint at position p is valid only
 * while positions < p were not rewritten with other tokens (drop checkpoints past a rewind). */
#ifndef BS_SESSION_CKPT_H
#define BS_SESSION_CKPT_H

#include "bitspark.h"

#include <stddef.h>

typedef struct bs_session_ckpt bs_session_ckpt;

/* A checkpoint buffer sized for s (n_vocab floats of logits kept alongside, for the caller). */
bs_session_ckpt *bs_session_ckpt_new(const bs_session *s);
void bs_session_ckpt_free(bs_session_ckpt *c);
/* Bytes one checkpoint holds (state + logits). */
size_t bs_session_ckpt_bytes(const bs_session *s);

/* Record s's current state; logits (may be NULL) are the logits of position n_past-1. */
void bs_session_ckpt_save(bs_session_ckpt *c, const bs_session *s, const float *logits);
/* Put s back at the checkpoint's position and state. Fails if the checkpoint is past n_past or
 * was taken on another session shape. After this only rollback to n_past itself succeeds. */
int bs_session_ckpt_restore(const bs_session_ckpt *c, bs_session *s);
int bs_session_ckpt_pos(const bs_session_ckpt *c);
/* The logits saved with the checkpoint (NULL if none were given). */
const float *bs_session_ckpt_logits(const bs_session_ckpt *c);

#endif
