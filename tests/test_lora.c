/* test_lora: LoRA adapters. A random adapter (GGUF, and the same deltas as a PEFT safetensors
 * adapter in HF names and head order) on the tiny model: applied at run time it matches the
 * model merged offline in F32 (<= 1e-4 relative L2 per logits row), both adapter formats give
 * the same logits, and `lora merge --type q1_0` reports exactly the sign flips and scale changes
 * counted directly from the two files' Q1_0 blocks. Alphas that are not finite floats and a
 * merge onto a PEFT adapter's own config are refused. */
#include "test.h"
#include "model/lora.h"
#include "model/qwen35.h"
#include "formats/quant.h"
#include "io/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define R 4
#define ALPHA 8.0f
#define USER_SCALE 0.7f

static const char *bin, *fx, *tmp;

static const char *targets[] = {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight",
                                "blk.1.ssm_out.weight", "blk.3.attn_q.weight", "blk.2.ffn_down.weight",
                                "output.weight"};
static const char *hf_names[] = {"model.layers.0.linear_attn.in_proj_qkv", "model.layers.0.linear_attn.in_proj_z",
                                 "model.layers.0.linear_attn.in_proj_b", "model.layers.1.linear_attn.out_proj",
                                 "model.layers.3.self_attn.q_proj", "model.layers.2.mlp.down_proj", "lm_head"};
#define NT ((int)BS_ARRAY_LEN(targets))

typedef struct { int64_t in, out; float *a, *b; } delta;   /* a [R][in], b [out][R], GGUF order */

/* The base's DeltaNet heads: nk K heads of dk, nv V heads of dv (read from its metadata). */
static uint32_t nk, dk, nv, dv;

/* GGUF V head n is HF head (n % nk) * (nv / nk) + n / nk (arch §2.7) */
static int hf_of(int n) { return (n % (int)nk) * (int)(nv / nk) + n / (int)nk; }

static int read_heads(const gguf_file *f) {
    uint32_t inner;
    if (gguf_get_u32(f, "qwen35.ssm.group_count", &nk) || gguf_get_u32(f, "qwen35.ssm.time_step_rank", &nv) ||
        gguf_get_u32(f, "qwen35.ssm.state_size", &dk) || gguf_get_u32(f, "qwen35.ssm.inner_size", &inner) || !nk ||
        !nv || nv % nk || inner % nv)
        return -1;
    dv = inner / nv;
    return 0;
}

static void make_deltas(const gguf_file *base, delta *d) {
    bs_rng r;
    bs_rng_seed(&r, 123);
    for (int t = 0; t < NT; t++) {
        const gguf_tensor *x = gguf_find_tensor(base, targets[t]);
        d[t].in = x->ne[0];
        d[t].out = x->ne[1];
        d[t].a = malloc((size_t)R * d[t].in * sizeof(float));
        d[t].b = malloc((size_t)d[t].out * R * sizeof(float));
        for (int64_t i = 0; i < R * d[t].in; i++) d[t].a[i] = 0.08f * bs_rng_normal(&r);
        for (int64_t i = 0; i < d[t].out * R; i++) d[t].b[i] = 0.08f * bs_rng_normal(&r);
    }
}

