"""hf-to-gguf --mmproj: a Hugging Face Qwen3.5 checkpoint's vision tower converts to the mmproj
GGUF llama.cpp's converter writes.

The HF form is made here from the fixture projector (tests/fixtures/vision, written by
llama.cpp's converter) by undoing its layout: the two patch kernels stacked back into the Conv3d
weight [C, 3, 2, P, P], GGUF names -> model.visual.* names, the shape into config.json's
vision_config (the text rms_norm_eps becomes the LayerNorm epsilon, as llama.cpp does), plus a
text tensor the converter must leave alone. Checks:
  1. the converted file has the fixture's tensors (names, types, shapes, bytes) and metadata
     values (general.name aside), and `bitspark mmproj-embed` gives the same rows from both;
  2. BF16 checkpoint, kept and with --type f16 / q8_0: the matrices get the type, norms, biases
     and the position table stay F32, the patch kernels stay a float type; worst row rel L2 of the
     rows: BF16 vs the F32 fixture <= 3e-2 (bf16 rounding of every weight), f16 vs BF16 <= 1e-2
     and q8_0 vs BF16 <= 4e-2 (the products round activations to the weight type, as ggml
     does); each matrix holds the checkpoint's values: exactly for BF16, rel L2 <= 1e-3 for
     f16 and 1e-2 for q8_0;
  3. preprocessor_config.json's image_mean / image_std become clip.vision.image_mean / _std;
  4. bad checkpoints fail with a message and leave no output: a deepstack merger tensor, a
     missing tensor, a shape against config.json, a non-square position table, --type q4_0;
     one over an existing file leaves it as it was.
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
FX = os.path.join(os.environ['BS_FIXTURES'], 'vision')
T = os.path.join(os.environ.get('BS_TMP', '/tmp'), 'convert_mmproj.%d' % os.getpid())
fails = []

BLK = {'ln1': 'norm1', 'ln2': 'norm2', 'attn_qkv': 'attn.qkv', 'attn_out': 'attn.proj',
       'ffn_up': 'mlp.linear_fc1', 'ffn_down': 'mlp.linear_fc2'}
GLOBAL = {'v.patch_embd.bias': 'patch_embed.proj.bias', 'v.position_embd.weight': 'pos_embed.weight',
          'v.post_ln.weight': 'merger.norm.weight', 'v.post_ln.bias': 'merger.norm.bias',
          'mm.0.weight': 'merger.linear_fc1.weight', 'mm.0.bias': 'merger.linear_fc1.bias',
          'mm.2.weight': 'merger.linear_fc2.weight', 'mm.2.bias': 'merger.linear_fc2.bias'}


def check(ok, what):
    print(('ok   ' if ok else 'FAIL ') + what)
    if not ok:
        fails.append(what)


def run(*args):
    return subprocess.run([B] + list(args), capture_output=True, text=True)


def hf_name(n):
    if n in GLOBAL:
        return 'model.visual.' + GLOBAL[n]
    _, _, il, kind, wb = n.split('.')
    return 'model.visual.blocks.%s.%s.%s' % (il, BLK[kind], wb)


def make_hf(g, out, dtype='F32', extra=None, drop=None, reshape=None, npos=None, pre=None):
    """The fixture projector g as an HF checkpoint directory."""
    os.makedirs(out, exist_ok=True)
    m = g.meta
    ts = {'model.visual.patch_embed.proj.weight':
          np.stack([g.get('v.patch_embd.weight'), g.get('v.patch_embd.weight.1')], axis=2)}
    for n in g.tensors:
        if not n.startswith('v.patch_embd.weight'):
            ts[hf_name(n)] = g.get(n)
    ts['model.language_model.norm.weight'] = np.ones(256)
    if extra:
        ts[extra] = np.ones(64)
    if drop:
        del ts[drop]
    if reshape:
        ts[reshape] = ts[reshape][:-1]
    if dtype == 'BF16':   # round to bf16 values first so the bytes say exactly what they hold
        ts = {k: (v.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32) for k, v in ts.items()}
    hf_checkpoint.write_safetensors(os.path.join(out, 'model.safetensors'),
                                    [(k, dtype, v.shape, hf_checkpoint.encode(v, dtype)) for k, v in ts.items()])
    side = m['clip.vision.image_size'] // m['clip.vision.patch_size']
    cfg = {'architectures': ['Qwen3_5ForConditionalGeneration'], '_name_or_path': 'tiny-vision',
           'text_config': {'rms_norm_eps': float(np.float32(m['clip.vision.attention.layer_norm_epsilon']))},
           'vision_config': {'depth': m['clip.vision.block_count'], 'hidden_size': m['clip.vision.embedding_length'],
                             'intermediate_size': m['clip.vision.feed_forward_length'],
                             'num_heads': m['clip.vision.attention.head_count'],
                             'out_hidden_size': m['clip.vision.projection_dim'],
                             'patch_size': m['clip.vision.patch_size'], 'spatial_merge_size': 2,
                             'temporal_patch_size': 2, 'in_channels': 3,
                             'num_position_embeddings': npos or side * side, 'deepstack_visual_indexes': []}}
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(cfg, f)
    if pre:
        with open(os.path.join(out, 'preprocessor_config.json'), 'w') as f:
            json.dump(pre, f)
    return ts


def embed(mm, tag):
    out = os.path.join(T, tag + '.f32')
    r = run('mmproj-embed', '--mmproj', mm, '--image', os.path.join(FX, 'image.png'), '-o', out, '-t', '2')
    check(r.returncode == 0, '%s: mmproj-embed runs%s' % (tag, '' if r.returncode == 0 else ': ' + r.stderr))
    return np.fromfile(out, dtype=np.float32) if r.returncode == 0 else None


def rel_rows(a, b, width=256):
    a, b = a.reshape(-1, width).astype(np.float64), b.reshape(-1, width).astype(np.float64)
    return float(max(np.linalg.norm(x - y) / np.linalg.norm(y) for x, y in zip(a, b)))


def main():
    shutil.rmtree(T, ignore_errors=True)
    os.makedirs(T)
    fx_path = os.path.join(FX, 'tiny-mmproj-f32.gguf')
    g = GGUF(fx_path)

    # 1. F32 checkpoint -> the fixture's layout, bytes and rows
    d = os.path.join(T, 'hf32')
    make_hf(g, d)
    out = os.path.join(T, 'mmproj-f32.gguf')
    r = run('convert', 'hf-to-gguf', d, out, '--mmproj')
    check(r.returncode == 0, 'convert --mmproj (F32) runs%s' % ('' if r.returncode == 0 else ': ' + r.stderr))
    if r.returncode:
        return
    c = GGUF(out)
    check(list(c.tensors) == list(g.tensors), 'same tensor names in the same order')
    bad = [n for n in g.tensors if n in c.tensors and (c.tensors[n].ne != g.tensors[n].ne or c.type_name(n) != g.type_name(n)
                                                       or not np.array_equal(c.raw(n), g.raw(n)))]
    check(not bad, 'every tensor has the fixture\'s type, shape and bytes%s' % (': ' + ', '.join(bad) if bad else ''))
    keys = set(g.meta) | set(c.meta)
    diff = [k for k in sorted(keys) if k != 'general.name' and c.meta.get(k) != g.meta.get(k)]
    check(not diff, 'same metadata values as llama.cpp\'s converter%s' % (': ' + ', '.join(diff) if diff else ''))
    check(c.meta.get('general.name') == 'tiny-vision', 'general.name from _name_or_path')
    e_fx, e_cv = embed(fx_path, 'fixture'), embed(out, 'converted')
    if e_fx is not None and e_cv is not None:
        check(np.array_equal(e_fx, e_cv), 'mmproj-embed rows identical from the fixture and the converted file')
    r = run('inspect', out)
    check(r.returncode == 0 and 'bitspark takes this projector' in r.stdout, 'inspect: bitspark takes the converted projector')

    # 2. BF16 checkpoint with --type f16 and q8_0
    d16 = os.path.join(T, 'hfbf16')
    ts16 = make_hf(g, d16, dtype='BF16')
    e_bf = None   # the BF16-kept file's rows: what f16 (exact for these values) and q8_0 approximate
    for ty, want, tol, wtol in ((None, 'BF16', 3e-2, 0), ('f16', 'F16', 1e-2, 1e-3), ('q8_0', 'Q8_0', 4e-2, 1e-2)):
        out_t = os.path.join(T, 'mmproj-%s.gguf' % (ty or 'keep'))
        r = run('convert', 'hf-to-gguf', d16, out_t, '--mmproj', *(['--type', ty] if ty else []))
        check(r.returncode == 0, 'convert --mmproj BF16 --type %s runs%s' % (ty, '' if r.returncode == 0 else ': ' + r.stderr))
        if r.returncode:
            continue
        c = GGUF(out_t)
        mats = [n for n in c.tensors if len(c.tensors[n].ne) == 2 and n != 'v.position_embd.weight']
        vecs = [n for n in c.tensors if len(c.tensors[n].ne) == 1] + ['v.position_embd.weight']
        check(all(c.type_name(n) == want for n in mats), '--type %s: every matrix is %s' % (ty, want))
        check(all(c.type_name(n) == 'F32' for n in vecs), '--type %s: norms, biases, position table F32' % ty)
        werr = max(np.linalg.norm(c.get(n) - ts16[hf_name(n)]) / np.linalg.norm(ts16[hf_name(n)]) for n in mats)
        check(werr <= wtol, '--type %s: matrices hold the checkpoint\'s values (worst rel L2 %.1e <= %.0e)' % (ty, werr, wtol))
        kt = c.type_name('v.patch_embd.weight')
        check(kt == ('F16' if want == 'Q8_0' else want), '--type %s: patch kernels %s' % (ty, kt))
        e = embed(out_t, 'bf16-' + str(ty))
        ref, what = (e_fx, 'the F32 fixture') if ty is None else (e_bf, 'the BF16 file')
        if ty is None:
            e_bf = e
        if e is not None and ref is not None:
            err = rel_rows(e, ref)
            check(err <= tol, '--type %s rows vs %s: worst row rel L2 %.2e <= %.0e' % (ty, what, err, tol))

    # 3. preprocessor_config.json's normalisation
    dp = os.path.join(T, 'hfpre')
    make_hf(g, dp, pre={'image_mean': [0.48145466, 0.4578275, 0.40821073], 'image_std': [0.26862954, 0.26130258, 0.27577711]})
    out_p = os.path.join(T, 'mmproj-pre.gguf')
    r = run('convert', 'hf-to-gguf', dp, out_p, '--mmproj')
    if r.returncode == 0:
        c = GGUF(out_p)
        check(np.allclose(c.meta['clip.vision.image_mean'], [0.48145466, 0.4578275, 0.40821073], rtol=1e-6, atol=0)
              and np.allclose(c.meta['clip.vision.image_std'], [0.26862954, 0.26130258, 0.27577711], rtol=1e-6, atol=0),
              'image_mean / image_std from preprocessor_config.json')
    else:
        check(False, 'convert with preprocessor_config.json: ' + r.stderr)

    # 4. bad checkpoints
    cases = [('deepstack', dict(extra='model.visual.deepstack_merger_list.0.norm.weight'), 'deepstack'),
             ('missing', dict(drop='model.visual.blocks.1.attn.proj.weight'), 'missing vision tensor'),
             ('shape', dict(reshape='model.visual.merger.linear_fc2.weight'), 'shape'),
             ('npos', dict(npos=35), 'not a square')]
    for tag, kw, msg in cases:
        db = os.path.join(T, 'bad-' + tag)
        make_hf(g, db, **kw)
        ob = os.path.join(T, 'bad-%s.gguf' % tag)
        r = run('convert', 'hf-to-gguf', db, ob, '--mmproj')
        check(r.returncode != 0 and msg in r.stderr and not os.path.exists(ob),
              '%s refused with a message, no output (%s)' % (tag, r.stderr.strip()))
    # a failed conversion over an existing file leaves it as it was (the output is atomic)
    keep = os.path.join(T, 'keep.gguf')
    with open(keep, 'wb') as f:
        f.write(b'previous contents')
    r = run('convert', 'hf-to-gguf', os.path.join(T, 'bad-missing'), keep, '--mmproj')
    with open(keep, 'rb') as f:
        check(r.returncode != 0 and f.read() == b'previous contents', 'a failed conversion leaves an existing output alone')
    r = run('convert', 'hf-to-gguf', d, os.path.join(T, 'q4.gguf'), '--mmproj', '--type', 'q4_0')
    check(r.returncode != 0 and 'q8_0' in r.stderr, '--type q4_0 refused for a projector (%s)' % r.stderr.strip())
    r = run('convert', 'drafter-to-gguf', d, os.path.join(T, 'x.gguf'), '--mmproj')
    check(r.returncode != 0, '--mmproj with another mode refused')


main()
if not fails:
    shutil.rmtree(T, ignore_errors=True)
print('%d failed' % len(fails))
sys.exit(1 if fails else 0)
