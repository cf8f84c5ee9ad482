/* test_vulkan_lora: LoRA adapters on the Vulkan device (lavapipe in CI; skipped, exit 77,
 * without a device). A random adapter on every kind of product the tiny models have (the
 * DeltaNet's qkv and gate, an attention q, the FFN's gate, up and down, the output head) with
 * the same deltas on the CPU and on the device:
 *  - the device's logits with the adapter agree with the CPU's with it: on the F32 model within
 *    1e-4 relative L2 per row; on the 1-bit model within the fixtures' quantized bound (6e-2),
 *    since the adapter reads the float activations, whose last bits may differ between the two
 *    paths (the int8 ones the products read do not): where that flips one int8 rounding, at a
 *    position that moves with the tokens, the recurrent state carries it to every later
 *    position (rows before it agree to 4e-8); the adapter moves the logits by far more (> 10x
 *    the gap, and > 1e-2);
 *  - a row's logits do not depend on the batching (8 rows then one at a time = one at a time,
 *    bit for bit), with the adapter's gate/up outside the fused GLU;
 *  - detaching gives the device's plain logits back, bit for bit, in a session that already ran
 *    with the adapter (its recorded steps are dropped), and attaching twice adds both terms. */
#include "test.h"
#include "vk_test.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "tools/synth.h"
#include "formats/gguf.h"
#include "formats/quant.h"
#include "io/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 4
#define NTOK 12
static const int32_t toks[NTOK] = {1, 100, 257, 33, 900, 512, 7, 64, 300, 301, 302, 5};
static const char *targets[] = {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.3.attn_q.weight",
                                "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.2.ffn_down.weight",
                                "blk.0.ssm_out.weight", "blk.3.attn_output.weight", "output.weight"};
#define NT ((int)BS_ARRAY_LEN(targets))

