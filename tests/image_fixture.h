/* image_fixture.h: the fixtures' tiny f32 target and the vision fixture's image embedding
 * (vision/image_embd.f32: rows of the target's width), shared by the tests of image rows. */
#ifndef BS_TEST_IMAGE_FIXTURE_H
#define BS_TEST_IMAGE_FIXTURE_H

#include "model/qwen35.h"
#include "io/util.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

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
