#!/usr/bin/env python3
"""The DSpark drafter on the Vulkan device (lavapipe in CI; validation layer on, any message
fails): `bitspark draft-logits --device vulkan` against the fixtures in $BS_FIXTURES/dspark,
as the CPU drafter is held (tests/test_dspark_fixtures.py): base block logits within 1e-4
relative L2 per slot, the greedy Markov drafts exactly, the confidences within 1e-4; the same
drafter as a safetensors + config.json export (BF16 matrices) within the CPU's bound and with
the CPU drafter's drafts; several rounds on one context (appends, crops, blocks) equal to the
CPU drafter's to 1e-4; the trained tiny drafter (Q8_0 with Q1_0 token_embd / output) with the
CPU's drafts. Skipped (77) where the binary has no Vulkan backend or the machine no device."""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_dspark_fixtures as fx  # noqa: E402
import vk_lib  # noqa: E402

os.environ.update(vk_lib.validation_env(fx.BIN))

SKIP = 77
DEV = ["--device", "vulkan"]
SRC = os.environ.get("BS_SRC", ".")


def rel_l2(a, b):
    return max(float(np.linalg.norm(a[k].astype(np.float64) - b[k]) / max(np.linalg.norm(b[k]), 1e-30))
               for k in range(len(b)))


def fixtures():
    for case in fx.CASES:
        got = fx.run_case(fx.DRAFTER, case, f"vk_dspark_{case}.f32", DEV)
        if not got:
            continue
        meta, res, logits = got
        ref = np.fromfile(os.path.join(fx.FIX, "dspark", case + ".block_logits.f32"),
                          dtype=np.float32).reshape(logits.shape)
        rel = rel_l2(logits, ref)
        fx.check(rel <= 1e-4, f"{case} on Vulkan: base logits rel-L2 {rel:.2e} <= 1e-4")
        fx.check(res["drafts"] == meta["drafts_greedy_markov"],
                 f"{case} on Vulkan: drafts {res['drafts']} == {meta['drafts_greedy_markov']}")
        dc = max(abs(a - b) for a, b in zip(res["confidence"], meta["confidence"]))
        fx.check(dc <= 1e-4, f"{case} on Vulkan: confidences within {dc:.1e} <= 1e-4")


def vs_cpu(drafter, case, name, extra=(), bound=1e-4):
    """The same invocation on the CPU and on the device: logits within bound, drafts equal."""
    cpu = fx.run_case(drafter, case, f"vk_{name}_cpu.f32", list(extra))
    dev = fx.run_case(drafter, case, f"vk_{name}_dev.f32", list(extra) + DEV)
    if not cpu or not dev:
        return
    (_, rc, lc), (_, rd, ld) = cpu, dev
    if lc.size != ld.size or lc.size == 0:
        fx.check(False, f"{name}: {ld.size} logits on Vulkan, {lc.size} on the CPU")
        return
    rel = rel_l2(ld.reshape(-1, lc.shape[1]), lc.reshape(-1, lc.shape[1]))
    fx.check(rel <= bound, f"{name}: Vulkan vs CPU logits rel-L2 {rel:.2e} <= {bound:g}")
    rs_c, rs_d = rc.get("rounds", [rc]), rd.get("rounds", [rd])
    fx.check([r["drafts"] for r in rs_d] == [r["drafts"] for r in rs_c],
             f"{name}: Vulkan drafts {[r['drafts'] for r in rs_d]} == CPU's")
    dc = max(abs(a - b) for x, y in zip(rs_c, rs_d) for a, b in zip(x["confidence"], y["confidence"]))
    fx.check(dc <= 1e-3, f"{name}: confidences within {dc:.1e} of the CPU's")


def rounds():
    # appends, a crop into the middle, blocks after each: the context's bookkeeping on the device
    ops = "+60,1@60,+40,7@100,-30,3@30,+20,9@50,11@200"
    vs_cpu(fx.DRAFTER, "random120", "rounds", ["--rounds", ops])


