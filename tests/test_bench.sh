#!/bin/bash
# test_bench.sh: `bitspark bench` runs on a fixture model in every output format (md table with
# llama-bench's columns, csv header + rows, json array with samples), the --matmul kernel mode
# runs, and bad options fail cleanly.
set -u
B=${BITSPARK:?} F=${BS_FIXTURES:?}
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }

md=$("$B" bench -m "$F/tiny-q1_0.gguf" -p 16 -n 4 -r 2 -t 1 --verify 1,2 --no-membw 2>&1)
check "md header" 'grep -q "| model  *|  *size |  *params | backend  *| threads |  *test |  *t/s |" <<<"$md"'
check "md pp16 row" 'grep -qE "^\| qwen35 .* Q1_0 +\| .* MiB \| .* M \| CPU +\| +1 \| +pp16 \| +[0-9.]+ ± [0-9.]+ \|$" <<<"$md"'
check "md tg4 row" 'grep -qE "\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|$" <<<"$md"'
check "md verify line" 'grep -qE "^verify \(threads 1.*w=2 [0-9.]+ ms \([0-9.]+x\)" <<<"$md"'
check "md build footer" 'grep -q "^build: " <<<"$md"'
# --parallel: sessions decoding together (one pass per token of each); t/s counts all their tokens
par=$("$B" bench -m "$F/tiny-q1_0.gguf" -p 0 -n 4 -r 2 -t 1 --parallel 1,3 --no-membw 2>&1)
check "parallel rows" '[ "$(grep -cE "\| +tg4x[13] \| +[0-9.]+ ± [0-9.]+ \|$" <<<"$par")" = 2 ]'
check "parallel 0 refused" '! "$B" bench -m "$F/tiny-q1_0.gguf" --parallel 0 >/dev/null 2>&1'
check "parallel 65 refused" '! "$B" bench -m "$F/tiny-q1_0.gguf" --parallel 2,65 >/dev/null 2>&1'
# --sampled: a tg row whose tokens are drawn by the default chain
smp=$("$B" bench -m "$F/tiny-q1_0.gguf" -p 0 -n 4 -r 2 -t 1 --sampled --no-membw 2>&1)
check "sampled row" 'grep -qE "\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|$" <<<"$smp" && grep -qE "\| +tg4 sampled \| +[0-9.]+ ± [0-9.]+ \|$" <<<"$smp"'

# membw + int8 ceiling lines (the int8 line only where bitspark dispatches AVX-512: VNNI + VBMI)
# bandwidth probed before, between and after the 2 tg runs: 3 probes
roof=$("$B" bench -m "$F/tiny-q1_0.gguf" -p 0 -n 2 -r 2 -t 1 2>&1)
check "membw line" 'grep -qE "^membw: [0-9.]+ GB/s read \(1 threads; median of 3 probes around the tg runs, [0-9.]+-[0-9.]+\); decode roofline [0-9.]+ tok/s \([0-9.]+ GB/token of weights\); tg reached [0-9]+% " <<<"$roof"'
nomb=$("$B" bench -m "$F/tiny-q1_0.gguf" -p 4 -n 0 -r 1 -t 1 2>&1)
check "membw line without tg" 'grep -qE "^membw: [0-9.]+ GB/s read \(1 threads\); decode roofline [0-9.]+ tok/s \([0-9.]+ GB/token of weights\)$" <<<"$nomb"'
if grep -qw avx512_vnni /proc/cpuinfo && grep -qw avx512vbmi /proc/cpuinfo && [ "${BITSPARK_CPU:-}" != scalar ] && [ "${BITSPARK_CPU:-}" != avx2 ]; then
  check "int8 line" 'grep -qE "^int8: [1-9][0-9]* GMAC/s peak \(vpdpbusd, 1 threads\);.*ceiling [0-9.]+ tok/s" <<<"$roof"'
  amx=$(grep -q amx_int8 /proc/cpuinfo && echo "int8 tiles for Q1_0/Q2_0 prompts|refused|self-check failed" || echo "not available on this CPU")
  check "amx line" 'grep -qE "^amx: .*($amx)" <<<"$roof"'
fi

