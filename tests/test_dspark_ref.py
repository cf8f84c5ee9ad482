"""An independent float64 numpy implementation of the DSpark drafter (../shared/reference/dspark.md
§2-4: fused context K/V, GIDD log-SNR addend, non-causal block over [context ; block], Markov
bias chained on the drafted token with the mask id excluded, confidence head) checked against
`bitspark draft-logits --rounds` on shapes other than the fixture's (3 layers, hidden 128, 4 query
heads / 1 KV head of 32, FFN 192, 2 taps, block 5, Markov rank 16, vocab 512) and on the fixture
drafter, over multi-round runs: context appended over several rounds, cropped back (rollback),
appended again, blocks at positions past the context.

Tolerances: F32 weights, base logits <= 1e-4 relative L2 per slot, confidences within 1e-4,
drafts exact (a slot whose reference top-2 margin is below 1e-3 may pick either). A Q4_1 pack
(activations rounded to Q8_1 as llama.cpp does) within 5e-2 relative L2."""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reader  # noqa: E402

BIN = os.environ["BITSPARK"]
FIX = os.environ["BS_FIXTURES"]
TMP = os.environ.get("BS_TMP", "/tmp")
failures = []


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        failures.append(msg)


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base):
    """NeoX rotate-half over the whole head: pairs (i, i + D/2), theta_i = base^(-2i/D)."""
    d = x.shape[-1]
    half = d // 2
    ang = np.asarray(pos, dtype=np.float64)[:, None] * base ** (-2.0 * np.arange(half) / d)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


