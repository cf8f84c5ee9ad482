/* multi.c: several prompts generated together with libbitspark: one session per sequence and
 * one bs_multi_eval per step for all of them (the prompts in the first pass, then a token each),
 * greedy, each sequence leaving the batch at its end of generation. Then per-sequence rollback:
 * every sequence but the first undoes its last token and evaluates it again (the others keep
 * theirs), which must give the very same logits. Each text is the one `bitspark run --temp 0`
 * gives for its prompt, printed followed by a line "---".
 *   cc multi.c $(pkg-config --cflags --libs bitspark) -o multi
 *   ./multi MODEL.gguf N "PROMPT" ["PROMPT" ...] */
#include <bitspark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SEQ = 8, MAX_GEN = 256 };

typedef struct {
    bs_session *s;
    bs_sampler_chain *chain;
    int32_t *prompt, gen[MAX_GEN];
    size_t n_prompt;
    int n_gen;
    bool done;
    float *logits;
} seq;

int main(int argc, char **argv) {
    if (argc < 4 || argc - 3 > MAX_SEQ) return fprintf(stderr, "usage: %s MODEL N PROMPT [PROMPT ...] (up to %d)\n", argv[0], MAX_SEQ), 2;
    const int n_seq = argc - 3, n_predict = atoi(argv[2]) < MAX_GEN ? atoi(argv[2]) : MAX_GEN;
    bs_log_set_level(BS_LOG_QUIET);
    bs_model *m = bs_model_load(argv[1], NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    const int nv = m ? bs_model_n_vocab(m) : 0;
    bs_session_params sp = bs_session_default_params();
    sp.n_ctx = 1024;
    sp.n_threads = 1;
    bs_sampler_params greedy = bs_sampler_default_params();
    greedy.temp = 0;
    seq q[MAX_SEQ] = {0};
    int rc = !tok;
    size_t rows = 0;
    for (int i = 0; !rc && i < n_seq; i++) {
        q[i].s = bs_session_new(m, &sp);
        q[i].chain = bs_sampler_chain_new(&greedy, tok, nv);
        q[i].logits = malloc(sizeof(float) * nv);
        rc = !q[i].s || !q[i].chain || bs_tokenize_prompt(tok, argv[3 + i], strlen(argv[3 + i]), &q[i].prompt, &q[i].n_prompt);
        rows += q[i].n_prompt;
    }
    /* room for every prompt in the first pass; later passes take one row per sequence */
    bs_multi *mb = rc ? NULL : bs_multi_new(m, (int)rows + n_seq, n_seq, 1);
    rc = rc || !mb;
    bs_batch_seq b[MAX_SEQ];
    for (int step = 0; !rc && step <= n_predict; step++) {
        int nb = 0;
        for (int i = 0; i < n_seq; i++) {
            if (q[i].done) continue;
            const bool first = step == 0;
            b[nb++] = (bs_batch_seq){.s = q[i].s, .tokens = first ? q[i].prompt : &q[i].gen[q[i].n_gen - 1],
                                     .n = first ? (int)q[i].n_prompt : 1, .logits_mode = BS_LOGITS_LAST, .logits = q[i].logits};
        }
        if (!nb || bs_multi_eval(mb, b, nb)) {
            rc = nb > 0;
            break;
        }
        for (int i = 0; i < n_seq; i++) {   /* each sequence's next token, greedy */
            if (q[i].done) continue;
            const int32_t id = bs_sampler_chain_sample(q[i].chain, q[i].logits);
            if (id < 0 || bs_token_is_eog(tok, id) || q[i].n_gen == n_predict) q[i].done = true;
            else bs_sampler_chain_accept(q[i].chain, q[i].gen[q[i].n_gen++] = id);
        }
    }
    /* every token of each sequence is evaluated (the last step evaluated the last one); now
     * sequences 1.. take back their last token and evaluate it again, sequence 0 keeps its own */
    int nb = 0, redone_same = 1;
    float *before = malloc(sizeof(float) * nv * MAX_SEQ);
    for (int i = 1; !rc && i < n_seq; i++) {
        const int n_past = bs_session_n_past(q[i].s);
        const int32_t *last = q[i].n_gen ? &q[i].gen[q[i].n_gen - 1] : &q[i].prompt[q[i].n_prompt - 1];
        memcpy(before + (size_t)nb * nv, q[i].logits, sizeof(float) * nv);
        rc = bs_session_rollback(q[i].s, n_past - 1);
        b[nb++] = (bs_batch_seq){.s = q[i].s, .tokens = last, .n = 1, .logits_mode = BS_LOGITS_LAST, .logits = q[i].logits};
    }
    if (!rc && nb) rc = bs_multi_eval(mb, b, nb);
    for (int k = 0; !rc && k < nb; k++) redone_same &= !memcmp(before + (size_t)k * nv, b[k].logits, sizeof(float) * nv);
    for (int i = 0; !rc && i < n_seq; i++) {
        char *text = NULL;
        size_t len = 0;
        rc = bs_detokenize(tok, q[i].gen, (size_t)q[i].n_gen, false, &text, &len);
        if (!rc) printf("%s\n---\n", text);
        free(text);
    }
    if (rc) fprintf(stderr, "multi: %s\n", bitspark_last_error());
    else fprintf(stderr, "%d sequences; rollback of %d of them: %s\n", n_seq, nb, redone_same ? "the same logits" : "DIFFERENT logits");
    free(before);
    for (int i = 0; i < n_seq; i++) {
        free(q[i].prompt);
        free(q[i].logits);
        bs_sampler_chain_free(q[i].chain);
        bs_session_free(q[i].s);
    }
    bs_multi_free(mb);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc || !redone_same;
}
