/* api_embed.c: embeddings through the public API (bitspark.h's bs_embed), the server's
 * semantics (server_embed.c): the last layer's residual stream through the final norm, pooled
 * and L2-normalized, or per token as it is. */
#include "bitspark.h"
#include "cpu/compute.h"
#include "model/qwen35.h"
#include "model/session.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void l2_normalize(float *v, int n) {
    double norm = 0;
    for (int k = 0; k < n; k++) norm += (double)v[k] * v[k];
    const float scale = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (int k = 0; k < n; k++) v[k] *= scale;
}

int bs_embed(bs_session *s, const int32_t *ids, int n, int pooling, float *out) {
    if (!s || !ids || n < 1 || !out) return bs_error("bs_embed: no session, tokens or output");
    if (pooling < BS_POOL_NONE || pooling > BS_POOL_LAST) return bs_error("bs_embed: unknown pooling %d", pooling);
    const bs_model *m = s->m;
    const int E = m->hp.n_embd, last = m->hp.n_layer - 1;
    float *h = malloc((size_t)n * E * sizeof *h);
    if (!h) return bs_error("embeddings: out of memory");
    bs_session_reset(s);
    int rc = bs_session_set_taps(s, &last, 1);
    if (!rc) rc = bs_eval(s, ids, n, BS_LOGITS_NONE, NULL, h);
    bs_session_set_taps(s, NULL, 0);
    if (!rc) {
        const int from = pooling == BS_POOL_LAST ? n - 1 : 0;
        if (pooling != BS_POOL_NONE) memset(out, 0, (size_t)E * sizeof *out);
        for (int i = from; i < n; i++) {
            float *row = h + (size_t)i * E;
            float *dst = pooling == BS_POOL_NONE ? out + (size_t)i * E : row;
            bs_rmsnorm(dst, row, m->output_norm, E, m->hp.eps);   /* the final norm, as the LM head sees it */
            if (pooling != BS_POOL_NONE)
                for (int k = 0; k < E; k++) out[k] += row[k];
        }
        if (pooling != BS_POOL_NONE) l2_normalize(out, E);
    }
    free(h);
    return rc;
}
