#!/usr/bin/env bash
# gpu_bundle.sh: one folder that checks the Vulkan backend on a GPU machine with no network and
# no build tools (docs/gpu.md): the bitspark binary, the Vulkan test programs, every shared
# library they need but glibc (rpath $ORIGIN/../lib), bookworm's glibc as a fallback for older
# images, the Vulkan loader and the glvnd/X11 libraries NVIDIA's driver needs (used there only
# where the image lacks them), the validation layer, the fixtures that fit and run.sh.
#   tools/gpu_bundle.sh [OUTDIR]     (default gpu-bundle/; make gpu-bundle)
# Environment: BUNDLE_BUILD=DIR (default build-bundle), BS_FIXTURES=DIR (default tests/fixtures),
#   BUNDLE_LIMIT_MIB (default 40: the bundle travels in a 64 MiB carry with the working tree).
# The loader, glvnd/X11 and validation-layer packages come from this machine (dpkg -L) where
# installed, else from `apt-get download` (unpacked with dpkg -x).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
build=${BUNDLE_BUILD:-build-bundle}
fx=${BS_FIXTURES:-tests/fixtures}
limit_mib=${BUNDLE_LIMIT_MIB:-40}
log() { echo "gpu_bundle: $*" >&2; }
arch=x86_64-linux-gnu

# The Vulkan tests and the fixtures each needs ("-": none; models/... come from this repository).
# The tests that read tiny-f32.gguf are listed as not run: it was 25 MB when this table was made;
# at 6.4 MB it would fit, but those tests have not been timed against the run's budget yet.
TESTS=(
  "test_vulkan_kernels c -"
  "test_vulkan_spirv c -"
  "test_vulkan_ops c -"
  "test_vulkan_attn c -"
  "test_vulkan_draw c tiny-q1_0.gguf"
  "test_vulkan_dspark c tiny-q1_0.gguf tiny-dspark-f32.gguf models/bonsai-tiny-q1_0.gguf models/bonsai-tiny-dspark.gguf models/bonsai-tiny-dspark"
  "test_vulkan_dspark_sampling c tiny-q1_0.gguf tiny-dspark-f32.gguf models/bonsai-tiny-q1_0.gguf models/bonsai-tiny-dspark.gguf"
  "test_vulkan_session c tiny-f32.gguf tiny-q1_0.gguf tiny-q2_0.gguf"
  "test_vulkan_batch c tiny-f32.gguf tiny-q1_0.gguf"
  "test_vulkan_lora c tiny-f32.gguf tiny-q1_0.gguf"
  "test_vulkan_dspark.py py tiny-dspark-f32.gguf dspark models/bonsai-tiny-dspark.gguf models/bonsai-tiny-dspark"
  "test_vulkan_model.py py tiny-f32.gguf tiny-q1_0.gguf tiny-q2_0.gguf"
  "test_vulkan_memory.py py tiny-q1_0.gguf tiny-q1_0.json"
  "test_vulkan_vision c tiny-f32.gguf vision"
)
# A Vulkan test this table does not know yet: a C one comes along and is run (its fixtures, if
# any, are assumed to be among the bundled ones; tests.txt shows it if not), a Python one is
# listed as not run.
not_run=()
for src in tests/test_vulkan_*.c tests/test_vulkan_*.py; do
  n=$(basename "$src"); [ "${n%.c}" != "$n" ] && n=${n%.c}
  case " ${TESTS[*]%% *} " in *" $n "*) continue;; esac
  if [ "${src%.c}" != "$src" ]; then TESTS+=("$n c -"); log "$n: not in the table; bundled with no fixtures of its own"
  else not_run+=("$n: not in tools/gpu_bundle.sh's table (its support files are unknown)"); fi
done
FIXTURES=(tiny-q1_0.gguf tiny-q1_0.json tiny-q2_0.gguf tiny-dspark-f32.gguf dspark prompt.txt)
MODELS=(bonsai-tiny-q1_0.gguf bonsai-tiny-dspark.gguf bonsai-tiny-dspark)
PY_SUPPORT=(test_dspark_fixtures.py gguf_reader.py fixture_lib.py vk_lib.py)
VK_PKGS=(libvulkan1 libglvnd0 libegl1 libglx0 libgl1 libopengl0 libgles2
         libx11-6 libxext6 libxcb1 libxau6 libxdmcp6 libbsd0 libmd0)
# (libmvec, the vector maths, is left out: nothing here links it, and it is 1 MB)
GLIBC_LIBS=(ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2)
is_glibc() { local b; for b in "${GLIBC_LIBS[@]}" libmvec.so.1 linux-vdso.so.1; do [ "$1" = "$b" ] && return 0; done; return 1; }

