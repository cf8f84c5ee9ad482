#!/usr/bin/env bash
# test_inspect.sh: `bitspark inspect` on every GGUF fixture (exit 0, text and --json), checking
# the reported tensor types against what each fixture is documented to hold and against the
# independent Python reader (tests/gguf_reader.py); also the drafter description, a safetensors
# checkpoint with config.json, and clean failures on bad input.
set -euo pipefail
: "${BITSPARK:?}" "${BS_FIXTURES:?}" "${BS_TMP:?}" "${BS_SRC:?}"
PY=/usr/bin/python3
tmp=$BS_TMP/test_inspect.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
fail=0

shopt -s nullglob
files=("$BS_FIXTURES"/*.gguf)
[ ${#files[@]} -ge 8 ] || { echo "expected the 8 GGUF fixtures in $BS_FIXTURES"; exit 1; }
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  "$BITSPARK" inspect "$f" > "$tmp/$name.txt" || { echo "FAIL: inspect $name exited $?"; fail=1; continue; }
  "$BITSPARK" inspect "$f" --json > "$tmp/$name.json" || { echo "FAIL: inspect --json $name"; fail=1; continue; }
  "$BITSPARK" inspect "$f" --json --no-mmap > "$tmp/$name.nommap.json" || { echo "FAIL: --no-mmap $name"; fail=1; }
  grep -q "^model: " "$tmp/$name.txt" && grep -q "^totals: " "$tmp/$name.txt" || { echo "FAIL: $name text report"; fail=1; }
done

# Expected types: matrices (2-D .weight tensors except the f32 conv1d) of each fixture, with
# exceptions by exact tensor name or ('.'-prefixed) name suffix.
$PY - "$tmp" "$BS_FIXTURES" "$BS_SRC/tests" <<'PYEOF' || fail=1
import json, os, sys
tmp, fixtures, testdir = sys.argv[1:4]
sys.path.insert(0, testdir)
from gguf_reader import GGUF

expect = {
    'tiny-f32': ('f32', {}),
    'tiny-q1_0': ('q1_0', {}),
    'tiny-q1_0-q6k': ('q1_0', {'output.weight': 'q6_k'}),
    'tiny-q2_0': ('q2_0', {'.ssm_alpha.weight': 'bf16', '.ssm_beta.weight': 'bf16'}),
    'tiny-q2_0-g64': ('q2_0_g64', {'.ssm_alpha.weight': 'bf16', '.ssm_beta.weight': 'bf16'}),
    'tiny-q4_1': ('q4_1', {}),
    'tiny-q8_0': ('q8_0', {}),
    'tiny-dspark-f32': ('f32', {}),
}
bad = 0
def fail(msg):
    global bad
    bad += 1
    print('FAIL:', msg)

for name, (main, special) in expect.items():
    path = os.path.join(tmp, name + '.json')
    if not os.path.exists(path):
        fail('%s: no --json output' % name); continue
    info = json.load(open(path))
    if json.load(open(os.path.join(tmp, name + '.nommap.json'))) != info:
        fail('%s: --no-mmap output differs' % name)
    tensors = {t['name']: t for t in info['tensors']}
    n_matrices = 0
    for t in info['tensors']:
        n = t['name']
        if len(t['shape']) < 2 or not n.endswith('.weight') or 'ssm_conv1d' in n:
            if t['type'] not in ('f32',):
                fail('%s: vector %s is %s, expected f32' % (name, n, t['type']))
            continue
        n_matrices += 1
        # keys starting with '.' are name suffixes, others exact names
        want = next((ty for k, ty in special.items() if (n.endswith(k) if k[0] == '.' else n == k)), main)
        if t['type'] != want:
            fail('%s: %s is %s, expected %s' % (name, n, t['type'], want))
    if n_matrices < 10:
        fail('%s: only %d matrices' % (name, n_matrices))
    # independent reader: same names, shapes, types, sizes, offsets
    g = GGUF(os.path.join(fixtures, name + '.gguf'))
    if set(g.tensors) != set(tensors):
        fail('%s: tensor names differ from gguf_reader.py' % name)
    for tn, ti in g.tensors.items():
        t = tensors.get(tn)
        if not t: continue
        if t['type'] != ti.fmt[0].lower() or t['shape'] != list(ti.ne) or t['bytes'] != ti.nbytes \
                or t['offset'] != ti.offset:
            fail('%s: %s: %s %s %d @%d vs reader %s %s %d @%d' % (name, tn, t['type'], t['shape'],
                 t['bytes'], t['offset'], ti.fmt[0], list(ti.ne), ti.nbytes, ti.offset))
    # totals: per-type sums add up, bits per weight is bytes*8/params
    tot = info['totals']
    if tot['tensors'] != len(tensors) or tot['bytes'] != sum(t['bytes'] for t in tensors.values()):
        fail('%s: totals do not add up' % name)
    if sum(v['tensors'] for v in tot['types'].values()) != tot['tensors']:
        fail('%s: per-type counts do not add up' % name)
    if abs(tot['bits_per_weight'] - tot['bytes'] * 8 / tot['params']) > 1e-6:
        fail('%s: bits per weight' % name)
    if info['metadata'].get('general.architecture') != g.meta['general.architecture']:
        fail('%s: architecture' % name)
    model = info['model']
    if name == 'tiny-dspark-f32':
        d = model['description']
        if model['kind'] != 'drafter' or model['target_layers'] != [1, 4, 6] or model['block_size'] != 4 \
                or not d.startswith('DSpark drafter') or 'taps [1,4,6]' not in d or 'block 4' not in d:
            fail('%s: drafter description %r' % (name, model))
    else:
        if model['kind'] != 'target' or model['layers'] != 8 or model['gdn_layers'] != 6 \
                or model['attention_layers'] != 2 or model['main_type'] != main:
            fail('%s: target description %r' % (name, model))
    # long arrays are summarized, not dumped
    toks = info['metadata'].get('tokenizer.ggml.tokens')
    if name != 'tiny-dspark-f32' and not (isinstance(toks, dict) and toks['count'] == 1024
                                          and toks['array_of'] == 'string' and len(toks['head']) <= 16):
        fail('%s: tokenizer.ggml.tokens not summarized: %r' % (name, type(toks)))
    # which Unicode normalization the tokenizer applies (no key in these files: the qwen35 rule)
    tok = info.get('tokenizer')
    want = None if name == 'tiny-dspark-f32' else {'model': 'gpt2', 'pre': 'qwen35', 'normalization': 'nfc',
                                                   'normalization_source': 'pre-tokenizer rule'}
    if tok != want:
        fail('%s: tokenizer %r' % (name, tok))
print('inspect json checks: %d failures' % bad)
sys.exit(1 if bad else 0)
PYEOF

# Descriptions in the text reports.
grep -q 'legacy Q2_0 (g128) + BF16 ssm_alpha/beta' "$tmp/tiny-q2_0.txt" || { echo "FAIL: tiny-q2_0 description"; fail=1; }
grep -q 'Q2_0 (g64)' "$tmp/tiny-q2_0-g64.txt" || { echo "FAIL: tiny-q2_0-g64 description"; fail=1; }
grep -q 'Q1_0 + Q6_K output' "$tmp/tiny-q1_0-q6k.txt" || { echo "FAIL: tiny-q1_0-q6k description"; fail=1; }
grep -q 'tokenizer.ggml.tokens *= \[1024 strings: ' "$tmp/tiny-f32.txt" || { echo "FAIL: array summary"; fail=1; }
grep -qx 'tokenizer: gpt2, pre-tokenizer qwen35, normalization nfc (pre-tokenizer rule)' "$tmp/tiny-f32.txt" ||
    { echo "FAIL: tokenizer normalization line"; fail=1; }

# A safetensors checkpoint with config.json (written by a tiny C-free path: Python).
mkdir -p "$tmp/hf"
$PY - "$tmp/hf" <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
hdr = {"__metadata__": {"format": "pt"},
       "model.embed_tokens.weight": {"dtype": "BF16", "shape": [16, 8], "data_offsets": [0, 256]},
       "model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [256, 288]}}
h = json.dumps(hdr).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(d + '/model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + bytes(288))
json.dump({"architectures": ["Qwen3_5ForConditionalGeneration"],
           "text_config": {"num_hidden_layers": 64}}, open(d + '/config.json', 'w'))
PYEOF
"$BITSPARK" inspect "$tmp/hf" --json > "$tmp/hf.json" || { echo "FAIL: inspect safetensors dir"; fail=1; }
$PY - "$tmp/hf.json" <<'PYEOF' || fail=1
import json, sys
info = json.load(open(sys.argv[1]))
t = {x['name']: x for x in info['tensors']}
ok = (info['format'] == 'safetensors' and t['model.embed_tokens.weight']['type'] == 'bf16'
      and t['model.embed_tokens.weight']['shape'] == [16, 8] and t['model.norm.weight']['type'] == 'f32'
      and info['metadata'] == {'format': 'pt'} and info['config']['text_config']['num_hidden_layers'] == 64
      and 'Qwen3_5ForConditionalGeneration' in info['model']['description']
      and '64 layers' in info['model']['description'] and info['totals']['params'] == 136)
print('safetensors inspect:', 'ok' if ok else 'FAIL %r' % info['model'])
sys.exit(0 if ok else 1)
PYEOF
"$BITSPARK" inspect "$tmp/hf/model.safetensors" > "$tmp/hf.txt" || { echo "FAIL: inspect .safetensors"; fail=1; }

# Bad input: non-zero exit and a one-line error naming the problem.
printf 'GGUF\001\000\000\000' > "$tmp/v1.gguf"
for bad in "$tmp/v1.gguf" "$tmp/missing.gguf"; do
  if "$BITSPARK" inspect "$bad" > /dev/null 2> "$tmp/err"; then echo "FAIL: inspect $bad succeeded"; fail=1; fi
  [ "$(wc -l < "$tmp/err")" -eq 1 ] || { echo "FAIL: error for $bad is not one line"; cat "$tmp/err"; fail=1; }
done
"$BITSPARK" inspect "$tmp/v1.gguf" > /dev/null 2> "$tmp/err" || true
grep -q 'v1.gguf: GGUF version 1 is unsupported' "$tmp/err" || { echo "FAIL: v1 message"; fail=1; }
if "$BITSPARK" inspect > /dev/null 2>&1; then echo "FAIL: inspect without FILE succeeded"; fail=1; fi
"$BITSPARK" help inspect | grep 'usage: bitspark inspect' >/dev/null || { echo "FAIL: help inspect"; fail=1; }

[ $fail -eq 0 ] && echo "test_inspect: ok" || echo "test_inspect: FAILED"
exit $fail
