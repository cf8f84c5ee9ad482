#!/usr/bin/env bash
# check_gpu_bundle.sh [BUNDLE]: the GPU check bundle (tools/gpu_bundle.sh) works with nothing
# but itself: every library of its programs resolves inside it (ldd, readelf), and its run.sh,
# under `env -i` (PATH=/usr/bin:/bin, no LD_LIBRARY_PATH) with the bundle's own Vulkan loader
# and lavapipe as the device, writes each result file well-formed (BUNDLE_QUICK=1: tiny
# models); once more through the bundle's glibc, ld.so and validation layer; twice with the
# driver in an NVIDIA-like mount (a manifest naming a bare library, then none); and once with a
# budget too small for any step (each step says it was skipped, the files are still there).
# Builds the bundle into build-bundle/gpu-bundle unless given one. Skipped (77) without lavapipe
# or the Vulkan build tools. A step of tools/test.sh (make test), not a ctest: it builds its own
# build directory.
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
lvp=$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -1)
[ -n "$lvp" ] || { echo "skipped: no lavapipe ICD manifest (mesa-vulkan-drivers)"; exit 77; }
for t in glslc spirv-val; do command -v $t >/dev/null || { echo "skipped: no $t to build the Vulkan backend"; exit 77; }; done
B=${1:-}
if [ -z "$B" ]; then
  B=build-bundle/gpu-bundle
  tools/gpu_bundle.sh "$B" >/dev/null || { echo "FAIL building the bundle"; exit 1; }
fi
B=$(cd "$B" && pwd)
T=$(mktemp -d /tmp/check-gpu-bundle.XXXXXX)
trap 'rm -rf "$T"' EXIT

# --- the bundle: size, rpath, every library from inside it ---------------------------------------
size=$(du -sb "$B" | cut -f1)
[ "$size" -lt $((40 * 1048576)) ] && ok "size $((size / 1048576)) MiB < 40 MiB" || bad "size $size bytes >= 40 MiB"
for f in run.sh BUILD_INFO tests.list bin/bitspark bin/vkinfo vk.tar.gz glibc.tar.gz src.tar.gz layer.tar.gz; do
  [ -s "$B/$f" ] || bad "missing $f"
done
list=$(tar -tzf "$B/vk.tar.gz"; tar -tzf "$B/glibc.tar.gz")
for f in vk/libvulkan.so.1 vk/libGLdispatch.so.0 vk/libGLX.so.0 vk/libEGL.so.1 glibc/ld-linux-x86-64.so.2 glibc/libc.so.6; do
  grep -qx "$f" <<<"$list" || bad "$f not in the bundle"
