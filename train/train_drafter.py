"""Train the DSpark drafter on the target's own outputs and hidden states (DeepSpec recipe).

1. Data: prompts = random windows of the training corpus, continued by the 1-bit target itself
   (greedy for most sequences, sampled at T=1 for the rest), so the text after an anchor is the
   target's own chain. One forward of the target over each sequence gives its taps (residual
   stream after layers `taps`) and its next-token distributions.
2. Objective (block diffusion, anchor slot predicts): for random anchors s, the block
   [tok_s, MASK, MASK, MASK] at positions s..s+3 sees the context rows < s and its own block
   (non-causal); slot k is trained towards the target's distribution at row s+k (cross-entropy
   with soft labels, weight exp(-k/4)), through the Markov bias with prev = the sequence's own
   token at s+k; the confidence head is trained with BCE against 1 - TV(p_draft, p_target).
3. Held-out acceptance: greedy rounds on target-greedy continuations of held-out prompts.

    python3 train/train_drafter.py --data train/data --out train/out --steps 600
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from drafter import DConfig, DSpark, config_dict
from export_gguf import load_target
from model import generate, quantized_copy
from tokenizer import Tokenizer


@torch.no_grad()
def make_data(target, ids, n_seq, P, G, taps, seed, greedy_frac=0.75, bs=64):
    rng = np.random.default_rng(seed)
    seqs, feats, probs = [], [], []
    for i in range(0, n_seq, bs):
        starts = rng.integers(0, len(ids) - P, size=bs)
        pr = torch.from_numpy(np.stack([ids[s:s + P] for s in starts]).astype(np.int64))
        temp = 0.0 if i < greedy_frac * n_seq else 1.0
        full = generate(target, pr, G, temp, generator=torch.Generator().manual_seed(seed + i))
        lg, ft = target(full, taps=taps)
        seqs.append(full)
        feats.append(ft.half())
        probs.append(torch.softmax(lg, -1).half())
        print('  generated %d/%d sequences (temp %.1f)' % (i + bs, n_seq, temp), flush=True)
    return torch.cat(seqs), torch.cat(feats), torch.cat(probs)


def block_batch(c, seqs, n_blocks, lo, rng):
    """Random anchors per sequence -> block ids, positions, allow mask, label rows, prev tokens."""
    B, T = seqs.shape
    bsz = c.block_size
    anchors = torch.from_numpy(np.sort(rng.integers(lo, T - bsz, size=(B, n_blocks)), axis=1))
    k = torch.arange(bsz)
    rows = (anchors[:, :, None] + k).reshape(B, -1)                         # label rows s+k
    ids = torch.full((B, n_blocks, bsz), c.mask_id)
    ids[:, :, 0] = torch.gather(seqs, 1, anchors)
    prev = torch.gather(seqs, 1, rows)                                      # tok at s+k
    blk_of = torch.arange(n_blocks).repeat_interleave(bsz)
    ctx_ok = torch.arange(T)[None, None, :] < anchors.repeat_interleave(bsz, 1)[:, :, None]
    same = (blk_of[:, None] == blk_of[None, :]).expand(B, -1, -1)
    allow = torch.cat([ctx_ok, same], dim=2)
    return ids.reshape(B, -1), rows, allow, prev


def drafter_loss(d, seqs, feats, probs, n_blocks, lo, rng):
    c = d.c
    B, T = seqs.shape
    ids, rows, allow, prev = block_batch(c, seqs, n_blocks, lo, rng)
    ctx = d.context(feats.float())
    hN = d.backbone(ctx, torch.arange(T), ids, rows, allow)
    U, logits, conf = d.heads(hN, prev)
    p_t = torch.gather(probs, 1, rows[:, :, None].expand(-1, -1, probs.shape[-1])).float()
    logq = torch.log_softmax(logits, -1)
    ce = -(p_t * logq).sum(-1)                                              # (B, Nb)
    w = torch.exp(-torch.arange(c.block_size).float() / 4).repeat(n_blocks)
    loss_ce = (ce * w).sum() / (w.sum() * B)
    tv = 0.5 * (logq.exp().detach() - p_t).abs().sum(-1)
    loss_conf = F.binary_cross_entropy(conf.clamp(1e-6, 1 - 1e-6), (1 - tv).clamp(0, 1))
    acc = (logits.argmax(-1) == p_t.argmax(-1)).float().reshape(B, n_blocks, c.block_size).mean((0, 1))
    return loss_ce + 0.1 * loss_conf, loss_ce.item(), acc


@torch.no_grad()
def acceptance(d, seqs, feats, P):
    """Greedy speculative rounds over target-greedy sequences: the anchor starts at P (the first
    generated token) and advances by accepted + 1 each round. Returns per-slot counts."""
    c = d.c
    bsz = c.block_size
    reached = np.zeros(bsz)
    accepted = np.zeros(bsz)
    rounds, tokens = 0, 0
    for b in range(seqs.shape[0]):
        seq, ft = seqs[b], feats[b].float()
        s = P
        while s + bsz < seq.shape[0]:
            drafts, _, _ = d.draft_greedy(ft[:s], int(seq[s]), s)
            n = 0
            for k in range(bsz):
                reached[k] += 1
                if drafts[k] != int(seq[s + k + 1]):
                    break
                accepted[k] += 1
                n += 1
            rounds += 1
            tokens += n + 1
            s += n + 1
    return {'rounds': rounds, 'tokens_per_round': tokens / max(rounds, 1),
            'slot_reached': reached.tolist(), 'slot_accepted': accepted.tolist(),
            'slot_accept_rate': (accepted / np.maximum(reached, 1)).tolist()}


def init_from_target(d, target):
    with torch.no_grad():
        d.token_embd.copy_(target.token_embd)          # frozen, as DeepSpec does
        d.output.copy_(target.output)
        d.output_norm.copy_(target.output_norm)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='train/data')
    ap.add_argument('--out', default='train/out')
    ap.add_argument('--steps', type=int, default=600)
    ap.add_argument('--n-seq', type=int, default=256)
    ap.add_argument('--n-eval', type=int, default=16)
    ap.add_argument('--prompt', type=int, default=32)
    ap.add_argument('--gen', type=int, default=96)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--blocks', type=int, default=16)
    ap.add_argument('--lr', type=float, default=2e-3)
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--n-layer', type=int, default=2)
    ap.add_argument('--n-ff', type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    target, tc = load_target(os.path.join(a.out, 'target.pt'))
    target = quantized_copy(target)                    # float forward of the 1-bit weights
    for p in target.parameters():
        p.requires_grad_(False)
    tok = Tokenizer.load(os.path.join(a.data, 'vocab.json'))
    # taps: spread over the target, never its last layer (dspark.md §2.1)
    taps = list(range(tc.n_layer - 1)) if tc.n_layer <= 4 else [1, tc.n_layer // 2, tc.n_layer - 2]
    c = DConfig(n_vocab=tc.n_vocab, n_embd=tc.n_embd, n_ff=a.n_ff, n_layer=a.n_layer,
                mask_id=tok.mask_id, taps=taps)
    t0 = time.time()
    data_path = os.path.join(a.out, 'drafter_data.pt')
    if os.path.exists(data_path):
        seqs, feats, probs = torch.load(data_path)
    else:
        train_ids = np.load(os.path.join(a.data, 'train_ids.npy'))
        seqs, feats, probs = make_data(target, train_ids, a.n_seq, a.prompt, a.gen, c.taps, a.seed)
        torch.save((seqs, feats, probs), data_path)
    held_ids = np.load(os.path.join(a.data, 'heldout_ids.npy'))
    eseqs, efeats, _ = make_data(target, held_ids, a.n_eval, a.prompt, a.gen, c.taps, a.seed + 1000,
                                 greedy_frac=1.0, bs=a.n_eval)
    print('data ready %.0fs' % (time.time() - t0), flush=True)
    d = DSpark(c)
    init_from_target(d, target)
    params = [p for p in d.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    rng = np.random.default_rng(a.seed)
    log = open(os.path.join(a.out, 'drafter_log.tsv'), 'w')
    for step in range(a.steps):
        lr = a.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g['lr'] = lr
        idx = torch.from_numpy(rng.integers(0, seqs.shape[0], size=a.batch))
        loss, ce, acc = drafter_loss(d, seqs[idx], feats[idx], probs[idx], a.blocks, 8, rng)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if (step + 1) % 10 == 0:
            log.write('%d\t%.1f\t%.4f\t%s\n' % (step + 1, time.time() - t0, ce,
                                               ' '.join('%.3f' % v for v in acc.tolist())))
            log.flush()
        if (step + 1) % 100 == 0:
            print('step %d ce %.3f top1-agree per slot %s' % (step + 1, ce, acc.numpy().round(3)), flush=True)
            torch.save({'model': d.state_dict(), 'config': config_dict(c)}, os.path.join(a.out, 'drafter.pt'))
    torch.save({'model': d.state_dict(), 'config': config_dict(c)}, os.path.join(a.out, 'drafter.pt'))
    acc = acceptance(d, eseqs, efeats, a.prompt)
    acc['steps'] = a.steps
    acc['seconds'] = time.time() - t0
    json.dump(acc, open(os.path.join(a.out, 'drafter_eval.json'), 'w'), indent=1)
    print(acc, flush=True)


if __name__ == '__main__':
    main()
