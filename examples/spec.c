/* spec.c: greedy generation with a DSpark drafter (speculative decoding: the same text as
 * without it, in fewer passes over the target), then the drafter's acceptance.
 *   cc spec.c $(pkg-config --cflags --libs bitspark) -o spec
 *   ./spec MODEL.gguf DRAFTER "PROMPT" [N] */
#include <bitspark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_step(void *ud, bs_gen *g) {   /* print what became safe to show */
    size_t *shown = ud;
    bs_gen_output o;
    bs_gen_output_get(g, &o);
    fwrite(o.text + *shown, 1, o.n_safe - *shown, stdout);
    *shown = o.n_safe;
}

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: %s MODEL DRAFTER PROMPT [N]\n", argv[0]), 2;
    bs_model *m = bs_model_load(argv[1], NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    bs_drafter *d = tok ? bs_drafter_load(argv[2], m) : NULL;
    bs_gen_params gp = bs_gen_default_params();   /* draft_max: BS_DRAFT_AUTO */
    gp.n_threads = 1;
    gp.drafter = d;
    gp.draft_max = bs_drafter_block_size(d);   /* a fixed depth: every round drafts */
    bs_gen *g = d ? bs_gen_new(m, tok, &gp) : NULL;
    int32_t *ids = NULL;
    size_t n = 0, shown = 0;
    bs_gen_request r;
    bs_gen_request_init(&r);
    r.sp.temp = 0;
    r.n_predict = argc > 4 ? atoi(argv[4]) : 32;
    int rc = !g || bs_tokenize_prompt(tok, argv[3], strlen(argv[3]), &ids, &n) ||
             bs_gen_begin(g, &r, ids, (int)n) || bs_gen_run(g, on_step, &shown);
    if (rc) {
        fprintf(stderr, "spec: %s\n", bitspark_last_error());
    } else {
        const bs_gen_stats *st = bs_gen_get_stats(g);
        fprintf(stderr, "\n%d tokens in %d rounds; drafted %ld, accepted %ld (acceptance %.1f%%)\n", st->n_gen,
                st->n_decode, st->n_drafted, st->n_accepted, st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0);
    }
    free(ids);
    bs_gen_free(g);
    bs_drafter_free(d);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc;
}
