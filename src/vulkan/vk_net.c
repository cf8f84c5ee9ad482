/* vk_net.c: the model's weights on the device: upload (the mixer's input products as one
 * layout where they share a format), LoRA adapters, and sleep (the weights given back and made
 * again in the same structs, so sessions' pointers stay valid). */
#include "vulkan/vk_net.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

/* Upload t into *m and give it its fold's rotation (the fold stays with the matrix through sleep). */
static int upload(bs_vk_net *net, bs_vk_matrix **m, const bs_vk_tensor *t) {
    if (bs_vk_upload_mat(net->c, m, t)) return -1;
    if (t->fold.block && !((*m)->rot = bs_vk_rot_get(net->c, net->rots, &net->n_rots, &t->fold))) return -1;
    return 0;
}

/* A mixer's input products: one layout where they share a format and a fold (bs_vk_upload_inputs:
 * in a folded model alpha and beta, which take x as it is, stay apart), each with its fold. */
static int upload_inputs(bs_vk_net *net, bs_vk_matrix **lay, const bs_vk_tensor *const *t, bs_vk_matrix **const *m, int n) {
    if (bs_vk_upload_inputs(net->c, lay, t, m, n)) return -1;
    for (int i = 0; i < n; i++)
        if (t[i]->fold.block && !((*m[i])->rot = bs_vk_rot_get(net->c, net->rots, &net->n_rots, &t[i]->fold))) return -1;
    return 0;
}

static bool folded(const bs_vk_net_desc *d) {
    if (d->tok_embd.fold.block || d->output.fold.block) return true;
    for (int il = 0; il < d->n_layer; il++) {
        const bs_vk_layer_desc *l = &d->layers[il];
        const bs_vk_tensor *t[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->qkv, &l->gate, &l->beta, &l->alpha,
                                   &l->ssm_out, &l->wq, &l->wk, &l->wv, &l->wo};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            if (t[i]->fold.block) return true;
    }
    return false;
}

static int upload_layer(bs_vk_net *net, vk_layer *L, const bs_vk_layer_desc *d) {
    bs_vk_ctx *c = net->c;
    const bs_vk_net_desc *hp = &net->hp;
    const size_t E = (size_t)hp->n_embd;
    L->rec = d->recurrent;
    L->slot = d->recurrent ? net->n_rec++ : net->n_att++;
    if (bs_vk_upload_vec(c, &L->attn_norm, d->attn_norm, E) || bs_vk_upload_vec(c, &L->post_norm, d->post_norm, E) ||
        upload(net, &L->ffn_gate, &d->ffn_gate) || upload(net, &L->ffn_up, &d->ffn_up) ||
        upload(net, &L->ffn_down, &d->ffn_down))
        return -1;
    if (d->recurrent) {
        const int nv = hp->n_v_heads;
        float *g = bs_xmalloc(sizeof *g * 2 * (size_t)nv);
        memcpy(g, d->dt_bias, sizeof *g * (size_t)nv);
        memcpy(g + nv, d->ssm_a, sizeof *g * (size_t)nv);
        int rc = bs_vk_upload_vec(c, &L->gates, g, 2 * (size_t)nv);
        free(g);
        const bs_vk_tensor *t[4] = {&d->qkv, &d->gate, &d->beta, &d->alpha};
        bs_vk_matrix **m[4] = {&L->qkv, &L->gate, &L->beta, &L->alpha};
        return rc || upload_inputs(net, &L->cat, t, m, 4) || upload(net, &L->ssm_out, &d->ssm_out) ||
               bs_vk_upload_vec(c, &L->conv1d, d->conv1d, (size_t)hp->conv_dim * hp->conv_kernel) ||
               bs_vk_upload_vec(c, &L->ssm_norm, d->ssm_norm, (size_t)hp->d_v) ? -1 : 0;
    }
    const bs_vk_tensor *t[3] = {&d->wq, &d->wk, &d->wv};
    bs_vk_matrix **m[3] = {&L->wq, &L->wk, &L->wv};
    return upload_inputs(net, &L->cat, t, m, 3) || upload(net, &L->wo, &d->wo) || bs_vk_upload_vec(c, &L->q_norm, d->q_norm, (size_t)hp->head_dim) ||
           bs_vk_upload_vec(c, &L->k_norm, d->k_norm, (size_t)hp->head_dim) ? -1 : 0;
}

