#!/usr/bin/env python3
"""The C engine against the independent float64 reference (tests/ref_qwen35.py), layer by layer,
on synthetic qwen35 models of shapes the fixtures do not cover: other head counts, V:K head
ratios (tiled V->K mapping), GQA ratios, rope dims, attention intervals, conv kernels, and odd
prompt lengths, each with a batch split (prefill of N, then one token at a time) on 2 threads,
and again all one token at a time on 1 thread.

For every case:
  bitspark synth --preset tiny --type f32 <shape flags> --seed S -o CASE.gguf
  bitspark logits -m CASE.gguf --tokens ... --batch N -o CASE.logits.f32 \\
      --taps 0,1,..,L-1 --taps-out CASE.taps.f32 --kv-type f32
and the residual output of every layer at every position, and the logits, are compared with the
reference. Bound (relative L2 per row, float32 engine vs float64 reference): LAYER_BOUND for
every layer row and LOGIT_BOUND for every logits row, both 2e-5. Measured (reference build,
1 thread): worst 5.8e-7 over all cases; llama.cpp's own float32 CPU path sits at 2e-6 from the
reference on tiny-f32 (tests/test_ref_fixtures.py). Real mistakes are far above: blocked
instead of tiled V->K heads 0.48, interleaved GQA 0.35, read-out before the state update 0.32,
ssm_norm with +1 0.30, no decay 0.23, GPT-J instead of NeoX rotation 5e-2.
"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_qwen35 import Qwen35Ref, rel_l2_rows      # noqa: E402

LAYER_BOUND = 2e-5
LOGIT_BOUND = 2e-5

# name, synth shape flags, seed, prompt length, prefill batch
CASES = [
    ('k2v4_gqa2_rope8_int2', dict(n_layer=4, n_embd=128, n_ff=192, n_head=4, n_head_kv=2, head_dim=32,
                                  rope_dim=8, ssm_k_heads=2, ssm_v_heads=4, ssm_head_dim=32,
                                  conv_kernel=4, n_vocab=512, attn_interval=2), 11, 7, 3),
    ('k1v3_gqa6_fullrope_int3', dict(n_layer=6, n_embd=96, n_ff=160, n_head=6, n_head_kv=1, head_dim=16,
                                     rope_dim=16, ssm_k_heads=1, ssm_v_heads=3, ssm_head_dim=16,
                                     conv_kernel=4, n_vocab=512, attn_interval=3), 12, 13, 13),
    ('k4v4_mha_rope32_int4', dict(n_layer=4, n_embd=128, n_ff=256, n_head=2, n_head_kv=2, head_dim=64,
                                  rope_dim=32, ssm_k_heads=4, ssm_v_heads=4, ssm_head_dim=32,
                                  conv_kernel=4, n_vocab=512, attn_interval=4), 13, 1, 1),
    ('k2v6_conv3_int4_decode', dict(n_layer=5, n_embd=64, n_ff=96, n_head=4, n_head_kv=2, head_dim=16,
                                    rope_dim=4, ssm_k_heads=2, ssm_v_heads=6, ssm_head_dim=16,
                                    conv_kernel=3, n_vocab=512, attn_interval=4), 14, 13, 1),
    ('k3v6_gqa4_int1_allattn', dict(n_layer=3, n_embd=64, n_ff=128, n_head=8, n_head_kv=2, head_dim=16,
                                    rope_dim=8, ssm_k_heads=3, ssm_v_heads=6, ssm_head_dim=16,
                                    conv_kernel=4, n_vocab=512, attn_interval=1), 15, 9, 4),
    ('k2v4_int5_alldeltanet', dict(n_layer=4, n_embd=64, n_ff=128, n_head=2, n_head_kv=1, head_dim=32,
                                   rope_dim=8, ssm_k_heads=2, ssm_v_heads=4, ssm_head_dim=32,
                                   conv_kernel=4, n_vocab=512, attn_interval=5), 16, 11, 6),
    # the 27B's head geometry (attention 6:1 GQA with heads of 256 and 64 rope dims; DeltaNet
    # 1:3 K:V heads of 128) at a small width, over a longer prompt split 38 + 7
    ('bonsai_heads_long', dict(n_layer=4, n_embd=128, n_ff=256, n_head=6, n_head_kv=1, head_dim=256,
                               rope_dim=64, ssm_k_heads=2, ssm_v_heads=6, ssm_head_dim=128,
                               conv_kernel=4, n_vocab=512, attn_interval=4), 17, 45, 38),
    # PrismML's Hadamard fold (Bonsai 2: prism.hadamard.*), blocks of 64 and of 128 over the
    # 27B's head geometry (ssm_out's V heads regrouped 2 x 3 before the rotation)
    ('hadamard64', dict(n_layer=4, n_embd=128, n_ff=192, n_head=4, n_head_kv=2, head_dim=32,
                        rope_dim=8, ssm_k_heads=2, ssm_v_heads=4, ssm_head_dim=32,
                        conv_kernel=4, n_vocab=512, attn_interval=2, hadamard=64), 18, 9, 4),
    ('hadamard128_bonsai_heads', dict(n_layer=4, n_embd=128, n_ff=256, n_head=6, n_head_kv=1, head_dim=256,
                                      rope_dim=64, ssm_k_heads=2, ssm_v_heads=6, ssm_head_dim=128,
                                      conv_kernel=4, n_vocab=512, attn_interval=4, hadamard=128), 19, 7, 3),
]

# Quantized weights on a shape the fixtures do not have. The engine quantizes activations to int8
# before these products, as llama.cpp does, so it is compared with the reference running the same
# activation rounding (LlamaCpuActs of test_ref_fixtures.py, validated there against llama.cpp).
# Only the first position is asserted: on these QAT-shaped random models a single int8 rounding
# that lands the other way (float32 vs float64 noise near a tie) moves everything downstream of it
# by ~1e-2, as much as a wrong activation format does, so later rows cannot tell a bug from a
# flip. Measured when this was written: position 0 within 1e-7 in every layer for every type,
# except q4_1 with seed 21, whose last layer had one such flip (4e-5, logits 7e-4).
QUANT_SHAPE = dict(n_layer=4, n_embd=256, n_ff=384, n_head=4, n_head_kv=1, head_dim=128, rope_dim=32,
                   ssm_k_heads=2, ssm_v_heads=6, ssm_head_dim=64, conv_kernel=4, n_vocab=512,
                   attn_interval=2)
# TYPE/hB: the same with the Hadamard fold of block B (the rotated values are what is quantized)
QUANT_TYPES = ['q1_0', 'q2_0', 'q2_0_g64', 'q4_1', 'q8_0', 'q1_0/h128', 'q8_0/h64']
QUANT_ROW0_BOUND = 1e-5

failures = []


def fail(msg):
    print('FAIL: ' + msg)
    failures.append(msg)


def env(name):
    v = os.environ.get(name)
    if not v:
        raise SystemExit('FAIL: environment variable %s is not set (run through ctest)' % name)
    return v


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError('command failed (exit %d): %s\n%s' % (r.returncode, ' '.join(cmd), (r.stderr or r.stdout).strip()[-2000:]))
    return r


def synth(bitspark, path, shape, seed, wtype='f32'):
    cmd = [bitspark, 'synth', '--preset', 'tiny', '--type', wtype]
    for k, v in shape.items():
        cmd += ['--' + k.replace('_', '-'), str(v)]
    run(cmd + ['--seed', str(seed), '-o', path])


def engine_logits(bitspark, model, tokens, batch, layers, tmp, tag, threads):
    out, taps = os.path.join(tmp, tag + '.logits.f32'), os.path.join(tmp, tag + '.taps.f32')
    for p in (out, taps):
        if os.path.exists(p):
            os.remove(p)
    run([bitspark, 'logits', '-m', model, '--tokens', ','.join(map(str, tokens)), '--batch', str(batch),
         '-o', out, '--taps', ','.join(map(str, layers)), '--taps-out', taps, '--kv-type', 'f32', '-t', str(threads)])
    return np.fromfile(out, dtype='<f4'), np.fromfile(taps, dtype='<f4')


def compare(tag, ref, logits, taps, tokens):
    """Check shapes, then every layer and the logits per row; print the worst per layer."""
    hp = ref.hp
    T, L, ne = len(tokens), hp.n_layer, hp.n_embd
    outs, rlog = ref.forward(tokens)
    nv = rlog.shape[1]
    if logits.size != T * nv:
        return fail('%s: logits file has %d floats, expected %d rows x %d' % (tag, logits.size, T, nv))
    if taps.size != T * L * ne:
        return fail('%s: taps file has %d floats, expected %d rows x %d layers x %d' % (tag, taps.size, T, L, ne))
    if not (np.isfinite(logits).all() and np.isfinite(taps).all()):
        return fail('%s: non-finite values in the engine output' % tag)
    taps = taps.reshape(T, L, ne)
    worst = []
    first_bad = None
    for il in range(L):
        e = rel_l2_rows(taps[:, il], outs[il]).max()
        worst.append(e)
        if e > LAYER_BOUND and first_bad is None:
            first_bad = il
    el = rel_l2_rows(logits.reshape(T, nv), rlog)
    kinds = ''.join('A' if a else 'D' for a in hp.is_attn)
    print('%s: layers %s, worst rel-L2 per layer [%s], logits worst %.2e median %.2e'
          % (tag, kinds, ' '.join('%.1e' % w for w in worst), el.max(), np.median(el)))
    if first_bad is not None:
        row = int(rel_l2_rows(taps[:, first_bad], outs[first_bad]).argmax())
        fail('%s: layer %d (%s) first exceeds %g: worst %.2e at position %d'
             % (tag, first_bad, 'attention' if hp.is_attn[first_bad] else 'DeltaNet', LAYER_BOUND,
                worst[first_bad], row))
    if el.max() > LOGIT_BOUND:
        fail('%s: logits worst rel-L2 %.2e at position %d > %g' % (tag, el.max(), int(el.argmax()), LOGIT_BOUND))


def check_shape(ref, shape, tag):
    """The synthesized file must have the shape we asked for, or the case tests nothing new."""
    hp = ref.hp
    want = dict(n_layer=hp.n_layer, n_embd=hp.n_embd, n_ff=hp.n_ff, n_head=hp.n_head, n_head_kv=hp.n_head_kv,
                head_dim=hp.head_dim, rope_dim=hp.n_rot, ssm_k_heads=hp.n_k_heads, ssm_v_heads=hp.n_v_heads,
                ssm_head_dim=hp.d_v, conv_kernel=ref.w('blk.0.ssm_conv1d.weight').shape[1] if not hp.is_attn[0] else None,
                n_vocab=ref.g.tensors['token_embd.weight'].ne[1])
    has_attn, has_dn = any(hp.is_attn), not all(hp.is_attn)
    for k, v in shape.items():
        if (k.startswith('ssm_') or k == 'conv_kernel') and not has_dn:
            continue                # no DeltaNet layer: those keys are free
        if k in ('n_head', 'n_head_kv', 'head_dim', 'rope_dim') and not has_attn:
            continue
        if k == 'attn_interval':
            got = [(i + 1) % v == 0 for i in range(hp.n_layer)]
            if got != hp.is_attn:
                fail('%s: layer pattern %s does not follow --attn-interval %d' % (tag, hp.is_attn, v))
        elif want.get(k) is not None and want[k] != v:
            fail('%s: synthesized %s = %s, asked for %s' % (tag, k, want[k], v))
    if has_attn and not hp.text_pairs.all():
        print('note: %s: rope sections %s leave rotation pairs %s on the 4th M-RoPE stream (position 0 '
              'for text, so unrotated, as llama.cpp does); Qwen\'s own sections never do'
              % (tag, hp.rope_sections, np.flatnonzero(~hp.text_pairs).tolist()))
    if has_dn and hp.d_k != hp.d_v:
        fail('%s: ssm key head dim %d != value head dim %d' % (tag, hp.d_k, hp.d_v))


def quant_try(bitspark, tmp, wtype, seed, tokens, layers):
    """One synthetic model of type wtype: (clean, description). Clean = position 0 within
    QUANT_ROW0_BOUND of the reference with llama.cpp's activation rounding, in every layer and
    the logits."""
    from test_ref_fixtures import LlamaCpuActs
    wtype, _, fold = wtype.partition('/h')
    shape = dict(QUANT_SHAPE, hadamard=int(fold)) if fold else QUANT_SHAPE
    tag = 'ref_vs_engine_quant_%s%s_s%d' % (wtype, '_h' + fold if fold else '', seed)
    model = os.path.join(tmp, tag + '.gguf')
    synth(bitspark, model, shape, seed, wtype)
    ref = LlamaCpuActs(model)
    logits, taps = engine_logits(bitspark, model, tokens, 3, layers, tmp, tag, 2)
    outs, rlog = ref.forward(tokens)
    T, ne, nv = len(tokens), ref.hp.n_embd, rlog.shape[1]
    if logits.size != T * nv or taps.size != T * len(layers) * ne:
        raise RuntimeError('engine output has the wrong size')
    taps = taps.reshape(T, len(layers), ne)
    lay0 = [rel_l2_rows(taps[0:1, il], outs[il][0:1])[0] for il in layers]
    el = rel_l2_rows(logits.reshape(T, nv), rlog)
    clean = max(lay0) <= QUANT_ROW0_BOUND and el[0] <= QUANT_ROW0_BOUND
    return clean, ('%s: position 0 per layer [%s], logits per position [%s]'
                   % (tag, ' '.join('%.1e' % e for e in lay0), ' '.join('%.1e' % e for e in el)))


def check_quantized(bitspark, tmp):
    """Per type, up to three seeds: a wrong dequantizer or activation format shows on every seed
    (>= 1e-4 at the first layer that uses it), one int8 rounding tie resolved the other way only
    on the rare seed where it happens, so one clean seed passes the type."""
    tokens = np.random.default_rng(99).integers(0, QUANT_SHAPE['n_vocab'], size=5).tolist()
    layers = list(range(QUANT_SHAPE['n_layer']))
    for wtype in QUANT_TYPES:
        try:
            for seed in (21, 22, 23):
                clean, what = quant_try(bitspark, tmp, wtype, seed, tokens, layers)
                print(what + ('' if clean else '  <- not clean'))
                if clean:
                    break
            else:
                fail('%s: position 0 differs from the reference with llama.cpp activation rounding '
                     'on 3 seeds (bound %g): wrong dequantizer or activation format' % (wtype, QUANT_ROW0_BOUND))
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            fail('%s: %s' % (wtype, e))


def main():
    bitspark, tmp = env('BITSPARK'), env('BS_TMP')
    os.makedirs(tmp, exist_ok=True)
    for name, shape, seed, n_tok, batch in CASES:
        tag = 'ref_vs_engine_' + name
        model = os.path.join(tmp, tag + '.gguf')
        try:
            synth(bitspark, model, shape, seed)
            ref = Qwen35Ref(model)
            check_shape(ref, shape, name)
            rng = np.random.default_rng(seed)
            tokens = rng.integers(0, shape['n_vocab'], size=n_tok).tolist()
            layers = list(range(ref.hp.n_layer))
            logits, taps = engine_logits(bitspark, model, tokens, batch, layers, tmp, tag, 2)
            compare('%s T=%d batch=%d t=2' % (name, n_tok, batch), ref, logits, taps, tokens)
            if 1 < n_tok <= 16 and batch != 1:
                # The same tokens through the other path (all decode) must agree with the reference
                # too (short cases only: the suite also runs under ASan on 2 cores).
                logits, taps = engine_logits(bitspark, model, tokens, 1, layers, tmp, tag, 1)
                compare('%s T=%d batch=1 t=1' % (name, n_tok), ref, logits, taps, tokens)
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
            fail('%s: %s' % (name, e))
    check_quantized(bitspark, tmp)
    if failures:
        print('%d failure(s); the engine disagrees with the float64 reference or the needed CLI '
              '(synth shape flags, logits --taps/--taps-out/--kv-type) is missing' % len(failures))
        return 1
    print('engine agrees with the float64 reference on %d float shapes and %d quantized types'
          % (len(CASES), len(QUANT_TYPES)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
