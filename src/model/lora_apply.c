/* lora_apply.c: LoRA at run time: adapters hang off the model's weights and bs_matmul adds
 * scale * B (A x) to W x (see lora.h); on the Vulkan device the same terms are added after each
 * product (device.c). Each row is computed on its own, in a fixed order, so a row's result
 * still does not depend on how many rows are batched with it. */
#include "model/lora.h"
#include "model/device.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* Every matrix of the model that goes through bs_matmul, NULL-terminated in out (cap entries). */
static int model_weights(bs_model *m, bs_weight **out, int cap) {
    int n = 0;
    if (n < cap) out[n++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        bs_qwen35_layer *L = &m->layers[il];
        bs_weight *ws[] = {&L->ffn_gate, &L->ffn_up, &L->ffn_down, &L->qkv, &L->gate, &L->beta,
                           &L->alpha, &L->ssm_out, &L->wq, &L->wk, &L->wv, &L->wo};
        for (size_t k = 0; k < BS_ARRAY_LEN(ws); k++)
            if (ws[k]->name && n < cap) out[n++] = ws[k];
    }
    return n;
}

static bs_weight *weight_named(bs_model *m, bs_weight **all, int n, const char *name) {
    (void)m;
    for (int i = 0; i < n; i++)
        if (all[i]->name && !strcmp(all[i]->name, name)) return all[i];
    return NULL;
}

int bs_lora_attach(bs_model *m, const bs_lora *l, float user_scale) {
    if (!m->layers) return bs_error("%s: a vocabulary-only model has no weights to adapt", l->path);
    const int cap = 1 + 12 * m->hp.n_layer;
    bs_weight **all = bs_xmalloc((size_t)cap * sizeof *all);
    int n = model_weights(m, all, cap), rc = 0;
    for (int i = 0; i < l->n && !rc; i++) {   /* check everything before changing anything */
        const bs_lora_tensor *t = &l->t[i];
        bs_weight *W = weight_named(m, all, n, t->name);
        if (!W && !strcmp(t->name, m->tok_embd.name ? m->tok_embd.name : ""))
            rc = bs_error("LoRA on %s (an embedding) is not supported", t->name);
        else if (!W) rc = bs_error("LoRA tensor %s: the model has no such matrix", t->name);
        else if (W->ne0 != t->in || W->ne1 != t->out)
            rc = bs_error("LoRA tensor %s: delta is %lld x %lld, the weight %lld x %lld", t->name,
                          (long long)t->out, (long long)t->in, (long long)W->ne1, (long long)W->ne0);
    }
    for (int i = 0; i < l->n && !rc; i++) {
        bs_weight *W = weight_named(m, all, n, l->t[i].name);
        bs_lora_ref *ref = bs_xmalloc(sizeof *ref);
        *ref = (bs_lora_ref){.t = &l->t[i], .scale = l->t[i].scale * user_scale, .next = NULL};
        /* append, so adapters add up in the order given */
        bs_lora_ref **p = (bs_lora_ref **)&W->lora;
        while (*p) p = &(*p)->next;
        *p = ref;
        if (bs_device_lora(m, l->t[i].name, l->t[i].r, l->t[i].a, l->t[i].b, ref->scale)) {
            rc = -1;
            bs_lora_detach(m);   /* all or nothing: no adapter half on the device */
        }
    }
    free(all);
    return rc ? bs_error_prefix("%s: ", l->path) : 0;
}

void bs_lora_detach(bs_model *m) {
    if (!m || !m->layers) return;   /* (a vocabulary-only model: nothing was attached) */
    bs_device_lora_clear(m);
    const int cap = 1 + 12 * m->hp.n_layer;
    bs_weight **all = bs_xmalloc((size_t)cap * sizeof *all);
    int n = model_weights(m, all, cap);
    for (int i = 0; i < n; i++) {
        bs_lora_ref *r = (bs_lora_ref *)all[i]->lora;
        while (r) {
            bs_lora_ref *next = r->next;
            free(r);
            r = next;
        }
        all[i]->lora = NULL;
    }
    free(all);
}
