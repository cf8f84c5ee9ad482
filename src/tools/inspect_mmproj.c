/* inspect_mmproj.c: what `inspect` says about a vision projector (mmproj) GGUF: its shape from
 * the clip.* keys, and whether bitspark's vision layer takes it (the loader checks every key and
 * tensor; its one-line error is the answer when it does not). */
#include "tools/inspect.h"
#include "vision/vision.h"

#include <stdio.h>
#include <string.h>

static int64_t key_i64(const gguf_file *f, const char *key) {
    int64_t v = -1;
    return gguf_get_i64(f, key, &v) == 0 ? v : -1;
}

void bs_inspect_describe_mmproj(const gguf_file *f, json_t *model, const char *fmt) {
    const char *proj = gguf_get_str(f, "clip.projector_type");
    const int64_t layers = key_i64(f, "clip.vision.block_count"), width = key_i64(f, "clip.vision.embedding_length");
    const int64_t heads = key_i64(f, "clip.vision.attention.head_count"), patch = key_i64(f, "clip.vision.patch_size");
    const int64_t merge = key_i64(f, "clip.vision.spatial_merge_size"), out = key_i64(f, "clip.vision.projection_dim");
    const int64_t ff = key_i64(f, "clip.vision.feed_forward_length"), size = key_i64(f, "clip.vision.image_size");
    char desc[400];
    snprintf(desc, sizeof desc,
             "vision projector (mmproj, %.40s): image %lld, %lld ViT layers, width %lld, MLP %lld, %lld heads, "
             "patch %lld, merge %lld, output %lld (the text model's n_embd), %s",
             proj ? proj : "no projector type", (long long)size, (long long)layers, (long long)width, (long long)ff,
             (long long)heads, (long long)patch, (long long)merge, (long long)out, fmt);
    json_object_set_new(model, "kind", json_string("mmproj"));
    json_object_set_new(model, "projector_type", proj ? json_string(proj) : json_null());
    json_object_set_new(model, "layers", json_integer(layers));
    json_object_set_new(model, "n_embd", json_integer(width));
    json_object_set_new(model, "n_ff", json_integer(ff));
    json_object_set_new(model, "n_head", json_integer(heads));
    json_object_set_new(model, "patch_size", json_integer(patch));
    json_object_set_new(model, "merge", json_integer(merge));
    json_object_set_new(model, "image_size", json_integer(size));
    json_object_set_new(model, "projection_dim", json_integer(out));
    json_object_set_new(model, "format", json_string(fmt));
    json_object_set_new(model, "description", json_string(desc));
}

void bs_inspect_check_mmproj(const char *path, json_t *info) {
    json_t *model = json_object_get(info, "model");
    if (!model || strcmp(json_string_value(json_object_get(model, "kind")) ? json_string_value(json_object_get(model, "kind")) : "", "mmproj"))
        return;
    char err[512] = "";
    bs_mmproj *m = bs_mmproj_load(path, err, sizeof err);
    if (m) {
        const bs_mmproj_hparams *hp = bs_mmproj_hparams_of(m);
        json_object_set_new(model, "supported", json_true());
        json_object_set_new(model, "position_table", json_integer(hp->pos_side));
        bs_mmproj_free(m);
    } else {
        json_object_set_new(model, "supported", json_false());
        json_object_set_new(model, "unsupported_because", json_string(err));
    }
}
