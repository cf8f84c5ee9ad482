/* gen_impl.h: the generator's state, shared by the files of src/generate/ (internal). */
#ifndef BS_GEN_IMPL_H
#define BS_GEN_IMPL_H

#include "generate/gen.h"
#include "model/session.h"
#include "text/stop_match.h"

_Static_assert(BS_STOP_MAX >= BS_GEN_MAX_STOP, "a request's stop strings fit bs_stops");

enum { GS_IDLE, GS_PROMPT, GS_DECODE, GS_SPEC, GS_DONE };

/* A saved session state and the tokens it holds (prompt cache). */
typedef struct gen_ckpt {
    int32_t *toks;
    int n;
    void *state;
    size_t len;
    float *logits;             /* the end of a prompt: its last position's logits, so that the
                                  same prompt again needs no evaluation at all */
} gen_ckpt;

/* A request's image: its rows (copied) and where they start in the expanded prompt. */
typedef struct gen_img {
    float *embd;
    int nx, ny, pos;
} gen_img;

struct bs_gen {
    bs_model *m;
    const bs_tokenizer *tok;
    bs_gen_params p;
    bs_pool *pool;             /* shared, or NULL: the session's own */
    int n_vocab;
    bs_session *sess;
    bs_spec *spec;             /* with a drafter */
    float *logits;             /* [n_vocab] of the last evaluated position */
    int32_t *toks;             /* what the session holds: toks[0..n_toks) == its positions */
    int n_toks;
    unsigned sess_loads;       /* bs_session_loads when the generator last made toks true: a
                                * reset or load by anyone else since makes toks unknown */
    gen_ckpt ck[2];            /* the request's ckpt_at, the end of a prompt */

    /* the request */
    bs_gen_request r;
    bs_stops stops;            /* the request's stop strings, matched as the text grows */
    int32_t *prompt;           /* expanded: an image's rows hold its ids (gen_image.c) */
    int n_prompt, n_done;      /* n_done: prompt tokens the session holds */
    gen_img *img;              /* the request's images */
    int n_img;
    int planned;               /* rows of the prompt chunk bs_gen_plan handed out */
    bool spec_planned;         /* bs_gen_plan handed out a speculative round's verify pass */
    bs_sampler *smp;
    bs_detok *dt;
    bs_loop_guard *guard;
    struct bs_grammar *grammar;           /* the request's, or NULL */
    struct bs_grammar_state *gstate;
    struct bs_grammar_vocab *gvocab;      /* the tokenizer's trie, built at the first grammar */
    bool (*cancelled)(void *);            /* polled inside long grammar work (a cancelled request) */
    void *cancel_ud;
    int state;                 /* GS_* */
    int32_t pending;           /* GS_DECODE: sampled, not evaluated; GS_SPEC: the anchor */
    bool argmax_dev;           /* this request decodes by bs_eval_greedy (greedy_on_device) */
    bool have_next;            /* next_id is the argmax of the logits g->logits would hold */
    int32_t next_id;
    int top_dev;               /* this request samples from the k best the device finds
                                  (bs_eval_top; greedy_on_device and a top-k-only chain), or 0 */
    bool have_top;             /* top_ids / top_vals are the k best of the logits g->logits would hold */
    int n_top;
    int32_t top_ids[BS_TOP_MAX];
    float top_vals[BS_TOP_MAX];
    bool use_spec, prepared, parked;
    bool stop_hit;             /* the text was cut where generation ended (a stop string, n_indent):
                                  what the detokenizer still holds is not added */
    size_t line_at;            /* where the text's last line begins (after its last newline);
                                  SIZE_MAX: no newline yet */
    bool line_judged;          /* that line's indentation was held against n_indent */
    double t_first_out;        /* bs_time() of the first generated token (t_max_predict_ms) */
    bool nl_last;              /* the last token's text held a newline (t_max_predict_ms) */
    int gen_base;              /* session positions when the prompt was done */
    double t0;
    bs_spec_stats spec0;       /* the speculative counters when the request began */
    bool costs_known;          /* auto depth's costs are loaded or measured (once per generator) */
    bool costs_dirty;          /* what the cost cache holds is older than the depth's state */
    double t_costs_saved;      /* when this generator last wrote the cost cache */

    /* the output */
    char *text;
    size_t len, cap, n_safe;
    bs_gen_token *out;
    int n_out, cap_out, n_out_safe;
    size_t dirty_text;         /* lowest byte changed since bs_gen_output_changed */
    int dirty_tok;
    bs_gen_stats st;
};

/* gen_decode.c: after the prompt, or after a decode eval (logits in g->logits): sample and
 * deliver the next token(s); and one speculative round. */
void gen_after_logits(bs_gen *g);
void gen_spec_round(bs_gen *g);
/* The round in two halves around a shared pass (bs_spec_round_begin / _end). */
bool gen_spec_plan(bs_gen *g, bs_batch_seq *q);
void gen_spec_commit(bs_gen *g, bool ok);
/* End the request (reason), flushing the detokenizer unless a stop string cut the text. */
void gen_finish(bs_gen *g, int stop);
void gen_costs_flush(bs_gen *g);
/* Detokenizer with <think> (and tool-call) tags shown. */
bs_detok *gen_detok_new(const bs_gen *g);

/* gen_image.c: the request's images. begin: validate them against the prompt's markers and
 * expand it (*out malloc'd, *n_out positions), copying the rows; -1 + error. */
int gen_images_begin(bs_gen *g, const bs_gen_request *r, const int32_t *prompt, int n, int32_t **out, int *n_out);
void gen_images_free(bs_gen *g);
/* Only the expanded ids (for bs_gen_reusable); NULL + error when the images do not fit the prompt. */
int32_t *gen_expand_request(const bs_gen *g, const int32_t *prompt, int n, const bs_gen_image *images, int n_images,
                            int *n_out);
/* A prompt position of the caller's array (markers count one) in the expanded prompt. */
int gen_expand_pos(const bs_gen_request *r, const int32_t *prompt, int n, int pos);
/* len cut back so that prompt[0..len) does not end inside an image. */
int gen_image_cut(const int32_t *prompt, int n, int len);
bool gen_is_image_start(int32_t id);
/* The image starting at expanded position pos, or NULL. */
const gen_img *gen_image_at(const bs_gen *g, int pos);
/* The first image start in [from, to), or to. */
int gen_text_run(const bs_gen *g, int from, int to);

/* The session holds toks[0..n_toks) as the generator itself made it (after its own resets and
 * loads): record that, so a later one by anyone else is noticed. */
static inline void gen_own_session(bs_gen *g) { g->sess_loads = bs_session_loads(g->sess); }
/* Before the session takes a state that holds toks[0..n): the drafter keeps only its rows of the
 * positions where toks agree with what the session held (gen.c). */
void gen_spec_keep(bs_gen *g, const int32_t *toks, int n);

#endif
