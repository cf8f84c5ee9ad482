#!/usr/bin/env python3
"""The model on the Vulkan device (lavapipe in CI), with the validation layer on: any
validation message fails. Skipped (exit 77) where the binary has no Vulkan backend or the
machine no loader or device.
  - every fixture model's logits vs llama.cpp's within the bounds of the fixtures README (the
    CPU path's, tests/test_fixture_logits.py; F32 KV cache like the reference run, and tiny-f32
    with the default F16 cache too), teacher-forced: the prompt as one batch, then one token at
    a time;
  - a row's logits do not depend on how the tokens are batched: batches of 1, 7, 64+ (more rows
    than one submission holds) and the whole sequence give the same bits;
  - attention split over the context in small chunks (BITSPARK_VK_ATTN_CHUNK=16): logits within
    the fixture bound and the same bits however batched; in one chunk the bits of attn.comp;
  - layer taps [1, 4, 6] of tiny-f32 vs llama.cpp's (tiny-f32.taps.f32, <= 1e-4);
  - greedy text of the trained tiny model (models/) equals the CPU's;
  - bench on the device: Vulkan rows, verify costs, the copy-kernel roofline;
  - devices lists the device; a named device that cannot start fails with a message, auto
    falls back to the CPU; every command names its device on stderr."""
import json
import os
import re
import subprocess
import sys

import numpy as np

import vk_lib
from fixture_lib import MODELS, F32_WORST, Q_MEDIAN, Q_WORST, MARGIN, TAPS_BOUND, failures, fail, env

SKIP = 77


BITSPARK, FIX, TMP, SRC = env('BITSPARK'), env('BS_FIXTURES'), env('BS_TMP'), env('BS_SRC')
# A sanitizer build runs the host code of every path once: the batchings, the staging ring and
# the fusion switches on tiny-q1_0 (and tiny-f32's own path) only (the other formats differ in
# the shaders alone) and two batchings of the split attention. make test runs the Vulkan tests
# in the sanitizer build; its release build runs the rest (py_vk_rest_model: BS_TEST_REST=1,
# those checks only, on what the sanitizer build leaves out), so every part runs once.
try:
    SANITIZED = b'__asan_init' in open(BITSPARK, 'rb').read()
except OSError:
    SANITIZED = False
REST = not SANITIZED and os.environ.get('BS_TEST_REST') == '1'


def part(full, sanitized):
    """The items a check takes: the sanitizer build's, the rest of them (REST), or all."""
    if SANITIZED:
        return sanitized
    return tuple(x for x in full if x not in sanitized) if REST else full
VK_ENV = vk_lib.validation_env(BITSPARK)
VK_ENV.pop('BITSPARK_DEVICE', None)   # the suite pins the CPU; here auto is under test


def run(cmd, ok=True, extra_env=None):
    e = dict(VK_ENV, **(extra_env or {}))
    r = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if 'vulkan validation:' in r.stderr:
        fail('%s: validation messages:\n%s' % (' '.join(cmd[1:3]), r.stderr[-2000:]))
    if 'differ from mv_q' in r.stderr or ('failed to run' in r.stderr and 'use mv_q' in r.stderr):   # a way fell back at its opening check
        fail('%s: %s' % (' '.join(cmd[1:3]), r.stderr.strip()[-500:]))
    if ok and r.returncode != 0:
        fail('%s exited %d: %s' % (' '.join(cmd[1:4]), r.returncode, r.stderr.strip()[-500:]))
    return r


def logits(model, tokens, batch, out, *extra, extra_env=None):
    cmd = [BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, tokens)), '--batch', str(batch),
           '-o', out, '--device', 'vulkan'] + list(extra)
    r = run(cmd, extra_env=extra_env)
    if r.returncode == 0 and 'device: Vulkan' not in r.stderr:
        fail('logits --device vulkan did not name a Vulkan device: %s' % r.stderr.strip()[-300:])
    return r.returncode == 0


def rows(path, width):
    return np.fromfile(path, dtype='<f4').reshape(-1, width).astype(np.float64)


def check_fixture(name):
    meta = json.load(open(os.path.join(FIX, name + '.json')))
    nv, prompt, greedy = meta['n_vocab'], meta['prompt_tokens'], meta['greedy_tokens']
    ref = rows(os.path.join(FIX, name + '.logits.f32'), nv)
    out = os.path.join(TMP, 'vk_%s.f32' % name)
    if not logits(os.path.join(FIX, name + '.gguf'), prompt + greedy, len(prompt), out, '--kv-type', 'f32'):
        return
    ours = rows(out, nv)
    if ours.shape != ref.shape or not np.isfinite(ours).all():
        return fail('%s: %s rows (reference %s) or non-finite logits' % (name, ours.shape, ref.shape))
    err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
    top2 = np.sort(ref, axis=1)[:, -2:]
    sure = (top2[:, 1] - top2[:, 0]) >= MARGIN
    flips = int(np.sum(sure & (ours.argmax(axis=1) != ref.argmax(axis=1))))
    worst, med = err.max(), np.median(err)
    print('%-14s vulkan: worst=%.3e median=%.3e argmax changes %d of %d' % (name, worst, med, flips, int(sure.sum())))
    if name == 'tiny-f32':
        if worst > F32_WORST:
            fail('%s: worst %.3e > %g' % (name, worst, F32_WORST))
    elif med > Q_MEDIAN or worst > Q_WORST or flips:
        fail('%s: median %.3e (<= %g), worst %.3e (<= %g), argmax changes %d'
             % (name, med, Q_MEDIAN, worst, Q_WORST, flips))


