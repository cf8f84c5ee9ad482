#!/usr/bin/env bash
# test_synth.sh: `bitspark synth` writes the tiny presets in every weight type with the fixtures'
# tables and keys, the same logical weights in every type, a sane model (float64 reference
# forward), deterministic bytes; the 27B and drafter tables are checked through --dry-run
# (the writer's own plan) against tables written from the reference notes; bad shapes fail
# with a clear message. Checks in tests/synth_check.py (independent numpy GGUF reader).
set -euo pipefail
bin=${BITSPARK:?BITSPARK not set}
src=${BS_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
py=/usr/bin/python3
d=${BS_TMP:-/tmp}/synth.$$
mkdir -p "$d"
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for t in f32 q1_0 q2_0 q2_0_g64 q4_1 q8_0 bf16 f16; do
  "$bin" synth --preset tiny --type "$t" -o "$d/tiny-$t.gguf"
done
"$bin" synth --preset tiny --type f32 --values ternary -o "$d/tiny-f32-ternary.gguf"
"$bin" synth --preset tiny --type q2_0 --ssm-ab-type bf16 -o "$d/tiny-q2_0-abbf16.gguf"
"$bin" synth --preset tiny --type q1_0 --n-layer 4 --n-embd 128 --n-ff 384 --n-head 4 --n-head-kv 2 \
  --head-dim 32 --rope-dim 16 --ssm-k-heads 1 --ssm-v-heads 2 --ssm-head-dim 64 --conv-kernel 3 \
  --n-vocab 512 --attn-interval 2 -o "$d/tiny-small.gguf"
"$bin" synth --preset drafter-tiny -o "$d/tiny-drafter.gguf"
"$bin" synth --preset drafter-tiny --drafter-type q4_1 -o "$d/tiny-drafter-q4_1.gguf"

# deterministic: same seed, same bytes; another seed, other bytes
"$bin" synth --preset tiny --type q1_0 -o "$d/again.gguf"
cmp -s "$d/again.gguf" "$d/tiny-q1_0.gguf" || fail "same seed gave different files"
"$bin" synth --preset tiny --type q1_0 --seed 7 -o "$d/seed7.gguf"
cmp -s "$d/seed7.gguf" "$d/tiny-q1_0.gguf" && fail "--seed has no effect"

$py "$src/tests/synth_check.py" tiny "$d"

# --dry-run prints exactly what the writer writes
"$bin" synth --preset tiny --type q2_0_g64 --dry-run > "$d/tiny.dry"
$py "$src/tests/synth_check.py" dryfile "$d/tiny.dry" "$d/tiny-q2_0_g64.gguf"
"$bin" synth --preset drafter-tiny --drafter-type q4_1 --dry-run > "$d/drafter.dry"
$py "$src/tests/synth_check.py" dryfile "$d/drafter.dry" "$d/tiny-drafter-q4_1.gguf"
# and bitspark's own reader (inspect --json) sees the same tables
"$bin" inspect --json "$d/tiny-q2_0_g64.gguf" > "$d/tiny.json"
$py "$src/tests/synth_check.py" inspect "$d/tiny.dry" "$d/tiny.json" target
"$bin" inspect --json "$d/tiny-drafter-q4_1.gguf" > "$d/drafter.json"
$py "$src/tests/synth_check.py" inspect "$d/drafter.dry" "$d/drafter.json" drafter
for p in bonsai-27b ternary-bonsai-27b drafter-bonsai-27b drafter-ternary-bonsai-27b; do
  "$bin" synth --preset "$p" --dry-run > "$d/$p.dry"
  $py "$src/tests/synth_check.py" dry "$p" "$d/$p.dry"
done
"$bin" synth --preset drafter-bonsai-27b --drafter-type bf16 --dry-run > "$d/bf16.dry"
$py "$src/tests/synth_check.py" dry drafter-bonsai-27b-bf16 "$d/bf16.dry"

# clear errors, no output file left behind
expect_error() {   # expect_error PATTERN ARGS...
  local pat=$1; shift
  if "$bin" synth "$@" -o "$d/bad.gguf" 2> "$d/err"; then fail "synth $* should fail"; fi
  grep -q -- "$pat" "$d/err" || fail "synth $*: message '$(cat "$d/err")' lacks '$pat'"
  [ ! -e "$d/bad.gguf" ] || fail "synth $* left a file behind"
}
expect_error "multiple of 128 elements, but output.weight has rows of 100" --preset tiny --type q1_0 --n-embd 100 --n-head 1 --n-head-kv 1 --head-dim 100
expect_error "multiple of 256 elements, but blk.0.ssm_out.weight has rows of 384" --preset tiny --type q6_k
expect_error "q1_0 cannot hold ternary" --preset tiny --type q1_0 --values ternary
expect_error "unknown preset" --preset nope
expect_error "unknown type 'q9'" --type q9
expect_error "not a multiple of n_head_kv" --n-head 3
expect_error "too small" --n-vocab 200
expect_error "out of range" --n-layer 0
expect_error "unknown option" --bogus 1
"$bin" help synth > "$d/help"
for opt in --dry-run --preset --type --drafter-type --values --seed --n-layer --ssm-v-heads --taps --mask-id; do
  grep -q -- "$opt" "$d/help" || fail "help synth does not document $opt"
done
echo "test_synth: ok"
