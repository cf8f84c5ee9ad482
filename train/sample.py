"""Greedy and sampled continuations from the trained target (float forward of its 1-bit
weights), for the README.

    python3 train/sample.py CKPT.pt VOCAB.json [--n 60] [--temp 0.8] [--top-p 0.9]
"""
import argparse

import torch

from export_gguf import load_target
from model import generate, quantized_copy
from tokenizer import Tokenizer

PROMPTS = ['The meaning of life is', 'A computer program', 'Q: What do you call a',
           'The GNU General Public License', 'To copy a file,']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('ckpt')
    ap.add_argument('vocab')
    ap.add_argument('--n', type=int, default=60)
    ap.add_argument('--temp', type=float, default=0.8)
    ap.add_argument('--top-p', type=float, default=0.9)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, _ = load_target(a.ckpt)
    m = quantized_copy(m)
    tok = Tokenizer.load(a.vocab)
    g = torch.Generator().manual_seed(a.seed)
    for p in PROMPTS:
        ids = torch.tensor([tok.encode(p)])
        for mode, temp in [('greedy', 0.0), ('sampled T=%.1f top-p %.1f' % (a.temp, a.top_p), a.temp)]:
            out = generate(m, ids, a.n, temp, a.top_p, g)[0].tolist()
            text = tok.decode(out[ids.shape[1]:]).split('<|endoftext|>')[0]
            print('### %s | %s\n%s%s\n' % (p, mode, p, text))


if __name__ == '__main__':
    main()