def check_ptq1_0():
    """PTQ1_0 (Bonsai 2's base-3 ternary) runs on the Q2 kernel: a ptq1_0 copy of tiny-q2_0
    gives tiny-q2_0's logits bit for bit on the device."""
    src, ptq = os.path.join(FIX, 'tiny-q2_0.gguf'), os.path.join(TMP, 'vk_tiny-ptq1_0.gguf')
    r = subprocess.run([BITSPARK, 'quantize', '--allow-requantize', '--tensor-type', 'ssm_(alpha|beta)=bf16', src, ptq, 'ptq1_0'], capture_output=True, text=True)
    if r.returncode:
        return fail('quantize to ptq1_0: %s' % r.stderr.strip()[-300:])
    toks = [957, 117, 851, 10, 87, 114, 276, 101, 5]
    a, b = os.path.join(TMP, 'vk_q2.f32'), os.path.join(TMP, 'vk_ptq1.f32')
    if logits(src, toks, 4, a) and logits(ptq, toks, 4, b):
        if open(a, 'rb').read() != open(b, 'rb').read():
            fail('ptq1_0 on the device: logits differ from the q2_0 file with the same trits')
        else:
            print('tiny-ptq1_0 vulkan: the same bits as tiny-q2_0')


def synth(path, *args):
    r = subprocess.run([BITSPARK, 'synth', '--preset', 'tiny', '-o', path] + list(args), capture_output=True, text=True)
    if r.returncode:
        fail('synth %s: %s' % (' '.join(args), r.stderr.strip()[-300:]))
    return r.returncode == 0


def check_folded():
    """PrismML's Hadamard fold (Bonsai 2) on the device: the folded f32 model gives the plain
    model's logits (rotate.comp before each folded product, the token table rotated back); a
    folded q1_0 model gives the same bits however batched, and the CPU's logits (up to int8
    rounding ties: a rotation spreads any float difference over its whole block)."""
    plain, folded = os.path.join(TMP, 'vk_fold_plain.gguf'), os.path.join(TMP, 'vk_fold_f32.gguf')
    if not (synth(plain, '--type', 'f32', '--seed', '5') and synth(folded, '--type', 'f32', '--seed', '5', '--hadamard', '64')):
        return
    toks = [5, 17, 99, 3, 250, 77, 8, 1000, 12]
    a, b = os.path.join(TMP, 'vk_fold_a.f32'), os.path.join(TMP, 'vk_fold_b.f32')
    if not (logits(plain, toks, 4, a, '--kv-type', 'f32') and logits(folded, toks, 4, b, '--kv-type', 'f32')):
        return
    pa, fb = rows(a, 1024), rows(b, 1024)
    err = (np.linalg.norm(pa - fb, axis=1) / np.linalg.norm(pa, axis=1)).max()
    print('folded f32 vulkan: worst %.2e from the plain model' % err)
    if err > 1e-5:
        fail('folded f32 on the device: %.2e from the plain model (> 1e-5)' % err)
    if not REST:   # (the sanitizer build runs their host paths too)
        # Bonsai 2's pattern: ternary, bf16 alpha/beta apart, qkv and gate in one layout with the
        # norm's rotation, the fused recurrence with ssm_out's input rotated after it
        b2 = os.path.join(TMP, 'vk_fold_b2.gguf')
        if synth(b2, '--type', 'pq2_0', '--ssm-ab-type', 'bf16', '--seed', '9', '--hadamard', '128'):
            check_norm_rotation(b2, toks)
            check_f32_rows(b2, toks)
    if SANITIZED:
        return
    # Bonsai 2's block of 1024 (each invocation runs several butterflies a pass; widths 1024:
    # hidden, FFN, 8 V heads of 128 regrouped 2 x 4, 4 query heads of 256)
    wide = ['--n-layer', '2', '--attn-interval', '2', '--n-embd', '1024', '--n-ff', '1024', '--ssm-v-heads', '8',
            '--ssm-head-dim', '128', '--n-head', '4', '--head-dim', '256', '--type', 'f32', '--seed', '6']
    wp, wf = os.path.join(TMP, 'vk_fold_wide_plain.gguf'), os.path.join(TMP, 'vk_fold_wide.gguf')
    if synth(wp, *wide) and synth(wf, *wide, '--hadamard', '1024'):
        a, b = os.path.join(TMP, 'vk_fold_wa.f32'), os.path.join(TMP, 'vk_fold_wb.f32')
        if logits(wp, toks, 4, a, '--kv-type', 'f32') and logits(wf, toks, 4, b, '--kv-type', 'f32'):
            pa, fb = rows(a, 1024), rows(b, 1024)
            err = (np.linalg.norm(pa - fb, axis=1) / np.linalg.norm(pa, axis=1)).max()
            print('folded f32 vulkan, block 1024: worst %.2e from the plain model' % err)
            if err > 1e-5:
                fail('folded f32 (block 1024) on the device: %.2e from the plain model (> 1e-5)' % err)
    q = os.path.join(TMP, 'vk_fold_q1_0.gguf')
    if not synth(q, '--type', 'q1_0', '--seed', '9', '--hadamard', '128'):
        return
    outs = []
    for batch in (len(toks), 1, 4):
        out = os.path.join(TMP, 'vk_fold_q%d.f32' % batch)
        if not logits(q, toks, batch, out):
            return
        outs.append(open(out, 'rb').read())
    if any(o != outs[0] for o in outs[1:]):
        return fail('folded q1_0 on the device: logits depend on the batching')
    cpu = os.path.join(TMP, 'vk_fold_cpu.f32')
    run([BITSPARK, 'logits', '-m', q, '--tokens', ','.join(map(str, toks)), '--batch', '4', '-o', cpu, '--device', 'cpu'])
    ref, ours = rows(cpu, 1024), rows(os.path.join(TMP, 'vk_fold_q9.f32'), 1024)
    err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
    top2 = np.sort(ref, axis=1)[:, -2:]
    flips = int(np.sum(((top2[:, 1] - top2[:, 0]) >= MARGIN) & (ours.argmax(axis=1) != ref.argmax(axis=1))))
    print('folded q1_0 vulkan: the same bits batched 9, 1, 4; vs the CPU median %.2e worst %.2e, argmax changes %d'
          % (np.median(err), err.max(), flips))
    if np.median(err) > Q_MEDIAN or err.max() > Q_WORST or flips:
        fail('folded q1_0 on the device vs the CPU: median %.2e, worst %.2e, argmax changes %d' % (np.median(err), err.max(), flips))
    check_norm_rotation(q, toks)


