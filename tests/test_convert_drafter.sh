#!/usr/bin/env bash
# test_convert_drafter.sh: `bitspark convert drafter-to-safetensors / drafter-to-gguf`:
#  - a synthetic bf16 drafter -> safetensors -> GGUF is the same file byte for byte (so the same
#    tensors, bytes and metadata values, in the same order); config.json has every DeepSpec key;
#    the safetensors names are DeepSpec's and the drafter loader reads the directory and gives
#    the same draft logits as from the GGUF;
#  - the F32 fixture drafter round-trips its tensors and metadata (the converter adds
#    general.file_type, which the fixture lacks);
#  - a q4_1 pack is dequantized to BF16 with one note per quantized tensor;
#  - bad inputs fail with one line.
source "$(dirname "$0")/cli_lib.sh" convdr
F=${BS_FIXTURES:?} S=${BS_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
PY=/usr/bin/python3

"$B" synth --preset drafter-tiny --drafter-type bf16 -o "$T/d.gguf" 2>/dev/null || bad "synth"
"$B" convert drafter-to-safetensors "$T/d.gguf" "$T/st" 2>/dev/null && \
"$B" convert drafter-to-gguf "$T/st" "$T/d2.gguf" 2>/dev/null && cmp -s "$T/d.gguf" "$T/d2.gguf" \
  && ok "bf16 drafter -> safetensors -> GGUF: identical file" || bad "bf16 round trip"
$PY - "$T/st" <<'PYEOF' && ok "config.json keys and DeepSpec tensor names" || bad "config / names"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + '/config.json'))
want = {'architectures': ['Qwen3DSparkModel'], 'hidden_size': 256, 'num_hidden_layers': 2, 'num_attention_heads': 4,
        'num_key_value_heads': 2, 'head_dim': 64, 'intermediate_size': 256, 'rope_theta': 1e7, 'rms_norm_eps': 1e-6,
        'vocab_size': 1024, 'block_size': 4, 'mask_token_id': 1023, 'target_layer_ids': [1, 4, 6], 'markov_rank': 32,
        'enable_confidence_head': True, 'confidence_head_with_markov': True, 'log_snr_conditioning': True,
        'min_log_snr': -9.0, 'max_log_snr': 9.0}
for k, v in want.items():
    assert c.get(k) == v, (k, c.get(k), v)
buf = open(d + '/model.safetensors', 'rb').read()
h = json.loads(buf[8:8 + struct.unpack('<Q', buf[:8])[0]])
names = set(h) - {'__metadata__'}
for n in ['embed_tokens.weight', 'lm_head.weight', 'norm.weight', 'fc.weight', 'hidden_norm.weight',
          'markov_head.markov_w1.weight', 'markov_head.markov_w2.weight', 'confidence_head.proj.weight',
          'confidence_head.proj.bias', 'log_snr_embed.fc1.weight', 'log_snr_embed.fc2.bias',
          'layers.1.self_attn.q_proj.weight', 'layers.0.mlp.down_proj.weight', 'layers.0.self_attn.k_norm.weight',
          'layers.1.post_attention_layernorm.weight']:
    assert n in names, n
assert len(names) == 35, len(names)
assert h['fc.weight']['shape'] == [256, 768] and h['fc.weight']['dtype'] == 'BF16', h['fc.weight']
assert h['norm.weight']['dtype'] == 'F32' and h['markov_head.markov_w1.weight']['shape'] == [1024, 32]
PYEOF
# the loader reads the safetensors directory: same draft logits as from the GGUF
$PY -c "import numpy as np; np.random.default_rng(3).standard_normal((5, 768)).astype(np.float32).tofile('$T/feat.f32')"
"$B" draft-logits -md "$T/d.gguf" --features "$T/feat.f32" --rows 5 --anchor 17 -o "$T/l1.f32" >/dev/null 2>&1 && \
"$B" draft-logits -md "$T/st" --features "$T/feat.f32" --rows 5 --anchor 17 -o "$T/l2.f32" >/dev/null 2>&1 && \
  cmp -s "$T/l1.f32" "$T/l2.f32" && ok "draft-logits from the safetensors export = from the GGUF" || bad "draft-logits"

"$B" convert drafter-to-safetensors "$F/tiny-dspark-f32.gguf" "$T/fx" 2>/dev/null && \
"$B" convert drafter-to-gguf "$T/fx" "$T/fx.gguf" 2>/dev/null && \
  $PY "$S/tests/gguf_same.py" "$T/fx.gguf" "$F/tiny-dspark-f32.gguf" --meta --ignore-key general.file_type \
  && ok "fixture drafter round trip" || bad "fixture drafter round trip"

"$B" synth --preset drafter-tiny --drafter-type q4_1 -o "$T/q.gguf" 2>/dev/null
"$B" convert drafter-to-safetensors "$T/q.gguf" "$T/qst" 2>"$T/err" && \
  [ "$(grep -c 'written as BF16 (dequantized)' "$T/err")" = 19 ] && ok "q4_1 pack: 19 tensors dequantized to BF16" \
  || bad "q4_1 pack: $(head -3 "$T/err")"

"$B" convert drafter-to-safetensors "$F/tiny-f32.gguf" "$T/x" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "not a DSpark drafter" "$T/err" && ok "target GGUF refused" || bad "target GGUF: rc=$rc"
# two safetensors names for one drafter tensor (fc.weight and model.fc.weight): refused, naming both
mkdir -p "$T/dup" && cp "$T/st/config.json" "$T/dup/" && $PY - "$T/st/model.safetensors" "$T/dup/model.safetensors" <<'PYEOF'
import json, struct, sys
buf = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', buf[:8])[0]
h, data = json.loads(buf[8:8 + n]), buf[8 + n:]
a, b = h['fc.weight']['data_offsets']
h['model.fc.weight'] = dict(h['fc.weight'], data_offsets=[len(data), len(data) + b - a])
data += data[a:b]
hb = json.dumps(h).encode()
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + data)
PYEOF
"$B" convert drafter-to-gguf "$T/dup" "$T/dup.gguf" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "fc.weight and model.fc.weight are the same tensor\|model.fc.weight and fc.weight are the same tensor" "$T/err" \
  && ok "duplicate tensor names: $(head -1 "$T/err")" || bad "duplicate names: rc=$rc $(head -2 "$T/err")"
"$B" convert drafter-to-gguf "$T/nonexistent" "$T/y.gguf" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ ! -e "$T/y.gguf" ] && ok "missing dir: $(cat "$T/err")" || bad "missing dir"
exit $fail
