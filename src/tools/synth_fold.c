/* synth_fold.c: `synth --hadamard B`, a target stored with PrismML's Hadamard fold, as Bonsai 2
 * files are (model/hadamard.h): the same model as without the option, each foldable matrix row
 * stored rotated, w' = H (s * P w), and the token table's rows too (the loader rotates them
 * back), with the prism.hadamard.* keys that say so. In float types the two files give the same
 * logits up to rounding, which is what the tests hold the loader and the rotation to; quantized,
 * the rotated values are what gets quantized, as in a real folded file. */
#include "tools/synth_impl.h"
#include "cpu/compute.h"
#include "model/hadamard.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

bool synth_folded(const bs_synth_config *c, const synth_tensor *t) {
    return c->hadamard && t->fill == SYNTH_MATRIX && (bs_hadamard_foldable(t->name, false) || !strcmp(t->name, "token_embd.weight"));
}

/* The distinct input widths of the folded matrices, in the plan's order. */
int synth_fold_widths(const bs_synth_config *c, const synth_plan *p, int64_t *widths, int max) {
    int n = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (!synth_folded(c, &p->t[i])) continue;
        bool seen = false;
        for (int k = 0; k < n; k++) seen = seen || widths[k] == p->t[i].ne[0];
        if (!seen && n < max) widths[n++] = p->t[i].ne[0];
    }
    return n;
}

/* The +-1 vector of one width: its own stream, so it does not depend on the other widths. */
void synth_fold_signs(const bs_synth_config *c, int64_t width, float *out) {
    bs_rng r;
    bs_rng_seed(&r, (c->seed * 0x9e3779b97f4a7c15ull) ^ (0x5bd1e995ull * (uint64_t)width) ^ 0x48414441ull);
    for (int64_t i = 0; i < width; i += 64) {
        const uint64_t bits = bs_rng_next(&r);
        for (int64_t k = 0; k < 64 && i + k < width; k++) out[i + k] = (bits >> k) & 1 ? -1.0f : 1.0f;
    }
}

int synth_fold_check(const bs_synth_config *c, const synth_plan *p) {
    if (!c->hadamard) return 0;
    if (c->arch != BS_SYNTH_QWEN35) return bs_error("--hadamard folds targets only");
    if (c->hadamard < 2 || (c->hadamard & (c->hadamard - 1)))
        return bs_error("--hadamard %d: the block must be a power of two", c->hadamard);
    for (size_t i = 0; i < p->n; i++)
        if (synth_folded(c, &p->t[i]) && p->t[i].ne[0] % c->hadamard)
            return bs_error("--hadamard %d does not divide the %lld inputs of %s", c->hadamard,
                            (long long)p->t[i].ne[0], p->t[i].name);
    return 0;
}

void synth_fold_keys(gguf_writer *w, const bs_synth_config *c, const synth_plan *p) {
    if (!c->hadamard) return;
    int64_t widths[16];
    const int nw = synth_fold_widths(c, p, widths, 16);
    int64_t total = 0;
    for (int i = 0; i < nw; i++) total += widths[i];
    int32_t *wi = bs_xmalloc((size_t)nw * sizeof *wi), *sv = bs_xmalloc((size_t)total * sizeof *sv);
    float *s = bs_xmalloc((size_t)total * sizeof *s);
    int64_t at = 0;
    for (int i = 0; i < nw; i++) {
        wi[i] = (int32_t)widths[i];
        synth_fold_signs(c, widths[i], s + at);
        at += widths[i];
    }
    for (int64_t i = 0; i < total; i++) sv[i] = s[i] > 0 ? 1 : -1;
    const char **names = bs_xmalloc(p->n * sizeof *names);
    uint64_t nn = 0;
    for (size_t i = 0; i < p->n; i++)
        if (synth_folded(c, &p->t[i]) && bs_hadamard_foldable(p->t[i].name, false)) names[nn++] = p->t[i].name;
    const char *inverse[] = {"token_embd.weight"};
    gguf_w_set_u32(w, "prism.hadamard.version", 1);
    gguf_w_set_u32(w, "prism.hadamard.block_size", (uint32_t)c->hadamard);
    gguf_w_set_str(w, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
    gguf_w_set_str(w, "prism.hadamard.axis", "input-last-dimension");
    gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_widths", wi, (uint64_t)nw);
    gguf_w_set_arr_i32(w, "prism.hadamard.sign_values", sv, (uint64_t)total);
    gguf_w_set_arr_str(w, "prism.hadamard.weight_names", names, nn);
    gguf_w_set_arr_str(w, "prism.hadamard.inverse_weight_names", inverse, 1);
    gguf_w_set_bool(w, "prism.hadamard.gdn_v_grouped", true);
    free(names), free(s), free(sv), free(wi);
}

/* The rotation a folded tensor's rows are stored with (the weight side of the fold is the
 * activation side's forward rotation applied to each row): r filled, its signs returned for the
 * caller to free. */
float *synth_fold_rotation(const bs_synth_config *c, const synth_tensor *t, bs_rotation *r) {
    float *signs = bs_xmalloc((size_t)t->ne[0] * sizeof *signs);
    synth_fold_signs(c, t->ne[0], signs);
    *r = (bs_rotation){.block = c->hadamard, .width = t->ne[0], .signs = signs};
    if (bs_ends_with(t->name, ".ssm_out.weight")) {
        r->perm_hd = (int)c->ssm_head_dim;
        r->perm_nk = (int)c->ssm_k_heads;
        r->perm_rep = (int)(c->ssm_v_heads / c->ssm_k_heads);
    }
    return signs;
}