bs_vk_net *bs_vk_net_new(bs_vk_ctx *c, const bs_vk_net_desc *d) {
    if (d->conv_kernel < 2 || d->conv_kernel > MAX_CONV_K || d->head_dim > MAX_HEAD_DIM || d->head_dim % 2 ||
        d->n_rot > d->head_dim || d->n_rot % 2 || (d->n_head_kv * d->head_dim) % 2 || d->d_k > MAX_HEAD_DIM) {
        bs_error("Vulkan: the kernels do not take this shape (conv kernel %d, head dim %d, rope dims %d, d_k %d)",
                 d->conv_kernel, d->head_dim, d->n_rot, d->d_k);
        return NULL;
    }
    if (bs_vk_mem_check(c, bs_vk_desc_bytes(d), "the model")) return NULL;
    bs_vk_net *n = bs_xcalloc(1, sizeof *n);
    n->c = c;
    n->hp = *d;
    n->hp.layers = NULL;
    n->no_gluq = bs_env_flag("BITSPARK_VK_NO_GLUQ");
    n->no_qk = bs_env_flag("BITSPARK_VK_NO_QK");
    n->no_attq = bs_env_flag("BITSPARK_VK_NO_ATTQ");
    n->no_attf = bs_env_flag("BITSPARK_VK_NO_ATTF");
    n->no_normo = bs_env_flag("BITSPARK_VK_NO_NORMO");
    n->no_gdnf = bs_env_flag("BITSPARK_VK_NO_GDNF");
    /* a folded model: no fusion that quantizes a folded product's input in the step before it
       but the norms' rotation (vk_forward.c checks each product's fold) */
    n->folded = folded(d);
    n->no_normrot = bs_env_flag("BITSPARK_VK_NO_NORMROT");
    n->no_pair = bs_env_flag("BITSPARK_VK_NO_PAIR");
    n->no_normfin = bs_env_flag("BITSPARK_VK_NO_NORMFIN");
    /* a batch's conv and delta rule: one dispatch for its sequences on a GPU; on a CPU device,
     * whose delta rule walks the state in memory, a dispatch per sequence (lavapipe: the state
     * reads through the sequences' bindings made 8 sessions' passes 35% slower); the same bits
     * either way; BITSPARK_VK_SEQ=together|apart */
    const char *sq = getenv("BITSPARK_VK_SEQ");
    n->seq_together = sq ? strcmp(sq, "apart") != 0 : bs_vk_delta_spread(c) == 8;
    n->no_split = bs_env_flag("BITSPARK_VK_NO_SPLIT");
    /* 256 positions: at a 32k context 128 chunks per KV head fill a large GPU, and a chunk's
       partials (G heads of D + 2 floats) are ~2% of the K/V bytes it reads (tests: smaller) */
    const char *ch = getenv("BITSPARK_VK_ATTN_CHUNK");
    n->attn_chunk = ch && atoi(ch) > 0 ? atoi(ch) : 256;
    n->L = bs_xcalloc((size_t)d->n_layer, sizeof *n->L);
    int rc = upload(n, &n->embd, &d->tok_embd) || upload(n, &n->output, &d->output) ||
             bs_vk_upload_vec(c, &n->out_norm, d->output_norm, (size_t)d->n_embd);
    for (int il = 0; il < d->n_layer && !rc; il++) rc = upload_layer(n, &n->L[il], &d->layers[il]);
    if (rc) {
        bs_error_prefix("Vulkan: uploading the model: ");
        bs_vk_net_free(n);
        return NULL;
    }
    bs_vk_mem_report(c, "the model");
    return n;
}

void bs_vk_net_free(bs_vk_net *n) {
    if (!n) return;
    bs_vk_ctx *c = n->c;
    for (int il = 0; il < n->hp.n_layer; il++) {
        vk_layer *L = &n->L[il];
        bs_vk_matrix *ms[] = {L->ffn_gate, L->ffn_up, L->ffn_down, L->qkv, L->gate, L->beta, L->alpha, L->ssm_out,
                              L->wq, L->wk, L->wv, L->wo};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) bs_vk_matrix_free(c, ms[i]);
        bs_vk_matrix_free(c, L->cat);   /* after the matrices that borrow its buffers */
        bs_vk_buf *bs[] = {&L->attn_norm, &L->post_norm, &L->conv1d, &L->gates, &L->ssm_norm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) bs_vk_buf_free(c, bs[i]);
    }
    bs_vk_matrix_free(c, n->embd);
    bs_vk_matrix_free(c, n->output);
    bs_vk_buf_free(c, &n->out_norm);
    bs_vk_buf_free(c, &n->rp_cc);
    bs_vk_buf_free(c, &n->rp_d);
    bs_vk_rots_free(c, n->rots, n->n_rots);
    free(n->L);
    free(n);
}

/* --- LoRA adapters ---------------------------------------------------------------------------- */
static bs_vk_matrix *matrix_named(bs_vk_net *n, const char *name) {
    if (n->output->name && !strcmp(n->output->name, name)) return n->output;
    for (int il = 0; il < n->hp.n_layer; il++) {
        vk_layer *L = &n->L[il];
        bs_vk_matrix *ms[] = {L->ffn_gate, L->ffn_up, L->ffn_down, L->qkv, L->gate, L->beta, L->alpha, L->ssm_out,
                              L->wq, L->wk, L->wv, L->wo};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++)
            if (ms[k] && ms[k]->name && !strcmp(ms[k]->name, name)) return ms[k];
    }
    return NULL;
}

