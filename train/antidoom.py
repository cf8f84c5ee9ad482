"""Antidoom for the tiny target (../shared/reference/antidoom.md §2-§3, §5): mine loop pairs with
`bitspark antidoom mine` on the shipped Q1_0 model, train FTPO LoRAs, export GGUF adapters, merge
them with `bitspark lora merge` (F32 and Q1_0) and measure everything with `bitspark antidoom
eval`: chosen-win on training and held-out pairs, loop rate at temperatures 0, 0.3, 0.7.

    python3 train/antidoom.py BITSPARK [--data train/data --out train/out --models models]
        [--variants float,qat,latent] [--ship-lora float] [--ship-merged latent]

Steps (all outputs under OUT/antidoom/, numbers in OUT/antidoom/eval.json):
1. prompts: 24-token windows of the training split (mining) and of the held-out split (held-out
   pairs, and the loop-rate prompts: disjoint halves).
2. pairs: `antidoom mine` greedy, 160 tokens per completion, on the plain prompts (the natural
   loop onset: the first token of the 2nd copy) and with --generate-primes (a phrase already
   repeated 3 times: the first token of the next copy); chosen = the model's top-50 at the
   position with min-p 0.01, alphanumeric, <= 20, ascending (§2.5).
3. optional escape filter (--escape-filter; slow, a rollout per chosen token): keep a chosen token
   only if the greedy 64-token rollout after it, read after the loop's first copy, holds no loop.
4. §2.8 regularisation: rejected-token flattening (rows whose rejected token is more common than
   the median weigh (median/count)^0.3), dataset-wide chosen regularisation (a chosen token is
   dropped from rows beyond the 95th-percentile count).
5. FTPO (§3.2, the antidoom variant: hinge softplus((eps - Δc)/tau) with taper weights, per row
   divided by the number of chosen tokens, MSE tethers on the non-target logits (0.4) and on the
   target logits beyond 0.5 (0.05), eps 2, tau 1), plus a context tether: MSE between adapted and
   reference logits at every earlier position of the context (--lam-ctx), so the adapter changes
   the loop decision and not the rest of the text. LoRA rank 8, alpha 16, on every matrix of
   every layer except the embedding/head; AdamW, batch 8; stops when the mean chosen-win of the
   last 4 batches reaches --stop-win (0.35, the antidoom threshold) or after --max-seconds.
   Variants: float (W + s BA on the float 1-bit values), qat (binarize(W + s BA), what
   `lora merge --type q1_0` computes), latent (the LoRA on the QAT checkpoint's latent weights,
   binarized in the forward; gives a new Q1_0 file, its adapter is not for the shipped file).
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import time
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from export_gguf import load_target, write_target
from gguf_writer import GGUFWriter
from model import binarize, decode_step, quantized_copy
from tokenizer import Tokenizer

TARGETS = ['attn_qkv', 'attn_gate', 'ssm_beta', 'ssm_alpha', 'ssm_out', 'attn_q', 'attn_k', 'attn_v',
           'attn_output', 'ffn_gate', 'ffn_up', 'ffn_down']
TEMPS = '0,0.3,0.7'


# --- loop detector (antidoom §2.3 criterion; used only for the escape filter) ------------------
def find_loop(text, min_repeats=4, min_total=60, max_period=256):
    """Earliest (start, period) such that text[start:] begins with >= min_repeats copies of a
    period-long pattern covering >= min_total characters. None if there is no loop."""
    n, best = len(text), None
    for p in range(1, min(max_period, n // min_repeats) + 1):
        span, run = max(min_repeats * p, min_total), 0
        for j in range(n - p):
            run = run + 1 if text[j] == text[j + p] else 0
            if run >= span - p:
                s = j - run + 1
                if best is None or s < best[0]:
                    best = (s, p)
                break
    return best


# --- data ------------------------------------------------------------------------------------
def write_prompts(tok, ids, n, seed, path, P=24):
    rng, eot, out = np.random.default_rng(seed), tok.id_of['<|endoftext|>'], []
    while len(out) < n:
        s = int(rng.integers(0, len(ids) - P))
        w = ids[s:s + P].tolist()
        if eot not in w:
            out.append(json.dumps(tok.decode(w)))
    open(path, 'w').write('\n'.join(out) + '\n')


def bitspark(bs, *args, out=None):
    print('+ bitspark ' + ' '.join(args), flush=True)
    r = subprocess.run([bs] + list(args) + (['-t', '1'] if args[0] == 'antidoom' else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=True)
    if out:
        open(out, 'w').write(r.stdout)
    return r.stdout


def mine(bs, model, prompts, out, primed):
    if not os.path.exists(out):                   # mined once per OUT directory
        bitspark(bs, 'antidoom', 'mine', '-m', model, '--prompts', prompts, '-o', out, '-n', '160',
                 '--chosen-top-k', '50', '--chosen-min-p', '0.01', '--chosen-max', '20',
                 '--chosen-require-alnum', *(['--generate-primes'] if primed else []))
    rows = [json.loads(l) for l in open(out)]
    for r in rows:
        r['primed'] = primed
    return rows


@torch.no_grad()
def rollouts(m, ctx, firsts, n):
    """Greedy continuations of ctx + [f] for each f in firsts (prefix state computed once)."""
    state = [None] * m.c.n_layer
    for t, x in enumerate(ctx):
        decode_step(m, torch.tensor([x]), state, t)
    B = len(firsts)
    state = [tuple(s.repeat(B, *[1] * (s.dim() - 1)) for s in st) for st in state]
    cur, out = torch.tensor(firsts), []
    for t in range(len(ctx), len(ctx) + n):
        lg, _ = decode_step(m, cur, state, t)
        cur = lg.argmax(-1)
        out.append(cur)
    return torch.stack(out, 1).tolist()


@torch.no_grad()
def escape_filter(m, tok, rows, roll=64):
    """Keep the chosen tokens whose greedy rollout does not loop when read after the loop's first
    copy (the last `period` characters of the context): going back into the loop adds copies 2,
    3, 4 and is caught by the detector, as is falling into a new loop."""
    kept, n_ch, n_esc = [], 0, 0
    for r in rows:
        ctx, ch = r['context_ids'], r['chosen_ids']
        if not ch:
            continue
        text = tok.decode(ctx)
        tail = text[len(text) - min(r['repetition']['period'], len(text)):]
        outs = rollouts(m, ctx, ch, roll)
        esc = [c for c, o in zip(ch, outs) if find_loop(tail + tok.decode([c] + o)) is None]
        n_ch, n_esc = n_ch + len(ch), n_esc + len(esc)
        r['chosen_all'], r['chosen_ids'] = ch, esc
        if esc:
            kept.append(r)
    return kept, n_esc / max(n_ch, 1)


def regularise(rows, strength=0.3, pct=95):
    """§2.8: rejected flattening as row weights; dataset-wide chosen regularisation."""
    if not rows:
        return rows
    rc = Counter(r['rejected_id'] for r in rows)
    med = float(np.median(list(rc.values())))
    for r in rows:
        r['weight'] = min(1.0, (med / rc[r['rejected_id']]) ** strength)
    cc = Counter(c for r in rows for c in r['chosen_ids'])
    cap = np.percentile(list(cc.values()), pct)
    out = []
    for r in rows:
        keep = [c for c in r['chosen_ids'] if cc[c] <= cap]
        if keep:
            r['chosen_ids'] = keep
            out.append(r)
    return out


def save_pairs(rows, tok, path):
    with open(path, 'w') as f:
        for r in rows:
            r = dict(r, multi_chosen_tokens=[tok.tokens[c] for c in r['chosen_ids']])
            f.write(json.dumps(r) + '\n')


# --- LoRA + FTPO ---------------------------------------------------------------------------
class LoRA(nn.Module):
    """Low-rank adapters on the TARGETS matrices of a quantized_copy model (its weights hold the
    1-bit values). float: W + s B A. qat: binarize(W + s B A) (straight-through), i.e. exactly what
    `bitspark lora merge --type q1_0` of the adapter into the Q1_0 file computes."""
    def __init__(self, m, r=8, alpha=16, qat=False):
        super().__init__()
        self.r, self.alpha, self.scale, self.qat = r, alpha, alpha / r, qat
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
        """Point every target matrix at the adapted weight (a differentiable tensor) or back."""
        for key, (mod, n, base) in self.where.items():
            mod._parameters.pop(n, None)               # a plain tensor attribute from now on
            w = base + self.scale * self.b[key] @ self.a[key] if on else base
            setattr(mod, n, binarize(w, 'q1_0') if on and self.qat else w)


def ftpo_loss(z, zr, row, eps=2.0, tau=1.0, lam_nt=0.4, lam_tok=0.05, tau_tok=0.5, lam_ctx=1.0):
    """z, zr: (T, V) adapted / reference logits over the context; the pair is at the last row."""
    C, r = torch.tensor(row['chosen_ids']), row['rejected_id']
    zl, zrl = z[-1], zr[-1]
    d = zl[C] - zl[r]
    w = ((eps - d) / eps).clamp(0, 1).detach()
    if float(w.sum()) == 0:
        w = torch.ones_like(w)
    lp = (w * F.softplus((eps - d) / tau)).sum() / len(C)
    tgt = torch.cat([C, torch.tensor([r])])
    mask = torch.ones(z.shape[1], dtype=torch.bool)
    mask[tgt] = False
    lnt = ((zl[mask] - zrl[mask]) ** 2).mean()
    ltok = (((zl[tgt] - zrl[tgt]).abs() - tau_tok).clamp(min=0) ** 2).mean()
    lctx = ((z[:-1] - zr[:-1]) ** 2).mean() if z.shape[0] > 1 else z.new_zeros(())
    return lp + lam_nt * lnt + lam_tok * ltok + lam_ctx * lctx, float((d > 0).float().mean())


def train_lora(m, lora, tr, zref, a, seed, lr):
    opt = torch.optim.AdamW(lora.parameters(), lr=lr, weight_decay=0.0)
    rng, bs, wins, log, step = np.random.default_rng(seed), min(8, len(tr)), [], [], 0
    t0 = time.time()
    for ep in range(a.epochs):
        order = rng.permutation(len(tr))
        for i in range(0, len(order) - bs + 1, bs):
            lora.apply(True)
            loss, bw = 0.0, []
            for j in order[i:i + bs]:
                z = m(torch.tensor([tr[j]['context_ids']]))[0]
                l, w = ftpo_loss(z, zref[j], tr[j], lam_ctx=a.lam_ctx)
                loss, bw = loss + tr[j]['weight'] * l / bs, bw + [w]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lora.parameters(), 2.5)
            opt.step()
            step += 1
            wins.append(float(np.mean(bw)))
            if step % 10 == 0:
                log.append({'step': step, 'epoch': ep + 1, 'loss': float(loss), 'win4': float(np.mean(wins[-4:])),
                            'seconds': time.time() - t0})
                print(log[-1], flush=True)
            if len(wins) >= 4 and np.mean(wins[-4:]) >= a.stop_win or time.time() - t0 > a.max_seconds:
                lora.apply(True)
                return {'steps': step, 'epochs': step * bs / len(tr), 'train_win_last4': float(np.mean(wins[-4:])),
                        'seconds': time.time() - t0, 'log': log}
    lora.apply(True)
    return {'steps': step, 'epochs': a.epochs, 'train_win_last4': float(np.mean(wins[-4:])) if wins else None,
            'seconds': time.time() - t0, 'log': log}


def write_lora_gguf(lora, path, name):
    w = GGUFWriter()
    w.add('general.architecture', 'qwen35')
    w.add('general.type', 'adapter')
    w.add('general.name', name)
    w.add('adapter.type', 'lora')
    w.add('adapter.lora.alpha', float(lora.alpha), 'f32')
    for key, (mod, n, base) in lora.where.items():
        tname = 'blk.%s.%s.weight' % (key.split('_')[1], n)
        w.tensor(tname + '.lora_a', lora.a[key].detach().numpy(), 'f32')     # ne {in, r}
        w.tensor(tname + '.lora_b', lora.b[key].detach().numpy(), 'f32')     # ne {r, out}
    w.write(path)


# --- evaluation through bitspark -------------------------------------------------------------
def evaluate(bs, d, model, tag, extra=()):
    res = {}
    for split in ('train', 'val'):
        out = bitspark(bs, 'antidoom', 'eval', '-m', model, *extra, '--pairs',
                       os.path.join(d, 'pairs_%s.jsonl' % split), '--json')
        res['chosen_win_' + split] = json.loads(out)['chosen_win']
    out = bitspark(bs, 'antidoom', 'eval', '-m', model, *extra, '--loop-rate', '--prompts',
                   os.path.join(d, 'eval_prompts.jsonl'), '--temps', TEMPS, '-n', '192', '--json')
    res['loop_rate'] = {'%.1f' % x['temp']: x['rate'] for x in json.loads(out)['loop_rate']}
    print(tag, res, flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bitspark')
    ap.add_argument('--data', default='train/data')
    ap.add_argument('--out', default='train/out')
    ap.add_argument('--models', default='models')
    ap.add_argument('--base', default='models/bonsai-tiny-q1_0.gguf')
    ap.add_argument('--n-mine', type=int, default=400)
    ap.add_argument('--n-val', type=int, default=150)
    ap.add_argument('--n-eval', type=int, default=64)
    ap.add_argument('--epochs', type=int, default=2)
    ap.add_argument('--lr', type=float, default=6e-4, help='float LoRA')
    ap.add_argument('--lr-latent', type=float, default=5e-4, help='LoRA on the latent QAT weights')
    ap.add_argument('--lr-qat', type=float, default=1e-3, help='QAT-aware LoRA (must flip signs)')
    ap.add_argument('--lam-ctx', type=float, default=1.0)
    ap.add_argument('--stop-win', type=float, default=0.35)
    ap.add_argument('--max-seconds', type=float, default=420, help='per LoRA variant')
    ap.add_argument('--escape-filter', action='store_true', help='slow: a rollout per chosen token')
    ap.add_argument('--variants', default='float,qat,latent')
    ap.add_argument('--ship-lora', default='', help='variant whose adapter goes to MODELS/')
    ap.add_argument('--ship-merged', default='', help='variant whose merged, re-quantized Q1_0 goes to MODELS/')
    ap.add_argument('--skip-base', action='store_true', help='do not measure the base models again')
    ap.add_argument('--merge-types', default='f32,q1_0')
    ap.add_argument('--seed', type=int, default=11)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    t0 = time.time()
    d = os.path.join(a.out, 'antidoom')
    os.makedirs(d, exist_ok=True)
    tok = Tokenizer.load(os.path.join(a.data, 'vocab.json'))
    target, c = load_target(os.path.join(a.out, 'target.pt'))
    m = quantized_copy(target)                    # the float forward of the shipped 1-bit weights
    for p in m.parameters():
        p.requires_grad_(False)
    held = np.load(os.path.join(a.data, 'heldout_ids.npy'))
    write_prompts(tok, np.load(os.path.join(a.data, 'train_ids.npy')), a.n_mine, a.seed, os.path.join(d, 'mine_prompts.jsonl'))
    write_prompts(tok, held[:len(held) // 2], a.n_val, a.seed + 1, os.path.join(d, 'val_prompts.jsonl'))
    write_prompts(tok, held[len(held) // 2:], a.n_eval, a.seed + 2, os.path.join(d, 'eval_prompts.jsonl'))
    res = {'args': vars(a)}
    sets = {}
    for split, pf in (('train', 'mine_prompts'), ('val', 'val_prompts')):
        rows = []
        for primed in (False, True):
            rows += mine(a.bitspark, a.base, os.path.join(d, pf + '.jsonl'),
                         os.path.join(d, 'mined_%s_%s.jsonl' % (split, 'primed' if primed else 'natural')), primed)
        n_mined = len(rows)
        esc = None
        if a.escape_filter:
            rows, esc = escape_filter(m, tok, rows)
        rows = regularise(rows) if split == 'train' else [dict(r, weight=1.0) for r in rows]
        save_pairs(rows, tok, os.path.join(d, 'pairs_%s.jsonl' % split))
        sets[split] = rows
        res['pairs_' + split] = {'mined': n_mined, 'kept': len(rows), 'chosen_escape_share': esc,
                                 'primed': sum(r['primed'] for r in rows)}
        print(split, res['pairs_' + split], '%.0fs' % (time.time() - t0), flush=True)
    tr = sets['train']
    prev = os.path.join(a.models, 'bonsai-tiny-antidoom-q1_0.gguf')
    if not a.skip_base:
        res['base'] = evaluate(a.bitspark, d, a.base, 'base Q1_0')
        if os.path.exists(prev):                  # what is shipped now, on the same pairs/prompts
            res['previous_merged_q1_0'] = evaluate(a.bitspark, d, prev, 'previous shipped merged Q1_0')
        base_f32 = os.path.join(d, 'base-f32.gguf')
        bitspark(a.bitspark, 'quantize', a.base, base_f32, 'f32', '--allow-requantize')
        res['base_f32'] = evaluate(a.bitspark, d, base_f32, 'base F32')
    with torch.no_grad():
        zref = [m(torch.tensor([r['context_ids']]))[0] for r in tr]
    for variant in a.variants.split(','):
        torch.manual_seed(a.seed)
        if variant == 'latent':
            # the QAT model itself (latent weights, binarized in its forward): the LoRA is added to
            # the latent weights, so small deltas can flip the signs of weights near zero; the
            # result is a new Q1_0 file (the adapter is relative to the latent weights and is not
            # meant for the shipped Q1_0 file)
            mm = copy.deepcopy(target)
            for p in mm.parameters():
                p.requires_grad_(False)
            lora = LoRA(mm)
        else:
            mm, lora = m, LoRA(m, qat=(variant == 'qat'))
        r = train_lora(mm, lora, tr, zref, a, a.seed, {'float': a.lr, 'qat': a.lr_qat, 'latent': a.lr_latent}[variant])
        ad = os.path.join(d, 'lora-%s.gguf' % variant)
        write_lora_gguf(lora, ad, 'bitspark-bonsai-tiny-antidoom-lora-' + variant)
        if variant == 'latent':
            with torch.no_grad():
                for key, (mod, n, base) in lora.where.items():
                    setattr(mod, n, (base + lora.scale * lora.b[key] @ lora.a[key]).detach())
                mp = os.path.join(d, 'merged-latent-q1_0.gguf')
                write_target(mm, c, tok, mp, name='bitspark-bonsai-tiny-antidoom')
            r['merged_q1_0'] = evaluate(a.bitspark, d, mp, 'latent merged q1_0')
            res[variant] = r
            json.dump(res, open(os.path.join(d, 'eval.json'), 'w'), indent=1)
            if variant == a.ship_merged:
                shutil.copyfile(mp, os.path.join(a.models, 'bonsai-tiny-antidoom-q1_0.gguf'))
            if variant == a.ship_lora:
                shutil.copyfile(ad, os.path.join(a.models, 'bonsai-tiny-antidoom-lora.gguf'))
            continue
        lora.apply(False)
        r['runtime_lora'] = evaluate(a.bitspark, d, a.base, variant + ' runtime', ('--lora', ad))
        for t in a.merge_types.split(','):
            mp = os.path.join(d, 'merged-%s-%s.gguf' % (variant, t))
            rep = bitspark(a.bitspark, 'lora', 'merge', a.base, ad, '-o', mp, '--type', t)
            r['merge_report_' + t] = rep.strip().splitlines()[-1]
            r['merged_' + t] = evaluate(a.bitspark, d, mp, '%s merged %s' % (variant, t))
        res[variant] = r
        json.dump(res, open(os.path.join(d, 'eval.json'), 'w'), indent=1)
        os.makedirs(a.models, exist_ok=True)
        if variant == a.ship_lora:
            shutil.copyfile(ad, os.path.join(a.models, 'bonsai-tiny-antidoom-lora.gguf'))
        if variant == a.ship_merged:
            shutil.copyfile(os.path.join(d, 'merged-%s-q1_0.gguf' % variant),
                            os.path.join(a.models, 'bonsai-tiny-antidoom-q1_0.gguf'))
    res['seconds'] = time.time() - t0
    res['examples'] = [{'snippet': r['repetition']['snippet'][:80], 'rejected': tok.decode([r['rejected_id']]),
                        'chosen': [tok.decode([x]) for x in r['chosen_ids'][:6]]} for r in sets['val'][:5]]
    json.dump(res, open(os.path.join(d, 'eval.json'), 'w'), indent=1)
    print(json.dumps({k: v for k, v in res.items() if k != 'args'}, indent=1))


if __name__ == '__main__':
    main()
