#!/usr/bin/env bash
# bench_spec.sh BITSPARK [TARGET DRAFTER]: greedy `bitspark run` with and without the DSpark
# drafter (--draft-max 1..4 and auto) on a few prompts: checks the text is identical to plain
# greedy decoding and prints acceptance and speed (markdown table rows).
set -euo pipefail
bin=$1
target=${2:-models/bonsai-tiny-q1_0.gguf}
drafter=${3:-models/bonsai-tiny-dspark.gguf}
n=${N_PREDICT:-200}
reps=${REPS:-3}
prompts=("The meaning of life is" "To copy a file, use" "Q: Why did the chicken cross the road?
A:" "This program is free software; you can")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| draft-max | identical to plain greedy | acceptance | tokens / drafting round | tokens/s (median of $reps) | speed-up |"
echo "|---|---|---|---|---|---|"
base_tps=
for dm in none 1 2 3 4 auto; do
  same=yes; acc_n=0; acc_d=0; tps_all=(); tpr=()
  for i in "${!prompts[@]}"; do
    p=${prompts[$i]}
    for r in $(seq "$reps"); do
      if [ "$dm" = none ]; then
        "$bin" run -m "$target" -p "$p" -n "$n" --temp 0 -t 1 --ignore-eos > "$tmp/out" 2> "$tmp/err"
        cp "$tmp/out" "$tmp/plain$i"
      else
        "$bin" run -m "$target" -md "$drafter" --draft-max "$dm" -p "$p" -n "$n" --temp 0 -t 1 --ignore-eos > "$tmp/out" 2> "$tmp/err"
        cmp -s "$tmp/out" "$tmp/plain$i" || same=no
      fi
      tps_all+=("$(sed -n 's/.*eval time.*(\s*[0-9.]* ms per token,\s*\([0-9.]*\) tokens per second).*/\1/p' "$tmp/err" | tail -1)")
    done
    if [ "$dm" != none ]; then
      acc_d=$((acc_d + $(sed -n 's/.*n_drafted = \([0-9]*\).*/\1/p' "$tmp/err")))
      acc_n=$((acc_n + $(sed -n 's/.*n_accepted = \([0-9]*\).*/\1/p' "$tmp/err")))
      tpr+=("$(sed -n 's/.*mean accepted per drafting round = \([0-9.]*\).*/\1/p' "$tmp/err")")
    fi
  done
  tps=$(printf '%s\n' "${tps_all[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  if [ "$dm" = none ]; then
    base_tps=$tps
    echo "| no drafter | - | - | - | $tps | 1.00 |"
  else
    acc=$(awk -v a="$acc_n" -v d="$acc_d" 'BEGIN {printf "%.1f%% (%d/%d)", d ? 100*a/d : 0, a, d}')
    mtpr=$(printf '%s\n' "${tpr[@]}" | awk '{s+=$1} END {printf "%.2f", 1 + s/NR}')
    sp=$(awk -v a="$tps" -v b="$base_tps" 'BEGIN {printf "%.2f", a/b}')
    echo "| $dm | $same | $acc | $mtpr | $tps | $sp |"
  fi
done