def safetensors():
    d = fx.safetensors_export()
    # BF16 products round every activation to BF16 (on both sides); a rounding that falls the other
    # way on one side moves a logit by a BF16 step, so the bound is the CPU's own vs the fixture
    vs_cpu(d, "round1", "safetensors", bound=5e-2)


def trained():
    """The trained drafter of models/ (Q8_0 layers, Q1_0 token_embd / output, log-SNR) on the
    random120 features cut to its tap width; on the device its block takes the target step's
    fusions (integer layers), its q/k/v products one layout (one dispatch; the context's k and
    v a run of it) and its q/k norms, RoPE and K/V rows one dispatch (qk.comp), which must give
    the bits of each apart (BITSPARK_VK_NO_NORMO=1, _NO_CAT=1, _NO_QK=1), which the profile
    shows as more dispatches."""
    drafter = os.path.join(SRC, "models", "bonsai-tiny-dspark.gguf")
    meta = json.load(open(os.path.join(fx.FIX, "dspark", "random120.json")))
    feat = np.fromfile(os.path.join(fx.FIX, "dspark", "random120.ctx_feat.f32"), dtype=np.float32)
    width = 3 * 256   # taps [0,1,2] x hidden 256
    rows = feat.size // width
    path = os.path.join(fx.TMP, "vk_trained_feat.f32")
    feat[:rows * width].tofile(path)
    outs, counts = [], []
    aparts = ("BITSPARK_VK_NO_NORMO", "BITSPARK_VK_NO_CAT", "BITSPARK_VK_NO_QK")
    for extra, apart in [([], None), (DEV, None)] + [(DEV, a) for a in aparts]:
        out = os.path.join(fx.TMP, "vk_trained_%d_%s.f32" % (len(extra), apart))
        env = dict(os.environ, BITSPARK_PROFILE="1", **({apart: "1"} if apart else {}))
        r = subprocess.run([fx.BIN, "draft-logits", "-md", drafter, "--features", path, "--rows", str(rows),
                            "--anchor", "100", "-o", out, "--json"] + extra, capture_output=True, text=True, env=env)
        if r.returncode != 0 or "vulkan validation:" in r.stderr:
            fx.check(False, f"trained drafter {' '.join(extra)}: {r.stderr.strip()[-500:]}")
            return
        outs.append((json.loads(r.stdout), np.fromfile(out, dtype=np.float32).reshape(4, -1)))
        counts.append(sum(int(n) for n in re.findall(r"(\d+) dispatches", r.stderr)))
    (rc, lc), (rd, ld) = outs[:2]
    for a, (ra, la), n in zip(aparts, outs[2:], counts[2:]):
        fx.check(np.array_equal(ld.view(np.uint32), la.view(np.uint32)) and rd == ra,
                 f"trained drafter on Vulkan: the fused block gives the bits of {a}=1")
        fx.check(0 < counts[1] < n, f"trained drafter on Vulkan: {counts[1]} dispatches fused, {n} with {a}=1")
    rel = rel_l2(ld, lc)
    # int8 activations: on random (off-distribution) features a rounding that falls the other way
    # in one 32-block moves the products by a step; the drafts must not move
    fx.check(rel <= 5e-2, f"trained drafter: Vulkan vs CPU logits rel-L2 {rel:.2e} <= 5e-2")
    fx.check(rd["drafts"] == rc["drafts"], f"trained drafter: drafts {rd['drafts']} == {rc['drafts']}")
    del meta


def main():
    r = subprocess.run([fx.BIN, "devices"], capture_output=True, text=True)
    if "not built" in r.stdout or "vulkan: unavailable" in r.stdout or "no devices" in r.stdout:
        print("skipped: %s" % r.stdout.strip().splitlines()[-1])
        return SKIP
    fixtures()
    rounds()
    safetensors()
    trained()
    if fx.failures:
        print(f"{len(fx.failures)} failure(s)")
        return 1
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
