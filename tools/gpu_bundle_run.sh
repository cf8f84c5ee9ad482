#!/usr/bin/env bash
# run.sh OUTDIR: the GPU check bundle's entry point (made by tools/gpu_bundle.sh; docs/gpu.md).
# Runs on a machine without network or build tools: takes the image's Vulkan loader and NVIDIA
# ICD where it has them and the bundle's copies only for what is missing, then writes, each as
# soon as it exists: devices.txt (heaps, types, limits, dot-product support), tests.txt (the
# Vulkan tests on the device), bench.txt (load, pp512, tg128, 8 sessions' tg128, verify widths, copy roofline),
# profile.txt (GPU time per kernel, dispatches), log.txt and summary.md (one table).
# Writes nothing outside OUTDIR and /tmp.
# Environment: BUNDLE_BUDGET_S (default 360: every step checks the time left), BUNDLE_QUICK=1
#   (the tiny models only, for CI), BUNDLE_TERNARY=1 (the ternary 27B preset too),
#   BUNDLE_TESTS=REGEX (only these tests), BUNDLE_DEVICE (default vulkan), BUNDLE_MODELS="m ..."
#   (bonsai-27b, ternary-bonsai-27b, ternary-bonsai-2-27b, tiny-synth, bonsai-tiny; none: no model steps),
#   BUNDLE_LOADER=bundle / BUNDLE_GLIBC=bundle / BUNDLE_LAYER=bundle (the bundle's loader / glibc /
#   validation layer even where the image has its own: how CI checks those paths),
#   BUNDLE_NV_ROOT (default /usr/local/nvidia: the driver mount searched for libraries and an ICD
#   manifest), BUNDLE_MODEL_DIR (default /tmp/bitspark-bundle-models).
set -uo pipefail
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the bundle's own fixtures, or the repository's when the bundle sits at its top (gpu_bundle.sh)
FX=$B/fixtures
[ -n "$(ls -A "$FX" 2>/dev/null)" ] || FX=$(cd "$B/.." && pwd)/tests/fixtures
[ $# -ge 1 ] || { echo "usage: run.sh OUTDIR" >&2; exit 2; }
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
rm -f "$OUT"/{summary.md,devices.txt,tests.txt,bench.txt,profile.txt,log.txt}
T0=$(date +%s)
BUDGET=${BUNDLE_BUDGET_S:-360}
QUICK=${BUNDLE_QUICK:-}
DEV=${BUNDLE_DEVICE:-vulkan}
W=$(mktemp -d /tmp/bitspark-bundle.XXXXXX) || exit 1
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/bin" "$W/lib" "$W/tmp"
now() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(now) )); }
log() { echo "[$(now)s] $*" | tee -a "$OUT/log.txt" >&2; }
declare -A S   # summary values
STEPS=()
step_done() { STEPS+=("$1: $2"); summary; }
# a step needs at least $2 seconds of the budget, else it is skipped with a line saying so
can_run() {
  if [ "$(left)" -lt "$2" ]; then log "skipped $1: $(left) s of the budget left, it needs ~$2 s"; step_done "$1" "skipped (out of time)"; return 1; fi
}
# the compressed parts (vk: loader + glvnd/X11, glibc, src: models + Python tests) into $W, once
unpack() { [ -d "$W/$1" ] || tar -xzf "$B/$1.tar.gz" -C "$W"; }
bi() { awk -v k="$1" '$1 == k {print $2}' "$B/BUILD_INFO"; }
# a bench table's value (column 8) in the first row whose test (column 7) matches $1, plus $2; stdin
tfield() { awk -F'|' -v t="$1" -v s="${2:-}" '$7 ~ t {gsub(/^ +| +$/,"",$8); print $8 s; exit}'; }
# A comparison bench of model $m ($f): `variant FILE "VAR=value ..." bench-args...` runs it with
# those variables, its output in $W/FILE and a section of bench.txt headed by them; rc its status.
variant() {
  local out=$1 envs=$2; shift 2
  echo "## $m with $envs" >>"$OUT/bench.txt"
  # (word splitting on purpose: the assignments, none with a space in it)
  # shellcheck disable=SC2086
  env $envs timeout $(( $(left) - 5 )) "$BS" bench -m "$f" --device "$DEV" "$@" --no-membw >"$W/$out" 2>&1
  rc=$?; cat "$W/$out" >>"$OUT/bench.txt"; echo >>"$OUT/bench.txt"
}
# a bench step's line: ok, or its exit status
bench_done() { step_done "$1 $m" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc, bench.txt)") ($(now) s)"; }
vle() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }   # version $1 <= $2
log "bundle: $(head -1 "$B/BUILD_INFO"); host $(uname -nr); budget ${BUDGET}s${QUICK:+; quick (tiny models)}"

