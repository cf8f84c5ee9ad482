#!/usr/bin/env bash
# test_server_embed.sh: POST /v1/embeddings (serve --embeddings) on the trained tiny model. Each
# vector must equal, within float32 rounding, numpy's pooling of the last layer's hidden states
# (`bitspark logits --taps`, an independent path) after the final RMSNorm (weights read by
# tests/gguf_reader.py), L2-normalized: mean pooling by default, the last token with --pooling
# last. Also: strings and token ids as input, a batch, usage, 501 without --embeddings, 400 on
# bad input.
source "$(dirname "$0")/server_lib.sh"
M=$SRC/models/bonsai-tiny-q1_0.gguf; PY=${PYTHON:-/usr/bin/python3}
start_server E -m "$M" -np 1 -t 1 --ctx 256 --embeddings
start_server L -m "$M" -np 1 -t 1 --ctx 256 --embeddings --pooling last
start_server N -m "$M" -np 1 -t 1 --ctx 256
ids=$(curl -s -H 'Content-Type: application/json' "$E/tokenize" -d '{"content":"The cat sat on the mat."}' | sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p')
[ -n "$ids" ] && ok "tokenized: $ids" || bad "tokenize"
curl -s -H 'Content-Type: application/json' "$E/v1/embeddings" -d "{\"input\":[\"The cat sat on the mat.\",[${ids}]],\"model\":\"x\"}" >"$T/mean.json"
curl -s -H 'Content-Type: application/json' "$L/v1/embeddings" -d '{"input":"The cat sat on the mat."}' >"$T/last.json"
layers=$("$PY" -c "import sys; sys.path.insert(0, '$SRC/tests'); from gguf_reader import GGUF; print(GGUF('$M').meta['qwen35.block_count'])")
"$B" logits -m "$M" --tokens "$ids" --taps $((layers - 1)) --taps-out "$T/taps.f32" -o "$T/logits.f32" >/dev/null 2>&1 \
  && ok "taps of layer $((layers - 1)) through bitspark logits" || bad "logits --taps"
if "$PY" - "$SRC" "$M" "$T" <<'PYEOF'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1] + '/tests')
from gguf_reader import GGUF
g = GGUF(sys.argv[2]); T = sys.argv[3]
eps = g.meta['qwen35.attention.layer_norm_rms_epsilon']
w = g.get('output_norm.weight')
h = np.fromfile(T + '/taps.f32', dtype=np.float32).astype(np.float64).reshape(-1, w.shape[0])
hn = h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps) * w
def unit(v): return v / np.linalg.norm(v)
want_mean, want_last = unit(hn.mean(axis=0)), unit(hn[-1])
mean = json.load(open(T + '/mean.json')); last = json.load(open(T + '/last.json'))
a, b = (np.array(d['embedding']) for d in mean['data'])
c = np.array(last['data'][0]['embedding'])
errs = [np.abs(a - want_mean).max(), np.abs(b - want_mean).max(), np.abs(c - want_last).max()]
print('max abs errors: text %.2e, ids %.2e, last %.2e; usage %s' % (*errs, mean['usage']))
ok = max(errs) < 2e-5 and mean['usage']['prompt_tokens'] == 2 * h.shape[0] and abs(np.linalg.norm(a) - 1) < 1e-6
ok = ok and [d['index'] for d in mean['data']] == [0, 1] and np.abs(want_mean - want_last).max() > 1e-3
sys.exit(0 if ok else 1)
PYEOF
then ok "embeddings = numpy's pooled final-norm hidden states (mean and last)"; else bad "embeddings differ from the reference"; fi
code=$(curl -s -H 'Content-Type: application/json' -o "$T/off" -w '%{http_code}' "$N/v1/embeddings" -d '{"input":"x"}')
[ "$code" = 501 ] && grep -q "embeddings" "$T/off" && ok "without --embeddings: 501" || bad "embeddings off: $code $(cat "$T/off")"
code=$(curl -s -H 'Content-Type: application/json' -o "$T/bad" -w '%{http_code}' "$E/v1/embeddings" -d '{"input":[[999999]]}')
[ "$code" = 400 ] && ok "a bad token id: 400" || bad "bad id: $code $(cat "$T/bad")"
code=$(curl -s -H 'Content-Type: application/json' -o "$T/bad" -w '%{http_code}' "$E/v1/embeddings" -d '{"input":[]}')
[ "$code" = 400 ] && ok "no input: 400" || bad "empty input: $code"
# an input whose bytes alone prove it longer than the context is refused before it is tokenized
/usr/bin/python3 -c 'import json; print(json.dumps({"input": ["short", "x" * 2000000]}))' > "$T/huge.json"
code=$(curl -s -H 'Content-Type: application/json' -o "$T/bad" -w '%{http_code}' "$E/v1/embeddings" --data-binary @"$T/huge.json")
[ "$code" = 400 ] && grep -q "input 1 (at least [0-9]* tokens) is too large" "$T/bad" && ok "a 2 MB input: 400 by its size" \
  || bad "2 MB input: $code $(head -c 300 "$T/bad")"
finish