int bs_vk_net_lora(bs_vk_net *n, const char *name, int r, const float *a, const float *b, float scale) {
    bs_vk_matrix *m = matrix_named(n, name);
    if (!m) return bs_error("Vulkan: LoRA tensor %s: the network has no such matrix", name);
    bs_vk_idle(n->c);   /* a step decoded ahead may still run with the adapters as they were */
    if (r <= 0 || bs_vk_matrix_lora_add(n->c, m, r, a, b, scale)) return -1;
    n->lora_r = BS_MAX(n->lora_r, r);
    n->lora_gen++;
    return 0;
}

void bs_vk_net_lora_clear(bs_vk_net *n) {
    bs_vk_idle(n->c);   /* the buffers freed here may be bound by a step still running */
    bs_vk_matrix_lora_clear(n->c, n->output);
    for (int il = 0; il < n->hp.n_layer; il++) {
        vk_layer *L = &n->L[il];
        bs_vk_matrix *ms[] = {L->ffn_gate, L->ffn_up, L->ffn_down, L->qkv, L->gate, L->beta, L->alpha, L->ssm_out,
                              L->wq, L->wk, L->wv, L->wo};
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++)
            if (ms[k]) bs_vk_matrix_lora_clear(n->c, ms[k]);
    }
    n->lora_r = 0;
    n->lora_gen++;
}

/* --- sleep ---------------------------------------------------------------------------------- */
typedef int (*layer_fn)(bs_vk_net *n, vk_layer *L, const bs_vk_layer_desc *d);

/* A layer's weight matrices given back (the layouts after the matrices that borrow them). */
static int release_layer(bs_vk_net *n, vk_layer *L, const bs_vk_layer_desc *d) {
    (void)d;
    bs_vk_matrix *ms[] = {L->ffn_gate, L->ffn_up, L->ffn_down, L->qkv, L->gate, L->beta, L->alpha, L->ssm_out,
                          L->wq, L->wk, L->wv, L->wo, L->cat};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) bs_vk_matrix_release(n->c, ms[i]);
    return 0;
}

/* A layer's weight matrices made again from d, in the same structs. */
static int refill_layer(bs_vk_net *n, vk_layer *L, const bs_vk_layer_desc *d) {
    bs_vk_matrix *ms[] = {L->ffn_gate, L->ffn_up, L->ffn_down, L->qkv, L->gate, L->beta, L->alpha, L->ssm_out,
                          L->wq, L->wk, L->wv, L->wo};
    const bs_vk_tensor *ts[] = {&d->ffn_gate, &d->ffn_up, &d->ffn_down, &d->qkv, &d->gate, &d->beta, &d->alpha, &d->ssm_out,
                                &d->wq, &d->wk, &d->wv, &d->wo};
    const bs_vk_tensor *ct[BS_VK_CAT_MAX];
    bs_vk_matrix *cm[BS_VK_CAT_MAX];
    int nc = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        if (!ms[i]) continue;
        if (ms[i]->borrowed) {   /* in the layout, in its order (bs_vk_upload_inputs) */
            ct[nc] = ts[i];
            cm[nc++] = ms[i];
        } else if (bs_vk_matrix_refill(n->c, ms[i], ts[i])) {
            return -1;
        }
    }
    return L->cat ? bs_vk_matrix_cat_refill(n->c, L->cat, ct, nc, cm) : 0;
}

static int each_layer(bs_vk_net *n, const bs_vk_net_desc *d, layer_fn f) {
    for (int il = 0; il < n->hp.n_layer; il++)
        if (f(n, &n->L[il], d ? &d->layers[il] : NULL)) return -1;
    return 0;
}

int bs_vk_net_sleep(bs_vk_net *n) {
    if (n->asleep) return 0;
    if (n->n_sess > 0) return bs_error("Vulkan: %d sessions still use the weights", n->n_sess);
    if (n->lora_r > 0) return bs_error("Vulkan: adapters are attached");
    each_layer(n, NULL, release_layer);
    bs_vk_matrix_release(n->c, n->embd);
    bs_vk_matrix_release(n->c, n->output);
    n->asleep = true;
    bs_vk_mem_report(n->c, "the model asleep");
    return 0;
}

int bs_vk_net_wake(bs_vk_net *n, const bs_vk_net_desc *d) {
    if (!n->asleep) return 0;
    if (d->n_layer != n->hp.n_layer) return bs_error("Vulkan: the model changed while asleep");
    if (each_layer(n, d, refill_layer) || bs_vk_matrix_refill(n->c, n->embd, &d->tok_embd) ||
        bs_vk_matrix_refill(n->c, n->output, &d->output)) {
        bs_error_prefix("Vulkan: uploading the weights again: ");
        each_layer(n, NULL, release_layer);   /* all or nothing: still asleep */
        bs_vk_matrix_release(n->c, n->embd);
        bs_vk_matrix_release(n->c, n->output);
        return -1;
    }
    n->asleep = false;
    return 0;
}

bool bs_vk_net_asleep(const bs_vk_net *n) { return n->asleep; }

const bs_vk_matrix *bs_vk_net_embd(const bs_vk_net *n) { return n->embd; }
const bs_vk_matrix *bs_vk_net_output(const bs_vk_net *n) { return n->output; }
