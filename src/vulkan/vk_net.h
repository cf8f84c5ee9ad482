/* vk_net.h: what the forward's files share (vk_net.c: the weights on the device; vk_session.c:
 * a session's buffers and states; vk_forward.c: recording a step; vk_step.c: running it). */
#ifndef BS_VK_NET_H
#define BS_VK_NET_H

#include "vulkan/vk_internal.h"

enum { MAX_CONV_K = 8, MAX_HEAD_DIM = 256, DEV_ROWS = 64, CACHE_STEPS = 8, CNT_GROUPS = DEV_ROWS / 8 };
enum { ATTN_GROUPS = 16 };
enum { REPLAY_ROWS = 17 };   /* rows a step may have for rollback by replay: a verification of 16 drafts */
enum { TOPK_CHUNK = 2048 };   /* topk.comp's candidates per workgroup */   /* params' bytes from here: attn_split.comp's group counts this step */

typedef struct vk_layer {
    bool rec;
    int slot;
    bs_vk_matrix *ffn_gate, *ffn_up, *ffn_down;
    bs_vk_matrix *qkv, *gate, *beta, *alpha, *ssm_out;
    bs_vk_matrix *wq, *wk, *wv, *wo;
    bs_vk_matrix *cat;            /* the layout of the mixer's input products that share one
                                     (those of its matrices that are `borrowed`), or NULL */
    bs_vk_buf attn_norm, post_norm, conv1d, gates, ssm_norm, q_norm, k_norm;
} vk_layer;

struct bs_vk_net {
    bs_vk_ctx *c;
    bs_vk_net_desc hp;            /* the description's numbers (its pointers are not kept) */
    vk_layer *L;
    bs_vk_matrix *embd, *output;
    bs_vk_buf out_norm;
    int n_rec, n_att;
    int lora_gen;                 /* changes whenever adapters come or go */
    int lora_r;                   /* widest rank of the adapters attached */
    bool no_gluq;                 /* BITSPARK_VK_NO_GLUQ=1: the down product's input quantized apart */
    bool no_qk;                   /* BITSPARK_VK_NO_QK=1: attention's q/k norms, rope, KV store apart */
    bool no_attq;                 /* BITSPARK_VK_NO_ATTQ=1: the output gate and its int8 blocks apart */
    bool no_attf;                 /* BITSPARK_VK_NO_ATTF=1: q/k norms, rope and store before the attention, apart */
    bool no_normrot;              /* BITSPARK_VK_NO_NORMROT=1: a folded product's input rotated apart, not by the norm */
    bool no_pair;                 /* BITSPARK_VK_NO_PAIR=1: DeltaNet's float beta and alpha a dispatch each */
    bool no_normfin;              /* BITSPARK_VK_NO_NORMFIN=1: the final norm apart, not in the last down product */
    bool no_normo;                /* BITSPARK_VK_NO_NORMO=1: residual add and norm after the output products apart */
    bool no_gdnf;                 /* BITSPARK_VK_NO_GDNF=1: DeltaNet's conv, q/k norms, delta rule, gated norm apart */
    bool seq_together;            /* a batch's recurrence one dispatch for all sequences (BITSPARK_VK_SEQ) */
    bool no_split;                /* BITSPARK_VK_NO_SPLIT=1: attention in one workgroup per query (attn.comp) */
    int attn_chunk;               /* positions per attn_split.comp chunk (BITSPARK_VK_ATTN_CHUNK, 256) */
    bs_vk_buf rp_cc, rp_d;        /* a replay's conv and delta-rule outputs (bs_vk_sess_replay; made on
                                     first use, shared: replays are waited for) */
    int n_sess;                   /* sessions and batches alive (their recordings bind the weights) */
    bool asleep;                  /* the weights' buffers are freed (bs_vk_net_sleep) */
    /* a Hadamard-folded model (Bonsai 2): its rotations, and the products run unfused (every
       quantization after its rotation; vk_forward.c) */
    bool folded;
    bs_vk_rot rots[BS_VK_MAX_ROTS];
    int n_rots;
};

enum { KEY_TAPS = 8 };
/* A session's rollback snapshot of its recurrent state: none; pending (the state as it is now:
 * the next step writes the conv windows and the delta rule's state into the other buffers of
 * their pairs, leaving the snapshot where it was); held (that step ran). */
