#!/usr/bin/env bash
# serve_bench.sh: aggregate generation speed of `bitspark serve` with 1 and 4 slots, with and
# without a drafter (auto depth), under C concurrent greedy requests of N tokens each.
#
#   tools/serve_bench.sh [-b BIN] [-m MODEL -md DRAFTER]... [-n N] [-c C] [-t THREADS] [-r REPS]
#
# Pairs default to the trained tiny pair in models/ and the fixtures' random pair (where
# drafting cannot pay). tokens/s counts the generated tokens of all requests over the wall time
# from the first send to the last answer. Loopback only.
#
# The four servers of a pair (1 and 4 slots, without and with the drafter) run side by side and
# take turns: each repetition sends one request set to each, in an order that rotates, so a
# load change on the host hits every configuration alike (run one after the other, a shared
# host's drift swung tiny-model figures by 30%). The table has each configuration's median and
# the median of the per-turn ratios (in brackets their quartiles: how far one turn can be off).
# Where four copies of the target would not fit in half the free memory (a 27B), the servers run
# one at a time instead (SERVE_BENCH_ONE=1 forces that).
# SERVE_BENCH_RAW=FILE appends every turn's four figures to FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bitspark; N=64; C=4; THREADS=2; REPS=5; models=(); drafters=()
while [ $# -gt 0 ]; do
  case $1 in
    -b) B=$2; shift 2;; -m) models+=("$2"); shift 2;; -md) drafters+=("$2"); shift 2;;
    -n) N=$2; shift 2;; -c) C=$2; shift 2;; -t) THREADS=$2; shift 2;; -r) REPS=$2; shift 2;;
    *) echo "serve_bench.sh: unknown option $1" >&2; exit 2;;
  esac