class Drafter:
    def __init__(self, path):
        g = gguf_reader.GGUF(path)
        m = g.meta
        self.L = m["dspark.block_count"]
        self.E = m["dspark.embedding_length"]
        self.H = m["dspark.attention.head_count"]
        self.Hkv = m["dspark.attention.head_count_kv"]
        self.D = m.get("dspark.attention.key_length", self.E // self.H)
        self.eps = m.get("dspark.attention.layer_norm_rms_epsilon", 1e-6)
        self.base = m["dspark.rope.freq_base"]
        self.B = m["dspark.dspark.block_size"]
        self.mask = m["dspark.dspark.mask_token_id"]
        self.taps = list(m["dspark.dspark.target_layers"])
        w = {n: g.get(n) for n in g.tensors}
        self.w = w
        self.V = w["token_embd.weight"].shape[0]
        self.snr = self.log_snr(m["dspark.dspark.min_log_snr"], m["dspark.dspark.max_log_snr"])
        self.ctx_k = [np.zeros((0, self.Hkv, self.D)) for _ in range(self.L)]
        self.ctx_v = [np.zeros((0, self.Hkv, self.D)) for _ in range(self.L)]

    def log_snr(self, lo, hi):
        w = self.w
        nf = w["dspark.log_snr_fc1.weight"].shape[1]
        half = nf // 2
        out = []
        for lam in (hi, lo):   # anchor slot, mask slots
            t = (lam - lo) / (hi - lo) * 1000.0
            f = np.exp(-np.log(10000.0) * np.arange(half) / half)
            feat = np.concatenate([np.sin(t * f), np.cos(t * f)])
            h = silu(w["dspark.log_snr_fc1.weight"] @ feat + w["dspark.log_snr_fc1.bias"])
            out.append(w["dspark.log_snr_fc2.weight"] @ h + w["dspark.log_snr_fc2.bias"])
        return out

    def append(self, feats):
        w, n0 = self.w, len(self.ctx_k[0])
        c = rms(feats @ w["dspark.fc.weight"].T, w["dspark.hidden_norm.weight"], self.eps)
        pos = np.arange(n0, n0 + len(feats))
        for l in range(self.L):
            p = f"blk.{l}."
            k = (c @ w[p + "attn_k.weight"].T).reshape(len(c), self.Hkv, self.D)
            k = rope(rms(k, w[p + "attn_k_norm.weight"], self.eps), pos, self.base)
            v = (c @ w[p + "attn_v.weight"].T).reshape(len(c), self.Hkv, self.D)
            self.ctx_k[l] = np.concatenate([self.ctx_k[l], k])
            self.ctx_v[l] = np.concatenate([self.ctx_v[l], v])

    def crop(self, n):
        self.ctx_k = [k[:n] for k in self.ctx_k]
        self.ctx_v = [v[:n] for v in self.ctx_v]

    def block(self, anchor, pos):
        w, B, H, D = self.w, self.B, self.H, self.D
        ids = [anchor] + [self.mask] * (B - 1)
        x = w["token_embd.weight"][ids] + np.stack([self.snr[0]] + [self.snr[1]] * (B - 1))
        bpos = np.arange(pos, pos + B)
        g = H // self.Hkv
        for l in range(self.L):
            p = f"blk.{l}."
            h = rms(x, w[p + "attn_norm.weight"], self.eps)
            q = rope(rms((h @ w[p + "attn_q.weight"].T).reshape(B, H, D), w[p + "attn_q_norm.weight"], self.eps),
                     bpos, self.base)
            k = rope(rms((h @ w[p + "attn_k.weight"].T).reshape(B, self.Hkv, D), w[p + "attn_k_norm.weight"],
                         self.eps), bpos, self.base)
            v = (h @ w[p + "attn_v.weight"].T).reshape(B, self.Hkv, D)
            K = np.concatenate([self.ctx_k[l], k])
            V = np.concatenate([self.ctx_v[l], v])
            att = np.zeros((B, H, D))
            for hh in range(H):
                s = q[:, hh, :] @ K[:, hh // g, :].T / np.sqrt(D)     # no mask: non-causal
                s = np.exp(s - s.max(axis=1, keepdims=True))
                att[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ V[:, hh // g, :]
            x = x + att.reshape(B, H * D) @ w[p + "attn_output.weight"].T
            h2 = rms(x, w[p + "ffn_norm.weight"], self.eps)
            x = x + (silu(h2 @ w[p + "ffn_gate.weight"].T) * (h2 @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        hn = rms(x, w["output_norm.weight"], self.eps)
        logits = hn @ w.get("output.weight", w["token_embd.weight"]).T
        drafts, conf, margins, prev = [], [], [], anchor
        w1, w2 = w["dspark.markov_head_a.weight"], w["dspark.markov_head_b.weight"]
        cw, cb = w["dspark.confidence_head.weight"].reshape(-1), w["dspark.confidence_head.bias"].reshape(-1)[0]
        for k in range(B):
            score = logits[k] + w2 @ w1[prev]
            score[self.mask] = -np.inf
            order = np.argsort(-score, kind="stable")
            margins.append(score[order[0]] - score[order[1]])
            conf.append(1.0 / (1.0 + np.exp(-(cw @ np.concatenate([hn[k], w1[prev]]) + cb))))
            drafts.append(int(np.argmax(score)))
            prev = drafts[-1]
        return logits, drafts, conf, margins


def run(drafter_path, feats, ops, tol, exact_drafts, name):
    feat_path = os.path.join(TMP, "dspark_ref_feat.f32")
    feats.astype(np.float32).tofile(feat_path)
    out = os.path.join(TMP, "dspark_ref_out.f32")
    r = subprocess.run([BIN, "draft-logits", "-md", drafter_path, "--features", feat_path, "--rows",
                        str(len(feats)), "--rounds", ops, "-o", out, "--json"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        check(False, f"{name}: draft-logits failed: {r.stderr.strip()}")
        return
    got = json.loads(r.stdout)["rounds"]
    ref = Drafter(drafter_path)
    f32 = feats.astype(np.float32).astype(np.float64)   # the engine sees float32 features
    used, blocks = 0, []
    for op in ops.split(","):
        if op.startswith("+"):
            n = int(op[1:])
            ref.append(f32[used:used + n])
            used += n
        elif op.startswith("-"):
            ref.crop(int(op[1:]))
        else:
            a, p = op.split("@")
            blocks.append(ref.block(int(a), int(p)))
    logits = np.fromfile(out, dtype=np.float32).reshape(len(blocks), ref.B, ref.V)
    check(len(got) == len(blocks), f"{name}: {len(got)} rounds reported")
    worst_l, worst_c, bad_drafts = 0.0, 0.0, 0
    for i, (rl, rd, rc, rm) in enumerate(blocks):
        for k in range(ref.B):
            worst_l = max(worst_l, float(np.linalg.norm(logits[i, k] - rl[k]) / np.linalg.norm(rl[k])))
        worst_c = max(worst_c, max(abs(a - b) for a, b in zip(got[i]["confidence"], rc)))
        for k in range(ref.B):
            if got[i]["drafts"][k] != rd[k]:
                # a different draft changes the Markov chain after it: compare up to there only
                if rm[k] >= exact_drafts:
                    bad_drafts += 1
                break
    check(worst_l <= tol, f"{name}: {len(blocks)} rounds, worst base-logit rel-L2 {worst_l:.2e} <= {tol:g}")
    check(worst_c <= max(1e-4, tol), f"{name}: worst confidence difference {worst_c:.1e}")
    check(bad_drafts == 0, f"{name}: drafts agree with the float64 chain ({bad_drafts} clear disagreements)")


def synth(args, path):
    r = subprocess.run([BIN, "synth", "--preset", "drafter-tiny"] + args + ["-o", path], capture_output=True, text=True)
    check(r.returncode == 0, f"synth {' '.join(args)}")


rng = np.random.default_rng(11)
shape = ["--n-embd", "128", "--n-head", "4", "--n-head-kv", "1", "--head-dim", "32", "--n-ff", "192",
         "--n-layer", "3", "--block-size", "5", "--markov-rank", "16", "--taps", "0,2", "--n-vocab", "512",
         "--seed", "3"]
other = os.path.join(TMP, "dspark_ref_f32.gguf")
synth(shape + ["--drafter-type", "f32"], other)
feats = rng.standard_normal((60, 2 * 128))
# append over rounds, blocks at the context end and past it, crop back (rollback), re-append
ops = "+9,17@9,+1,301@10,+4,5@14,-10,301@10,+30,77@40,44@47,-3,2@3,+12,510@15"
run(other, feats, ops, 1e-4, 1e-3, "other shape, f32")

q41 = os.path.join(TMP, "dspark_ref_q41.gguf")
synth(shape + ["--markov-rank", "32", "--drafter-type", "q4_1", "--embd-type", "q4_1"], q41)
run(q41, feats, "+20,3@20,+5,9@25,-12,9@12", 5e-2, 0.5, "other shape, q4_1 pack")

fix = os.path.join(FIX, "tiny-dspark-f32.gguf")
feats2 = rng.standard_normal((40, 3 * 256)) * 2.0
run(fix, feats2, "+16,12@16,+1,99@17,+5,700@22,-17,99@17,+18,3@35", 1e-4, 1e-3, "fixture drafter, multi-round")

# the reference itself against the fixtures (their float64 implementation agrees to <= 5e-6)
for case in ["round1", "random7"]:
    meta = json.load(open(os.path.join(FIX, "dspark", case + ".json")))
    ref = Drafter(fix)
    ref.append(np.fromfile(os.path.join(FIX, "dspark", case + ".ctx_feat.f32"), dtype=np.float32)
               .astype(np.float64).reshape(meta["n_ctx_rows"], -1))
    rl, rd, rc, _ = ref.block(meta["block_tokens"][0], meta["block_pos_first"])
    want = np.fromfile(os.path.join(FIX, "dspark", case + ".block_logits.f32"), dtype=np.float32).reshape(rl.shape)
    err = max(float(np.linalg.norm(rl[k] - want[k]) / np.linalg.norm(want[k])) for k in range(len(rl)))
    check(err <= 1e-5 and rd == meta["drafts_greedy_markov"] and
          max(abs(a - b) for a, b in zip(rc, meta["confidence"])) <= 1e-5,
          f"numpy reference vs fixture {case}: rel-L2 {err:.1e}, drafts {rd}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all ok")
