#!/usr/bin/env bash
# deps.sh [build|test|arm64]: make sure the Debian packages bitspark needs are installed.
# As root it installs what is missing; otherwise it prints the exact apt-get line and fails.
set -euo pipefail
what=${1:-build}
pkgs=(build-essential cmake pkg-config libjansson-dev libmicrohttpd-dev libutf8proc-dev)
# image input for the vision encoder: PNG and JPEG decoders
pkgs+=(libpng-dev libjpeg62-turbo-dev)
# the Vulkan backend: headers (nothing is linked: the loader is opened at run time), the GLSL
# compiler and the SPIR-V validator; without them the build leaves the backend out
pkgs+=(libvulkan-dev glslc spirv-tools)
# arm64 (make arm64, and the aarch64 part of make test): the cross compiler, qemu's user-mode
# emulator, and the libraries for arm64 from Debian's multiarch archive.
arm64_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
            libjansson-dev:arm64 libmicrohttpd-dev:arm64 libutf8proc-dev:arm64
            libpng-dev:arm64 libjpeg62-turbo-dev:arm64)
if [ "$what" = arm64 ]; then pkgs=("${arm64_pkgs[@]}"); fi
if [ "$what" = test ]; then
  pkgs+=("${arm64_pkgs[@]}")
  # python3-numpy: float64 reference checks; clang + libclang-rt: libFuzzer targets.
  pkgs+=(python3 python3-numpy clang libclang-rt-14-dev)
  # Vulkan tests on Mesa's software device (lavapipe), with the Khronos validation layer
  pkgs+=(mesa-vulkan-drivers vulkan-validationlayers)
  # the train/ smoke run: PyTorch, the corpus's regex tokenizer and fortune texts, BLAS
  pkgs+=(python3-torch python3-regex fortunes libopenblas0-pthread)
  # server tests: the openai / playwright-core npm clients (tests/node) and headless chromium
  pkgs+=(curl chromium)
  # the scale-out tests: nginx in front of several replicas, YAML to check deploy/'s manifests
  pkgs+=(nginx python3-yaml)
  # a real JPEG for the image decoder test (cjpeg / djpeg)
  pkgs+=(libjpeg-turbo-progs)
  # Node.js + npm: Debian's nodejs/npm packages, unless a Node.js with npm is already on PATH
  # (a NodeSource nodejs bundles npm and conflicts with Debian's npm package).
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    pkgs+=(nodejs npm)
  fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "bitspark needs these Debian packages; run as root:" >&2
  [[ " ${missing[*]}" == *":arm64"* ]] && echo "  dpkg --add-architecture arm64 && apt-get update" >&2
  echo "  apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]}" == *":arm64"* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