def check_f32_rows(model, toks):
    """The bf16 alpha and beta on mv_f32n.comp (a GPU's default; BITSPARK_VK_F32N=1 here),
    rounding x as they read it, both in one dispatch: a row's logits the same bits alone and
    batched and with a dispatch each (BITSPARK_VK_NO_PAIR=1), within float rounding of
    mv_f32.comp's (another sum order), without the rounding's dispatches."""
    got = {}
    for f32n in ('0', '1', 'nopair'):
        for batch in (1, len(toks)):
            out = os.path.join(TMP, 'vk_f32n.f32')
            env = {'BITSPARK_VK_F32N': f32n[0] if f32n != 'nopair' else '1', 'BITSPARK_PROFILE': '1'}
            if f32n == 'nopair':
                env['BITSPARK_VK_NO_PAIR'] = '1'
            r = run([BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, toks)), '--batch', str(batch), '-o', out,
                     '--device', 'vulkan'], extra_env=env)
            if r.returncode:
                return fail('%s: logits with %s: %s' % (model, env, r.stderr[-400:]))
            got[(f32n, batch)] = (open(out, 'rb').read(), dispatches(r.stderr), r.stderr)
    if any(got[k][0] != got[('1', 1)][0] for k in (('1', len(toks)), ('nopair', 1), ('nopair', len(toks)))):
        return fail('mv_f32n: the logits depend on the batching or on the pair')
    if not re.search(r'^\s*mv f32 narrow', got[('1', 1)][2], re.M):
        return fail('BITSPARK_VK_F32N=1: the profile shows no mv_f32n dispatch')
    a = np.frombuffer(got[('0', 1)][0], dtype='<f4').astype(np.float64)
    b = np.frombuffer(got[('1', 1)][0], dtype='<f4').astype(np.float64)
    err = np.abs(a - b).max() / np.abs(a).max()
    fused, single, apart = got[('1', 1)][1], got[('nopair', 1)][1], got[('0', 1)][1]
    print('mv_f32n: the same bits batched and paired, %.1e from mv_f32.comp, %.1f dispatches per row instead of %.1f '
          '(a dispatch each), %.1f (mv_f32)' % (err, fused, single, apart))
    if err > 1e-5 or None in (fused, single, apart) or not fused < single < apart:
        fail('mv_f32n: %.2e from mv_f32.comp (> 1e-5) or no dispatch saved (%s vs %s vs %s)' % (err, fused, single, apart))


def check_norm_rotation(model, toks):
    """A folded model's norms rotating their rows for the products after them (norm.comp's
    NORM_ROT), and the products whose epilogues norm and rotate the residual stream or rotate the
    GLU's output for the down product (mv_q.glsl's ROT), the final norm rotating for the head in
    the last down product, give the bits of rotate.comp's dispatches apart
    (BITSPARK_VK_NO_NORMROT=1, _NO_NORMO=1, _NO_GLUQ=1, _NO_NORMFIN=1), one row at a time and
    batched, in fewer dispatches."""
    got = {}
    # (GLU=0: the FFN's products apart, so its norm does not rotate and the fused recurrence's
    # folded ssm_out takes the residual and norm in its epilogue)
    envs = ({}, {'BITSPARK_VK_NO_NORMROT': '1'}, {'BITSPARK_VK_GLU': '0'}, {'BITSPARK_VK_NO_NORMO': '1'},
            {'BITSPARK_VK_NO_GLUQ': '1'}, {'BITSPARK_VK_NO_NORMFIN': '1'})
    for env in envs:
        for batch in (1, len(toks)):
            out = os.path.join(TMP, 'vk_fold_nr.f32')
            r = run([BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, toks)), '--batch', str(batch), '-o', out,
                     '--device', 'vulkan'], extra_env=dict(env, BITSPARK_PROFILE='1'))
            if r.returncode:
                return fail('%s: logits with %s: %s' % (model, env, r.stderr[-400:]))
            got[(tuple(env), batch)] = (open(out, 'rb').read(), dispatches(r.stderr))
    name = os.path.basename(model)
    same = [(k, v[0] == got[((), 1)][0]) for k, v in got.items()]
    if not all(ok for _, ok in same):
        return fail('%s: the rotating norms or epilogues change the logits (or the batching, or the GLU apart): %s' % (name, same))
    fused = got[((), 1)][1]
    apart = [(list(e)[0][len('BITSPARK_VK_'):], got[(tuple(e), 1)][1]) for e in envs[1:] if 'BITSPARK_VK_GLU' not in e]
    if fused is None or any(a is None or fused >= a for _, a in apart):
        return fail('%s: the rotations in the norms and epilogues save no dispatch (%s vs %s)' % (name, fused, apart))
    print('%s vulkan: the rotating norms and epilogues give the bits apart, %.1f dispatches per row instead of %s' %
          (name, fused, ', '.join('%.1f (%s)' % (a, k) for k, a in apart)))


