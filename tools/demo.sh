#!/usr/bin/env bash
# demo.sh BITSPARK: synthesize a tiny Bonsai-shaped model once (cached), then generate from it
# with `bitspark run`. The weights are random, so the text is noise, but every step is the real
# one: GGUF loading, Q1_0 matmuls, Gated DeltaNet + attention, BPE tokenizer, sampler chain.
set -euo pipefail
bin=$1
cache=${BITSPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bitspark}
mkdir -p "$cache"
model=$cache/demo-tiny-q1_0.gguf
if [ ! -f "$model" ]; then
  echo "synthesizing a tiny qwen35 model (Q1_0, random weights): $model" >&2
  if ! log=$("$bin" synth --preset tiny --type q1_0 -o "$model.tmp" 2>&1); then
    echo "$log" >&2
    exit 1
  fi
  mv "$model.tmp" "$model"
fi
"$bin" inspect "$model" | sed -n '3p'
prompt="Once upon a time"
echo "\$ bitspark run -m $model -p \"$prompt\" -n 48 --seed 1 -t 1"
# one thread: a model this small gains nothing from more
"$bin" run -m "$model" -p "$prompt" -n 48 --seed 1 -t 1
echo
