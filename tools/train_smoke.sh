#!/usr/bin/env bash
# train_smoke.sh BITSPARK: the training chain of train/ with a few steps of everything
# (SMOKE=1 train/run_all.sh: corpus and tokenizer from Debian packages, 1-bit and ternary QAT,
# export, drafter, antidoom mining + FTPO LoRA, all written to train/out-smoke/), then checks
# that bitspark loads what it wrote: the targets and drafter are recognized by `inspect`, the
# Q1_0 target generates with and without its drafter and with the LoRA, identically greedy
# with and without the drafter. It checks that the scripts run end to end, not what the
# models learn (a few steps learn nothing). Exit status 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build/bitspark}")
out=train/out-smoke/models
fail=0
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }

t0=$(date +%s)
if SMOKE=1 train/run_all.sh "$bin" >train/smoke.log 2>&1; then
  ok "SMOKE=1 train/run_all.sh ($(( $(date +%s) - t0 )) s)"
else
  bad "SMOKE=1 train/run_all.sh failed; its last lines:"; tail -30 train/smoke.log; exit 1
fi
for f in bonsai-tiny-q1_0.gguf bonsai-tiny-q2_0.gguf bonsai-tiny-dspark.gguf bonsai-tiny-dspark/config.json; do
  [ -s "$out/$f" ] && ok "wrote $f" || bad "missing $out/$f"
done
lora=$(ls train/out-smoke/antidoom/*lora*.gguf "$out"/*lora*.gguf 2>/dev/null | head -1)
[ -n "$lora" ] && ok "wrote the LoRA ($lora)" || bad "no LoRA adapter written"
"$bin" inspect "$out/bonsai-tiny-q1_0.gguf" 2>&1 | grep "qwen35 target" >/dev/null && ok "inspect: Q1_0 target" || bad "inspect Q1_0 target"
"$bin" inspect "$out/bonsai-tiny-q2_0.gguf" 2>&1 | grep "qwen35 target" >/dev/null && ok "inspect: Q2_0 target" || bad "inspect Q2_0 target"
"$bin" inspect "$out/bonsai-tiny-dspark.gguf" 2>&1 | grep "DSpark drafter" >/dev/null && ok "inspect: drafter" || bad "inspect drafter"
gen=("$bin" run -m "$out/bonsai-tiny-q1_0.gguf" -p "The meaning of life is" -n 24 --temp 0 -t 1 --ignore-eos)
t=train/out-smoke   # an untrained model's text may hold any byte: compared as files
"${gen[@]}" >$t/plain.txt 2>/dev/null && ok "run" || bad "run failed"
"${gen[@]}" -md "$out/bonsai-tiny-dspark.gguf" --draft-max 2 >$t/spec.txt 2>/dev/null && ok "run -md" || bad "run -md failed"
cmp -s $t/plain.txt $t/spec.txt && ok "greedy text identical with the drafter" || bad "greedy text differs with the drafter"
"${gen[@]}" -md "$out/bonsai-tiny-dspark" --draft-max 2 >$t/spec_st.txt 2>/dev/null && ok "run -md (safetensors)" ||
  bad "run -md safetensors failed"
cmp -s $t/plain.txt $t/spec_st.txt && ok "greedy text identical with the safetensors drafter" ||
  bad "safetensors drafter: text differs"
if [ -n "$lora" ]; then
  "${gen[@]}" --lora "$lora" >/dev/null 2>&1 && ok "run --lora" || bad "run --lora failed"
fi
exit $fail