def check_f16_kv():
    meta = json.load(open(os.path.join(FIX, 'tiny-f32.json')))
    nv, prompt, greedy = meta['n_vocab'], meta['prompt_tokens'], meta['greedy_tokens']
    ref = rows(os.path.join(FIX, 'tiny-f32.logits.f32'), nv)
    out = os.path.join(TMP, 'vk_f16kv.f32')
    if logits(os.path.join(FIX, 'tiny-f32.gguf'), prompt + greedy, len(prompt), out):
        err = np.linalg.norm(rows(out, nv) - ref, axis=1) / np.linalg.norm(ref, axis=1)
        print('tiny-f32 vulkan F16 KV: worst=%.3e' % err.max())
        if err.max() > F32_WORST:
            fail('tiny-f32 with the F16 KV cache: worst %.3e > %g' % (err.max(), F32_WORST))


def check_batching():
    """Same bits whatever the batching, on a sequence longer than one submission (64 rows)."""
    for name in part(('tiny-f32', 'tiny-q1_0', 'tiny-q2_0'), ('tiny-f32', 'tiny-q1_0')):
        meta = json.load(open(os.path.join(FIX, name + '.json')))
        toks = (meta['prompt_tokens'] + meta['greedy_tokens']) * 3
        toks = toks[:72]
        outs = []
        for b in (len(toks), 1, 7, 66):
            out = os.path.join(TMP, 'vk_b%d.f32' % b)
            if not logits(os.path.join(FIX, name + '.gguf'), toks, b, out):
                return
            outs.append(open(out, 'rb').read())
        if any(o != outs[0] for o in outs[1:]):
            fail('%s: logits on the device depend on the batching (%s)' % (name, [o == outs[0] for o in outs]))
        else:
            print('%s: %d tokens as one batch, 1 at a time, 7 then 1s, 66 then 1s: the same bits' % (name, len(toks)))


def check_staged():
    """Weights and state through the staging ring (device buffers not mapped, 16 KiB chunks so
    that every tensor takes many, with copies still in flight when the next one is filled): the
    same bits as through mapped memory."""
    staged = {'BITSPARK_VK_STAGED': '1', 'BITSPARK_VK_STAGING_KB': '16'}
    for name in part(('tiny-q1_0', 'tiny-q2_0'), ('tiny-q1_0',)):
        meta = json.load(open(os.path.join(FIX, name + '.json')))
        toks = meta['prompt_tokens'] + meta['greedy_tokens']
        a, b = os.path.join(TMP, 'vk_mapped.f32'), os.path.join(TMP, 'vk_staged.f32')
        if not logits(os.path.join(FIX, name + '.gguf'), toks, 5, a) or \
           not logits(os.path.join(FIX, name + '.gguf'), toks, 5, b, extra_env=staged):
            return
        if open(a, 'rb').read() != open(b, 'rb').read():
            fail('%s: logits through the staging ring differ from those through mapped memory' % name)
        else:
            print('%s: uploads through the staging ring (16 KiB chunks): the same bits as mapped' % name)


# A device's choices that must not change a bit: (variable, its two ways, what they are)
CHOICES = (('BITSPARK_VK_ASUM', ('stage', 'row'), "mv_q's activation block sums staged once per workgroup or per weight row"),
           ('BITSPARK_VK_DELTA', ('lanes', 'column'), "the delta rule's sums over 8 lanes per state column or in one"),
           ('BITSPARK_VK_MM', ('off', 'tile', 'auto'),
            "products of more than 8 rows by mv_q's row groups, mm_q's tiles (mm_ql's for Q8_0 / Q4_1) or the device's choice (cooperative matrices on a GPU that has them)"))


def coop_device():
    """Whether the device offers int8 cooperative matrices (`bitspark devices`): without them the
    MM choice 'auto' is 'off' (mv_q), and runs once."""
    r = run([BITSPARK, 'devices'])
    return 'cooperative matrix int8' in r.stdout


