/* server_emb.c: an embeddings request as the scheduler runs it (server.h: srv_emb): its inputs
 * in chunks, each chunk's last-layer rows through the final norm and pooled (mean, or the last
 * token's), each input's vector L2-normalized once its last chunk is in. */
#include "server/server.h"
#include "cpu/compute.h"
#include "model/qwen35.h"
#include "io/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void srv_emb_free(srv_emb *e) {
    if (!e) return;
    for (int i = 0; i < e->count; i++) free(e->ids[i]);
    free(e->ids);
    free(e->n);
    free(e->out);
    free(e->off);
    free(e);
}

int srv_emb_plan(srv_emb *e, int max, const int32_t **tok, bool *fresh) {
    if (e->cur >= e->count || max <= 0) return 0;
    *fresh = e->pos == 0;
    *tok = e->ids[e->cur] + e->pos;
    return BS_MIN(max, e->n[e->cur] - e->pos);
}

void srv_emb_rows(const bs_model *m, srv_emb *e, float *rows, int n) {
    const int E = e->E, len = e->n[e->cur];
    if (e->none) {   /* every row, through the final norm, not normalized (as llama-server) */
        for (int i = 0; i < n; i++)
            bs_rmsnorm(e->out + (size_t)(e->off[e->cur] + e->pos + i) * E, rows + (size_t)i * E, m->output_norm, E, m->hp.eps);
        if ((e->pos += n) < len) return;
        e->cur++;
        e->pos = 0;
        return;
    }
    float *out = e->out + (size_t)e->cur * E;
    for (int i = e->last ? BS_MAX(0, len - 1 - e->pos) : 0; i < n; i++) {
        float *row = rows + (size_t)i * E;
        bs_rmsnorm(row, row, m->output_norm, E, m->hp.eps);   /* the final norm, as the LM head sees it */
        for (int k = 0; k < E; k++) out[k] += row[k];
    }
    if ((e->pos += n) < len) return;
    const double rows_in = e->last ? 1.0 : (double)len;   /* the sum into the mean */
    double sum = 0;
    if (e->norm < 0) {
        sum = rows_in;
    } else if (e->norm == 0) {   /* the largest magnitude to 32760, int16's range (llama.cpp's) */
        float mx = 0.0f;   /* (a float compare: gcc 12's aarch64 vectorizer fails on fmax over doubles here) */
        for (int k = 0; k < E; k++) mx = fabsf(out[k]) > mx ? fabsf(out[k]) : mx;
        sum = mx / 32760.0;
    } else if (e->norm == 2) {
        for (int k = 0; k < E; k++) sum += (double)out[k] * out[k];
        sum = sqrt(sum);
    } else {
        for (int k = 0; k < E; k++) sum += pow(fabs((double)out[k]), e->norm);
        sum = pow(sum, 1.0 / e->norm);
    }
    const float scale = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int k = 0; k < E; k++) out[k] *= scale;
    e->cur++;
    e->pos = 0;
}

