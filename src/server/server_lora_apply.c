/* server_lora_apply.c: the scheduler's side of LoRA switching (server_lora.c): the model with
 * exactly a pass's adapter scales attached. */
#include "server/server.h"

int srv_lora_apply(bs_model *m, struct bs_lora *const *loras, int n, const float *scale) {
    bs_lora_detach(m);
    for (int k = 0; k < n; k++)
        if (scale[k] != 0.0f && bs_lora_attach(m, loras[k], scale[k])) return -1;
    return 0;
}