static int write_gguf_adapter(const char *path, const delta *d, float alpha) {
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_str(w, "general.type", "adapter");
    gguf_w_set_str(w, "adapter.type", "lora");
    gguf_w_set_f32(w, "adapter.lora.alpha", alpha);
    for (int t = 0; t < NT; t++) {
        char n[256];
        int64_t nea[2] = {d[t].in, R}, neb[2] = {R, d[t].out};
        snprintf(n, sizeof n, "%s.lora_a", targets[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, nea);
        snprintf(n, sizeof n, "%s.lora_b", targets[t]);
        gguf_w_add_tensor(w, n, BS_F32, 2, neb);
    }
    for (int t = 0; t < NT; t++) {
        gguf_w_write(w, d[t].a, (size_t)R * d[t].in * sizeof(float));
        gguf_w_write(w, d[t].b, (size_t)d[t].out * R * sizeof(float));
    }
    return gguf_w_close(w);
}

/* The same deltas in HF head order as a PEFT adapter directory. */
static int write_peft_adapter(const char *dir, const delta *d) {
    char path[1024];
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path)) return -1;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %g, \"target_modules\": [\"in_proj_qkv\", "
               "\"in_proj_z\", \"in_proj_b\", \"out_proj\", \"q_proj\", \"down_proj\", \"lm_head\"], "
               "\"fan_in_fan_out\": false, \"use_rslora\": false}\n", R, (double)ALPHA);
    fclose(f);
    json_t *hdr = json_object();
    float *bufs[2 * NT];
    size_t sizes[2 * NT], off = 0;
    for (int t = 0; t < NT; t++) {
        float *a = malloc((size_t)R * d[t].in * sizeof(float)), *b = malloc((size_t)d[t].out * R * sizeof(float));
        memcpy(a, d[t].a, (size_t)R * d[t].in * sizeof(float));
        memcpy(b, d[t].b, (size_t)d[t].out * R * sizeof(float));
        /* GGUF -> HF head order */
        int64_t head = t == 2 ? 1 : (int64_t)dv, o = t == 0 ? 2 * (int64_t)nk * dk : 0;
        if (t <= 2)
            for (int n = 0; n < (int)nv; n++)
                memcpy(b + (o + hf_of(n) * head) * R, d[t].b + (o + n * head) * R, (size_t)(head * R) * sizeof(float));
        if (t == 3)
            for (int k = 0; k < R; k++)
                for (int n = 0; n < (int)nv; n++)
                    memcpy(a + k * d[t].in + hf_of(n) * dv, d[t].a + k * d[t].in + n * dv, dv * sizeof(float));
        char name[256];
        const char *pre = t == NT - 1 ? "base_model.model." : "base_model.model.";
        bufs[2 * t] = a, sizes[2 * t] = (size_t)R * d[t].in * sizeof(float);
        bufs[2 * t + 1] = b, sizes[2 * t + 1] = (size_t)d[t].out * R * sizeof(float);
        snprintf(name, sizeof name, "%s%s.lora_A.weight", pre, hf_names[t]);
        json_object_set_new(hdr, name, json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape", (json_int_t)R,
                                                 (json_int_t)d[t].in, "data_offsets", (json_int_t)off,
                                                 (json_int_t)(off + sizes[2 * t])));
        off += sizes[2 * t];
        snprintf(name, sizeof name, "%s%s.lora_B.weight", pre, hf_names[t]);
        json_object_set_new(hdr, name, json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape",
                                                 (json_int_t)d[t].out, (json_int_t)R, "data_offsets", (json_int_t)off,
                                                 (json_int_t)(off + sizes[2 * t + 1])));
        off += sizes[2 * t + 1];
    }
    char *h = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8;
    uint64_t n = hl + pad;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    f = fopen(path, "wb");
    fwrite(&n, 8, 1, f);
    fwrite(h, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    for (int i = 0; i < 2 * NT; i++) {
        fwrite(bufs[i], 1, sizes[i], f);
        free(bufs[i]);
    }
    fclose(f);
    free(h);
    return 0;
}

#define NTOK 12
static const int32_t toks[NTOK] = {1, 100, 257, 33, 900, 512, 7, 64, 300, 301, 302, 5};

/* Logits of every position: 8 tokens in one batch, then one at a time. */
static float *logits_of(bs_model *m) {
    const int V = bs_model_n_vocab(m);
    float *z = malloc((size_t)NTOK * V * sizeof *z);
    bs_session_params sp = {.n_ctx = 64, .n_threads = 1};
    bs_session *s = bs_session_new(m, &sp);
    bs_eval(s, toks, 8, BS_LOGITS_ALL, z, NULL);
    for (int i = 8; i < NTOK; i++) bs_eval(s, &toks[i], 1, BS_LOGITS_LAST, z + (size_t)i * V, NULL);
    bs_session_free(s);
    return z;
}

