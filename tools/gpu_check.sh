#!/usr/bin/env bash
# gpu_check.sh: the Vulkan backend on a real GPU, in one go (<= ~8 minutes on a bare Linux GPU
# machine with its driver installed): brings the Vulkan loader (and an ICD manifest for the
# NVIDIA driver) when the machine has none, builds with the backend, runs the Vulkan tests on
# the GPU, makes the 27B presets with `bitspark synth`, benches them on the device and prints
# one table against the issue's goals.
#   tools/gpu_check.sh [WORKDIR]     (default /tmp/bitspark-gpu; needs ~8 GB free there)
# Environment: GPU_CHECK_SKIP_TESTS=1, GPU_CHECK_SKIP_27B=1, GPU_CHECK_DEVICE=vulkan:N,
#   GPU_CHECK_BUILD=DIR (an existing build instead of WORKDIR/build),
#   GPU_CHECK_MODELS="name=file.gguf ..." (more models to bench, e.g. on lavapipe for a dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/bitspark-gpu}
mkdir -p "$work"
log() { echo "gpu_check: $*" >&2; }
t_start=$(date +%s)
dev=${GPU_CHECK_DEVICE:-vulkan}

# --- the Vulkan loader and the driver's ICD ---------------------------------------------------
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }
have_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 ' || [ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ]; }
if ! have_loader; then
  log "no libvulkan.so.1: installing the loader"
  if command -v apt-get >/dev/null; then
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libvulkan1 >/dev/null
  elif command -v dnf >/dev/null; then as_root dnf install -y vulkan-loader >/dev/null
  fi
  have_loader || { log "cannot install the Vulkan loader (libvulkan1)"; exit 1; }
fi
icd_found=0
for d in /usr/share/vulkan/icd.d /etc/vulkan/icd.d; do
  ls "$d"/nvidia*.json >/dev/null 2>&1 && icd_found=1
done
if [ $icd_found -eq 0 ] && command -v nvidia-smi >/dev/null; then
  # the driver's Vulkan entry points live in libGLX_nvidia.so.0; point the loader at it
  lib=$(ldconfig -p 2>/dev/null | awk '/libGLX_nvidia\.so\.0 /{print $NF; exit}')
  if [ -n "$lib" ]; then
    ver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
    cat > "$work/nvidia_icd.json" <<JSON
{ "file_format_version": "1.0.0", "ICD": { "library_path": "$lib", "api_version": "1.3.0" } }
JSON
    export VK_ICD_FILENAMES="$work/nvidia_icd.json" VK_DRIVER_FILES="$work/nvidia_icd.json"
    log "no NVIDIA ICD manifest: using $lib (driver $ver) through $work/nvidia_icd.json"
  else
    log "no NVIDIA ICD manifest and no libGLX_nvidia.so.0: the Vulkan device may be missing"
  fi
fi

# --- build (headers, glslc, spirv-val through tools/deps.sh) ----------------------------------
if ! command -v glslc >/dev/null || ! command -v spirv-val >/dev/null || [ ! -e /usr/include/vulkan/vulkan.h ]; then
  as_root tools/deps.sh build || { log "build dependencies missing (tools/deps.sh build)"; exit 1; }
fi
build=${GPU_CHECK_BUILD:-$work/build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBS_VULKAN=ON >/dev/null || exit 1
cmake --build "$build" -j "$(nproc)" >/dev/null || { cmake --build "$build" -j 1 2>&1 | tail -30; exit 1; }
bin="$build/bitspark"
"$bin" devices || exit 1
"$bin" devices | grep -q '^auto: vulkan' || log "note: auto does not take a Vulkan GPU here (see the list above)"

# --- the Vulkan tests on the GPU ----------------------------------------------------------------
tests_line="skipped"
if [ -z "${GPU_CHECK_SKIP_TESTS:-}" ]; then
  if (cd "$build" && ctest -R vulkan --output-on-failure -j 2 >"$work/ctest.log" 2>&1); then tests_line="passed"
  else tests_line="FAILED (see $work/ctest.log)"; tail -40 "$work/ctest.log"; fi
  grep -E 'tests passed|Passed|Failed|Skipped' "$work/ctest.log" | tail -5
fi

# --- 27B presets: synth, bench on the device ------------------------------------------------------
declare -A res
bench_one() { # name file
  local name=$1 f=$2 out="$work/bench_$1.txt"
  timeout 240 "$bin" bench -m "$f" --device "$dev" -p 512 -n 128 -r 2 --verify 1,2,3,4,5,8 >"$out" 2>&1 || log "bench $name failed: $(tail -3 "$out")"
  res[$name.pp]=$(awk -F'|' '/pp512/{gsub(/ /,"",$8); print $8}' "$out")
  res[$name.tg]=$(awk -F'|' '/tg128/{gsub(/ /,"",$8); print $8}' "$out")
  res[$name.roof]=$(grep -o 'tg reached [0-9]*%' "$out" | grep -o '[0-9]*%')
  res[$name.bw]=$(grep -o 'membw: [0-9.]* GB/s' "$out" | grep -o '[0-9.]* GB/s')
  res[$name.v5]=$(grep -o 'w=5 [0-9.]* ms ([0-9.]*x)' "$out" | grep -o '([0-9.]*x)' | tr -d '()')
  res[$name.dev]=$(grep -m1 -o 'device: .*' "$out" | sed 's/device: //')
}
if [ -z "${GPU_CHECK_SKIP_27B:-}" ]; then
  for p in bonsai-27b ternary-bonsai-27b; do
    f="$work/$p.gguf"
    [ -s "$f" ] || timeout 300 "$bin" synth --preset "$p" -o "$f" >/dev/null 2>"$work/synth_$p.log" || { log "synth $p failed: $(tail -2 "$work/synth_$p.log")"; continue; }
    bench_one "$p" "$f"
  done
fi

names=()
[ -z "${GPU_CHECK_SKIP_27B:-}" ] && names=(bonsai-27b ternary-bonsai-27b)
for nm in ${GPU_CHECK_MODELS:-}; do
  bench_one "${nm%%=*}" "${nm#*=}"
  names+=("${nm%%=*}")
done

# --- one table ------------------------------------------------------------------------------------
echo
echo "| model | device | pp512 t/s (goal >= 1500) | tg128 t/s | copy bandwidth | tg / roofline (goal >= 50%) | verify(5)/verify(1) (goal <= 1.2) |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for p in "${names[@]}"; do
  echo "| $p | ${res[$p.dev]:-?} | ${res[$p.pp]:-?} | ${res[$p.tg]:-?} | ${res[$p.bw]:-?} | ${res[$p.roof]:-?} | ${res[$p.v5]:-?} |"
done
echo
echo "Vulkan tests on the GPU: $tests_line; $(( $(date +%s) - t_start )) s in all (bench outputs in $work)"
