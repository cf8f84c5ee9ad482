#!/usr/bin/env python3
"""Fidelity to llama.cpp: `bitspark logits` on every fixture model in $BS_FIXTURES, teacher-forced
(prompt_tokens as one batch, then greedy_tokens one at a time, KV cache f32 like the reference
run), compared row by row with the llama.cpp logits using the bounds of the fixtures README
(the same rule as ../shared/tools/compare_logits.py, reimplemented here):
  - tiny-f32: worst row relative L2 <= 1e-3 (and <= 1e-3 with the default F16 KV cache too);
  - quantized: median <= 3e-2, worst <= 6e-2, and the same argmax on every row whose reference
    top-2 margin is >= 0.3.
Also: the layer taps [1, 4, 6] of tiny-f32 over the prompt against llama.cpp's tiny-f32.taps.f32
(<= 1e-4 relative per row); batch splits and --no-mmap give bit-identical logits (matmul rows and
attention rows never depend on the batch, the recurrence is sequential); --tokens-file; and
clear errors (non-zero exit, message) for bad input. tiny-q1_0: the default (repacked on
AVX-512) is batch-invariant too, and BITSPARK_EXACT=1 is bit-identical to llama.cpp's logits.
With the 128-row lookup layout forced (BITSPARK_Q1_L128=1) a 63-token batch (the prompt kernel)
gives the one-token bits and, with AVX-512, the default's, and AMX (emulated) prompts the AVX-512
kernels' bits."""
import json
import os
import subprocess
import sys

import numpy as np

from fixture_lib import MODELS, F32_WORST, Q_MEDIAN, Q_WORST, MARGIN, TAPS_BOUND, failures, fail, env


BITSPARK, FIX, TMP = env('BITSPARK'), env('BS_FIXTURES'), env('BS_TMP')


def logits_cmd(model, tokens, batch, out, *extra):
    return [BITSPARK, 'logits', '-m', os.path.join(FIX, model + '.gguf'), '--tokens',
            ','.join(map(str, tokens)), '--batch', str(batch), '-o', out] + list(extra)


