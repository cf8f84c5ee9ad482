"""Held-out perplexity of the exported GGUF as bitspark computes it (`bitspark logits`, Q8_0
activations like llama.cpp) next to PyTorch's float forward of the same 1-bit weights, on the
same windows of held-out tokens.

    python3 train/eval_ppl.py BITSPARK MODEL.gguf CKPT.pt train/data/heldout_ids.npy [--windows 16 --len 256]
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import torch

from export_gguf import load_target
from model import quantized_copy


def ce(logits, ids):
    lg = logits.astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
    return float((lse[:-1] - lg[np.arange(len(ids) - 1), ids[1:]]).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('bitspark')
    ap.add_argument('gguf')
    ap.add_argument('ckpt')
    ap.add_argument('ids')
    ap.add_argument('--windows', type=int, default=16)
    ap.add_argument('--len', type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m = quantized_copy(load_target(a.ckpt)[0])
    ids = np.load(a.ids)
    tmp = tempfile.mkdtemp()
    tot_b = tot_t = 0.0
    n = 0
    for w in range(a.windows):
        x = ids[w * a.len:(w + 1) * a.len].astype(np.int64)
        out = os.path.join(tmp, 'l.f32')
        subprocess.run([a.bitspark, 'logits', '-m', a.gguf, '--tokens', ','.join(map(str, x)), '-o', out,
                        '-t', '1'], check=True, capture_output=True)
        lb = np.fromfile(out, '<f4').reshape(len(x), -1)
        with torch.no_grad():
            lt = m(torch.from_numpy(x)[None])[0].numpy()
        tot_b += ce(lb, x)
        tot_t += ce(lt, x)
        n += len(x) - 1
    r = {'tokens': n, 'bitspark_loss': tot_b / n, 'bitspark_ppl': float(np.exp(tot_b / n)),
         'pytorch_loss': tot_t / n, 'pytorch_ppl': float(np.exp(tot_t / n))}
    print(json.dumps(r))


if __name__ == '__main__':
    main()
