"""The vision encoder against a float64 numpy reference, written here from the fixture README's
description of mtmd's qwen3vl_merger graph, on shapes other than the fixture's.

Projectors (F32 weights):
  - `bitspark synth --preset mmproj-tiny --seed 7` (width 64, 2 heads, 2 layers, 6x6 table);
  - a random Hugging Face checkpoint of another shape (width 96, 3 heads of 32, MLP 160, 3 layers,
    5x5 position table, output 128, eps 1e-5) made here and converted by
    `bitspark convert hf-to-gguf --mmproj`, so the converter's output is checked by its numbers.
Images: random PPMs whose sides are already multiples of 32 with at least 8 tokens, so mtmd's
preprocessing is only the normalisation (no resize): 160x64 and 64x160 (non-square, the table
up- and down-sampled with antialiasing), 256x32 (a 16x2 patch grid: strong downsampling), 96x96.
`bitspark mmproj-embed` must agree with the reference to worst row relative L2 <= 2e-6 (f32
arithmetic through a few layers; measured 2.5e-7 to 3.9e-7), and a reference with the RoPE halves of x and y swapped, or
without the antialiasing, must not (so the check can tell those apart).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUF  # noqa: E402
import hf_checkpoint  # noqa: E402

B = os.environ['BITSPARK']
T = os.path.join(os.environ.get('BS_TMP', '/tmp'), 'vision_ref.%d' % os.getpid())
TOL = 2e-6
fails = []


def check(ok, what):
    print(('ok   ' if ok else 'FAIL ') + what)
    if not ok:
        fails.append(what)


def run(*args):
    return subprocess.run([B] + list(args), capture_output=True, text=True)


# --- the reference ---------------------------------------------------------------------------

def aa_weights(n_in, n_out):
    """torch F.interpolate(mode='bilinear', align_corners=False, antialias=True) along one axis:
    an [n_out, n_in] matrix (triangle filter of support max(1, scale), weights normalised)."""
    scale = n_in / n_out
    support = scale if scale >= 1 else 1.0
    inv = 1 / scale if scale >= 1 else 1.0
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        for j in range(lo, hi):
            w[i, j] = max(0.0, 1 - abs((j - center + 0.5) * inv))
        w[i] /= w[i].sum()
    return w


def plain_bilinear(n_in, n_out):
    """The same without antialiasing (support 1 whatever the scale): the wrong answer."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = max(scale * (i + 0.5) - 0.5, 0)
        j0 = min(int(src), n_in - 1)
        j1 = min(j0 + 1, n_in - 1)
        t = src - j0
        w[i, j0] += 1 - t
        w[i, j1] += t
    return w


def ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def encode(g, px, swap_rope=False, aa=True):
    """px: planar [3][H][W] float64 (normalised). Returns [n_tokens, out] float64."""
    m = g.meta
    C, H = m['clip.vision.embedding_length'], m['clip.vision.attention.head_count']
    P, eps, L = m['clip.vision.patch_size'], m['clip.vision.attention.layer_norm_epsilon'], m['clip.vision.block_count']
    D = C // H
    hp, wp = px.shape[1] // P, px.shape[2] // P
    order = [(2 * by + dy, 2 * bx + dx) for by in range(hp // 2) for bx in range(wp // 2) for dy in (0, 1) for dx in (0, 1)]
    K = g.get('v.patch_embd.weight') + g.get('v.patch_embd.weight.1')   # [C, 3, P, P]
    x = np.stack([np.einsum('cikl,ikl->c', K, px[:, y * P:(y + 1) * P, xx * P:(xx + 1) * P]) for y, xx in order])
    x += g.get('v.patch_embd.bias')
    tab = g.get('v.position_embd.weight')                                 # [S*S, C]
    S = int(round(np.sqrt(tab.shape[0])))
    rz = aa_weights if aa else plain_bilinear
    pos = np.einsum('ys,xt,stc->yxc', rz(S, hp), rz(S, wp), tab.reshape(S, S, C))
    x += np.stack([pos[y, xx] for y, xx in order])
    ys = np.array([o[0] for o in order], dtype=np.float64)
    xs = np.array([o[1] for o in order], dtype=np.float64)
    if swap_rope:
        ys, xs = xs, ys
    j = np.arange(D // 2)
    freq = 10000.0 ** (-4.0 * np.where(j < D // 4, j, j - D // 4) / D)
    ang = np.where(j < D // 4, ys[:, None], xs[:, None]) * freq         # [n, D/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(t):   # t [n, H, D]: pairs (j, j + D/2)
        a, b = t[..., :D // 2], t[..., D // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    n = len(order)
    for i in range(L):
        p = 'v.blk.%d.' % i
        h = ln(x, g.get(p + 'ln1.weight'), g.get(p + 'ln1.bias'), eps)
        qkv = h @ g.get(p + 'attn_qkv.weight').T + g.get(p + 'attn_qkv.bias')
        q, k, v = (qkv[:, s * C:(s + 1) * C].reshape(n, H, D) for s in range(3))
        q, k = rope(q), rope(k)
        s_ = np.einsum('qhd,khd->hqk', q, k) / np.sqrt(D)
        s_ = np.exp(s_ - s_.max(-1, keepdims=True))
        s_ /= s_.sum(-1, keepdims=True)
        a = np.einsum('hqk,khd->qhd', s_, v).reshape(n, C)
        x = x + a @ g.get(p + 'attn_out.weight').T + g.get(p + 'attn_out.bias')
        h = ln(x, g.get(p + 'ln2.weight'), g.get(p + 'ln2.bias'), eps)
        u = gelu(h @ g.get(p + 'ffn_up.weight').T + g.get(p + 'ffn_up.bias'))
        x = x + u @ g.get(p + 'ffn_down.weight').T + g.get(p + 'ffn_down.bias')
    x = ln(x, g.get('v.post_ln.weight'), g.get('v.post_ln.bias'), eps).reshape(n // 4, 4 * C)
    y = gelu(x @ g.get('mm.0.weight').T + g.get('mm.0.bias'))
    return y @ g.get('mm.2.weight').T + g.get('mm.2.bias')


# --- the projectors and images ---------------------------------------------------------------

def random_checkpoint(d, rng):
    C, H, FF, L, S, OUT, P = 96, 3, 160, 3, 5, 128, 16
    ts = {'patch_embed.proj.weight': rng.normal(0, 1 / np.sqrt(3 * 2 * P * P), (C, 3, 2, P, P)),
          'patch_embed.proj.bias': rng.normal(0, 0.05, C), 'pos_embed.weight': rng.normal(0, 0.3, (S * S, C)),
          'merger.norm.weight': 1 + rng.normal(0, 0.05, C), 'merger.norm.bias': rng.normal(0, 0.05, C),
          'merger.linear_fc1.weight': rng.normal(0, 1 / np.sqrt(4 * C), (4 * C, 4 * C)),
          'merger.linear_fc1.bias': rng.normal(0, 0.05, 4 * C),
          'merger.linear_fc2.weight': rng.normal(0, 1 / np.sqrt(4 * C), (OUT, 4 * C)),
          'merger.linear_fc2.bias': rng.normal(0, 0.05, OUT)}
    for i in range(L):
        p = 'blocks.%d.' % i
        for nm in ('norm1', 'norm2'):
            ts[p + nm + '.weight'] = 1 + rng.normal(0, 0.05, C)
            ts[p + nm + '.bias'] = rng.normal(0, 0.05, C)
        for nm, o, i_ in (('attn.qkv', 3 * C, C), ('attn.proj', C, C), ('mlp.linear_fc1', FF, C), ('mlp.linear_fc2', C, FF)):
            ts[p + nm + '.weight'] = rng.normal(0, 1 / np.sqrt(i_), (o, i_))
            ts[p + nm + '.bias'] = rng.normal(0, 0.05, o)
    os.makedirs(d)
    hf_checkpoint.write_safetensors(os.path.join(d, 'model.safetensors'),
                                    [('model.visual.' + k, 'F32', v.shape, hf_checkpoint.encode(v, 'F32')) for k, v in ts.items()])
    cfg = {'architectures': ['Qwen3_5ForConditionalGeneration'], 'text_config': {'rms_norm_eps': 1e-5},
           'vision_config': {'depth': L, 'hidden_size': C, 'intermediate_size': FF, 'num_heads': H,
                             'out_hidden_size': OUT, 'patch_size': P, 'spatial_merge_size': 2,
                             'temporal_patch_size': 2, 'num_position_embeddings': S * S}}
    with open(os.path.join(d, 'config.json'), 'w') as f:
        json.dump(cfg, f)


def main():
    shutil.rmtree(T, ignore_errors=True)
    os.makedirs(T)
    rng = np.random.default_rng(11)
    projs = []
    p = os.path.join(T, 'tiny7.gguf')
    r = run('synth', '--preset', 'mmproj-tiny', '--seed', '7', '-o', p)
    check(r.returncode == 0, 'synth mmproj-tiny --seed 7')
    projs.append(('synth mmproj-tiny', p))
    d = os.path.join(T, 'hf')
    random_checkpoint(d, rng)
    p = os.path.join(T, 'converted.gguf')
    r = run('convert', 'hf-to-gguf', d, p, '--mmproj')
    check(r.returncode == 0, 'convert --mmproj of a 96-wide, 3-head checkpoint%s' % ('' if r.returncode == 0 else ': ' + r.stderr))
    projs.append(('converted 96x3', p))
    for name, path in projs:
        if not os.path.exists(path):
            continue
        g = GGUF(path)
        mean = np.array(g.meta['clip.vision.image_mean'], dtype=np.float32)
        std = np.array(g.meta['clip.vision.image_std'], dtype=np.float32)
        width = g.meta['clip.vision.projection_dim']
        for w, h in ((160, 64), (64, 160), (256, 32), (96, 96)):
            img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            ppm = os.path.join(T, 'img.ppm')
            with open(ppm, 'wb') as f:
                f.write(b'P6\n%d %d\n255\n' % (w, h) + img.tobytes())
            out = os.path.join(T, 'rows.f32')
            r = run('mmproj-embed', '--mmproj', path, '--image', ppm, '-o', out, '-t', '2')
            tag = '%s %dx%d' % (name, w, h)
            if r.returncode:
                check(False, tag + ': mmproj-embed: ' + r.stderr)
                continue
            got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(-1, width)
            # mtmd's normalisation in float: (u8 / 255 - mean) / std
            px = ((img.astype(np.float32) / np.float32(255) - mean) / std).astype(np.float64).transpose(2, 0, 1)
            ref = encode(g, px)
            check(got.shape == ref.shape, '%s: %d rows' % (tag, ref.shape[0]))
            if got.shape != ref.shape:
                continue
            err = max(np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(got, ref))
            check(err <= TOL, '%s: worst row rel L2 %.2e <= %.0e' % (tag, err, TOL))
            if w != h:
                e2 = max(np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(got, encode(g, px, swap_rope=True)))
                check(e2 > 100 * TOL, '%s: x/y RoPE swapped is told apart (%.1e)' % (tag, e2))
            if (w, h) == (256, 32):
                e3 = max(np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(got, encode(g, px, aa=False)))
                check(e3 > 100 * TOL, '%s: no antialiasing is told apart (%.1e)' % (tag, e3))


main()
if not fails:
    shutil.rmtree(T, ignore_errors=True)
print('%d failed' % len(fails))
sys.exit(1 if fails else 0)
