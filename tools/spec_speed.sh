#!/usr/bin/env bash
# spec_speed.sh BITSPARK TARGET DRAFTER [REPS] [THREADS] [N] [DEPTHS...]: tokens/s of
# `bitspark run --temp 0` without and with the drafter, runs alternating (plain, then each depth)
# REPS times so load changes hit every configuration alike. Prints per depth the median and best
# tokens/s, the ratios to plain (median/median, best/best), acceptance and whether the text was
# identical to plain in every run. Timing on a shared machine is noisy: compare ratios. "cpu x"
# is plain's over this configuration's CPU seconds (user + sys of the whole process, median),
# which a loaded machine disturbs far less than wall time (meaningful with 1 thread: idle pool
# threads spin).
set -euo pipefail
bin=$1 target=$2 drafter=$3 reps=${4:-5} threads=${5:-1} n=${6:-256}
shift $(( $# < 6 ? $# : 6 ))
depths=${*:-"1 2 3 4 auto"}
prompt=${SPEC_PROMPT:-"The meaning of life is"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export BITSPARK_NO_COST_CACHE=${BITSPARK_NO_COST_CACHE:-0}
run() {  # run NAME [args]: appends tok/s to $tmp/NAME.tps, keeps text and last stderr
  local name=$1; shift
  /usr/bin/time -f "%U %S" -o "$tmp/time" "$bin" run -m "$target" -p "$prompt" -n "$n" --temp 0 -t "$threads" \
    --ignore-eos "$@" >"$tmp/$name.txt" 2>"$tmp/$name.err"
  awk '{print $1 + $2}' "$tmp/time" >>"$tmp/$name.cpu"
  sed -n 's/.*eval time = .*tokens (.*, *\([0-9.]*\) tokens per second).*/\1/p' "$tmp/$name.err" | tail -1 >>"$tmp/$name.tps"
  if [ "$name" != plain ] && ! cmp -s "$tmp/plain.txt" "$tmp/$name.txt"; then echo differs >"$tmp/$name.diff"; fi
}
for ((r = 0; r < reps; r++)); do
  run plain
  for d in $depths; do run "d$d" -md "$drafter" --draft-max "$d"; done
done
stat() { sort -g "$1" | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%.1f %.1f", m, a[NR]}'; }
read -r pm pb <<<"$(stat "$tmp/plain.tps")"
read -r pc _ <<<"$(stat "$tmp/plain.cpu")"
printf "load: %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-10s %10s %10s %8s %8s %8s %11s %s\n" config "median t/s" "best t/s" "med x" "best x" "cpu x" acceptance text
printf "%-10s %10s %10s %8s %8s %8s %11s %s\n" plain "$pm" "$pb" 1.00 1.00 1.00 - -
for d in $depths; do
  read -r m b <<<"$(stat "$tmp/d$d.tps")"
  read -r c _ <<<"$(stat "$tmp/d$d.cpu")"
  acc=$(sed -n 's/.*acceptance = \([0-9.]*%\).*/\1/p' "$tmp/d$d.err" | tail -1)
  park=$(sed -n 's/.*auto depth: .*, \([0-9]*\) parked rounds, \([0-9]*\) probes.*/ parked \1 probes \2/p' "$tmp/d$d.err")
  same=identical; [ -f "$tmp/d$d.diff" ] && same=DIFFERS
  printf "%-10s %10s %10s %8.3f %8.3f %8.3f %11s %s%s\n" "draft $d" "$m" "$b" "$(echo "$m / $pm" | bc -l)" \
    "$(echo "$b / $pb" | bc -l)" "$(echo "$pc / $c" | bc -l)" "$acc" "$same" "$park"
done
