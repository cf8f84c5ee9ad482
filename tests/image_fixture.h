/* image_fixture.h: the fixtures' tiny f32 target and the vision fixture's image embedding
 * (vision/image_embd.f32: rows of the target's width), and the prompt around it, shared by the
 * tests of image rows. */
#ifndef BS_TEST_IMAGE_FIXTURE_H
#define BS_TEST_IMAGE_FIXTURE_H

#include "model/qwen35.h"
#include "io/util.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

/* the fixture's chat prompt around the image and llama.cpp's greedy tokens (vision/ref.json) */
static const int32_t chunk1[] = {957, 117, 851, 10, 60, 124, 118, 272, 273, 95, 329, 406, 124, 62};
static const int32_t chunk2[] = {60, 124, 118, 272, 273, 95, 266, 100, 124, 62, 68, 294, 99, 292, 98, 101,
                                 332, 278, 858, 117, 268, 46, 958, 10, 957, 400, 115, 272, 116, 397, 10};
static const int32_t greedy_ref[] = {592, 770, 544, 575, 399, 814, 609, 177};
#define N1 ((int)BS_ARRAY_LEN(chunk1))
#define N2 ((int)BS_ARRAY_LEN(chunk2))
#define NG ((int)BS_ARRAY_LEN(greedy_ref))

/* Loads both into *model and *img (n_rows rows expected) and writes the fixtures' folder to
 * dir; false (with a failed check) when either cannot be read. */
static inline bool image_fixture_load(bs_model **model, float **img, int n_rows, char *dir, size_t cap) {
    const char *fix = getenv("BS_FIXTURES");
    if (!fix) {
        fprintf(stderr, "BS_FIXTURES is not set (run through ctest)\n");
        CHECK(fix != NULL);
        return false;
    }
    snprintf(dir, cap, "%s", fix);
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny-f32.gguf", fix);
    *model = bs_model_load(path, NULL);
    CHECKF(*model != NULL, "%s", bs_last_error());
    snprintf(path, sizeof path, "%s/vision/image_embd.f32", fix);
    size_t len = 0;
    *img = (float *)bs_read_file(path, &len);
    CHECKF(*img != NULL, "%s", bs_last_error());
    if (!*model || !*img) return false;
    CHECK_EQ_INT(len, (size_t)n_rows * bs_model_n_embd(*model) * sizeof(float));
    return len == (size_t)n_rows * bs_model_n_embd(*model) * sizeof(float);
}

#endif
