/* cli_vision.c: --mmproj F / --image PATH of the generating commands (cli_gen.h): the projector
 * checked against the model, and images encoded into the rows a bs_gen_request takes. */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cli_opts.h"
#include "io/util.h"

#include <stdlib.h>
#include <string.h>

int cli_vision_apply(cli_vision *v, const cli_arg *a) {
    if (!a->opt) return 0;
    if (a->opt->id == OPT_MMPROJ) {
        v->mmproj = a->s;
    } else if (a->opt->id == OPT_IMAGE) {
        if (v->n_paths == CLI_MAX_IMAGES) return bs_error("at most %d images", CLI_MAX_IMAGES);
        v->paths[v->n_paths++] = a->s;
    } else {
        return 0;
    }
    return 1;
}

int cli_vision_open(cli_vision *v, const bs_model *m, int n_threads) {
    v->n_threads = n_threads;
    if (!v->mmproj) return v->n_paths ? bs_error("--image needs --mmproj FILE (the vision projector)") : 0;
    if (!(v->proj = bs_vision_load(v->mmproj, m))) return -1;
    for (int k = 0; k < v->n_paths; k++)
        if (cli_vision_add(v, v->paths[k])) return -1;
    return 0;
}

int cli_vision_add(cli_vision *v, const char *path) {
    if (!v->proj) return bs_error("images need --mmproj FILE (the vision projector)");
    if (v->n == CLI_MAX_IMAGES) return bs_error("at most %d images", CLI_MAX_IMAGES);
    size_t len;
    unsigned char *data = (unsigned char *)bs_read_file(path, &len);
    if (!data) return -1;
    char err[512];
    bs_image_embd *e = &v->embd[v->n];
    const int rc = bs_vision_encode_bytes(v->proj, data, len, v->n_threads, e, err, sizeof err);
    const uint64_t hash = bs_hash_bytes(data, len);
    free(data);
    if (rc) return bs_error("%s: %s", path, err);
    v->im[v->n++] = (bs_gen_image){.embd = e->embd, .nx = e->nx, .ny = e->ny, .hash = hash};
    bs_log(2, "%s: %d x %d image tokens\n", path, e->nx, e->ny);
    return 0;
}

void cli_vision_truncate(cli_vision *v, int n) {
    while (v->n > n) bs_image_embd_free(&v->embd[--v->n]);
}

void cli_vision_close(cli_vision *v) {
    cli_vision_truncate(v, 0);
    bs_mmproj_free(v->proj);
    v->proj = NULL;
}

char *cli_vision_prefix(int n, const char *text) {
    const size_t ml = strlen(BS_IMAGE_CHAT), tl = strlen(text);
    char *out = bs_xmalloc((size_t)n * ml + tl + 1);
    for (int k = 0; k < n; k++) memcpy(out + (size_t)k * ml, BS_IMAGE_CHAT, ml);
    memcpy(out + (size_t)n * ml, text, tl + 1);
    return out;
}