# --- build: Release, Vulkan, rpath $ORIGIN/../lib as DT_RPATH (it then covers the libraries'
# own dependencies too, which DT_RUNPATH would not) ---------------------------------------------
targets=(bitspark)
for t in "${TESTS[@]}"; do
  set -- $t
  [ "$2" = c ] && targets+=("${1/test_vulkan_dspark_sampling/test_dspark_sampling}")
done
log "building ${#targets[@]} targets in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBS_VULKAN=ON -DBS_BUNDLE_RPATH=ON >/dev/null
for t in "${targets[@]}"; do tg+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${tg[@]}" >/dev/null || { cmake --build "$build" -j 1 "${tg[@]}" 2>&1 | tail -30; exit 1; }
cc -std=c11 -O2 -Wall -Wextra tools/vkinfo.c -o "$build/vkinfo" -ldl

# --- the programs -------------------------------------------------------------------------------
# (only an earlier bundle or an empty folder is replaced)
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -e "$out/BUILD_INFO" ]; then
  log "$out exists and is not a bundle: not replacing it"; exit 1
fi
rm -rf "$out"
mkdir -p "$out"/{bin,tests,lib,glibc,vk,fixtures,src/models,src/tests}
install -m755 "$build/bitspark" "$build/vkinfo" "$out/bin/"
run_list=()
for t in "${TESTS[@]}"; do
  set -- $t
  name=$1 kind=$2; shift 2
  missing=()
  for need in "$@"; do
    [ "$need" = - ] && continue
    case " ${FIXTURES[*]} ${MODELS[*]/#/models/} " in *" $need "*) ;; *) missing+=("$need");; esac
  done
  if [ ${#missing[@]} -gt 0 ]; then
    not_run+=("$name: needs ${missing[*]} (not among the bundled fixtures)")
    continue
  fi
  run_list+=("$name $kind")
  if [ "$kind" = c ]; then install -m755 "$build/tests/${name/test_vulkan_dspark_sampling/test_dspark_sampling}" "$out/tests/$name"
  else install -m644 "tests/$name" "$out/src/tests/"; fi
done
for f in "${PY_SUPPORT[@]}"; do install -m644 "tests/$f" "$out/src/tests/"; done
strip --strip-unneeded "$out"/bin/* "$out"/tests/*

# --- their shared libraries: everything ldd resolves but glibc ------------------------------------
deps() { ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | sort -u; }
for lib in $(deps "$out"/bin/* "$out"/tests/*); do
  is_glibc "$(basename "$lib")" || cp -L "$lib" "$out/lib/"
done
unresolved=$(ldd "$out"/bin/* "$out"/tests/* "$out"/lib/* 2>/dev/null | grep 'not found' || true)
[ -z "$unresolved" ] || { log "unresolved libraries: $unresolved"; exit 1; }
# bookworm's glibc, used through its own ld.so only where the image's glibc is older
for g in "${GLIBC_LIBS[@]}"; do
  for d in /lib/$arch /usr/lib/$arch /lib64; do [ -e "$d/$g" ] && { cp -L "$d/$g" "$out/glibc/"; break; }; done
done

# --- the Vulkan loader, glvnd and X11 client libraries, the validation layer ---------------------
pkg_root=$(mktemp -d)
trap 'rm -rf "$pkg_root"' EXIT
pkg_files() { # pkg -> its files under $pkg_root/pkg: this system's where installed (no network
  local p=$1 d=$pkg_root/$1 deb        # needed), else the apt cache's or a download's .deb
  mkdir -p "$d"
  if dpkg-query -W -f '${Status}' "$p:amd64" 2>/dev/null | grep -q 'ok installed'; then
    dpkg -L "$p:amd64" | while read -r f; do
      if [ -f "$f" ] || [ -L "$f" ]; then mkdir -p "$d$(dirname "$f")"; cp -a "$f" "$d$f"; fi
    done
    return 0
  fi
  deb=$(ls /var/cache/apt/archives/${p}_*_amd64.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then (cd "$pkg_root" && timeout 120 apt-get download "$p" >/dev/null 2>&1) || true
    deb=$(ls "$pkg_root"/${p}_*_amd64.deb 2>/dev/null | head -1 || true); fi
  if [ -n "$deb" ]; then dpkg -x "$deb" "$d"; return 0; fi
  log "package $p: not installed and not downloadable; left out"; return 1
}
for p in "${VK_PKGS[@]}"; do
  pkg_files "$p" || continue
  find "$pkg_root/$p" -path "*/$arch/*.so.*" \( -type f -o -type l \) -exec cp -a {} "$out/vk/" \;
done
# only the sonames (the loader and the driver open those); the real files behind them
for l in "$out"/vk/*; do [ -L "$l" ] && case $(basename "$l") in *.so.[0-9]|*.so.[0-9][0-9]) cp --remove-destination -L "$l" "$l.tmp" && mv "$l.tmp" "$l";; esac; done
find "$out/vk" -type f ! -regex '.*\.so\.[0-9]+' -delete; find "$out/vk" -type l -delete
layer_note="validation layer: not bundled"
if pkg_files vulkan-validationlayers; then
  ld=$pkg_root/vulkan-validationlayers
  so=$(find "$ld" -name libVkLayer_khronos_validation.so | head -1)
  mf=$(find "$ld" -name VkLayer_khronos_validation.json | head -1)
  if [ -n "$so" ] && [ -n "$mf" ]; then
    mkdir -p "$pkg_root/layer"
    cp -L "$so" "$pkg_root/layer/"
    sed 's|"library_path": *"[^"]*"|"library_path": "./libVkLayer_khronos_validation.so"|' "$mf" >"$pkg_root/layer/VkLayer_khronos_validation.json"
    # its C++ runtime, for images older than bookworm (run.sh adds it only where needed)
    for l in libstdc++.so.6 libgcc_s.so.1; do cp -L "/usr/lib/$arch/$l" "$pkg_root/layer/" 2>/dev/null || cp -L "/lib/$arch/$l" "$pkg_root/layer/"; done
    strip --strip-unneeded "$pkg_root/layer/libVkLayer_khronos_validation.so" 2>/dev/null || true
    tar -C "$pkg_root/layer" -czf "$out/layer.tar.gz" .
    layer_note="validation layer: layer.tar.gz ($(dpkg-query -W -f '${Version}' vulkan-validationlayers 2>/dev/null ||
                   dpkg-deb -f "$(ls "$pkg_root"/vulkan-validationlayers_*.deb 2>/dev/null | head -1)" Version 2>/dev/null))"
  fi
fi

# --- fixtures and the repository's tiny models -------------------------------------------------
# A bundle at the top of the repository (make gpu-bundle: gpu-bundle/) travels with the working
# tree, which holds the fixtures (tests/fixtures) and the models: run.sh reads them there, so the
# pair fits a 64 MiB carry. Anywhere else the bundle takes its own copies.
if [ "$(cd "$(dirname "$out")" && pwd)" = "$PWD" ] && [ "$(cd "$fx" && pwd)" = "$PWD/tests/fixtures" ]; then
  log "fixtures and models: read from ../tests/fixtures and ../models (the bundle sits in the repository)"
else
  for f in "${FIXTURES[@]}"; do cp -r "$fx/$f" "$out/fixtures/"; done
  for f in "${MODELS[@]}"; do cp -r "models/$f" "$out/src/models/"; done
fi
install -m755 tools/gpu_bundle_run.sh "$out/run.sh"

# --- what the bundle needs of the machine, for run.sh -------------------------------------------
max_ver() { objdump -T "$@" 2>/dev/null | grep -o "$1_[0-9.]*" | sed "s/$1_//" | sort -V | tail -1; }
glibc_need=$(objdump -T "$out"/bin/* "$out"/tests/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
glibcxx_need=$(tar -xzOf "$out/layer.tar.gz" ./libVkLayer_khronos_validation.so 2>/dev/null | grep -a -o 'GLIBCXX_3\.4\.[0-9]*' | sort -uV | tail -1 || true)
{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
  echo "glibc_need $glibc_need"
  echo "glibcxx_need ${glibcxx_need:-none}"
  echo "$layer_note"
} >"$out/BUILD_INFO"
printf '%s\n' "${run_list[@]}" >"$out/tests.list"
printf '%s\n' "${not_run[@]}" >"$out/tests_not_run.list"

# what run.sh needs only in some cases (or unpacked anyway) travels compressed: the loader and
# glvnd/X11 libraries, glibc, the repository's files (models, Python tests); and the test
# programs (each links the library and the shaders: half their size compressed), which run.sh
# unpacks into tests/ next to a lib/ that is the bundle's (their rpath $ORIGIN/../lib)
for d in vk glibc src; do tar -C "$out" -czf "$out/$d.tar.gz" "$d" && rm -rf "${out:?}/$d"; done
for t in "$out"/tests/*; do gzip -9n "$t"; done

size=$(du -sb "$out" | cut -f1)
log "$out: $((size / 1048576)).$(( (size % 1048576) * 10 / 1048576 )) MiB ($size bytes; limit $limit_mib MiB)"
(cd "$out" && du -sh -- * >&2)
[ "$size" -le $((limit_mib * 1048576)) ] || { log "over the limit of $limit_mib MiB"; exit 1; }
echo "$out"