enum { SNAP_NONE, SNAP_PENDING, SNAP_HELD };
/* What a batch's recorded pass binds and does: per sequence its session (uid, taps buffer), rows,
 * logits rows and taps. All zero for a session's own steps. */
typedef struct batch_key {
    int n_seq;
    struct { uint64_t uid; uint32_t taps_gen; int n, n_logit, n_taps, snap, flip, io, taps[KEY_TAPS]; } q[BS_VK_BATCH_SEQS];
} batch_key;

/* A sequence's rows in a batch's shared scratch (bs_vk_batch_eval): rows r0..r0+n-1 are its
 * own, its session s holds its state and runs the per-sequence kernels on its own scratch. */
typedef struct vk_part {
    bs_vk_sess *s;
    int r0, n, n_logit;
    const int *taps;
    int n_taps;
    bool snap;                    /* a pending snapshot: this pass takes it (bs_vk_sess_snapshot) */
} vk_part;
/* Sequences a batch's split attention takes in one dispatch (attn_split_b.comp) */
enum { ATT_BATCH = 4 };

struct bs_vk_sess {
    bs_vk_net *net;
    int n_ctx, B;                 /* B: rows per submission */
    bool kv_f32;                  /* F32 KV cache rows (else F16) */
    size_t wa, wb, wc, wd, wq;    /* scratch widths (floats per row) */
    bs_vk_buf x, xn, y, a, b, cc, d, ga, gbeta, aq, as, am, xr, tok, rope, logits, scores, taps, params, ids;
    bs_vk_buf aq2, as2, am2;      /* a second set of int8 blocks: the GLU writes them while its own are read */
    bs_vk_buf xrot;               /* a folded product's input rotated (vk_rotate.c) */
    bs_vk_buf cnt;                /* the norming and rotating epilogues' counters (zero between dispatches) */
    bs_vk_buf apart, acnt;        /* attn_split.comp's per-chunk partials and its (row, KV head) counters */
    bs_vk_buf agrp;               /* a batch's scratch: attn_split_b's workgroups, per 4 sequences */
    bs_vk_buf dcnt;               /* delta_norm.comp's counters, one per V head */
    int n_chunk;                  /* attention chunks of the context (0: attn.comp's one pass) */
    int normed;                   /* this layer's output product added itself into x and normed it */
    /* a folded model's layer: the fold its input norm (rot_mix) and FFN norm (rot_ffn) rotate the
       rows by, the int8 blocks then the rotated rows' (vk_forward.c norm_rot_mix/ffn), or NULL */
    const bs_vk_rot *rot_mix, *rot_ffn;
    bool greedy;                  /* this step: the argmax of its logits rows, not the rows */
    int topk;                     /* this step: the k best of its logits row (topk.comp), not the row */
    const bs_draw *draw;          /* this step (with topk and feed): the host's draw from that list
                                     predicted with the uniform in unif (draft_draw.comp), fed */
    bs_vk_top_bufs top;           /* topk.comp's levels and lists (made on first use) */
    bs_vk_amax_bufs amax;         /* argmax.comp's chunks' bests and row counters */
    /* steps recorded once per shape (rows, logits rows; a batch's: its sequences) and resubmitted */
    struct step_cache {
        int n, rows;
        batch_key key;
        VkCommandBuffer cmd;
        bs_vk_pools pools;
        bool greedy;                  /* the logits rows' argmax into ids (their rows stay) */
        bool feed;                    /* and the argmax into the other set's token */
        int topk;                     /* the logits row's k best into topv (0: none) */
        bool drawn;                   /* and the draw from them predicted, fed (draw) */
        bs_draw draw;
        int io;                       /* the set of per-step buffers it binds */
        int state;                    /* the recurrent state's buffers it binds (state_key) */
        bs_vk_rec counts;             /* of the recording, for the stats */
    } cache[CACHE_STEPS];
    int cache_next;
    bool no_cache;                /* BITSPARK_VK_NO_CACHE=1 or profiling: record every step */
    bool no_ahead;                /* BITSPARK_VK_NO_AHEAD=1: greedy decoding waits for each step */
    bs_vk_buf *conv, *ssm, *conv_bak, *ssm_bak, *kc, *vc;
    bool pair_flip;               /* the state is in ssm_bak and conv_bak (else ssm and conv): the
                                     pairs swap on each step after a snapshot */
    int snap;                     /* SNAP_NONE / _PENDING / _HELD */
    /* rollback by replay (bs_vk_sess_replay): each recurrent layer's inputs of the last step of
       at most rp_rows rows (its pre-conv rows, alpha and beta rows; layer slot g's at rows
       g * rp_rows), rp_n rows of them (0: none, or not this state's) */
    bs_vk_buf rp_a, rp_ga, rp_gb;
    int rp_rows, rp_n;
    bs_vk_buf lt;                 /* LoRA scratch: B x lora_r (A x) */
    int lora_gen;                 /* the net's adapters these buffers and recordings are for */
    int n_taps;                   /* taps of the last evaluation */
    uint64_t uid;                 /* never reused: what a batch's recordings know it by */
    uint32_t taps_gen;            /* changes when the taps buffer does */
    bool rows_in;                 /* this step's input rows are in x already (image rows) */
    /* decoding ahead (vk_ahead.c): the per-step buffers (tok, rope, params, ids) in two sets,
     * the current one in tok.. and the other in *_alt, swapped after each step submitted ahead,
     * so the host fills one while the device reads the other */
    bs_vk_buf tok_alt, rope_alt, params_alt, ids_alt;
    /* sampled decoding ahead: per set the uniform of its step's predicted draw and its list
       (top.topv is the current set's; made on first use, then swapped with the sets too) */
    bs_vk_buf unif, unif_alt, topv_alt;
    bool ahead_drawn;             /* the step ahead is a sampled one (its list comes back) */
    bs_draw ahead_draw;           /* ... with these parameters (its list is that long) */
    int io;                       /* the current set's index */
    bool feed;                    /* this step: its argmax into tok_alt (the next step's token) */
    VkFence fence[2];             /* per set: its step in flight */
    VkCommandBuffer busy[2];      /* per set: the recording in flight (never dropped until waited) */
    bool ahead;                   /* a step is in flight: token ahead_tok at ahead_pos, set ahead_io */
    int32_t ahead_tok;
    int ahead_pos, ahead_io;
};

