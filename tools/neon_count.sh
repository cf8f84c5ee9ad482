#!/bin/bash
# neon_count.sh: instructions per output (weight row x activation row) per 32 weights of the
# aarch64 Q1_0 / Q2_0 kernels, counted under qemu-aarch64 (one instruction per translation
# block, every executed one logged): the same product over NE1 and 2 * NE1 weight rows, so the
# difference is what the kernel spends per weight row (its share of the index and scale work
# included; the activations' quantization and tables are per activation row and cancel).
# Needs the cross build: cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# -DBS_VULKAN=OFF && cmake --build build-aarch64 --target bitspark_lib.
# Usage: tools/neon_count.sh [types] [rows] [levels]   (defaults: q1_0 q2_0 q2_0_g64, 1 2 4 8,
# 1 2 3 = neon dotprod i8mm; the tables are counted at the first level given)
set -euo pipefail
B=build-aarch64
[ -f "$B/libbitspark.a" ] || { echo "neon_count: build $B first (see the header)"; exit 1; }
libs=$(sed -n 's/.*libbitspark.a //p' "$B/tests/CMakeFiles/test_kernels.dir/link.txt")
aarch64-linux-gnu-gcc -std=c11 -O2 -Isrc tools/neon_count.c -o "$B/neon_count" "$B/libbitspark.a" $libs
types=${1:-"q1_0 q2_0 q2_0_g64"}
rows=${2:-"1 2 4 8"}
levels=${3:-"1 2 3"}
NE0=1024 NE1=64
count() { # type ne1_run nr level tbl -> executed instructions
  qemu-aarch64 -cpu max -singlestep -d exec,nochain -D /dev/stdout -L / "$B/neon_count" "$1" $NE0 $((2 * NE1)) "$2" "$3" "$4" "$5" |
    grep -c '^Trace'
}
printf '| type | level | kernel | rows | instructions / output / 32 weights |\n|---|---|---|---:|---:|\n'
for t in $types; do
  first=${levels%% *}
  for lv in $levels; do
    for tbl in 1 0; do
      [ $tbl = 1 ] && [ $lv != "$first" ] && continue   # the tables are one build for every level
      for nr in $rows; do
        name=$(qemu-aarch64 -cpu max -L / "$B/neon_count" "$t" $NE0 $((2 * NE1)) $NE1 "$nr" $lv $tbl)
        a=$(count "$t" $NE1 "$nr" $lv $tbl); b=$(count "$t" $((2 * NE1)) "$nr" $lv $tbl)
        awk -v t="$t" -v k="$name" -v nr="$nr" -v d=$((b - a)) -v n=$((NE1 * nr * NE0 / 32)) \
          'BEGIN { split(k, s, " "); printf "| %s | %s | %s | %d | %.2f |\n", t, s[length(s)], k, nr, d / n }'
      done
    done
  done
done