static double worst_rel(const float *a, const float *b, int V) {
    double worst = 0;
    for (int r = 0; r < NTOK; r++) {
        double num = 0, den = 0;
        for (int i = 0; i < V; i++) {
            double d = (double)a[(size_t)r * V + i] - b[(size_t)r * V + i];
            num += d * d;
            den += (double)b[(size_t)r * V + i] * b[(size_t)r * V + i];
        }
        worst = fmax(worst, sqrt(num / den));
    }
    return worst;
}

static void test_runtime_vs_merged(const char *adapter, const char *peft) {
    char base[1024], merged[1024], cmd[4096];
    snprintf(base, sizeof base, "%s/tiny-f32.gguf", fx);
    snprintf(merged, sizeof merged, "%s/lora_merged_f32.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' lora merge '%s' '%s:%g' -o '%s' > /dev/null", bin, base, adapter, (double)USER_SCALE, merged);
    CHECK_EQ_INT(system(cmd), 0);
    bs_model *m = bs_model_load(base, NULL), *mm = bs_model_load(merged, NULL);
    CHECK(m && mm);
    if (!m || !mm) return;
    const int V = bs_model_n_vocab(m);
    float *plain = logits_of(m);
    bs_lora *l = bs_lora_load(adapter, m->file);
    CHECK(l != NULL);
    if (!l) return;
    CHECK_EQ_INT(l->n, NT);
    CHECK(fabsf(l->t[0].scale - ALPHA / R) < 1e-7f);
    CHECK_EQ_INT(bs_lora_attach(m, l, USER_SCALE), 0);
    float *rt = logits_of(m), *mg = logits_of(mm);
    double e = worst_rel(rt, mg, V), effect = worst_rel(plain, mg, V);
    CHECKF(e <= 1e-4, "runtime LoRA vs merged F32: worst row rel L2 %.3g", e);
    CHECKF(effect > 1e-2, "the adapter changes the logits by only %.3g", effect);
    printf("runtime vs merged: %.3g (adapter effect %.3g)\n", e, effect);
    bs_lora_detach(m);
    /* the PEFT adapter (HF names, HF head order) gives the same logits */
    bs_lora *p = bs_lora_load(peft, m->file);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->n, NT);
        CHECK_EQ_INT(bs_lora_attach(m, p, USER_SCALE), 0);
        float *pz = logits_of(m);
        double ep = worst_rel(pz, rt, V);
        CHECKF(ep <= 1e-6, "PEFT vs GGUF adapter: %.3g", ep);
        free(pz);
        bs_lora_detach(m);
        bs_lora_free(p);
    }
    float *again = logits_of(m);   /* detached: the plain model again */
    CHECK(memcmp(again, plain, (size_t)NTOK * V * sizeof *again) == 0);
    free(again);
    free(plain), free(rt), free(mg);
    bs_lora_free(l);
    bs_model_free(m);
    bs_model_free(mm);
    /* run --lora works end to end */
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --lora '%s:%g' -p hello -n 4 --temp 0 -q -t 1 > /dev/null", bin, base,
             adapter, (double)USER_SCALE);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --lora '%s/nope.gguf' -p hello -n 4 -q 2> /dev/null", bin, base, tmp);
    CHECK(system(cmd) != 0);
}

static int popcount8(unsigned v) { int n = 0; for (; v; v &= v - 1) n++; return n; }

