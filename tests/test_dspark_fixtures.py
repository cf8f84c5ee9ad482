"""DSpark drafter vs the fixtures in $BS_FIXTURES/dspark (a llama.cpp-lineage implementation with
GIDD log-SNR conditioning): `bitspark draft-logits` must give the base block logits within 1e-4
relative L2 per slot, the greedy Markov drafts exactly and the confidences within 1e-4
(fixtures/README.md). Also checks the drafter loads from a safetensors + config.json export of
the same weights (Qwen3DSparkModel names, BF16 matrices) with the same drafts, and that bad
invocations fail cleanly."""
import atexit
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reader  # noqa: E402

BIN = os.environ["BITSPARK"]
FIX = os.environ["BS_FIXTURES"]
# a directory of this process's own: ctest runs this file and test_vulkan_dspark.py (three ways)
# side by side, and their outputs and exports have the same names
os.makedirs(os.environ.get("BS_TMP", "/tmp"), exist_ok=True)
TMP = tempfile.mkdtemp(prefix="dspark.", dir=os.environ.get("BS_TMP", "/tmp"))
atexit.register(shutil.rmtree, TMP, True)
DRAFTER = os.path.join(FIX, "tiny-dspark-f32.gguf")
CASES = ["random7", "random120", "round1"]
failures = []


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        failures.append(msg)


def run_case(drafter, case, out_name, extra=()):
    meta = json.load(open(os.path.join(FIX, "dspark", case + ".json")))
    out = os.path.join(TMP, out_name)
    cmd = [BIN, "draft-logits", "-md", drafter, "--features",
           os.path.join(FIX, "dspark", case + ".ctx_feat.f32"), "--rows", str(meta["n_ctx_rows"]),
           "--anchor", str(meta["block_tokens"][0]), "--pos", str(meta["block_pos_first"]),
           "-o", out, "--json"] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if "vulkan validation:" in r.stderr:
        check(False, f"{case}: validation messages: {r.stderr[-1000:]}")
    if r.returncode != 0:
        check(False, f"{case}: draft-logits failed: {r.stderr.strip()}")
        return None
    res = json.loads(r.stdout)
    logits = np.fromfile(out, dtype=np.float32).reshape(-1, meta["n_vocab"])
    return meta, res, logits


def fixture_cases():
    for case in CASES:
        got = run_case(DRAFTER, case, f"dspark_{case}.f32")
        if not got:
            continue
        meta, res, logits = got
        ref = np.fromfile(os.path.join(FIX, "dspark", case + ".block_logits.f32"),
                          dtype=np.float32).reshape(logits.shape)
        rel = [float(np.linalg.norm(logits[k].astype(np.float64) - ref[k]) / np.linalg.norm(ref[k]))
               for k in range(len(ref))]
        check(max(rel) <= 1e-4, f"{case}: base logits rel-L2 per slot {['%.2e' % x for x in rel]} <= 1e-4")
        check(res["drafts"] == meta["drafts_greedy_markov"],
              f"{case}: drafts {res['drafts']} == {meta['drafts_greedy_markov']}")
        dc = max(abs(a - b) for a, b in zip(res["confidence"], meta["confidence"]))
        check(dc <= 1e-4, f"{case}: confidences within {dc:.1e} <= 1e-4")


HEAD = {"token_embd.weight": "embed_tokens.weight", "output.weight": "lm_head.weight",
        "output_norm.weight": "norm.weight", "dspark.fc.weight": "fc.weight",
        "dspark.hidden_norm.weight": "hidden_norm.weight",
        "dspark.markov_head_a.weight": "markov_head.markov_w1.weight",
        "dspark.markov_head_b.weight": "markov_head.markov_w2.weight",
        "dspark.confidence_head.weight": "confidence_head.proj.weight",
        "dspark.confidence_head.bias": "confidence_head.proj.bias",
        "dspark.log_snr_fc1.weight": "log_snr_embed.fc1.weight",
        "dspark.log_snr_fc1.bias": "log_snr_embed.fc1.bias",
        "dspark.log_snr_fc2.weight": "log_snr_embed.fc2.weight",
        "dspark.log_snr_fc2.bias": "log_snr_embed.fc2.bias"}
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
         "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}


