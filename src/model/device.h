/* device.h: the device a model runs on and the seam to the Vulkan backend (device.c; internal). */
#ifndef BS_MODEL_DEVICE_H
#define BS_MODEL_DEVICE_H

#include "model/qwen35.h"

#include <stdbool.h>
#include <stdint.h>

/* Choose by spec ("auto"/NULL, "cpu", "vulkan[:N]") and, for Vulkan, upload the network.
 * 0 (CPU or Vulkan, m->device_name set) or -1 + bs_error (a named device that cannot be used). */
int bs_model_choose_device(bs_model *m, const char *spec);
void bs_model_release_device(bs_model *m);
/* "CPU (avx512)" or "Vulkan <device name>". */
const char *bs_model_device(const bs_model *m);

/* Sessions of a model on Vulkan: the device session (0 when the model is on the CPU), and
 * evaluation, rollback to rb_base + j, and the state copied to / from the CPU session's
 * arrays (their layouts are the same), each 0 or -1 + bs_error. */
int bs_device_session_new(bs_session *s);
int bs_device_eval(bs_session *s, const int32_t *tokens, int n, int mode, float *logits, float *taps);
/* sleep.c's device part: the weights' device buffers freed (no session may be alive) and
 * uploaded again from the host weights (restored first). 0 where the model runs on the CPU. */
int bs_device_sleep(bs_model *m);
int bs_device_wake(bs_model *m);
/* The same with what comes back of the logits rows as o says (the rows, each one's greedy token
 * or k best: bs_vk_out); a one-token greedy step with undo off goes one step ahead. */
int bs_device_eval_out(bs_session *s, const int32_t *tokens, int n, const bs_vk_out *o, float *taps);
int bs_device_rollback(bs_session *s, int j);
/* Rows i0..i0+n-1 of an nx x ny image's embeddings (bs_eval_image_rows on the device). */
int bs_device_eval_image(bs_session *s, const float *embd, int nx, int ny, int i0, int n, int mode, float *logits,
                         float *taps);
/* The bookkeeping around a batch of c tokens on the device (bs_device_eval's, and batch_eval.c's
 * for several sessions in one pass), as bs_session_begin_batch / end_batch on the CPU: begin
 * makes the state before it what rollback goes back to (one-token steps without undo skip that
 * copy; snap != NULL: *snap says whether the caller's pass must take that snapshot) and puts the
 * positions' rope rows into s->rope; end moves the positions on. */
int bs_device_begin(bs_session *s, const int32_t *tokens, int c, bool *snap);
void bs_device_end(bs_session *s, int c);
int bs_device_state(bs_session *s, int n_pos, bool to_host);
/* LoRA terms on the device's copy of the network (lora_apply.c attaches them to both). */
int bs_device_lora(bs_model *m, const char *name, int r, const float *a, const float *b, float scale);
void bs_device_lora_clear(bs_model *m);

#endif
