/* dspark_device.c: the drafter on the Vulkan device (vulkan/vk_dspark.c runs it): its tensors
 * described to the backend and uploaded once per drafter, on the target's context when the
 * target runs on Vulkan (token_embd / output the drafter borrows then come from the target's
 * network, not uploaded twice), else on a context of its own (draft-logits --device). */
#include "dspark/dspark.h"
#include "model/qwen35.h"
#include "vulkan/backend.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* Appends from device sessions collected while on (bs_dspark_collect), to run as one pass. */
typedef struct collected {
    bs_vk_dappend a[BS_VK_DRAFT_BLOCKS];
    float *rope[BS_VK_DRAFT_BLOCKS];   /* each [APPEND_CHUNK][head_dim], made on first use */
    int n;
    bool on;
} collected;

struct bs_dspark_dev {
    bs_vk_ctx *ctx;
    bool own_ctx;
    bs_vk_dspark *net;
    collected col;
    bool on_cpu_said;            /* the line saying why it stays on the CPU was written */
};

static bs_vk_tensor tensor_of(const bs_weight *w) {
    return (bs_vk_tensor){.type = w->type, .ne0 = w->ne0, .ne1 = w->ne1, .data = w->data, .row_bytes = w->row_bytes,
                          .name = w->name};
}

static bs_vk_dspark *upload(const bs_dspark *d, bs_vk_ctx *c, const bs_vk_net *share) {
    const bs_dspark_hparams *hp = &d->hp;
    bs_vk_dspark_layer_desc *ld = bs_xcalloc((size_t)hp->n_layer, sizeof *ld);
    for (int l = 0; l < hp->n_layer; l++) {
        const bs_dspark_layer *L = &d->layers[l];
        ld[l] = (bs_vk_dspark_layer_desc){
            .attn_norm = L->attn_norm, .ffn_norm = L->ffn_norm, .q_norm = L->q_norm, .k_norm = L->k_norm,
            .wq = tensor_of(&L->wq), .wk = tensor_of(&L->wk), .wv = tensor_of(&L->wv), .wo = tensor_of(&L->wo),
            .gate = tensor_of(&L->gate), .up = tensor_of(&L->up), .down = tensor_of(&L->down)};
    }
    bs_vk_dspark_desc nd = {
        .n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_ff = hp->n_ff, .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim, .n_vocab = hp->n_vocab, .n_taps = hp->n_taps,
        .block_size = hp->block_size, .eps = hp->eps, .tok_embd = tensor_of(&d->tok_embd),
        .output = tensor_of(&d->output), .fc = tensor_of(&d->fc), .output_norm = d->output_norm,
        .hidden_norm = d->hidden_norm, .snr_anchor = d->snr_anchor, .snr_mask = d->snr_mask, .layers = ld,
        .share = share, .share_embd = share && d->embd_borrowed, .share_output = share && d->output_borrowed,
        .markov_rank = hp->markov_rank};
    if (hp->markov_rank > 0) nd.markov_a = tensor_of(&d->markov_a), nd.markov_b = tensor_of(&d->markov_b);
    bs_vk_dspark *net = bs_vk_dspark_new(c, &nd);
    free(ld);
    return net;
}

/* Staying on the CPU for a fold the drafter's device path does not rotate: said once. */
static int stay_on_cpu(bs_dspark_dev *dev) {
    if (!dev->on_cpu_said) bs_log(1, "drafter: Hadamard-folded weights of its own: it runs on the CPU\n");
    dev->on_cpu_said = true;
    return 0;
}