def check_asum():
    """The device's choices (CHOICES: the device picks one way, for the first two a GPU the first, a
    CPU device the second): the same bits through the whole model, every product (plain, GLU, norm and conv
    epilogues) and both recurrence paths (and the products' ways for Q8_0 and Q4_1 models): 21 tokens in batches of 13 (two row groups, the steps
    apart) and 8 (one, the conv in the products' epilogue and the fused recurrence)."""
    names = part(('tiny-q1_0', 'tiny-q2_0'), ('tiny-q1_0',))
    # Q8_0 and Q4_1 (a drafter's formats): their products of more than 8 rows in mm_ql's tiles
    lanes = [(n, [c for c in CHOICES if c[0] == 'BITSPARK_VK_MM']) for n in part(('tiny-q8_0', 'tiny-q4_1'), ('tiny-q4_1',))]
    for name, choices in [(n, CHOICES) for n in names] + lanes:
        meta = json.load(open(os.path.join(FIX, name + '.json')))
        toks = (meta['prompt_tokens'] + meta['greedy_tokens'])[:21]
        for var, ways, what in choices:
            if var == 'BITSPARK_VK_MM' and not coop_device():
                ways = tuple(w for w in ways if w != 'auto')
                print('%s: no cooperative matrices on this device: %s=auto is off, not run again' % (name, var))
            out = {}
            for way in ways:
                out[way] = os.path.join(TMP, 'vk_choice_%s.f32' % way)
                if not logits(os.path.join(FIX, name + '.gguf'), toks, 13, out[way], extra_env={var: way}):
                    fail('%s: logits with %s=%s failed' % (name, var, way))
                    return
            first = open(out[ways[0]], 'rb').read()
            differ = [way for way in ways[1:] if open(out[way], 'rb').read() != first]
            if differ:
                fail('%s: %s (%s=%s against %s) change the logits' % (name, what, var, ways[0], '|'.join(differ)))
            else:
                print('%s: %s: the same bits' % (name, what))


# (what, the switch that keeps it apart)
FUSIONS = (('gate+up+SwiGLU in one dispatch', {'BITSPARK_VK_GLU': '0'}),
           ("the down product's int8 blocks in the GLU's epilogue", {'BITSPARK_VK_NO_GLUQ': '1'}),
           ('the products that read one input as one layout and dispatch', {'BITSPARK_VK_NO_CAT': '1'}),
           ("attention's q/k norms, rope and KV store in one dispatch", {'BITSPARK_VK_NO_QK': '1'}),
           ("the output gate and int8 blocks in attention's epilogue", {'BITSPARK_VK_NO_ATTQ': '1'}),
           ('the residual add and the next norm in the output products', {'BITSPARK_VK_NO_NORMO': '1'}),
           ("the final norm in the last down product's epilogue", {'BITSPARK_VK_NO_NORMFIN': '1'}),
           ("q/k norms, rope and KV store inside the attention's dispatch", {'BITSPARK_VK_NO_ATTF': '1'}),
           ("DeltaNet's conv in the products' epilogue, q/k norms + delta rule + gated norm in one dispatch",
            {'BITSPARK_VK_NO_GDNF': '1'}))
ALL_APART = {k: v for _, env in FUSIONS for k, v in env.items()}


def dispatches(stderr):
    m = re.search(r'vulkan steps: .*?([0-9.]+) dispatches', stderr)
    return float(m.group(1)) if m else None


def check_fusions():
    """The fusions of the forward give the same bits as their steps apart, in every integer
    format: all of them against none, with a first batch of 13 rows (two row groups of 8) and of
    8 (the output products norm one group only), then single rows; on tiny-q1_0 each alone takes
    dispatches away (the profile's count), and the fused DeltaNet step alone in every format whose
    fixture has V heads in whole int8 blocks (d_v % 32 == 0: q4_1 and q8_0's have 16). The fused
    GLU shows in the profile."""
    names = part(('tiny-q1_0', 'tiny-q2_0', 'tiny-q2_0-g64', 'tiny-q4_1', 'tiny-q8_0'), ('tiny-q1_0',))
    for name in names:
        meta = json.load(open(os.path.join(FIX, name + '.json')))
        toks = (meta['prompt_tokens'] + meta['greedy_tokens'])[:13]
        model = os.path.join(FIX, name + '.gguf')
        outs = {}

        def logits_of(env, batch):
            key = (tuple(sorted(env.items())), batch)
            if key not in outs:
                out = os.path.join(TMP, 'vk_fusion.f32')
                r = run([BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, toks)), '--batch', str(batch),
                         '-o', out, '--device', 'vulkan'], extra_env=dict(env, BITSPARK_PROFILE='1'))
                if r.returncode != 0:
                    fail('%s: logits with %s: %s' % (name, env, r.stderr[-400:]))
                    return None
                outs[key] = (open(out, 'rb').read(), dispatches(r.stderr), r.stderr)
            return outs[key]
        cases = [('all fusions', ALL_APART, 13), ('all fusions', ALL_APART, 8)]
        if name == 'tiny-q1_0':
            cases += [(label, env, 8) for label, env in FUSIONS]
        elif name in ('tiny-q2_0', 'tiny-q2_0-g64'):
            cases += [(label, env, b) for label, env in FUSIONS[-1:] for b in (8, 5)]
        for label, env, batch in cases:
            f, a = logits_of({}, batch), logits_of(env, batch)
            if not f or not a:
                return
            if batch == 13 and not re.search(r'^\s*glu q', f[2], re.M):
                fail('%s: the profile shows no fused GLU dispatch:\n%s' % (name, f[2][-800:]))
            if a[0] != f[0]:
                fail('%s: %s (first batch %d) change the logits' % (name, label, batch))
            elif a[1] is None or f[1] is None or a[1] <= f[1]:
                fail('%s: %s save no dispatch (%s vs %s apart)' % (name, label, f[1], a[1]))
            else:
                print('%s: %s, first batch %d: the same bits as apart, %.1f dispatches per row instead of %.1f' %
                      (name, label, batch, f[1], a[1]))


