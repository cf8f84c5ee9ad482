/* test_gen_image.c: images in generation requests (bs_gen_request.images) on tiny-f32 with the
 * vision fixture's 4x3 image embeddings and its chat prompt (tests/fixtures/vision):
 * 1. greedy tokens equal the fixture's (llama.cpp's) greedy tokens;
 * 2. with the fixture drafter, greedy output equals plain greedy output;
 * 3. stepping through bs_gen_plan / bs_eval_multi / bs_gen_commit (the server's way; the image
 *    itself through bs_gen_step) gives the same tokens;
 * 4. prefix reuse: the same image again is reused, a different hash or grid is not;
 * 5. forty 1x1 images (the id table grows): the same again is reused whole, one changed image
 *    stops the reuse at or before it;
 * 6. bad requests fail with an error and no crash. */
#include "generate/gen.h"
#include "model/batch_eval.h"
#include "model/qwen35.h"
#include "io/util.h"
#include "test.h"
#include "image_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP (N1 + 1 + N2)
#define NI 12
#define N_GEN 32

static bs_model *model;
static bs_tokenizer *tok;
static float *img;
static int32_t prompt[NP];

static bs_gen *new_gen(const bs_dspark *d, int draft_max) {
    bs_gen_params p = {.n_ctx = 256, .n_threads = 1, .undo = true, .drafter = d, .draft_max = draft_max};
    bs_gen *g = bs_gen_new(model, tok, &p);
    CHECKF(g != NULL, "%s", bs_last_error());
    return g;
}

static void request(bs_gen_request *r, const bs_gen_image *im, int n_im, int n_predict) {
    bs_gen_request_init(r);
    r->sp.temp = 0;
    r->n_predict = n_predict;
    r->ignore_eos = true;
    r->ckpt_end = true;
    r->ckpt_at = n_im ? N1 + 1 + 10 : 0;   /* inside the text after the image (a marker counts one) */
    r->images = im;
    r->n_images = n_im;
}

/* Generate n tokens into out; returns the number of prompt positions reused. */
static int generate(bs_gen *g, const bs_gen_image *im, const int32_t *p, int n, int n_gen, int32_t *out) {
    bs_gen_request r;
    request(&r, im, 1, n_gen);
    int rc = bs_gen_begin(g, &r, p, n);
    CHECKF(rc == 0, "bs_gen_begin: %s", bs_last_error());
    if (rc) return -1;
    CHECKF(bs_gen_run(g, NULL, NULL) == 0, "%s", bs_last_error());
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    CHECK_EQ_INT(o.n_toks, n_gen);
    for (int i = 0; i < o.n_toks && i < n_gen; i++) out[i] = o.toks[i].id;
    return bs_gen_get_stats(g)->n_cached;
}

static void greedy_and_drafter(const char *drafter_path, int32_t *ref) {
    bs_gen_image im = {img, 4, 3, 1};
    bs_gen *g = new_gen(NULL, 0);
    if (!g) return;
    generate(g, &im, prompt, NP, N_GEN, ref);
    CHECKF(!memcmp(ref, greedy_ref, sizeof greedy_ref), "greedy tokens differ from the fixture's: %d %d %d ...",
           ref[0], ref[1], ref[2]);
    CHECK_EQ_INT(bs_session_n_past(bs_gen_session(g)), N1 + NI + N2 + N_GEN - 1);
    bs_gen_free(g);
    bs_dspark *d = bs_drafter_load(drafter_path, model);
    CHECKF(d != NULL, "%s", bs_last_error());
    for (int depth = 1; d && depth <= 4; depth += 3) {
        int32_t got[N_GEN];
        g = new_gen(d, depth);
        if (!g) break;
        generate(g, &im, prompt, NP, N_GEN, got);
        CHECKF(!memcmp(ref, got, sizeof got), "draft-max %d: greedy output with the drafter differs", depth);
        CHECKF(bs_gen_get_stats(g)->n_drafted > 0, "draft-max %d: nothing drafted", depth);
        bs_gen_free(g);
    }
    bs_dspark_free(d);
}

/* The server's stepping: plans of at most 5 prompt rows through bs_eval_multi, the image alone. */
static void batched(const int32_t *ref) {
    bs_gen_image im = {img, 4, 3, 1};
    bs_gen *g = new_gen(NULL, 0);
    bs_batch *b = bs_batch_new(model, 64, 8, NULL);
    bs_gen_request r;
    request(&r, &im, 1, N_GEN);
    CHECK(g && b && bs_gen_begin(g, &r, prompt, NP) == 0);
    int images = 0, guard = 0;
    while (g && b && !bs_gen_done(g) && guard++ < 1000) {
        bs_batch_seq q;
        if (bs_gen_plan(g, 5, &q)) {
            CHECK(q.n <= 5 || !bs_gen_in_prompt(g));
            bs_gen_commit(g, bs_eval_multi(b, &q, 1) == 0);
        } else {
            images += bs_gen_next_is_image(g);
            CHECK(bs_gen_next_is_image(g));
            CHECKF(bs_gen_step(g, 5) == 0, "%s", bs_last_error());
        }
    }
    CHECK_EQ_INT(images, 1);
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    CHECK_EQ_INT(o.n_toks, N_GEN);
    for (int i = 0; i < o.n_toks && i < N_GEN; i++) CHECKF(o.toks[i].id == ref[i], "batched: token %d differs", i);
    bs_batch_free(b);
    bs_gen_free(g);
}