int bs_dspark_to_device(const bs_dspark *d, const bs_model *target, const char *spec) {
    bs_dspark_dev *dev = d->dev;
    if (dev->net) return 0;
    /* Hadamard folds (Bonsai 2): the device rotates for the target's table and head, which a
     * drafter on the target's context shares with their folds (not a head whose product rounds
     * its input first: that rounding would need the rotated rows in a scratch of their own); a
     * fold of the drafter's own (its file's, or one taken with tensors it does not share there)
     * keeps it on the CPU */
    const bool shared = target && target->vk;
    const bool shared_head = shared && d->output_borrowed && !bs_vk_rounds_input(d->output.type, d->output.ne0);
    const bool folded = d->fold || (d->output.rot && !shared_head) || (d->tok_embd.rot && !(shared && d->embd_borrowed));
    if (folded && shared) return stay_on_cpu(dev);
    if (target && target->vk) {
        dev->ctx = target->vk;
        dev->own_ctx = false;
    } else {
        int kind, index;
        if (bs_vk_parse_device(spec ? spec : "vulkan", &kind, &index)) return -1;
        if (kind == BS_DEVICE_CPU) return 0;
        if (folded && kind == BS_DEVICE_VULKAN)
            return bs_error("--device %s: this drafter's Hadamard-folded weights run on the CPU only", spec ? spec : "vulkan");
        if (folded) return stay_on_cpu(dev);
        if (index < 0 && (index = bs_vk_pick(kind == BS_DEVICE_VULKAN)) < 0)
            return bs_error_prefix("drafter on %s: ", spec ? spec : "vulkan");
        if (!(dev->ctx = bs_vk_open(index))) return -1;
        dev->own_ctx = true;
    }
    if (!(dev->net = upload(d, dev->ctx, target && target->vk ? target->vk_net : NULL))) {
        if (dev->own_ctx) bs_vk_close(dev->ctx);
        dev->ctx = NULL;
        return -1;
    }
    return 0;
}

bool bs_dspark_on_device(const bs_dspark *d) { return d->dev && d->dev->net; }

bs_dspark_dev *bs_dspark_dev_new(void) { return bs_xcalloc(1, sizeof(bs_dspark_dev)); }

void bs_dspark_dev_free(bs_dspark_dev *dev) {
    if (!dev) return;
    for (int i = 0; i < BS_VK_DRAFT_BLOCKS; i++) free(dev->col.rope[i]);
    bs_vk_dspark_free(dev->net);
    if (dev->own_ctx) bs_vk_close(dev->ctx);
    free(dev);
}

bs_vk_dctx *bs_dspark_dev_ctx_new(const bs_dspark *d, int n_rows_max) {
    return bs_vk_dctx_new(d->dev->net, n_rows_max);
}

int bs_dspark_dev_max_blocks(const bs_dspark *d) { return bs_vk_dspark_max_blocks(d->dev->net); }

int bs_dspark_dev_flush(const bs_dspark *d) {
    collected *col = &d->dev->col;
    const int n = col->n;
    col->n = 0;
    return n ? bs_vk_dctx_append_multi(col->a, n) : 0;
}

int bs_dspark_collect(const bs_dspark *d, bool on) {
    if (!d->dev) return 0;
    d->dev->col.on = on;
    return on ? 0 : bs_dspark_dev_flush(d);
}

int bs_dspark_dev_append(const bs_dspark *d, bs_vk_dctx *s, const bs_vk_sess *sess, int n, int row0, const float *rope,
                         int max_rows) {
    collected *col = &d->dev->col;
    if (!col->on) return bs_vk_dctx_append_sess(s, sess, 0, n, row0, rope);
    bool again = col->n == BS_VK_DRAFT_BLOCKS;
    for (int i = 0; i < col->n && !again; i++) again = col->a[i].s == s;
    if (again && bs_dspark_dev_flush(d)) return -1;   /* (a context once a pass, in its order) */
    const size_t D = (size_t)d->hp.head_dim;
    float **r = &col->rope[col->n];
    if (!*r) *r = bs_xmalloc(sizeof **r * D * (size_t)max_rows);
    memcpy(*r, rope, sizeof **r * D * (size_t)n);
    col->a[col->n++] = (bs_vk_dappend){s, sess, n, row0, *r};
    return 0;
}