def check_split():
    """Attention split over the context (attn_split.comp) in chunks of 16 positions, so that the
    fixtures' 63 tokens take four and the chunks' merge runs: tiny-f32's logits vs llama.cpp's
    within the fixture bound (F32 KV cache); tiny-q1_0's rows the same bits however the tokens
    are batched (63 as one batch, 1 at a time, 7 then 1s); with the default chunk (256: one
    here) the bits of attn.comp's single pass (BITSPARK_VK_NO_SPLIT=1) at the same dispatches."""
    small = {'BITSPARK_VK_ATTN_CHUNK': '16'}
    meta = json.load(open(os.path.join(FIX, 'tiny-f32.json')))
    nv, toks = meta['n_vocab'], meta['prompt_tokens'] + meta['greedy_tokens']
    ref = rows(os.path.join(FIX, 'tiny-f32.logits.f32'), nv)
    out = os.path.join(TMP, 'vk_split.f32')
    if not REST and logits(os.path.join(FIX, 'tiny-f32.gguf'), toks, len(meta['prompt_tokens']), out, '--kv-type', 'f32',
                           extra_env=small):
        err = np.linalg.norm(rows(out, nv) - ref, axis=1) / np.linalg.norm(ref, axis=1)
        print('tiny-f32 vulkan, attention in chunks of 16: worst=%.3e' % err.max())
        if err.max() > F32_WORST:
            fail('tiny-f32 with attention in chunks of 16: worst %.3e > %g' % (err.max(), F32_WORST))
    model = os.path.join(FIX, 'tiny-q1_0.gguf')
    meta = json.load(open(os.path.join(FIX, 'tiny-q1_0.json')))
    toks = meta['prompt_tokens'] + meta['greedy_tokens']
    outs = []
    # (the rest: one at a time against the whole, the reference of every batching)
    batches = (len(toks),) + part((1, 7), (7,))
    for b in batches:
        out = os.path.join(TMP, 'vk_split_b%d.f32' % b)
        r = run([BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, toks)), '--batch', str(b), '-o', out,
                 '--device', 'vulkan'], extra_env=dict(small, BITSPARK_PROFILE='1'))
        if r.returncode != 0:
            return
        if not re.search(r'^\s*attention split', r.stderr, re.M):
            return fail('tiny-q1_0: the profile shows no split attention dispatch:\n%s' % r.stderr[-800:])
        outs.append(open(out, 'rb').read())
    if any(o != outs[0] for o in outs[1:]):
        fail('tiny-q1_0, attention in chunks of 16: the logits depend on the batching (%s)' % [o == outs[0] for o in outs])
    else:
        print('tiny-q1_0, attention in chunks of 16: %d tokens in batches of %s: the same bits'
              % (len(toks), ', '.join(map(str, batches))))
    if REST:
        return
    got = []
    for env in ({}, {'BITSPARK_VK_NO_SPLIT': '1'}):
        out = os.path.join(TMP, 'vk_split_one.f32')
        r = run([BITSPARK, 'logits', '-m', model, '--tokens', ','.join(map(str, toks)), '--batch', '5', '-o', out,
                 '--device', 'vulkan'], extra_env=dict(env, BITSPARK_PROFILE='1'))
        if r.returncode != 0:
            return
        got.append((open(out, 'rb').read(), dispatches(r.stderr)))
    if got[0][0] != got[1][0] or got[0][1] is None or got[0][1] != got[1][1]:
        fail('tiny-q1_0: the split attention in one chunk differs from attn.comp (bits %s, dispatches %s vs %s)'
             % (got[0][0] == got[1][0], got[0][1], got[1][1]))
    else:
        print('tiny-q1_0: the split attention in one chunk: the bits of attn.comp, %.1f dispatches per row' % got[0][1])


def check_taps():
    meta = json.load(open(os.path.join(FIX, 'tiny-f32.json')))
    prompt, layers = meta['prompt_tokens'], meta['taps_layers']
    taps_ref = os.path.join(FIX, meta['taps_file'])
    width = os.path.getsize(taps_ref) // 4 // len(prompt)   # the layers' rows side by side
    taps_out = os.path.join(TMP, 'vk_taps.f32')
    if not logits(os.path.join(FIX, 'tiny-f32.gguf'), prompt, len(prompt), os.path.join(TMP, 'vk_taps_l.f32'),
                  '--kv-type', 'f32', '--taps', ','.join(map(str, layers)), '--taps-out', taps_out):
        return
    ours = rows(taps_out, width)
    ref = rows(taps_ref, width)
    if ours.shape != ref.shape:
        return fail('taps: %s rows vs %s' % (ours.shape, ref.shape))
    err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
    print('taps %s vulkan: worst=%.3e' % (layers, err.max()))
    if err.max() > TAPS_BOUND:
        fail('taps: worst %.3e > %g' % (err.max(), TAPS_BOUND))


