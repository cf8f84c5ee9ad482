# Thin wrapper over CMake: the README's two commands.
#   make demo   build the bitspark executable only (build/bitspark) and run the demo
#   make test   build (release, ASan/UBSan, fuzz) and run every test (with the aarch64 build
#               under qemu-aarch64)
#   make gpu-bundle [BUNDLE=gpu-bundle]   the offline GPU check bundle (docs/gpu.md)
#   make arm64  cross-build the library, CLI and C tests for aarch64 Linux into build-aarch64/
#   make install [PREFIX=/usr/local]   the executable, libbitspark (.so and .a), bitspark.h, bitspark.pc
JOBS ?= $(shell nproc)
BUILD ?= build
PREFIX ?= /usr/local

BUNDLE ?= gpu-bundle

.PHONY: all build demo test fuzz clean deps install arm64 gpu-bundle
all: build

deps:
	@tools/deps.sh build

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# only the executable (not the tests), its compiler output in a log shown on failure
demo: deps
	@echo "building $(BUILD)/bitspark (log: $(BUILD)/demo-build.log)"
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@mkdir -p $(BUILD) && cmake --build $(BUILD) -j $(JOBS) --target bitspark >$(BUILD)/demo-build.log 2>&1 || \
	  { tail -n 40 $(BUILD)/demo-build.log; exit 1; }
	@tools/demo.sh $(BUILD)/bitspark

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

test:
	@tools/deps.sh test
	@tools/test.sh

gpu-bundle: deps
	@tools/gpu_bundle.sh $(BUNDLE)

arm64:
	@tools/deps.sh arm64
	@cmake -S . -B build-aarch64 -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DBS_VULKAN=OFF --no-warn-unused-cli >/dev/null
	@cmake --build build-aarch64 -j $(JOBS)

fuzz:
	@tools/deps.sh test
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-600} tools/fuzz.sh

clean:
	rm -rf build build-asan build-fuzz build-aarch64 build-bundle gpu-bundle
