"""hf-to-gguf: a synthetic Hugging Face Qwen3.5 checkpoint converts back to the GGUF it was made
from.

tests/hf_checkpoint.py writes the HF form (config.json with text_config, two safetensors shards,
tokenizer.json with [a, b] merges and added tokens, tokenizer_config.json, plus one vision and
one MTP tensor) of a `bitspark synth` model by undoing each converter transform from the notes.
Checks:
  1. the HF form means the same model: a float64 Gated DeltaNet layer (2 tokens, so decay and
     conv matter) run on the HF tensors with HF head pairing (v head h uses k head h // R) gives
     the same output as on the GGUF tensors with GGUF pairing (h % K), rel err <= 1e-6 (A_log is
     stored as f32, so -exp(A_log) is ssm_a within f32 rounding), and reading the HF tensors with
     the GGUF pairing does not;
  2. hf-to-gguf of it gives the original GGUF's tensors byte for byte (F32 and BF16 checkpoints,
     and --type q1_0 against the same seed's q1_0 synth) and the same metadata values;
  3. `bitspark logits` agree (rel L2 per row <= 1e-5) and `bitspark tokenize` gives the same ids;
  4. a shape that contradicts config.json fails with a message;
  5. tokenizer.json's normalizer becomes tokenizer.ggml.normalizer (the one metadata key synth,
     which writes none, lacks): NFC -> nfc, a one-step Sequence -> its step, null -> none (and
     the converted file then tokenizes 'e' + U+0301 as llama.cpp does), an unsupported one ->
     none with a note; inspect names the normalization and where it comes from.
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
T = os.path.join(os.environ.get('BS_TMP', '/tmp'), 'convert_hf.%d' % os.getpid())
fails = []


def check(ok, what):
    print(('ok   ' if ok else 'FAIL ') + what)
    if not ok:
        fails.append(what)


def run(*args):
    return subprocess.run([B] + list(args), check=True, capture_output=True, text=True).stdout


def load_st(d):
    """All tensors of a sharded checkpoint as float64 (F32 / BF16)."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith('.safetensors'):
            continue
        buf = open(os.path.join(d, fn), 'rb').read()
        n = int.from_bytes(buf[:8], 'little')
        hdr = json.loads(buf[8:8 + n])
        for k, v in hdr.items():
            if k == '__metadata__':
                continue
            a, b = v['data_offsets']
            raw = buf[8 + n + a:8 + n + b]
            if v['dtype'] == 'BF16':
                x = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                x = np.frombuffer(raw, np.float32)
            out[k] = x.astype(np.float64).reshape(v['shape'])
    return out


def rms(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def gdn(W, xs, nk, nv, dk, dv, hf):
    """One Gated DeltaNet layer over the tokens xs (float64), qwen35-arch.md §2."""
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    conv = W['conv'].reshape(W['conv'].shape[0], -1)          # [C, K]
    K = conv.shape[1]
    hist = [np.zeros(conv.shape[0])] * (K - 1)
    S = np.zeros((nv, dk, dv))
    outs = []
    for x in xs:
        mixed = W['qkv'] @ x
        hist = hist[1:] + [mixed] if K > 1 else [mixed]
        win = np.stack((hist + [mixed])[-K:], axis=1) if K > 1 else mixed[:, None]
        c = silu(np.sum(conv * win, axis=1))
        q = c[:nk * dk].reshape(nk, dk)
        k = c[nk * dk:2 * nk * dk].reshape(nk, dk)
        v = c[2 * nk * dk:].reshape(nv, dv)
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-6)
        k = k / np.maximum(np.linalg.norm(k, axis=1, keepdims=True), 1e-6)
        beta = 1 / (1 + np.exp(-(W['b'] @ x)))
        ssm_a = -np.exp(W['A_log']) if hf else W['ssm_a']
        g = ssm_a * np.log1p(np.exp(W['a'] @ x + W['dt']))
        z = (W['z'] @ x).reshape(nv, dv)
        y = np.zeros((nv, dv))
        for h in range(nv):
            kh = h // (nv // nk) if hf else h % nk
            S[h] *= np.exp(g[h])
            d = (v[h] - S[h].T @ k[kh]) * beta[h]
            S[h] += np.outer(k[kh], d)
            o = S[h].T @ q[kh] / np.sqrt(dk)
            y[h] = rms(o, W['norm']) * silu(z[h])
        outs.append(W['out'] @ y.reshape(-1))
    return np.array(outs)


