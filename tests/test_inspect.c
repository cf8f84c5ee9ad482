/* test_inspect.c: model recognition of `bitspark inspect` on small files written with the GGUF
 * writer: the 27B naming (Bonsai-27B, Ternary-Bonsai-27B) from metadata + tensor layout, the
 * format summary (legacy Q2_0 + BF16 ssm_alpha/beta, extra token_embd/output types), drafters,
 * the generic fallback, and that text output comes from the same object. */
#include "formats/gguf.h"
#include "tools/inspect.h"
#include "formats/quant.h"
#include "io/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[1024];

/* A qwen35-shaped file: n_layer layers (every 4th attention), tiny tensors of the given types. */
static int write_qwen35(int n_layer, uint32_t n_embd, int mat, int ab, int out_type) {
    gguf_writer *w = gguf_w_open(path);
    if (!w) return -1;
    gguf_w_set_str(w, "general.architecture", "qwen35");
    gguf_w_set_u32(w, "qwen35.block_count", (uint32_t)n_layer);
    gguf_w_set_u32(w, "qwen35.embedding_length", n_embd);
    int64_t ne_m[2] = {1024, 2}, ne_v[1] = {4};  /* big enough that Q2_0 layouts are decisive */
    char name[64];
    uint64_t bytes = 0;
    gguf_w_add_tensor(w, "token_embd.weight", mat, 2, ne_m);
    gguf_w_add_tensor(w, "output.weight", out_type, 2, ne_m);
    bytes += bs_tensor_size(mat, 1024, 2) + bs_tensor_size(out_type, 1024, 2);
    for (int il = 0; il < n_layer; il++) {
        bool attn = il % 4 == 3;
        snprintf(name, sizeof name, attn ? "blk.%d.attn_q.weight" : "blk.%d.ssm_out.weight", il);
        gguf_w_add_tensor(w, name, mat, 2, ne_m);
        bytes += bs_tensor_size(mat, 1024, 2);
        if (attn) continue;
        snprintf(name, sizeof name, "blk.%d.ssm_a", il);
        gguf_w_add_tensor(w, name, BS_F32, 1, ne_v);
        snprintf(name, sizeof name, "blk.%d.ssm_alpha.weight", il);
        gguf_w_add_tensor(w, name, ab, 2, ne_m);
        bytes += 16 + bs_tensor_size(ab, 1024, 2);
    }
    uint8_t *zeros = calloc(1, bytes);
    int rc = gguf_w_write(w, zeros, bytes);
    free(zeros);
    return rc ? (gguf_w_abort(w), -1) : gguf_w_close(w);
}

static json_t *inspect(void) {
    gguf_file *f = gguf_open(path, GGUF_OPEN_META_ONLY);
    CHECKF(f != NULL, "%s", bs_last_error());
    if (!f) return NULL;
    json_t *info = bs_inspect_gguf(f);
    gguf_close(f);
    return info;
}

static void expect_desc(const char *want, const char *what) {
    json_t *info = inspect();
    const char *d = info ? bs_inspect_description(info) : "";
    CHECKF(strcmp(d, want) == 0, "%s: got '%s', want '%s'", what, d, want);
    /* the text report carries the same line */
    char *buf = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&buf, &n);
    if (info) bs_inspect_print(mem, info);
    fclose(mem);
    char line[600];
    snprintf(line, sizeof line, "model:    %s\n", want);
    CHECKF(buf && strstr(buf, line), "%s: text report lacks the description", what);
    free(buf);
    json_decref(info);
}

