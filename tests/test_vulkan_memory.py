#!/usr/bin/env python3
"""Device memory on the Vulkan device (lavapipe in CI, validation layer on where installed), with
BITSPARK_VK_FAKE_MEMORY presenting a discrete GPU's heaps over lavapipe's one heap:
  - a 256 KiB device-local host-visible heap (NVIDIA's BAR window), a large device-local heap
    the host cannot see and a host heap: the model loads into the large heap (the load log and
    `devices` say so), host buffers go to the host heap, and the logits are bit-identical to
    the plain run's (device buffers are then read and written through the staging ring only);
  - a device-local heap too small for the weights: the buffers move on to the next heap (the log
    says so) and the logits are still the same bits;
  - heaps too small for the model: one line ("needs ... of device memory, heaps 0 and 1 have ...
    free"), a non-zero exit, no crash and no driver error code;
  - maxMemoryAllocationSize: `devices` shows it; one too small for the model's buffers: a clear
    refusal (the split of weights by it, bit for bit: tests/test_vulkan_kernels.c);
  - a bad BITSPARK_VK_FAKE_MEMORY: a clear refusal;
  - without the validation layer (VK_LAYER_PATH pointing nowhere), BITSPARK_VK_VALIDATE=1 fails
    with a message naming the layer, which is how the tests find out and skip those checks.
Skipped (exit 77) where the binary has no Vulkan backend or the machine no device."""
import json
import os
import subprocess
import sys

import vk_lib
from fixture_lib import failures, fail, env

SKIP = 77
BITSPARK, FIX, TMP = env('BITSPARK'), env('BS_FIXTURES'), env('BS_TMP')
MODEL = os.path.join(FIX, 'tiny-q1_0.gguf')
BASE_ENV = vk_lib.validation_env(BITSPARK)
BASE_ENV.pop('BITSPARK_DEVICE', None)
DISCRETE = 'discrete,256K:dl+hv+hc,1G:dl,4G:hv+hc+hca'


def run(cmd, fake=None, extra=None):
    e = dict(BASE_ENV, **(extra or {}))
    if fake:
        e['BITSPARK_VK_FAKE_MEMORY'] = fake
    r = subprocess.run([BITSPARK] + cmd, capture_output=True, text=True, env=e)
    if 'vulkan validation:' in r.stderr:
        fail('%s: validation messages:\n%s' % (' '.join(cmd[:2]), r.stderr[-2000:]))
    if r.returncode < 0 or r.returncode > 2:
        fail('%s (%s): exit %d (a crash?): %s' % (' '.join(cmd[:2]), fake, r.returncode, r.stderr[-800:]))
    return r


def logits(name, fake=None, extra=None):
    """The fixture's teacher-forced logits (prompt as one batch, then one token at a time)."""
    meta = json.load(open(os.path.join(FIX, 'tiny-q1_0.json')))
    toks = meta['prompt_tokens'] + meta['greedy_tokens']
    out = os.path.join(TMP, 'vkmem_%s.f32' % name)
    if os.path.exists(out):
        os.remove(out)
    r = run(['logits', '-m', MODEL, '--tokens', ','.join(map(str, toks)), '--batch', str(len(meta['prompt_tokens'])),
             '-o', out, '--device', 'vulkan', '--kv-type', 'f32'], fake, extra)
    data = open(out, 'rb').read() if r.returncode == 0 and os.path.exists(out) else None
    return r, data


def check_discrete(base):
    r, data = logits('discrete', DISCRETE)
    if data is None:
        return fail('discrete heaps: logits failed: %s' % r.stderr[-600:])
    if data != base:
        fail('discrete heaps: logits differ from the plain run')
    if 'device memory: the model loaded:' not in r.stderr or 'in heap 1 (device-local' not in r.stderr:
        fail('discrete heaps: the load log does not put the model in heap 1: %s' % r.stderr[-600:])
    if 'in heap 0' in r.stderr:
        fail('discrete heaps: something went to the 256 KiB BAR heap: %s' % r.stderr[-600:])
    print('discrete heaps: same bits; %s' % [ln for ln in r.stderr.splitlines() if 'device memory' in ln])
    d = run(['devices'], DISCRETE).stdout
    want = ['0: 256.0 KiB device-local',
            '1: 1.0 GiB device-local', '2: 4.0 GiB host', 'discrete memory (faked by BITSPARK_VK_FAKE_MEMORY)',
            'device buffers: heap 1 (type 1: device-local, 1.0 GiB', 'then heap 0 (type 0: device-local, host-visible',
            'then heap 2 (type 2: host, host-visible']
    for w in want:
        if w not in d:
            fail('devices with the fake heaps: no %r in:\n%s' % (w, d))


