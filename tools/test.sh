#!/usr/bin/env bash
# test.sh: build and run every test: the release build (and again at the AVX2 level where the
# CPU has AVX-512), the ASan/UBSan build, and a bounded libFuzzer run of each parser. Ends with
# one summary line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
passed=0; failed=0
run_suite() { # name build-dir "targets|all" cmake-args...
  local name=$1 dir=$2 targets=$3; shift 3
  echo "== $name =="
  local build_args=()
  [ "$targets" = all ] || for t in $targets; do build_args+=(--target "$t"); done
  if ! cmake -S . -B "$dir" "$@" >/dev/null || ! cmake --build "$dir" -j "$jobs" "${build_args[@]}" >/dev/null; then
    echo "$name: build failed"; cmake --build "$dir" -j 1 "${build_args[@]}" 2>&1 | tail -30; failed=$((failed+1)); return
  fi
  local log=$dir/ctest.log
  (cd "$dir" && ctest --output-on-failure -j "$jobs" "${CTEST_SEL[@]}") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} p f
  # ctest writes "..***Failed" (no space before the stars) and "   Passed"
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log")
  f=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout|Exception)' "$log")
  # a failure ctest reports in its exit status but no line above shows still counts
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed+p)); failed=$((failed+f))
}
# Release: every test.
CTEST_SEL=()
run_suite release build all -DCMAKE_BUILD_TYPE=Release
# CPUs without AVX-512 (most desktops and laptops) take other kernels with the same layouts:
# where this one has AVX-512, every test again as if it had AVX2 only (BITSPARK_CPU caps the level).
# (The Vulkan tests run on the device, not on these kernels: once is enough.)
if grep -qw avx512vbmi /proc/cpuinfo 2>/dev/null && [ -z "${BITSPARK_CPU:-}" ]; then
  CTEST_SEL=(-E vulkan)
  BITSPARK_CPU=avx2 run_suite release-avx2 build all -DCMAKE_BUILD_TYPE=Release
  CTEST_SEL=()
fi
# The training chain of train/ with a few steps of everything (python3-torch), and bitspark on
# what it wrote: one check, run once with the release binary.
if [ -z "${BS_NO_TRAIN:-}" ]; then
  echo "== train smoke =="
  if tools/train_smoke.sh build/bitspark; then passed=$((passed+1)); else failed=$((failed+1)); fi
fi
# ASan + UBSan (clang, optimized so the suite stays short): every test again, against an
# instrumented binary and library (the heaviest tests notice the sanitizer and use fewer rounds).
CTEST_SEL=()
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite asan-ubsan build-asan all -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBS_SANITIZE=ON -DCMAKE_C_COMPILER=clang
if [ -z "${BS_NO_FUZZ:-}" ]; then
  CTEST_SEL=(-L fuzz)
  run_suite fuzz build-fuzz "fuzz_gguf fuzz_safetensors fuzz_http" -DCMAKE_BUILD_TYPE=Debug -DBS_FUZZ=ON -DCMAKE_C_COMPILER=clang
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
