#!/usr/bin/env bash
# serve_bench.sh: aggregate generation speed of `bitspark serve` with 1 and 4 slots, with and
# without a drafter (auto depth), under C concurrent greedy requests of N tokens each.
#
#   tools/serve_bench.sh [-b BIN] [-m MODEL -md DRAFTER]... [-n N] [-c C] [-t THREADS] [-r REPS]
#
# Pairs default to the trained tiny pair in models/ and the fixtures' random pair (where
# drafting cannot pay). Each configuration runs REPS times (median printed); tokens/s counts
# the generated tokens of all requests over the wall time from the first send to the last
# answer. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bitspark; N=64; C=4; THREADS=2; REPS=3; models=(); drafters=()
while [ $# -gt 0 ]; do
  case $1 in
    -b) B=$2; shift 2;; -m) models+=("$2"); shift 2;; -md) drafters+=("$2"); shift 2;;
    -n) N=$2; shift 2;; -c) C=$2; shift 2;; -t) THREADS=$2; shift 2;; -r) REPS=$2; shift 2;;
    *) echo "serve_bench.sh: unknown option $1" >&2; exit 2;;
  esac
done
if [ ${#models[@]} -eq 0 ]; then
  models=(models/bonsai-tiny-q1_0.gguf ../shared/fixtures/tiny-q1_0.gguf)
  drafters=(models/bonsai-tiny-dspark.gguf ../shared/fixtures/tiny-dspark-f32.gguf)
fi
[ ${#models[@]} -eq ${#drafters[@]} ] || { echo "give one -md per -m" >&2; exit 2; }
T=$(mktemp -d); MAIN=$BASHPID
cleanup() { [ "$BASHPID" = "$MAIN" ] || return 0; kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"; }   # not in subshells
trap cleanup EXIT

start() {   # args...: a server on a free loopback port; sets URL and PID
  "$B" serve --host 127.0.0.1 --port 0 "$@" >"$T/server.log" 2>&1 &
  PID=$!; URL=""
  for _ in $(seq 1 600); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$T/server.log" | head -1)
    [ -n "$URL" ] && return 0
    kill -0 "$PID" 2>/dev/null || break; sleep 0.1
  done
  echo "server did not start: $(cat "$T/server.log")" >&2; exit 1
}

one_run() {   # C concurrent requests; prints tokens per second
  local t0 t1 pids=() i
  t0=$(date +%s.%N)
  for i in $(seq 1 "$C"); do
    curl -sf -H 'Content-Type: application/json' "$URL/v1/completions" -d "{\"prompt\":\"Request $i: once upon a time\",\"max_tokens\":$N,\"temperature\":0,\"ignore_eos\":true}" \
      >"$T/ans.$i" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  local tok=0
  for i in $(seq 1 "$C"); do tok=$((tok + $(sed -n 's/.*"completion_tokens":\([0-9]*\).*/\1/p' "$T/ans.$i"))); done
  awk -v t="$tok" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", t / (b - a) }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "uptime: $(uptime)"
printf '| %-32s | %5s | %-8s | %10s |\n' model slots drafter "tokens/s"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..34})" "------:" "----------" "-----------:"
for k in "${!models[@]}"; do
  for np in 1 4; do
    for d in none auto; do
      args=(-m "${models[$k]}" -np "$np" -t "$THREADS" --ctx 1024)
      [ "$d" = auto ] && args+=(-md "${drafters[$k]}" --draft-max auto)
      start "${args[@]}"
      one_run >/dev/null   # warm-up: auto depth measures its costs here
      r=$(for _ in $(seq 1 "$REPS"); do one_run; done | median)
      kill "$PID"; wait "$PID" 2>/dev/null || true
      printf '| %-32s | %5d | %-8s | %10s |\n' "$(basename "${models[$k]}")" "$np" "$d" "$r"
    done
  done
done