static void test_q1_report(const char *adapter) {
    char base[1024], merged[1024], cmd[4096];
    snprintf(base, sizeof base, "%s/tiny-q1_0.gguf", fx);
    snprintf(merged, sizeof merged, "%s/lora_merged_q1.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' lora merge '%s' '%s' -o '%s' --type q1_0", bin, base, adapter, merged);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    int st = pclose(p);
    CHECK_EQ_INT(st, 0);
    int seen = 0;
    unsigned long long all_flip = 0, all_n = 0;
    double all_chg = 0, all_sum = 0;
    gguf_file *fb = gguf_open(base, 0), *fm = gguf_open(merged, 0);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char name[256], from[32], to[32];
        double share, chg, cs;
        unsigned long long nf, nw;
        if (!strncmp(line, "total", 5)) {
            CHECK(sscanf(line, "total -> signs flipped %lf (%llu/%llu) scale change %lf", &share, &nf, &nw, &chg) == 4);
            CHECK_EQ_INT(nf, all_flip);
            CHECK_EQ_INT(nw, all_n);
            CHECKF(fabs(chg - all_chg / all_sum) <= 1e-9 * fmax(1e-12, all_chg / all_sum), "total scale change %g vs %g",
                   chg, all_chg / all_sum);
            continue;
        }
        if (sscanf(line, "%255s %31s -> %31s signs flipped %lf (%llu/%llu) scale change %lf cos(kept, intended delta) %lf",
                   name, from, to, &share, &nf, &nw, &chg, &cs) != 8)
            continue;
        seen++;
        CHECK(!strcmp(from, "q1_0") && !strcmp(to, "q1_0"));
        /* direct count from the 18-byte blocks: fp16 d, then 128 sign bits */
        const gguf_tensor *a = fb ? gguf_find_tensor(fb, name) : NULL, *b = fm ? gguf_find_tensor(fm, name) : NULL;
        CHECK(a && b && a->nbytes >= (uint64_t)(a->ne[0] * a->ne[1] / 128 * 18) && b->type == BS_Q1_0);
        if (!a || !b) continue;
        const uint8_t *x = a->data, *y = b->data;
        uint64_t flips = 0, nb = (uint64_t)(a->ne[0] * a->ne[1] / 128);
        double dchg = 0, dsum = 0;
        for (uint64_t k = 0; k < nb; k++) {
            for (int j = 2; j < 18; j++) flips += (uint64_t)popcount8(x[k * 18 + j] ^ y[k * 18 + j]);
            uint16_t h0, h1;
            memcpy(&h0, x + k * 18, 2);
            memcpy(&h1, y + k * 18, 2);
            dchg += fabs((double)bs_f16_to_f32(h1) - bs_f16_to_f32(h0));
            dsum += bs_f16_to_f32(h0);
        }
        CHECKF(nf == flips, "%s: reported %llu flips, counted %llu", name, nf, (unsigned long long)flips);
        CHECK_EQ_INT(nw, nb * 128);
        CHECKF(fabs(chg - dchg / dsum) <= 1e-9 * (dchg / dsum) + 1e-15, "%s: scale change %.9g vs %.9g", name, chg, dchg / dsum);
        CHECK(fabs(share - (double)flips / (double)(nb * 128)) < 1e-6);
        all_flip += flips, all_n += nb * 128, all_chg += dchg, all_sum += dsum;
    }
    CHECK_EQ_INT(seen, NT);
    CHECKF(all_flip > 0 && all_chg > 0, "the adapter flipped %llu signs: test too weak", all_flip);
    /* tensors without a delta are copied byte for byte */
    const gguf_tensor *a = fb ? gguf_find_tensor(fb, "blk.1.ffn_up.weight") : NULL;
    const gguf_tensor *b = fm ? gguf_find_tensor(fm, "blk.1.ffn_up.weight") : NULL;
    CHECK(a && b && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes));
    gguf_close(fb);
    gguf_close(fm);
}

/* An alpha that is not a finite float (NaN in a GGUF, 1e39 in a PEFT config) would make every
 * merged weight NaN: refused at load. `lora merge` onto a PEFT adapter's config (read beside
 * its tensors) is refused and leaves the config as it was. */