def run_ok(cmd, **env):
    """Runs cmd (with env added to the environment); on a non-zero exit records a failure."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env) if env else None)
    if r.returncode != 0:
        fail('%s%s exited %d: %s' % (''.join('%s=%s ' % kv for kv in env.items()), ' '.join(cmd[:4]), r.returncode,
                                    r.stderr.strip()))
        return False
    return True


def read_rows(path, width):
    a = np.fromfile(path, dtype='<f4')
    if a.size % width:
        raise ValueError('%s: %d floats is not a multiple of %d' % (path, a.size, width))
    return a.reshape(-1, width).astype(np.float64)


def stats(ours, ref):
    err = np.linalg.norm(ours - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    top2 = np.sort(ref, axis=1)[:, -2:]
    sure = (top2[:, 1] - top2[:, 0]) >= MARGIN
    flips = int(np.sum(sure & (ours.argmax(axis=1) != ref.argmax(axis=1))))
    return err, flips, int(sure.sum())


def check_model(name):
    meta = json.load(open(os.path.join(FIX, name + '.json')))
    nv, prompt, greedy = meta['n_vocab'], meta['prompt_tokens'], meta['greedy_tokens']
    ref = read_rows(os.path.join(FIX, name + '.logits.f32'), nv)
    out = os.path.join(TMP, 'fixture_%s.f32' % name)
    if not run_ok(logits_cmd(name, prompt + greedy, len(prompt), out, '--kv-type', 'f32')):
        return
    ours = read_rows(out, nv)
    if ours.shape != ref.shape:
        return fail('%s: %s rows vs reference %s' % (name, ours.shape, ref.shape))
    if not np.isfinite(ours).all():
        return fail('%s: non-finite logits' % name)
    err, flips, n_sure = stats(ours, ref)
    worst, med = err.max(), np.median(err)
    print('%-14s rows=%d worst=%.3e (row %d) median=%.3e argmax changes %d of %d rows with margin >= %.1f'
          % (name, len(err), worst, int(err.argmax()), med, flips, n_sure, MARGIN))
    if name == 'tiny-f32':
        if worst > F32_WORST:
            fail('%s: worst %.3e > %g' % (name, worst, F32_WORST))
    elif med > Q_MEDIAN or worst > Q_WORST or flips:
        fail('%s: median %.3e (<= %g), worst %.3e (<= %g), argmax changes %d (0)'
             % (name, med, Q_MEDIAN, worst, Q_WORST, flips))
    return out


def check_f32_extras(f32_out):
    meta = json.load(open(os.path.join(FIX, 'tiny-f32.json')))
    nv, prompt, greedy = meta['n_vocab'], meta['prompt_tokens'], meta['greedy_tokens']
    toks = prompt + greedy
    ref = read_rows(os.path.join(FIX, 'tiny-f32.logits.f32'), nv)

    # default F16 KV cache: llama.cpp's own F16 configuration is at 3e-4 from these rows
    out = os.path.join(TMP, 'fixture_f16kv.f32')
    if run_ok(logits_cmd('tiny-f32', toks, len(prompt), out)):
        err = stats(read_rows(out, nv), ref)[0]
        print('tiny-f32 f16 KV  worst=%.3e median=%.3e' % (err.max(), np.median(err)))
        if err.max() > F32_WORST:
            fail('tiny-f32 with F16 KV: worst %.3e > %g' % (err.max(), F32_WORST))

    # batch splits, --no-mmap and --tokens-file give the same bits
    base = open(f32_out, 'rb').read()
    tf = os.path.join(TMP, 'fixture_tokens.json')
    with open(tf, 'w') as f:
        json.dump(toks, f)
    variants = {
        'batch 1': logits_cmd('tiny-f32', toks, 1, os.path.join(TMP, 'v1.f32'), '--kv-type', 'f32'),
        'batch 7 --no-mmap': logits_cmd('tiny-f32', toks, 7, os.path.join(TMP, 'v2.f32'), '--kv-type', 'f32', '--no-mmap'),
        'batch all': logits_cmd('tiny-f32', toks, len(toks), os.path.join(TMP, 'v3.f32'), '--kv-type', 'f32'),
        '--tokens-file': [BITSPARK, 'logits', '-m', os.path.join(FIX, 'tiny-f32.gguf'), '--tokens-file', tf,
                          '--batch', str(len(prompt)), '-o', os.path.join(TMP, 'v4.f32'), '--kv-type', 'f32'],
    }
    for what, cmd in variants.items():
        if run_ok(cmd) and open(cmd[cmd.index('-o') + 1], 'rb').read() != base:
            fail('tiny-f32 %s: logits differ from the prompt-batch run' % what)

    # taps [1, 4, 6] over the prompt vs llama.cpp's (tiny-f32.taps.f32, named in tiny-f32.json)
    layers, taps_ref = meta['taps_layers'], os.path.join(FIX, meta['taps_file'])
    width = os.path.getsize(taps_ref) // 4 // len(prompt)   # the layers' rows side by side
    taps_out = os.path.join(TMP, 'fixture_taps.f32')
    if run_ok(logits_cmd('tiny-f32', prompt, len(prompt), os.path.join(TMP, 'taps_logits.f32'),
                         '--kv-type', 'f32', '--taps', ','.join(map(str, layers)), '--taps-out', taps_out)):
        ours = read_rows(taps_out, width)
        ref = read_rows(taps_ref, width)
        if ours.shape != ref.shape:
            fail('taps: %s rows vs reference %s' % (ours.shape, ref.shape))
        else:
            err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
            print('taps %s     worst=%.3e median=%.3e' % (layers, err.max(), np.median(err)))
            if err.max() > TAPS_BOUND:
                fail('taps: worst %.3e > %g' % (err.max(), TAPS_BOUND))


def avx512_kernels():
    """Whether bitspark dispatches to its AVX-512 kernels here (the CPU has them and BITSPARK_CPU
    does not lower the level): then tiny-q1_0's default layout is the 16-row X16, whose bits
    the 128-row layout gives too. Below, the default is the exact native kernel."""
    if os.environ.get('BITSPARK_CPU', '').lower() in ('scalar', 'avx2'):
        return False
    if os.environ.get('BS_ARCH') == 'aarch64':   # the aarch64 build under qemu (tools/test.sh)
        return False
    try:
        flags = next(l for l in open('/proc/cpuinfo') if l.startswith('flags')).split()
    except (OSError, StopIteration):
        return False
    return all(f in flags for f in ('avx512f', 'avx512bw', 'avx512vl', 'avx512dq', 'avx512_vnni', 'avx512vbmi'))


def check_q1_layouts(q1_out):
    """tiny-q1_0 in both Q1_0 modes. Default (AVX-512: weights repacked 16 rows x 4 columns per
    mask word) is held to the quantized tolerance above, and its rows must not depend on the
    batch: one token at a time and batches of 7 (<= 8-row tiles; --no-mmap, so packed in place
    instead of a copy) give the prompt-batch bits.
    BITSPARK_EXACT=1 keeps llama.cpp's x86 float order: every row bit-identical to its logits."""
    meta = json.load(open(os.path.join(FIX, 'tiny-q1_0.json')))
    nv, prompt, greedy = meta['n_vocab'], meta['prompt_tokens'], meta['greedy_tokens']
    toks = prompt + greedy
    base = open(q1_out, 'rb').read()
    # batch 7 reads the file into memory: the weights are then repacked in place, not copied
    for batch, extra in ((1, []), (7, ['--no-mmap'])):
        out = os.path.join(TMP, 'q1_b%d.f32' % batch)
        if run_ok(logits_cmd('tiny-q1_0', toks, batch, out, '--kv-type', 'f32', *extra)) and open(out, 'rb').read() != base:
            fail('tiny-q1_0 batch %d %s: logits differ from the prompt-batch run' % (batch, ' '.join(extra)))
    # the 128-row lookup layout forced on: a 63-token batch takes the prompt kernel (48+ rows)
    # and must give the one-token-at-a-time bits (and the default layout's)
    l128 = []
    for batch in (len(toks), 1):
        out = os.path.join(TMP, 'q1_l128_b%d.f32' % batch)
        if not run_ok(logits_cmd('tiny-q1_0', toks, batch, out, '--kv-type', 'f32'), BITSPARK_Q1_L128='1'):
            return
        l128.append(open(out, 'rb').read())
    if l128[0] != l128[1]:
        fail('tiny-q1_0 in L128: batch %d and batch 1 logits differ' % len(toks))
    elif avx512_kernels() and l128[0] != base:
        fail('tiny-q1_0 in L128: logits differ from the default layout (X16)')
    elif avx512_kernels():
        print('tiny-q1_0 in L128: %d-token batch = one token at a time = default layout, bit for bit' % len(toks))
    else:   # AVX2 (or scalar): the default is the exact kernel; L128 within the quantized bounds
        ref = read_rows(os.path.join(FIX, 'tiny-q1_0.logits.f32'), nv)
        err, flips, _ = stats(np.frombuffer(l128[0], dtype='<f4').reshape(-1, nv).astype(np.float64), ref)
        print('tiny-q1_0 in L128 (no AVX-512): %d-token batch = one token at a time, bit for bit; worst %.3e '
              'median %.3e' % (len(toks), err.max(), np.median(err)))
        if np.median(err) > Q_MEDIAN or err.max() > Q_WORST or flips:
            fail('tiny-q1_0 in L128: median %.3e, worst %.3e, argmax changes %d' % (np.median(err), err.max(), flips))
    out = os.path.join(TMP, 'q1_exact.f32')
    cmd = logits_cmd('tiny-q1_0', toks, len(prompt), out, '--kv-type', 'f32')
    if not run_ok(cmd, BITSPARK_EXACT='1'):
        return
    ours = np.fromfile(out, dtype='<f4')
    ref = np.fromfile(os.path.join(FIX, 'tiny-q1_0.logits.f32'), dtype='<f4')
    same = ours.shape == ref.shape and ours.tobytes() == ref.tobytes()
    rows = ours.size // nv if ours.size % nv == 0 else -1
    differ = int((ours.reshape(-1, nv) != ref.reshape(-1, nv)).any(axis=1).sum()) if ours.shape == ref.shape else rows
    print('tiny-q1_0 BITSPARK_EXACT=1: %s (%d of %d rows differ)' % ('bit-identical to llama.cpp' if same else 'DIFFERS', differ, rows))
    if not same:
        fail('tiny-q1_0 with BITSPARK_EXACT=1: %d rows not bit-identical to llama.cpp' % differ)


