#!/usr/bin/env bash
# test.sh: build and run every test: the release build (and again at the AVX2 level where the
# CPU has AVX-512), the aarch64 cross build under qemu, the ASan/UBSan build, and a bounded
# libFuzzer run of each parser. Ends with
# one summary line "N passed, N failed, N skipped" (skipped: exit 77, no device or not this
# architecture; never counted as passed).
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
passed=0; failed=0; skipped=0
build_suite() { # name build-dir "targets|all" cmake-args...: 0 when built
  local name=$1 dir=$2 targets=$3; shift 3
  echo "== $name =="
  sect_name=$name; sect_t0=$SECONDS
  local build_args=()
  [ "$targets" = all ] || for t in $targets; do build_args+=(--target "$t"); done
  if ! cmake -S . -B "$dir" "$@" >/dev/null || ! cmake --build "$dir" -j "$jobs" "${build_args[@]}" >/dev/null; then
    echo "$name: build failed"; cmake --build "$dir" -j 1 "${build_args[@]}" 2>&1 | tail -30; failed=$((failed+1)); return 1
  fi
}
run_suite() { # name build-dir "targets|all" cmake-args...
  build_suite "$@" && test_suite "$2"
}
test_suite() { # build-dir: its ctest (CTEST_SEL), counted
  local dir=$1
  local log=$dir/ctest.log
  (cd "$dir" && ctest --output-on-failure -j "$jobs" "${CTEST_SEL[@]}") 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} p f
  # ctest writes "..***Failed" (no space before the stars), "   Passed" and, for a test that
  # exits 77 (no device, another architecture's kernels), "..***Skipped": skipped, not failed
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed' "$log")
  f=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Not Run|Timeout|Exception)' "$log" | grep -vc '\*\*\*Skipped')
  skipped=$((skipped + $(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log")))
  # a failure ctest reports in its exit status but no line above shows still counts
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed+p)); failed=$((failed+f))
  echo "$sect_name: $((SECONDS-sect_t0)) s, build and tests"
}
# Release: every test but the Vulkan ones. Those run once, in the ASan/UBSan suite below: on
# lavapipe their cost is the software device's, the same in both builds, and the sanitizers
# check the host side too; the release binary runs the Vulkan kernels test in the GPU bundle check,
# and py_vk_rest_model the formats the sanitizer build leaves out of test_vulkan_model.py's checks.
# (Linked as the GPU check bundle wants, BS_BUNDLE_RPATH: the bundle step below reuses this build.)
# The training chain of train/ with a few steps of everything (python3-torch), and bitspark on
# what it wrote: one check, run once with the release binary, beside the release tests (it
# takes one core, niced, and many of those tests wait on sockets and timers).
CTEST_SEL=(-E vulkan)
REL_ARGS=(-DCMAKE_BUILD_TYPE=Release -DBS_BUNDLE_RPATH=ON)
smoke_pid=
if build_suite release build all "${REL_ARGS[@]}"; then
  [ -n "${BS_NO_TRAIN:-}" ] || { tools/train_smoke.sh build/bitspark >build/train-smoke.log 2>&1 & smoke_pid=$!; }
  test_suite build
fi
if [ -n "$smoke_pid" ]; then
  echo "== train smoke =="
  wait "$smoke_pid"; rc=$?
  cat build/train-smoke.log
  if [ $rc -eq 0 ]; then passed=$((passed+1)); else failed=$((failed+1)); fi
fi
# CPUs without AVX-512 (most desktops and laptops) take other kernels with the same layouts:
# where this one has AVX-512, every test again as if it had AVX2 only (BITSPARK_CPU caps the level).
# (The Vulkan tests run on the device, not on these kernels, and the HTTP robustness, lifecycle,
# page, layering and file-safety tests check nothing a kernel level changes: once is enough.)
if grep -qw avx512vbmi /proc/cpuinfo 2>/dev/null && [ -z "${BITSPARK_CPU:-}" ]; then
  CTEST_SEL=(-E 'vulkan|server_soak|server_hostile|server_replicas|server_lifecycle|server_webui|server_security|server_load|atomic_tools|test_layers|test_deploy')
  BITSPARK_CPU=avx2 run_suite release-avx2 build all "${REL_ARGS[@]}"
  CTEST_SEL=()
