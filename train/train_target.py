"""Train the tiny qwen35 target with 1-bit QAT on the tokenized corpus.

    python3 train/train_target.py --data train/data --out train/out --steps 1500
    # the ternary variant: continue from the 1-bit model's latent weights with a ternary quantizer
    python3 train/train_target.py ... --init train/out/target.pt --quant q2_0 --name target_q2

Logs one line per 10 steps to OUT/target_log.tsv (step, seconds, lr, train loss) and writes
OUT/target.pt (state dict + config) every 100 steps and at the end, then the held-out loss and
perplexity (quantized forward) to OUT/target_eval.json.
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch

from model import Config, Qwen35, config_dict
from tokenizer import Tokenizer


def tokenize_file(tok, path, cache):
    if os.path.exists(cache) and os.path.getmtime(cache) > os.path.getmtime(path):
        return np.load(cache)
    ids = np.array(tok.encode(open(path).read()), dtype=np.int32)
    np.save(cache, ids)
    return ids


def batches(ids, bs, T, rng):
    while True:
        starts = rng.integers(0, len(ids) - T - 1, size=bs)
        x = np.stack([ids[s:s + T + 1] for s in starts]).astype(np.int64)
        yield torch.from_numpy(x[:, :-1]), torch.from_numpy(x[:, 1:])


@torch.no_grad()
def heldout_loss(model, ids, T, max_windows=64):
    model.eval()
    tot, n = 0.0, 0
    for s in range(0, min(len(ids) - 1, max_windows * T), T):
        x = torch.from_numpy(ids[s:s + T + 1].astype(np.int64))
        if len(x) < 2:
            break
        logits = model(x[None, :-1])
        tot += torch.nn.functional.cross_entropy(logits[0], x[1:], reduction='sum').item()
        n += len(x) - 1
    model.train()
    return tot / n, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default='train/data')
    ap.add_argument('--out', default='train/out')
    ap.add_argument('--steps', type=int, default=1500)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--seq', type=int, default=128)
    ap.add_argument('--lr', type=float, default=2e-3)
    ap.add_argument('--warmup', type=int, default=50)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--n-layer', type=int, default=8)
    ap.add_argument('--resume', action='store_true')
    ap.add_argument('--quant', default='q1_0', choices=['q1_0', 'q2_0'],
                    help='QAT quantizer: 1 bit (Q1_0) or ternary (Q2_0)')
    ap.add_argument('--init', help='start from the (latent) weights of this checkpoint, new optimizer')
    ap.add_argument('--name', default='target', help='OUT/NAME.pt, NAME_log.tsv, NAME_eval.json')
    ap.add_argument('--max-seconds', type=float, default=0,
                    help='also end (and anneal the learning rate) by this wall time')
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    tok = Tokenizer.load(os.path.join(a.data, 'vocab.json'))
    train_ids = tokenize_file(tok, os.path.join(a.data, 'train.txt'), os.path.join(a.data, 'train_ids.npy'))
    held_ids = tokenize_file(tok, os.path.join(a.data, 'heldout.txt'), os.path.join(a.data, 'heldout_ids.npy'))
    print('train tokens %d, heldout tokens %d' % (len(train_ids), len(held_ids)), flush=True)
    c = Config(n_vocab=len(tok.tokens), n_layer=a.n_layer, quant=a.quant)
    model = Qwen35(c)
    init_eval = {}
    if a.init:
        model.load_state_dict(torch.load(a.init)['model'])
        hl0, _ = heldout_loss(model, held_ids, 256)
        init_eval = {'init': a.init, 'heldout_loss_at_init': hl0, 'heldout_ppl_at_init': math.exp(hl0)}
        print('at init (%s quantizer): held-out loss %.4f, perplexity %.2f' % (a.quant, hl0, math.exp(hl0)), flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    print('params %d' % n_params, flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.01},
                             {'params': other, 'weight_decay': 0.0}], lr=a.lr, betas=(0.9, 0.95))
    step0 = 0
    ckpt = os.path.join(a.out, a.name + '.pt')
    if a.resume and os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st['model'])
        opt.load_state_dict(st['opt'])
        step0 = st['step']
    rng = np.random.default_rng(a.seed + step0)
    gen = batches(train_ids, a.batch, a.seq, rng)
    log = open(os.path.join(a.out, a.name + '_log.tsv'), 'a')
    t0 = time.time()
    ema = None

    def save(step):
        torch.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'step': step,
                    'config': config_dict(c)}, ckpt + '.tmp')
        os.replace(ckpt + '.tmp', ckpt)

    step = step0
    while step < a.steps:
        prog = step / a.steps
        if a.max_seconds:
            prog = max(prog, (time.time() - t0) / a.max_seconds)
            if prog >= 1:
                break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g['lr'] = lr
        x, y = next(gen)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c.n_vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if (step + 1) % 10 == 0:
            log.write('%d\t%.1f\t%.2e\t%.4f\t%.4f\n' % (step + 1, time.time() - t0, lr, loss.item(), ema))
            log.flush()
        if (step + 1) % 50 == 0:
            save(step + 1)
            print('step %d loss %.3f (ema %.3f) %.1fs' % (step + 1, loss.item(), ema, time.time() - t0), flush=True)
        step += 1
    save(step)
    hl, n = heldout_loss(model, held_ids, 256)
    ev = {'steps': step, 'batch': a.batch, 'seq': a.seq, 'params': n_params,
          'train_tokens_seen': step * a.batch * a.seq, 'seconds': time.time() - t0,
          'heldout_tokens': n, 'heldout_loss': hl, 'heldout_ppl': math.exp(hl), 'quant': a.quant, **init_eval}
    json.dump(ev, open(os.path.join(a.out, a.name + '_eval.json'), 'w'), indent=1)
    print(ev, flush=True)


if __name__ == '__main__':
    main()
