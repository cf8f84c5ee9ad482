/* api_batch.c: the public API's multi-sequence evaluation (bitspark.h's bs_multi_*) over
 * model/batch_eval.h: the batch's scratch and the thread pool its weight products run on. */
#include "bitspark.h"
#include "model/batch_eval.h"
#include "model/qwen35.h"
#include "io/threadpool.h"
#include "io/util.h"

#include <stdlib.h>

struct bs_multi {
    bs_batch *b;
    bs_pool *pool;
};

bs_multi *bs_multi_new(const bs_model *m, int max_rows, int max_logit_rows, int n_threads) {
    if (!m || !m->layers) return bs_error("bs_multi_new: no model, or a vocab-only one"), NULL;
    if (max_rows < 1 || max_logit_rows < 1 || max_logit_rows > max_rows || n_threads < 0 || n_threads > 1024)
        return bs_error("bs_multi_new: bad sizes (%d rows, %d logit rows, %d threads)", max_rows, max_logit_rows,
                        n_threads), NULL;
    bs_multi *mb = bs_xcalloc(1, sizeof *mb);
    if ((n_threads > 1 && !(mb->pool = bs_pool_new(n_threads))) ||
        !(mb->b = bs_batch_new(m, max_rows, max_logit_rows, mb->pool))) {
        bs_multi_free(mb);
        return NULL;
    }
    return mb;
}

void bs_multi_free(bs_multi *mb) {
    if (!mb) return;
    bs_batch_free(mb->b);
    bs_pool_free(mb->pool);
    free(mb);
}

int bs_multi_eval(bs_multi *mb, const bs_batch_seq *seqs, int n_seq) {
    if (!mb || n_seq < 0 || (n_seq && !seqs)) return bs_error("bs_multi_eval: no batch or sequences");
    return bs_eval_multi(mb->b, seqs, n_seq);
}
