#!/usr/bin/env bash
# demo.sh BITSPARK: synthesize a tiny Bonsai-shaped model once (cached) and show it.
set -euo pipefail
bin=$1
cache=${BITSPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bitspark}
mkdir -p "$cache"
model=$cache/demo-tiny-q1_0.gguf
if [ ! -f "$model" ]; then
  "$bin" synth --preset tiny --type q1_0 -o "$model.tmp" && mv "$model.tmp" "$model"
fi
"$bin" inspect "$model"
