#!/usr/bin/env bash
# test_inspect_kinds.sh: `inspect` names what it was given: a LoRA adapter GGUF is described as
# an adapter (pairs, rank, alpha), not as a "qwen35 target (0 layers ...)"; a file that is
# neither GGUF nor safetensors (/etc/passwd, random bytes, an empty file) is "not a GGUF or
# safetensors file", not a huge header length; a *.safetensors file keeps its precise error; a
# vision projector (mmproj) is described by its clip.* shape and says whether bitspark takes it
# (the fixture's and synth's: yes; another projector type: no, with the loader's reason).
source "$(dirname "$0")/cli_lib.sh" inspect_kinds
PY=/usr/bin/python3
# a one-pair GGUF adapter (rank 2, alpha 4) written by an independent minimal GGUF v3 writer
$PY - "$T/ad.gguf" <<'PYEOF'
import struct, sys
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [('general.architecture', 8, s('qwen35')), ('general.type', 8, s('adapter')),
      ('adapter.type', 8, s('lora')), ('adapter.lora.alpha', 6, struct.pack('<f', 4.0))]
ts = [('blk.0.attn_qkv.weight.lora_a', (256, 2)), ('blk.0.attn_qkv.weight.lora_b', (2, 768))]
out = b'GGUF' + struct.pack('<IQQ', 3, len(ts), len(kv))
for k, t, v in kv: out += s(k) + struct.pack('<I', t) + v
off = 0
for name, ne in ts:
    out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne) + struct.pack('<IQ', 0, off)
    off += 4 * ne[0] * ne[1]; off = (off + 31) // 32 * 32
out += b'\0' * ((-len(out)) % 32)
out += b'\0' * off
open(sys.argv[1], 'wb').write(out)
PYEOF
"$B" inspect "$T/ad.gguf" >"$T/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "LoRA adapter for qwen35 (1 tensor pairs, rank 2, alpha 4)" "$T/out" && ! grep -q "target (" "$T/out" \
  && ok "adapter: $(grep -m1 adapter "$T/out")" || bad "adapter: rc=$rc $(cat "$T/out")"
"$B" inspect --json "$T/ad.gguf" | grep -q '"kind": "adapter"' && ok "adapter --json kind" || bad "adapter json"
head -c 5000 /dev/urandom >"$T/random.bin"; : >"$T/empty"; printf 'x' >"$T/one"
for f in /etc/passwd "$T/random.bin" "$T/empty" "$T/one"; do
  "$B" inspect "$f" >"$T/out" 2>&1; rc=$?
  [ $rc = 1 ] && grep -q "not a GGUF or safetensors file" "$T/out" && ! grep -q "header length" "$T/out" \
    && ok "$(basename "$f"): $(cat "$T/out")" || bad "$f: rc=$rc $(cat "$T/out")"
done
cp /etc/passwd "$T/bad.safetensors"
"$B" inspect "$T/bad.safetensors" >"$T/out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "header length" "$T/out" && ok "*.safetensors keeps the precise error" || bad "bad.safetensors: $(cat "$T/out")"
FX=${BS_FIXTURES:-$(dirname "$0")/fixtures}
for f in "$FX/vision/tiny-mmproj-f32.gguf" synth; do
  if [ "$f" = synth ]; then "$B" synth --preset mmproj-tiny -o "$T/mp.gguf" >/dev/null 2>&1; f=$T/mp.gguf; fi
  "$B" inspect "$f" >"$T/out" 2>&1; rc=$?
  [ $rc = 0 ] && grep -q "vision projector (mmproj, qwen3vl_merger): image 96, 2 ViT layers, width 64, MLP 128, 2 heads, patch 16, merge 2, output 256" "$T/out" \
    && grep -q "^vision:   bitspark takes this projector" "$T/out" && ok "mmproj $(basename "$f"): $(grep -m1 '^model' "$T/out")" \
    || bad "mmproj $f: rc=$rc $(head -5 "$T/out")"
  "$B" inspect --json "$f" | $PY -c 'import json,sys; m=json.load(sys.stdin)["model"]; sys.exit(0 if m["kind"]=="mmproj" and m["supported"] is True and m["projection_dim"]==256 else 1)' \
    && ok "mmproj --json: kind, supported, projection_dim" || bad "mmproj --json"
done
# another projector type, in the same layout of keys
$PY - "$T/ldp.gguf" <<'PYEOF'
import struct, sys
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
kv = [('general.architecture', 8, s('clip')), ('clip.projector_type', 8, s('ldp')),
      ('clip.vision.block_count', 4, struct.pack('<I', 1)), ('clip.vision.embedding_length', 4, struct.pack('<I', 32))]
ts = [('v.patch_embd.weight', (16, 16, 3, 32))]
out = b'GGUF' + struct.pack('<IQQ', 3, len(ts), len(kv))
for k, t, v in kv: out += s(k) + struct.pack('<I', t) + v
off = 0
for name, ne in ts:
    out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne) + struct.pack('<IQ', 0, off)
    n = 4
    for d in ne: n *= d
    off += (n + 31) // 32 * 32
out += b'\0' * ((-len(out)) % 32)
out += b'\0' * off
open(sys.argv[1], 'wb').write(out)
PYEOF
"$B" inspect "$T/ldp.gguf" >"$T/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "vision projector (mmproj, ldp): image [0-9-]*, 1 ViT layers, width 32" "$T/out" && grep "^vision:" "$T/out" | grep -q -i "ldp" \
  && ok "another projector type: $(grep '^vision:' "$T/out")" || bad "ldp mmproj: rc=$rc $(head -5 "$T/out")"
exit $fail