done
if [ ${#models[@]} -eq 0 ]; then
  models=(models/bonsai-tiny-q1_0.gguf tests/fixtures/tiny-q1_0.gguf)
  drafters=(models/bonsai-tiny-dspark.gguf tests/fixtures/tiny-dspark-f32.gguf)
fi
[ ${#models[@]} -eq ${#drafters[@]} ] || { echo "give one -md per -m" >&2; exit 2; }
T=$(mktemp -d); MAIN=$BASHPID
cleanup() { [ "$BASHPID" = "$MAIN" ] || return 0; kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"; }   # not in subshells
trap cleanup EXIT

CONFIGS=("1 none" "1 auto" "4 none" "4 auto")
URLS=(); PIDS=()

start() {   # i args...: server i on a free loopback port; sets URLS[i] and PIDS[i]
  local i=$1 url=""; shift
  "$B" serve --host 127.0.0.1 --port 0 "$@" >"$T/server.$i.log" 2>&1 &
  PIDS[$i]=$!
  for _ in $(seq 1 1200); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$T/server.$i.log" | head -1)
    [ -n "$url" ] && { URLS[$i]=$url; return 0; }
    kill -0 "${PIDS[$i]}" 2>/dev/null || break; sleep 0.1
  done
  echo "server did not start: $(cat "$T/server.$i.log")" >&2; exit 1
}

one_run() {   # url: C concurrent requests from one client process; prints tokens per second
  local t0 t1 i tok=0 args=()
  for i in $(seq 1 "$C"); do
    [ "$i" -gt 1 ] && args+=(--next)
    args+=(-sf -H 'Content-Type: application/json' "$1/v1/completions" -o "$T/ans.$i"
           -d "{\"prompt\":\"Request $i: once upon a time\",\"max_tokens\":$N,\"temperature\":0,\"ignore_eos\":true}")
  done
  t0=$(date +%s.%N)
  curl -Z --parallel-immediate --parallel-max "$C" "${args[@]}" 2>/dev/null
  t1=$(date +%s.%N)
  for i in $(seq 1 "$C"); do tok=$((tok + $(sed -n 's/.*"completion_tokens":\([0-9]*\).*/\1/p' "$T/ans.$i"))); done
  awk -v t="$tok" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", t / (b - a) }'
}

# stdin: one line per repetition, the 4 configurations' tokens/s; out: the table's rows
summarize() {
  awk -v model="$1" -v paired="$2" '
    function sort(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    }
    function q(a, n, f,   x) { x = 1 + f * (n - 1); return a[int(x)] + (x - int(x)) * (a[int(x) + (x > int(x))] - a[int(x)]) }
    function median(a, n) { sort(a, n); return q(a, n, 0.5) }
    function ratio(c, d, n,   r) {   # median of the per-turn ratios, with their quartiles
      if (!paired) return sprintf("%.3fx (medians)", med[c] / med[d])
      for (r = 1; r <= n; r++) x[r] = v[c, r] / v[d, r]
      sort(x, n)
      return sprintf("%.3fx (%.2f-%.2f)", q(x, n, 0.5), q(x, n, 0.25), q(x, n, 0.75))
    }
    { for (c = 1; c <= 4; c++) v[c, NR] = $c }
    END {
      n = NR
      for (c = 1; c <= 4; c++) { for (r = 1; r <= n; r++) y[r] = v[c, r]; med[c] = median(y, n) }
      printf "| %-28s | %5d | %10.2f | %10.2f | %-20s | %-20s | %-20s |\n", model, 1, med[1], med[2], ratio(2, 1, n), "", ""
      printf "| %-28s | %5d | %10.2f | %10.2f | %-20s | %-20s | %-20s |\n", model, 4, med[3], med[4], ratio(4, 3, n),
             ratio(3, 1, n), ratio(4, 2, n)
    }'
}

echo "uptime: $(uptime)"
echo "C=$C concurrent requests of N=$N tokens, $THREADS threads, median of $REPS turns"
printf '| %-28s | %5s | %10s | %10s | %-20s | %-20s | %-20s |\n' model slots "no drafter" "auto" "auto / no drafter" \
  "4 slots / 1" "4 slots / 1, auto"
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..30})" "------:" "-----------:" "-----------:" \
  "$(printf -- '-%.0s' {1..22})" "$(printf -- '-%.0s' {1..22})" "$(printf -- '-%.0s' {1..22})"
# servers side by side where four copies of the target fit in half the free memory; else one
# at a time (two 27B servers side by side ran 20% slower than one alone: their repacked copies
# and the page cache crowd memory)
side_by_side() {
  local avail size
  avail=$(awk '/^MemAvailable:/ { printf "%d", $2 / 1024 }' /proc/meminfo 2>/dev/null || echo 0)   # MiB
  size=$(( $(stat -c %s "$1") >> 20 ))
  if [ "${SERVE_BENCH_ONE:-}" = 1 ] || [ "$((4 * size))" -gt "$((avail / 2))" ]; then echo "0|1|2|3"; else echo "0 1 2 3"; fi
}

for k in "${!models[@]}"; do
  IFS='|' read -r -a groups <<<"$(side_by_side "${models[$k]}")"
  for g in "${groups[@]}"; do
    read -r -a ids <<<"$g"
    for i in "${ids[@]}"; do
      read -r np d <<<"${CONFIGS[$i]}"
      args=(-m "${models[$k]}" -np "$np" -t "$THREADS" --ctx $((N + 1024)))
      [ "$d" = auto ] && args+=(-md "${drafters[$k]}" --draft-max auto)
      start "$i" "${args[@]}"
      : >"$T/col.$i"
    done
    for i in "${ids[@]}"; do one_run "${URLS[$i]}" >/dev/null; done   # warm-up: auto depth measures its costs
    for r in $(seq 1 "$REPS"); do   # turns: every server once, in an order that rotates
      for j in "${!ids[@]}"; do i=${ids[$(( (j + r) % ${#ids[@]} ))]}; one_run "${URLS[$i]}" >>"$T/col.$i"; done
    done
    for i in "${ids[@]}"; do kill "${PIDS[$i]}"; wait "${PIDS[$i]}" 2>/dev/null || true; done
  done
  [ ${#groups[@]} -gt 1 ] && echo "(${models[$k]}: one server at a time: ratios of the medians)"
  paste -d ' ' "$T/col.0" "$T/col.1" "$T/col.2" "$T/col.3" | tee -a "${SERVE_BENCH_RAW:-/dev/null}" |
    summarize "$(basename "${models[$k]}")" "$(( ${#groups[@]} == 1 ))"
done
