/* api_vision.c: the public API's image encoder (bitspark.h's bs_vision_*) over vision/vision.h.
 * Its own file: embedders that never encode images link no image decoders from the static
 * library. */
#include "bitspark.h"
#include "vision/vision.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

bs_vision *bs_vision_load(const char *path, const bs_model *m) {
    if (!path) return bs_error("bs_vision_load: no path"), NULL;
    char err[512];
    bs_mmproj *p = bs_mmproj_load(path, err, sizeof err);
    if (!p) return bs_error("%s", err), NULL;
    if (m && bs_mmproj_n_embd(p) != bs_model_n_embd(m)) {
        bs_error("%s: the projector's rows are %d wide but the model's n_embd is %d", path, bs_mmproj_n_embd(p),
                 bs_model_n_embd(m));
        bs_mmproj_free(p);
        return NULL;
    }
    /* a model on a Vulkan device gets its encoder there too (BITSPARK_VISION_DEVICE=cpu: not);
     * one it does not fit (memory, a shape) stays on the CPU, as auto's device choice does */
    const char *vd = getenv("BITSPARK_VISION_DEVICE");
    if (m && m->vk && !(vd && !strcmp(vd, "cpu")) && bs_mmproj_use_device(p, m->vk, err, sizeof err)) {
        bs_log(1, "vision: the encoder stays on the CPU (%s)\n", err);
        bs_clear_error();
    }
    return p;
}

void bs_vision_free(bs_vision *p) { bs_mmproj_free(p); }

int bs_vision_encode(const bs_vision *p, const void *data, size_t len, int n_threads, bs_gen_image *out) {
    if (!p || !data || !out) return bs_error("bs_vision_encode: no projector, data or output");
    memset(out, 0, sizeof *out);
    char err[512];
    bs_image_embd e;
    if (bs_vision_encode_bytes(p, data, len, n_threads, &e, err, sizeof err)) return bs_error("%s", err);
    *out = (bs_gen_image){.embd = e.embd, .nx = e.nx, .ny = e.ny, .hash = bs_hash_bytes(data, len)};
    return 0;
}
