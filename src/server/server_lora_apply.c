/* server_lora_apply.c: the scheduler's side of LoRA switching (server_lora.c): the model with
 * exactly a pass's adapter scales attached. */
#include "server/server.h"

#include <string.h>

/* The global scales (POST /lora-adapters): those of requests without "lora" and of embeddings. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static float global[SRV_MAX_LORA];

void srv_lora_global(float *out) {
    pthread_mutex_lock(&mu);
    memcpy(out, global, sizeof global);
    pthread_mutex_unlock(&mu);
}

/* Every scale at once: a request parsed meanwhile sees all old scales or all new ones. */
void srv_lora_set_global(const float *scale) {
    pthread_mutex_lock(&mu);
    memcpy(global, scale, sizeof global);
    pthread_mutex_unlock(&mu);
}

int srv_lora_apply(bs_model *m, struct bs_lora *const *loras, int n, const float *scale) {
    bs_lora_detach(m);
    for (int k = 0; k < n; k++)
        if (scale[k] != 0.0f && bs_lora_attach(m, loras[k], scale[k])) return -1;
    return 0;
}