def check_amx_emulated():
    """Prompts of 32+ rows over the AMX kernel (BITSPARK_AMX=emulate runs it on the tile emulator,
    so this CPU need not have AMX): the same bits as the AVX-512 kernels, for tiny-q2_0 (X16) and
    tiny-q1_0 forced into L128 (BITSPARK_Q1_L128=1), prompt and greedy tokens as one batch. The
    AMX path applies its float steps with AVX-512, so it exists only with the AVX-512 kernels."""
    if not avx512_kernels():
        print('AMX (emulated): not checked, no AVX-512 kernels here')
        return
    for model, extra_env in (('tiny-q2_0', {}), ('tiny-q1_0', {'BITSPARK_Q1_L128': '1'})):
        meta = json.load(open(os.path.join(FIX, model + '.json')))
        toks = meta['prompt_tokens'] + meta['greedy_tokens']
        outs = []
        for amx in ('0', 'emulate'):
            out = os.path.join(TMP, '%s_amx_%s.f32' % (model, amx))
            if not run_ok(logits_cmd(model, toks, len(toks), out, '--kv-type', 'f32'), BITSPARK_AMX=amx, **extra_env):
                return
            outs.append(open(out, 'rb').read())
        same = outs[0] == outs[1] and len(outs[0]) == 4 * meta['n_vocab'] * len(toks)
        print('%s, %d-token batch: AMX (emulated) %s the AVX-512 kernels' % (model, len(toks), 'bit-identical to' if same else 'DIFFERS from'))
        if not same:
            fail('%s: BITSPARK_AMX=emulate logits differ from BITSPARK_AMX=0' % model)