# --- glibc: the bundle's own (through its ld.so) only where the image's is older --------------
have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
need_glibc=$(bi glibc_need)
USE_LDSO=
if [ "${BUNDLE_GLIBC:-}" = bundle ]; then USE_LDSO=1
elif [ -z "$have_glibc" ] || ! vle "$need_glibc" "$have_glibc"; then USE_LDSO=1; fi
log "glibc: image ${have_glibc:-unknown}, bundle needs $need_glibc: $([ -n "$USE_LDSO" ] && echo "the bundle's (bookworm) through its ld.so" || echo "the image's")"

# --- shared-library lookups on the image ---------------------------------------------------------
LDCONFIG=$(command -v ldconfig || { [ -x /sbin/ldconfig ] && echo /sbin/ldconfig; } || { [ -x /usr/sbin/ldconfig ] && echo /usr/sbin/ldconfig; })
NV=${BUNDLE_NV_ROOT:-/usr/local/nvidia}   # the driver mount of some images (read-only)
NV_DIRS="$NV/lib64 $NV/lib"
find_lib() { # soname -> path on the image (ld.so cache, LD_LIBRARY_PATH, the usual dirs), or nothing
  local p d
  [ -n "$LDCONFIG" ] && p=$("$LDCONFIG" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ {print $NF; exit}') && [ -n "$p" ] && { echo "$p"; return 0; }
  for d in ${LDP//:/ } $NV_DIRS /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /lib64 /usr/lib /usr/local/lib; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}
shim() { ln -sf "$2" "$W/lib/$1"; log "  $1: the bundle's ($2)"; }   # one library of the bundle's
LDP=${LD_LIBRARY_PATH:-}   # the image's library path, with the driver mount's folders
for d in $NV_DIRS; do [ -d "$d" ] && LDP="$d${LDP:+:$LDP}"; done
export LD_LIBRARY_PATH="${LDP:+$LDP:}$W/lib"   # the bundle's picks last: the image's libraries first

# --- the Vulkan loader ------------------------------------------------------------------------
if [ "${BUNDLE_LOADER:-}" = bundle ] || ! sys_loader=$(find_lib libvulkan.so.1); then
  unpack vk
  log "Vulkan loader: the bundle's ($W/vk/libvulkan.so.1)"
  # ahead of the image's: a forced choice must win over a loader the image has
  export LD_LIBRARY_PATH="$W/lib${LDP:+:$LDP}"
  shim libvulkan.so.1 "$W/vk/libvulkan.so.1"
else
  log "Vulkan loader: the image's ($sys_loader)"
fi

# --- the driver's ICD manifest -----------------------------------------------------------------
icd=${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-}}
if [ -n "$icd" ]; then
  log "ICD manifest: given ($icd)"
else
  for f in "$NV"/share/vulkan/icd.d/nvidia*.json /usr/share/vulkan/icd.d/nvidia*.json \
           /etc/vulkan/icd.d/nvidia*.json /usr/local/share/vulkan/icd.d/nvidia*.json; do
    [ -f "$f" ] && { icd=$f; break; }
  done
  if [ -z "$icd" ] && glx=$(find_lib libGLX_nvidia.so.0); then
    # the driver's Vulkan entry points live in libGLX_nvidia.so.0: a manifest naming it
    icd=$W/nvidia_icd.json
    printf '{ "file_format_version": "1.0.0", "ICD": { "library_path": "%s", "api_version": "1.3.0" } }\n' "$glx" >"$icd"
    log "ICD manifest: none on the image; wrote $icd for $glx"
  fi
  if [ -n "$icd" ]; then
    lib=$(sed -n 's/.*"library_path" *: *"\([^"]*\)".*/\1/p' "$icd" | head -1)
    if [ -n "$lib" ] && [ "${lib#/}" = "$lib" ] && p=$(find_lib "$lib"); then
      # a bare name the loader's dlopen may not find (a driver mount outside the ld.so cache)
      sed "s|\"library_path\" *: *\"[^\"]*\"|\"library_path\": \"$p\"|" "$icd" >"$W/icd.json" && icd=$W/icd.json && lib=$p
    fi
    log "ICD manifest: $icd (driver library ${lib:-?})"
    export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
  else
    log "ICD manifest: no NVIDIA manifest or driver library found; the loader's own search decides"
  fi
fi
# the driver's (and loader's) dependencies the image lacks (glvnd, X11 client): the bundle's
for lib in $(sed -n 's/.*"library_path" *: *"\([^"]*\)".*/\1/p' ${icd//:/ } 2>/dev/null) "$W/lib/libvulkan.so.1"; do
  [ "${lib#/}" != "$lib" ] || lib=$(find_lib "$lib") || continue
  for pass in 1 2 3; do
    miss=$(ldd "$lib" $(ls "$W"/lib/* 2>/dev/null) 2>/dev/null | awk '/not found/{print $1}' | sort -u)
    [ -n "$miss" ] || break
    for m in $miss; do
      unpack vk
      if [ -e "$W/vk/$m" ]; then shim "$m" "$W/vk/$m"; else log "  $m: missing on the image and not in the bundle"; fi
    done
  done
done

# --- how the bundle's programs run (directly, or through the bundle's ld.so) ----------------------
wrap() { # name elf: $W/bin/name runs elf
  if [ -n "$USE_LDSO" ]; then
    unpack glibc
    printf '#!/bin/sh\nexec "%s" --library-path "%s" --argv0 "%s" "%s" "$@"\n' "$W/glibc/ld-linux-x86-64.so.2" \
      "$W/glibc:$B/lib:\$LD_LIBRARY_PATH" "$2" "$2" >"$W/bin/$1"
    chmod +x "$W/bin/$1"
  else ln -s "$2" "$W/bin/$1"; fi
}
# the test programs travel compressed: unpacked where their rpath ($ORIGIN/../lib) finds lib/
mkdir -p "$W/t/tests" && ln -s "$B/lib" "$W/t/lib"
for t in "$B"/tests/*.gz; do
  [ -f "$t" ] || continue
  u=$W/t/tests/$(basename "$t" .gz)
  gzip -dc "$t" >"$u" && chmod +x "$u" || log "cannot unpack $(basename "$t")"
done
wrap bitspark "$B/bin/bitspark"; wrap vkinfo "$B/bin/vkinfo"
for t in "$W"/t/tests/*; do [ -f "$t" ] && wrap "$(basename "$t")" "$t"; done
BS=$W/bin/bitspark
ver=$("$BS" --version 2>&1 | head -1)
if [ -z "$USE_LDSO" ] && echo "$ver" | grep -q 'GLIBC_'; then
  log "the image's glibc is too old after all ($ver): switching to the bundle's"
  USE_LDSO=1; rm -f "$W"/bin/*; wrap bitspark "$B/bin/bitspark"; wrap vkinfo "$B/bin/vkinfo"
  for t in "$W"/t/tests/*; do [ -f "$t" ] && wrap "$(basename "$t")" "$t"; done
  ver=$("$BS" --version 2>&1 | head -1)
fi
log "bitspark: $ver"

# --- the validation layer (the tests turn it on): the image's, else the bundle's ----------------
layer_sys=$(ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json /etc/vulkan/explicit_layer.d/VkLayer_khronos_validation.json \
               /usr/local/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json 2>/dev/null | head -1)
if { [ -z "$layer_sys" ] || [ "${BUNDLE_LAYER:-}" = bundle ]; } && [ -f "$B/layer.tar.gz" ]; then
  mkdir -p "$W/layer" && tar -xzf "$B/layer.tar.gz" -C "$W/layer"
  export VK_LAYER_PATH=$W/layer VK_ADD_LAYER_PATH=$W/layer
  need=$(bi glibcxx_need); cxx=$(find_lib libstdc++.so.6 || true)
  if [ "$need" != none ] && ! { [ -n "$cxx" ] && grep -aq "$need" "$cxx"; }; then
    shim libstdc++.so.6 "$W/layer/libstdc++.so.6"; shim libgcc_s.so.1 "$W/layer/libgcc_s.so.1"
  fi
  log "validation layer: the bundle's ($W/layer)"
else
  log "validation layer: ${layer_sys:-none}"
fi
# (only a layer that fails where the plain instance starts counts against it)
if BITSPARK_VK_VALIDATE=1 "$BS" devices 2>&1 | grep -q 'unavailable' && ! "$BS" devices 2>&1 | grep -q 'unavailable'; then
  export BS_VK_NO_VALIDATE=1
  log "validation layer: unusable here ($(BITSPARK_VK_VALIDATE=1 "$BS" devices 2>&1 | grep unavailable | head -1)); tests run without it"
fi
log "environment: LD_LIBRARY_PATH=$LD_LIBRARY_PATH VK_DRIVER_FILES=${VK_DRIVER_FILES:-} VK_LAYER_PATH=${VK_LAYER_PATH:-}"

# --- the summary (rewritten after every step) --------------------------------------------------
summary() {
  {
    echo "# bitspark GPU check ($(head -1 "$B/BUILD_INFO"))"
    echo
    echo "| what | value |"
    echo "| --- | --- |"
    echo "| device | ${S[device]:-?} |"
    echo "| heaps | ${S[heaps]:-?} |"
    echo "| integer dot product | ${S[dot]:-?} |"
    echo "| tests | ${S[tests]:-not run} |"
    local m
    for m in ${MODELS_RUN:-}; do
      echo "| model $m | ${S[$m.size]:-?} |"
      echo "| load time $m | ${S[$m.load]:-?} |"
      echo "| pp$PP $m | ${S[$m.pp]:-?} |"
      echo "| tg$TG $m | ${S[$m.tg]:-?} |"
      echo "| tg$TG x8 sessions $m | ${S[$m.par]:-?} |"
      echo "| tg$TG x${PAR2:-32} sessions $m | ${S[$m.par2]:-?} |"
      echo "| tg$TG sampled $m | ${S[$m.smp]:-?} |"
      echo "| roofline fraction $m | ${S[$m.roof]:-?} |"
      echo "| verify(5)/verify(1) $m | ${S[$m.v5]:-?} |"
      echo "| with BITSPARK_VK_ASUM=row $m | ${S[$m.asum]:-not run} |"
      echo "| with BITSPARK_VK_DELTA=column $m | ${S[$m.delta]:-not run} |"
      case "$m" in ternary*) echo "| with BITSPARK_VK_F32N=0 $m | ${S[$m.f32n]:-not run} |";; esac
      case "$m" in *bonsai-2-*) echo "| with BITSPARK_VK_NO_NORMROT=1 $m | ${S[$m.normrot]:-not run} |";; esac
      echo "| prompts' products $m | ${S[$m.mm]:-not run} |"
      echo "| tg$TG x8 sessions with BITSPARK_VK_SEQ=apart $m | ${S[$m.seq]:-not run} |"
      echo "| with BITSPARK_VK_NO_AHEAD=1 BITSPARK_VK_NO_TOPK=1 $m | ${S[$m.ahead]:-not run} |"
      echo "| per-kernel GPU time $m | ${S[$m.kernels]:-?} |"
      echo "| dispatches per token $m | ${S[$m.disp]:-?} |"
      echo "| DSpark round parts $m (bench --spec, drafter on the device) | ${S[$m.spec]:-not run} |"
    done
    echo "| time | $(now) s of ${BUDGET} s |"
    echo
    echo "Steps:"
    local s
    for s in "${STEPS[@]}"; do echo "- $s"; done
  } >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
}
summary

# --- 1. devices ---------------------------------------------------------------------------------
if can_run devices 10; then
  {
    command -v nvidia-smi >/dev/null && { echo "## nvidia-smi"; timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1; echo; }
    echo "## vkinfo"; timeout 30 "$W/bin/vkinfo" 2>&1
    echo; echo "## bitspark devices"; timeout 30 "$BS" devices 2>&1
  } >"$OUT/devices.txt"
  d=$(grep -m1 '^device 0:' "$OUT/devices.txt" | sed 's/^device 0: //; s/, vendor [^,]*//')
  S[device]=${d:-none (see devices.txt)}
  S[heaps]=$(awk '/^device 0:/{on=1; next} /^device /{on=0} on && /^  heap /{sub(/^  heap /,""); printf "%s%s", n++ ? "; " : "", $0}' "$OUT/devices.txt")
  S[dot]=$(awk '/^device 0:/{on=1; next} /^device /{on=0} on && /integer dot product/{sub(/^ *integer dot product: /,""); print; exit}' "$OUT/devices.txt")
  S[dot]=${S[dot]%%;*}$(grep -m1 -q '4x8-bit packed signed yes' "$OUT/devices.txt" && echo " (4x8-bit packed accelerated)")
  step_done devices "$(grep -q '^device 0:' "$OUT/devices.txt" && echo ok || echo 'no Vulkan device') ($(now) s)"
fi

# --- the models: made with synth in the background while the tests run (it is mostly disk
# writing: ~3.8 GB for a 27B preset) ----------------------------------------------------------
MD=${BUNDLE_MODEL_DIR:-/tmp/bitspark-bundle-models}
# (quick: short tests, since lavapipe on a busy CI machine runs a tiny model at ~10 t/s)
# (PAR2: the second count of sessions decoding together, as many as one pass takes on a GPU)
if [ -n "$QUICK" ]; then MODELS=(tiny-synth); PP=32; TG=16; REPS=1; NGEN=8; PAR2=12
else MODELS=(bonsai-27b); [ -n "${BUNDLE_TERNARY:-}" ] && MODELS+=(ternary-bonsai-27b); PP=512; TG=128; REPS=2; NGEN=64; PAR2=32; fi
[ -n "${BUNDLE_MODELS:-}" ] && read -r -a MODELS <<<"${BUNDLE_MODELS/none/}"
model() { # name -> f (the file) and preset (synth's arguments, empty for a bundled model)
  case $1 in
    tiny-synth) f=$W/tiny-synth.gguf; preset=(--preset tiny --type q1_0);;
    bonsai-tiny) f=$W/src/models/bonsai-tiny-q1_0.gguf; preset=();;
    *) f=$MD/$1.gguf; preset=(--preset "$1");;
  esac
}
drafter() { # model name -> df (its drafter's file) and dpreset (synth's arguments, empty: bundled or none)
  case $1 in
    tiny-synth) df=$W/drafter-tiny.gguf; dpreset=(--preset drafter-tiny);;
    bonsai-tiny) df=$W/src/models/bonsai-tiny-dspark.gguf; dpreset=();;
    bonsai-27b|ternary-bonsai-27b) df=$MD/drafter-$1.gguf; dpreset=(--preset "drafter-$1");;
    *) df=; dpreset=();;
  esac
}
synth_result() { echo "$2" >"$W/synth-$1.tmp" && mv "$W/synth-$1.tmp" "$W/synth-$1.done"; }
synth_all() { # each missing model in turn; $W/synth-NAME.done says how it went
  local m t bytes free
  for m in "${MODELS[@]}"; do
    model "$m"
    if [ ${#preset[@]} -eq 0 ] || [ -s "$f" ]; then synth_result "$m" there; continue; fi
    mkdir -p "$(dirname "$f")"
    bytes=$("$BS" synth "${preset[@]}" --dry-run 2>/dev/null | sed -n 's/^# tensors [0-9]* bytes \([0-9]*\).*/\1/p')
    free=$(( $(df -Pk "$(dirname "$f")" | awk 'NR==2{print $4}') * 1024 ))
    if [ -n "$bytes" ] && [ "$free" -lt $(( bytes + 100000000 )) ]; then
      synth_result "$m" "skipped (needs $((bytes / 1000000)) MB, $(dirname "$f") has $((free / 1000000)) MB free)"; continue
    fi
    t=$(date +%s)
    if [ "$(left)" -gt 30 ] && timeout $(( $(left) - 20 )) "$BS" synth "${preset[@]}" -o "$f.part" >"$W/synth-$m.log" 2>&1 &&
       mv "$f.part" "$f"; then synth_result "$m" "ok, $(( $(date +%s) - t )) s"
    else rm -f "$f.part"; synth_result "$m" "FAILED or out of time after $(( $(date +%s) - t )) s: $(tail -2 "$W/synth-$m.log" 2>/dev/null | tr '\n' ' ')"; fi
  done
  # then their drafters (random weights: DSpark round costs, not acceptance), after every model
  for m in "${MODELS[@]}"; do
    drafter "$m"
    if [ -z "$df" ] || [ ${#dpreset[@]} -eq 0 ] || [ -s "$df" ] || [ "$(left)" -le 60 ]; then continue; fi
    timeout $(( $(left) - 40 )) "$BS" synth "${dpreset[@]}" -o "$df.part" >"$W/synth-d-$m.log" 2>&1 && mv "$df.part" "$df" || rm -f "$df.part"
  done
  echo done >"$W/synth-drafters.done"
}
SYNTH_PID=
[ ${#MODELS[@]} -gt 0 ] && { synth_all & SYNTH_PID=$!; }

# --- 2. the Vulkan tests on the device ---------------------------------------------------------
unpack src
# a bundle at the top of a repository leaves the models to it, like the fixtures (gpu_bundle.sh)
if [ -z "$(ls -A "$W/src/models" 2>/dev/null)" ] && [ -d "$B/../models" ]; then
  rmdir "$W/src/models" 2>/dev/null; ln -s "$(cd "$B/.." && pwd)/models" "$W/src/models"
fi
RESERVE=$([ -n "$QUICK" ] || [ "${BUNDLE_MODELS:-}" = none ] && echo 30 || echo 200)   # what the model steps keep for themselves
pass=0; fail=0; skip=0; notrun=0
{
  echo "# Vulkan tests on the device (budget: what is left but ${RESERVE} s for the model steps)"
  py_ok=; /usr/bin/env python3 -c 'import numpy' 2>/dev/null && py_ok=1
  while read -r name kind; do
    [ -n "$name" ] || continue
    if [ -n "${BUNDLE_TESTS:-}" ] && ! echo "$name" | grep -Eq "$BUNDLE_TESTS"; then echo "$name: not run (not in BUNDLE_TESTS)"; notrun=$((notrun+1)); continue; fi
    if [ "$kind" = py ] && [ -z "$py_ok" ]; then echo "$name: not run (no python3 with numpy here)"; notrun=$((notrun+1)); continue; fi
    avail=$(( $(left) - RESERVE ))
    if [ "$avail" -lt 10 ]; then echo "$name: not run (out of time: $(left) s left)"; notrun=$((notrun+1)); continue; fi
    cmd=("$W/bin/$name"); [ "$kind" = py ] && cmd=(python3 "$W/src/tests/$name")
    extra=(); [ "$name" = test_vulkan_dspark_sampling ] && extra=(BS_SAMPLING_VULKAN=1 BITSPARK_VK_ALLOW_CPU=1)
    t=$(date +%s)
    env "${extra[@]}" BITSPARK="$BS" BS_FIXTURES="$FX" BS_SRC="$W/src" BS_TMP="$W/tmp" \
      timeout "$avail" "${cmd[@]}" >"$W/$name.log" 2>&1
    rc=$?; dt=$(( $(date +%s) - t ))
    case $rc in
      0) echo "$name: passed (${dt} s)"; pass=$((pass+1));;
      77) echo "$name: skipped ($(grep -m1 -i skip "$W/$name.log")) (${dt} s)"; skip=$((skip+1));;
      124) echo "$name: FAILED (cut at ${avail} s: out of time)"; fail=$((fail+1)); tail -15 "$W/$name.log" | sed 's/^/    /';;
      *) echo "$name: FAILED (exit $rc, ${dt} s)"; fail=$((fail+1)); tail -25 "$W/$name.log" | sed 's/^/    /';;
    esac
  done <"$B/tests.list"
  sed 's/^/not run: /' "$B/tests_not_run.list"
} >>"$OUT/tests.txt" 2>&1
nr=$(( ${notrun:-0} + $(grep -c . "$B/tests_not_run.list") ))
S[tests]="${pass:-0} passed, ${fail:-0} failed, ${skip:-0} skipped, $nr not run (tests.txt)"
step_done tests "${S[tests]} ($(now) s)"

# --- 3. the models: loaded, benched, profiled -----------------------------------------------------
MODELS_RUN=
for m in "${MODELS[@]}"; do
  model "$m"
  MODELS_RUN="$MODELS_RUN $m"
  while [ ! -e "$W/synth-$m.done" ] && [ -n "$SYNTH_PID" ] && kill -0 "$SYNTH_PID" 2>/dev/null; do sleep 1; done
  r=$(cat "$W/synth-$m.done" 2>/dev/null || echo "FAILED (no result)")
  [ "$r" = there ] || { step_done "synth $m" "$r"; log "synth $m: $r"; }
  [ -s "$f" ] || { step_done "model $m" "missing ($f)"; continue; }
  S[$m.size]="$(basename "$f"), $(awk -v b="$(stat -c %s "$f")" 'BEGIN{printf "%.1f", b / 1e6}') MB"
  # bench: load, pp512, tg128, verify widths, the copy-kernel roofline
  if can_run "bench $m" 20; then
    { echo "## $m ($f)"; } >>"$OUT/bench.txt"
    timeout $(( $(left) - 5 )) "$BS" bench -m "$f" --device "$DEV" -p $PP -n $TG -r $REPS --verify 1,2,3,4,5,8 \
      --parallel 8,$PAR2 --sampled >>"$OUT/bench.txt" 2>&1
    rc=$?; echo >>"$OUT/bench.txt"
    sec=$(awk -v h="## $m (" 'index($0, h) == 1 {on=1; next} /^## /{on=0} on' "$OUT/bench.txt")
    S[$m.load]=$(echo "$sec" | grep -m1 -o 'load: [0-9.]* s' | sed 's/load: //')
    S[$m.pp]=$(echo "$sec" | tfield "pp$PP" " t/s")
    S[$m.tg]=$(echo "$sec" | tfield "tg$TG" " t/s")
    par=$(echo "$sec" | tfield "tg${TG}x8")
    pb=$(echo "$sec" | grep -m1 -o 'device tg x8: per pass (8 tokens) [0-9.]* dispatches, [0-9.]* barriers' | sed 's/.*tokens) //')
    S[$m.par]="${par:-?} t/s of all 8 (bench --parallel 8; ${pb:-?} per pass)"
    par=$(echo "$sec" | tfield "tg${TG}x$PAR2")
    pb=$(echo "$sec" | grep -m1 -o "device tg x$PAR2: per pass ($PAR2 tokens) [0-9.]* dispatches, [0-9.]* barriers, [0-9.]* submissions" | sed 's/.*tokens) //')
    S[$m.par2]="${par:-?} t/s of all $PAR2 (${pb:-?} per pass)"
    smp=$(echo "$sec" | tfield "tg$TG sampled")
    sb=$(echo "$sec" | grep -m1 -o 'device tg sampled: per token .* [0-9.]* bytes read back' | grep -o '[0-9.]* bytes read back')
    S[$m.smp]="${smp:-?} t/s (temperature 0.8, top-k 40; ${sb:-?} per token)"
    r=$(echo "$sec" | grep -m1 -o 'tg reached [0-9]*%' | grep -o '[0-9]*%'); bw=$(echo "$sec" | grep -m1 -o 'membw: [0-9.]* GB/s' | grep -o '[0-9.]* GB/s')
    S[$m.roof]="${r:-?} of the copy roofline (${bw:-?} copy)"
    S[$m.v5]=$(echo "$sec" | grep -m1 -o 'w=5 [0-9.]* ms ([0-9.]*x)' | sed 's/w=5 //')
    bench_done bench
  fi
  # the block sums the other way (docs/kernels.md: a GPU stages them; which is faster is only
  # known here): pp, tg and verify(5) again with each weight row summing its own
  if can_run "asum-row $m" 30; then
    variant asum.txt "BITSPARK_VK_ASUM=row" -p $PP -n $TG -r $REPS --verify 1,5
    pp=$(tfield "pp$PP" <"$W/asum.txt")
    tg=$(tfield "tg$TG" <"$W/asum.txt")
    v5=$(grep -m1 -o 'w=5 [0-9.]* ms ([0-9.]*x)' "$W/asum.txt" | sed 's/w=5 //')
    S[$m.asum]="pp$PP ${pp:-?}, tg$TG ${tg:-?} t/s, verify(5) ${v5:-?}"
    bench_done asum-row
  fi
  # the delta rule's sums in one invocation per state column (a CPU device's way) against the
  # device's 8 lanes with the state in registers (docs/kernels.md): tg and verify(5) again
  if can_run "delta-column $m" 30; then
    variant delta.txt "BITSPARK_VK_DELTA=column" -p 0 -n $TG -r $REPS --verify 1,5
    tg=$(tfield "tg$TG" <"$W/delta.txt")
    v5=$(grep -m1 -o 'w=5 [0-9.]* ms ([0-9.]*x)' "$W/delta.txt" | sed 's/w=5 //')
    S[$m.delta]="tg$TG ${tg:-?} t/s, verify(5) ${v5:-?}"
    bench_done delta-column
  fi
  # the ternary files' bf16 alpha and beta by mv_f32.comp's invocation per row (a CPU device's
  # way) against mv_f32n.comp's workgroup per row; Bonsai 2's folded products' input rotated
  # apart against by the norms (docs/kernels.md): tg again
  for v in "ternary*|f32-rows|BITSPARK_VK_F32N=0|f32n" "*bonsai-2-*|no-normrot|BITSPARK_VK_NO_NORMROT=1|normrot"; do
    IFS='|' read -r pat name envs key <<<"$v"
    # shellcheck disable=SC2254
    case "$m" in $pat) ;; *) continue ;; esac
    if can_run "$name $m" 30; then
      variant "$key.txt" "$envs" -p 0 -n $TG -r $REPS
      S[$m.$key]="tg$TG $(tfield "tg$TG" <"$W/$key.txt") t/s"
      bench_done "$name"
    fi
  done
  # greedy decoding that waits for each step before submitting the next (vk_ahead.c's gain), and
  # sampling from whole rows read back instead of the top 40 found on the device (topk.comp's)
  if can_run "no-ahead $m" 30; then
    variant ahead.txt "BITSPARK_VK_NO_AHEAD=1 BITSPARK_VK_NO_TOPK=1" -p 0 -n $TG -r $REPS --sampled
    tg=$(tfield "tg$TG" <"$W/ahead.txt")
    smp=$(tfield "tg$TG sampled" <"$W/ahead.txt")
    S[$m.ahead]="tg$TG ${tg:-?} t/s, tg$TG sampled ${smp:-?} t/s"
    bench_done no-ahead
  fi
  # a profiled decode: GPU time per kernel, dispatches
  if can_run "profile $m" 15; then
    n=$NGEN
    prompt="The history of the printing press begins in the fifteenth century, when"
    { echo "## $m: BITSPARK_PROFILE=1 bitspark run -n $n --temp 0 --device $DEV"; } >>"$OUT/profile.txt"
    BITSPARK_PROFILE=1 timeout $(( $(left) - 3 )) "$BS" run -m "$f" --device "$DEV" -p "$prompt" -n $n --temp 0 \
      >"$W/profile.out" 2>"$W/profile.err"
    rc=$?
    cat "$W/profile.err" >>"$OUT/profile.txt"; echo >>"$OUT/profile.txt"
    # "  NAME(14 wide) MS ms PCT% N dispatches": the six costliest kernels
    S[$m.kernels]=$(awk '/^vulkan profile/{on=1; next} on && $NF == "dispatches" {
                           name=$1; for (i = 2; i <= NF - 5; i++) name = name " " $i
                           printf "%s\t%s %s ms (%s)\n", $(NF-4), name, $(NF-4), $(NF-2)}' "$W/profile.err" |
                    sort -rn | head -6 | cut -f2 | paste -sd, - | sed 's/,/, /g')
    total=$(awk '/^vulkan profile/{on=1; next} on && / dispatches$/{s += $(NF-1)} END{print s+0}' "$W/profile.err")
    S[$m.disp]="$([ "$total" -gt 0 ] && echo "$(( total / n )) ($total dispatches over $n decode tokens, the prompt's included)" || echo "none recorded")"
    step_done "profile $m" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc, profile.txt)") ($(now) s)"
  fi
  # a DSpark round's parts with the drafter on the device too (bench --spec): verify widths as a
  # greedy round runs them (ids back), the block pass, the blocks of 4 contexts in one pass (the
  # layers and LM head read once for them) and the weight bytes against a block a pass, the greedy drafts of 4 slots, the sampled chain of 4 and the
  # block's slots a submission each
  drafter "$m"
  while [ -n "$df" ] && [ ! -e "$W/synth-drafters.done" ] && [ -n "$SYNTH_PID" ] && kill -0 "$SYNTH_PID" 2>/dev/null &&
        [ "$(left)" -gt 40 ]; do sleep 1; done
  blk=""
  if [ -n "$df" ] && [ -s "$df" ] && can_run "spec $m" 40; then
    { echo "## $m: bench --spec -md $(basename "$df")"; } >>"$OUT/bench.txt"
    timeout $(( $(left) - 5 )) "$BS" bench --spec -m "$f" -md "$df" --device "$DEV" -r 1 >"$W/spec.txt" 2>&1
    rc=$?; cat "$W/spec.txt" >>"$OUT/bench.txt"; echo >>"$OUT/bench.txt"
    v1=$(grep -m1 -o 'verify, width 1 *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    v5=$(grep -m1 -o 'verify, width 5 *[0-9.]* *([0-9.]*x' "$W/spec.txt" | sed 's/verify, width 5 *//; s/ *(/ ms (/')
    blk=$(grep -m1 -o 'block pass ([0-9]* slots) *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    g4=$(grep -m1 -o 'greedy drafts, *4 slots *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    b4=$(grep -m1 -o 'blocks of 4 contexts *[0-9.]* *(one pass; [0-9.]*x one a pass' "$W/spec.txt" | sed 's/blocks of 4 contexts *//; s/ *(one pass; / ms (/')
    bw=$(grep -m1 -o 'their weights read *[0-9.]* MB (one pass; [0-9.]*x' "$W/spec.txt" | sed 's/.*one pass; //')
    rb=$(grep -m1 -o 'rollback (keep 1 of [0-9]* rows) *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    s4=$(grep -m1 -o 'sampled chain, *4 slots *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    sa=$(grep -m1 -o 'sampled, *[0-9]* slots apart *[0-9.]*' "$W/spec.txt" | grep -o '[0-9.]*$')
    S[$m.spec]="verify(1) ${v1:-?} ms, verify(5) ${v5:-?}), block pass ${blk:-?} ms, blocks of 4 contexts ${b4:-?}, weights read ${bw:-?}), greedy drafts of 4 slots ${g4:-?} ms, sampled chain of 4 ${s4:-?} ms (all slots apart ${sa:-?} ms), rollback ${rb:-?} ms"
    bench_done spec
  elif [ -n "$df" ]; then S[$m.spec]="not run (no drafter: $(tr '\n' ' ' <"$W/synth-d-$m.log" 2>/dev/null | tail -c 200))"; fi
  # the drafter's Q4_1 products of a block's 16 rows by mv_q's row groups (BITSPARK_VK_MM=off)
  # against the device's way (mm_ql's tiles on a GPU, each weight read once per 32 rows: vk_mm.c)
  if [ -n "$df" ] && [ -s "$df" ] && [ -n "${blk:-}" ] && can_run "spec-mm-off $m" 40; then
    BITSPARK_VK_MM=off timeout $(( $(left) - 5 )) "$BS" bench --spec -m "$f" -md "$df" --device "$DEV" -r 1 >"$W/spec-off.txt" 2>&1
    { echo "## $m: BITSPARK_VK_MM=off bench --spec"; cat "$W/spec-off.txt"; echo; } >>"$OUT/bench.txt"
    blk2=$(grep -m1 -o 'block pass ([0-9]* slots) *[0-9.]*' "$W/spec-off.txt" | grep -o '[0-9.]*$')
    S[$m.spec]="${S[$m.spec]}; block pass with BITSPARK_VK_MM=off (mv_q) ${blk2:-?} ms"
    bench_done spec-mm-off
  fi
  # (last: the two newest comparisons, so that they never take the budget of the others)
  # prompts' products by mv_q's row groups against the device's choice (int8 cooperative
  # matrices where the device has them: vk_mm.c), pp only
  if can_run "mm-off $m" 30; then
    variant mm.txt "BITSPARK_VK_MM=off" -p $PP -n 0 -r $REPS
    pp=$(tfield "pp$PP" <"$W/mm.txt")
    way=$(awk -v h="## $m (" 'index($0, h) == 1 {on=1; next} /^## /{on=0} on' "$OUT/bench.txt" | grep -m1 -o 'prompts by [^|]*' | sed 's/ *$//')
    S[$m.mm]="pp$PP ${S[$m.pp]:-?} ${way:-by mv_q}; with BITSPARK_VK_MM=off (mv_q) ${pp:-?} t/s"
    bench_done mm-off
  fi
  # where the device has both NV's and KHR's cooperative matrices (NVIDIA), the products again by
  # KHR's (mm_q_coop's module rewritten, the way AMD and Intel GPUs take: vk_spirv.c)
  if grep -q 'cooperative matrix int8 .*(NV), .*(KHR)' "$OUT/devices.txt" 2>/dev/null && can_run "coop-khr $m" 30; then
    variant khr.txt "BITSPARK_VK_COOP=khr" -p $PP -n 0 -r $REPS
    pp=$(tfield "pp$PP" <"$W/khr.txt")
    way=$(grep -m1 -o 'prompts by [^|]*' "$W/khr.txt" | sed 's/ *$//')
    S[$m.mm]="${S[$m.mm]:-}; with BITSPARK_VK_COOP=khr ${pp:-?} t/s (${way:-?})"
    bench_done coop-khr
  fi
  # 8 sessions' passes with the recurrence and attention a dispatch per sequence (a CPU device's
  # way) against one for all of them, one per 4 for attention (docs/kernels.md, several sessions
  # in one pass)
  if can_run "seq-apart $m" 30; then
    variant seq.txt "BITSPARK_VK_SEQ=apart" -p 0 -n $TG -r $REPS --parallel 8
    par=$(tfield "tg${TG}x8" <"$W/seq.txt")
    pb=$(grep -m1 -o 'device tg x8: per pass (8 tokens) [0-9.]* dispatches' "$W/seq.txt" | sed 's/.*tokens) //')
    S[$m.seq]="${par:-?} t/s of all 8 (${pb:-?} per pass)"
    bench_done seq-apart
  fi
done
log "done in $(now) s"
summary
cat "$OUT/summary.md"
exit 0