# machine-readable output on stdout; stderr names the device the model runs on
csv=$("$B" bench -m "$F/tiny-q2_0.gguf" -p 8 -n 2 -r 1 -t 1 -o csv 2>"$BS_TMP/bench_csv.err")
check "device line" 'grep -q "^device: CPU" "$BS_TMP/bench_csv.err"' 
check "csv header" 'head -1 <<<"$csv" | grep -q "^build_commit,build_number,cpu_info,.*,avg_ns,stddev_ns,avg_ts,stddev_ts$"'
check "csv rows" '[ "$(wc -l <<<"$csv")" -eq 3 ]'

json=$("$B" bench -m "$F/tiny-q8_0.gguf" -p 8 -n 2 -r 2 -t 1,2 -o json 2>/dev/null)
check "json" '/usr/bin/python3 -c "
import json, sys
d = json.loads(sys.argv[1])
assert len(d) == 4, d
for r in d:
    assert r[\"avg_ts\"] > 0 and len(r[\"samples_ts\"]) == 2 and r[\"n_threads\"] in (1, 2)
assert [r[\"n_prompt\"] for r in d] == [8, 0, 8, 0]
" "$json"'

mm=$("$B" bench --matmul --matmul-mb 8 -r 1 -t 1 --no-membw 2>&1)
check "matmul rows" '[ "$(grep -cE "^\| q1_0 +\| (native|x16) +\| [a-z0-9 ]+ \| +(5120|17408) " <<<"$mm")" -ge 10 ]'
# --matmul-rows: prompt-sized products, with the multiply-add rate in the last column
mp=$("$B" bench --matmul --matmul-mb 8 --matmul-rows 1,40 -r 1 -t 1 --no-membw 2>&1)
check "matmul-rows 40" '[ "$(grep -cE "^\| q1_0 +\| [a-z0-9]+ +\| [a-z0-9 ]+ \| +(5120|17408) \| +(5120|17408) \| +1 \| +40 \| .* \| +[0-9]+\.[0-9] \|$" <<<"$mp")" -ge 2 ]'
check "matmul-rows 0 refused" '! "$B" bench --matmul --matmul-rows 0 >/dev/null 2>&1'
check "matmul-rows 5000 refused" '! "$B" bench --matmul --matmul-rows 1,5000 >/dev/null 2>&1'

# --mmproj: the vision encoder's time per image on the fixture projector; the GFLOP/s column is
# the products' FLOP count over the time, so it must match ms/image and the note's GFLOP figure
vb=$("$B" bench --mmproj "$F/vision/tiny-mmproj-f32.gguf" --image-size 96x64 -r 2 -t 1,2 2>&1)
check "mmproj rows" '[ "$(grep -cE "^\| tiny-mmproj-f32.gguf +\| .* MiB \| .* M \| CPU +\| +[12] \| img96x64 +\| +[0-9.]+ ± [0-9.]+ \| +[0-9.]+ \| +[0-9.]+ \|$" <<<"$vb")" = 2 ]'
check "mmproj note: 6 tokens, flops consistent" 'python3 -c "
import re,sys
t=sys.argv[1]; g=float(re.search(r\"\\((\\S+) GFLOP per image\\)\", t).group(1))
assert \"6 output tokens of width 256\" in t, t
for ms, tps, gf in re.findall(r\"img96x64 +\\| +([0-9.]+) ± [0-9.]+ \\| +([0-9.]+) \\| +([0-9.]+) \\|\", t):
    ms, tps, gf = float(ms), float(tps), float(gf)
    assert abs(tps - 6 / (ms / 1e3)) <= 0.05 * tps + 0.1, (ms, tps)
    assert abs(gf - g / (ms / 1e3)) <= 0.05 * gf + 0.1, (ms, gf)
" "$vb"'
check "mmproj bad size refused" '! "$B" bench --mmproj "$F/vision/tiny-mmproj-f32.gguf" --image-size 0x3 >/dev/null 2>&1'
check "mmproj text model refused" '! "$B" bench --mmproj "$F/tiny-q1_0.gguf" >/dev/null 2>&1'
check "bad -o" '! "$B" bench -m "$F/tiny-q1_0.gguf" -o xml >/dev/null 2>&1'
check "no model" '! "$B" bench >/dev/null 2>&1'
check "bad -t" '! "$B" bench -m "$F/tiny-q1_0.gguf" -t 0 >/dev/null 2>&1'
exit $fail
