/* spec_depth.h: how many drafted tokens to verify per round (dspark.md §6).
 *
 * Fixed depth: always min(N, what fits). Auto: a cost model with measured parts,
 *   E(C)    = 1 + p + p^2 + ... + p^C          expected tokens of a round with C drafts
 *   T(C)    = draft(C) + verify(C+1) + append * E(C)   (C = 0: verify(1) + append, no drafter)
 *   pick argmax_C E(C) / T(C)
 * where verify(w) is the time of a target eval of width w, draft(C) the drafter round for C drafts
 * (a block of C slots: the anchor slot predicts too) and append
 * the per-row cost of feeding taps to the drafter, all measured at the start (best of several
 * runs) and kept as ratios to verify(1): the machine's load scales every part alike, so the
 * decision does not flip with it. p is the per-token conditional acceptance observed so far
 * (each accepted draft counts 1, the first rejected one 0, a fully accepted round says nothing
 * more); until a few are in, rounds draft 1 token (three misses in a row from the start
 * are enough to park), unless p is known from an earlier run of the same pair. When C = 0 wins, drafting parks: plain steps, with a 1-draft probe every `probe_every`
 * rounds to keep p current; the interval is chosen so probes cost at most ~1% of plain speed,
 * and doubles after each probe with nothing accepted (up to 2048 rounds); while parked a round's
 * decision costs O(1).
 * With the confidence head, drafts whose (calibrated) survival probability does not pay for
 * their verify cost are trimmed before verification. The choice only limits how many drafts
 * are verified, so every policy is lossless.
 * In a pass shared with R rows of other sequences (the server's slots), a round is priced by what
 * its rows add to the pass: verify(R + C + 1) - verify(R) instead of verify(C + 1), widths past
 * the measured ones extrapolated linearly. */
#ifndef BS_SPEC_DEPTH_H
#define BS_SPEC_DEPTH_H

#include "bitspark.h"

#include <stdbool.h>

/* (BS_DRAFT_AUTO, the automatic depth: bitspark.h) */
#define BS_DEPTH_MAX 64
#define BS_PARK_WINDOW 32   /* parked: tap rows kept back for the next probe; older ones are skipped */

typedef struct bs_spec_depth {
    int block;                         /* drafts a round can have at most */
    int fixed;                         /* >= 0: fixed depth; BS_DRAFT_AUTO */
    bool calibrated;
    int measured_k;                    /* costs of rounds up to this many drafts are measured */
    double verify_r[BS_DEPTH_MAX + 2]; /* verify(w) / verify(1), index w */
    double draft_r, append_r;          /* drafter round (full block), one tap row: / verify(1) */
    double draft_kr[BS_DEPTH_MAX + 1]; /* drafter round for k drafts (a block of k slots), index k */
    double verify1_s;                  /* measured verify(1) in seconds (EWMA of all widths) */
    double p;                          /* per-token conditional acceptance */
    long n_obs;                        /* acceptance observations */
    long n_acc;                        /* drafts accepted so far */
    bool p_known;                      /* p was seeded from an earlier run of this pair */
    double probe_r;                    /* measured extra cost of a probe round / verify(1) */
    double conf_sum, acc_sum;          /* for calibrating the confidence head: mean conf vs accepted */
    bool parked, recheck;
    int since_probe, probe_every;
    int backoff;                       /* probes in a row that got nothing accepted (interval x 2^backoff) */
    long n_parked, n_probes, n_trimmed;
    int last;                          /* depth chosen for the last round */
    int shared_rows;                   /* rows of other sequences in the same verify pass (server) */
} bs_spec_depth;

void bs_depth_init(bs_spec_depth *d, int block, int fixed);
/* Depth for the next round, at most k_max. */
int bs_depth_choose(bs_spec_depth *d, int k_max);
/* Expected tokens per second of a round with c drafts at acceptance p (the model above). */
double bs_depth_rate(const bs_spec_depth *d, int c, double p);
/* Start-up measurements: verify_s[w] for w = 1..block+1 (best of several runs), the drafter
 * round and one tap row's append, in seconds. */
void bs_depth_calibrate(bs_spec_depth *d, const double *verify_s, double draft_s, double append_s);
/* After that: the drafter round's cost for k = 1..block drafts (a block of k slots), seconds. */
void bs_depth_calibrate_draft(bs_spec_depth *d, const double *draft_s);
/* A verify of width w took sec (tracks the machine's current speed, for reports). */
void bs_depth_observe_verify(bs_spec_depth *d, int w, double sec);
/* k drafts verified, n accepted; conf (may be NULL): their confidence scores. */
void bs_depth_observe_accept(bs_spec_depth *d, int k, int n, const float *conf);
/* Seed p with the acceptance an earlier run of the same pair ended with: no depth-1 learning
 * rounds, and a pair known not to pay starts parked (probes still check it). */
void bs_depth_seed_p(bs_spec_depth *d, double p);
/* A probe round (a drafted round while parked) cost extra_s seconds more than a plain step. */
void bs_depth_observe_probe(bs_spec_depth *d, double extra_s);
/* Auto only: how many of k drafts with confidences conf to verify (1..k). sampled: the first
 * best length, so that keeping draft j reads conf[0..j] only (which the drafts before j make):
 * whether a sampled draft is verified must not depend on its own value, or the output would not
 * be an exact sample (greedy output is the same either way: the best length of all). */
int bs_depth_trim(bs_spec_depth *d, const float *conf, int k, bool sampled);
/* One line saying what the controller decided and why (for --verbose). */
void bs_depth_describe(const bs_spec_depth *d, char *buf, int cap);

#endif
