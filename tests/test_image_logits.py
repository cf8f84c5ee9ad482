#!/usr/bin/env python3
"""Image rows in the text model against llama.cpp's mtmd (tests/fixtures/vision/README.md):
`bitspark logits --image-embd image_embd.f32 --image-grid 4x3` on tiny-f32 with the fixture's
chat prompt (text chunk, <image>, text chunk, then the 8 greedy tokens one at a time) gives
logits within the README's bounds (relative L2 per row: median <= 1e-3, worst <= 1e-2) and the
same greedy tokens, with an F32 and with an F16 KV cache; any batching of the prompt gives
bit-identical logits; the same rows as a 12x1 grid instead of 4x3 do not pass, so the test sees M-RoPE; bad image input fails clearly."""
import json
import os
import subprocess
import sys

import numpy as np

from fixture_lib import failures, fail, env

BITSPARK, FIX, TMP = env('BITSPARK'), env('BS_FIXTURES'), env('BS_TMP')
VIS = os.path.join(FIX, 'vision')
MEDIAN, WORST = 1e-3, 1e-2


def run(args, out=None, ok=True):
    cmd = [BITSPARK, 'logits', '-m', os.path.join(FIX, 'tiny-f32.gguf')] + args
    if out:
        cmd += ['-o', out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        fail('%s exited %d: %s' % (' '.join(cmd[2:8]), r.returncode, r.stderr.strip()))
    return r


def rel_err(ours, ref):
    return np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)


def main():
    ref_json = json.load(open(os.path.join(VIS, 'ref.json')))
    c = ref_json['chunks']
    greedy = ref_json['greedy_tokens']
    nx, ny = ref_json['image_tokens_grid_wh']
    embd = os.path.join(VIS, 'image_embd.f32')
    nv = ref_json['n_vocab']
    ref = np.fromfile(os.path.join(VIS, 'logits.f32'), dtype='<f4').reshape(-1, nv).astype(np.float64)
    toks = c[0]['tokens'] + ['<image>'] + c[2]['tokens'] + greedy
    text = ','.join(map(str, toks))
    n_prompt = len(c[0]['tokens']) + 1 + len(c[2]['tokens'])
    img = ['--image-embd', embd, '--image-grid', '%dx%d' % (nx, ny)]

    outs = {}
    for kv in ['f32', 'f16']:
        for batch in [n_prompt, 1, 20]:
            out = os.path.join(TMP, 'img_logits_%s_%d.f32' % (kv, batch))
            if run(['--tokens', text, '--batch', str(batch), '--kv-type', kv] + img, out).returncode:
                continue
            ours = np.fromfile(out, dtype='<f4').reshape(-1, nv)
            outs[(kv, batch)] = ours
            if ours.shape != ref.shape:
                fail('%s batch %d: %s rows, want %s' % (kv, batch, ours.shape, ref.shape))
                continue
            err = rel_err(ours.astype(np.float64), ref)
            pred = [int(t) for t in ours[ref_json['n_prompt_rows'] - 1:-1].argmax(axis=1)]
            print('%s batch %2d: median %.2e worst %.2e (row %d), greedy %s' %
                  (kv, batch, np.median(err), err.max(), err.argmax(), 'same' if pred == greedy else pred))
            if np.median(err) > MEDIAN or err.max() > WORST:
                fail('%s batch %d: median %.2e / worst %.2e over the bounds' % (kv, batch, np.median(err), err.max()))
            if pred != greedy:
                fail('%s batch %d: greedy %s, want %s' % (kv, batch, pred, greedy))
    for kv in ['f32', 'f16']:
        base = outs.get((kv, n_prompt))
        for batch in [1, 20]:
            o = outs.get((kv, batch))
            if base is not None and o is not None and not np.array_equal(base, o):
                fail('%s: batch %d differs from one batch' % (kv, batch))

    # The same embeddings as a 12x1 grid (image token i at x = i: the h and w streams and the
    # position after the image change) must not pass: the test sees the M-RoPE layout.
    out = os.path.join(TMP, 'img_logits_wrong.f32')
    if not run(['--tokens', text, '--kv-type', 'f32', '--image-embd', embd, '--image-grid', '%dx1' % (nx * ny)],
               out).returncode:
        err = rel_err(np.fromfile(out, dtype='<f4').reshape(-1, nv).astype(np.float64), ref)
        print('12x1 grid: worst %.2e' % err.max())
        if err.max() <= WORST:
            fail('a 12x1 grid also passes (worst %.2e): the positions are not tested' % err.max())

    # Bad input: clear errors, no crash.
    bad = [
        (['--tokens', text], 'needs --image-embd'),
        (['--tokens', text, '--image-embd', embd, '--image-grid', '5x3'], 'grid'),
        (['--tokens', text, '--image-embd', embd], 'go together'),
        (['--tokens', text] + img[:2] + ['--image-grid', '4by3'], 'WxH'),
        (['--tokens', '1,-1,2'] + img, 'out of range'),
        (['--tokens', text, '--image-embd', os.path.join(TMP, 'no-such.f32'), '--image-grid', '4x3'], 'no-such'),
    ]
    for args, want in bad:
        r = run(args, os.path.join(TMP, 'img_bad.f32'), ok=False)
        if r.returncode == 0 or r.returncode >= 128 or want not in r.stderr:
            fail('%s: exit %d, stderr %r (want an error naming %r)' % (' '.join(args[-3:]), r.returncode,
                                                                     r.stderr.strip(), want))
    if failures:
        sys.exit('%d failure(s)' % len(failures))
    print('ok')


main()
