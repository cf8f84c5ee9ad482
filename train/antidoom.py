"""Antidoom for the tiny target (../shared/reference/antidoom.md §2-§3): mine loop pairs from the
target's own greedy generations, train an FTPO LoRA on the float model (the 1-bit weights held in
float, as Bonsai trained on its "unpacked" 1-bit model), merge it, re-quantize to 1 bit, and
measure chosen-win and loop rate at every stage. Exports the LoRA as a GGUF adapter and the
merged, re-quantized model as a Q1_0 GGUF.

Pairs: greedy continuations of corpus prompts; a loop is a section repeated >= 4 times covering
>= 60 characters (character-based, §2.3); the rejected token is the one covering the first
character of the second copy; chosen = the base model's top alternatives at that position
(temperature 1, min-p 0.01 of the best, top-k 50, rejected removed, sorted ascending, decoded
text with an alphanumeric character, at most 20) (§2.5).
Training stops once the mean chosen-win of the last two batches reaches --stop-win (0.4, the
antidoom threshold; more overtrains and creates new loops).
Loss: FTPO as in the antidoom variant (§3.2): preference hinge softplus((eps - Δc)/tau) with
taper weights, per row divided by the number of chosen tokens; MSE tethers on non-target logits
(lambda 0.4) and on target logits beyond tau_tok 0.5 (lambda 0.05); eps 2, tau 1.

    python3 train/antidoom.py --data train/data --out train/out
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from export_gguf import load_target, write_target
from gguf_writer import GGUFWriter
from model import binarize, generate, quantized_copy
from tokenizer import Tokenizer

TARGETS = ['attn_qkv', 'attn_gate', 'ssm_out', 'attn_q', 'attn_k', 'attn_v', 'attn_output',
           'ffn_gate', 'ffn_up', 'ffn_down']


def find_loop(text, min_repeats=4, min_total=60, max_period=256):
    """Earliest (start, period) such that text[start:] begins with >= min_repeats copies of a
    period-long pattern covering >= min_total characters (minimal period). None if no loop."""
    n = len(text)
    best = None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        reps = max(min_repeats, -(-min_total // p))
        span = reps * p
        # positions where text[i:i+span] is periodic with period p
        i = 0
        run = 0
        for j in range(n - p):
            if text[j] == text[j + p]:
                run += 1
                if run >= span - p:
                    s = j - run + 1
                    if best is None or s < best[0]:
                        best = (s, p)
                    break
            else:
                run = 0
        if best is not None and best[0] == 0:
            break
    return best


def token_char_offsets(tok, ids):
    """Character offset of the start of each token in tok.decode(ids) (prefix decoding)."""
    offs, text = [], ''
    for k in range(len(ids)):
        offs.append(len(tok.decode(ids[:k])))
    return offs


def choose(tok, logits, rejected, k=50, min_p=0.01, max_n=20):
    p = torch.softmax(logits.double(), -1)
    p[rejected] = 0
    order = torch.argsort(p, descending=True)[:k]
    keep = [int(i) for i in order if p[i] >= min_p * p[order[0]]]
    keep = [i for i in keep if tok.types[i] == 1 and any(ch.isalnum() for ch in tok.decode([i]))
            and tok.decode([i]).strip().lower() != tok.decode([rejected]).strip().lower()]
    keep.sort(key=lambda i: float(p[i]))                       # ascending: spread out
    return keep[:max_n]


@torch.no_grad()
def mine(m, tok, ids, n_prompts, P, G, seed):
    rng = np.random.default_rng(seed)
    pairs, gens = [], 0
    starts = rng.integers(0, len(ids) - P, size=n_prompts)
    prompts = torch.from_numpy(np.stack([ids[s:s + P] for s in starts]).astype(np.int64))
    out = generate(m, prompts, G)
    looped = 0
    for b in range(n_prompts):
        gen = out[b, P:].tolist()
        text = tok.decode(gen)
        lp = find_loop(text)
        gens += 1
        if lp is None:
            continue
        looped += 1
        offs = token_char_offsets(tok, gen)
        rs = lp[0] + lp[1]
        ti = max(k for k in range(len(gen)) if offs[k] <= rs)
        ctx = out[b, :P + ti]
        logits = m(ctx[None])[0, -1]
        rej = gen[ti]
        ch = choose(tok, logits, rej)
        if ch:
            pairs.append({'context': ctx.tolist(), 'rejected': rej, 'chosen': ch,
                          'period': lp[1], 'snippet': text[lp[0]:lp[0] + 2 * lp[1]][:80]})
    return pairs, looped / max(gens, 1)


@torch.no_grad()
def loop_rate(m, tok, ids, n, P, G, seed):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(ids) - P, size=n)
    prompts = torch.from_numpy(np.stack([ids[s:s + P] for s in starts]).astype(np.int64))
    out = generate(m, prompts, G)
    return sum(find_loop(tok.decode(out[b, P:].tolist())) is not None for b in range(n)) / n


def one_bit(mm):
    """The model generate() can run: a QAT model (latent weights, possibly with LoRA tensors
    attached) becomes a copy holding the binarized values; a float model is used as it is."""
    if not mm.c.qat:
        return mm
    g = quantized_copy(mm)
    for mod in g.modules():
        for n in TARGETS:
            v = mod.__dict__.get(n)
            if isinstance(v, torch.Tensor):
                mod.__dict__[n] = binarize(v)
    return g


class LoRA(nn.Module):
    """Low-rank adapters on the TARGETS matrices of a (quantized_copy) model: W + s * B A."""
    def __init__(self, m, r=8, alpha=16):
        super().__init__()
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        self.a, self.b, self.where = nn.ParameterDict(), nn.ParameterDict(), {}
        for il, blk in enumerate(m.blocks):
            for mod in (blk, blk.mixer):
                for n in TARGETS:
                    if hasattr(mod, n):
                        w = getattr(mod, n)
                        key = 'blk_%d_%s' % (il, n)
                        self.a[key] = nn.Parameter(torch.randn(r, w.shape[1]) / math.sqrt(w.shape[1]))
                        self.b[key] = nn.Parameter(torch.zeros(w.shape[0], r))
                        self.where[key] = (mod, n, w.detach().clone())

    def apply(self, on=True):
        """Point every target matrix at base + scale * B A (a differentiable tensor) or back."""
        for key, (mod, n, base) in self.where.items():
            mod._parameters.pop(n, None)           # a plain tensor attribute from now on
            setattr(mod, n, base + self.scale * self.b[key] @ self.a[key] if on else base)

    def merged_weights(self):
        return {key: (mod, n, (base + self.scale * self.b[key] @ self.a[key]).detach())
                for key, (mod, n, base) in self.where.items()}


def last_logits(m, ctxs):
    """Final-position logits for a list of token lists (run one by one: different lengths)."""
    return torch.stack([m(torch.tensor([c]))[0, -1] for c in ctxs])


def ftpo_loss(z, zr, pairs, eps=2.0, tau=1.0, lam_nt=0.4, lam_tok=0.05, tau_tok=0.5):
    lp, lnt, ltok, wins = 0.0, 0.0, 0.0, []
    for b, p in enumerate(pairs):
        C = torch.tensor(p['chosen'])
        r = p['rejected']
        d = z[b, C] - z[b, r]
        w = ((eps - d) / eps).clamp(0, 1).detach()
        if float(w.sum()) == 0:
            w = torch.ones_like(w)
        lp = lp + (w * F.softplus((eps - d) / tau)).sum() / len(C)
        tgt = torch.cat([C, torch.tensor([r])])
        mask = torch.ones(z.shape[1], dtype=torch.bool)
        mask[tgt] = False
        lnt = lnt + ((z[b, mask] - zr[b, mask]) ** 2).mean()
        ltok = ltok + (((z[b, tgt] - zr[b, tgt]).abs() - tau_tok).clamp(min=0) ** 2).mean()
        wins.append(float((d > 0).float().mean()))
    B = len(pairs)
    return (lp + lam_nt * lnt + lam_tok * ltok) / B, float(np.mean(wins))


@torch.no_grad()
def chosen_win(m, pairs):
    z = last_logits(m, [p['context'] for p in pairs])
    return float(np.mean([float((z[b, torch.tensor(p['chosen'])] > z[b, p['rejected']]).float().mean())
                          for b, p in enumerate(pairs)]))


def train_lora(m, lora, tr, val, zref_tr, a, rng):
    opt = torch.optim.AdamW(lora.parameters(), lr=a.lr, weight_decay=0.0)
    bs, log = 8, []
    for ep in range(a.epochs):
        order = rng.permutation(len(tr))
        wins = []
        for i in range(0, len(tr), bs):
            idx = order[i:i + bs]
            lora.apply(True)
            z = last_logits(m, [tr[j]['context'] for j in idx])
            loss, win = ftpo_loss(z, zref_tr[idx], [tr[j] for j in idx])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lora.parameters(), 2.5)
            opt.step()
            wins.append(win)
            if len(wins) >= 2 and np.mean(wins[-2:]) >= a.stop_win:
                break                              # early stop within the epoch (§3.3)
        with torch.no_grad():
            lora.apply(True)
            vw = chosen_win(m, val)
        log.append({'epoch': ep + 1, 'batches': len(wins), 'train_win_last': float(np.mean(wins[-2:])),
                    'val_win': vw})
        print(log[-1], flush=True)
        if np.mean(wins[-2:]) >= a.stop_win:
            break
    return {'epochs': log}


def write_lora_gguf(lora, path, c):
    w = GGUFWriter()
    w.add('general.architecture', 'qwen35')
    w.add('general.type', 'adapter')
    w.add('general.name', 'bitspark-bonsai-tiny-antidoom-lora')
    w.add('adapter.type', 'lora')
    w.add('adapter.lora.alpha', float(lora.alpha), 'f32')
    for key, (mod, n, base) in lora.where.items():
        il = int(key.split('_')[1])
        name = 'blk.%d.%s.weight' % (il, n)
        w.tensor(name + '.lora_a', lora.a[key].detach().numpy(), 'f32')     # ne {in, r}
        w.tensor(name + '.lora_b', lora.b[key].detach().numpy(), 'f32')     # ne {r, out}
    w.write(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='train/data')
    ap.add_argument('--out', default='train/out')
    ap.add_argument('--models', default='models')
    ap.add_argument('--n-prompts', type=int, default=192)
    ap.add_argument('--n-eval', type=int, default=64)
    ap.add_argument('--prompt', type=int, default=24)
    ap.add_argument('--gen', type=int, default=128)
    ap.add_argument('--epochs', type=int, default=12)
    ap.add_argument('--lr', type=float, default=5e-4)
    ap.add_argument('--stop-win', type=float, default=0.4)
    ap.add_argument('--seed', type=int, default=11)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    t0 = time.time()
    tok = Tokenizer.load(os.path.join(a.data, 'vocab.json'))
    target, c = load_target(os.path.join(a.out, 'target.pt'))
    m = quantized_copy(target)
    for p in m.parameters():
        p.requires_grad_(False)
    ids = np.load(os.path.join(a.data, 'train_ids.npy'))
    held = np.load(os.path.join(a.data, 'heldout_ids.npy'))
    cache = os.path.join(a.out, 'antidoom_pairs.json')
    if os.path.exists(cache):
        pairs, rate_mine = json.load(open(cache))
    else:
        pairs, rate_mine = mine(m, tok, ids, a.n_prompts, a.prompt, a.gen, a.seed)
        json.dump([pairs, rate_mine], open(cache, 'w'))
    rng = np.random.default_rng(a.seed)
    rng.shuffle(pairs)
    nv = max(1, len(pairs) // 5)
    val, tr = pairs[:nv], pairs[nv:]
    print('%d pairs (%d train, %d val) from %d prompts, loop rate %.2f, %.0fs' % (
        len(pairs), len(tr), len(val), a.n_prompts, rate_mine, time.time() - t0), flush=True)
    res = {'pairs_train': len(tr), 'pairs_val': len(val), 'mining_loop_rate': rate_mine}
    ev = lambda mm: {'chosen_win_train': chosen_win(mm, tr), 'chosen_win_val': chosen_win(mm, val),
                     'loop_rate_heldout': loop_rate(one_bit(mm), tok, held, a.n_eval, a.prompt, a.gen, a.seed + 1)}
    res['base'] = ev(m)
    print('base', res['base'], flush=True)
    with torch.no_grad():
        zref_tr = last_logits(m, [p['context'] for p in tr])
    # (a) the Bonsai recipe: LoRA on the float model holding the 1-bit values, merged, re-quantized
    # (b) QAT LoRA: the LoRA is added to the latent weights and the forward binarizes the sum (STE),
    #     so what is trained is exactly what the merged, re-quantized file holds
    import copy
    for variant, mm in [('float', m), ('qat', copy.deepcopy(target))]:
        for p in mm.parameters():
            p.requires_grad_(False)
        torch.manual_seed(a.seed)
        lora = LoRA(mm)
        res[variant] = train_lora(mm, lora, tr, val, zref_tr, a, rng)
        with torch.no_grad():
            lora.apply(True)
            res[variant]['lora'] = ev(mm)
            print(variant, 'lora', res[variant]['lora'], flush=True)
            merged = lora.merged_weights()
            lora.apply(False)
            for key, (mod, n, wm) in merged.items():
                setattr(mod, n, nn.Parameter(binarize(wm), requires_grad=False))
            res[variant]['merged_q1'] = ev(mm)
            print(variant, 'merged + re-quantized', res[variant]['merged_q1'], flush=True)
        os.makedirs(a.models, exist_ok=True)
        write_lora_gguf(lora, os.path.join(a.out, 'antidoom-lora-%s.gguf' % variant), c)
        if variant == 'qat':
            write_lora_gguf(lora, os.path.join(a.models, 'bonsai-tiny-antidoom-lora.gguf'), c)
            write_target(quantized_copy(mm), c, tok, os.path.join(a.models, 'bonsai-tiny-antidoom-q1_0.gguf'),
                         name='bitspark-bonsai-tiny-antidoom')
    res['seconds'] = time.time() - t0
    res['examples'] = [{'snippet': p['snippet'], 'rejected': tok.decode([p['rejected']]),
                        'chosen': [tok.decode([x]) for x in p['chosen'][:8]]} for p in val[:5]]
    json.dump(res, open(os.path.join(a.out, 'antidoom_eval.json'), 'w'), indent=1)
    print(json.dumps(res, indent=1))


if __name__ == '__main__':
    main()