def check_errors():
    out = os.path.join(TMP, 'bad.f32')
    model = os.path.join(FIX, 'tiny-f32.gguf')
    cases = [
        ('token id out of range', ['--tokens', '1,2,1024'], 'out of range'),
        ('negative token id', ['--tokens', '1,-2'], 'out of range'),
        ('malformed list', ['--tokens', '1,2x,3'], 'malformed'),
        ('not a number', ['--tokens', 'a,b'], 'not an integer'),
        ('empty list', ['--tokens', ','], 'empty'),
        ('longer than ctx', ['--tokens', ','.join(['5'] * 20), '--ctx', '16'], 'context'),
        ('tap layer out of range', ['--tokens', '1,2', '--taps', '8', '--taps-out', out + '.t'], 'out of range'),
        ('bad kv type', ['--tokens', '1,2', '--kv-type', 'q8'], 'kv-type'),
        ('missing model', ['--tokens', '1,2', '-m', os.path.join(TMP, 'no-such.gguf')], 'no-such.gguf'),
    ]
    for what, args, needle in cases:
        cmd = [BITSPARK, 'logits', '-m', model, '-o', out] + args
        r = subprocess.run(cmd, capture_output=True, text=True)
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''
        if r.returncode == 0 or r.returncode >= 128 or needle not in msg:
            fail('%s: exit %d, message %r (expected a clear error mentioning %r)' % (what, r.returncode, msg, needle))
        else:
            print('error ok: %-24s %s' % (what, msg))


def main():
    f32_out = q1_out = None
    for name in MODELS:
        out = check_model(name)
        if name == 'tiny-f32':
            f32_out = out
        if name == 'tiny-q1_0':
            q1_out = out
    if f32_out:
        check_f32_extras(f32_out)
    if q1_out:
        check_q1_layouts(q1_out)
    check_amx_emulated()
    check_errors()
    if failures:
        print('%d failure(s)' % len(failures))
        return 1
    print('all fixture checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