/* A session of B rows per submission (logit_rows of them with logits); states: the recurrent
 * state and KV cache (a batch's shared scratch has none: each sequence brings its own). */
bs_vk_sess *bs_vk_sess_alloc(bs_vk_net *net, int n_ctx, int B_rows, int logit_rows, bool kv_f32, bool states);
/* A recorded step's command buffer and descriptors given back. */
void bs_vk_step_drop(bs_vk_sess *s, struct step_cache *e);

/* The delta rule's state of recurrent layer g as it is now. */
bs_vk_buf *bs_vk_ssm_cur(bs_vk_sess *s, int g);
/* After a step's submission: a pending snapshot is held (the state pair swapped). */
void bs_vk_sess_stepped(bs_vk_sess *s);
/* Before any other use of a session: a step in flight ahead waited for and undone. */
int bs_vk_sess_settle(bs_vk_sess *s);
/* The step submitted in set io (bs_vk_step_fed) waited for: its recording may go again. */
int bs_vk_sess_wait(bs_vk_sess *s, int io);
/* vk_top.c: the k best of each of logits rows 0..rows-1 into s->top (s->topk's step), and the
 * buffers that takes, made on first use. */
int bs_vk_record_topk(bs_vk_sess *s, uint32_t k, uint32_t rows);
int bs_vk_top_ready(bs_vk_sess *s);
/* vk_step.c: a one-row greedy step of token *tok (NULL: the one the step before fed it) at
 * pos0 submitted with fence f (not waited for), its argmax fed into the other set's token. */
int bs_vk_step_fed(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, VkFence f);
/* The same for sampled decoding: the step's k best (p->top_k) into top.topv, and the host's draw
 * from them predicted with uniform u (draft_draw.comp) and fed instead of the argmax. */
int bs_vk_step_fed_drawn(bs_vk_sess *s, const int32_t *tok, int pos0, const float *rope, VkFence f, const bs_draw *p,
                         float u);

/* vk_forward.c: record a step of n rows (logits_rows of them with logits; taps: those layers'
 * outputs; pt: a batch's sequences, NULL for the session's own) into the current recording. */
int bs_vk_record_chunk(bs_vk_sess *s, int n, int logits_rows, const int *taps, int n_taps, const vk_part *pt, int np);

#endif