def check_greedy_text():
    """run --temp 0: the same text on the device as on the CPU, and there only the token ids
    come back (the argmax on the device): after the prompt's row, 4 bytes per step (the old
    path read a row of the model's 2048 logits per step)."""
    model = os.path.join(SRC, 'models', 'bonsai-tiny-q1_0.gguf')
    texts = {}
    for dev in ('cpu', 'vulkan'):
        r = run([BITSPARK, 'run', '-m', model, '-p', 'To copy a file, use', '-n', '48', '--temp', '0', '--device', dev],
                extra_env={'BITSPARK_PROFILE': '1'})
        texts[dev] = r.stdout
        want = 'device: Vulkan' if dev == 'vulkan' else 'device: CPU'
        if want not in r.stderr:
            fail('run --device %s: no "%s" line on stderr' % (dev, want))
        if dev == 'vulkan':
            m = re.search(r'vulkan steps: (\d+) token rows, .*? ([0-9.]+) bytes read back', r.stderr)
            vocab_row = 4 * 2048   # bonsai-tiny's vocabulary
            if not m:
                fail('run --device vulkan: no step statistics:\n%s' % r.stderr[-600:])
            elif float(m.group(2)) * int(m.group(1)) > 2 * vocab_row + 4 * int(m.group(1)):
                fail('greedy run read back %.0f bytes per row over %s rows: more than the prompt row and the ids' %
                     (float(m.group(2)), m.group(1)))
            else:
                print('greedy run on the device: %.0f bytes read back per row (%s rows)' % (float(m.group(2)), m.group(1)))
    if not texts['cpu'].strip() or texts['cpu'] != texts['vulkan']:
        fail('greedy text differs: cpu %r vs vulkan %r' % (texts['cpu'][:120], texts['vulkan'][:120]))
    else:
        print('greedy text of the trained model on the device = on the CPU (%d chars)' % len(texts['cpu']))


def check_sampled_text():
    """run --temp 0.8 (top-k 40, the default chain): the device finds the 40 best logits of each
    step and only they come back; the text is the one sampled from whole rows read back
    (BITSPARK_VK_NO_TOPK=1), with the same seed, and the one sampled with each step run ahead of
    the host, fed the draw the device predicts (without the profile, which records every step
    and so runs none ahead)."""
    model = os.path.join(SRC, 'models', 'bonsai-tiny-q1_0.gguf')
    out = {}
    for mode in ('top', 'rows', 'ahead'):
        env = {'BITSPARK_PROFILE': '1'} if mode != 'ahead' else {}
        if mode == 'rows':
            env['BITSPARK_VK_NO_TOPK'] = '1'
        if mode == 'ahead':
            r = run([BITSPARK, 'run', '-m', model, '-p', 'To copy a file, use', '-n', '48', '--temp', '0.8', '--seed', '5',
                     '--device', 'vulkan'], extra_env=env)
            out[mode] = r.stdout
            continue
        r = run([BITSPARK, 'run', '-m', model, '-p', 'To copy a file, use', '-n', '48', '--temp', '0.8', '--seed', '5',
                 '--device', 'vulkan'], extra_env=env)
        m = re.search(r'vulkan steps: (\d+) token rows, .*? ([0-9.]+) bytes read back', r.stderr)
        if not m:
            fail('run --temp 0.8 --device vulkan: no step statistics:\n%s' % r.stderr[-600:])
            return
        out[mode] = (r.stdout, float(m.group(2)) * int(m.group(1)), int(m.group(1)))
    (top, top_bytes, n), (rows, _, _) = out['top'], out['rows']
    if not top.strip() or top != rows or top != out['ahead']:
        fail('sampled text differs: top-k on the device %r vs rows %r vs run ahead %r' % (top[:120], rows[:120], out['ahead'][:120]))
    elif top_bytes > 2 * 4 * 2048 + (4 + 8 * 40) * n:
        fail('sampled run read back %.0f bytes over %d rows: more than the prompt row and the top 40s' % (top_bytes, n))
    else:
        print('sampled text with the top 40 found on the device = from whole rows (%d chars; %.0f bytes read back '
              'over %d rows)' % (len(top), top_bytes, n))