def check_fallback(base):
    fake = 'discrete,64M:dl+hv+hc,512K:dl,4G:hv+hc+hca'
    r, data = logits('fallback', fake)
    if data is None:
        return fail('a full heap: logits failed: %s' % r.stderr[-600:])
    if data != base:
        fail('a full heap: logits differ from the plain run')
    if 'a heap is full: buffers go to heap 0' not in r.stderr:
        fail('a full heap: the log does not say the buffers moved on: %s' % r.stderr[-600:])
    print('a full device-local heap: buffers moved on to heap 0, same bits')


def refused(what, r, *needles):
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith('bitspark') or 'rror' in ln]
    if r.returncode == 0:
        return fail('%s: exit 0' % what)
    if 'VkResult' in r.stderr or 'Sanitizer' in r.stderr:
        fail('%s: a driver code or a sanitizer report: %s' % (what, r.stderr[-600:]))
    if len(errs) != 1 or not all(n in errs[0] for n in needles):
        return fail('%s: want one error line with %s, got %s' % (what, needles, errs))
    print('%s: %s' % (what, errs[0]))


def check_too_small():
    fake = 'discrete,256K:dl+hv+hc,512K:dl,4G:hv+hc+hca'
    r, data = logits('small', fake)
    if data is not None:
        return fail('heaps smaller than the model: it loaded')
    refused('heaps smaller than the model', r, 'the model needs', 'of device memory, heaps 0 and 1 have', 'free')
    r = run(['run', '-m', MODEL, '-p', 'x', '-n', '2', '--device', 'vulkan'], 'integrated,512K:dl+hv+hc')
    refused('unified memory smaller than the model', r, 'the model needs', 'heap 0 has')


def check_max_alloc():
    d = run(['devices'], DISCRETE + ',maxalloc=64K').stdout
    if 'max allocation 64.0 KiB, max buffer 64.0 KiB' not in d:
        fail('devices: no max allocation line for maxalloc=64K:\n%s' % d)
    r, data = logits('maxalloc_small', DISCRETE + ',maxalloc=1K')
    if data is not None:
        return fail('maxalloc=1K: it loaded')
    refused('maxalloc=1K', r, 'Vulkan')


def check_bad_spec():
    r = run(['devices'], 'discrete,12Q:dl')
    if 'BITSPARK_VK_FAKE_MEMORY: bad entry' not in r.stdout + r.stderr:
        fail('a bad BITSPARK_VK_FAKE_MEMORY: no message: %r' % (r.stdout + r.stderr))
    r = run(['run', '-m', MODEL, '-p', 'x', '-n', '2', '--device', 'vulkan'], 'discrete,1G:dl+xx')
    refused('a bad BITSPARK_VK_FAKE_MEMORY', r, 'BITSPARK_VK_FAKE_MEMORY: bad entry')


def check_no_layer():
    e = dict(BASE_ENV, VK_LAYER_PATH='/nonexistent', BITSPARK_VK_VALIDATE='1')
    e.pop('VK_ADD_LAYER_PATH', None)
    r = subprocess.run([BITSPARK, 'devices'], capture_output=True, text=True, env=e)
    if 'VK_LAYER_KHRONOS_validation is not installed' not in r.stdout + r.stderr:
        fail('without the layer, BITSPARK_VK_VALIDATE=1 says nothing about it: %r' % r.stdout[-400:])
    e = vk_lib.validation_env(BITSPARK, dict(BASE_ENV, VK_LAYER_PATH='/nonexistent'))
    if 'BITSPARK_VK_VALIDATE' in e:
        fail('vk_lib.validation_env kept BITSPARK_VK_VALIDATE without the layer')


def main():
    r = subprocess.run([BITSPARK, 'devices'], capture_output=True, text=True)
    if 'not built' in r.stdout or 'vulkan: unavailable' in r.stdout or 'no devices' in r.stdout:
        print('skipped: %s' % r.stdout.strip().splitlines()[-1])
        return SKIP
    r, base = logits('plain')
    if base is None:
        fail('the plain run failed: %s' % r.stderr[-600:])
        return 1
    check_discrete(base)
    check_fallback(base)
    check_too_small()
    check_max_alloc()
    check_bad_spec()
    check_no_layer()
    print('%d failures' % len(failures))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