def check_semantics(gg, hf, m):
    nk, nv = m['qwen35.ssm.group_count'], m['qwen35.ssm.time_step_rank']
    dk, dv = m['qwen35.ssm.state_size'], m['qwen35.ssm.inner_size'] // nv
    p = 'model.language_model.layers.0.linear_attn.'
    Wh = {'qkv': hf[p + 'in_proj_qkv.weight'], 'z': hf[p + 'in_proj_z.weight'], 'b': hf[p + 'in_proj_b.weight'],
          'a': hf[p + 'in_proj_a.weight'], 'A_log': hf[p + 'A_log'], 'dt': hf[p + 'dt_bias'],
          'conv': hf[p + 'conv1d.weight'], 'norm': hf[p + 'norm.weight'], 'out': hf[p + 'out_proj.weight']}
    q = 'blk.0.'
    Wg = {'qkv': gg.get(q + 'attn_qkv.weight'), 'z': gg.get(q + 'attn_gate.weight'),
          'b': gg.get(q + 'ssm_beta.weight'), 'a': gg.get(q + 'ssm_alpha.weight'), 'ssm_a': gg.get(q + 'ssm_a'),
          'dt': gg.get(q + 'ssm_dt.bias'), 'conv': gg.get(q + 'ssm_conv1d.weight'),
          'norm': gg.get(q + 'ssm_norm.weight'), 'out': gg.get(q + 'ssm_out.weight')}
    xs = np.random.default_rng(1).standard_normal((3, Wg['qkv'].shape[1]))
    a, b = gdn(Wh, xs, nk, nv, dk, dv, True), gdn(Wg, xs, nk, nv, dk, dv, False)
    err = np.linalg.norm(a - b) / np.linalg.norm(b)
    check(err <= 1e-6, 'HF tensors with HF head pairing = GGUF tensors with tiled pairing (rel %.1e <= 1e-6: A_log is f32)' % err)
    # the pairing matters: HF tensors read with the GGUF pairing give another layer
    wrong = dict(Wh, ssm_a=-np.exp(Wh['A_log']))
    err2 = np.linalg.norm(gdn(wrong, xs, nk, nv, dk, dv, False) - b) / np.linalg.norm(b)
    check(err2 > 1e-3, 'HF tensors read in GGUF order differ (rel %.1e): the reorder is not a no-op' % err2)


NORM_KEY = 'tokenizer.ggml.normalizer'


def same_tensors(a_path, b_path, what, norm='nfc'):
    a, b = GGUF(a_path), GGUF(b_path)
    bad = [n for n in b.tensors if n not in a.tensors or a.tensors[n].type_id != b.tensors[n].type_id or
           list(a.tensors[n].ne) != list(b.tensors[n].ne) or bytes(a.raw(n)) != bytes(b.raw(n))]
    check(not bad and len(a.tensors) == len(b.tensors), '%s: %d tensors byte-identical %s' % (what, len(b.tensors), bad[:3]))
    diff = [k for k in set(a.meta) | set(b.meta) if a.meta.get(k) != b.meta.get(k) and k != NORM_KEY]
    check(not diff, '%s: same metadata values %s' % (what, diff[:5]))
    check(a.meta.get(NORM_KEY) == norm and NORM_KEY not in b.meta,
          '%s: %s = %r (synth writes none)' % (what, NORM_KEY, a.meta.get(NORM_KEY)))


def logits_rel(a, b, n_vocab):
    x = np.fromfile(a, np.float32).reshape(-1, n_vocab).astype(np.float64)
    y = np.fromfile(b, np.float32).reshape(-1, n_vocab).astype(np.float64)
    return max(np.linalg.norm(x[i] - y[i]) / np.linalg.norm(y[i]) for i in range(len(y)))


def convert_with(src, hf, normalizer, name):
    """Rewrite only tokenizer.json with this normalizer, convert: (GGUF, stderr)."""
    hf_checkpoint.write_tokenizer(GGUF(src), hf, normalizer)
    out = os.path.join(T, name + '.gguf')
    r = subprocess.run([B, 'convert', 'hf-to-gguf', hf, out], capture_output=True, text=True)
    check(r.returncode == 0, 'hf-to-gguf with normalizer %r (%s)' % (normalizer, r.stderr.strip()[-200:]))
    return out, r.stderr


