/* cli_mmproj_embed.c: `bitspark mmproj-embed --mmproj F --image IMG -o OUT.f32`: the image
 * embeddings of one image (rows x n_embd float32, little-endian as in memory), written
 * atomically, for tests and for users who cache them. */
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "vision/vision.h"
#include "io/atomic_file.h"
#include "io/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void help_mmproj_embed(void) {
    printf(
        "usage: bitspark mmproj-embed --mmproj FILE --image IMG -o OUT.f32 [-t N]\n"
        "\n"
        "Runs the vision encoder of a Qwen3.5 / Qwen3-VL projector (mmproj GGUF) on one image\n"
        "(PNG, JPEG or binary PPM/PGM) and writes its embeddings: one float32 row of the text\n"
        "model's width per image token, row-major over the token grid (the grid is printed on\n"
        "stderr). Preprocessing follows llama.cpp's mtmd (docs/vision.md).\n"
        "\n");
    cli_opts_help(CMD_MMPROJ_EMBED);
}

int cmd_mmproj_embed(int argc, char **argv) {
    const char *mm = NULL, *img = NULL, *out = NULL;
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        cli_arg a;
        if (cli_next(CMD_MMPROJ_EMBED, argc, argv, &i, &a)) return cli_fail("mmproj-embed");
        switch (a.opt ? a.opt->id : OPT_NONE) {
        case OPT_MMPROJ: mm = a.s; break;
        case OPT_IMAGE: img = a.s; break;
        case OPT_OUTPUT: out = a.s; break;
        case OPT_THREADS: threads = a.n; break;
        default: bs_error("unexpected argument '%s' (see bitspark help mmproj-embed)", a.s); return cli_fail("mmproj-embed");
        }
    }
    cli_opts_end();
    if (!mm || !img || !out) {
        bs_error("--mmproj, --image and -o are all required");
        return cli_fail("mmproj-embed");
    }
    const char *inputs[2] = {mm, img};
    if (bs_check_not_input(out, inputs, 2)) return cli_fail("mmproj-embed");
    char err[512];
    bs_mmproj *m = bs_mmproj_load(mm, err, sizeof err);
    if (!m) { bs_error("%s", err); return cli_fail("mmproj-embed"); }
    bs_image_embd e;
    double t0 = bs_time();
    int rc = bs_vision_encode_file(m, img, (int)threads, &e, err, sizeof err);
    bs_mmproj_free(m);
    if (rc) { bs_error("%s", err); return cli_fail("mmproj-embed"); }
    double dt = bs_time() - t0;
    bs_afile *af = bs_afile_open(out);
    if (!af) { bs_image_embd_free(&e); return cli_fail("mmproj-embed"); }
    size_t n = (size_t)e.n_rows * e.n_embd;
    if (fwrite(e.embd, sizeof(float), n, bs_afile_fp(af)) != n) {
        bs_afile_abort(af);
        bs_image_embd_free(&e);
        bs_error("cannot write %s", out);
        return cli_fail("mmproj-embed");
    }
    fprintf(stderr, "%s: %d x %d tokens (%d rows x %d) in %.3f s\n", out, e.nx, e.ny, e.n_rows, e.n_embd, dt);
    bs_image_embd_free(&e);
    return bs_afile_commit(af) ? cli_fail("mmproj-embed") : 0;
}
