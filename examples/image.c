/* image.c: a question about an image with libbitspark (a Qwen3.5 model and its vision
 * projector), greedy, streamed to stdout.
 *   cc image.c $(pkg-config --cflags --libs bitspark) -o image
 *   ./image MODEL.gguf MMPROJ.gguf IMAGE.png "PROMPT" [N] */
#include <bitspark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t shown;

static void on_step(void *ud, bs_gen *g) {
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    fwrite(o.text + shown, 1, o.n_safe - shown, stdout);
    shown = o.n_safe;
    (void)ud;
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 5) return fprintf(stderr, "usage: %s MODEL MMPROJ IMAGE PROMPT [N]\n", argv[0]), 2;
    bs_model *m = bs_model_load(argv[1], NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    bs_vision *proj = tok ? bs_vision_load(argv[2], m) : NULL;
    size_t len = 0;
    unsigned char *bytes = proj ? read_all(argv[3], &len) : NULL;
    bs_gen_image im = {0};
    int rc = !bytes || bs_vision_encode(proj, bytes, len, 1, &im);
    /* the image goes before the text of the user message, as the model's template places it */
    char *content = malloc(strlen(BS_IMAGE_CHAT) + strlen(argv[4]) + 1);
    strcat(strcpy(content, BS_IMAGE_CHAT), argv[4]);
    bs_chat_msg msg = {.role = "user", .content = content};
    char *prompt = rc ? NULL : bs_chat_apply(m, &msg, 1, true, -1);
    int32_t *ids = NULL;
    size_t n = 0;
    int n_images = 0;
    bs_gen_params gp = bs_gen_default_params();   /* zero-init is not the defaults */
    gp.n_threads = 1;
    bs_gen *g = prompt ? bs_gen_new(m, tok, &gp) : NULL;
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = argc > 5 ? atoi(argv[5]) : 32;
    r.images = &im;   /* one per BS_TOKEN_IMAGE in the prompt */
    r.n_images = 1;
    rc = !g || bs_tokenize_prompt_images(tok, prompt, strlen(prompt), &ids, &n, &n_images) ||
         bs_gen_begin(g, &r, ids, (int)n) || bs_gen_run(g, on_step, NULL);
    if (rc) fprintf(stderr, "image: %s\n", proj && !bytes ? "cannot read the image" : bitspark_last_error());
    else fprintf(stderr, "\n%d x %d image tokens, %d tokens generated\n", im.nx, im.ny, bs_gen_get_stats(g)->n_gen);
    free(ids);
    free(prompt);
    free(content);
    free((void *)im.embd);
    free(bytes);
    bs_gen_free(g);
    bs_vision_free(proj);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc;
}