int main(void) {
    const char *t = getenv("BS_TMP");
    snprintf(path, sizeof path, "%s/test_inspect_%d.gguf", t && *t ? t : "/tmp", (int)getpid());
    CHECK(write_qwen35(64, 5120, BS_Q1_0, BS_Q1_0, BS_Q1_0) == 0);
    expect_desc("Bonsai-27B target (qwen35, 64 layers: 48 Gated DeltaNet + 16 attention), Q1_0", "bonsai");
    CHECK(write_qwen35(64, 5120, BS_Q2_0, BS_BF16, BS_Q2_0) == 0);
    expect_desc("Ternary-Bonsai-27B target (qwen35, 64 layers: 48 Gated DeltaNet + 16 attention), "
                "legacy Q2_0 (g128) + BF16 ssm_alpha/beta", "ternary");
    CHECK(write_qwen35(64, 5120, BS_Q2_0_G64, BS_BF16, BS_Q2_0_G64) == 0);
    expect_desc("Ternary-Bonsai-27B target (qwen35, 64 layers: 48 Gated DeltaNet + 16 attention), "
                "Q2_0 (g64) + BF16 ssm_alpha/beta", "ternary g64");
    CHECK(write_qwen35(8, 256, BS_Q1_0, BS_Q1_0, BS_Q6_K) == 0);
    expect_desc("qwen35 target (8 layers: 6 Gated DeltaNet + 2 attention), Q1_0 + Q6_K output", "q6k output");
    CHECK(write_qwen35(4, 256, BS_PQ2_0, BS_F32, BS_PQ2_0) == 0);
    expect_desc("qwen35 target (4 layers: 3 Gated DeltaNet + 1 attention), PQ2_0 (g128) + F32 ssm_alpha/beta", "pq2_0");
    CHECK(write_qwen35(64, 5120, BS_PTQ1_0, BS_BF16, BS_PTQ1_0) == 0);
    expect_desc("Ternary-Bonsai-27B target (qwen35, 64 layers: 48 Gated DeltaNet + 16 attention), "
                "PTQ1_0 (g128) + BF16 ssm_alpha/beta", "ptq1_0");
    CHECK(write_qwen35(4, 256, BS_PTQ1_0, BS_F32, BS_Q8_0) == 0);
    expect_desc("qwen35 target (4 layers: 3 Gated DeltaNet + 1 attention), PTQ1_0 (g128) + Q8_0 output + "
                "F32 ssm_alpha/beta", "ptq1_0 + q8_0 output");

    /* a drafter: q4_1 matrices with a q1_0 token_embd */
    gguf_writer *w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "dspark");
    gguf_w_set_u32(w, "dspark.block_count", 6);
    gguf_w_set_u32(w, "dspark.dspark.block_size", 4);
    gguf_w_set_u32(w, "dspark.dspark.mask_token_id", 248319);
    gguf_w_set_u32(w, "dspark.dspark.markov_rank", 256);
    int32_t taps[5] = {1, 16, 31, 46, 61};
    gguf_w_set_arr_i32(w, "dspark.dspark.target_layers", taps, 5);
    int64_t ne[2] = {256, 4};
    gguf_w_add_tensor(w, "token_embd.weight", BS_Q1_0, 2, ne);
    gguf_w_add_tensor(w, "dspark.fc.weight", BS_Q4_1, 2, ne);
    gguf_w_add_tensor(w, "blk.0.attn_q.weight", BS_Q4_1, 2, ne);
    uint64_t bytes = bs_tensor_size(BS_Q1_0, 256, 4) + 2 * bs_tensor_size(BS_Q4_1, 256, 4);
    uint8_t *z = calloc(1, bytes);
    CHECK(gguf_w_write(w, z, bytes) == 0 && gguf_w_close(w) == 0);
    free(z);
    expect_desc("DSpark drafter (6 layers), block 4, taps [1,16,31,46,61], mask 248319, markov rank 256, "
                "Q4_1 + Q1_0 token_embd", "drafter");

    /* other architectures and none */
    w = gguf_w_open(path);
    gguf_w_set_str(w, "general.architecture", "llama");
    gguf_w_add_tensor(w, "a.weight", BS_Q8_0, 2, ne);
    bytes = bs_tensor_size(BS_Q8_0, 256, 4);
    z = calloc(1, bytes);
    CHECK(gguf_w_write(w, z, bytes) == 0 && gguf_w_close(w) == 0);
    expect_desc("llama model, Q8_0", "generic");
    w = gguf_w_open(path);
    gguf_w_add_tensor(w, "a.weight", BS_Q8_0, 2, ne);
    CHECK(gguf_w_write(w, z, bytes) == 0 && gguf_w_close(w) == 0);
    expect_desc("unknown model, Q8_0", "no architecture");
    free(z);
    unlink(path);
    return test_summary("test_inspect");
}