done
readelf -d "$B/bin/bitspark" | grep -q 'RPATH.*\$ORIGIN/\.\./lib' && ok "bitspark has DT_RPATH \$ORIGIN/../lib" || bad "no \$ORIGIN/../lib rpath"
[ -e "$B/lib/libvulkan.so.1" ] && bad "the loader sits in lib/ (the rpath would take it over the image's)"
glibc=" ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libmvec.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 linux-vdso.so.1 "
n=0
# (the programs' ldd lists every library the process loads; their DT_RPATH covers the libraries'
# own dependencies, which ldd of a library alone would look up elsewhere)
# the test programs travel compressed (run.sh unpacks them next to a lib/ that is the bundle's)
mkdir -p "$T/unpacked/tests" && ln -sfn "$B/lib" "$T/unpacked/lib"
for t in "$B"/tests/*.gz; do u=$T/unpacked/tests/$(basename "$t" .gz); gzip -dc "$t" >"$u" && chmod +x "$u"; done
[ "$(ls "$T/unpacked/tests" | wc -l)" -gt 0 ] && ok "$(ls "$T/unpacked/tests" | wc -l) test programs, compressed" || bad "no test programs"
for elf in "$B"/bin/* "$T"/unpacked/tests/*; do
  while read -r name arrow path _; do
    [ -n "$name" ] || continue
    case "$glibc" in *" $name "*) continue;; esac
    [ "$arrow" = "=>" ] || continue
    n=$((n + 1))
    case "$(readlink -f "$path")" in "$B"/lib/*) ;; *) bad "$(basename "$elf"): $name from $path, not from the bundle";; esac
  done < <(env -i PATH=/usr/bin:/bin ldd "$elf" 2>/dev/null | sed 's/^\t//')
done
[ "$n" -gt 0 ] && ok "$n library references of the bundled programs resolve into lib/" || bad "ldd found no libraries"
for need in jansson microhttpd utf8proc; do
  ls "$B"/lib/lib$need* >/dev/null 2>&1 && ok "lib$need bundled" || bad "lib$need not bundled"
done

# --- run.sh with nothing but the bundle (and lavapipe) ---------------------------------------------
quick_run() { # outdir, extra env...
  local o=$1; shift
  env -i PATH=/usr/bin:/bin HOME="$T" VK_DRIVER_FILES="$lvp" BUNDLE_QUICK=1 BUNDLE_LOADER=bundle \
      BUNDLE_MODEL_DIR="$T/models" "$@" bash "$B/run.sh" "$o" >"$o.stdout" 2>&1
}
row() { grep -F "| $1 | " "$2/summary.md" | head -1 | sed 's/^| [^|]* | \(.*\) |$/\1/'; }
check_summary() { # outdir label [models]
  local o=$1 l=$2 v m
  for f in summary.md devices.txt tests.txt log.txt ${3:+bench.txt profile.txt}; do
    [ -s "$o/$f" ] || bad "$l: $f missing or empty"
  done
  [ "$(ls "$o" | wc -l)" -le 8 ] || bad "$l: more than 8 result files"
  grep -q 'Vulkan loader: the bundle' "$o/log.txt" && ok "$l: the bundle's loader" || bad "$l: not the bundle's loader [$(grep loader "$o/log.txt")]"
  v=$(row device "$o"); [[ $v == *llvmpipe* ]] && ok "$l: device $v" || bad "$l: device row [$v]"
  v=$(row heaps "$o"); [[ $v =~ ^0:\ [0-9.]+\ GiB ]] && ok "$l: heaps $v" || bad "$l: heaps row [$v]"
  grep -q '^  type 0: heap 0 ' "$o/devices.txt" && grep -q 'maxMemoryAllocationSize' "$o/devices.txt" && grep -q '^vulkan:0: ' "$o/devices.txt" \
    && ok "$l: devices.txt has types, limits and bitspark devices" || bad "$l: devices.txt incomplete"
  v=$(row 'integer dot product' "$o"); [[ $v == yes* || $v == no* ]] && ok "$l: dot product $v" || bad "$l: dot-product row [$v]"
  for m in ${3:-}; do
    v=$(row "load time $m" "$o"); [[ $v =~ ^[0-9.]+\ s$ ]] || bad "$l: load time $m [$v]"
    v=$(row "pp32 $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s$ ]] || bad "$l: pp32 $m [$v]"
    v=$(row "tg16 $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s$ ]] || bad "$l: tg16 $m [$v]"
    v=$(row "tg16 x8 sessions $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s\ of\ all\ 8\ \(bench\ --parallel\ 8\;\ [0-9.]+\ dispatches,\ [0-9.]+\ barriers\ per\ pass\)$ ]] || bad "$l: tg16 x8 $m [$v]"
    # (12 sessions in quick mode, 32 on a GPU: one pass, one submission)
    v=$(row "tg16 x12 sessions $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s\ of\ all\ 12\ \([0-9.]+\ dispatches,\ [0-9.]+\ barriers,\ 1.00\ submissions\ per\ pass\)$ ]] || bad "$l: tg16 x12 $m [$v]"
    v=$(row "roofline fraction $m" "$o"); [[ $v =~ ^[0-9]+%\ of\ the\ copy\ roofline\ \([0-9.]+\ GB/s ]] || bad "$l: roofline $m [$v]"
    v=$(row "verify(5)/verify(1) $m" "$o"); [[ $v =~ ^[0-9.]+\ ms\ \([0-9.]+x\)$ ]] || bad "$l: verify(5) $m [$v]"
    v=$(row "with BITSPARK_VK_ASUM=row $m" "$o"); [[ $v =~ ^pp32\ [0-9.]+\ ±\ [0-9.]+,\ tg16\ [0-9.]+\ ±\ [0-9.]+\ t/s,\ verify\(5\)\ [0-9.]+\ ms\ \([0-9.]+x\)$ ]] || bad "$l: asum-row $m [$v]"
    v=$(row "with BITSPARK_VK_DELTA=column $m" "$o"); [[ $v =~ ^tg16\ [0-9.]+\ ±\ [0-9.]+\ t/s,\ verify\(5\)\ [0-9.]+\ ms\ \([0-9.]+x\)$ ]] || bad "$l: delta-column $m [$v]"
    v=$(row "prompts' products $m" "$o"); [[ $v =~ ^pp32\ [0-9.]+\ ±\ [0-9.]+\ t/s\ by\ mv_q\;\ with\ BITSPARK_VK_MM=off\ \(mv_q\)\ [0-9.]+\ ±\ [0-9.]+\ t/s$ ]] || bad "$l: mm-off $m [$v]"
    v=$(row "tg16 x8 sessions with BITSPARK_VK_SEQ=apart $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s\ of\ all\ 8\ \([0-9.]+\ dispatches\ per\ pass\)$ ]] || bad "$l: seq-apart $m [$v]"
    v=$(row "with BITSPARK_VK_NO_AHEAD=1 BITSPARK_VK_NO_TOPK=1 $m" "$o"); [[ $v =~ ^tg16\ [0-9.]+\ ±\ [0-9.]+\ t/s,\ tg16\ sampled\ [0-9.]+\ ±\ [0-9.]+\ t/s$ ]] || bad "$l: no-ahead $m [$v]"
    v=$(row "tg16 sampled $m" "$o"); [[ $v =~ ^[0-9.]+\ ±\ [0-9.]+\ t/s\ \(temperature\ 0.8,\ top-k\ 40\;\ [0-9.]+\ bytes\ read\ back\ per\ token\)$ ]] || bad "$l: sampled $m [$v]"
    v=$(row "per-kernel GPU time $m" "$o"); [[ $v =~ ^[a-z_0-9\ ]+\ [0-9.]+\ ms\ \([0-9.]+%\) ]] || bad "$l: per-kernel $m [$v]"
    v=$(row "dispatches per token $m" "$o"); [[ $v =~ ^[0-9]+\  ]] || bad "$l: dispatches $m [$v]"
    v=$(row "DSpark round parts $m (bench --spec, drafter on the device)" "$o")
    [[ $v =~ ^verify\(1\)\ [0-9.]+\ ms,\ verify\(5\)\ [0-9.]+\ ms\ \([0-9.]+x\),\ block\ pass\ [0-9.]+\ ms,\ blocks\ of\ 4\ contexts\ [0-9.]+\ ms\ \([0-9.]+x\ one\ a\ pass,\ weights\ read\ [0-9.]+x\),\ greedy\ drafts\ of\ 4\ slots\ [0-9.]+\ ms,\ sampled\ chain\ of\ 4\ [0-9.]+\ ms\ \(all\ slots\ apart\ [0-9.]+\ ms\),\ rollback\ [0-9.]+\ ms(\;\ block\ pass\ with\ BITSPARK_VK_MM=off\ \(mv_q\)\ [0-9.]+\ ms)?$ ]] \
      || bad "$l: DSpark round parts $m [$v]"
  done
  [ -z "${3:-}" ] || ok "$l: model rows checked ($(row 'pp32 tiny-synth' "$o") pp32, $(row 'tg16 tiny-synth' "$o") tg16 on the synthetic tiny model)"
}

O=$T/out
t=$SECONDS
quick_run "$O" BUNDLE_TESTS='^test_vulkan_attn$' BUNDLE_BUDGET_S=200
echo "  (run.sh: $((SECONDS - t)) s)"
check_summary "$O" quick tiny-synth
v=$(row tests "$O")
[[ $v =~ ^1\ passed,\ 0\ failed ]] && ok "tests: $v" || { bad "tests [$v]"; cat "$O/tests.txt"; }
grep -q '^not run: test_vulkan_session: needs tiny-f32.gguf' "$O/tests.txt" && ok "tests not run are listed" || bad "no not-run list"
grep -q 'not run (not in BUNDLE_TESTS)' "$O/tests.txt" || bad "filtered tests not listed"

# through the bundle's glibc and ld.so (the path an image older than bookworm takes)
O2=$T/out-glibc
quick_run "$O2" BUNDLE_GLIBC=bundle BUNDLE_LAYER=bundle BUNDLE_TESTS='^test_vulkan_attn$' BUNDLE_MODELS=none BUNDLE_BUDGET_S=100
grep -q "the bundle's (bookworm) through its ld.so" "$O2/log.txt" && ok "glibc run: the bundle's ld.so" || bad "glibc run did not take the bundle's ld.so"
check_summary "$O2" glibc
grep -q "validation layer: the bundle's" "$O2/log.txt" && ! grep -q 'unusable here' "$O2/log.txt" && ok "glibc run: the bundle's validation layer" || bad "glibc run: not the bundle's layer"
[[ $(row tests "$O2") =~ ^1\ passed,\ 0\ failed ]] && ok "glibc run: test passed (validation layer on)" || bad "glibc run tests [$(row tests "$O2")]"

# an NVIDIA-like image: the driver in a mount (BUNDLE_NV_ROOT) outside the ld.so cache, its
# manifest naming a bare libGLX_nvidia.so.0 (lavapipe's library under that name), then no
# manifest at all: run.sh finds the library and writes the manifest itself
N=$T/nvidia
mkdir -p "$N/lib64" "$N/share/vulkan/icd.d"
cp "$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$lvp")" "$N/lib64/libGLX_nvidia.so.0"
printf '{ "file_format_version": "1.0.0", "ICD": { "library_path": "libGLX_nvidia.so.0", "api_version": "1.3.0" } }\n' \
  >"$N/share/vulkan/icd.d/nvidia_icd.json"
for mode in manifest none; do
  [ $mode = none ] && rm "$N/share/vulkan/icd.d/nvidia_icd.json"
  env -i PATH=/usr/bin:/bin HOME="$T" BUNDLE_NV_ROOT="$N" BUNDLE_MODELS=none BUNDLE_TESTS='^$' bash "$B/run.sh" "$T/nv-$mode" >/dev/null 2>&1
  grep -q "ICD manifest: .*(driver library $N/lib64/libGLX_nvidia.so.0)" "$T/nv-$mode/log.txt" && [[ $(row device "$T/nv-$mode") == llvmpipe* ]] \
    && ok "driver mount, $mode: the ICD found and the device listed" || bad "driver mount, $mode: [$(grep ICD "$T/nv-$mode/log.txt")]"
done

# a budget too small for anything: each step says so, the files are still written, exit 0
O3=$T/out-cut
quick_run "$O3" BUNDLE_BUDGET_S=1 && ok "cut run exits 0" || bad "cut run exit status"
[ -s "$O3/summary.md" ] && grep -q 'skipped (out of time)' "$O3/summary.md" && grep -q '^\[[0-9]*s\] skipped devices' "$O3/log.txt" \
  && ok "cut run: steps skipped with a line each" || bad "cut run summary [$(cat "$O3/summary.md" "$O3/log.txt" 2>/dev/null | tail -20)]"
[ "$fail" -eq 0 ] || { echo "--- log.txt"; cat "$O/log.txt"; echo "--- summary.md"; cat "$O/summary.md"; }
exit $fail
