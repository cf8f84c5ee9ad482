/* simple.c: greedy generation with libbitspark, streamed to stdout.
 *   cc simple.c $(pkg-config --cflags --libs bitspark) -o simple
 *   ./simple MODEL.gguf "PROMPT" [N] */
#include <bitspark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t shown;

static void on_step(void *ud, bs_gen *g) {   /* print what became safe to show */
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    fwrite(o.text + shown, 1, o.n_safe - shown, stdout);
    shown = o.n_safe;
    (void)ud;
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s MODEL PROMPT [N]\n", argv[0]), 2;
    bs_model *m = bs_model_load(argv[1], NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    bs_gen_params gp = bs_gen_default_params();   /* zero-init is not the defaults */
    gp.n_threads = 1;
    bs_gen *g = tok ? bs_gen_new(m, tok, &gp) : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;   /* greedy */
    r.n_predict = argc > 3 ? atoi(argv[3]) : 32;
    int rc = !g || bs_tokenize_prompt(tok, argv[2], strlen(argv[2]), &ids, &n) ||
             bs_gen_begin(g, &r, ids, (int)n) || bs_gen_run(g, on_step, NULL);
    if (rc) fprintf(stderr, "simple: %s\n", bitspark_last_error());
    else fprintf(stderr, "\n%d tokens, stopped by %s\n", bs_gen_get_stats(g)->n_gen,
                 bs_gen_stop_name(bs_gen_get_stats(g)->stop));
    free(ids);
    bs_gen_free(g);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc;
}
