/* sampler.c: a hand-written generation loop on libbitspark's lower level: evaluate with a
 * session, sample the logits with a sampler chain (optionally held to a JSON schema), print
 * through the streaming detokenizer. The same text as `bitspark run` for the same settings.
 *   cc sampler.c $(pkg-config --cflags --libs bitspark) -o sampler
 *   ./sampler MODEL.gguf "PROMPT" [N [TEMP [SEED [JSON-SCHEMA]]]] */
#include <bitspark.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s MODEL PROMPT [N [TEMP [SEED [SCHEMA]]]]\n", argv[0]), 2;
    const int n_predict = argc > 3 ? atoi(argv[3]) : 32;
    bs_log_set_level(BS_LOG_QUIET);   /* no "device:" line */
    bs_model *m = bs_model_load(argv[1], NULL);
    bs_tokenizer *tok = m ? bs_tokenizer_load(m) : NULL;
    bs_session_params sessp = bs_session_default_params();
    sessp.n_threads = 1;
    bs_session *s = tok ? bs_session_new(m, &sessp) : NULL;
    bs_sampler_params sp = bs_sampler_default_params();
    sp.temp = argc > 4 ? (float)atof(argv[4]) : 0.0f;
    sp.seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
    bs_sampler_chain *chain = s ? bs_sampler_chain_new(&sp, tok, bs_model_n_vocab(m)) : NULL;
    bs_detok *dt = chain ? bs_detok_new(tok, false) : NULL;
    float *logits = malloc(sizeof(float) * (m ? bs_model_n_vocab(m) : 1));
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = !dt || bs_tokenize_prompt(tok, argv[2], strlen(argv[2]), &ids, &n) ||
             bs_eval(s, ids, (int)n, BS_LOGITS_LAST, logits, NULL);
    for (size_t i = 0; !rc && i < n; i++) rc = bs_sampler_chain_accept(chain, ids[i]);   /* penalties see the prompt */
    if (!rc && argc > 6) rc = bs_sampler_chain_set_json_schema(chain, argv[6]);   /* from the first generated token */
    int n_gen = 0;
    while (!rc && n_gen < n_predict) {
        const int32_t id = bs_sampler_chain_sample(chain, logits);
        if (id < 0 || bs_token_is_eog(tok, id)) {
            rc = id < 0;
            break;
        }
        const char *text;
        size_t len;
        rc = bs_sampler_chain_accept(chain, id) || bs_detok_push(dt, id, &text, &len);
        if (!rc) fwrite(text, 1, len, stdout);
        n_gen++;
        if (!rc && n_gen < n_predict) rc = bs_eval(s, &id, 1, BS_LOGITS_LAST, logits, NULL);
    }
    if (dt) {
        const char *text;
        size_t len;
        bs_detok_flush(dt, &text, &len);
        fwrite(text, 1, len, stdout);
    }
    if (rc) fprintf(stderr, "sampler: %s\n", bitspark_last_error());
    else fprintf(stderr, "\n%d tokens\n", n_gen);
    free(logits);
    free(ids);
    bs_detok_free(dt);
    bs_sampler_chain_free(chain);
    bs_session_free(s);
    bs_tokenizer_free(tok);
    bs_model_free(m);
    return rc != 0;
}