static void prefix_reuse(const int32_t *ref) {
    bs_gen_image im = {img, 4, 3, 1}, other = {img, 4, 3, 2}, grid = {img, 3, 4, 1};
    int32_t out[N_GEN], p2[NP];
    memcpy(p2, prompt, sizeof p2);
    p2[NP - 3] = 300;   /* other text at the end */
    bs_gen *g = new_gen(NULL, 0);
    if (!g) return;
    CHECK_EQ_INT(generate(g, &im, prompt, NP, 4, out), 0);
    CHECK_EQ_INT(generate(g, &im, prompt, NP, 4, out), N1 + NI + N2);   /* the whole prompt */
    CHECK(!memcmp(out, ref, 4 * sizeof *out));
    const int c = generate(g, &im, p2, NP, 4, out);
    CHECKF(c > N1 + NI, "same image, other text: %d positions reused", c);
    const int d = generate(g, &other, prompt, NP, 4, out);
    CHECKF(d <= N1, "another image (hash): %d positions reused", d);
    const int e = generate(g, &grid, prompt, NP, 4, out);
    CHECKF(e <= N1, "another grid: %d positions reused", e);
    const int f = generate(g, &im, prompt, NP, 4, out);
    CHECKF(f <= N1, "the first image after another: %d positions reused", f);
    CHECK(!memcmp(out, ref, 4 * sizeof *out));
    bs_gen_free(g);
}

static void many_images(void) {
    enum { K = 40 };
    bs_gen_image im[K];
    int32_t p[N1 + K + N2];
    memcpy(p, chunk1, sizeof chunk1);
    for (int k = 0; k < K; k++) {
        im[k] = (bs_gen_image){img + (size_t)(k % NI) * bs_model_n_embd(model), 1, 1, 1000 + (uint64_t)k};
        p[N1 + k] = BS_TOKEN_IMAGE;
    }
    memcpy(p + N1 + K, chunk2, sizeof chunk2);
    bs_gen *g = new_gen(NULL, 0);
    if (!g) return;
    bs_gen_request r;
    request(&r, im, K, 2);
    for (int round = 0; round < 3; round++) {
        if (round == 2) im[30].hash = 7;
        CHECKF(bs_gen_begin(g, &r, p, N1 + K + N2) == 0, "%s", bs_last_error());
        CHECK(bs_gen_run(g, NULL, NULL) == 0);
        const int c = bs_gen_get_stats(g)->n_cached;
        if (round == 1) CHECK_EQ_INT(c, N1 + K + N2);
        if (round == 2) CHECKF(c > 0 && c <= N1 + 30, "image 30 changed: %d positions reused", c);
    }
    bs_gen_free(g);
}

static void bad_requests(void) {
    bs_gen *g = new_gen(NULL, 0);
    if (!g) return;
    bs_gen_image im = {img, 4, 3, 1}, two[2] = {{img, 4, 3, 1}, {img, 4, 3, 1}};
    bs_gen_image zero = {img, 0, 3, 1}, none = {NULL, 4, 3, 1}, huge = {img, 200, 200, 1};
    bs_gen_request r;
    request(&r, two, 2, 4);
    CHECK(bs_gen_begin(g, &r, prompt, NP) != 0);   /* one marker, two images */
    request(&r, NULL, 0, 4);
    CHECK(bs_gen_begin(g, &r, prompt, NP) != 0);   /* a marker, no image */
    request(&r, &im, 1, 4);
    CHECK(bs_gen_begin(g, &r, chunk1, N1) != 0);   /* an image, no marker */
    request(&r, &zero, 1, 4);
    CHECK(bs_gen_begin(g, &r, prompt, NP) != 0);
    request(&r, &none, 1, 4);
    CHECK(bs_gen_begin(g, &r, prompt, NP) != 0);
    request(&r, &huge, 1, 4);
    CHECK(bs_gen_begin(g, &r, prompt, NP) != 0);   /* past n_ctx */
    int32_t neg[3] = {957, -7, 10};
    request(&r, NULL, 0, 4);
    CHECK(bs_gen_begin(g, &r, neg, 3) != 0);
    CHECK(bs_gen_done(g));
    bs_gen_free(g);
}

int main(void) {
    char fix[1024], path[1100];
    if (!image_fixture_load(&model, &img, NI, fix, sizeof fix)) return test_summary("test_gen_image");
    tok = bs_tokenizer_load(model);
    memcpy(prompt, chunk1, sizeof chunk1);
    prompt[N1] = BS_TOKEN_IMAGE;
    memcpy(prompt + N1 + 1, chunk2, sizeof chunk2);
    int32_t ref[N_GEN];
    snprintf(path, sizeof path, "%s/tiny-dspark-f32.gguf", fix);
    greedy_and_drafter(path, ref);
    batched(ref);
    prefix_reuse(ref);
    many_images();
    bad_requests();
    bs_tokenizer_free(tok);
    free(img);
    bs_model_free(model);
    return test_summary("test_gen_image");
}