static void test_refusals(const char *base, const char *peft) {
    char path[2048], dir[1024], cmd[16384];
    snprintf(path, sizeof path, "%s/lora_test_nan.gguf", tmp);
    bs_clear_error();
    CHECK(bs_lora_load(path, NULL) == NULL);
    CHECKF(strstr(bs_last_error(), "finite") != NULL, "NaN alpha: %s", bs_last_error());
    snprintf(dir, sizeof dir, "%s/lora_test_peft_big", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s' && ln -s '%s/adapter_model.safetensors' '%s/' && "
             "echo '{\"r\": %d, \"lora_alpha\": 1e39}' > '%s/adapter_config.json'", dir, dir, peft, dir, R, dir);
    CHECK_EQ_INT(system(cmd), 0);
    bs_clear_error();
    CHECK(bs_lora_load(dir, NULL) == NULL);
    CHECKF(strstr(bs_last_error(), "finite") != NULL, "lora_alpha 1e39: %s", bs_last_error());
    snprintf(path, sizeof path, "%s/adapter_config.json", peft);
    size_t n0, n1;
    char *before = bs_read_file(path, &n0);
    snprintf(cmd, sizeof cmd, "'%s' lora merge '%s' '%s/adapter_model.safetensors' -o '%s' 2> /dev/null", bin, base, peft, path);
    CHECK(system(cmd) != 0);
    char *after = bs_read_file(path, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
    free(before), free(after);
}

/* Random deltas of the base's shapes written as a GGUF adapter (and as a PEFT directory when
 * peft is given); -1 with a failed check when the base cannot be read. */
static int make_adapter(const char *base, const char *adapter, const char *peft) {
    gguf_file *f = gguf_open(base, 0);
    CHECKF(f != NULL, "%s: %s", base, bs_last_error());
    if (!f) return -1;
    bool ok = read_heads(f) == 0;
    CHECKF(ok, "%s: no DeltaNet head counts", base);
    delta d[NT];
    if (ok) make_deltas(f, d);
    gguf_close(f);
    if (!ok) return -1;
    CHECK_EQ_INT(write_gguf_adapter(adapter, d, ALPHA), 0);
    if (peft) {
        CHECK_EQ_INT(write_peft_adapter(peft, d), 0);
        char nan_path[1024];   /* the same adapter with a NaN alpha, for test_refusals */
        snprintf(nan_path, sizeof nan_path, "%s/lora_test_nan.gguf", tmp);
        CHECK_EQ_INT(write_gguf_adapter(nan_path, d, NAN), 0);
    }
    for (int t = 0; t < NT; t++) free(d[t].a), free(d[t].b);
    return 0;
}

int main(void) {
    fx = getenv("BS_FIXTURES");
    bin = getenv("BITSPARK");
    tmp = getenv("BS_TMP");
    if (!fx) fx = "tests/fixtures";
    if (!tmp) tmp = "/tmp";
    if (!bin) { fprintf(stderr, "BITSPARK is not set\n"); return 1; }
    char base[1024], adapter[1024], peft[1024], q1[1024], adapter_q1[1024];
    snprintf(base, sizeof base, "%s/tiny-f32.gguf", fx);
    snprintf(adapter, sizeof adapter, "%s/lora_test_adapter.gguf", tmp);
    snprintf(peft, sizeof peft, "%s/lora_test_peft", tmp);
    snprintf(q1, sizeof q1, "%s/tiny-q1_0.gguf", fx);
    snprintf(adapter_q1, sizeof adapter_q1, "%s/lora_test_adapter_q1.gguf", tmp);
    /* tiny-q1_0 is wider than tiny-f32 (the fixtures README): each gets an adapter of its shapes */
    if (make_adapter(q1, adapter_q1, NULL) || make_adapter(base, adapter, peft)) return test_summary("test_lora");
    test_runtime_vs_merged(adapter, peft);
    test_q1_report(adapter_q1);
    test_refusals(base, peft);
    /* a bad adapter is refused with an error, not a crash */
    CHECK(bs_lora_load(base, NULL) == NULL);
    return test_summary("test_lora");
}