def check_bench():
    model = os.path.join(SRC, 'models', 'bonsai-tiny-q1_0.gguf')
    r = run([BITSPARK, 'bench', '-m', model, '--device', 'vulkan', '-p', '16', '-n', '4', '-r', '1', '--verify', '1,2',
             '--sampled'])
    out = r.stdout
    if not any('| Vulkan ' in l and 'pp16' in l for l in out.splitlines()) or 'tg4' not in out:
        fail('bench --device vulkan: no Vulkan pp16/tg4 rows:\n' + out)
    # --sampled: the tokens drawn from the 40 best found on the device, only they read back
    m = re.search(r'device tg sampled: per token [0-9.]+ dispatches, [0-9.]+ barriers, [0-9.]+ submissions, '
                  r'([0-9.]+) bytes read back', out)
    a = re.search(r'device tg sampled: (\d+) steps submitted ahead of the host, (\d+) undone', out)
    if 'tg4 sampled' not in out or not m or float(m.group(1)) > 4 + 8 * 40:
        fail('bench --sampled --device vulkan: no sampled row, or more than the top 40 read back:\n' + out)
    elif not a or int(a.group(1)) < 3 or int(a.group(2)) > 1:
        fail('bench --sampled --device vulkan: sampled steps not run ahead, or their predicted draws missed:\n' + out)
    else:
        print('bench --sampled on the device: %s bytes read back per token, %s steps run ahead, %s undone'
              % (m.group(1), a.group(1), a.group(2)))
    if 'device: Vulkan' not in out or 'verify' not in out or 'GB/s copy on Vulkan' not in out or 'tg reached' not in out:
        fail('bench --device vulkan: no device, verify or copy-roofline line:\n' + out)
    # sessions decoding together: each pass is one submission, and its barriers do not grow with
    # the sessions (their per-sequence kernels run side by side between the same barriers; past 8
    # rows the products take more, the same for any number); 9 and 10 sessions, more than a
    # recurrence dispatch (8) or an attention dispatch (4) takes, are one pass too
    r = run([BITSPARK, 'bench', '-m', model, '--device', 'vulkan', '-p', '0', '-n', '2', '-r', '1', '--parallel', '2,4,9,10',
             '--no-membw'], extra_env={'BITSPARK_VK_SEQ': 'together'})
    passes = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in
              re.finditer(r'device tg x(\d+): per pass \(\d+ tokens\) [0-9.]+ dispatches, ([0-9.]+) barriers, '
                          r'([0-9.]+) submissions', r.stdout)}
    if (sorted(passes) != [2, 4, 9, 10] or passes[2][0] != passes[4][0] or passes[9][0] != passes[10][0] or
            any(p[1] != 1.0 for p in passes.values())):
        fail('bench --parallel 2,4,9,10 on the device: barriers per pass grow with the sessions or a pass is '
             'not one submission:\n' + r.stdout)
    else:
        print('bench --parallel on the device: %.0f barriers per pass of 2 or 4 sessions, %.0f of 9 or 10, each pass '
              'one submission' % (passes[2][0], passes[9][0]))
    # bench --spec on the device: the round's parts measured there (the drafter too), lossless
    drafter = os.path.join(SRC, 'models', 'bonsai-tiny-dspark.gguf')
    r = run([BITSPARK, 'bench', '-m', model, '-md', drafter, '--spec', '--device', 'vulkan', '-t', '1', '-p', '16',
             '-n', '8', '-r', '1'])
    out = r.stdout
    if ('target on Vulkan' not in out or 'drafter on Vulkan' not in out or 'verify, width 5' not in out or
            'drafter: block pass' not in out or 'sampled chain,  4 slots' not in out or
            'identical to plain decoding: yes' not in out):
        fail('bench --spec --device vulkan: no device rows:\n' + out)


def check_devices_and_fallback():
    r = run([BITSPARK, 'devices'])
    if 'vulkan:0:' not in r.stdout:
        fail('devices lists no Vulkan device: %s' % r.stdout)
    model = os.path.join(SRC, 'models', 'bonsai-tiny-q1_0.gguf')
    gone = {'BITSPARK_VK_LOADER': '/nonexistent/libvulkan.so.1'}
    r = run([BITSPARK, 'run', '-m', model, '-p', 'x', '-n', '2', '--device', 'vulkan'], ok=False, extra_env=gone)
    if r.returncode == 0 or 'no Vulkan loader' not in r.stderr:
        fail('a named device without a loader: exit %d, %r' % (r.returncode, r.stderr[-300:]))
    r = run([BITSPARK, 'run', '-m', model, '-p', 'x', '-n', '2'], extra_env=gone)
    if 'device: CPU' not in r.stderr:
        fail('auto without a loader: no CPU device line: %r' % r.stderr[-300:])
    r = run([BITSPARK, 'run', '-m', model, '-p', 'x', '-n', '2', '--device', 'vulkan:9'], ok=False)
    if r.returncode == 0 or 'no Vulkan device 9' not in r.stderr:
        fail('vulkan:9: exit %d, %r' % (r.returncode, r.stderr[-300:]))
    r = run([BITSPARK, 'run', '-m', model, '-p', 'x', '-n', '2', '--device', 'gpu'], ok=False)
    if r.returncode == 0 or 'expected auto, cpu, vulkan' not in r.stderr:
        fail('--device gpu: exit %d, %r' % (r.returncode, r.stderr[-300:]))
    r = run([BITSPARK, 'run', '-m', model, '-p', 'x', '-n', '2'], extra_env={'BITSPARK_VK_ALLOW_CPU': '1'})
    if 'device: Vulkan' not in r.stderr:
        fail('BITSPARK_VK_ALLOW_CPU=1: auto did not take the CPU Vulkan device: %r' % r.stderr[-300:])


def main():
    r = subprocess.run([BITSPARK, 'devices'], capture_output=True, text=True)
    if 'not built' in r.stdout or 'vulkan: unavailable' in r.stdout or 'no devices' in r.stdout:
        print('skipped: %s' % r.stdout.strip().splitlines()[-1])
        return SKIP
    if REST:   # what the sanitizer build leaves out of these checks (part())
        for check in (check_batching, check_staged, check_fusions, check_asum, check_split, check_ptq1_0, check_folded):
            check()
        print('%d failures (the rest of the sanitizer build\'s checks)' % len(failures))
        return 1 if failures else 0
    for name in MODELS:
        check_fixture(name)
    check_f16_kv()
    check_folded()
    if not SANITIZED:   # (its host side is the Q2 path's, which the sanitizer build runs)
        check_ptq1_0()
    check_batching()
    check_staged()
    check_fusions()
    check_asum()
    check_split()
    check_taps()
    check_greedy_text()
    check_sampled_text()
    check_bench()
    check_devices_and_fallback()
    print('%d failures' % len(failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
