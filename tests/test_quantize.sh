#!/usr/bin/env bash
# test_quantize.sh: `bitspark quantize` against llama.cpp's files (fixtures):
#  - tiny-f32 -> q4_1 / q8_0 gives exactly the tensors (types, shapes, bytes: llama.cpp left the
#    norms, conv, ssm_a, ssm_dt in F32 and quantized every matrix incl. token_embd and output)
#    and metadata (general.file_type 3 / 7, quantization_version 2) of tiny-q4_1 / tiny-q8_0;
#  - the QAT files round-trip: tiny-q1_0 -> f32 -> q1_0, tiny-q2_0 -> f32 -> q2_0 (ssm_alpha/beta
#    kept bf16 by --tensor-type), tiny-q2_0-g64 -> f32 -> q2_0 --q2-group 64 reproduce the bytes;
#  - ptq1_0 (PrismML's PTQ1_0): tiny-q2_0 -> ptq1_0 is lossless and tiny-f32 -> ptq1_0 is read
#    by the independent Python reader (tests/gguf_reader.py) exactly as the engine decodes it
#    (ptq1_0 -> f32); the ptq1_0 and pq2_0 copies of tiny-q2_0 give the same logits;
#  - requantizing needs --allow-requantize; same-type tensors are copied; rows that don't fit a
#    block fall back with a note; --output-type / --embd-type / bad arguments.
source "$(dirname "$0")/cli_lib.sh" quantize
F=${BS_FIXTURES:?} S=${BS_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
PY=/usr/bin/python3
same() { $PY "$S/tests/gguf_same.py" "$@"; }

"$B" quantize "$F/tiny-f32.gguf" "$T/q4_1.gguf" q4_1 2>/dev/null && same "$T/q4_1.gguf" "$F/tiny-q4_1.gguf" --meta \
  && ok "f32 -> q4_1 = llama.cpp's tiny-q4_1" || bad "f32 -> q4_1"
"$B" quantize "$F/tiny-f32.gguf" "$T/q8_0.gguf" Q8_0 -t 2 2>/dev/null && same "$T/q8_0.gguf" "$F/tiny-q8_0.gguf" --meta \
  && ok "f32 -> q8_0 = llama.cpp's tiny-q8_0 (2 threads)" || bad "f32 -> q8_0"

"$B" quantize "$F/tiny-q1_0.gguf" "$T/a.gguf" f32 2>"$T/err" && bad "requantize without the flag succeeded"
grep -q "needs --allow-requantize" "$T/err" && [ ! -e "$T/a.gguf" ] && ok "requantize refused: $(cat "$T/err")" \
  || bad "requantize message / partial file"
"$B" quantize "$F/tiny-q1_0.gguf" "$T/a.gguf" f32 --allow-requantize 2>/dev/null && \
"$B" quantize "$T/a.gguf" "$T/b.gguf" q1_0 2>/dev/null && same "$T/b.gguf" "$F/tiny-q1_0.gguf" --meta \
  && ok "tiny-q1_0 -> f32 -> q1_0 round trip" || bad "q1_0 round trip"
"$B" quantize "$F/tiny-q2_0.gguf" "$T/a.gguf" f32 --allow-requantize 2>/dev/null && \
"$B" quantize "$T/a.gguf" "$T/b.gguf" q2_0 --tensor-type 'ssm_(alpha|beta)=bf16' 2>/dev/null && \
  same "$T/b.gguf" "$F/tiny-q2_0.gguf" --meta && ok "tiny-q2_0 -> f32 -> q2_0 round trip" || bad "q2_0 round trip"
"$B" quantize "$F/tiny-q2_0-g64.gguf" "$T/a.gguf" f32 --allow-requantize 2>/dev/null && \
"$B" quantize "$T/a.gguf" "$T/b.gguf" q2_0 --q2-group 64 --tensor-type 'ssm_(alpha|beta)=bf16' 2>/dev/null && \
  same "$T/b.gguf" "$F/tiny-q2_0-g64.gguf" --meta && ok "tiny-q2_0-g64 -> f32 -> q2_0 --q2-group 64 round trip" \
  || bad "q2_0_g64 round trip"
# ptq1_0: every PTQ1_0 tensor read by gguf_reader.py = the engine's decoding (-> f32); from the
# ternary tiny-q2_0 also = the Q2_0 source's values (ssm_alpha/beta stay bf16; the 64-wide rows of
# tiny-f32 would fall back to q4_0, which the reader does not know: q8_0 for them)
ptq_same() {  # SRC PTQ F32 [lossless]
  $PY - "$S/tests" "$@" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from gguf_reader import GGUF
src, ptq, f32 = (GGUF(p) for p in sys.argv[2:5])
lossless = len(sys.argv) > 5
n = 0
for name, t in ptq.tensors.items():
    if t.fmt[0] != 'PTQ1_0':
        continue
    n += 1
    v = ptq.get(name)
    assert f32.type_name(name) == 'F32' and np.array_equal(v, f32.get(name)), name + ': read unlike the engine'
    assert not lossless or np.array_equal(v, src.get(name)), name + ': ' + src.type_name(name) + ' values changed'
    assert (v > 0).any() and (v < 0).any(), name + ': not ternary'
assert n >= 10, 'only %d ptq1_0 tensors' % n
PYEOF
}
"$B" quantize "$F/tiny-q2_0.gguf" "$T/p.gguf" ptq1_0 --allow-requantize --tensor-type 'ssm_(alpha|beta)=bf16' 2>/dev/null \
  && "$B" quantize "$T/p.gguf" "$T/pf.gguf" f32 --allow-requantize 2>/dev/null \
  && ptq_same "$F/tiny-q2_0.gguf" "$T/p.gguf" "$T/pf.gguf" lossless \
  && ok "tiny-q2_0 -> ptq1_0: lossless, read by gguf_reader.py as the engine decodes it" || bad "q2_0 -> ptq1_0"
# the same trits and scales in PTQ1_0 and PQ2_0 give the same logits (their dots are bit-identical)
"$B" quantize "$F/tiny-q2_0.gguf" "$T/pq.gguf" pq2_0 --allow-requantize --tensor-type 'ssm_(alpha|beta)=bf16' 2>/dev/null \
  && "$B" logits -m "$T/p.gguf" --tokens 1,2,3,4,5,6 --batch 3 -t 2 -o "$T/p.f32" 2>/dev/null \
  && "$B" logits -m "$T/pq.gguf" --tokens 1,2,3,4,5,6 --batch 3 -t 2 -o "$T/pq.f32" 2>/dev/null \
  && [ -s "$T/p.f32" ] && cmp -s "$T/p.f32" "$T/pq.f32" && ok "ptq1_0 and pq2_0 copies of tiny-q2_0: the same logits" \
  || bad "ptq1_0 vs pq2_0 logits"
"$B" quantize "$F/tiny-f32.gguf" "$T/p.gguf" ptq1_0 --tensor-type '(ssm_out|ffn_down)=q8_0' 2>/dev/null \
  && "$B" quantize "$T/p.gguf" "$T/pf.gguf" f32 --allow-requantize 2>/dev/null \
  && ptq_same "$F/tiny-f32.gguf" "$T/p.gguf" "$T/pf.gguf" \
  && "$B" inspect "$T/p.gguf" | grep -q '^model: .*PTQ1_0 (g128)' \
  && ok "tiny-f32 -> ptq1_0: read by gguf_reader.py as the engine decodes it; inspect names it" || bad "f32 -> ptq1_0"
# same type: copied as is; direct requantization between formats
"$B" quantize "$F/tiny-q1_0.gguf" "$T/c.gguf" q1_0 2>/dev/null && same "$T/c.gguf" "$F/tiny-q1_0.gguf" \
  && ok "q1_0 -> q1_0 copies" || bad "same-type copy"
"$B" quantize "$F/tiny-q1_0.gguf" "$T/c.gguf" pq2_0 --allow-requantize --output-type q8_0 --embd-type bf16 2>/dev/null \
  && "$B" inspect --json "$T/c.gguf" > "$T/c.json" && $PY - "$T/c.json" <<'PYEOF' && ok "q1_0 -> pq2_0 with --output-type q8_0 --embd-type bf16" || bad "output/embd types"
import json, sys
j = json.load(open(sys.argv[1]))
ts = {t['name']: t['type'] for t in j['tensors']}
m = {k['key'] if isinstance(k, dict) else k: k for k in j.get('metadata', [])}
assert ts['output.weight'] == 'q8_0' and ts['token_embd.weight'] == 'bf16', ts
assert ts['blk.0.ffn_up.weight'] == 'pq2_0' and ts['blk.0.ssm_a'] == 'f32' and ts['blk.0.ssm_conv1d.weight'] == 'f32'
PYEOF
# q6_k needs rows of 256: ssm_out (64 wide) falls back to q8_0 with a note (only the ssm_out
# tensors are asked for q6_k, which keeps this fast under ASan)
"$B" quantize "$F/tiny-f32.gguf" "$T/d.gguf" f32 --tensor-type 'ssm_out=q6_k' --tensor-type 'blk\.3\.ffn_up=q6_k' 2>"$T/err" \
  && "$B" inspect --json "$T/d.gguf" | grep -q '"q6_k"' \
  && grep -q "blk.0.ssm_out.weight: rows of 64 .* using q8_0" "$T/err" && grep -q "blk.6.ssm_out.weight: rows of 64 .* using q8_0" "$T/err" \
  && [ "$(grep -c '^note:' "$T/err")" = 6 ] && ok "q6_k fallback notes" || bad "q6_k fallback: $(cat "$T/err")"
for args in "x.gguf" "$F/tiny-f32.gguf $T/e.gguf q9_9" "$F/tiny-f32.gguf $T/e.gguf q4_1 --tensor-type (=q4_1" \
            "$F/tiny-f32.gguf $T/e.gguf q4_1 --q2-group 32" "/nonexistent.gguf $T/e.gguf q4_1"; do
  # shellcheck disable=SC2086
  "$B" quantize $args >/dev/null 2>"$T/err"; rc=$?
  [ $rc = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ ! -e "$T/e.gguf" ] && ok "rejects: $(cat "$T/err")" || bad "bad args '$args' rc=$rc"
done
exit $fail