static int write_adapter(const char *base, const char *path) {
    gguf_file *f = gguf_open(base, 0);
    if (!f) return -1;
    bs_rng r;
    bs_rng_seed(&r, 77);
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_str(w, "general.type", "adapter");
    gguf_w_set_str(w, "adapter.type", "lora");
    gguf_w_set_f32(w, "adapter.lora.alpha", 8.0f);
    int64_t in[NT], out[NT];
    for (int t = 0; t < NT; t++) {
        const gguf_tensor *x = gguf_find_tensor(f, targets[t]);
        if (!x) { gguf_close(f); return -1; }
        in[t] = x->ne[0];
        out[t] = x->ne[1];
        char n[256];
        int64_t nea[2] = {in[t], R}, neb[2] = {R, out[t]};
        snprintf(n, sizeof n, "%s.lora_a", targets[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, nea);
        snprintf(n, sizeof n, "%s.lora_b", targets[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, neb);
    }
    gguf_close(f);
    for (int t = 0; t < NT; t++) {
        const size_t na = (size_t)R * in[t], nb = (size_t)out[t] * R;
        float *v = malloc(sizeof *v * (na > nb ? na : nb));
        for (size_t i = 0; i < na; i++) v[i] = 0.08f * bs_rng_normal(&r);
        gguf_w_write(w, v, na * sizeof *v);
        for (size_t i = 0; i < nb; i++) v[i] = 0.08f * bs_rng_normal(&r);
        gguf_w_write(w, v, nb * sizeof *v);
        free(v);
    }
    return gguf_w_close(w);
}

/* Logits of every position of toks: the first `batch` rows together, then one at a time. */
static float *logits_of(bs_session *s, int V, int batch) {
    float *z = malloc((size_t)NTOK * V * sizeof *z);
    bs_session_reset(s);
    if (batch > 1) bs_eval(s, toks, batch, BS_LOGITS_ALL, z, NULL);
    for (int i = batch > 1 ? batch : 0; i < NTOK; i++) bs_eval(s, &toks[i], 1, BS_LOGITS_LAST, z + (size_t)i * V, NULL);
    return z;
}

static double worst_rel(const float *a, const float *b, int V) {
    double worst = 0;
    for (int r = 0; r < NTOK; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < V; i++) {
            const double d = (double)a[(size_t)r * V + i] - b[(size_t)r * V + i];
            num += d * d;
            den += (double)b[(size_t)r * V + i] * b[(size_t)r * V + i];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    return worst;
}

/* Greedy decoding ahead (undo off) across an adapter attached between two steps: the step the
 * device ran ahead had no adapter, so it is not taken; what follows is a waited-for session's
 * (undo on) with the same history, bit for bit. */
static void check_ahead(bs_model *mv, bs_lora *l, const char *name, int V) {
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *g = bs_session_new(mv, &sp), *r = bs_session_new(mv, &sp);
    bs_session_set_undo(g, 0);
    int32_t cg = -1, cr = -1;
    CHECK(bs_eval_greedy(g, toks, 8, &cg, NULL) == 0 && bs_eval_greedy(r, toks, 8, &cr, NULL) == 0);
    for (int i = 0; i < 3; i++) CHECK(bs_eval_greedy(g, &cg, 1, &cg, NULL) == 0 && bs_eval_greedy(r, &cr, 1, &cr, NULL) == 0);
    CHECKF(cg == cr, "%s: decoding ahead gave %d, waited steps %d", name, cg, cr);
    CHECK_EQ_INT(bs_lora_attach(mv, l, 0.7f), 0);   /* a step ahead is under way in g */
    CHECK(bs_eval_greedy(g, &cg, 1, &cg, NULL) == 0 && bs_eval_greedy(r, &cr, 1, &cr, NULL) == 0);
    float *a = malloc(sizeof *a * (size_t)V), *b = malloc(sizeof *b * (size_t)V);
    CHECK(bs_eval(g, &cg, 1, BS_LOGITS_LAST, a, NULL) == 0 && bs_eval(r, &cr, 1, BS_LOGITS_LAST, b, NULL) == 0);
    CHECKF(cg == cr && !memcmp(a, b, sizeof *a * (size_t)V), "%s: after an adapter came, decoding ahead differs", name);
    bs_lora_detach(mv);
    free(a), free(b);
    bs_session_free(g);
    bs_session_free(r);
}

static void check_model(const char *dir, const char *tmp, const char *name, double bound) {
    char base[1024], ad[1024];
    snprintf(base, sizeof base, "%s/%s.gguf", dir, name);
    snprintf(ad, sizeof ad, "%s/vk_lora_%s.gguf", tmp, name);
    CHECK_EQ_INT(write_adapter(base, ad), 0);
    bs_model_params cpu = {.device = "cpu"}, dev = {.device = "vulkan"};
    bs_model *mc = bs_model_load(base, &cpu), *mv = bs_model_load(base, &dev);
    CHECK(mc && mv);
    if (!mc || !mv) { bs_model_free(mc); bs_model_free(mv); return; }
    const int V = bs_model_n_vocab(mc);
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *sc = bs_session_new(mc, &sp), *sv = bs_session_new(mv, &sp);
    float *plain_v = logits_of(sv, V, 8), *plain_c = logits_of(sc, V, 8);
    bs_lora *l = bs_lora_load(ad, mc->file);
    CHECK(l != NULL);
    if (l) {
        CHECK_EQ_INT(bs_lora_attach(mc, l, 0.7f), 0);
        CHECK_EQ_INT(bs_lora_attach(mv, l, 0.7f), 0);
        float *lc = logits_of(sc, V, 8), *lv = logits_of(sv, V, 8), *lv1 = logits_of(sv, V, 1);
        const double base_gap = worst_rel(plain_v, plain_c, V), gap = worst_rel(lv, lc, V), effect = worst_rel(lv, plain_v, V);
        printf("%s: device vs CPU without the adapter %.3g, with it %.3g; the adapter moves the device's logits by %.3g\n",
               name, base_gap, gap, effect);
        CHECKF(gap <= bound, "%s: device vs CPU with the adapter: %.3g", name, gap);
        CHECKF(effect > 1e-2 && effect > 10 * gap, "%s: the adapter moves the device's logits by only %.3g", name, effect);
        CHECKF(!memcmp(lv, lv1, (size_t)NTOK * V * sizeof *lv), "%s: with the adapter, logits depend on the batching", name);
        /* a second attachment of the same adapter adds its terms again, on both */
        CHECK_EQ_INT(bs_lora_attach(mc, l, 0.7f), 0);
        CHECK_EQ_INT(bs_lora_attach(mv, l, 0.7f), 0);
        float *lc2 = logits_of(sc, V, 8), *lv2 = logits_of(sv, V, 8);
        const double gap2 = worst_rel(lv2, lc2, V), moved = worst_rel(lv2, lv, V);
        CHECKF(gap2 <= bound && moved > 1e-2, "%s: two attachments: device vs CPU %.3g, moved %.3g", name, gap2, moved);
        bs_lora_detach(mc);
        bs_lora_detach(mv);
        float *again = logits_of(sv, V, 8);
        CHECKF(!memcmp(again, plain_v, (size_t)NTOK * V * sizeof *again), "%s: detached, the device's logits changed", name);
        check_ahead(mv, l, name, V);
        free(lc), free(lv), free(lv1), free(lc2), free(lv2), free(again);
        bs_lora_free(l);
    }
    free(plain_v), free(plain_c);
    bs_session_free(sc);
    bs_session_free(sv);
    bs_model_free(mc);
    bs_model_free(mv);
}

int main(void) {
    bs_vk_device_info info[8];
    const int nd = vk_test_devices(info, 8);
    if (nd < 0) return -nd;
    const char *fx = getenv("BS_FIXTURES"), *tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    check_model(fx, tmp, "tiny-q1_0", 6e-2);
    check_model(fx, tmp, "tiny-f32", 1e-4);
    /* a Hadamard-folded model (Bonsai 2): the terms read the input as it is, the product rotated */
    bs_synth_config c;
    bs_synth_preset("tiny", &c);
    c.seed = 3;
    c.matrix_type = c.embd_type = c.output_type = c.ssm_ab_type = BS_F32;
    c.hadamard = 64;
    bs_synth_derive(&c, false, false);
    char folded[1024];
    snprintf(folded, sizeof folded, "%s/vk_lora_folded.gguf", tmp);
    CHECKF(!bs_synth_validate(&c) && !bs_synth_write(&c, folded), "synth: %s", bitspark_last_error());
    check_model(tmp, tmp, "vk_lora_folded", 1e-4);
    CHECKF(bs_vk_validation_messages() == 0, "%d validation messages", bs_vk_validation_messages());
    return test_summary("test_vulkan_lora");
}
