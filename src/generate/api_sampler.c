/* api_sampler.c: the public sampler chain (bitspark.h's bs_sampler_chain_*) over sample/: the
 * engine's sampler plus the grammar it may be constrained by, owned together so an embedder
 * samples its own logits exactly as a request would (the same set-up as gen.c's). */
#include "bitspark.h"
#include "sample/grammar.h"
#include "sample/sampler.h"
#include "text/tokenizer.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>

struct bs_sampler_chain {
    bs_sampler *s;
    const bs_tokenizer *tok;
    uint64_t seed;
    bs_grammar *g;
    bs_grammar_vocab *gv;       /* built on the first grammar, kept for the next */
    bs_grammar_state *gs;
    bool applied;               /* a distribution is there to pick from */
};

bs_sampler_chain *bs_sampler_chain_new(const bs_sampler_params *params, const bs_tokenizer *tok, int32_t n_vocab) {
    const bs_sampler_params def = bs_sampler_default_params();
    if (!params) params = &def;
    const int32_t nt = tok ? bs_tokenizer_n_vocab(tok) : 0;
    if (n_vocab <= 0) n_vocab = nt;
    if (n_vocab <= 0) return bs_error("bs_sampler_chain_new: no vocabulary size (n_vocab or a tokenizer)"), NULL;
    bs_sampler_chain *c = bs_xcalloc(1, sizeof *c);
    c->tok = tok;
    c->seed = params->seed;
    if (!(c->s = bs_sampler_new(params, n_vocab))) goto fail;
    for (int32_t id = nt; tok && id < n_vocab; id++) bs_sampler_set_logit_bias(c->s, id, -INFINITY);
    if (tok && params->dry_multiplier != 0.0f) {
        static const char *const breakers[] = {"\n", ":", "\"", "*"};   /* llama.cpp's */
        bs_sampler_vocab v = {(void *)tok, bs_tokenizer_piece_cb, bs_tokenizer_tokenize_cb};
        if (bs_sampler_set_dry_breakers(c->s, breakers, 4, &v)) goto fail;
    }
    return c;
fail:
    bs_error_prefix("sampler: ");
    bs_sampler_chain_free(c);
    return NULL;
}

static void drop_grammar(bs_sampler_chain *c) {
    bs_sampler_set_grammar(c->s, NULL);
    bs_grammar_state_free(c->gs);
    bs_grammar_free(c->g);
    c->gs = NULL;
    c->g = NULL;
}

void bs_sampler_chain_free(bs_sampler_chain *c) {
    if (!c) return;
    if (c->s) drop_grammar(c);
    bs_grammar_vocab_free(c->gv);
    bs_sampler_free(c->s);
    free(c);
}

int bs_sampler_chain_set_grammar(bs_sampler_chain *c, const char *gbnf) {
    if (!c) return bs_error("bs_sampler_chain_set_grammar: no sampler");
    if (!gbnf) {
        drop_grammar(c);
        return 0;
    }
    if (!c->tok) return bs_error("a grammar needs the sampler to have a tokenizer");
    bs_grammar *g = bs_grammar_parse(gbnf);
    if (!g) return -1;   /* "grammar, line N: ..." */
    if (!c->gv && !(c->gv = bs_grammar_vocab_new(c->tok))) {
        bs_grammar_free(g);
        return bs_error_prefix("grammar: ");
    }
    bs_grammar_state *gs = bs_grammar_state_new(g, c->gv);
    if (!gs) {
        bs_grammar_free(g);
        return bs_error_prefix("grammar: ");
    }
    drop_grammar(c);
    c->g = g;
    c->gs = gs;
    bs_sampler_set_grammar(c->s, gs);   /* from the next accepted token on */
    return 0;
}

int bs_sampler_chain_set_json_schema(bs_sampler_chain *c, const char *schema) {
    char *gbnf = bs_grammar_from_json_schema(schema);
    if (!gbnf) return -1;   /* its message names the schema */
    const int rc = bs_sampler_chain_set_grammar(c, gbnf);
    free(gbnf);
    return rc;
}

bool bs_sampler_chain_grammar_complete(const bs_sampler_chain *c) { return !c || !c->gs || bs_grammar_complete(c->gs); }

int bs_sampler_chain_set_logit_bias(bs_sampler_chain *c, int32_t id, float bias) {
    if (!c) return bs_error("no sampler");
    /* ids past the tokenizer's vocabulary are banned for good: a bias would replace the ban */
    if (c->tok && id >= bs_tokenizer_n_vocab(c->tok) && id < bs_sampler_n_vocab(c->s))
        return bias == -INFINITY ? 0
                                 : bs_error("logit bias: id %d is past the tokenizer's %d tokens (never sampled)", id,
                                            (int)bs_tokenizer_n_vocab(c->tok));
    return bs_sampler_set_logit_bias(c->s, id, bias);
}

int bs_sampler_chain_apply(bs_sampler_chain *c, const float *logits) {
    if (!c || !logits) return bs_error("bs_sampler_chain_apply: no sampler or logits");
    const int n = bs_sampler_apply(c->s, logits);
    c->applied = n > 0;
    return n;
}

int bs_sampler_chain_candidates(const bs_sampler_chain *c, int32_t *ids, float *p, int cap) {
    if (!c || !c->applied) return 0;
    int n = 0;
    const bs_token_prob *tp = bs_sampler_candidates(c->s, &n);
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) {
        if (ids) ids[i] = tp[i].id;
        if (p) p[i] = tp[i].p;
    }
    return n;
}

int32_t bs_sampler_chain_pick(bs_sampler_chain *c) {
    if (!c || !c->applied) return bs_error("bs_sampler_chain_pick: nothing applied");
    return bs_sampler_pick(c->s);
}

int32_t bs_sampler_chain_sample(bs_sampler_chain *c, const float *logits) {
    return bs_sampler_chain_apply(c, logits) < 0 ? -1 : bs_sampler_chain_pick(c);
}

int bs_sampler_chain_accept(bs_sampler_chain *c, int32_t id) {
    if (!c) return bs_error("no sampler");
    if (id < 0 || id >= bs_sampler_n_vocab(c->s)) return bs_error("token id %d is out of range", id);
    if (c->gs && !bs_grammar_allows(c->gs, id)) return bs_error("the grammar does not allow token %d here", id);
    bs_sampler_accept(c->s, id);
    return 0;
}

void bs_sampler_chain_reset(bs_sampler_chain *c) {
    if (!c) return;
    bs_sampler_truncate(c->s, 0);
    if (c->gs) {
        bs_grammar_state_reset(c->gs);
        bs_sampler_set_grammar(c->s, c->gs);
    }
    bs_sampler_set_seed(c->s, c->seed);
    c->applied = false;
}

void bs_sampler_chain_set_seed(bs_sampler_chain *c, uint64_t seed) {
    if (!c) return;
    c->seed = seed;
    bs_sampler_set_seed(c->s, seed);
}