fi
# aarch64: the cross build (make arm64) under qemu-aarch64, as a CPU with DotProd + I8MM + SVE
# (-cpu max) and as one without DotProd (cortex-a53: plain NEON). The kernel and step-op tests
# run every level the CPU has; the fixture logits (the x86 bounds) and the lossless-speculation
# check (BS_TEST_QUICK=2: the tiny pair, Q1_0 and ternary) run at the CPU's top level, and on
# -cpu max the batch check again at the dotprod level (whose kernels test_kernels has checked
# bit for bit against the scalar ones; the batch check's row invariance at that level is what
# lossless speculation rests on, and the speculation code above the kernels is the same C).
# Tiny models only: emulation costs ~10-30x. The server and page tests stay x86-only.
arm64_test() { # name qemu-cpu expected-top-level BITSPARK_CPU-or-empty BS_TEST_QUICK tests...
  local name=$1 cpu=$2 top=$3 lv=$4 quick=$5; shift 5
  local dir=build-aarch64 tmp=build-aarch64/testtmp/$name t rc
  mkdir -p "$tmp"
  local wrap=$PWD/$tmp/bitspark
  printf '#!/bin/sh\nexec qemu-aarch64 -cpu %s -L / %s "$@"\n' "$cpu" "$PWD/$dir/bitspark" >"$wrap"
  chmod +x "$wrap"
  for t in "$@"; do
    local cmd=(qemu-aarch64 -cpu "$cpu" -L / "$dir/tests/$t")
    [ "${t%.py}" != "$t" ] && cmd=(/usr/bin/python3 "tests/$t")   # Debian's, with numpy (as ctest)
    local t0=$SECONDS
    env ${lv:+BITSPARK_CPU=$lv} BITSPARK="$wrap" BS_FIXTURES="$PWD/tests/fixtures" BS_TMP="$PWD/$tmp" \
        BS_SRC="$PWD" BS_BUILD="$PWD/$dir" BS_ARCH=aarch64 BS_TEST_QUICK=$quick timeout 900 "${cmd[@]}" >"$tmp/$t.log" 2>&1
    rc=$?
    # the emulated CPU must reach the level this run is for (else fewer kernels were tested)
    if [ $rc -eq 0 ] && [ "$t" = test_cpu_features ] && ! grep -q "max level $top\$" "$tmp/$t.log"; then rc=99; fi
    if [ $rc -eq 0 ]; then echo "  $name $t: passed ($((SECONDS-t0)) s)"
    else echo "  $name $t: FAILED (exit $rc, $((SECONDS-t0)) s)"; tail -20 "$tmp/$t.log"; fi
  done
}
if [ -z "${BS_NO_ARM64:-}" ]; then
  echo "== aarch64 under qemu =="
  arm_t0=$SECONDS
  arm_tests=(test_cpu_features test_kernels test_neon_tbl test_kernels_quant test_matmul test_step_ops test_batch_eval
             test_dspark_spec test_fixture_logits.py)
  # only what runs here: the binary and the C tests above (the rest of the tree is the same C as
  # the native builds'; `make arm64` builds it all)
  arm_targets=(--target bitspark)
  for t in "${arm_tests[@]}"; do [ "${t%.py}" = "$t" ] && arm_targets+=(--target "$t"); done
  if ! cmake -S . -B build-aarch64 -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DBS_VULKAN=OFF --no-warn-unused-cli >/dev/null ||
     ! cmake --build build-aarch64 -j "$jobs" "${arm_targets[@]}" >/dev/null; then
    echo "aarch64: build failed"; cmake --build build-aarch64 -j 1 "${arm_targets[@]}" 2>&1 | tail -30; failed=$((failed+1))
  else
    # the two emulated CPUs side by side (each emulator runs mostly one thread); counts from the logs
    mkdir -p build-aarch64/testtmp
    # (the dotprod level's batch check goes with the a53 side: the two sides then take about as long)
    arm64_test max max i8mm "" 2 "${arm_tests[@]}" >build-aarch64/testtmp/max.out 2>&1 &
    # (test_rollback, minutes under emulation, is left to the native runs: its invariants are
    # the session's, and the kernels under it are bit-checked against the scalar reference above)
    ( arm64_test a53 cortex-a53 neon "" 2 "${arm_tests[@]}"
      arm64_test max-dotprod max i8mm dotprod 2 test_batch_eval
    ) >build-aarch64/testtmp/a53.out 2>&1
    wait
    for f in build-aarch64/testtmp/max.out build-aarch64/testtmp/a53.out; do
      cat "$f"
      passed=$((passed + $(grep -c ': passed (' "$f"))); failed=$((failed + $(grep -c ': FAILED (' "$f")))
    done
  fi
  echo "aarch64 under qemu: $((SECONDS-arm_t0)) s"
fi
# The GPU check bundle (docs/gpu.md): made from the release build (its objects, not compiled
# again) into build-bundle/, then run with nothing but itself under env -i on lavapipe
# (tests/check_gpu_bundle.sh; 77: no lavapipe or glslc).
if [ -z "${BS_NO_BUNDLE:-}" ]; then
  echo "== gpu bundle =="
  bundle_t0=$SECONDS
  BUNDLE_BUILD=build tests/check_gpu_bundle.sh; rc=$?
  echo "gpu bundle: $((SECONDS-bundle_t0)) s"
  if [ $rc -eq 0 ]; then passed=$((passed+1)); elif [ $rc -ne 77 ]; then failed=$((failed+1)); fi
fi
# ASan + UBSan (clang, optimized so the suite stays short): every test again, against an
# instrumented binary and library (the heaviest tests notice the sanitizer and use fewer rounds).
CTEST_SEL=()
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite asan-ubsan build-asan all -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBS_SANITIZE=ON -DCMAKE_C_COMPILER=clang
if [ -z "${BS_NO_FUZZ:-}" ]; then
  # 10 s a target here: the corpus replayed and a short search (tools/fuzz.sh runs them for
  # 10 minutes by hand)
  export FUZZ_SECONDS=${FUZZ_SECONDS:-10}
  CTEST_SEL=(-L fuzz)
  run_suite fuzz build-fuzz "fuzz_gguf fuzz_safetensors fuzz_image fuzz_image_url fuzz_grammar fuzz_schema fuzz_tools fuzz_http" -DCMAKE_BUILD_TYPE=Debug -DBS_FUZZ=ON -DCMAKE_C_COMPILER=clang
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
