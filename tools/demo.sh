#!/usr/bin/env bash
# demo.sh BITSPARK: generate with `bitspark run` from the trained tiny Bonsai in models/ (a 1-bit
# qwen35 of 4M parameters trained by train/run_all.sh, so its text reads as English), first
# plainly, then with its DSpark drafter. Without models/ (or with BITSPARK_DEMO_SYNTH=1) it
# synthesizes a tiny Bonsai-shaped model with random weights once (cached) instead: the text is
# noise, but every step is the real one (GGUF loading, Q1_0 matmuls, Gated DeltaNet + attention,
# BPE tokenizer, sampler chain).
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/models/bonsai-tiny-q1_0.gguf
drafter=$root/models/bonsai-tiny-dspark.gguf
if [ ! -f "$model" ] || [ "${BITSPARK_DEMO_SYNTH:-0}" = 1 ]; then
  cache=${BITSPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bitspark}
  mkdir -p "$cache"
  model=$cache/demo-tiny-q1_0.gguf
  drafter=
  if [ ! -f "$model" ]; then
    echo "synthesizing a tiny qwen35 model (Q1_0, random weights): $model" >&2
    if ! log=$("$bin" synth --preset tiny --type q1_0 -o "$model.tmp" 2>&1); then
      echo "$log" >&2
      exit 1
    fi
    mv "$model.tmp" "$model"
  fi
fi
"$bin" inspect "$model" | sed -n '3p'
prompt="The meaning of life is"
echo "\$ bitspark run -m $model -p \"$prompt\" -n 48 --seed 1 -t 1"
# one thread: a model this small gains nothing from more
"$bin" run -m "$model" -p "$prompt" -n 48 --seed 1 -t 1
echo
if [ -n "$drafter" ] && [ -f "$drafter" ]; then
  # a fixed depth: auto would park this drafter (a drafter block costs about as much as a step
  # of a 4M-parameter target; next to Bonsai-27B it costs a fraction) and show no drafting
  echo "# with the DSpark drafter, 3 drafts per round (auto parks it at this size: the tiny"
  echo "# drafter costs about as much as its target); at --temp 0 the text is plain greedy's"
  echo "\$ bitspark run -m $model -md $drafter -p \"$prompt\" -n 48 --temp 0 -t 1 --draft-max 3"
  "$bin" run -m "$model" -md "$drafter" -p "$prompt" -n 48 --temp 0 -t 1 --draft-max 3
  echo
fi
