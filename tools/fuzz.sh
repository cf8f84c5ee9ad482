#!/usr/bin/env bash
# fuzz.sh: long manual libFuzzer runs of the GGUF and safetensors parsers, the image decoders,
# the server's image_url data: URLs, GBNF grammars, JSON schemas, the tool-call reader and the HTTP layer.
#   tools/fuzz.sh [SECONDS] [gguf|safetensors|image|image_url|grammar|schema|tools|http|all]     (default: 600 seconds, all)
# Builds build-fuzz (clang, -DBS_FUZZ=ON), then runs each fuzzer in turn on a persistent
# corpus under build-fuzz/fuzz/long-corpus-<kind> seeded from fuzz/corpus/<kind>, so coverage
# accumulates across runs. Crashes land in build-fuzz/fuzz/ as crash-*/oom-*/timeout-*; a
# reproducer is `build-fuzz/fuzz/fuzz_<kind> <file>`. Set JOBS=N to run N workers per fuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
which=${2:-all}
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DBS_FUZZ=ON -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_gguf fuzz_safetensors fuzz_image fuzz_image_url fuzz_grammar fuzz_schema fuzz_tools fuzz_http >/dev/null
status=0
for kind in gguf safetensors image image_url grammar schema tools http; do
  [ "$which" = all ] || [ "$which" = "$kind" ] || continue
  corpus=build-fuzz/fuzz/long-corpus-$kind
  mkdir -p "$corpus"
  cp -n fuzz/corpus/$kind/* "$corpus"/ 2>/dev/null || true
  echo "== fuzz_$kind for ${secs}s (corpus $corpus, log build-fuzz/fuzz/long-$kind.log) =="
  par=()
  [ "${JOBS:-1}" -gt 1 ] && par=(-jobs="$JOBS" -workers="$JOBS")
  rc=0
  TMPDIR=${TMPDIR:-/tmp} build-fuzz/fuzz/fuzz_$kind -max_total_time="$secs" -timeout=30 \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 -dict=fuzz/$kind.dict "${par[@]}" \
    -artifact_prefix=build-fuzz/fuzz/ "$corpus" >build-fuzz/fuzz/long-$kind.log 2>&1 || rc=$?
  grep -E 'stat::|ERROR|SUMMARY|Test unit written' build-fuzz/fuzz/long-$kind.log || true
  [ $rc -eq 0 ] || { echo "fuzz_$kind failed (exit $rc)"; status=1; }
done
exit $status