def check_normalizers(src, hf):
    decomposed, composed = 'e\u0301', '\u00e9'
    want_nfc = run('tokenize', '-m', src, composed)
    nfc, _ = convert_with(src, hf, {'type': 'NFC'}, 'norm_nfc')
    check(run('tokenize', '-m', nfc, decomposed) == want_nfc, 'NFC file: e + U+0301 gets the ids of U+00E9')
    txt = run('inspect', nfc)
    check('tokenizer: gpt2, pre-tokenizer qwen35, normalization nfc (tokenizer.ggml.normalizer)' in txt,
          'inspect names the key as the source')
    seq, _ = convert_with(src, hf, {'type': 'Sequence', 'normalizers': [{'type': 'NFKC'}]}, 'norm_seq')
    check(GGUF(seq).meta.get(NORM_KEY) == 'nfkc', 'Sequence [NFKC] -> nfkc (%r)' % GGUF(seq).meta.get(NORM_KEY))
    none, _ = convert_with(src, hf, None, 'norm_none')
    check(GGUF(none).meta.get(NORM_KEY) == 'none', 'null normalizer -> none')
    old = run('tokenize', '-m', src, '--tokenizer-normalize', 'none', decomposed)
    got = run('tokenize', '-m', none, decomposed)
    check(got == old and got != want_nfc, 'none file: e + U+0301 tokenized byte for byte (%s)' % got.strip())
    check('normalization none (tokenizer.ggml.normalizer)' in run('inspect', none), 'inspect shows none')
    odd, err = convert_with(src, hf, {'type': 'Lowercase'}, 'norm_odd')
    check(GGUF(odd).meta.get(NORM_KEY) == 'none' and "normalizer 'Lowercase' is not supported" in err,
          'unsupported normalizer: none with a note (%s)' % err.strip()[-120:])
    hf_checkpoint.write_tokenizer(GGUF(src), hf)


def main():
    os.makedirs(T, exist_ok=True)
    try:
        src = os.path.join(T, 'tiny-f32.gguf')
        run('synth', '--preset', 'tiny', '--type', 'f32', '-o', src)
        hf = os.path.join(T, 'hf')
        hf_checkpoint.make_hf(src, hf, 'f32')
        check_semantics(GGUF(src), load_st(hf), GGUF(src).meta)

        out = os.path.join(T, 'back.gguf')
        r = subprocess.run([B, 'convert', 'hf-to-gguf', hf, out], capture_output=True, text=True)
        check(r.returncode == 0, 'hf-to-gguf runs (%s)' % r.stderr.strip()[-200:])
        check('skipped 1 vision' in r.stderr and 'skipped 1 MTP' in r.stderr, 'vision and MTP tensors skipped with a note')
        same_tensors(out, src, 'f32 checkpoint')

        toks = '1,2,3,40,50,60,70,80,90,100,200,300,400,500'
        run('logits', '-m', src, '--tokens', toks, '--batch', '8', '-o', os.path.join(T, 'a.f32'))
        run('logits', '-m', out, '--tokens', toks, '--batch', '8', '-o', os.path.join(T, 'b.f32'))
        err = logits_rel(os.path.join(T, 'b.f32'), os.path.join(T, 'a.f32'), 1024)
        check(err <= 1e-5, 'logits agree (worst row rel L2 %.1e <= 1e-5)' % err)
        for text in ['Hello, world!', '<|im_start|>user\nhi<|im_end|>', ' 12345  tabs\tand <think>x</think>']:
            a = run('tokenize', '-m', src, '--special', text)
            b = run('tokenize', '-m', out, '--special', text)
            check(a == b and a.strip(), 'tokenize %r: %s' % (text, b.strip()))

        srcb = os.path.join(T, 'tiny-bf16.gguf')
        run('synth', '--preset', 'tiny', '--type', 'bf16', '-o', srcb)
        hfb = os.path.join(T, 'hfb')
        hf_checkpoint.make_hf(srcb, hfb, 'bf16', shards=1, extras=False)
        outb = os.path.join(T, 'backb.gguf')
        run('convert', 'hf-to-gguf', hfb, outb)
        same_tensors(outb, srcb, 'bf16 checkpoint (dtype kept)')

        srcq = os.path.join(T, 'tiny-q1_0.gguf')
        run('synth', '--preset', 'tiny', '--type', 'q1_0', '-o', srcq)
        outq = os.path.join(T, 'backq.gguf')
        run('convert', 'hf-to-gguf', hf, outq, '--type', 'q1_0')
        same_tensors(outq, srcq, '--type q1_0')

        check_normalizers(src, hf)

        # a contradicting config fails cleanly
        cfg = json.load(open(os.path.join(hf, 'config.json')))
        cfg['text_config']['intermediate_size'] += 128
        json.dump(cfg, open(os.path.join(hf, 'config.json'), 'w'))
        r = subprocess.run([B, 'convert', 'hf-to-gguf', hf, os.path.join(T, 'bad.gguf')], capture_output=True, text=True)
        check(r.returncode == 1 and 'shape does not match' in r.stderr and not os.path.exists(os.path.join(T, 'bad.gguf')),
              'bad shape: %s' % r.stderr.strip())
    finally:
        shutil.rmtree(T, ignore_errors=True)
    print('%d failure(s)' % len(fails))
    sys.exit(1 if fails else 0)


main()
