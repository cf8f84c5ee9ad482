/* top.c: the k best logits of a row in the sampler's order, on the CPU (bs_eval_top there, and
 * where a device's row came back whole); topk.comp finds the same list on the device. */
#include "model/session.h"

#include <float.h>
#include <math.h>

static float clamp_top(float x) { return x > FLT_MAX ? FLT_MAX : x; }

/* The k best of w[0..n) in the sampler's order: the higher logit (+inf as FLT_MAX), then the
 * lower id; NaN and -inf never. Kept sorted by insertion (k <= BS_TOP_MAX): topk.comp's list. */
int bs_top_lowest(const float *w, int n, int k, int32_t *ids, float *vals) {
    int c = 0;
    for (int i = 0; i < n; i++) {
        const float x = w[i], key = clamp_top(x);
        if (x != x || x == -INFINITY || (c == k && !(key > clamp_top(vals[k - 1])))) continue;
        int j = c < k ? c++ : k - 1;
        for (; j > 0 && key > clamp_top(vals[j - 1]); j--) {   /* strictly: an earlier equal stays first */
            ids[j] = ids[j - 1];
            vals[j] = vals[j - 1];
        }
        ids[j] = i;
        vals[j] = x;
    }
    return c;
}