def hf_name(n):
    if n in HEAD:
        return HEAD[n]
    parts = n.split(".")
    return f"model.layers.{parts[1]}.{LAYER[parts[2]]}.{parts[3]}"


def bf16(a):
    """float32 -> bf16 bits, round to nearest even."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def safetensors_export():
    """The fixture drafter as a DeepSpec export: matrices BF16, vectors F32, config.json."""
    g = gguf_reader.GGUF(DRAFTER)
    kv = g.meta
    d = os.path.join(TMP, "dspark_st")
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for name in g.tensors:
        a = g.get(name).astype(np.float32)
        if a.ndim == 2 and a.shape[0] > 1:
            tensors[hf_name(name)] = ("BF16", bf16(a))
        else:
            tensors[hf_name(name)] = ("F32", a)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    cfg = {"architectures": ["Qwen3DSparkModel"], "hidden_size": kv["dspark.embedding_length"],
           "intermediate_size": kv["dspark.feed_forward_length"],
           "num_hidden_layers": kv["dspark.block_count"],
           "num_attention_heads": kv["dspark.attention.head_count"],
           "num_key_value_heads": kv["dspark.attention.head_count_kv"],
           "head_dim": kv["dspark.attention.key_length"], "rms_norm_eps": 1e-6,
           "rope_theta": kv["dspark.rope.freq_base"], "vocab_size": 1024,
           "block_size": kv["dspark.dspark.block_size"],
           "mask_token_id": kv["dspark.dspark.mask_token_id"],
           "target_layer_ids": list(kv["dspark.dspark.target_layers"]),
           "markov_rank": kv["dspark.dspark.markov_rank"], "enable_confidence_head": True,
           "confidence_head_with_markov": True, "log_snr_conditioning": True,
           "min_log_snr": -9.0, "max_log_snr": 9.0}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return d


def safetensors_case():
    d = safetensors_export()
    got = run_case(d, "round1", "dspark_st_round1.f32")
    if not got:
        return
    meta, res, logits = got
    ref = np.fromfile(os.path.join(FIX, "dspark", "round1.block_logits.f32"),
                      dtype=np.float32).reshape(logits.shape)
    rel = max(float(np.linalg.norm(logits[k].astype(np.float64) - ref[k]) / np.linalg.norm(ref[k]))
              for k in range(len(ref)))
    # BF16 matrices: weight rounding alone moves the logits by ~1e-2 relative
    check(rel <= 5e-2, f"safetensors (BF16) export: round1 logits rel-L2 {rel:.2e} <= 5e-2")
    print("     safetensors drafts", res["drafts"], "vs f32", meta["drafts_greedy_markov"])


def bad_inputs():
    feat = os.path.join(FIX, "dspark", "random7.ctx_feat.f32")
    bad = [["--rows", "8", "--anchor", "1"],        # file holds 7 rows
           ["--rows", "7", "--anchor", "1024"],     # anchor outside the vocabulary
           ["--rows", "7", "--anchor", "1", "--pos", "3"]]
    for extra in bad:
        r = subprocess.run([BIN, "draft-logits", "-md", DRAFTER, "--features", feat, "-o",
                            os.path.join(TMP, "bad.f32")] + extra, capture_output=True, text=True)
        check(r.returncode == 1 and "draft-logits" in r.stderr and r.stderr.count("\n") == 1,
              f"bad input {' '.join(extra)} -> one-line error: {r.stderr.strip()}")
    r = subprocess.run([BIN, "draft-logits", "-md", os.path.join(FIX, "tiny-f32.gguf"), "--features",
                        feat, "--rows", "7", "--anchor", "1", "-o", os.path.join(TMP, "bad.f32")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "not a DSpark drafter" in r.stderr, "a target GGUF is refused as drafter")


if __name__ == "__main__":
    fixture_cases()
    safetensors_case()
    bad_inputs()
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all ok")
